# The Helm chart helm/shadowsync and the schema validation of every manifest
# (issue 8), all driven by tests/deploy/helm_test.mjs (one case per test) with
# helm and kubectl from .tools/bin (scripts/install-kube-tools.sh) and the node
# modules from .tools/node (scripts/install-node-tools.sh):
#  - helm_lint: `helm lint --strict` with the defaults and each ci/*-values.yaml.
#  - helm_render: `helm template` (defaults, all-on) validates against the API
#    schemas (tests/deploy/validate_manifests.mjs); optional objects appear
#    exactly when enabled; hardened containers, probes, resources, selectors.
#  - helm_notes: NOTES.txt tells the user what to run next.
#  - helm_kubectl: kubectl 1.31 applies crds/ and the rendered chart to the
#    fake API server (server dry run, apply, re-apply unchanged, kubectl get ssj).
#  - helm_bad_values: wrong values fail with values.schema.json's message.
#  - helm_crds_in_sync: crds/ is a copy of deploy/crd.yaml.
#  - helm_operator_flags: every flag the chart passes exists in `shadowsync operator`.
#  - deploy_manifests_valid: every object under deploy/ validates.
# test name : helm_test.mjs case. The cases that start the fake API server are
# integration tests.
foreach(pair helm_lint:lint helm_render:render helm_notes:notes helm_kubectl:kubectl
             helm_bad_values:bad-values helm_crds_in_sync:crds helm_operator_flags:flags
             deploy_manifests_valid:deploy)
  string(REPLACE ":" ";" pair "${pair}")
  list(GET pair 0 test_name)
  list(GET pair 1 case)
  add_test(NAME ${test_name}
           COMMAND ${SHADOWSYNC_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/helm_test.mjs ${case} --source
                   ${PROJECT_SOURCE_DIR} --bin ${CMAKE_BINARY_DIR}/bin)
  if(case STREQUAL "kubectl" OR case STREQUAL "notes")
    set(label integration)
  else()
    set(label unit)
  endif()
  set_tests_properties(${test_name} PROPERTIES LABELS ${label} TIMEOUT 120)
endforeach()
