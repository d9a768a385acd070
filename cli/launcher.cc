#include "cli/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "cli/cli_util.h"
#include "cli/launch_internal.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/optimizer.h"
#include "ps/client/resharder.h"
#include "worker/checkpoint.h"

namespace shadowsync::cli {
namespace internal {

absl::StatusOr<nlohmann::json> Launch::Run() {
  SS_ASSIGN_OR_RETURN(job_, LoadJobFile(options_.job_path));
  if (options_.fail_on_divergence) job_.spec.trainer.learning_check.fail = true;
  const JobSpec& spec = job_.spec;
  if (absl::StatusOr<GrpcSecurity> security = LoadGrpcSecurity(SecurityFilesOf(spec.security));
      security.ok()) {
    security_ = *std::move(security);
  } else {
    // Name the job's fields rather than the flags the processes would get.
    return absl::InvalidArgumentError(
        absl::StrReplaceAll(std::string(security.status().message()),
                            {{"--tls-ca-file", "spec.security.tls.caFile"},
                             {"--tls-cert-file", "spec.security.tls.certFile"},
                             {"--tls-key-file", "spec.security.tls.keyFile"},
                             {"--auth-token-file", "spec.security.authToken.file"}}));
  }
  run_dir_ =
      options_.run_dir.empty() ? absl::StrCat("runs/", job_.metadata.name) : options_.run_dir;
  fs::create_directories(run_dir_);
  int num_ps = spec.parameter_server.replicas;
  if (options_.resume) {
    std::ifstream in(run_dir_ + "/launch.json");
    const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!state.is_object()) {
      return absl::FailedPreconditionError(absl::StrCat("--resume: nothing to resume in ", run_dir_,
                                                        " (no launch.json: no job started there)"));
    }
    if (fs::exists(run_dir_ + "/report.json")) {
      return absl::FailedPreconditionError(absl::StrCat("--resume: the job in ", run_dir_,
                                                        " finished (", run_dir_, "/report.json)"));
    }
    num_ps = static_cast<int>(Int(state, "parameter_servers"));
    if (num_ps < 1) {
      return absl::DataLossError(
          absl::StrCat(run_dir_, "/launch.json: parameter_servers = ", num_ps, ", want >= 1"));
    }
    if (state.contains("resharding_to")) {
      resharding_to_ = static_cast<int>(Int(state, "resharding_to"));
      if (resharding_to_ < 1) {
        return absl::DataLossError(absl::StrCat(
            run_dir_, "/launch.json: resharding_to = ", resharding_to_, ", want >= 1"));
      }
    }
    LOG(INFO) << "resuming the job in " << run_dir_ << " with " << num_ps
              << " parameter server(s) and the trainers' checkpoints"
              << (resharding_to_ > 0
                      ? absl::StrCat("; a reshard to ", resharding_to_, " was under way")
                      : std::string());
  } else {
    // A run starts fresh: a previous run's servers would reopen their state
    // with the shard map of its ports. Generated data (data/) is kept.
    int removed = 0;
    for (const auto& entry : fs::directory_iterator(run_dir_)) {
      const std::string name = entry.path().filename().string();
      if (name == "data") continue;
      if (name.starts_with("ps-") || name.starts_with("syncer-") || name.starts_with("trainer-") ||
          name.starts_with("report.") || name == "job.json" || name == "launch.json" ||
          name == "control") {
        removed += static_cast<int>(fs::remove_all(entry.path()) > 0);
      }
    }
    if (removed > 0) {
      LOG(INFO) << "starting fresh in " << run_dir_ << ": removed the previous run's state";
    }
  }
  // The launcher's admin credential: its servers take SetShardMap,
  // ImportSlots, DropSlots and Checkpoint only from it (docs/security.md). A
  // resumed run keeps its token; a fresh one gets a new one.
  admin_token_file_ = run_dir_ + "/admin-token";
  if (!options_.resume || !fs::exists(admin_token_file_)) {
    SS_RETURN_IF_ERROR(WriteNewToken(admin_token_file_));
  }
  SS_ASSIGN_OR_RETURN(security_.admin_token, ReadTokenFile("admin token", admin_token_file_));
  fs::remove_all(run_dir_ + "/control");  // Requests for a launcher that is gone.
  fs::create_directories(run_dir_ + "/control");
  std::ofstream(run_dir_ + "/control/launcher.pid") << getpid() << "\n";
  // The children read the job as the launcher validated it.
  std::ofstream(run_dir_ + "/job.json") << JobToJson(job_).dump(2) << "\n";
  SS_ASSIGN_OR_RETURN(JobData data, PrepareJobData(spec, run_dir_ + "/data"));
  if (data.train.empty()) return absl::InvalidArgumentError("spec.data.paths: no training files");
  total_examples_ = data.train_examples;
  eval_data_ = data.eval;
  // A warm start's export is checked before anything starts.
  std::optional<model::ExportReader> init_model;
  if (!spec.init.from_model.empty() && !options_.resume) {
    absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(spec.init.from_model);
    if (!reader.ok()) {
      return absl::Status(reader.status().code(),
                          absl::StrCat("spec.init.fromModel: ", reader.status().message()));
    }
    const model::ExportInfo info = exporter::ExportInfoForJob(job_);
    absl::Status checked = reader->CheckShape(info.config, info.embeddings.tables);
    // Every file's checksum too, so that a corrupt export starts nothing.
    if (checked.ok()) checked = reader->Verify();
    if (!checked.ok()) {
      return absl::Status(checked.code(), absl::StrCat("spec.init.fromModel: ", checked.message()));
    }
    init_model = *std::move(reader);
  }

