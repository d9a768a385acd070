# Tests of the CRD and the reconcile functions (operator/reconcile.cmake).
shadowsync_cc_test(NAME crd_test SRCS ${CMAKE_CURRENT_LIST_DIR}/crd_test.cc
  DEPS shadowsync::reconcile shadowsync::job_spec yaml-cpp)
shadowsync_cc_test(NAME reconcile_test SRCS ${CMAKE_CURRENT_LIST_DIR}/reconcile_test.cc
  DEPS shadowsync::reconcile shadowsync::job_spec)
