#include "worker/sync/strategy.h"

#include <map>
#include <string>
#include <utility>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "syncer/client/syncer_client.h"

namespace shadowsync::worker {

struct SyncStrategy::Metrics {
  prometheus::Counter* rounds = nullptr;
  prometheus::Counter* sent = nullptr;
  prometheus::Counter* received = nullptr;
  prometheus::Counter* blocked = nullptr;
  prometheus::Counter* steps = nullptr;
  prometheus::Histogram* round_seconds = nullptr;
  prometheus::Histogram* gap_steps = nullptr;
};

SyncStrategy::SyncStrategy(SyncConfig config, prometheus::Registry* registry)
    : config_(std::move(config)), metrics_(std::make_unique<Metrics>()) {
  if (registry == nullptr) return;
  const std::map<std::string, std::string> labels = {
      {"algorithm", std::string(EnumName(config_.algorithm))}};
  auto counter = [&](const std::string& name, const std::string& help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(*registry).Add(labels);
  };
  metrics_->rounds =
      counter("shadowsync_trainer_sync_rounds_total", "Dense sync rounds completed.");
  metrics_->sent = counter("shadowsync_trainer_sync_sent_bytes_total",
                           "Bytes this trainer sent to the syncers.");
  metrics_->received = counter("shadowsync_trainer_sync_received_bytes_total",
                               "Bytes this trainer received from the syncers.");
  metrics_->blocked = counter("shadowsync_trainer_sync_blocked_seconds_total",
                              "Seconds training threads spent waiting on sync, summed.");
  metrics_->steps = counter("shadowsync_trainer_steps_total", "Hogwild steps, all threads.");
  metrics_->round_seconds = &prometheus::BuildHistogram()
                                 .Name("shadowsync_trainer_sync_round_seconds")
                                 .Help("Latency of one sync round.")
                                 .Register(*registry)
                                 .Add(labels, prometheus::Histogram::BucketBoundaries{
                                                  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  metrics_->gap_steps =
      &prometheus::BuildHistogram()
           .Name("shadowsync_trainer_sync_gap_steps")
           .Help("Local steps between two sync rounds of this trainer (the hidden k).")
           .Register(*registry)
           .Add(labels,
                prometheus::Histogram::BucketBoundaries{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000});
}

SyncStrategy::~SyncStrategy() = default;

absl::Status SyncStrategy::Start(const DenseReplica& replica) {
  replica_ = replica;
  replica_.optimizer.learning_rate *= static_cast<float>(config_.lr_scale);
  return absl::OkStatus();
}

model::OptimizerConfig SyncStrategy::DenseOptimizer() const {
  model::OptimizerConfig optimizer = replica_.optimizer;
  if (replica_.lr_factor != nullptr) {
    optimizer.learning_rate *= replica_.lr_factor->load(std::memory_order_relaxed);
  }
  return optimizer;
}

absl::Status SyncStrategy::ApplyGradient(int thread, std::span<const float> grad) {
  const model::OptimizerConfig optimizer = DenseOptimizer();
  if (replica_.gate != nullptr && replica_.gate->serialised()) {
    model::ApplyUpdateExclusive(optimizer, replica_.params.data(), replica_.state.data(),
                                grad.data(), static_cast<long>(grad.size()));
  } else {
    model::ApplyUpdateRelaxed(optimizer, replica_.params.data(), replica_.state.data(), grad.data(),
                              static_cast<long>(grad.size()));
  }
  return absl::OkStatus();
}

absl::Duration SyncStrategy::AccessReplica(absl::FunctionRef<void()> fn) {
  if (replica_.gate != nullptr) return replica_.gate->Run(fn);
  fn();
  return absl::ZeroDuration();
}

absl::Status SyncStrategy::AfterStep(int thread) {
  steps_.fetch_add(1, std::memory_order_relaxed);
  if (metrics_->steps != nullptr) metrics_->steps->Increment();
  return absl::OkStatus();
}

SyncStrategy::RoundStart SyncStrategy::BeginRound(const syncer::SyncerClient& client) {
  return {Clock::now(), client.bytes_sent(), client.bytes_received()};
}

absl::Duration SyncStrategy::EndRound(const RoundStart& start, const syncer::SyncerClient& client) {
  const absl::Duration latency = Since(start.time);
  RecordRound(latency, client.bytes_sent() - start.bytes_sent,
              client.bytes_received() - start.bytes_received);
  return latency;
}

void SyncStrategy::RecordRound(absl::Duration latency, int64_t bytes_sent, int64_t bytes_received) {
  const int64_t now = steps();
  const int64_t gap = now - last_round_steps_.exchange(now, std::memory_order_relaxed);
  rounds_.fetch_add(1, std::memory_order_relaxed);
  bytes_sent_.fetch_add(bytes_sent, std::memory_order_relaxed);
  bytes_received_.fetch_add(bytes_received, std::memory_order_relaxed);
  round_micros_.fetch_add(absl::ToInt64Microseconds(latency), std::memory_order_relaxed);
  gap_steps_.fetch_add(gap, std::memory_order_relaxed);
  if (metrics_->rounds == nullptr) return;
  metrics_->rounds->Increment();
  metrics_->sent->Increment(static_cast<double>(bytes_sent));
  metrics_->received->Increment(static_cast<double>(bytes_received));
  metrics_->round_seconds->Observe(absl::ToDoubleSeconds(latency));
  metrics_->gap_steps->Observe(static_cast<double>(gap));
}

void SyncStrategy::RecordBlocked(absl::Duration blocked) {
  blocked_micros_.fetch_add(absl::ToInt64Microseconds(blocked), std::memory_order_relaxed);
  if (metrics_->blocked != nullptr) metrics_->blocked->Increment(absl::ToDoubleSeconds(blocked));
}

SyncStats SyncStrategy::stats() const {
  SyncStats s;
  s.rounds = rounds_.load(std::memory_order_relaxed);
  s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  s.round_seconds = round_micros_.load(std::memory_order_relaxed) / 1e6;
  s.blocked_seconds = blocked_micros_.load(std::memory_order_relaxed) / 1e6;
  s.gap_steps = gap_steps_.load(std::memory_order_relaxed);
  return s;
}

prometheus::Histogram* SyncStrategy::AddHistogram(
    prometheus::Registry* registry, const std::string& name, const std::string& help,
    prometheus::Histogram::BucketBoundaries buckets) const {
  if (registry == nullptr) return nullptr;
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry).Add(
      {{"algorithm", std::string(EnumName(config_.algorithm))}}, std::move(buckets));
}

}  // namespace shadowsync::worker
