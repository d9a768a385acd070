// One trainer of a distributed job (`shadowsync worker`): reads its share of
// the data (line i goes to trainer i mod N), looks embeddings up on the
// parameter servers and pushes their gradients, runs T Hogwild threads on
// one dense replica, synchronizes it with the other trainers through the
// job's strategy, serves /metrics and /healthz, and evaluates the replica on
// the held-out data at the end. With a checkpoint path it saves its dense
// replica periodically and resumes from it after a restart.
//
//   WorkerOptions o;
//   o.spec = job.spec;  o.index = 1;  o.ps_address = "ps-0:7000";
//   o.syncer_addresses = {"syncer-0:7100"};  o.data = {"train.tsv"};
//   SS_ASSIGN_OR_RETURN(WorkerReport report, RunWorker(o));
//
// RunWorker blocks its calling thread for the trainer's whole run and calls
// on_ready and on_progress from that thread; the structs are plain values.
#ifndef SHADOWSYNC_WORKER_WORKER_PROCESS_H_
#define SHADOWSYNC_WORKER_WORKER_PROCESS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/eval_metrics.h"
#include "common/grpc_security.h"
#include "jobspec/job_spec.h"
#include "nlohmann/json.hpp"
#include "worker/sync/strategy.h"
#include "worker/trainer.h"

namespace prometheus {
class Collectable;
}

namespace shadowsync::worker {

struct WorkerOptions {
  JobSpec spec;   // Model, trainer and sync settings; spec.trainer.replicas = N.
  int index = 0;  // This trainer, in [0, N). Also the syncer member name "trainer-<index>".
  std::string ps_address;                     // Any parameter server (the shard map comes from it).
  std::vector<std::string> syncer_addresses;  // Replica i owns dense range i; empty only for none.
  std::string metrics_address = "127.0.0.1:0";  // /metrics and /healthz; "" = none.
  // More metrics served beside the trainer's (e.g. the exports trainer 0
  // takes in a cluster).
  std::vector<std::shared_ptr<prometheus::Collectable>> extra_metrics;
  GrpcSecurity security;               // Mutual TLS and bearer token of the ps and syncer calls.
  std::vector<std::string> data;       // Training files (this trainer reads its share).
  std::vector<std::string> eval_data;  // Held-out files; empty = no evaluation.
  int64_t max_examples = -1;           // Of this trainer; -1 = its whole share.
  // Training examples of the whole job (all trainers), when known: sync-switch
  // places its switch by it. -1 = max_examples x trainers if that is set.
  int64_t job_examples = -1;
  int64_t skip_examples = 0;  // Of its share, already trained (a restarted trainer).
  // Dense checkpoint (worker/checkpoint.h); "" = none. If the file exists at
  // start, training resumes from its weights and skips
  // max(skip_examples, its example count); while training it is rewritten
  // atomically every `checkpoint_interval_seconds` and once at the end.
  std::string checkpoint_path;
  double checkpoint_interval_seconds = 30;  // Checked at each progress report.
  // Set (e.g. by a signal handler) to have the checkpoint written at the next
  // progress report, whatever the interval; cleared when it is. May be null.
  std::atomic<bool>* checkpoint_requested = nullptr;
  // Quality curve: every `eval_every` examples of this trainer, score the
  // first `eval_curve_examples` held-out examples with a snapshot of the
  // replica (one thread, alongside training). 0 = no curve.
  int64_t eval_every = 0;
  int64_t eval_curve_examples = 20'000;
  double progress_interval_seconds = 1.0;  // Between on_progress calls and curve checks.
  bool preload = false;                    // Parse the share before the clock starts.
  // Straggler injection, as TrainerOptions::step_delay, step_jitter and
  // slowdown describe.
  absl::Duration step_delay = absl::ZeroDuration();
  absl::Duration step_jitter = absl::ZeroDuration();
  double slowdown = 1.0;
  std::function<void(const Progress&)> on_progress;
  // Called once the metrics endpoint is up, with its port (tests, launchers).
  std::function<void(int metrics_port)> on_ready;
};

struct CurvePoint {
  int64_t examples = 0;  // Trained by this trainer so far; the last point is the end.
  double seconds = 0;
  double eval_ne = 0;
  double eval_auc = 0;
};

struct WorkerReport {
  TrainReport train;
  std::vector<CurvePoint> curve;
  SyncStats sync;
  nlohmann::json sync_details;  // SyncStrategy::Details() at the end.
  std::optional<QualityReport> eval;
  // A warm start's model scored before training (spec.init.fromModel): what
  // the export's own evaluation said, if the data are the same.
  std::optional<QualityReport> init_eval;
  int64_t dense_params = 0;
  // Examples of the share not trained in this run: max(skip_examples, the
  // loaded checkpoint's count).
  int64_t skipped_examples = 0;
  int64_t resumed_from_examples = 0;  // The loaded checkpoint's count; 0 = none loaded.
  int64_t checkpoints_written = 0;
};

absl::StatusOr<WorkerReport> RunWorker(const WorkerOptions& options);

// The report as the JSON `shadowsync worker --report-json` writes.
nlohmann::json WorkerReportToJson(const WorkerOptions& options, const WorkerReport& report);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_WORKER_PROCESS_H_
