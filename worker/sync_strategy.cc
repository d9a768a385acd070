#include "worker/sync_strategy.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "syncer/client/syncer_client.h"
#include "worker/ds_sync.h"
#include "worker/rendezvous.h"
#include "worker/staleness_strategies.h"
#include "worker/sync_switch.h"

namespace shadowsync::worker {
namespace {

using Clock = std::chrono::steady_clock;

// How long a strategy whose rounds need every trainer waits at its start
// for the others (they may still be loading their data).
constexpr absl::Duration kStartBarrierTimeout = absl::Minutes(10);
// How often a trainer waiting at the warm-up's start barrier checks whether
// the job is past the warm-up.
constexpr absl::Duration kWarmupPollInterval = absl::Seconds(1);

absl::Duration Since(Clock::time_point start) { return absl::FromChrono(Clock::now() - start); }

enum class Body { kEasgd, kMa, kBmuf };

// One sync round of EASGD, MA or BMUF: from a snapshot of the replica to the
// target the replica should move to. Used by one thread at a time.
class RoundBody {
 public:
  RoundBody(Body body, const SyncConfig& config, syncer::SyncerClient* client)
      : body_(body), config_(config), client_(client) {}

  // Agrees on the starting point: EASGD adopts the syncer's centre (the
  // first trainer's initial weights); BMUF starts its global model there.
  absl::Status Start(std::span<float> params) {
    const size_t n = params.size();
    scratch_.resize(n);
    if (body_ == Body::kEasgd) {
      std::vector<float> init(params.begin(), params.end());
      SS_RETURN_IF_ERROR(client_->InitCentre(init, scratch_));
      StoreRelaxed(params, scratch_);
      return absl::OkStatus();
    }
    if (body_ == Body::kBmuf) {
      global_.assign(params.begin(), params.end());
      momentum_.assign(n, 0.0f);
    }
    // Rounds from now on wait for this trainer (until it leaves or times out).
    return client_->Join(config_.group);
  }

  // After the syncer failed (e.g. it restarted and lost its state): seeds
  // the centre again from this replica unless another trainer already did,
  // or joins the rounds again. The replica is left as it is.
  absl::Status Rejoin(std::span<const float> replica) {
    if (body_ == Body::kEasgd) return client_->InitCentre(replica, scratch_);
    return client_->Join(config_.group);
  }

