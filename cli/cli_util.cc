#include "cli/cli_util.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "data/synthetic.h"
#include "glog/logging.h"
#include "model/optimizer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace shadowsync::cli {
namespace {

int g_signal_pipe[2] = {-1, -1};

void OnStopSignal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  // Async-signal-safe; a full pipe only means a signal is already pending.
  if (write(g_signal_pipe[1], &byte, 1) < 0) {
  }
}

}  // namespace

bool InstallStopSignals() {
  if (pipe(g_signal_pipe) != 0) return false;
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  return true;
}

int AwaitStopSignal() {
  unsigned char sig = 0;
  while (read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
  }
  return sig;
}

void WakeStopWatcher() {
  const unsigned char wake = 0;
  if (write(g_signal_pipe[1], &wake, 1) < 0) {
  }
}

bool WriteReadyFile(const std::string& path, std::initializer_list<int> ports) {
  return WriteFileAtomically(path, absl::StrCat(absl::StrJoin(ports, " "), "\n")).ok();
}

std::vector<std::string> SplitList(const std::vector<std::string>& flags) {
  std::vector<std::string> out;
  for (const auto& f : flags) {
    for (absl::string_view p : absl::StrSplit(f, ',', absl::SkipEmpty())) out.emplace_back(p);
  }
  return out;
}

void AddFixedGauge(prometheus::Registry& registry, const std::string& name, const std::string& help,
                   double value) {
  prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({}).Set(value);
}

absl::StatusOr<JobData> PrepareJobData(const JobSpec& spec, const std::string& dir) {
  JobData data;
  if (spec.data.format == DataFormat::kCriteoTsv) {
    data.train = spec.data.paths;
    data.eval = spec.data.eval_paths;
    return data;
  }
  const SyntheticDataSpec& synth = spec.data.synthetic;
  data.train = {dir + "/train.tsv"};
  data.eval = {dir + "/eval.tsv"};
  data.train_examples = synth.examples;
  // The generator is deterministic: files named after its inputs are reused.
  std::string stamp =
      absl::StrCat(dir, "/synthetic-", synth.examples, "-", synth.eval_examples, "-", synth.seed);
  if (synth.multi_hot_columns > 0) {
    absl::StrAppend(&stamp, "-mh", synth.multi_hot_columns, "x", synth.max_ids_per_field);
  }
  stamp += ".done";
  if (std::filesystem::exists(stamp)) return data;
  std::filesystem::create_directories(dir);
  SyntheticOptions gen;
  gen.out_path = data.train[0];
  gen.examples = synth.examples;
  gen.eval_out_path = data.eval[0];
  gen.eval_examples = synth.eval_examples;
  gen.seed = static_cast<uint64_t>(synth.seed);
  gen.multi_hot_columns = synth.multi_hot_columns;
  gen.max_ids_per_field = synth.max_ids_per_field;
  LOG(INFO) << "generating " << gen.examples << " + " << gen.eval_examples
            << " held-out synthetic examples into " << dir;
  TeacherReport eval;
  SS_ASSIGN_OR_RETURN(TeacherReport teacher, GenerateSynthetic(gen, &eval));
  LOG(INFO) << absl::StrFormat("teacher: ctr %.4f ne %.4f auc %.4f; on the held-out: ne %.4f",
                               teacher.ctr, teacher.ne, teacher.auc, eval.ne);
  if (synth.eval_examples == 0) std::ofstream{data.eval[0]};  // evalExamples 0: nothing to score.
  std::ofstream(stamp) << "ok\n";
  return data;
}

void AddSecurityFlags(CLI::App& cmd, GrpcSecurityFiles& files) {
  cmd.add_option("--tls-ca-file", files.tls_ca_file,
                 "PEM CA certificate(s) peers must chain to; with --tls-cert-file and "
                 "--tls-key-file: mutual TLS on every gRPC link (docs/security.md)");
  cmd.add_option("--tls-cert-file", files.tls_cert_file,
                 "PEM certificate presented as server and as client");
  cmd.add_option("--tls-key-file", files.tls_key_file, "PEM private key of --tls-cert-file");
  cmd.add_option("--tls-server-name", files.tls_server_name,
                 "name the servers' certificates are verified for (empty: the dialled host)")
      ->capture_default_str();
  cmd.add_option("--auth-token-file", files.auth_token_file,
                 "file holding the shared bearer token sent on (and, by servers, required of) "
                 "every gRPC call");
  cmd.add_option("--admin-token-file", files.admin_token_file,
                 "file holding the admin token: a parameter server takes SetShardMap, "
                 "ImportSlots, DropSlots and Checkpoint only with it, and a client sends it with "
                 "every call");
}

