// sync-switch (Sync-Switch, sync-algorithms.md §5): BSP first, ASP after,
// switched offline at a set round or online while a trainer straggles, by
// every trainer at the same checkpoint. docs/sync.md defines the policy,
// the switch and what a restarted trainer does.
//
// Thread-safety: the SyncStrategy hooks as documented there; status(),
// asp_batch_size() and SetTotalSteps() may be called from any thread.
#ifndef SHADOWSYNC_WORKER_SYNC_SYNC_SWITCH_H_
#define SHADOWSYNC_WORKER_SYNC_SYNC_SWITCH_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "worker/sync/rendezvous.h"
#include "worker/sync/strategy.h"

namespace shadowsync::worker {

enum class SyncSwitchMode { kBsp, kAsp };

// What a job report or status shows about a sync-switch trainer.
struct SyncSwitchStatus {
  SyncSwitchMode mode = SyncSwitchMode::kBsp;
  bool bsp_share_done = false;  // The BSP share is trained: ASP until the end.
  int64_t bsp_to_asp = 0;       // Switches of each direction so far.
  int64_t asp_to_bsp = 0;
  int64_t bsp_rounds = 0;  // BSP rounds completed (identical on every trainer).
  // The BSP share in rounds; kUnbounded when switchFraction is 1.
  int64_t switch_round = 0;
  // The straggler that caused the last switch to ASP; -1 = none yet, or the
  // BSP share's end did.
  int last_straggler = -1;
  // Restarted into a running job: ASP until the end, outside the lockstep.
  bool restarted = false;
  int64_t switches() const { return bsp_to_asp + asp_to_bsp; }
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
};

// One window's verdict over the trainers' step times.
struct StragglerVerdict {
  int straggler = -1;         // The slowest trainer above the threshold; -1 = none.
  double step_seconds = 0;    // Its step time (when there is one).
  double median_seconds = 0;  // The lower median over the reporting trainers.
};

// The median of one trainer's step times in a window (robust to a single
// spike); 0 for no samples. Reorders `samples`.
double WindowStepSeconds(std::vector<double>& samples);

// `step_seconds[i]`: trainer i's window step time, 0 for a trainer that did
// not report (it left). A straggler's time exceeds `factor` times the lower
// median of the reported times; with several, the slowest is named.
StragglerVerdict FindStraggler(std::span<const float> step_seconds, double factor);

class SyncSwitchStrategy final : public SyncStrategy {
 public:
  // `client` must outlive the strategy; `registry` may be null.
  static absl::StatusOr<std::unique_ptr<SyncSwitchStrategy>> Create(const SyncConfig& config,
                                                                    syncer::SyncerClient* client,
                                                                    prometheus::Registry* registry);
  ~SyncSwitchStrategy() override;

  // The steps each training thread would run over the whole job under BSP;
  // the switch comes after switchFraction of them unless switchStep is set.
  // Every trainer must pass the same value, derived from job-wide numbers
  // (e.g. ceil(job examples / (trainers * threads * batchSize))), not from
  // its own data share: BSP needs all trainers to switch at one round.
  // REQUIRES: before Start().
  void SetTotalSteps(int64_t steps_per_thread);

  absl::Status Start(const DenseReplica& replica) override;
  absl::Status ApplyGradient(int thread, std::span<const float> grad) override;
  void ThreadDone(int thread) override;
  absl::Status Finish() override;

  SyncSwitchStatus status() const;
  // status() for progress files and reports: mode "bsp"/"asp" and the
  // switches of each direction.
  nlohmann::json Details() const override;
  // Examples per thread step the trainer should use while in ASP mode
  // (aspBatchSize); nullopt = its own batch size. Applying it is the
  // trainer's job: it reads status().mode between batches.
  std::optional<int> asp_batch_size() const { return config_.sync_switch.asp_batch_size; }
  int BatchSize(int configured) const override;
  int MaxBatchSize(int configured) const override;
  // The learning rate of the ASP phases' updates. REQUIRES: Start() returned.
  float asp_learning_rate() const { return asp_replica_.optimizer.learning_rate; }

