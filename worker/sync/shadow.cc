#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/rendezvous.h"
#include "worker/sync/round_body.h"
#include "worker/sync/strategies.h"
#include "worker/sync/sync_math.h"

namespace shadowsync::worker {
namespace {

// How often a trainer waiting at the warm-up's start barrier checks whether
// the job is past the warm-up.
constexpr absl::Duration kWarmupPollInterval = absl::Seconds(1);

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
        LOG(WARNING) << "shadow sync: joining the final round: " << s.message();
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
        LOG(WARNING) << "shadow sync: no warm-up (" << warming.status().message() << ")";
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
      LOG(WARNING) << "shadow sync: leaving the rounds: " << s.message();
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
      const RoundStart start = BeginRound(*client_);
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
        LOG(INFO) << "shadow sync: the syncer answers again after " << failures_
                  << " failed attempt(s)";
        outage_ = false;
        failures_ = 0;
      }
      if (config_.apply_mode == SyncApplyMode::kDelta) {
        for (size_t i = 0; i < n; ++i) target[i] -= snapshot[i];
        idle += AccessReplica([&] { AddRelaxed(replica_.params, target); });
      } else {
        idle += AccessReplica([&] { StoreRelaxed(replica_.params, target); });
      }
      const absl::Duration latency = EndRound(start, *client_);
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
      LOG(INFO) << "shadow sync: resuming a begun share; no warm-up";
      return false;
    }
    // Also catches a trainer restarted before it had trained anything.
    SS_ASSIGN_OR_RETURN(const uint64_t rounds, client_->RoundsCompleted(WarmupGroup()));
    if (rounds > 0) {
      LOG(INFO) << "shadow sync: the job's warm-up has begun without this trainer; skipping it";
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
        LOG(INFO) << "shadow sync: the others are past the warm-up; skipping it";
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
      LOG(WARNING) << "shadow sync: " << s.message() << "; starting without it";
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
    const RoundStart start = BeginRound(*client_);
    absl::Status s = AverageReplica(WarmupGroup()).status();
    if (s.ok()) {
      EndRound(start, *client_);
      if (++warmup_rounds_ < config_.warmup_steps) return absl::OkStatus();
    } else if (!Transient(s)) {
      return s;
    } else {
      // The shadow loop rides out syncer outages; the warm-up does not wait.
      LOG(WARNING) << "shadow sync: warm-up round failed (" << s.message()
                   << "); ending the warm-up";
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
      LOG(WARNING) << "shadow sync: final round: " << r.status().message()
                   << "; keeping this replica";
      return;
    }
    if (r->members < config_.num_trainers) {
      LOG(WARNING) << "shadow sync: final round averaged " << r->members << " of "
                   << config_.num_trainers << " trainers (the others were done earlier than the "
                   << "syncer's member timeout allows, or had failed)";
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
      LOG(WARNING) << "shadow sync: " << s.message() << "; retrying in the background";
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

}  // namespace

std::unique_ptr<SyncStrategy> NewShadowStrategy(const SyncConfig& config,
                                                syncer::SyncerClient* client,
                                                prometheus::Registry* registry) {
  return std::make_unique<ShadowStrategy>(config, client, registry);
}

}  // namespace shadowsync::worker