  // `*waited`: time spent waiting for other members (all-reduce bodies).
  absl::Status Run(std::span<const float> snapshot, std::span<float> target,
                   absl::Duration* waited = nullptr) {
    if (waited != nullptr) *waited = absl::ZeroDuration();
    switch (body_) {
      case Body::kEasgd:
        SS_RETURN_IF_ERROR(client_->PullCentre(scratch_));
        EasgdElastic(config_.easgd_alpha, snapshot, scratch_, scratch_);
        SS_RETURN_IF_ERROR(client_->AddToCentre(scratch_));
        for (size_t i = 0; i < snapshot.size(); ++i) target[i] = snapshot[i] - scratch_[i];
        return absl::OkStatus();
      case Body::kMa: {
        SS_ASSIGN_OR_RETURN(syncer::RoundResult r,
                            client_->AllReduceMean(config_.group, snapshot, target));
        if (waited != nullptr) *waited = r.waited;
        return absl::OkStatus();
      }
      case Body::kBmuf: {
        SS_ASSIGN_OR_RETURN(syncer::RoundResult r,
                            client_->AllReduceMean(config_.group, snapshot, scratch_));
        if (waited != nullptr) *waited = r.waited;
        BmufStep(config_.bmuf, scratch_, global_, momentum_, target);
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unknown round body");
  }

 private:
  const Body body_;
  const SyncConfig config_;
  syncer::SyncerClient* const client_;
  std::vector<float> scratch_, global_, momentum_;
};

Body BodyOf(SyncAlgorithm algorithm) {
  switch (algorithm) {
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kFgEasgd:
      return Body::kEasgd;
    case SyncAlgorithm::kShadowBmuf:
    case SyncAlgorithm::kFgBmuf:
      return Body::kBmuf;
    default:
      return Body::kMa;
  }
}

// shadow-*: a background thread loops over rounds until Finish.
class ShadowStrategy final : public SyncStrategy {
 public:
  ShadowStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                 prometheus::Registry* registry)
      : SyncStrategy(config, registry),
        client_(client),
        body_(BodyOf(config.algorithm), config, client) {}
  ~ShadowStrategy() override { Stop(); }

  absl::Status Start(const DenseReplica& replica) override {
    SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
    // With one trainer there is nobody to average with.
    if (config_.num_trainers < 2) return StartShadow();
    if (config_.final_average) {
      // Joined now, so that the last round waits for every trainer.
      if (absl::Status s = client_->Join(FinalGroup()); !s.ok()) {
        std::cerr << "shadow sync: joining the final round: " << s.message() << "\n";
      }
    }
    if (config_.warmup_steps > 0) {
      absl::StatusOr<bool> warming = JoinWarmup();
      if (!warming.ok() && !Transient(warming.status())) return warming.status();
      if (warming.ok() && *warming) {
        warmup_ = std::make_unique<Rendezvous>(replica.threads);
        warming_.store(true, std::memory_order_relaxed);
        return absl::OkStatus();
      }
      if (!warming.ok()) {
        std::cerr << "shadow sync: no warm-up (" << warming.status().message() << ")\n";
      }
    }
    return StartShadow();
  }

  absl::Status AfterStep(int thread) override {
    SS_RETURN_IF_ERROR(SyncStrategy::AfterStep(thread));
    if (!warming_.load(std::memory_order_relaxed)) return absl::OkStatus();
    const Clock::time_point start = Clock::now();
    absl::Status s = warmup_->Arrive([this] { return WarmupRound(); });
    RecordBlocked(Since(start));
    return s;
  }

  void ThreadDone(int thread) override {
    if (warmup_ != nullptr) warmup_->Leave();
  }

  absl::Status Finish() override {
    Stop();
    if (config_.final_average && config_.num_trainers > 1) FinalRound();
    // A syncer that cannot be told drops this trainer after its member
    // timeout; the training itself is done.
    if (absl::Status s = client_->Leave(); !s.ok()) {
      std::cerr << "shadow sync: leaving the rounds: " << s.message() << "\n";
    }
    MutexLock l(&mu_);
    return error_;
  }

 private:
  void Loop() {
    const size_t n = replica_.params.size();
    std::vector<float> snapshot(n), target(n);
    while (true) {
      {
        MutexLock l(&mu_);
        if (stop_) return;
      }
      const Clock::time_point start = Clock::now();
      const int64_t sent = client_->bytes_sent(), received = client_->bytes_received();
      absl::Duration idle = AccessReplica([&] {
        model::CopyRelaxed(replica_.params.data(), snapshot.data(), static_cast<long>(n));
      });
      absl::Duration waited;
      absl::Status s = body_.Run(snapshot, target, &waited);
      if (!s.ok() && Transient(s)) {
        // The syncer is down or restarted: training goes on unsynchronized
        // meanwhile, and the loop rejoins once it answers again.
        if (!Retry(s, snapshot)) return;
        continue;
      }
      if (!s.ok()) {
        MutexLock l(&mu_);
        if (!stop_) error_ = s;  // A round cut short by Finish is not an error.
        return;
      }
      if (outage_) {
        std::cerr << "shadow sync: the syncer answers again after " << failures_
                  << " failed attempt(s)\n";
        outage_ = false;
        failures_ = 0;
      }
      if (config_.apply_mode == SyncApplyMode::kDelta) {
        for (size_t i = 0; i < n; ++i) target[i] -= snapshot[i];
        idle += AccessReplica([&] { AddRelaxed(replica_.params, target); });
      } else {
        idle += AccessReplica([&] { StoreRelaxed(replica_.params, target); });
      }
      const absl::Duration latency = Since(start);
      RecordRound(latency, client_->bytes_sent() - sent, client_->bytes_received() - received);
      // Rounds cost CPU here, on the syncer and on the other trainers: on a
      // machine without spare cores, back-to-back rounds would slow training.
      // An all-reduce's latency also counts the wait for the last member, and
      // the round's waits for a step to end, which cost nothing; pausing for
      // them would drive the members apart.
      const absl::Duration cost = std::max(absl::ZeroDuration(), latency - waited - idle);
      const absl::Duration pause =
          std::max(config_.min_interval, cost * ((1 - config_.duty_cycle) / config_.duty_cycle));
      if (pause > absl::ZeroDuration()) {
        MutexLock l(&mu_);
        auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
        mu_.AwaitWithTimeout(stopping, pause);
      }
    }
  }

  void Stop() {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  std::string WarmupGroup() const { return config_.group + "/warmup"; }
  std::string FinalGroup() const { return config_.group + "/final"; }

  // Whether this trainer warms up: not if it was restarted into a running
  // job, whose warm-up has begun (the others are past it, or nearly, and
  // its rounds would wait for nobody).
  absl::StatusOr<bool> JoinWarmup() {
    if (config_.resumed) {
      std::cerr << "shadow sync: resuming a begun share; no warm-up\n";
      return false;
    }
    // Also catches a trainer restarted before it had trained anything.
    SS_ASSIGN_OR_RETURN(const uint64_t rounds, client_->RoundsCompleted(WarmupGroup()));
    if (rounds > 0) {
      std::cerr << "shadow sync: the job's warm-up has begun without this trainer; skipping it\n";
      return false;
    }
    // Every warm-up round averages all trainers: none starts without the others.
    // Waited for in slices: a trainer restarted along with the syncer (which
    // forgot the warm-up's rounds) finds the others in shadow rounds, past
    // the warm-up, and must not wait for them.
    const absl::Time deadline = absl::Now() + kStartBarrierTimeout;
    while (true) {
      const absl::Status joined =
          client_->AwaitMembers(WarmupGroup(), config_.num_trainers, kWarmupPollInterval);
      if (joined.ok()) break;
      if (!absl::IsDeadlineExceeded(joined)) return joined;
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            joined.message(), " (", absl::FormatDuration(kStartBarrierTimeout), " in all)"));
      }
      SS_ASSIGN_OR_RETURN(const bool begun, ShadowRoundsBegun());
      if (begun) {
        std::cerr << "shadow sync: the others are past the warm-up; skipping it\n";
        client_->LeaveGroup(WarmupGroup()).IgnoreError();
        return false;
      }
    }
    // The first shadow round of MA and BMUF then waits for every trainer too.
    if (BodyOf(config_.algorithm) != Body::kEasgd) SS_RETURN_IF_ERROR(client_->Join(config_.group));
    return true;
  }

