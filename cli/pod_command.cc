// `shadowsync pod`: the entry point of every pod the operator creates
// (docs/operator.md, "Pods"). It reads the job and the shard map from the
// job's ConfigMap, derives its index from the StatefulSet ordinal at the end
// of the pod name, and runs the role's process as the local launcher would
// (cli_util.h's PsArgs, SyncerArgs, TrainerArgs), forwarding SIGTERM.
//
// A trainer exits 0 only when its share is done, after writing
// <data-dir>/done (its report). A StatefulSet restarts the container anyway;
// the restart finds `done` and idles, serving /healthz and
// `shadowsync_trainer_finished 1`, so the operator counts a trainer whose
// last run exited 0 as finished (operator/reconcile.h). A trainer stopped
// because its run was not learning (exit 3) leaves <data-dir>/not-learning:
// the restart idles too, rather than train again while the operator fails
// the job.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/cli_util.h"
#include "cli/cluster_export.h"
#include "cli/commands.h"
#include "common/exit_codes.h"
#include "common/file_util.h"
#include "common/metrics_http.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "exporter/job_export.h"
#include "glog/logging.h"
#include "jobspec/job_spec.h"
#include "model/export.h"
#include "nlohmann/json.hpp"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace shadowsync::cli {
namespace {

struct PodFlags {
  std::string role;
  std::string config;
  std::string shard_map;
  std::string data_dir = "/var/lib/shadowsync";
  std::string listen;
  std::string metrics_listen = "0.0.0.0:9100";
  int index = -1;
  std::string export_dir;  // Trainers of a job with exports: the claim's mount.
  std::string job_uid;
  std::string init_dir;        // Trainers of a warm start: the init claim's mount.
  GrpcSecurityFiles security;  // Overrides spec.security's paths where given.
  // The container's terminationMessagePath; written only if it exists (the
  // kubelet creates it), so a pod run by hand leaves /dev alone.
  std::string termination_message = "/dev/termination-log";
};

// A trainer's LearningCheck finding, from its report; empty when none.
std::string LearningProblem(const std::string& report_path) {
  std::ifstream in(report_path);
  const nlohmann::json report = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return report.is_object() ? report.value("learning_problem", std::string()) : "";
}

// The ordinal of a StatefulSet pod name: "job-ps-3" -> 3.
int OrdinalOf(const std::string& pod_name) {
  const size_t dash = pod_name.rfind('-');
  int ordinal = -1;
  if (dash == std::string::npos || !absl::SimpleAtoi(pod_name.substr(dash + 1), &ordinal)) {
    return -1;
  }
  return ordinal;
}

std::vector<std::string> Strings(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (j.contains(key) && j[key].is_array()) {
    for (const auto& v : j[key]) out.push_back(v.get<std::string>());
  }
  return out;
}

pid_t g_child = 0;

// Runs `args` as a child (this binary), forwarding SIGTERM/SIGINT to it, and
// returns its exit code (128 + signal if a signal ended it).
int RunChild(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<pid_t> started = Spawn(argv);
  if (!started.ok()) {
    LOG(ERROR) << "pod: " << started.status().message();
    return 127;
  }
  const pid_t pid = *started;
  g_child = pid;
  std::thread forwarder([pid] {
    if (const int sig = AwaitStopSignal(); sig != 0) kill(pid, sig);
  });
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  WakeStopWatcher();
  forwarder.join();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Trainer 0 of a warm start, before it trains: every row of `model` onto
// the servers; the rows. Once per job: not again after a container restart
// (a marker in the pod's data dir) nor once the operator has seen it (the
// ConfigMap's init-imported), which would overwrite trained rows.
absl::StatusOr<int64_t> ImportInitModel(const ShadowSyncJob& job, const std::string& model,
                                        const std::string& ps, const std::string& data_dir,
                                        const std::string& config_dir,
                                        const std::string& admin_token_file) {
  const std::string marker = data_dir + "/init-imported";
  int64_t rows = 0;
  if (std::ifstream in(marker); in >> rows) return rows;
  std::ifstream seen(config_dir + "/init-imported");
  if (std::string v; seen >> v && v == "true") return 0;
  SS_ASSIGN_OR_RETURN(model::ExportReader reader, model::ExportReader::Open(model));
  const model::ExportInfo info = exporter::ExportInfoForJob(job);
  SS_RETURN_IF_ERROR(reader.CheckShape(info.config, info.embeddings.tables));
  SS_RETURN_IF_ERROR(reader.Verify());
  // ImportSlots is an admin RPC: the operator hands trainer 0 of a warm
  // start the job's admin token for it.
  GrpcSecurityFiles files = SecurityFilesOf(job.spec.security);
  files.admin_token_file = admin_token_file;
  SS_ASSIGN_OR_RETURN(GrpcSecurity security, LoadGrpcSecurity(files));
  SS_ASSIGN_OR_RETURN(exporter::RowStreamStats imported,
                      exporter::ImportServerRows(reader, job, ps, {.security = security}));
  LOG(INFO) << "pod: loaded " << imported.rows << " rows of " << model << " onto "
            << imported.servers << " parameter server(s) in " << imported.seconds << " s";
  std::ofstream(marker) << imported.rows << "\n";
  return imported.rows;
}

// A trainer stopped as not learning, restarted: trains no more. The
// container's last state keeps the exit code and message the operator
// fails the job on.
int IdleNotLearning(const std::string& marker) {
  std::ifstream in(marker);
  const std::string problem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LOG(WARNING) << "pod: this trainer stopped because its run is not learning (" << problem
               << "); idle until stopped";
  AwaitStopSignal();
  return 0;
}

// A trainer whose share is done: stays up until SIGTERM, saying so on /metrics
// (and trainer 0 the job's final export, from its `report`).
int ServeFinished(const std::string& metrics_listen, const nlohmann::json& report) {
  const int64_t examples = report.is_object() ? report.value("examples", int64_t{0}) : 0;
  const int64_t resumed = report.is_object() ? report.value("skipped_examples", int64_t{0}) : 0;
  ExportMetrics export_metrics;
  if (report.is_object() && report.contains("export")) {
    const nlohmann::json& summary = report["export"];
    export_metrics.Publish(summary, summary.value("request", ""), /*final=*/true);
  }
  auto registry = std::make_shared<prometheus::Registry>();
  AddFixedGauge(*registry, "shadowsync_trainer_finished",
                "1: this trainer has trained its whole share and exited cleanly.", 1);
  // A counter, as in a training pod: `rate()` over it reads 0 once done.
  prometheus::BuildCounter()
      .Name("shadowsync_trainer_examples_total")
      .Help("Examples this trainer trained in its last run.")
      .Register(*registry)
      .Add({})
      .Increment(static_cast<double>(examples));
  AddFixedGauge(*registry, "shadowsync_trainer_examples_resumed",
                "Examples of its share the trainer trained before its last run.",
                static_cast<double>(resumed));
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
      MetricsHttpServer::Start(metrics_listen);
  if (!http.ok()) {
    LOG(ERROR) << "pod: " << http.status().message();
    return 1;
  }
  (*http)->RegisterCollectable(registry);
  (*http)->RegisterCollectable(export_metrics.registry());
  (*http)->set_serving(true);
  LOG(INFO) << "trainer finished its share (" << resumed + examples << " examples, " << examples
            << " in its last run); idle until stopped";
  AwaitStopSignal();
  return 0;
}

int RunPod(const PodFlags& f) {
  if (!InstallStopSignals()) {
    LOG(ERROR) << "pod: cannot create the signal pipe";
    return 1;
  }
  int index = f.index;
  if (index < 0) {
    for (const char* var : {"POD_NAME", "HOSTNAME"}) {
      if (const char* v = std::getenv(var); v != nullptr && OrdinalOf(v) >= 0) {
        index = OrdinalOf(v);
        break;
      }
    }
  }
  if (index < 0) {
    LOG(ERROR) << "pod: no --index, and neither $POD_NAME nor $HOSTNAME ends in a "
                  "StatefulSet ordinal (name-N)";
    return 2;
  }
  absl::StatusOr<ShadowSyncJob> job = LoadJobFile(f.config);
  if (!job.ok()) {
    LOG(ERROR) << "pod: " << job.status().message();
    return 2;
  }
  // The security flags override the spec's paths (the children get them
  // through PsArgs, SyncerArgs and TrainerArgs).
  auto apply_security_flags = [&f](SecuritySpec& security) {
    if (!f.security.tls_cert_file.empty() || !f.security.tls_ca_file.empty() ||
        !f.security.tls_key_file.empty()) {
      TlsSpec tls = security.tls.value_or(TlsSpec{});
      tls.ca_file = f.security.tls_ca_file;
      tls.cert_file = f.security.tls_cert_file;
      tls.key_file = f.security.tls_key_file;
      tls.server_name = f.security.tls_server_name;
      security.tls = tls;
    }
    if (!f.security.auth_token_file.empty()) {
      AuthTokenSpec token = security.auth_token.value_or(AuthTokenSpec{});
      token.file = f.security.auth_token_file;
      security.auth_token = token;
    }
  };
  apply_security_flags(job->spec.security);
  std::ifstream in(f.shard_map);
  const nlohmann::json map = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!map.is_object() || !map.contains("numServers") || !map["numServers"].is_number_integer()) {
    LOG(ERROR) << "pod: --shard-map " << f.shard_map
               << ": want a JSON object with numServers, psAddresses and syncerAddresses";
    return 2;
  }
  const std::vector<std::string> ps = Strings(map, "psAddresses");
  const std::vector<std::string> syncers = Strings(map, "syncerAddresses");
  std::filesystem::create_directories(f.data_dir);
  std::vector<std::string> args;
  if ((f.role == "ps" || f.role == "syncer") && f.listen.empty()) {
    LOG(ERROR) << "pod: --listen is required for the " << f.role << " role";
    return 2;
  }
  if (f.role == "ps") {
    // A server beyond the map's owners was added by a scale-out: it joins
    // empty and gets its slots from the operator's reshard.
    const bool join = index >= map["numServers"].get<int>();
    args = PsArgs(job->spec, {.listen = f.listen,
                              .metrics_listen = f.metrics_listen,
                              .db = f.data_dir + "/db",
                              .peers = ps,
                              .self_index = index,
                              .join = join,
                              .admin_token_file = f.security.admin_token_file});
  } else if (f.role == "syncer") {
    args = SyncerArgs(job->spec, {.listen = f.listen, .metrics_listen = f.metrics_listen});
  } else if (f.role == "trainer") {
    if (ps.empty()) {
      LOG(ERROR) << "pod: --shard-map " << f.shard_map << ": no psAddresses";
      return 2;
    }
    const std::string done = f.data_dir + "/done";
    if (std::filesystem::exists(done)) {
      // Finished before this container restarted: do not train again.
      std::ifstream r(done);
      return ServeFinished(f.metrics_listen, nlohmann::json::parse(r, nullptr, false));
    }
    if (const std::string marker = f.data_dir + "/not-learning"; std::filesystem::exists(marker)) {
      return IdleNotLearning(marker);
    }
    // A scale-up reaches the StatefulSet before the ConfigMap: wait until
    // the job this pod reads counts it among the trainers.
    while (index >= job->spec.trainer.replicas) {
      LOG(INFO) << "pod: trainer " << index << " waits for " << f.config << " to list " << index + 1
                << " trainers";
      std::this_thread::sleep_for(std::chrono::seconds(2));
      absl::StatusOr<ShadowSyncJob> reread = LoadJobFile(f.config);
      if (reread.ok()) {
        *job = *std::move(reread);
        apply_security_flags(job->spec.security);
      }
    }
    absl::StatusOr<JobData> data = PrepareJobData(job->spec, f.data_dir + "/data");
    if (!data.ok()) {
      LOG(ERROR) << "pod: " << data.status().message();
      return 1;
    }
    TrainerProcess trainer{.config = f.config,
                           .index = index,
                           .ps = ps.front(),
                           .syncers = syncers,
                           .metrics_listen = f.metrics_listen,
                           .data = *data,
                           .checkpoint = f.data_dir + "/trainer.ckpt",
                           .report_json = done + ".tmp"};
    if (!job->spec.init.from_model.empty() && !f.init_dir.empty()) {
      // spec.init.fromModel is a path inside the claim mounted at --init-dir.
      trainer.init_model = (std::filesystem::path(f.init_dir) / job->spec.init.from_model).string();
      if (index == 0) {
        absl::StatusOr<int64_t> rows = ImportInitModel(
            *job, trainer.init_model, ps.front(), f.data_dir,
            std::filesystem::path(f.config).parent_path().string(), f.security.admin_token_file);
        if (!rows.ok()) {
          LOG(ERROR) << "pod: spec.init.fromModel: " << rows.status().message();
          return 1;
        }
        trainer.init_imported_rows = *rows;
      }
    }
    if (!f.export_dir.empty()) {
      // On the claim, where trainer 0 reads every trainer's checkpoint
      // (cli/cluster_export.h).
      trainer.export_dir = f.export_dir;
      trainer.trainers_dir = TrainersDir(f.export_dir, f.job_uid);
      trainer.export_request_file =
          (std::filesystem::path(f.config).parent_path() / "export-request").string();
      trainer.checkpoint = TrainerCheckpoint(trainer.trainers_dir, index);
      std::error_code ec;
      std::filesystem::create_directories(trainer.trainers_dir, ec);
      if (ec) {
        LOG(ERROR) << "pod: cannot create " << trainer.trainers_dir << ": " << ec.message();
        return 1;
      }
    }
    args = TrainerArgs(job->spec, trainer);
  } else {
    LOG(ERROR) << "pod: --role must be trainer, ps or syncer, got '" << f.role << "'";
    return 2;
  }
  LOG(INFO) << "pod: " << f.role << " " << index << ": " << absl::StrJoin(args, " ");
  const int code = RunChild(args);
  if (f.role != "trainer") return code;
  const std::string done = f.data_dir + "/done";
  if (code == 0 || code == kExitNotLearning) {
    const std::string problem = LearningProblem(done + ".tmp");
    // The termination message the operator reads (common/exit_codes.h).
    if (!problem.empty() && std::filesystem::exists(f.termination_message)) {
      std::ofstream(f.termination_message) << kNotLearningMessagePrefix << problem;
    }
    if (code == kExitNotLearning) std::ofstream(f.data_dir + "/not-learning") << problem;
  }
  if (code != 0) return code;
  // `done` appears under its final name only now: a restart after this
  // point finds it and does not train again.
  std::error_code ec;
  std::filesystem::rename(done + ".tmp", done, ec);
  const absl::Status renamed =
      ec ? absl::UnavailableError(absl::StrCat("cannot rename ", done, ".tmp: ", ec.message()))
         : SyncParentDirectory(done);
  if (!renamed.ok()) {
    LOG(ERROR) << "pod: " << renamed.message();
    return 1;
  }
  return 0;
}

}  // namespace

