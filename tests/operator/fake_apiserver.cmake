# The in-process fake Kubernetes API server (tests/util/fake_kube_apiserver.h),
# its kubelet, their standalone binary, and the tests that keep it honest: its own suite over
# real HTTP, and real kubectl 1.31 (scripts/install-kube-tools.sh) against it.
# Custom resources are validated by tests/util/crd_validate.mjs under Node.
find_program(SHADOWSYNC_FAKE_KUBE_NODE_PROGRAM node)
if(NOT SHADOWSYNC_FAKE_KUBE_NODE_PROGRAM)
  set(SHADOWSYNC_FAKE_KUBE_NODE_PROGRAM node)  # Requests then fail, naming the missing program.
endif()
shadowsync_cc_library(NAME fake_kube
  SRCS ${PROJECT_SOURCE_DIR}/tests/util/fake_kube_apiserver.cc
       ${PROJECT_SOURCE_DIR}/tests/util/json_line_process.cc
  DEPS absl::status absl::statusor absl::strings absl::synchronization absl::time
       nlohmann_json::nlohmann_json Threads::Threads yaml-cpp shadowsync::os)
target_compile_definitions(shadowsync_fake_kube PRIVATE
  SHADOWSYNC_FAKE_KUBE_NODE="${SHADOWSYNC_FAKE_KUBE_NODE_PROGRAM}"
  SHADOWSYNC_FAKE_KUBE_CRD_VALIDATE="${PROJECT_SOURCE_DIR}/tests/util/crd_validate.mjs")

# The kubelet that runs the fake API server's pods, as processes or containers.
shadowsync_cc_library(NAME fake_kubelet
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/fake_kubelet.cc
  DEPS shadowsync::fake_kube shadowsync::base shadowsync::os)

shadowsync_cc_binary(NAME fake_kube_apiserver
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/fake_kube_apiserver_main.cc
  DEPS shadowsync::fake_kube shadowsync::fake_kubelet CLI11::CLI11)

shadowsync_cc_test(NAME fake_kube_apiserver_test
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/fake_kube_apiserver_test.cc
  DEPS shadowsync::fake_kube cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto)

shadowsync_cc_test(NAME kubectl_test LABEL integration
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/kubectl_test.cc
  DEPS shadowsync::fake_kube)

shadowsync_cc_test(NAME json_line_process_test
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/json_line_process_test.cc
  DEPS shadowsync::fake_kube)