void AddServerFlags(CLI::App& cmd, ServerFlags& flags) {
  cmd.add_option("--listen", flags.listen, "gRPC host:port (port 0: any free port)")
      ->capture_default_str();
  cmd.add_option("--metrics-listen", flags.metrics_listen,
                 "HTTP host:port for /metrics and /healthz (port 0: any; empty: off)")
      ->capture_default_str();
  cmd.add_option("--max-message-bytes", flags.limits.max_message_bytes,
                 "largest gRPC message received or sent; larger is RESOURCE_EXHAUSTED")
      ->capture_default_str();
  cmd.add_option("--max-concurrent-streams", flags.limits.max_concurrent_streams,
                 "calls one client connection may have open at once; clients queue the rest")
      ->capture_default_str();
  cmd.add_option("--grpc-memory-bytes", flags.limits.memory_bytes,
                 "gRPC's memory quota for connection buffers and call state")
      ->capture_default_str();
  cmd.add_option("--shutdown-grace-seconds", flags.shutdown_grace_seconds,
                 "time in-flight RPCs get at shutdown")
      ->capture_default_str();
  cmd.add_option("--ready-file", flags.ready_file,
                 "write \"GRPC_PORT METRICS_PORT\" here once serving");
  AddSecurityFlags(cmd, flags.security);
}

absl::StatusOr<GrpcServerProcessOptions> ServerProcessOptions(const ServerFlags& flags) {
  GrpcServerProcessOptions options;
  options.grpc_address = flags.listen;
  options.metrics_address = flags.metrics_listen;
  options.limits = flags.limits;
  options.shutdown_grace = absl::Seconds(flags.shutdown_grace_seconds);
  SS_ASSIGN_OR_RETURN(options.security, LoadGrpcSecurity(flags.security));
  return options;
}

GrpcSecurityFiles SecurityFilesOf(const SecuritySpec& security) {
  GrpcSecurityFiles files;
  if (security.tls) {
    files.tls_ca_file = security.tls->ca_file;
    files.tls_cert_file = security.tls->cert_file;
    files.tls_key_file = security.tls->key_file;
    files.tls_server_name = security.tls->server_name;
  }
  if (security.auth_token) files.auth_token_file = security.auth_token->file;
  return files;
}

std::vector<std::string> PsArgs(const JobSpec& spec, const PsProcess& p) {
  const model::OptimizerKind kind = spec.parameter_server.optimizer == Optimizer::kSgd
                                        ? model::OptimizerKind::kSgd
                                        : model::OptimizerKind::kAdagrad;
  std::vector<std::string> args = {"ps",
                                   "--listen",
                                   p.listen,
                                   "--metrics-listen",
                                   p.metrics_listen,
                                   "--peers",
                                   absl::StrJoin(p.peers, ","),
                                   "--self-index",
                                   std::to_string(p.self_index),
                                   "--db",
                                   p.db,
                                   "--dim",
                                   std::to_string(spec.model.embedding_dim),
                                   "--tables",
                                   std::to_string(spec.model.tables.size()),
                                   "--hash-buckets",
                                   std::to_string(spec.model.tables.front().hash_buckets),
                                   "--optimizer",
                                   std::string(model::OptimizerName(kind)),
                                   "--lr",
                                   absl::StrCat(EffectivePsLearningRate(spec)),
                                   "--slots",
                                   std::to_string(spec.parameter_server.slots),
                                   "--cache-bytes",
                                   std::to_string(spec.parameter_server.cache_bytes.value),
                                   "--admission-min-count",
                                   std::to_string(spec.parameter_server.admission.min_count),
                                   "--admission-probability",
                                   absl::StrCat(spec.parameter_server.admission.probability),
                                   "--ttl-seconds",
                                   std::to_string(spec.parameter_server.eviction.ttl_seconds),
                                   "--max-rows",
                                   std::to_string(spec.parameter_server.eviction.max_rows)};
  if (p.join) args.push_back("--join");
  if (!p.ready_file.empty()) args.insert(args.end(), {"--ready-file", p.ready_file});
  GrpcSecurityFiles security = SecurityFilesOf(spec.security);
  security.admin_token_file = p.admin_token_file;
  for (std::string& a : GrpcSecurityArgs(security)) args.push_back(std::move(a));
  return args;
}

