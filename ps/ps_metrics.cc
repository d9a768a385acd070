// PsMetrics and RpcName (ps/ps_service.h): the table of every
// shadowsync_ps_* metric, the service-side handles and the store collectable.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "prometheus/metric_family.h"
#include "ps/ps_service.h"

namespace shadowsync::ps {
namespace {

// --- Metrics -----------------------------------------------------------------
//
// Every metric of the parameter server, declared once. To add one:
//   1. add a row here (name with the shadowsync_ps_ prefix, base units,
//      counters ending in _total);
//   2. store-sourced metrics: give the row a `from_stats` reader, nothing
//      else to do; service-side metrics: cache its handle in PsMetrics.
//   3. add the panel to deploy/ dashboards.
struct MetricDef {
  const char* name;
  const char* help;
  prometheus::MetricType type;
  // Reads the value from the store's stats; null for service-side metrics.
  double (*from_stats)(const RowStoreStats&);
};

constexpr int kLatencyMetric = 0;
constexpr int kErrorsMetric = 1;
constexpr int kBytesInMetric = 2;
constexpr int kBytesOutMetric = 3;
constexpr int kImportStagedMetric = 4;

constexpr MetricDef kMetrics[] = {
    // Service-side; indices above.
    {"shadowsync_ps_request_duration_seconds", "Latency of each RPC, by rpc.",
     prometheus::MetricType::Histogram, nullptr},
    {"shadowsync_ps_errors_total", "RPCs that failed, by rpc and gRPC status code.",
     prometheus::MetricType::Counter, nullptr},
    {"shadowsync_ps_bytes_in_total", "Request payload bytes received.",
     prometheus::MetricType::Counter, nullptr},
    {"shadowsync_ps_bytes_out_total", "Response payload bytes sent.",
     prometheus::MetricType::Counter, nullptr},
    {"shadowsync_ps_import_staged_bytes",
     "Row bytes the open ImportSlots streams hold staged (bounded by max_import_bytes).",
     prometheus::MetricType::Gauge, nullptr},
    // From RowStore::stats() at scrape time.
    {"shadowsync_ps_rows_stored", "Embedding rows stored.", prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) { return static_cast<double>(s.rows_stored); }},
    {"shadowsync_ps_cached_rows", "Rows held in the RAM cache.", prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) { return static_cast<double>(s.cached_rows); }},
    {"shadowsync_ps_cache_hits_total", "Row reads served by the RAM cache.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.cache_hits); }},
    {"shadowsync_ps_cache_misses_total", "Row reads that went to RocksDB.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.cache_misses); }},
    {"shadowsync_ps_lookup_rows_total", "Rows looked up.", prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.lookup_rows); }},
    {"shadowsync_ps_push_rows_total", "Rows updated by pushed gradients.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.push_rows); }},
    {"shadowsync_ps_admissions_total", "Rows admitted to storage.", prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.admissions); }},
    {"shadowsync_ps_admission_rejects_total", "Pushes to rows not (yet) admitted.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.admission_rejects); }},
    {"shadowsync_ps_evictions_total", "Rows evicted by TTL or the row cap.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.evictions); }},
    {"shadowsync_ps_slots_owned", "Hash slots this server owns.", prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) { return static_cast<double>(s.slots_owned); }},
    {"shadowsync_ps_shard_map_epoch", "Epoch of the shard map this server follows.",
     prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) { return static_cast<double>(s.epoch); }},
};

// Keep in step with enum class Rpc.
constexpr const char* kRpcNames[kNumRpcs] = {
    "Lookup",      "PushGradients", "GetShardMap", "SetShardMap", "ExportSlots",
    "ImportSlots", "DropSlots",     "Checkpoint",  "Stats",
};

// 50us .. 10s, roughly 2.5x apart.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0};
  return *buckets;
}

