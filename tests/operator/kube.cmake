# Tests of the operator's Kubernetes client layer (operator/kube.cmake).
# Pure logic: no server.
shadowsync_cc_test(NAME kube_config_test
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/kube_config_test.cc DEPS shadowsync::kube)
shadowsync_cc_test(NAME kube_client_test
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/kube_client_test.cc DEPS shadowsync::kube)
shadowsync_cc_test(NAME work_queue_test
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/work_queue_test.cc DEPS shadowsync::kube)

# Over real HTTP against the in-process fake API server
# (tests/operator/fake_apiserver.cmake, included before this file).
if(TARGET shadowsync::fake_kube)
  shadowsync_cc_test(NAME kube_client_integration_test LABEL integration
    SRCS ${CMAKE_CURRENT_SOURCE_DIR}/kube_client_integration_test.cc
    DEPS shadowsync::kube shadowsync::fake_kube)
  shadowsync_cc_test(NAME informer_test LABEL integration
    SRCS ${CMAKE_CURRENT_SOURCE_DIR}/informer_test.cc DEPS shadowsync::kube shadowsync::fake_kube)
  shadowsync_cc_test(NAME leader_election_test LABEL integration
    SRCS ${CMAKE_CURRENT_SOURCE_DIR}/leader_election_test.cc
    DEPS shadowsync::kube shadowsync::fake_kube)
endif()
