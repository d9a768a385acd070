#include "worker/staleness_strategies.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync_math.h"

namespace shadowsync::worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

absl::Duration Since(SteadyClock::time_point start) {
  return absl::FromChrono(SteadyClock::now() - start);
}

// Raises `a` to at least `v`; returns the previous value.
int64_t RaiseTo(std::atomic<int64_t>& a, int64_t v) {
  int64_t prev = a.load(std::memory_order_relaxed);
  while (prev < v && !a.compare_exchange_weak(prev, v, std::memory_order_relaxed)) {
  }
  return prev;
}

prometheus::Histogram* AddHistogram(prometheus::Registry* registry, const SyncConfig& config,
                                    const std::string& name, const std::string& help,
                                    prometheus::Histogram::BucketBoundaries buckets) {
  if (registry == nullptr) return nullptr;
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry).Add(
      {{"algorithm", std::string(EnumName(config.algorithm))}}, std::move(buckets));
}

}  // namespace

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

// ---- ssp --------------------------------------------------------------------

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
      registry, config, "shadowsync_trainer_ssp_wait_seconds",
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
  const SteadyClock::time_point start = SteadyClock::now();
  const int64_t bytes = static_cast<int64_t>(grad.size() * sizeof(float));
  OptimizerDelta(replica_.optimizer, replica_.state, grad, delta);
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
  const SteadyClock::time_point start = SteadyClock::now();
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

// ---- ps-plus ----------------------------------------------------------------

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
      AddHistogram(registry, config, "shadowsync_trainer_ps_plus_staleness",
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
      const SteadyClock::time_point start = SteadyClock::now();
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
  model::OptimizerConfig optimizer = replica_.optimizer;
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

nlohmann::json SspStrategy::Details() const {
  return {
      {"clock", clock()}, {"waits", waits()}, {"wait_seconds", absl::ToDoubleSeconds(wait_time())}};
}

nlohmann::json PsPlusStrategy::Details() const {
  return {{"pushes", pushes()}, {"mean_staleness", mean_staleness()}};
}

}  // namespace shadowsync::worker