  // Whether the job's shadow rounds have begun, which they do only once
  // every trainer is done with the warm-up: EASGD's centre exists, or the
  // rounds of MA and BMUF have completed.
  absl::StatusOr<bool> ShadowRoundsBegun() {
    if (BodyOf(config_.algorithm) != Body::kEasgd) {
      SS_ASSIGN_OR_RETURN(const uint64_t rounds, client_->RoundsCompleted(config_.group));
      return rounds > 0;
    }
    std::vector<float> centre(replica_.params.size());
    const absl::Status pulled = client_->PullCentre(centre);
    if (absl::IsFailedPrecondition(pulled)) return false;
    SS_RETURN_IF_ERROR(pulled);
    return true;
  }

  // The body's starting point is the replica as it is now (after the
  // warm-up: the trainers' common mean), then the shadow thread.
  absl::Status StartShadow() {
    if (absl::Status s = body_.Start(replica_.params); !s.ok()) {
      // Training need not wait for the syncer: the loop rejoins it.
      if (!Transient(s)) return s;
      std::cerr << "shadow sync: " << s.message() << "; starting without it\n";
    }
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  // The replica becomes the mean over `group`'s members (training threads
  // must not be writing it: they wait, or are done).
  absl::StatusOr<syncer::RoundResult> AverageReplica(const std::string& group) {
    const size_t n = replica_.params.size();
    std::vector<float> snapshot(n), mean(n);
    model::CopyRelaxed(replica_.params.data(), snapshot.data(), static_cast<long>(n));
    SS_ASSIGN_OR_RETURN(syncer::RoundResult r, client_->AllReduceMean(group, snapshot, mean));
    StoreRelaxed(replica_.params, mean);
    return r;
  }

  // Run by the last of the trainer's threads to arrive, the others waiting:
  // the replica becomes the mean over the trainers.
  absl::Status WarmupRound() {
    const Clock::time_point start = Clock::now();
    const int64_t sent = client_->bytes_sent(), received = client_->bytes_received();
    absl::Status s = AverageReplica(WarmupGroup()).status();
    if (s.ok()) {
      RecordRound(Since(start), client_->bytes_sent() - sent, client_->bytes_received() - received);
      if (++warmup_rounds_ < config_.warmup_steps) return absl::OkStatus();
    } else if (!Transient(s)) {
      return s;
    } else {
      // The shadow loop rides out syncer outages; the warm-up does not wait.
      std::cerr << "shadow sync: warm-up round failed (" << s.message()
                << "); ending the warm-up\n";
    }
    // Rounds still open for this trainer need not wait for it any longer.
    client_->LeaveGroup(WarmupGroup()).IgnoreError();
    warming_.store(false, std::memory_order_relaxed);
    return StartShadow();
  }

  // After the shadow thread stopped and every training thread is done.
  void FinalRound() {
    // Shadow rounds must not wait for a trainer that feeds them no more.
    client_->LeaveGroup(WarmupGroup()).IgnoreError();
    client_->LeaveGroup(config_.group).IgnoreError();
    absl::StatusOr<syncer::RoundResult> r = AverageReplica(FinalGroup());
    if (!r.ok()) {
      std::cerr << "shadow sync: final round: " << r.status().message()
                << "; keeping this replica\n";
      return;
    }
    if (r->members < config_.num_trainers) {
      std::cerr << "shadow sync: final round averaged " << r->members << " of "
                << config_.num_trainers << " trainers (the others were done earlier than the "
                << "syncer's member timeout allows, or had failed)\n";
    }
  }

  // Errors a restarted or briefly unreachable syncer causes.
  static bool Transient(const absl::Status& s) {
    switch (s.code()) {
      case absl::StatusCode::kUnavailable:
      case absl::StatusCode::kDeadlineExceeded:
      case absl::StatusCode::kCancelled:  // the call was in flight when the syncer stopped
      case absl::StatusCode::kAborted:
      case absl::StatusCode::kFailedPrecondition:  // a restarted syncer has no centre yet
        return true;
      default:
        return false;
    }
  }

  // Backs off (bounded, interruptible by Stop), then rejoins. False once stopping.
  bool Retry(const absl::Status& s, std::span<const float> snapshot) {
    if (!outage_) {
      std::cerr << "shadow sync: " << s.message() << "; retrying in the background\n";
      outage_ = true;
    }
    ++failures_;
    const absl::Duration backoff =
        std::min(absl::Milliseconds(50) * (1 << std::min(failures_, 6)), absl::Seconds(2));
    {
      MutexLock l(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithTimeout(stopping, backoff)) return false;
    }
    // A failed rejoin shows up as the next round's error.
    body_.Rejoin(snapshot).IgnoreError();
    // A restarted syncer forgot who the final round waits for.
    if (config_.final_average && config_.num_trainers > 1) {
      client_->Join(FinalGroup()).IgnoreError();
    }
    return true;
  }

  syncer::SyncerClient* const client_;
  RoundBody body_;
  std::thread thread_;
  // Warm-up: the trainer's threads meet after every step; the round runner
  // counts the rounds and turns warming_ off.
  std::unique_ptr<Rendezvous> warmup_;
  std::atomic<bool> warming_{false};
  int64_t warmup_rounds_ = 0;
  // Shadow thread only.
  bool outage_ = false;
  int failures_ = 0;
  Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// fg-*: every `interval` steps of each thread, the trainer's threads meet and
// the last to arrive runs one round while the others wait.
class ForegroundStrategy final : public IntervalRoundStrategy {
 public:
  ForegroundStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                     prometheus::Registry* registry)
      : IntervalRoundStrategy(config, client, registry),
        body_(BodyOf(config.algorithm), config, client) {}

  absl::Status Start(const DenseReplica& replica) override {
    SS_RETURN_IF_ERROR(IntervalRoundStrategy::Start(replica));
    SS_RETURN_IF_ERROR(body_.Start(replica.params));
    snapshot_.resize(replica.params.size());
    target_.resize(replica.params.size());
    return absl::OkStatus();
  }

 private:
  absl::Status Round() override {
    const Clock::time_point start = Clock::now();
    const int64_t sent = client_->bytes_sent(), received = client_->bytes_received();
    model::CopyRelaxed(replica_.params.data(), snapshot_.data(),
                       static_cast<long>(snapshot_.size()));
    SS_RETURN_IF_ERROR(body_.Run(snapshot_, target_));
    StoreRelaxed(replica_.params, target_);
    RecordRound(Since(start), client_->bytes_sent() - sent, client_->bytes_received() - received);
    return absl::OkStatus();
  }

  RoundBody body_;
  std::vector<float> snapshot_, target_;  // Used by the round runner only.
};

// bsp: the trainer's threads pool their gradients every step; the pool's
// mean is averaged over the trainers and applied once.
class BspStrategy final : public SyncStrategy {
 public:
  BspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
              prometheus::Registry* registry)
      : SyncStrategy(config, registry), client_(client) {}

