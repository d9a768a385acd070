#include "serving/inference_metrics.h"

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace shadowsync::serving {

InferenceMetrics::InferenceMetrics(prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("shadowsync_serve_requests_total")
                    .Help("Inference requests answered, by protocol and status code.")
                    .Register(registry)),
      examples_(prometheus::BuildCounter()
                    .Name("shadowsync_serve_examples_total")
                    .Help("Examples scored.")
                    .Register(registry)
                    .Add({})),
      latency_(prometheus::BuildHistogram()
                   .Name("shadowsync_serve_request_duration_seconds")
                   .Help("Inference request latency, from the parsed request to the answer.")
                   .Register(registry)
                   .Add({}, prometheus::Histogram::BucketBoundaries{
                                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                0.1, 0.25, 0.5, 1.0, 2.5})) {
  for (const char* code : {"200", "400", "401", "404", "405", "500"}) {
    known_["http"][code] = &requests_.Add({{"protocol", "http"}, {"code", code}});
  }
  for (const char* code : {"OK", "INVALID_ARGUMENT", "UNAUTHENTICATED", "NOT_FOUND", "INTERNAL"}) {
    known_["grpc"][code] = &requests_.Add({{"protocol", "grpc"}, {"code", code}});
  }
}

void InferenceMetrics::Answered(const std::string& protocol, const std::string& code) {
  if (const auto p = known_.find(protocol); p != known_.end()) {
    if (const auto c = p->second.find(code); c != p->second.end()) {
      c->second->Increment();
      return;
    }
  }
  requests_.Add({{"protocol", protocol}, {"code", code}}).Increment();
}

void InferenceMetrics::Scored(int64_t examples, double seconds) {
  examples_.Increment(static_cast<double>(examples));
  latency_.Observe(seconds);
}

}  // namespace shadowsync::serving
