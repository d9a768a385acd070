#include "worker/sync/ps_plus.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/sync_math.h"

namespace shadowsync::worker {

float StalenessLearningRate(StalenessLrRule rule, float lr, int64_t tau, double gamma) {
  tau = std::max<int64_t>(tau, 0);
  switch (rule) {
    case StalenessLrRule::kNone:
      return lr;
    case StalenessLrRule::kInverse:
      return lr / static_cast<float>(std::max<int64_t>(1, tau));
    case StalenessLrRule::kInversePlusOne:
      return lr / static_cast<float>(1 + tau);
    case StalenessLrRule::kExponential:
      return static_cast<float>(lr * std::pow(gamma, static_cast<double>(tau)));
  }
  return lr;
}

absl::StatusOr<std::unique_ptr<PsPlusStrategy>> PsPlusStrategy::Create(
    const SyncConfig& config, syncer::SyncerClient* client, prometheus::Registry* registry) {
  const double gamma = config.ps_plus.gamma;
  if (!(gamma > 0 && gamma <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.psPlus.gamma: must be in (0, 1], got ", gamma));
  }
  return std::unique_ptr<PsPlusStrategy>(new PsPlusStrategy(config, client, registry));
}

PsPlusStrategy::PsPlusStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                               prometheus::Registry* registry)
    : SyncStrategy(config, registry), client_(client) {
  staleness_histogram_ =
      AddHistogram(registry, "shadowsync_trainer_ps_plus_staleness",
                   "Staleness tau of each pushed update: global adds its weights were missing.",
                   {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256});
}

PsPlusStrategy::~PsPlusStrategy() {
  for (auto& ts : threads_) WaitIdle(*ts);
}

void PsPlusStrategy::WaitIdle(ThreadState& ts) {
  MutexLock l(&ts.mu);
  ts.mu.Await(
      [&ts]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ts.mu) { return !ts.pull_pending || ts.pull_done; });
}

absl::Status PsPlusStrategy::Start(const DenseReplica& replica) {
  SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
  const size_t n = replica.params.size();
  std::vector<float> init(replica.params.begin(), replica.params.end()), global(n);
  SS_RETURN_IF_ERROR(client_->InitCentre(init, global));
  uint64_t version = 0;
  SS_RETURN_IF_ERROR(client_->PullCentre(global, &version));
  StoreRelaxed(replica.params, global);
  {
    MutexLock l(&land_mu_);
    replica_version_ = version;
  }
  for (int t = 0; t < std::max(1, replica.threads); ++t) {
    auto ts = std::make_unique<ThreadState>();
    ts->pulled.resize(n);
    ts->delta.resize(n);
    ts->start_version = version;
    threads_.push_back(std::move(ts));
  }
  // The eager pull of every thread's first step.
  for (auto& ts : threads_) IssuePull(*ts, /*push=*/false);
  return absl::OkStatus();
}

void PsPlusStrategy::IssuePull(ThreadState& ts, bool push) {
  {
    MutexLock l(&ts.mu);
    ts.pull_pending = true;
    ts.pull_done = false;
  }
  ts.pull_issued = absl::Now();
  auto done = [&ts, push](absl::Status s) {
    MutexLock l(&ts.mu);
    if (push && !s.ok() && ts.push_status.ok()) ts.push_status = s;
    ts.pull_status = std::move(s);
    ts.pull_done = true;
    ts.pull_answered = absl::Now();
  };
  if (push) {
    client_->AddAndPullAsync(ts.delta, ts.pulled, &ts.pulled_version, std::move(done));
  } else {
    client_->PullCentreAsync(ts.pulled, &ts.pulled_version, std::move(done));
  }
}

absl::Status PsPlusStrategy::Land(ThreadState& ts, bool wait) {
  absl::Status status;
  absl::Time answered;
  {
    MutexLock l(&ts.mu);
    if (!ts.pull_pending) return absl::OkStatus();
    if (!ts.pull_done) {
      if (!wait) return absl::OkStatus();
      const Clock::time_point start = Clock::now();
      ts.mu.Await([&ts]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ts.mu) { return ts.pull_done; });
      RecordBlocked(Since(start));
    }
    ts.pull_pending = false;
    status = ts.pull_status;
    answered = ts.pull_answered;
  }
  SS_RETURN_IF_ERROR(status);
  // One round per step: its push and this pull (asp counts the same bytes).
  const int64_t bytes = static_cast<int64_t>(ts.pulled.size() * sizeof(float));
  RecordRound(answered - ts.pull_issued, bytes, bytes);
  MutexLock l(&land_mu_);
  // An older pull than what another thread landed would undo its progress.
  if (ts.pulled_version > replica_version_) {
    StoreRelaxed(replica_.params, ts.pulled);
    replica_version_ = ts.pulled_version;
  }
  return absl::OkStatus();
}

absl::Status PsPlusStrategy::ApplyGradient(int thread, std::span<const float> grad) {
  ThreadState& ts = *threads_[thread];
  // Also completes the thread's previous push (one call carried both), so a
  // failed push surfaces here as the pull's error.
  SS_RETURN_IF_ERROR(Land(ts, /*wait=*/true));
  const uint64_t now_version = replica_version();
  // R only grows, so this is >= 0; the min guards the invariant anyway.
  const int64_t tau = static_cast<int64_t>(now_version - std::min(ts.start_version, now_version));
  ts.last_tau = tau;
  model::OptimizerConfig optimizer = DenseOptimizer();
  optimizer.learning_rate = StalenessLearningRate(
      config_.ps_plus.lr_modulation, optimizer.learning_rate, tau, config_.ps_plus.gamma);
  OptimizerDelta(optimizer, replica_.state, grad, ts.delta);
  // The thread's own update shows at once, as Hogwild's would.
  AddRelaxed(replica_.params, ts.delta);
  pushes_.fetch_add(1, std::memory_order_relaxed);
  tau_sum_.fetch_add(tau, std::memory_order_relaxed);
  if (staleness_histogram_ != nullptr) staleness_histogram_->Observe(static_cast<double>(tau));
  // The push, and the eager pull of the next step overlapping its
  // computation, in one call: the centre right after this add comes back.
  // One RPC per step, as asp's, with the same bytes; the delta buffer is
  // free again once the call is built.
  IssuePull(ts, /*push=*/true);
  return absl::OkStatus();
}

absl::Status PsPlusStrategy::AfterStep(int thread) {
  SS_RETURN_IF_ERROR(SyncStrategy::AfterStep(thread));
  ThreadState& ts = *threads_[thread];
  // A pull already answered makes the next step's weights fresher for free.
  SS_RETURN_IF_ERROR(Land(ts, /*wait=*/false));
  ts.start_version = replica_version();
  return absl::OkStatus();
}

absl::Status PsPlusStrategy::Finish() {
  absl::Status first;
  for (auto& ts : threads_) {
    WaitIdle(*ts);
    MutexLock l(&ts->mu);
    if (first.ok()) first = ts->push_status;
  }
  return first;
}

double PsPlusStrategy::mean_staleness() const {
  const int64_t n = pushes();
  return n > 0 ? static_cast<double>(tau_sum_.load(std::memory_order_relaxed)) / n : 0;
}

uint64_t PsPlusStrategy::replica_version() const {
  MutexLock l(&land_mu_);
  return replica_version_;
}

nlohmann::json PsPlusStrategy::Details() const {
  return {{"pushes", pushes()}, {"mean_staleness", mean_staleness()}};
}

}  // namespace shadowsync::worker