  absl::Status Start(const DenseReplica& replica) override {
    SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
    // Every step is one round of all trainers: none may start without the others.
    SS_RETURN_IF_ERROR(
        client_->AwaitMembers(config_.group, config_.num_trainers, kStartBarrierTimeout));
    rendezvous_ = std::make_unique<Rendezvous>(replica.threads);
    MutexLock l(&mu_);
    sum_.assign(replica.params.size(), 0.0f);
    mean_.resize(replica.params.size());
    return absl::OkStatus();
  }

  absl::Status ApplyGradient(int thread, std::span<const float> grad) override {
    const Clock::time_point start = Clock::now();
    {
      MutexLock l(&mu_);
      for (size_t i = 0; i < grad.size(); ++i) sum_[i] += grad[i];
      ++pooled_;
    }
    absl::Status status = rendezvous_->Arrive([this] { return Round(); });
    RecordBlocked(Since(start));
    return status;
  }

  void ThreadDone(int thread) override { rendezvous_->Leave(); }

  absl::Status Finish() override { return client_->Leave(); }

 private:
  absl::Status Round() {
    const Clock::time_point start = Clock::now();
    const int64_t sent = client_->bytes_sent(), received = client_->bytes_received();
    MutexLock l(&mu_);
    const float scale = 1.0f / static_cast<float>(std::max(pooled_, 1));
    for (float& g : sum_) g *= scale;
    SS_RETURN_IF_ERROR(client_->AllReduceMean(config_.group, sum_, mean_).status());
    model::ApplyUpdateRelaxed(replica_.optimizer, replica_.params.data(), replica_.state.data(),
                              mean_.data(), static_cast<long>(mean_.size()));
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    pooled_ = 0;
    RecordRound(Since(start), client_->bytes_sent() - sent, client_->bytes_received() - received);
    return absl::OkStatus();
  }

