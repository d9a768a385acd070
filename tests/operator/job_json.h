// The ShadowSyncJob the operator's tests create in the fake API server.
#ifndef SHADOWSYNC_TESTS_OPERATOR_JOB_JSON_H_
#define SHADOWSYNC_TESTS_OPERATOR_JOB_JSON_H_

#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"

namespace shadowsync::testing {

// Job `name` in namespace default: the small DLRM the end-to-end tests share
// on `examples` synthetic examples, with `trainers` trainers, `ps`
// parameter servers over 1024 slots, one syncer, shadow-EASGD, checkpoints
// every second and backoffLimit 3.
inline nlohmann::json JobJson(const std::string& name, int64_t examples, int trainers, int ps) {
  return {{"apiVersion", "shadowsync.io/v1alpha1"},
          {"kind", "ShadowSyncJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"model",
             {{"bottomMlp", {32}}, {"topMlp", {32}}, {"criteoTables", {{"hashBuckets", 5000}}}}},
            {"data",
             {{"format", "synthetic"},
              {"synthetic", {{"examples", examples}, {"evalExamples", 1000}, {"seed", 4}}}}},
            {"trainer",
             {{"replicas", trainers}, {"threads", 1}, {"batchSize", 64}, {"learningRate", 0.02}}},
            {"parameterServer", {{"replicas", ps}, {"slots", 1024}, {"cacheBytes", "16Mi"}}},
            {"syncer", {{"replicas", 1}}},
            {"sync", {{"algorithm", "shadow-easgd"}}},
            {"checkpoint", {{"intervalSeconds", 1}}},
            {"runPolicy", {{"backoffLimit", 3}}}}}};
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_OPERATOR_JOB_JSON_H_
