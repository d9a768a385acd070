# The controller: informers + work queue + leader election driving
# Reconcile() and live resharding (operator/controller.h).
shadowsync_cc_library(NAME controller
  SRCS ${CMAKE_CURRENT_LIST_DIR}/controller.cc ${CMAKE_CURRENT_LIST_DIR}/controller_observe.cc
       ${CMAKE_CURRENT_LIST_DIR}/credentials.cc
  DEPS shadowsync::kube shadowsync::reconcile OpenSSL::Crypto shadowsync::reshard shadowsync::shard_map
       prometheus-cpp::core cpprestsdk::cpprest absl::strings absl::str_format absl::time
       absl::hash)
