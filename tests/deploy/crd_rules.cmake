# The CRD's schema and CEL rules as kube-apiserver runs them
# (tests/util/crd_validate.mjs, @bufbuild/cel from .tools/node) against
# `shadowsync validate`: tests/deploy/crd_rules_test.mjs, one case per test.
foreach(case compile invalid valid all-at-once transitions)
  string(REPLACE "-" "_" test_case "${case}")
  add_test(NAME crd_rules_${test_case}
           COMMAND ${SHADOWSYNC_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/crd_rules_test.mjs ${case}
                   --source ${PROJECT_SOURCE_DIR} --bin ${CMAKE_BINARY_DIR}/bin)
  set_tests_properties(crd_rules_${test_case} PROPERTIES LABELS unit TIMEOUT 120)
endforeach()