Action AddPodCommand(CLI::App& app) {
  auto f = std::make_shared<PodFlags>();
  CLI::App* cmd = app.add_subcommand(
      "pod", "Run one pod of a ShadowSyncJob (the operator's pods' entry point).");
  cmd->add_option("--role", f->role, "trainer, ps or syncer")->required();
  cmd->add_option("--config", f->config, "the job (job.json of the job's ConfigMap)")->required();
  cmd->add_option("--shard-map", f->shard_map, "shard-map.json of the job's ConfigMap")->required();
  cmd->add_option("--data-dir", f->data_dir, "this pod's state: RocksDB, data, checkpoints")
      ->capture_default_str();
  cmd->add_option("--termination-message", f->termination_message,
                  "a trainer whose run is not learning writes why here, if the file exists (the "
                  "container's terminationMessagePath)")
      ->capture_default_str();
  cmd->add_option("--listen", f->listen, "gRPC host:port (ps and syncer)");
  cmd->add_option("--metrics-listen", f->metrics_listen, "HTTP host:port for /metrics, /healthz")
      ->capture_default_str();
  cmd->add_option("--index", f->index,
                  "this pod's index (default: the ordinal ending $POD_NAME or $HOSTNAME)");
  cmd->add_option("--export-dir", f->export_dir,
                  "trainers of a job with spec.export: where the export claim is mounted");
  cmd->add_option("--init-dir", f->init_dir,
                  "trainers of a job with spec.init.fromModel: where its claim is mounted");
  cmd->add_option("--job-uid", f->job_uid,
                  "the job's uid: its trainers' files on the export claim are kept apart");
  AddSecurityFlags(*cmd, f->security);
  return [f] { return RunPod(*f); };
}

}  // namespace shadowsync::cli
