#include "worker/sync/sync_switch.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/strategies.h"
#include "worker/sync/sync_math.h"

namespace shadowsync::worker {
namespace {

const char* ModeName(SyncSwitchMode mode) { return mode == SyncSwitchMode::kBsp ? "BSP" : "ASP"; }

double LowerMedian(std::vector<double>& values) {
  if (values.empty()) return 0;
  auto mid = values.begin() + (values.size() - 1) / 2;
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

std::string Ms(double seconds) { return absl::StrFormat("%.1f ms", seconds * 1e3); }

}  // namespace

double WindowStepSeconds(std::vector<double>& samples) { return LowerMedian(samples); }

StragglerVerdict FindStraggler(std::span<const float> step_seconds, double factor) {
  std::vector<double> reported;
  for (float t : step_seconds) {
    if (t > 0) reported.push_back(t);
  }
  StragglerVerdict v;
  v.median_seconds = LowerMedian(reported);
  for (size_t i = 0; i < step_seconds.size(); ++i) {
    const double t = step_seconds[i];
    if (t > factor * v.median_seconds && t > v.step_seconds) {
      v.straggler = static_cast<int>(i);
      v.step_seconds = t;
    }
  }
  return v;
}

struct SyncSwitchStrategy::Metrics {
  prometheus::Counter* to_asp = nullptr;
  prometheus::Counter* to_bsp = nullptr;
  prometheus::Gauge* asp_mode = nullptr;
};

absl::StatusOr<std::unique_ptr<SyncSwitchStrategy>> SyncSwitchStrategy::Create(
    const SyncConfig& config, syncer::SyncerClient* client, prometheus::Registry* registry) {
  const SyncSwitchSpec& s = config.sync_switch;
  if (client == nullptr) {
    return absl::InvalidArgumentError(
        "sync.algorithm sync-switch needs a syncer (none configured)");
  }
  if (!(s.switch_fraction >= 0 && s.switch_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.syncSwitch.switchFraction: must be in [0, 1], got ", s.switch_fraction));
  }
  if (!(s.straggler_factor > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.syncSwitch.stragglerFactor: must be > 1, got ", s.straggler_factor));
  }
  if (s.window_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.syncSwitch.windowSteps: must be >= 1, got ", s.window_steps));
  }
  if (s.switch_step.has_value() && *s.switch_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.syncSwitch.switchStep: must be >= 0, got ", *s.switch_step));
  }
  if (s.asp_learning_rate_scale.has_value() && !(*s.asp_learning_rate_scale > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync.syncSwitch.aspLearningRateScale: must be > 0, got ", *s.asp_learning_rate_scale));
  }
  if (s.asp_batch_size.has_value() && *s.asp_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.syncSwitch.aspBatchSize: must be >= 1, got ", *s.asp_batch_size));
  }
  if (config.num_trainers < 1 || config.trainer_index < 0 ||
      config.trainer_index >= config.num_trainers) {
    return absl::InvalidArgumentError(absl::StrCat("sync-switch: trainer index ",
                                                   config.trainer_index, " out of [0, ",
                                                   config.num_trainers, ")"));
  }
  // The phases' own metrics would be labelled bsp and asp; this strategy
  // reports their rounds as its own (ForwardStats).
  SyncConfig phase = config;
  phase.lr_scale = 1.0;  // Start() gives the ASP phases aspLearningRateScale instead.
  phase.algorithm = SyncAlgorithm::kBsp;
  std::unique_ptr<SyncStrategy> bsp = NewBspStrategy(phase, client, nullptr);
  phase.algorithm = SyncAlgorithm::kAsp;
  std::unique_ptr<SyncStrategy> asp = NewAspStrategy(phase, client, nullptr);
  return std::unique_ptr<SyncSwitchStrategy>(
      new SyncSwitchStrategy(config, client, registry, std::move(bsp), std::move(asp)));
}

SyncSwitchStrategy::SyncSwitchStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                                       prometheus::Registry* registry,
                                       std::unique_ptr<SyncStrategy> bsp,
                                       std::unique_ptr<SyncStrategy> asp)
    : SyncStrategy(config, registry),
      client_(client),
      bsp_(std::move(bsp)),
      asp_(std::move(asp)),
      switch_metrics_(std::make_unique<Metrics>()) {
  if (registry == nullptr) return;
  auto& switches = prometheus::BuildCounter()
                       .Name("shadowsync_trainer_sync_switches_total")
                       .Help("Sync-switch mode changes, by direction.")
                       .Register(*registry);
  switch_metrics_->to_asp = &switches.Add({{"direction", "bsp_to_asp"}});
  switch_metrics_->to_bsp = &switches.Add({{"direction", "asp_to_bsp"}});
  switch_metrics_->asp_mode = &prometheus::BuildGauge()
                                   .Name("shadowsync_trainer_sync_switch_asp")
                                   .Help("1 while sync-switch trains under ASP, 0 under BSP.")
                                   .Register(*registry)
                                   .Add({});
}

SyncSwitchStrategy::~SyncSwitchStrategy() { StopExchanger(); }

void SyncSwitchStrategy::SetTotalSteps(int64_t steps_per_thread) {
  total_steps_.store(steps_per_thread, std::memory_order_relaxed);
}

absl::Status SyncSwitchStrategy::Start(const DenseReplica& replica) {
  SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
  const SyncSwitchSpec& s = config_.sync_switch;
  const size_t n = replica.params.size();
  if (s.policy == SyncSwitchPolicy::kOnline && n < static_cast<size_t>(config_.num_trainers)) {
    // Step times travel in the first num_trainers floats of an all-reduce.
    return absl::InvalidArgumentError(absl::StrCat("sync-switch online policy: ", n,
                                                   " dense parameters cannot carry the step "
                                                   "times of ",
                                                   config_.num_trainers, " trainers"));
  }
  const int64_t total = total_steps_.load(std::memory_order_relaxed);
  int64_t switch_round = 0;
  if (s.switch_step.has_value()) {
    switch_round = *s.switch_step;
  } else if (s.switch_fraction >= 1) {
    switch_round = SyncSwitchStatus::kUnbounded;
  } else if (s.switch_fraction <= 0) {
    switch_round = 0;
  } else if (total > 0) {
    switch_round = static_cast<int64_t>(std::ceil(s.switch_fraction * static_cast<double>(total)));
  } else {
    return absl::FailedPreconditionError(
        "sync.syncSwitch: the switch point is unknown: set switchStep, or the trainer must call "
        "SetTotalSteps() before Start()");
  }
  const double scale = s.asp_learning_rate_scale.value_or(1.0 / std::max(1, config_.num_trainers));
  asp_replica_ = replica;
  asp_replica_.optimizer.learning_rate =
      static_cast<float>(replica.optimizer.learning_rate * scale);
  switch_round_.store(switch_round, std::memory_order_relaxed);
  gate_ = std::make_unique<Rendezvous>(replica.threads);
  threads_.assign(replica.threads, ThreadState{});
  scratch_.assign(n, 0.0f);
  // Every trainer of a fresh job waits below for all the others before any
  // round, so rounds already completed mean this one was restarted.
  SS_ASSIGN_OR_RETURN(const uint64_t switch_rounds, client_->RoundsCompleted(kGroup));
  SS_ASSIGN_OR_RETURN(const uint64_t bsp_rounds, client_->RoundsCompleted(config_.group));
  if (switch_rounds > 0 || bsp_rounds > 0) return StartRestarted(bsp_rounds);
  // The first barrier or step-time round must wait for every trainer, and
  // the round counts that place the switch must agree: nobody starts alone.
  SS_RETURN_IF_ERROR(client_->AwaitMembers(kGroup, config_.num_trainers, absl::Minutes(10)));
  SS_RETURN_IF_ERROR(bsp_->Start(replica));
  if (s.policy == SyncSwitchPolicy::kOnline) {
    ex_buffer_.assign(n, 0.0f);
    exchanger_ = std::thread([this] { ExchangeLoop(); });
  }
  return absl::OkStatus();
}

absl::Status SyncSwitchStrategy::StartRestarted(uint64_t bsp_rounds) {
  // The dead incarnation (same member name) may still be live in both
  // groups; leaving completes the rounds waiting for it now rather than
  // after the syncer's member timeout.
  SS_RETURN_IF_ERROR(client_->LeaveGroup(kGroup));
  SS_RETURN_IF_ERROR(client_->LeaveGroup(config_.group));
  restarted_.store(true, std::memory_order_release);
  // Adopts the global weights (or seeds them, before any ASP phase).
  SS_RETURN_IF_ERROR(asp_->Start(asp_replica_));
  mode_.store(SyncSwitchMode::kAsp, std::memory_order_release);
  if (switch_metrics_->asp_mode != nullptr) switch_metrics_->asp_mode->Set(1);
  LOG(INFO) << "sync-switch: restarted into a running job (" << bsp_rounds
            << " BSP rounds done): ASP until the end, outside the BSP lockstep";
  return absl::OkStatus();
}

bool SyncSwitchStrategy::CheckpointDue(const ThreadState& ts) const {
  const bool online = config_.sync_switch.policy == SyncSwitchPolicy::kOnline;
  const bool window_end =
      ts.phase_steps > 0 && ts.phase_steps % config_.sync_switch.window_steps == 0;
  if (mode_.load(std::memory_order_acquire) == SyncSwitchMode::kBsp) {
    // BSP keeps the threads (and the trainers) in lockstep: every thread
    // sees the same counts here.
    return ts.bsp_steps >= switch_round_.load(std::memory_order_relaxed) || (online && window_end);
  }
  return back_to_bsp_.load(std::memory_order_acquire);
}

absl::Status SyncSwitchStrategy::ApplyGradient(int thread, std::span<const float> grad) {
  ThreadState& ts = threads_[thread];
  const Clock::time_point entry = Clock::now();
  // The step's own time (forward, backward, lookups): from the end of the
  // previous update to this one, so waits for other trainers do not count.
  {
    MutexLock l(&ex_mu_);
    if (ts.last_return.has_value()) {
      samples_.push_back(absl::ToDoubleSeconds(absl::FromChrono(entry - *ts.last_return)));
    }
    if (mode_.load(std::memory_order_acquire) == SyncSwitchMode::kAsp &&
        config_.sync_switch.policy == SyncSwitchPolicy::kOnline &&
        !bsp_share_done_.load(std::memory_order_acquire) &&
        !restarted_.load(std::memory_order_acquire)) {
      SS_RETURN_IF_ERROR(PollExchangeLocked());
    }
  }
  if (CheckpointDue(ts)) {
    absl::Status status = gate_->Arrive([this] { return Checkpoint(); });
    RecordBlocked(Since(entry));
    SS_RETURN_IF_ERROR(status);
  }
  const SyncSwitchMode mode = mode_.load(std::memory_order_acquire);
  absl::Status status = (mode == SyncSwitchMode::kBsp ? bsp_ : asp_)->ApplyGradient(thread, grad);
  ForwardStats();
  SS_RETURN_IF_ERROR(status);
  ++ts.phase_steps;
  if (mode == SyncSwitchMode::kBsp) ++ts.bsp_steps;
  ts.last_return = Clock::now();
  return absl::OkStatus();
}

absl::Status SyncSwitchStrategy::Checkpoint() {
  const SyncSwitchMode mode = mode_.load(std::memory_order_acquire);
  const int64_t round = bsp_->stats().rounds;
  const int64_t switch_round = switch_round_.load(std::memory_order_relaxed);
  const double factor = config_.sync_switch.straggler_factor;
  SyncSwitchMode next = mode;
  std::string reason;
  int straggler = -1;
  if (mode == SyncSwitchMode::kBsp && round >= switch_round) {
    bsp_share_done_.store(true, std::memory_order_release);
    next = SyncSwitchMode::kAsp;
    reason = absl::StrCat("BSP share of ", switch_round, " rounds done");
  } else if (mode == SyncSwitchMode::kBsp) {
    float mine;
    {
      MutexLock l(&ex_mu_);
      mine = TakeWindowLocked();
    }
    SS_ASSIGN_OR_RETURN(StragglerVerdict v, Exchange(mine, scratch_));
    if (v.straggler >= 0) {
      next = SyncSwitchMode::kAsp;
      straggler = v.straggler;
      reason = absl::StrFormat("trainer %d step time %s > %.1f x median %s", v.straggler,
                               Ms(v.step_seconds), factor, Ms(v.median_seconds));
    }
  } else {
    // back_to_bsp_: every trainer got the same verdict and comes here.
    StragglerVerdict v;
    {
      MutexLock l(&ex_mu_);
      v = last_verdict_;
    }
    next = SyncSwitchMode::kBsp;
    reason = absl::StrFormat("step times within %.1f x median %s", factor, Ms(v.median_seconds));
  }
  if (next == mode) return absl::OkStatus();
  SS_RETURN_IF_ERROR(next == SyncSwitchMode::kAsp ? SwitchToAsp() : SwitchToBsp());
  for (ThreadState& ts : threads_) {
    ts.phase_steps = 0;
    ts.last_return.reset();  // The switch itself is no step time.
  }
  {
    MutexLock l(&ex_mu_);
    samples_.clear();
    asp_steps_ = 0;
  }
  back_to_bsp_.store(false, std::memory_order_release);
  {
    MutexLock l(&mu_);
    if (next == SyncSwitchMode::kAsp) {
      ++bsp_to_asp_;
      last_straggler_ = straggler;
    } else {
      ++asp_to_bsp_;
    }
  }
  if (switch_metrics_->to_asp != nullptr) {
    (next == SyncSwitchMode::kAsp ? switch_metrics_->to_asp : switch_metrics_->to_bsp)->Increment();
    switch_metrics_->asp_mode->Set(next == SyncSwitchMode::kAsp ? 1 : 0);
  }
  LOG(INFO) << "sync-switch: " << ModeName(mode) << " -> " << ModeName(next) << " at round "
            << round << " (" << reason << ")";
  return absl::OkStatus();
}

float SyncSwitchStrategy::TakeWindowLocked() {
  const float mine = static_cast<float>(WindowStepSeconds(samples_));
  samples_.clear();
  asp_steps_ = 0;
  return mine;
}

absl::StatusOr<StragglerVerdict> SyncSwitchStrategy::Exchange(float mine,
                                                              std::vector<float>& buffer) {
  const Clock::time_point start = Clock::now();
  // Trainer i's time at index i, 0 elsewhere: the mean times the members is
  // every trainer's time, the same floats on every member.
  std::fill(buffer.begin(), buffer.end(), 0.0f);
  buffer[config_.trainer_index] = mine;
  SS_ASSIGN_OR_RETURN(syncer::RoundResult r, client_->AllReduceMean(kGroup, buffer, buffer));
  // Counted here, not from the client's totals, which ASP threads move meanwhile.
  const int64_t bytes = static_cast<int64_t>(buffer.size() * sizeof(float));
  RecordRound(Since(start), bytes, bytes);
  std::span<float> times(buffer.data(), static_cast<size_t>(config_.num_trainers));
  for (float& t : times) t *= static_cast<float>(r.members);
  return FindStraggler(times, config_.sync_switch.straggler_factor);
}

absl::Status SyncSwitchStrategy::PollExchangeLocked() {
  if (back_to_bsp_.load(std::memory_order_acquire)) return absl::OkStatus();
  if (ex_result_.has_value()) {
    absl::StatusOr<StragglerVerdict> v = std::move(*ex_result_);
    ex_result_.reset();
    ex_busy_ = false;
    SS_RETURN_IF_ERROR(v.status());
    if (v->straggler < 0) {
      last_verdict_ = *v;
      back_to_bsp_.store(true, std::memory_order_release);
      return absl::OkStatus();
    }
  }
  // One exchange in flight at most: a second contribution to an open round
  // would replace the first.
  if (!ex_busy_ && ++asp_steps_ >= static_cast<int64_t>(config_.sync_switch.window_steps) *
                                       std::max(replica_.threads, 1)) {
    ex_request_ = TakeWindowLocked();
    ex_busy_ = true;
  }
  return absl::OkStatus();
}

void SyncSwitchStrategy::ExchangeLoop() {
  while (true) {
    float mine;
    {
      MutexLock l(&ex_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex_mu_) {
        return ex_stop_ || ex_request_.has_value();
      };
      ex_mu_.Await(ready);
      if (ex_stop_) return;
      mine = *ex_request_;
      ex_request_.reset();
    }
    absl::StatusOr<StragglerVerdict> v = Exchange(mine, ex_buffer_);
    MutexLock l(&ex_mu_);
    if (ex_stop_) return;  // A round cut short by Finish is not an error.
    ex_result_ = std::move(v);
  }
}

void SyncSwitchStrategy::StopExchanger() {
  {
    MutexLock l(&ex_mu_);
    ex_stop_ = true;
  }
  if (!exchanger_.joinable()) return;
  // Fails a pending exchange (ABORTED) rather than waiting for its round.
  client_->LeaveGroup(kGroup).IgnoreError();
  exchanger_.join();
}

absl::StatusOr<int> SyncSwitchStrategy::Barrier() {
  std::fill(scratch_.begin(), scratch_.end(), 0.0f);
  SS_ASSIGN_OR_RETURN(syncer::RoundResult r, client_->AllReduceMean(kGroup, scratch_, scratch_));
  return r.members;
}

absl::Status SyncSwitchStrategy::SwitchToAsp() {
  const RoundStart start = BeginRound(*client_);
  // Every trainer is here and nobody has written the global weights since
  // the last ASP phase. Move them to the mean replica: each trainer reads
  // the same centre c (the first barrier keeps writes out until all have),
  // adds (w_i - c) / m, and the second barrier keeps ASP pushes out until
  // the sum is complete.
  std::vector<float> delta(replica_.params.begin(), replica_.params.end());
  std::vector<float> centre(delta.size());
  SS_RETURN_IF_ERROR(client_->InitCentre(delta, centre));
  SS_ASSIGN_OR_RETURN(const int members, Barrier());
  for (size_t i = 0; i < delta.size(); ++i) {
    delta[i] = (delta[i] - centre[i]) / static_cast<float>(std::max(members, 1));
  }
  SS_RETURN_IF_ERROR(client_->AddToCentre(delta));
  SS_RETURN_IF_ERROR(Barrier().status());
  // Adopts the global weights; ASP updates use the rescaled learning rate.
  SS_RETURN_IF_ERROR(asp_->Start(asp_replica_));
  mode_.store(SyncSwitchMode::kAsp, std::memory_order_release);
  EndRound(start, *client_);
  return absl::OkStatus();
}

absl::Status SyncSwitchStrategy::SwitchToBsp() {
  const RoundStart start = BeginRound(*client_);
  // Every trainer got the same verdict and comes here once all its threads
  // stopped pushing; after the barrier the global weights are final and
  // everyone adopts the same ones.
  SS_RETURN_IF_ERROR(Barrier().status());
  SS_RETURN_IF_ERROR(client_->PullCentre(scratch_));
  StoreRelaxed(replica_.params, scratch_);
  mode_.store(SyncSwitchMode::kBsp, std::memory_order_release);
  EndRound(start, *client_);
  return absl::OkStatus();
}

void SyncSwitchStrategy::ForwardStats() {
  const SyncStats b = bsp_->stats(), a = asp_->stats();
  MutexLock l(&mu_);
  const double blocked = b.blocked_seconds + a.blocked_seconds - forwarded_.blocked_seconds;
  if (blocked > 0) {
    RecordBlocked(absl::Seconds(blocked));
    forwarded_.blocked_seconds += blocked;
  }
  // A round's counters are not read atomically together: bytes that arrive
  // ahead of their round are reported with the next one.
  const int64_t rounds = b.rounds + a.rounds - forwarded_.rounds;
  if (rounds <= 0) return;
  const int64_t sent = b.bytes_sent + a.bytes_sent - forwarded_.bytes_sent;
  const int64_t received = b.bytes_received + a.bytes_received - forwarded_.bytes_received;
  const double seconds = b.round_seconds + a.round_seconds - forwarded_.round_seconds;
  for (int64_t i = 0; i < rounds; ++i) {
    // Rounds of several ASP threads may arrive together; split evenly.
    RecordRound(absl::Seconds(seconds / rounds), sent / rounds + (i == 0 ? sent % rounds : 0),
                received / rounds + (i == 0 ? received % rounds : 0));
  }
  forwarded_.rounds += rounds;
  forwarded_.bytes_sent += sent;
  forwarded_.bytes_received += received;
  forwarded_.round_seconds += seconds;
}

void SyncSwitchStrategy::ThreadDone(int thread) {
  if (gate_ != nullptr) gate_->Leave();
  if (!restarted_.load(std::memory_order_acquire)) bsp_->ThreadDone(thread);  // Never started.
  asp_->ThreadDone(thread);
}

absl::Status SyncSwitchStrategy::Finish() {
  StopExchanger();
  // bsp's Finish leaves every group of this member, kGroup included.
  absl::Status status = bsp_->Finish();
  absl::Status asp = asp_->Finish();
  ForwardStats();
  return status.ok() ? asp : status;
}

SyncSwitchStatus SyncSwitchStrategy::status() const {
  SyncSwitchStatus s;
  s.mode = mode_.load(std::memory_order_acquire);
  s.bsp_share_done = bsp_share_done_.load(std::memory_order_acquire);
  s.bsp_rounds = bsp_->stats().rounds;
  s.switch_round = switch_round_.load(std::memory_order_relaxed);
  s.restarted = restarted_.load(std::memory_order_acquire);
  MutexLock l(&mu_);
  s.bsp_to_asp = bsp_to_asp_;
  s.asp_to_bsp = asp_to_bsp_;
  s.last_straggler = last_straggler_;
  return s;
}

nlohmann::json SyncSwitchStrategy::Details() const {
  const SyncSwitchStatus s = status();
  return {{"mode", s.mode == SyncSwitchMode::kAsp ? "asp" : "bsp"},
          {"bsp_to_asp", s.bsp_to_asp},
          {"asp_to_bsp", s.asp_to_bsp},
          {"bsp_rounds", s.bsp_rounds},
          {"bsp_share_done", s.bsp_share_done},
          {"last_straggler", s.last_straggler},
          {"restarted", s.restarted}};
}

int SyncSwitchStrategy::BatchSize(int configured) const {
  if (mode_.load(std::memory_order_acquire) == SyncSwitchMode::kBsp) return configured;
  return config_.sync_switch.asp_batch_size.value_or(configured);
}

int SyncSwitchStrategy::MaxBatchSize(int configured) const {
  return std::max(configured, config_.sync_switch.asp_batch_size.value_or(configured));
}

}  // namespace shadowsync::worker
