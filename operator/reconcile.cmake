# The operator's pure parts: the CRD generated from the job spec, and the
# reconcile functions (desired children and status from spec + observed
# state; operator/reconcile_internal.h lists their files). No I/O; the
# controller (controller.cmake) drives them.
shadowsync_cc_library(NAME reconcile
  SRCS ${CMAKE_CURRENT_LIST_DIR}/crd.cc ${CMAKE_CURRENT_LIST_DIR}/reconcile.cc
       ${CMAKE_CURRENT_LIST_DIR}/reconcile_spec.cc ${CMAKE_CURRENT_LIST_DIR}/reconcile_status.cc
       ${CMAKE_CURRENT_LIST_DIR}/reconcile_children.cc
  DEPS shadowsync::job_spec yaml-cpp nlohmann_json::nlohmann_json
       absl::strings absl::str_format absl::time)