  syncer::SyncerClient* const client_;
  std::unique_ptr<Rendezvous> rendezvous_;
  Mutex mu_;
  std::vector<float> sum_ ABSL_GUARDED_BY(mu_);
  std::vector<float> mean_ ABSL_GUARDED_BY(mu_);
  int pooled_ ABSL_GUARDED_BY(mu_) = 0;
};

// asp: each step's update goes to the syncer's global weights, which replace
// the replica; nobody waits for anybody else.
class AspStrategy final : public SyncStrategy {
 public:
  AspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
              prometheus::Registry* registry)
      : SyncStrategy(config, registry), client_(client) {}

  absl::Status Start(const DenseReplica& replica) override {
    SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
    const size_t n = replica.params.size();
    buffers_.resize(replica.threads);
    for (auto& b : buffers_) {
      b.delta.resize(n);
      b.global.resize(n);
    }
    std::vector<float> init(replica.params.begin(), replica.params.end());
    SS_RETURN_IF_ERROR(client_->InitCentre(init, buffers_[0].global));
    StoreRelaxed(replica.params, buffers_[0].global);
    return absl::OkStatus();
  }

  absl::Status ApplyGradient(int thread, std::span<const float> grad) override {
    Buffers& b = buffers_[thread];
    const Clock::time_point start = Clock::now();
    // Counted per thread: concurrent threads share the client's counters.
    const int64_t bytes = static_cast<int64_t>(grad.size() * sizeof(float));
    OptimizerDelta(replica_.optimizer, replica_.state, grad, b.delta);
    SS_RETURN_IF_ERROR(client_->AddAndPull(b.delta, b.global));
    StoreRelaxed(replica_.params, b.global);
    const absl::Duration took = Since(start);
    RecordBlocked(took);
    RecordRound(took, bytes, bytes);
    return absl::OkStatus();
  }

