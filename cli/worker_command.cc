// `shadowsync worker`: one trainer of a distributed job (worker/worker_process.h).
#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/cluster_export.h"
#include "cli/commands.h"
#include "common/exit_codes.h"
#include "common/file_util.h"
#include "glog/logging.h"
#include "jobspec/job_spec.h"
#include "prometheus/registry.h"
#include "worker/worker_process.h"

namespace shadowsync::cli {
namespace {

struct WorkerFlags {
  std::string config;
  int index = 0;
  std::string ps;
  std::string syncers;
  std::string metrics_listen = "0.0.0.0:7201";
  std::vector<std::string> data;
  std::vector<std::string> eval_data;
  std::string algorithm;
  int64_t max_examples = -1;
  int64_t job_examples = -1;
  int64_t skip_examples = 0;
  std::string checkpoint;
  double checkpoint_interval_seconds = 30;
  int64_t eval_every = 0;
  int64_t eval_curve_examples = 20'000;
  bool preload = false;
  double straggle_delay_ms = 0;
  double straggle_jitter_ms = 0;
  double straggle_factor = 1;
  std::string report_json;
  std::string progress_file;
  std::string ready_file;
  std::string export_dir, trainers_dir, export_request_file;
  std::string init_model;           // Overrides spec.init.fromModel.
  int64_t init_imported_rows = -1;  // Reported on /metrics when >= 0.
  GrpcSecurityFiles security;
};

// SIGUSR1 asks for a checkpoint now (a launcher about to export the model).
// A lock-free flag is all a handler may touch.
std::atomic<bool> checkpoint_requested{false};
void RequestCheckpoint(int) { checkpoint_requested.store(true); }

int RunWorkerCommand(const WorkerFlags& f) {
  auto fail = [](const absl::Status& s) {
    LOG(ERROR) << "worker: " << s.message();
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  };
  auto job = LoadJobFile(f.config);
  if (!job.ok()) return fail(job.status());
  worker::WorkerOptions o;
  o.spec = job->spec;
  absl::StatusOr<GrpcSecurity> security = LoadGrpcSecurity(f.security);
  if (!security.ok()) return fail(security.status());
  o.security = *std::move(security);
  if (!f.algorithm.empty()) {
    auto algorithm = ParseEnumName<SyncAlgorithm>(f.algorithm);
    if (!algorithm.has_value()) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--algorithm: unknown sync algorithm '", f.algorithm, "'")));
    }
    o.spec.sync.algorithm = *algorithm;
  }
  o.index = f.index;
  o.ps_address = f.ps;
  o.syncer_addresses = SplitList({f.syncers});
  o.metrics_address = f.metrics_listen;
  o.data = SplitList(f.data);
  o.eval_data = SplitList(f.eval_data);
  if (o.data.empty() && o.spec.data.format == DataFormat::kCriteoTsv) {
    o.data = o.spec.data.paths;
    if (o.eval_data.empty()) o.eval_data = o.spec.data.eval_paths;
  }
  o.max_examples = f.max_examples;
  o.job_examples = f.job_examples;
  o.skip_examples = f.skip_examples;
  if (!f.init_model.empty()) o.spec.init.from_model = f.init_model;
  if (f.init_imported_rows >= 0) {
    // The operator scales the other trainers out once it reads this.
    auto registry = std::make_shared<prometheus::Registry>();
    AddFixedGauge(*registry, "shadowsync_init_imported_rows",
                  "Rows of spec.init.fromModel this trainer loaded onto the parameter servers.",
                  static_cast<double>(f.init_imported_rows));
    o.extra_metrics.push_back(registry);
  }
  o.checkpoint_path = f.checkpoint;
  o.checkpoint_interval_seconds = f.checkpoint_interval_seconds;
  o.checkpoint_requested = &checkpoint_requested;
  std::signal(SIGUSR1, RequestCheckpoint);
  o.eval_every = f.eval_every;
  o.eval_curve_examples = f.eval_curve_examples;
  o.preload = f.preload;
  o.step_delay = absl::Microseconds(static_cast<int64_t>(f.straggle_delay_ms * 1000));
  o.step_jitter = absl::Microseconds(static_cast<int64_t>(f.straggle_jitter_ms * 1000));
  o.slowdown = f.straggle_factor;
  o.on_progress = [&f](const worker::Progress& p) {
    LOG(INFO) << absl::StrFormat("trainer %d: %d examples  %.0f ex/s  loss %.4f  train NE %.4f",
                                 f.index, p.examples, p.examples_per_second, p.loss, p.train_ne);
    if (f.progress_file.empty()) return;
    // Atomically: a launcher polling the file never reads half of it.
    const nlohmann::json j = {{"examples", p.examples},
                              {"examples_per_second", p.examples_per_second},
                              {"train_ne", p.train_ne},
                              {"seconds", p.seconds},
                              {"sync", p.sync_details}};
    if (absl::Status s = WriteFileAtomically(f.progress_file, j.dump() + "\n"); !s.ok()) {
      LOG(WARNING) << "worker: " << s.message();
    }
  };
  o.on_ready = [&f](int metrics_port) {
    if (!f.ready_file.empty() && !WriteReadyFile(f.ready_file, {0, metrics_port})) {
      LOG(ERROR) << "worker: cannot write --ready-file " << f.ready_file;
    }
  };
  // In a cluster, trainer 0 takes the exports (cli/cluster_export.h).
  std::unique_ptr<ClusterExporter> exporter;
  if (!f.export_dir.empty() && f.index == 0) {
    exporter = std::make_unique<ClusterExporter>(
        *job, ClusterExportOptions{.export_dir = f.export_dir,
                                   .trainers_dir = f.trainers_dir,
                                   .config = f.config,
                                   .request_file = f.export_request_file,
                                   .ps_address = o.ps_address,
                                   .syncer_addresses = o.syncer_addresses,
                                   .security = o.security,
                                   .eval_data = o.eval_data});
    o.extra_metrics.push_back(exporter->registry());
    exporter->Start();
  }
  auto report = worker::RunWorker(o);
  if (!report.ok()) return fail(report.status());
  nlohmann::json out = worker::WorkerReportToJson(o, *report);
  if (!report->train.learning_problem.empty() && job->spec.trainer.learning_check.fail) {
    // Stopped short of its share: not done, no final export, and a code the
    // supervisors read as "do not restart".
    LOG(ERROR) << "worker: trainer " << f.index << " stopped, " << kNotLearningMessagePrefix
               << report->train.learning_problem;
    if (!f.report_json.empty()) {
      if (absl::Status s = WriteFileAtomically(f.report_json, out.dump(2) + "\n"); !s.ok()) {
        return fail(s);
      }
    }
    return kExitNotLearning;
  }
  if (!f.export_dir.empty()) {
    if (absl::Status s = MarkTrainerDone(f.trainers_dir, f.index); !s.ok()) return fail(s);
  }
  if (exporter != nullptr) {
    absl::StatusOr<nlohmann::json> summary = exporter->FinalExport();
    if (!summary.ok()) {
      return fail(absl::Status(summary.status().code(),
                               absl::StrCat("final export: ", summary.status().message())));
    }
    out["export"] = *summary;
  }
  std::cout << out.dump() << "\n";
  if (!f.report_json.empty()) {
    if (absl::Status s = WriteFileAtomically(f.report_json, out.dump(2) + "\n"); !s.ok()) {
      return fail(s);
    }
  }
  return 0;
}

}  // namespace

