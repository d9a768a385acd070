// The interface between a trainer's Hogwild threads and a dense-sync
// algorithm (docs/sync.md describes the algorithms): the trainer calls the
// hooks below from its threads; each algorithm lives in its own file of
// worker/sync/ and is built by MakeSyncStrategy (factory.h).
//
// Thread-safety: a strategy's hooks are called concurrently by the trainer's
// threads, each passing its own `thread` index; Start and Finish are called
// once, by one thread, before and after every other hook. stats(),
// Details() and BatchSize() may be called from any thread.
#ifndef SHADOWSYNC_WORKER_SYNC_STRATEGY_H_
#define SHADOWSYNC_WORKER_SYNC_STRATEGY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "jobspec/job_spec.h"
#include "model/optimizer.h"
#include "nlohmann/json.hpp"
#include "prometheus/histogram.h"
#include "worker/replica_gate.h"
#include "worker/sync/sync_math.h"

namespace prometheus {
class Registry;
}  // namespace prometheus
namespace shadowsync::syncer {
class SyncerClient;
}  // namespace shadowsync::syncer

namespace shadowsync::worker {

// How long a strategy whose rounds need every trainer waits at its start
// for the others (they may still be loading their data).
inline constexpr absl::Duration kStartBarrierTimeout = absl::Minutes(10);

// Resolved settings of a strategy (the job spec's sync block with its
// defaults filled in for the job's trainer count).
struct SyncConfig {
  SyncAlgorithm algorithm = SyncAlgorithm::kNone;
  int interval = 10;  // fg-*: steps of each thread between two rounds (k).
  absl::Duration min_interval = absl::ZeroDuration();  // shadow-*: pause between rounds.
  // shadow-*: share of wall time spent in rounds; after a round of latency L,
  // W of it waiting for other trainers or a step's end, the shadow thread
  // pauses max(min_interval, (L - W) * (1 - d) / d).
  double duty_cycle = 0.02;
  // shadow-*: foreground averaging after each of the first warmup_steps
  // steps of every thread; a final averaging round at Finish.
  int64_t warmup_steps = 8;
  bool final_average = true;
  // This trainer resumes a share it had begun (restarted into a running
  // job): shadow-* skip the warm-up, which the others are past.
  bool resumed = false;
  SyncApplyMode apply_mode = SyncApplyMode::kDelta;
  float easgd_alpha = 0.45f;
  BmufParams bmuf;
  std::string group;  // All-reduce group on the syncer ("" = every trainer).
  // This trainer and the job's trainer count (ds-sync groups, ssp clocks,
  // sync-switch medians).
  int trainer_index = 0;
  int num_trainers = 1;
  // The factor SyncStrategy::Start puts on the replica's dense learning rate.
  // SyncConfigFromJob sets it from sync.learningRateScale for asp, ssp and
  // ps-plus (default 1 / num_trainers), from sync.replicaLearningRateScale for
  // shadow-* and fg-* (default 1 / sqrt(num_trainers) with Adagrad), else 1.
  double lr_scale = 1.0;
  SspSpec ssp;
  DsSyncSpec ds_sync;
  SyncSwitchSpec sync_switch;
  PsPlusSpec ps_plus;
};

// Totals since the strategy started.
struct SyncStats {
  int64_t rounds = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  double round_seconds = 0;    // Summed over rounds.
  double blocked_seconds = 0;  // Training threads' time spent waiting on sync, summed.
  int64_t gap_steps = 0;       // Local steps between rounds, summed over rounds.
  double mean_round_seconds() const { return rounds > 0 ? round_seconds / rounds : 0; }
  double mean_gap_steps() const { return rounds > 0 ? double(gap_steps) / rounds : 0; }
};

// The replica a strategy synchronizes: the trainer's shared dense
// parameters and optimizer state (relaxed atomics, see optimizer.h).
struct DenseReplica {
  std::span<float> params;
  std::span<float> state;
  model::OptimizerConfig optimizer;
  int threads = 1;  // Hogwild threads that call the hooks, indices [0, threads).
  // The trainer's (replica_gate.h): a strategy's own threads reach the
  // replica through it, and a serialised gate's lone training thread writes
  // with plain stores. Null: every thread accesses it with relaxed atomics.
  ReplicaGate* gate = nullptr;
  // The trainer's learning-rate warm-up factor (model::WarmupFactor), by
  // which every dense update multiplies optimizer.learning_rate. Null: 1.
  const std::atomic<float>* lr_factor = nullptr;
};

class SyncStrategy {
 public:
  virtual ~SyncStrategy();

