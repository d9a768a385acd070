// Dense synchronization strategies (DESIGN.md §5): one interface the
// trainer calls from its Hogwild threads, one implementation per algorithm.
//
//   none              independent replicas
//   shadow-easgd/ma/bmuf  a background (shadow) thread loops over sync rounds
//                     and applies each result as a delta on the snapshot it
//                     sent, so Hogwild progress made meanwhile is kept
//   fg-easgd/ma/bmuf  the same round bodies in the foreground: every k steps
//                     of each thread, all of the trainer's threads stop and
//                     the last to arrive runs one round
//   bsp               every step: the trainer's threads pool their gradients,
//                     the pooled mean is all-reduced over the trainers, and
//                     one optimizer update is applied (batch N * T * b)
//   asp               every step of every thread: the optimizer update goes
//                     to the syncer's global weights, which come back and
//                     replace the replica (no waiting for other trainers)
//
// Round bodies (sync_math.h has the formulas): EASGD pulls the syncer's
// centre c, moves the replica by -alpha (s - c) and adds alpha (s - c) to
// the centre; MA all-reduces the replicas' mean; BMUF filters that mean
// through block momentum.
#ifndef SHADOWSYNC_WORKER_SYNC_STRATEGY_H_
#define SHADOWSYNC_WORKER_SYNC_STRATEGY_H_

#include <atomic>
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
#include "worker/replica_gate.h"
#include "worker/sync_math.h"

namespace prometheus {
class Registry;
}  // namespace prometheus
namespace shadowsync::syncer {
class SyncerClient;
}  // namespace shadowsync::syncer

namespace shadowsync::worker {

class Rendezvous;

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

// SyncConfig from a job, for a job of spec.trainer.replicas trainers.
SyncConfig SyncConfigFromJob(const JobSpec& spec);

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
  SyncStrategy(SyncConfig config, prometheus::Registry* registry);
  // Bookkeeping shared by every strategy.
  void RecordRound(absl::Duration latency, int64_t bytes_sent, int64_t bytes_received);
  void RecordBlocked(absl::Duration blocked);
  // Runs `fn`, an access to the replica from a thread of the strategy's own,
  // through the replica's gate (between two steps of a lone training thread).
  // Returns the time spent waiting for that.
  absl::Duration AccessReplica(absl::FunctionRef<void()> fn);
  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }

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

// A strategy whose training threads meet every `interval` local steps (per
// thread) for one synchronous round: the last to arrive runs Round() while
// the others wait, so the replica is the round's alone. fg-easgd/ma/bmuf and
// ds-sync are built on it. Start() joins nothing: subclasses that need
// groups join them in their own Start(), after calling this one.
class IntervalRoundStrategy : public SyncStrategy {
 public:
  ~IntervalRoundStrategy() override;
  absl::Status Start(const DenseReplica& replica) override;
  absl::Status AfterStep(int thread) override;
  void ThreadDone(int thread) override;
  absl::Status Finish() override;

 protected:
  IntervalRoundStrategy(SyncConfig config, syncer::SyncerClient* client,
                        prometheus::Registry* registry);
  // One round; only ever one at a time, with every other thread waiting.
  virtual absl::Status Round() = 0;

  syncer::SyncerClient* const client_;

 private:
  std::unique_ptr<Rendezvous> rendezvous_;
  std::vector<int64_t> thread_steps_;  // Each entry written by its own thread only.
};

// The strategy of `config`. `client` reaches the syncer and must outlive the
// strategy; it may be null only for `none`. `registry` (may be null) gets the
// shadowsync_trainer_sync_* metrics. Unimplemented algorithms are
// Unimplemented errors naming them.
absl::StatusOr<std::unique_ptr<SyncStrategy>> MakeSyncStrategy(const SyncConfig& config,
                                                               syncer::SyncerClient* client,
                                                               prometheus::Registry* registry);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_STRATEGY_H_