Action AddWorkerCommand(CLI::App& app) {
  auto flags = std::make_shared<WorkerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "worker", "Run one trainer of a distributed job against running ps and syncer processes.");
  cmd->add_option("--config", flags->config, "ShadowSyncJob YAML/JSON (model, trainer, sync)")
      ->required();
  cmd->add_option("--index", flags->index, "this trainer's index in [0, trainer.replicas)")
      ->required();
  cmd->add_option("--ps", flags->ps, "host:port of any parameter server")->required();
  cmd->add_option("--syncer", flags->syncers,
                  "host:port of each syncer replica, comma-separated, in range order");
  cmd->add_option("--metrics-listen", flags->metrics_listen, "/metrics and /healthz address")
      ->capture_default_str();
  cmd->add_option("--data", flags->data,
                  "training files (default: the job's criteo-tsv paths); this trainer reads "
                  "lines i with i mod trainer.replicas == index");
  cmd->add_option("--eval-data", flags->eval_data, "held-out files scored at the end");
  cmd->add_option("--algorithm", flags->algorithm, "override spec.sync.algorithm");
  cmd->add_option("--max-examples", flags->max_examples, "stop after N examples of this trainer");
  cmd->add_option("--job-examples", flags->job_examples,
                  "training examples of the whole job (sync-switch's switch point; default: "
                  "--max-examples x trainers)");
  cmd->add_option("--skip-examples", flags->skip_examples,
                  "skip the first N examples of this trainer's share (resuming after a restart)");
  cmd->add_option("--checkpoint", flags->checkpoint,
                  "dense checkpoint of this trainer: resume from it if it exists (skipping the "
                  "examples it covers), rewrite it periodically and at the end");
  cmd->add_option("--checkpoint-interval-seconds", flags->checkpoint_interval_seconds,
                  "seconds between dense checkpoints while training")
      ->capture_default_str();
  cmd->add_option("--eval-every", flags->eval_every,
                  "quality curve: score a replica snapshot every N examples of this trainer");
  cmd->add_option("--eval-curve-examples", flags->eval_curve_examples,
                  "held-out examples scored per curve point")
      ->capture_default_str();
  cmd->add_flag("--preload", flags->preload, "parse this trainer's share before timing");
  // Straggler injection for tests and benchmarks.
  cmd->add_option("--straggle-delay-ms", flags->straggle_delay_ms,
                  "sleep this long in every step (a straggler)")
      ->capture_default_str();
  cmd->add_option("--straggle-jitter-ms", flags->straggle_jitter_ms,
                  "plus a uniform random [0, this) in every step")
      ->capture_default_str();
  cmd->add_option("--straggle-factor", flags->straggle_factor,
                  "make every step's computation this many times as slow (>= 1)")
      ->capture_default_str();
  cmd->add_option("--report-json", flags->report_json, "write the final report as JSON here");
  cmd->add_option("--progress-file", flags->progress_file,
                  "rewrite progress (examples, examples/s, train NE) as JSON here");
  cmd->add_option("--ready-file", flags->ready_file,
                  "write \"0 METRICS_PORT\" here once training starts");
  cmd->add_option("--export-dir", flags->export_dir,
                  "in a cluster: where the export claim is mounted (trainer 0 exports there)");
  cmd->add_option("--trainers-dir", flags->trainers_dir,
                  "in a cluster: this job's trainer checkpoints and markers on the export claim");
  cmd->add_option("--export-request-file", flags->export_request_file,
                  "in a cluster: a new value in this file asks trainer 0 for an export");
  cmd->add_option("--init-model", flags->init_model,
                  "start from this export (overrides spec.init.fromModel)");
  cmd->add_option("--init-imported-rows", flags->init_imported_rows,
                  "in a cluster: the rows trainer 0 loaded onto the servers, for /metrics");
  AddSecurityFlags(*cmd, flags->security);
  return [flags] { return RunWorkerCommand(*flags); };
}

}  // namespace shadowsync::cli