  const std::string& bin = options_.binary;
  std::vector<std::string> ps_addresses;
  // An interrupted scale-out's new servers too: they joined owning nothing,
  // and start so again unless a shard map reached them.
  const int servers = std::max(num_ps, resharding_to_);
  for (int i = 0; i < servers; ++i) {
    SS_ASSIGN_OR_RETURN(int port, FreePort());
    ps_addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  ps_addresses_ = ps_addresses;
  for (int i = 0; i < servers; ++i) {
    children_.push_back(PsChild(i, ps_addresses[i], /*join=*/i >= num_ps));
  }
  // Dense checkpoints: a restarted or resumed trainer continues from its own.
  const std::string checkpoint_dir = spec.checkpoint.path.empty() ? run_dir_ : spec.checkpoint.path;
  fs::create_directories(checkpoint_dir);
  std::vector<std::string> syncer_addresses;
  for (int i = 0; i < spec.syncer.replicas; ++i) {
    SS_ASSIGN_OR_RETURN(int port, FreePort());
    syncer_addresses.push_back(absl::StrCat("127.0.0.1:", port));
    syncer_addresses_.push_back(syncer_addresses.back());
    Child c{.name = absl::StrCat("syncer-", i), .role = Role::kSyncer};
    c.argv = {bin};
    for (std::string& a :
         SyncerArgs(spec, {.listen = syncer_addresses.back(), .metrics_listen = "127.0.0.1:0"})) {
      c.argv.push_back(std::move(a));
    }
    children_.push_back(std::move(c));
  }
  for (int i = 0; i < spec.trainer.replicas; ++i) {
    Child c{.name = absl::StrCat("trainer-", i), .role = Role::kTrainer};
    c.checkpoint = absl::StrCat(checkpoint_dir, "/trainer-", i, ".ckpt");
    checkpoints_.push_back(c.checkpoint);
    c.argv = {bin};
    for (std::string& a : TrainerArgs(
             spec, {.config = run_dir_ + "/job.json",
                   .index = i,
                   .ps = ps_addresses.front(),
                   .syncers = syncer_addresses,
                   .metrics_listen = "127.0.0.1:0",
                   .data = data,
                   .checkpoint = c.checkpoint,
                   .report_json = absl::StrCat(run_dir_, "/trainer-", i, ".json"),
                   .progress_file = absl::StrCat(run_dir_, "/trainer-", i, ".progress.json")})) {
      c.argv.push_back(std::move(a));
    }
    if (options_.resume) {
      // Counted as done from the start, like a restarted trainer's share.
      absl::StatusOr<worker::DenseCheckpoint> checkpoint =
          worker::LoadDenseCheckpoint(c.checkpoint);
      if (checkpoint.ok()) c.skip_examples = checkpoint->examples;
    }
    children_.push_back(std::move(c));
  }
  for (Child& c : children_) {
    if (c.role == Role::kPs) continue;  // PsChild did it.
    c.log = absl::StrCat(run_dir_, "/", c.name, ".log");
    c.ready = absl::StrCat(run_dir_, "/", c.name, ".ready");
    c.argv.insert(c.argv.end(), {"--ready-file", c.ready});
    fs::remove(absl::StrCat(run_dir_, "/", c.name, ".progress.json"));
  }

  LOG(INFO) << absl::StrFormat(
      "job %s: %d trainer(s) x %d threads, %d parameter server(s), %d syncer(s), sync %s; run dir "
      "%s",
      job_.metadata.name, spec.trainer.replicas, spec.trainer.threads, num_ps, spec.syncer.replicas,
      EnumName(spec.sync.algorithm), run_dir_);
  // Servers first, each ready before the trainers start.
  for (Child& c : children_) {
    if (c.role == Role::kTrainer) continue;
    SS_RETURN_IF_ERROR(Spawn(c));
    SS_RETURN_IF_ERROR(AwaitReady(c));
  }
  if (options_.resume && resharding_to_ > 0) {
    SS_RETURN_IF_ERROR(FinishInterruptedReshard(resharding_to_));
  } else if (options_.resume) {
    // The servers came back on new ports, each knowing only its own.
    SS_RETURN_IF_ERROR(ps::Readdress(ps_addresses_, absl::Seconds(30), security_).status());
  }
  if (init_model.has_value()) {
    // Before launch.json: a launcher killed during the import starts afresh.
    absl::StatusOr<exporter::RowStreamStats> imported = exporter::ImportServerRows(
        *init_model, job_, ps_addresses_.front(), {.security = security_});
    if (!imported.ok()) {
      return absl::Status(imported.status().code(),
                          absl::StrCat("spec.init.fromModel: ", imported.status().message()));
    }
    init_ = {{"from_model", spec.init.from_model},
             {"rows", imported->rows},
             {"seconds", imported->seconds},
             {"rows_per_second", imported->rows / std::max(imported->seconds, 1e-9)},
             {"parameter_servers", imported->servers}};
    LOG(INFO) << absl::StrFormat("loaded %d rows of %s onto %d parameter server(s) in %.1f s",
                                 imported->rows, spec.init.from_model, imported->servers,
                                 imported->seconds);
  }
  WriteLaunchState();
  start_ = Clock::now();
  last_export_ = start_;
  last_delta_ = start_;
  for (Child& c : children_) {
    if (c.role == Role::kTrainer) SS_RETURN_IF_ERROR(Spawn(c));
  }
  for (Child& c : children_) {
    if (c.role == Role::kTrainer) SS_RETURN_IF_ERROR(AwaitReady(c));
  }
  for (const Child& c : children_) LogEndpoints(c);

  auto last_progress = Clock::now();
  while (true) {
    if (options_.stop != nullptr && options_.stop->load()) {
      StopAll();
      return absl::CancelledError("stopped: every child was sent SIGTERM");
    }
    SS_RETURN_IF_ERROR(Reap());
    SS_RETURN_IF_ERROR(PollControl());
    PollExport(/*wait=*/false);
    if (!export_.has_value() && !queued_export_requests_.empty()) StartExport("");
    const bool done = std::all_of(children_.begin(), children_.end(), [](const Child& c) {
      return c.role != Role::kTrainer || c.finished;
    });
    if (done) break;
    if (spec.export_.interval_seconds > 0 &&
        Since(last_export_) >= static_cast<double>(spec.export_.interval_seconds)) {
      // A failed periodic export does not stop training; the next one retries.
      StartExport("");
    } else if (spec.export_.delta_interval_seconds > 0 &&
               Since(last_delta_) >= static_cast<double>(spec.export_.delta_interval_seconds)) {
      StartExport("", /*delta=*/true);
    }
    if (Since(last_progress) >= options_.progress_interval_seconds) {
      last_progress = Clock::now();
      ShowProgress(false);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds = Since(start_);
  ShowProgress(true);
  // The servers still run: the model leaves the job before they stop.
  absl::StatusOr<nlohmann::json> exported = FinalExport();
  StopAll();
  nlohmann::json report = Report(seconds);
  if (!exported.ok()) {
    report["export_error"] = std::string(exported.status().message());
    std::ofstream(run_dir_ + "/report.json") << report.dump(2) << "\n";
    return absl::Status(exported.status().code(), absl::StrCat("the export at completion failed: ",
                                                               exported.status().message()));
  }
  std::ofstream(run_dir_ + "/report.json") << report.dump(2) << "\n";
  WritePlot(run_dir_ + "/report.svg", report);
  return report;
}

}  // namespace internal

absl::StatusOr<nlohmann::json> RunJob(const LaunchOptions& options) {
  internal::Launch launch(options);
  try {
    return launch.Run();
  } catch (const std::exception& e) {
    // Unwinding stops the children (~Launch); an uncaught exception would not.
    return absl::InternalError(absl::StrCat("launcher failed: ", e.what()));
  }
}

}  // namespace shadowsync::cli
