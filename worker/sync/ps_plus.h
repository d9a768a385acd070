// ps-plus (docs/sync.md): decoupled push and eager pull. Each thread's pull
// of the global weights for its next step is issued before that step
// computes, together with its push (one asynchronous AddAndPull), and the
// pushed update uses a learning rate f(lr, tau) lowered by the gradient's
// staleness tau. docs/sync.md defines tau.
#ifndef SHADOWSYNC_WORKER_SYNC_PS_PLUS_H_
#define SHADOWSYNC_WORKER_SYNC_PS_PLUS_H_

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
#include "worker/sync/strategy.h"

namespace shadowsync::worker {

// The learning rate of an update of staleness `tau` (>= 0):
//   kNone            lr
//   kInverse         lr / max(1, tau)   (Zhang et al.'s staleness-aware rule)
//   kInversePlusOne  lr / (1 + tau)
//   kExponential     lr * gamma^tau
float StalenessLearningRate(StalenessLrRule rule, float lr, int64_t tau, double gamma);

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

#endif  // SHADOWSYNC_WORKER_SYNC_PS_PLUS_H_