  // All-reduce group of the step-time exchanges and switch barriers.
  static constexpr char kGroup[] = "sync-switch";

 private:
  struct Metrics;
  // Per Hogwild thread; written by its thread, and by the checkpoint runner
  // while the thread waits at the checkpoint.
  struct ThreadState {
    int64_t phase_steps = 0;  // Steps since the last switch.
    int64_t bsp_steps = 0;    // BSP steps since the start.
    std::optional<std::chrono::steady_clock::time_point> last_return;
  };

  SyncSwitchStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                     prometheus::Registry* registry, std::unique_ptr<SyncStrategy> bsp,
                     std::unique_ptr<SyncStrategy> asp);

  // Start() of a trainer restarted into a running job.
  absl::Status StartRestarted(uint64_t bsp_rounds);
  bool CheckpointDue(const ThreadState& ts) const;
  // Run by the last thread to arrive at a checkpoint.
  absl::Status Checkpoint();
  absl::Status SwitchToAsp();
  absl::Status SwitchToBsp();
  // One step-time round: this trainer's window time `mine` in, every
  // trainer's times out (in `buffer`, n floats), judged.
  absl::StatusOr<StragglerVerdict> Exchange(float mine, std::vector<float>& buffer);
  // This trainer's window step time; clears the window.
  float TakeWindowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex_mu_);
  // ASP steps: consumes a finished background exchange and starts the next.
  absl::Status PollExchangeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ex_mu_);
  void ExchangeLoop();
  void StopExchanger();
  // An all-reduce of nothing in kGroup; returns the members.
  absl::StatusOr<int> Barrier();
  // Reports the inner strategies' rounds and blocked time as this one's.
  void ForwardStats();

  syncer::SyncerClient* const client_;
  const std::unique_ptr<SyncStrategy> bsp_;
  const std::unique_ptr<SyncStrategy> asp_;
  std::unique_ptr<Metrics> switch_metrics_;
  std::atomic<int64_t> total_steps_{0};

  // Set by Start.
  std::atomic<int64_t> switch_round_{0};
  DenseReplica asp_replica_;  // The replica with the ASP learning rate.
  std::unique_ptr<Rendezvous> gate_;
  std::vector<ThreadState> threads_;
  std::vector<float> scratch_;    // Checkpoint runner only.
  std::vector<float> ex_buffer_;  // Exchanger thread only.
  std::thread exchanger_;         // Online policy only.

  // Written by the checkpoint runner only, while every other thread waits.
  std::atomic<SyncSwitchMode> mode_{SyncSwitchMode::kBsp};
  std::atomic<bool> bsp_share_done_{false};
  std::atomic<bool> restarted_{false};  // Set by Start.
  // ASP: the exchange found no straggler; the next checkpoint returns to BSP.
  std::atomic<bool> back_to_bsp_{false};

  Mutex ex_mu_;
  std::vector<double> samples_ ABSL_GUARDED_BY(ex_mu_);      // Step times (s) of the window.
  int64_t asp_steps_ ABSL_GUARDED_BY(ex_mu_) = 0;            // ASP steps of the window.
  std::optional<float> ex_request_ ABSL_GUARDED_BY(ex_mu_);  // For the exchanger.
  std::optional<absl::StatusOr<StragglerVerdict>> ex_result_ ABSL_GUARDED_BY(ex_mu_);
  bool ex_busy_ ABSL_GUARDED_BY(ex_mu_) = false;  // Requested and not yet consumed.
  bool ex_stop_ ABSL_GUARDED_BY(ex_mu_) = false;
  StragglerVerdict last_verdict_ ABSL_GUARDED_BY(ex_mu_);  // Of the return to BSP.

  mutable Mutex mu_;
  int64_t bsp_to_asp_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t asp_to_bsp_ ABSL_GUARDED_BY(mu_) = 0;
  int last_straggler_ ABSL_GUARDED_BY(mu_) = -1;
  SyncStats forwarded_ ABSL_GUARDED_BY(mu_);  // Inner totals already reported.
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_SYNC_SWITCH_H_