  // Called once before training starts; `replica` outlives Finish().
  virtual absl::Status Start(const DenseReplica& replica);
  // The dense update of one step of `thread`, whose gradient is `grad`.
  // Default: the local optimizer, applied Hogwild-style.
  virtual absl::Status ApplyGradient(int thread, std::span<const float> grad);
  // After every step of `thread` (its update and its sparse push are done).
  virtual absl::Status AfterStep(int thread);
  // `thread` has no more data and will call no hook again.
  virtual void ThreadDone(int thread) {}
  // After every thread is done: stops background work and leaves the
  // syncer's rounds.
  virtual absl::Status Finish() { return absl::OkStatus(); }
  // What is particular to the algorithm, for progress files and reports
  // (e.g. sync-switch's current mode and switches, ps-plus's mean
  // staleness). A "mode" string, if present, is shown in the progress line.
  // Thread-safe. Default: empty.
  virtual nlohmann::json Details() const { return nlohmann::json::object(); }
  // Examples in the next step's batch, given the configured batch size; at
  // most MaxBatchSize(configured). Thread-safe. Default: configured.
  virtual int BatchSize(int configured) const { return configured; }
  // The largest batch BatchSize may ever ask for: the trainer sizes its
  // buffers by it.
  virtual int MaxBatchSize(int configured) const { return configured; }

  SyncStats stats() const;
  const SyncConfig& config() const { return config_; }

 protected:
  using Clock = std::chrono::steady_clock;
  static absl::Duration Since(Clock::time_point start) {
    return absl::FromChrono(Clock::now() - start);
  }

  SyncStrategy(SyncConfig config, prometheus::Registry* registry);
  // Bookkeeping shared by every strategy: a round is measured from
  // BeginRound (its start and the client's byte counters then) to EndRound,
  // which records it and returns its latency.
  struct RoundStart {
    Clock::time_point time;
    int64_t bytes_sent = 0;
    int64_t bytes_received = 0;
  };
  static RoundStart BeginRound(const syncer::SyncerClient& client);
  absl::Duration EndRound(const RoundStart& start, const syncer::SyncerClient& client);
  void RecordRound(absl::Duration latency, int64_t bytes_sent, int64_t bytes_received);
  void RecordBlocked(absl::Duration blocked);
  // Runs `fn`, an access to the replica from a thread of the strategy's own,
  // through the replica's gate (between two steps of a lone training thread).
  // Returns the time spent waiting for that.
  absl::Duration AccessReplica(absl::FunctionRef<void()> fn);
  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }
  // replica_.optimizer at the trainer's current warm-up factor: what a dense
  // update applies now.
  model::OptimizerConfig DenseOptimizer() const;
  // A histogram labelled with the algorithm, in `registry` (null: none).
  prometheus::Histogram* AddHistogram(prometheus::Registry* registry, const std::string& name,
                                      const std::string& help,
                                      prometheus::Histogram::BucketBoundaries buckets) const;

  const SyncConfig config_;
  DenseReplica replica_;

 private:
  struct Metrics;
  std::unique_ptr<Metrics> metrics_;
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> rounds_{0};
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> bytes_received_{0};
  std::atomic<int64_t> round_micros_{0};
  std::atomic<int64_t> blocked_micros_{0};
  std::atomic<int64_t> gap_steps_{0};
  std::atomic<int64_t> last_round_steps_{0};
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_STRATEGY_H_
