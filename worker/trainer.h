// The training core of one trainer: T Hogwild threads share one dense
// replica without locks (relaxed atomics, see model/optimizer.h), look
// embedding rows up in an EmbeddingStore (in-process, or the parameter-server
// client) and push their gradients back; an optional SyncStrategy keeps the
// replica in agreement with other trainers'.
//
// A Trainer is driven by one thread (Train, Evaluate); it runs its own
// worker threads internally.
#ifndef SHADOWSYNC_WORKER_TRAINER_H_
#define SHADOWSYNC_WORKER_TRAINER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/eval_metrics.h"
#include "data/criteo_reader.h"
#include "model/dlrm.h"
#include "model/embedding_table.h"
#include "model/gemm.h"
#include "model/optimizer.h"
#include "nlohmann/json.hpp"
#include "worker/learning_check.h"
#include "worker/replica_gate.h"

namespace shadowsync::worker {

class SyncStrategy;  // worker/sync/strategy.h

struct Progress {
  int64_t examples = 0;            // Trained so far.
  int64_t total = -1;              // Examples in the run, when known (preloaded data).
  double seconds = 0;              // Since training started.
  double examples_per_second = 0;  // Over the last interval.
  double loss = 0;                 // Mean training loss over the last interval.
  double train_ne = 0;             // Progressive NE since the start.
  double train_logloss = 0;        // Progressive log loss since the start.
  nlohmann::json sync_details;     // SyncStrategy::Details(), when there is one.
  // LearningCheck's finding, once there is one; empty while the run learns.
  std::string learning_problem;
};

struct TrainerOptions {
  int threads = 2;                   // Hogwild threads. Default: 2.
  int batch_size = 256;              // Examples per thread step. Default: 256.
  model::OptimizerConfig optimizer;  // Dense parameters and embedding rows alike.
  // The dense learning rate rises linearly over this trainer's first steps
  // (all threads' steps counted; model::WarmupFactor). Skipped when the dense
  // optimizer state is not empty at the start (a resumed or warm-started
  // Adagrad run). 0: none.
  int64_t lr_warmup_steps = 0;
  // Whether the run is learning (worker/learning_check.h). A problem is
  // logged and reported; with stop_when_not_learning, training also stops.
  LearningCheckOptions learning_check;
  bool stop_when_not_learning = false;
  uint64_t seed = 1;  // Dense initialisation seed.
  // Of the MLP GEMMs, in training and evaluation alike (model::DensePrecision).
  model::DensePrecision precision = model::DensePrecision::kFp32;
  // The fp32 GEMM kernel; nullopt: the fastest on this host
  // (model::ResolveGemmKernel). A score that must repeat another's bit for
  // bit names the kernel that one ran.
  std::optional<model::GemmKernel> gemm;
  int64_t max_examples = -1;  // Stop after this many; -1 = one full pass.
  // Skip the first examples of the input (a restarted trainer resuming its
  // share); max_examples counts the skipped ones too.
  int64_t skip_examples = 0;
  // Parse all input before the clock starts, so examples/s measures training
  // alone (benchmarks); otherwise parsing streams alongside training.
  bool preload = false;
  ReaderOptions reader;  // Parse threads, sharding.
  double progress_interval_seconds = 2.0;
  std::function<void(const Progress&)> on_progress;  // Called from the driving thread.
  // Looks the next batch's rows up while the current batch is computed (one
  // extra in-flight lookup per thread; worth it when the store is remote).
  bool prefetch = false;
  // Dense synchronization with other trainers (worker/sync/strategy.h); null = none.
  // Must outlive Train; Train calls its Start and Finish.
  SyncStrategy* sync = nullptr;
  // Straggler injection (tests, benchmarks): each step, after its updates
  // (before the sync strategy's AfterStep), the thread sleeps step_delay,
  // plus a uniform random [0, step_jitter), plus (slowdown - 1) times the
  // iteration since the thread's previous step ended (reading, lookups,
  // compute, updates, push) less its waits on sync, so slowdown = 4 makes
  // this trainer's work 4x as slow while its network stays as fast.
  absl::Duration step_delay = absl::ZeroDuration();
  absl::Duration step_jitter = absl::ZeroDuration();
  double slowdown = 1.0;
};

struct TrainReport {
  int64_t examples = 0;
  double seconds = 0;      // Training wall time (excludes preloading).
  double cpu_seconds = 0;  // The whole process's CPU time over `seconds`.
  // Ending the sync strategy after training (e.g. waiting for the other
  // trainers' final averaging round); not part of `seconds`.
  double sync_finish_seconds = 0;
  double load_seconds = 0;  // Preloading time (0 when streaming).
  double examples_per_second = 0;
  double train_ne = 0;  // Progressive NE: each batch scored before its update.
  double train_logloss = 0;
  int64_t malformed_lines = 0;
  std::vector<std::string> first_errors;
  // LearningCheck's finding; empty when the run learned. Training stopped at
  // it when TrainerOptions::stop_when_not_learning.
  std::string learning_problem;
  // The fp32 GEMM kernel the trainer resolved at construction, and why.
  model::GemmChoice gemm;
};

class Trainer {
 public:
  // `tables` gives each table's hash-bucket count; `store` must outlive the
  // trainer. Initialises the dense parameters from options.seed.
  Trainer(model::DlrmConfig config, std::vector<model::EmbeddingTableConfig> tables,
          TrainerOptions options, model::EmbeddingStore* store);
  ~Trainer();