 private:
  struct Buffers {
    std::vector<float> delta, global;
  };
  syncer::SyncerClient* const client_;
  std::vector<Buffers> buffers_;  // One per thread.
};

}  // namespace

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

absl::Status SyncStrategy::ApplyGradient(int thread, std::span<const float> grad) {
  if (replica_.gate != nullptr && replica_.gate->serialised()) {
    model::ApplyUpdateExclusive(replica_.optimizer, replica_.params.data(), replica_.state.data(),
                                grad.data(), static_cast<long>(grad.size()));
  } else {
    model::ApplyUpdateRelaxed(replica_.optimizer, replica_.params.data(), replica_.state.data(),
                              grad.data(), static_cast<long>(grad.size()));
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

SyncConfig SyncConfigFromJob(const JobSpec& spec) {
  SyncConfig c;
  c.algorithm = spec.sync.algorithm;
  c.interval = spec.sync.interval;
  c.min_interval = absl::Milliseconds(spec.sync.min_interval_ms);
  c.duty_cycle = spec.sync.duty_cycle;
  c.warmup_steps = spec.sync.warmup_steps;
  c.final_average = spec.sync.final_average;
  c.apply_mode = spec.sync.apply_mode;
  c.easgd_alpha = static_cast<float>(EffectiveEasgdAlpha(spec));
  c.bmuf.block_momentum = static_cast<float>(EffectiveBlockMomentum(spec));
  c.bmuf.block_lr = static_cast<float>(EffectiveBlockLearningRate(spec));
  c.bmuf.nesterov = spec.sync.bmuf.nesterov;
  c.num_trainers = spec.trainer.replicas;
  switch (spec.sync.algorithm) {
    case SyncAlgorithm::kAsp:
    case SyncAlgorithm::kSsp:
    case SyncAlgorithm::kPsPlus:
      c.lr_scale = EffectiveSharedLearningRateScale(spec);
      break;
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kShadowMa:
    case SyncAlgorithm::kShadowBmuf:
    case SyncAlgorithm::kFgEasgd:
    case SyncAlgorithm::kFgMa:
    case SyncAlgorithm::kFgBmuf:
      c.lr_scale = EffectiveReplicaLearningRateScale(spec);
      break;
    default:
      break;
  }
  c.ssp = spec.sync.ssp;
  c.ds_sync = spec.sync.ds_sync;
  c.sync_switch = spec.sync.sync_switch;
  c.ps_plus = spec.sync.ps_plus;
  return c;
}

namespace {
class NoSync final : public SyncStrategy {
 public:
  NoSync(const SyncConfig& config, prometheus::Registry* registry)
      : SyncStrategy(config, registry) {}
};
}  // namespace

IntervalRoundStrategy::IntervalRoundStrategy(SyncConfig config, syncer::SyncerClient* client,
                                             prometheus::Registry* registry)
    : SyncStrategy(std::move(config), registry), client_(client) {}

IntervalRoundStrategy::~IntervalRoundStrategy() = default;

absl::Status IntervalRoundStrategy::Start(const DenseReplica& replica) {
  SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
  rendezvous_ = std::make_unique<Rendezvous>(replica.threads);
  thread_steps_.assign(replica.threads, 0);
  return absl::OkStatus();
}

absl::Status IntervalRoundStrategy::AfterStep(int thread) {
  SS_RETURN_IF_ERROR(SyncStrategy::AfterStep(thread));
  if (++thread_steps_[thread] % config_.interval != 0) return absl::OkStatus();
  const Clock::time_point start = Clock::now();
  absl::Status status = rendezvous_->Arrive([this] { return Round(); });
  RecordBlocked(Since(start));
  return status;
}

void IntervalRoundStrategy::ThreadDone(int thread) { rendezvous_->Leave(); }

absl::Status IntervalRoundStrategy::Finish() { return client_->Leave(); }

absl::StatusOr<std::unique_ptr<SyncStrategy>> MakeSyncStrategy(const SyncConfig& config,
                                                               syncer::SyncerClient* client,
                                                               prometheus::Registry* registry) {
  if (config.algorithm == SyncAlgorithm::kNone) {
    return std::unique_ptr<SyncStrategy>(new NoSync(config, registry));
  }
  if (client == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("sync.algorithm ",
                                                   std::string(EnumName(config.algorithm)),
                                                   " needs a syncer (none configured)"));
  }
  if (!(config.duty_cycle > 0 && config.duty_cycle <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.dutyCycle: must be in (0, 1], got ", config.duty_cycle));
  }
  if (config.interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.interval: must be at least 1, got ", config.interval));
  }
  switch (config.algorithm) {
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kShadowMa:
    case SyncAlgorithm::kShadowBmuf:
      return std::unique_ptr<SyncStrategy>(new ShadowStrategy(config, client, registry));
    case SyncAlgorithm::kFgEasgd:
    case SyncAlgorithm::kFgMa:
    case SyncAlgorithm::kFgBmuf:
      return std::unique_ptr<SyncStrategy>(new ForegroundStrategy(config, client, registry));
    case SyncAlgorithm::kBsp:
      return std::unique_ptr<SyncStrategy>(new BspStrategy(config, client, registry));
    case SyncAlgorithm::kAsp:
      return std::unique_ptr<SyncStrategy>(new AspStrategy(config, client, registry));
    case SyncAlgorithm::kSyncSwitch:
      return SyncSwitchStrategy::Create(config, client, registry);
    case SyncAlgorithm::kSsp:
      return SspStrategy::Create(config, client, registry);
    case SyncAlgorithm::kPsPlus:
      return PsPlusStrategy::Create(config, client, registry);
    case SyncAlgorithm::kDsSync:
      return MakeDsSyncStrategy(config, client, registry);
    default:
      return absl::UnimplementedError(absl::StrCat(
          "sync.algorithm ", std::string(EnumName(config.algorithm)), " is not implemented yet"));
  }
}

}  // namespace shadowsync::worker
