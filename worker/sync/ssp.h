// ssp (docs/sync.md): asp plus a clock on the syncer. Every step's optimizer
// delta goes to the syncer's global weights (AddAndPull, which replace the
// replica), and a thread waits while its trainer is more than
// s = sync.ssp.staleness clocks ahead of the slowest live trainer.
// docs/sync.md defines the clock and its slack.
#ifndef SHADOWSYNC_WORKER_SYNC_SSP_H_
#define SHADOWSYNC_WORKER_SYNC_SSP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "worker/sync/strategy.h"

namespace shadowsync::syncer {
struct ClockResult;
}  // namespace shadowsync::syncer

namespace shadowsync::worker {

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

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_SSP_H_
