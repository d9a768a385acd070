# Monitoring (issue 8): the dashboards, alert rules and monitoring manifests.
#  - monitoring_generated_files: deploy/monitoring's generated manifests match
#    scripts/gen-monitoring.sh (rerun it after editing a dashboard or rule).
#  - monitoring_alert_rules: `promtool test rules` on the alerts.
#  - monitoring_prometheus: a real Prometheus (Debian's package,
#    scripts/install-deps.sh) scrapes a local job and the operator; every
#    dashboard and rule expression is evaluated (tests/deploy/monitoring_test.mjs).
add_test(NAME monitoring_generated_files
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/gen-monitoring.sh --check)
set_tests_properties(monitoring_generated_files PROPERTIES LABELS unit TIMEOUT 30)

# When each alert fires and what it says (tests/deploy/alerts_test.yaml),
# with Debian's promtool (the prometheus package, scripts/install-deps.sh).
add_test(NAME monitoring_alert_rules
         COMMAND promtool test rules ${CMAKE_CURRENT_SOURCE_DIR}/alerts_test.yaml)
set_tests_properties(monitoring_alert_rules PROPERTIES LABELS unit TIMEOUT 60)

add_test(NAME monitoring_prometheus
         COMMAND ${SHADOWSYNC_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/monitoring_test.mjs --bin-dir
                 ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(monitoring_prometheus PROPERTIES LABELS integration TIMEOUT 150)
