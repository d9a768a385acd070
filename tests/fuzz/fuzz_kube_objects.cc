// Fuzzes the operator's decoding of what the API server sends: one watch-
// stream line (kube::ParseWatchLine), whose object then goes through the pure
// Reconcile() as the job, as one of its pods or as one of its StatefulSets,
// the three kinds the controller decodes field by field. Invariants: no
// crash, no escaping exception, no sanitizer report, whatever the JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "operator/kube_client.h"
#include "operator/reconcile.h"

namespace {

using nlohmann::json;
namespace op = shadowsync::op;

json ValidJob() {
  return json::parse(R"({
    "apiVersion": "shadowsync.io/v1alpha1", "kind": "ShadowSyncJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "uid-1", "generation": 1},
    "spec": {
      "model": {"criteoTables": {"hashBuckets": 1000}},
      "data": {"format": "synthetic", "synthetic": {"examples": 10000, "evalExamples": 100}},
      "trainer": {"replicas": 2},
      "parameterServer": {"replicas": 2, "storage": {"size": "1Gi"}},
      "syncer": {"replicas": 1}
    }})");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the role of the object, the rest is the line.
  const uint8_t role = data[0] % 3;
  const std::string_view line(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<shadowsync::kube::WatchEvent> event = shadowsync::kube::ParseWatchLine(line);
  if (!event.ok()) {
    if (event.status().message().empty()) std::abort();
    return 0;
  }
  op::Observed observed;
  observed.now = absl::FromUnixSeconds(1'800'000'000);
  observed.job = ValidJob();
  switch (role) {
    case 0:
      observed.job = event->object;
      break;
    case 1:
      observed.pods.push_back(event->object);
      break;
    case 2:
      observed.stateful_sets["j-trainer"] = event->object;
      break;
  }
  op::Actions actions = op::Reconcile(observed);
  // What the controller then sends back must serialise as it does (strict
  // UTF-8; the parser already refused ill-formed input).
  (void)actions.status.dump();
  for (const json& object : actions.apply) (void)object.dump();
  return 0;
}