class StoreCollectableImpl final : public prometheus::Collectable {
 public:
  explicit StoreCollectableImpl(const RowStore* store) : store_(store) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const RowStoreStats stats = store_->stats();
    std::vector<prometheus::MetricFamily> families;
    for (const MetricDef& def : kMetrics) {
      if (def.from_stats == nullptr) continue;
      prometheus::MetricFamily family;
      family.name = def.name;
      family.help = def.help;
      family.type = def.type;
      prometheus::ClientMetric metric;
      const double value = def.from_stats(stats);
      if (def.type == prometheus::MetricType::Counter) {
        metric.counter.value = value;
      } else {
        metric.gauge.value = value;
      }
      family.metric.push_back(std::move(metric));
      families.push_back(std::move(family));
    }
    return families;
  }

 private:
  const RowStore* const store_;
};

}  // namespace

const char* RpcName(Rpc rpc) { return kRpcNames[static_cast<int>(rpc)]; }

// --- PsMetrics ----------------------------------------------------------------

PsMetrics::PsMetrics(prometheus::Registry& registry) {
  latency_family_ = &prometheus::BuildHistogram()
                         .Name(kMetrics[kLatencyMetric].name)
                         .Help(kMetrics[kLatencyMetric].help)
                         .Register(registry);
  errors_family_ = &prometheus::BuildCounter()
                        .Name(kMetrics[kErrorsMetric].name)
                        .Help(kMetrics[kErrorsMetric].help)
                        .Register(registry);
  bytes_in_ = &prometheus::BuildCounter()
                   .Name(kMetrics[kBytesInMetric].name)
                   .Help(kMetrics[kBytesInMetric].help)
                   .Register(registry)
                   .Add({});
  bytes_out_ = &prometheus::BuildCounter()
                    .Name(kMetrics[kBytesOutMetric].name)
                    .Help(kMetrics[kBytesOutMetric].help)
                    .Register(registry)
                    .Add({});
  import_staged_ = &prometheus::BuildGauge()
                        .Name(kMetrics[kImportStagedMetric].name)
                        .Help(kMetrics[kImportStagedMetric].help)
                        .Register(registry)
                        .Add({});
  for (int r = 0; r < kNumRpcs; ++r) {
    latency_[r] = &latency_family_->Add({{"rpc", kRpcNames[r]}}, LatencyBuckets());
    for (auto& counter : errors_[r]) counter.store(nullptr, std::memory_order_relaxed);
  }
}

prometheus::Counter& PsMetrics::ErrorCounter(Rpc rpc, absl::StatusCode code) {
  const int c = static_cast<int>(code);
  const int index = c >= 0 && c < kNumCodes ? c : static_cast<int>(absl::StatusCode::kUnknown);
  std::atomic<prometheus::Counter*>& slot = errors_[static_cast<int>(rpc)][index];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add returns the existing counter for the same labels, so racing
    // first errors agree on one handle.
    counter = &errors_family_->Add(
        {{"rpc", RpcName(rpc)},
         {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(index))}});
    slot.store(counter, std::memory_order_release);
  }
  return *counter;
}

void PsMetrics::RecordRpc(Rpc rpc, std::chrono::steady_clock::duration latency,
                          absl::StatusCode code, int64_t bytes_in, int64_t bytes_out) {
  latency_[static_cast<int>(rpc)]->Observe(std::chrono::duration<double>(latency).count());
  if (code != absl::StatusCode::kOk) ErrorCounter(rpc, code).Increment();
  if (bytes_in > 0) AddBytesIn(bytes_in);
  if (bytes_out > 0) AddBytesOut(bytes_out);
}

std::shared_ptr<prometheus::Collectable> PsMetrics::StoreCollectable(const RowStore* store) {
  return std::make_shared<StoreCollectableImpl>(store);
}

std::vector<std::string> PsMetrics::MetricNames() {
  std::vector<std::string> names;
  for (const MetricDef& def : kMetrics) names.emplace_back(def.name);
  return names;
}

}  // namespace shadowsync::ps
