# The operator end to end: `shadowsync operator` processes against the fake
# API server, with a fake kubelet running every pod as a real process.
if(TARGET shadowsync::fake_kube)
  # The controller in-process, as the operator's ServiceAccount under
  # deploy/rbac.yaml, with the test writing the pods.
  shadowsync_cc_test(NAME controller_test LABEL integration
    SRCS ${CMAKE_CURRENT_LIST_DIR}/controller_test.cc
    DEPS shadowsync::controller shadowsync::fake_kube prometheus-cpp::core)
  shadowsync_cc_test(NAME operator_e2e_test
    SRCS ${CMAKE_CURRENT_LIST_DIR}/operator_e2e_test.cc
    DEPS shadowsync::base shadowsync::fake_kube shadowsync::fake_kubelet shadowsync::os shadowsync::reconcile shadowsync::reshard
         shadowsync::shard_map
    LABEL integration TIMEOUT 600)
  add_dependencies(operator_e2e_test shadowsync)
endif()
