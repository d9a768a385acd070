// The staleness-bounded and staleness-aware asynchronous strategies
// (docs/sync.md):
//
//   ssp      asp plus a clock: every step's optimizer delta goes to the
//            syncer's global weights (AddAndPull, which replace the
//            replica), and a thread waits while its trainer is more than
//            s = sync.ssp.staleness clocks ahead of the slowest live trainer.
//   ps-plus  decoupled push and eager pull: each thread's pull of the global
//            weights for its next step is issued before that step computes,
//            together with its push (one asynchronous AddAndPull: the centre
//            right after the add comes back), and the pushed update uses a
//            learning rate f(lr, tau) lowered by the gradient's staleness tau.
//
// SSP clock. A trainer's clock is base + floor(S / T): S the Hogwild steps
// its threads completed (all threads, counted in AfterStep), T the trainer's
// thread count (DenseReplica::threads), base the clock the syncer gave it
// when it joined (0 for trainers that start together; the slowest's clock
// for a late or returning one). After each step a thread waits until
// clock <= min over live trainers' clocks + s, so a trainer never starts a
// step while its clock leads the slowest by more than s: s = 0 is lock-step
// (BSP's limit), a huge s never waits (ASP). Slack of the definition: with
// T > 1, up to T - 1 threads already past the check may each complete one
// more step, so the completed clock may momentarily lead by s + 1. Clock
// advances that need no wait are reported without blocking (the syncer's
// minimum never decreases, so a report within the known bound never waits);
// the others block in AfterStep and count as blocked time.
//
// PS+ staleness. Every pull carries the global version V (adds applied to
// the centre, CentreResponse.version of replica 0). Landing a pull stores
// its weights in the replica when V is newer than the replica's version R.
// A thread records R when its step starts (AfterStep of the previous step,
// after landing a pull that is already there); when it pushes, it lands
// its pending pull (waiting for it if needed: blocked time) and computes
//   tau = R_now - R_start >= 0,
// the global adds that the weights it computed on are missing, its own
// earlier pushes included (its own delta is also added to the replica
// locally at once, so with a fast syncer and one thread tau is 0 or 1).
// The update pushed is the optimizer delta with learning rate
// StalenessLearningRate(rule, lr, tau).
#ifndef SHADOWSYNC_WORKER_STALENESS_STRATEGIES_H_
#define SHADOWSYNC_WORKER_STALENESS_STRATEGIES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "jobspec/job_spec.h"
#include "worker/sync_strategy.h"

namespace prometheus {
class Histogram;
}  // namespace prometheus
namespace shadowsync::syncer {
struct ClockResult;
}  // namespace shadowsync::syncer

namespace shadowsync::worker {

// The learning rate of an update of staleness `tau` (>= 0):
//   kNone            lr
//   kInverse         lr / max(1, tau)   (Zhang et al.'s staleness-aware rule)
//   kInversePlusOne  lr / (1 + tau)
//   kExponential     lr * gamma^tau
float StalenessLearningRate(StalenessLrRule rule, float lr, int64_t tau, double gamma);

// ssp. Thread-safe as the SyncStrategy contract requires.
class SspStrategy final : public SyncStrategy {
 public:
  // INVALID_ARGUMENT if config.ssp.staleness < 0. `client` must outlive the
  // strategy.
  static absl::StatusOr<std::unique_ptr<SspStrategy>> Create(const SyncConfig& config,
                                                             syncer::SyncerClient* client,
                                                             prometheus::Registry* registry);
  ~SspStrategy() override;

  absl::Status Start(const DenseReplica& replica) override;
  absl::Status ApplyGradient(int thread, std::span<const float> grad) override;
  absl::Status AfterStep(int thread) override;
  absl::Status Finish() override;

  // This trainer's clock (see above).
  int64_t clock() const;
  // Waits for the slowest trainer: clock calls the syncer held (not answered
  // at once), how many, and their total time. shadowsync_trainer_ssp_wait_
  // seconds observes each; blocked time counts every blocking clock call.
  int64_t waits() const { return waits_.load(std::memory_order_relaxed); }
  absl::Duration wait_time() const {
    return absl::Microseconds(wait_micros_.load(std::memory_order_relaxed));
  }
  // clock, waits and wait_seconds, for progress files and reports.
  nlohmann::json Details() const override;

