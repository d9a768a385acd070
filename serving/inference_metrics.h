// The request metrics both inference endpoints (HTTP and gRPC) keep, in one
// set of families: requests by protocol and status code, examples scored,
// and the latency from the parsed request to the answer. Thread-safe.
#ifndef SHADOWSYNC_SERVING_INFERENCE_METRICS_H_
#define SHADOWSYNC_SERVING_INFERENCE_METRICS_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace prometheus {
class Counter;
template <typename T>
class Family;
class Histogram;
class Registry;
}  // namespace prometheus

namespace shadowsync::serving {

class InferenceMetrics {
 public:
  // Registers the families in `registry`, or finds them there.
  explicit InferenceMetrics(prometheus::Registry& registry);

  // A request answered with `code` ("200", "INVALID_ARGUMENT", ...).
  void Answered(const std::string& protocol, const std::string& code);
  // A request's examples scored, `seconds` after it was parsed.
  void Scored(int64_t examples, double seconds);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  // The counters of the codes the endpoints answer with, by protocol then
  // code, made once: Family::Add takes the family's lock and builds a label
  // map, per request and from every HTTP thread at once. Only read after
  // construction.
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, prometheus::Counter*>> known_;
  prometheus::Counter& examples_;
  prometheus::Histogram& latency_;
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_INFERENCE_METRICS_H_
