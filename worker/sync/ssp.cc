#include "worker/sync/ssp.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/sync_math.h"

namespace shadowsync::worker {
namespace {

// Raises `a` to at least `v`; returns the previous value.
int64_t RaiseTo(std::atomic<int64_t>& a, int64_t v) {
  int64_t prev = a.load(std::memory_order_relaxed);
  while (prev < v && !a.compare_exchange_weak(prev, v, std::memory_order_relaxed)) {
  }
  return prev;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SspStrategy>> SspStrategy::Create(const SyncConfig& config,
                                                                 syncer::SyncerClient* client,
                                                                 prometheus::Registry* registry) {
  if (config.ssp.staleness < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.ssp.staleness: must be >= 0, got ", config.ssp.staleness));
  }
  return std::unique_ptr<SspStrategy>(new SspStrategy(config, client, registry));
}

SspStrategy::SspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                         prometheus::Registry* registry)
    : SyncStrategy(config, registry), client_(client), staleness_(config.ssp.staleness) {
  wait_histogram_ = AddHistogram(
      registry, "shadowsync_trainer_ssp_wait_seconds",
      "Time a training thread waited for the slowest trainer (SSP clock), per wait.",
      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
}

SspStrategy::~SspStrategy() {
  MutexLock l(&mu_);
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; });
}

absl::Status SspStrategy::Start(const DenseReplica& replica) {
  SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
  threads_ = std::max(1, replica.threads);
  const size_t n = replica.params.size();
  delta_.assign(threads_, std::vector<float>(n));
  global_.assign(threads_, std::vector<float>(n));
  std::vector<float> init(replica.params.begin(), replica.params.end());
  SS_RETURN_IF_ERROR(client_->InitCentre(init, global_[0]));
  StoreRelaxed(replica.params, global_[0]);
  // Joins the clocks before the first step, so that trainers starting
  // together wait for each other from step one; a late one starts level
  // with the slowest.
  SS_ASSIGN_OR_RETURN(const syncer::ClockResult r, client_->Clock(0, staleness_));
  base_.store(r.member_clock, std::memory_order_relaxed);
  known_min_.store(r.min_clock, std::memory_order_relaxed);
  reported_.store(r.member_clock, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status SspStrategy::ApplyGradient(int thread, std::span<const float> grad) {
  // asp's step: the update goes to the global weights, which come back.
  std::vector<float>& delta = delta_[thread];
  std::vector<float>& global = global_[thread];
  const Clock::time_point start = Clock::now();
  const int64_t bytes = static_cast<int64_t>(grad.size() * sizeof(float));
  OptimizerDelta(DenseOptimizer(), replica_.state, grad, delta);
  SS_RETURN_IF_ERROR(client_->AddAndPull(delta, global));
  StoreRelaxed(replica_.params, global);
  const absl::Duration took = Since(start);
  RecordBlocked(took);
  RecordRound(took, bytes, bytes);
  return absl::OkStatus();
}

int64_t SspStrategy::clock() const {
  return base_.load(std::memory_order_relaxed) + steps() / threads_;
}

void SspStrategy::Learn(const syncer::ClockResult& r, int64_t steps_part) {
  RaiseTo(known_min_, r.min_clock);
  // Dropped (silent too long) and back: continue from where the syncer put us.
  if (r.joined) RaiseTo(base_, r.member_clock - steps_part);
}

void SspStrategy::ReportAsync(int64_t clock, int64_t steps_part) {
  {
    MutexLock l(&mu_);
    ++in_flight_;
  }
  client_->ClockAsync(clock, staleness_, absl::ZeroDuration(),
                      [this, steps_part](absl::StatusOr<syncer::ClockResult> r) {
                        if (r.ok()) Learn(*r, steps_part);
                        MutexLock l(&mu_);
                        if (!r.ok() && report_error_.ok()) report_error_ = r.status();
                        --in_flight_;
                      });
}

absl::Status SspStrategy::AfterStep(int thread) {
  SS_RETURN_IF_ERROR(SyncStrategy::AfterStep(thread));
  {
    MutexLock l(&mu_);
    if (!report_error_.ok()) return report_error_;
  }
  const int64_t steps_part = steps() / threads_;
  const int64_t clock = base_.load(std::memory_order_relaxed) + steps_part;
  // Within the bound of a minimum that never decreases: the report cannot
  // wait, so it goes out without blocking (once per clock advance).
  if (clock - staleness_ <= known_min_.load(std::memory_order_relaxed)) {
    if (RaiseTo(reported_, clock) < clock) ReportAsync(clock, steps_part);
    return absl::OkStatus();
  }
  const Clock::time_point start = Clock::now();
  RaiseTo(reported_, clock);
  bool held = false;
  while (true) {
    // Unreleased answers come after the client's max wait: ask again.
    SS_ASSIGN_OR_RETURN(const syncer::ClockResult r, client_->Clock(clock, staleness_));
    Learn(r, steps_part);
    held = held || !r.released || r.waited > absl::ZeroDuration();
    if (r.released) break;
  }
  const absl::Duration waited = Since(start);
  RecordBlocked(waited);
  // With s = 0 every step asks; only the calls the syncer held are waits.
  if (!held) return absl::OkStatus();
  waits_.fetch_add(1, std::memory_order_relaxed);
  wait_micros_.fetch_add(absl::ToInt64Microseconds(waited), std::memory_order_relaxed);
  if (wait_histogram_ != nullptr) wait_histogram_->Observe(absl::ToDoubleSeconds(waited));
  return absl::OkStatus();
}

absl::Status SspStrategy::Finish() {
  absl::Status error;
  {
    MutexLock l(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; });
    error = report_error_;
  }
  // Leaving releases the trainers waiting for this one.
  absl::Status left = client_->Leave();
  return error.ok() ? left : error;
}

nlohmann::json SspStrategy::Details() const {
  return {
      {"clock", clock()}, {"waits", waits()}, {"wait_seconds", absl::ToDoubleSeconds(wait_time())}};
}

}  // namespace shadowsync::worker
