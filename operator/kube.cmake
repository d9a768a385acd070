# The operator's Kubernetes client layer (docs/operator.md): kubeconfig and
# in-cluster config, a generic REST + watch client over cpprestsdk, informers,
# the rate-limited work queue and Lease leader election.
shadowsync_cc_library(NAME kube
  SRCS ${CMAKE_CURRENT_SOURCE_DIR}/kube_config.cc
       ${CMAKE_CURRENT_SOURCE_DIR}/kube_client.cc
       ${CMAKE_CURRENT_SOURCE_DIR}/informer.cc
       ${CMAKE_CURRENT_SOURCE_DIR}/work_queue.cc
       ${CMAKE_CURRENT_SOURCE_DIR}/leader_election.cc
  DEPS shadowsync::base cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto nlohmann_json::nlohmann_json
       yaml-cpp
       absl::status absl::statusor absl::strings absl::str_format absl::time
       absl::random_random absl::flat_hash_map absl::flat_hash_set Threads::Threads)