  // One pass over `paths` (or max_examples). Returns the reader's errors for
  // missing files; malformed lines are counted in the report, not errors.
  absl::StatusOr<TrainReport> Train(const std::vector<std::string>& paths);

  // Scores every example of `paths` with the current parameters.
  absl::StatusOr<QualityReport> Evaluate(const std::vector<std::string>& paths);
  // Scores the first `max_examples` (-1 = all) of `paths` on one thread with
  // a snapshot of the parameters; may run while Train does (e.g. from
  // on_progress), for quality curves.
  absl::StatusOr<QualityReport> EvaluateSnapshot(const std::vector<std::string>& paths,
                                                 int64_t max_examples) const;

  const model::Dlrm& model() const { return model_; }
  // The fp32 GEMM kernel of training and evaluation alike, resolved at
  // construction.
  const model::GemmChoice& gemm() const { return gemm_; }
  // The dense replica and its optimizer state. REQUIRES: no Train running.
  std::vector<float>& params() { return params_; }
  std::vector<float>& dense_state() { return dense_state_; }
  // Copies the dense replica and its optimizer state into *params and
  // *dense_state (resized). Like EvaluateSnapshot, it may run while Train
  // does (e.g. from on_progress, for checkpoints): with one training thread
  // it waits for the end of a step.
  void SnapshotDense(std::vector<float>* params, std::vector<float>* dense_state) const;

 private:
  class BatchSource;
  struct Batch;
  struct ThreadState;

  // Runs `body(thread_index)` on `count` threads and calls `tick` on the
  // calling thread every progress interval until they finish. Returns the
  // first error a body returned.
  absl::Status RunWorkers(int count, const std::function<absl::Status(int)>& body,
                          const std::function<void()>& tick) const;
  absl::StatusOr<QualityReport> EvaluateParams(const float* params,
                                               const std::vector<std::string>& paths,
                                               int64_t max_examples, int threads) const;
  // options_.learning_check, judging no window that starts in the warm-up
  // (warmup_steps_, set first).
  LearningCheckOptions LearningCheckAfterWarmup() const;
  // One Hogwild step on `batch`, whose rows are looked up.
  absl::Status TrainStep(Batch& batch, ThreadState& ts);
  // Sleeps as TrainerOptions' straggler settings say, for the step that
  // started at `step_start`.
  void Straggle(std::chrono::steady_clock::time_point step_start, ThreadState& ts) const;
  // Collects the batch's unique rows per table (examples [begin, end) of `block`).
  void CollectRows(std::shared_ptr<const ExampleBlock> block, int64_t begin, int64_t end,
                   Batch& batch) const;
  // Points the model input at the batch and its looked-up rows.
  void BindBatch(Batch& batch, ThreadState& ts) const;

  const model::Dlrm model_;
  const std::vector<model::EmbeddingTableConfig> tables_;
  const TrainerOptions options_;
  const model::GemmChoice gemm_;
  model::EmbeddingStore* const store_;
  // The shared dense replica: Hogwild threads read and write it with relaxed
  // atomics, a lone thread with plain loads and stores. Other threads go
  // through gate_ while Train runs.
  std::vector<float> params_;
  std::vector<float> dense_state_;
  mutable ReplicaGate gate_;
  // The learning-rate warm-up: steps taken, of warmup_steps_ (set by Train),
  // and the factor of the latest step, which the sync strategy reads too.
  int64_t warmup_steps_ = 0;
  std::atomic<int64_t> dense_steps_{0};
  std::atomic<float> lr_factor_{1.0f};
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_TRAINER_H_