std::vector<std::string> SyncerArgs(const JobSpec& spec, const SyncerProcess& p) {
  std::vector<std::string> args = {"syncer", "--listen", p.listen, "--metrics-listen",
                                   p.metrics_listen};
  if (!p.ready_file.empty()) args.insert(args.end(), {"--ready-file", p.ready_file});
  for (std::string& a : GrpcSecurityArgs(SecurityFilesOf(spec.security))) {
    args.push_back(std::move(a));
  }
  return args;
}

std::vector<std::string> TrainerArgs(const JobSpec& spec, const TrainerProcess& p) {
  std::vector<std::string> args = {"worker",
                                   "--config",
                                   p.config,
                                   "--index",
                                   std::to_string(p.index),
                                   "--ps",
                                   p.ps,
                                   "--metrics-listen",
                                   p.metrics_listen,
                                   "--data",
                                   absl::StrJoin(p.data.train, ","),
                                   "--checkpoint",
                                   p.checkpoint,
                                   "--checkpoint-interval-seconds",
                                   std::to_string(spec.checkpoint.interval_seconds)};
  if (p.data.train_examples >= 0) {
    args.insert(args.end(), {"--job-examples", std::to_string(p.data.train_examples)});
  }
  if (!p.syncers.empty()) args.insert(args.end(), {"--syncer", absl::StrJoin(p.syncers, ",")});
  if (!p.data.eval.empty())
    args.insert(args.end(), {"--eval-data", absl::StrJoin(p.data.eval, ",")});
  if (!p.report_json.empty()) args.insert(args.end(), {"--report-json", p.report_json});
  if (!p.progress_file.empty()) args.insert(args.end(), {"--progress-file", p.progress_file});
  if (!p.ready_file.empty()) args.insert(args.end(), {"--ready-file", p.ready_file});
  if (!p.export_dir.empty()) {
    args.insert(args.end(), {"--export-dir", p.export_dir, "--trainers-dir", p.trainers_dir,
                             "--export-request-file", p.export_request_file});
  }
  if (!p.init_model.empty()) args.insert(args.end(), {"--init-model", p.init_model});
  if (p.init_imported_rows >= 0) {
    args.insert(args.end(), {"--init-imported-rows", std::to_string(p.init_imported_rows)});
  }
  // spec.trainer.straggler slows trainers 0..count-1 (docs/job-spec.md).
  if (spec.trainer.straggler.has_value() && p.index < spec.trainer.straggler->count) {
    args.insert(args.end(),
                {"--straggle-delay-ms", std::to_string(spec.trainer.straggler->delay_ms),
                 "--straggle-jitter-ms", std::to_string(spec.trainer.straggler->jitter_ms)});
  }
  for (std::string& a : GrpcSecurityArgs(SecurityFilesOf(spec.security))) {
    args.push_back(std::move(a));
  }
  return args;
}

namespace {

Mutex g_user_output_mu;
// A progress line is being redrawn: the cursor is at its end.
bool g_progress_open ABSL_GUARDED_BY(g_user_output_mu) = false;

// The product's one write to stderr outside glog (docs/architecture.md,
// "Logs and output").
void WriteToUser(absl::string_view text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_user_output_mu) {
  std::cerr << text << std::flush;
}

}  // namespace

void TellUser(absl::string_view line) {
  MutexLock lock(&g_user_output_mu);
  WriteToUser(absl::StrCat(g_progress_open ? "\n" : "", line, "\n"));
  g_progress_open = false;
}

void ShowProgress(absl::string_view line, bool redraw) {
  MutexLock lock(&g_user_output_mu);
  WriteToUser(redraw ? absl::StrCat("\r", line, "\033[K") : absl::StrCat(line, "\n"));
  g_progress_open = redraw;
}

void EndProgress() {
  MutexLock lock(&g_user_output_mu);
  if (g_progress_open) WriteToUser("\n");
  g_progress_open = false;
}

}  // namespace shadowsync::cli