 private:
  SspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
              prometheus::Registry* registry);
  // Adopts a syncer answer: the known minimum, and the base on a (re)join
  // (`steps_part`: floor(S / T) of the reported clock).
  void Learn(const syncer::ClockResult& r, int64_t steps_part);
  void ReportAsync(int64_t clock, int64_t steps_part);

  syncer::SyncerClient* const client_;
  const int64_t staleness_;
  prometheus::Histogram* wait_histogram_ = nullptr;
  std::vector<std::vector<float>> delta_, global_;  // One per thread.
  int threads_ = 1;
  std::atomic<int64_t> base_{0};
  std::atomic<int64_t> known_min_{0};
  std::atomic<int64_t> reported_{-1};  // Largest clock sent.
  std::atomic<int64_t> waits_{0};
  std::atomic<int64_t> wait_micros_{0};
  Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // Asynchronous reports.
  absl::Status report_error_ ABSL_GUARDED_BY(mu_);
};

// ps-plus. Thread-safe as the SyncStrategy contract requires.
class PsPlusStrategy final : public SyncStrategy {
 public:
  // INVALID_ARGUMENT if config.ps_plus.gamma is not in (0, 1]. `client`
  // must outlive the strategy.
  static absl::StatusOr<std::unique_ptr<PsPlusStrategy>> Create(const SyncConfig& config,
                                                                syncer::SyncerClient* client,
                                                                prometheus::Registry* registry);
  // Waits for the calls in flight.
  ~PsPlusStrategy() override;

  absl::Status Start(const DenseReplica& replica) override;
  absl::Status ApplyGradient(int thread, std::span<const float> grad) override;
  absl::Status AfterStep(int thread) override;
  // Waits for the pushes and pulls in flight; the first failed push's error.
  absl::Status Finish() override;

  // Staleness of the pushed updates: their count, and the mean tau.
  int64_t pushes() const { return pushes_.load(std::memory_order_relaxed); }
  double mean_staleness() const;
  // pushes and mean_staleness, for progress files and reports.
  nlohmann::json Details() const override;
  // The replica's global version R (see above).
  uint64_t replica_version() const;
  // The tau of `thread`'s last push. Call from that thread or after Finish.
  int64_t last_staleness(int thread) const { return threads_[thread]->last_tau; }

 private:
  // One training thread's calls in flight. The callbacks write the pulled
  // weights and version before marking them done under mu.
  struct ThreadState {
    std::vector<float> pulled, delta;
    uint64_t pulled_version = 0;
    uint64_t start_version = 0;  // R when the current step started.
    int64_t last_tau = 0;
    absl::Time pull_issued;
    Mutex mu;
    bool pull_pending ABSL_GUARDED_BY(mu) = false;
    bool pull_done ABSL_GUARDED_BY(mu) = false;
    absl::Status pull_status ABSL_GUARDED_BY(mu);
    absl::Time pull_answered ABSL_GUARDED_BY(mu);
    absl::Status push_status ABSL_GUARDED_BY(mu);  // The first failed push's, for Finish.
  };

  PsPlusStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                 prometheus::Registry* registry);
  // The thread's next pull; with `push`, in one call with the push of
  // ts.delta. REQUIRES: no pull of the thread pending.
  void IssuePull(ThreadState& ts, bool push);
  // Lands the thread's pull if it is done (or, with `wait`, once it is).
  absl::Status Land(ThreadState& ts, bool wait);
  void WaitIdle(ThreadState& ts);

  syncer::SyncerClient* const client_;
  prometheus::Histogram* staleness_histogram_ = nullptr;
  std::vector<std::unique_ptr<ThreadState>> threads_;
  std::atomic<int64_t> pushes_{0};
  std::atomic<int64_t> tau_sum_{0};
  mutable Mutex land_mu_;  // Serializes stores of pulled weights.
  uint64_t replica_version_ ABSL_GUARDED_BY(land_mu_) = 0;
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_STALENESS_STRATEGIES_H_
