// Small helpers shared by the `shadowsync` subcommands. The stop signals are
// process-wide: install them once, from the main thread; WakeStopWatcher may
// be called from any thread. The other functions are thread-safe
// (PrepareJobData: one caller per directory); the structs are plain values.
#ifndef SHADOWSYNC_CLI_CLI_UTIL_H_
#define SHADOWSYNC_CLI_CLI_UTIL_H_

#include <csignal>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/grpc_security.h"
#include "common/grpc_server_process.h"
#include "common/grpc_util.h"
#include "glog/logging.h"
#include "jobspec/job_spec.h"

namespace CLI {
class App;
}  // namespace CLI
namespace prometheus {
class Registry;
}  // namespace prometheus

namespace shadowsync::cli {

// Writes the ports, space-separated on one line ("GRPC_PORT METRICS_PORT" for
// the servers), atomically (common/file_util.h), so a reader (a launcher, a
// test, a benchmark) never sees a partial file.
bool WriteReadyFile(const std::string& path, std::initializer_list<int> ports);

// SIGTERM/SIGINT handling for server processes. The signal may land on any
// thread (OpenBLAS starts threads before main), so the handler only writes
// it to a pipe, which a watcher thread reads. False if the pipe cannot be made.
bool InstallStopSignals();
// Blocks until a stop signal arrives (returns it) or WakeStopWatcher() is
// called (returns 0).
int AwaitStopSignal();
void WakeStopWatcher();

// The flags every server command (`shadowsync ps`, `syncer`) shares: what
// GrpcServerProcessOptions holds, as files and seconds, and the ready file.
struct ServerFlags {
  std::string listen;
  std::string metrics_listen;
  double shutdown_grace_seconds = 5;
  GrpcServerLimits limits;
  std::string ready_file;
  GrpcSecurityFiles security;
};
// Registers --listen and --metrics-listen (defaulting to what `flags` holds),
// --max-message-bytes, --max-concurrent-streams and --grpc-memory-bytes
// (docs/reliability.md, "Limits"), --shutdown-grace-seconds, --ready-file and
// the security flags on `cmd`, filling `flags`.
void AddServerFlags(CLI::App& cmd, ServerFlags& flags);
// The process options `flags` describe, with the security files loaded:
// InvalidArgument naming the flag and path of a bad file.
absl::StatusOr<GrpcServerProcessOptions> ServerProcessOptions(const ServerFlags& flags);

// Runs a server process: completes `options` (a GrpcServerProcessOptions) from
// `flags`, installs the stop signals, starts the server with
// `start(std::move(options))` (returning absl::StatusOr<std::unique_ptr<S>>,
// where S has grpc_port(), metrics_port(), Shutdown() and Wait()), writes
// flags.ready_file if given, and shuts the server down on SIGTERM/SIGINT.
// Returns the exit code: 2 for invalid arguments, 1 for other failures, 0
// after a clean stop.
template <typename Options, typename StartFn>
int ServeUntilSignal(const std::string& name, const ServerFlags& flags, Options options,
                     StartFn start) {
  absl::StatusOr<GrpcServerProcessOptions> process = ServerProcessOptions(flags);
  if (!process.ok()) {
    LOG(ERROR) << name << ": " << process.status().message();
    return 2;
  }
  static_cast<GrpcServerProcessOptions&>(options) = *std::move(process);
  if (!InstallStopSignals()) {
    LOG(ERROR) << name << ": cannot create the signal pipe";
    return 1;
  }
  auto server = start(std::move(options));
  if (!server.ok()) {
    LOG(ERROR) << name << ": " << server.status();
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  auto* s = server->get();
  const std::string& ready_file = flags.ready_file;
  if (!ready_file.empty() && !WriteReadyFile(ready_file, {s->grpc_port(), s->metrics_port()})) {
    LOG(ERROR) << name << ": cannot write --ready-file " << ready_file;
    s->Shutdown();
    return 1;
  }
  std::thread watcher([s, &name] {
    if (const int sig = AwaitStopSignal(); sig != 0) {
      LOG(INFO) << name << " received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT");
    }
    s->Shutdown();
  });
  s->Wait();
  WakeStopWatcher();  // In case Shutdown came from elsewhere.
  watcher.join();
  return 0;
}

// Registers --tls-ca-file, --tls-cert-file, --tls-key-file, --tls-server-name
// and --auth-token-file on `cmd`, filling `files`.
void AddSecurityFlags(CLI::App& cmd, GrpcSecurityFiles& files);
// The file paths of a job's spec.security (empty where a section is absent).
GrpcSecurityFiles SecurityFilesOf(const SecuritySpec& security);

// Splits comma-separated lists given as one or several flags.
std::vector<std::string> SplitList(const std::vector<std::string>& flags);

// Adds a gauge without labels, set to `value` once: a fact about this process
// for /metrics (a trainer finished, the rows it imported).
void AddFixedGauge(prometheus::Registry& registry, const std::string& name, const std::string& help,
                   double value);

// The training and held-out files of a job. criteo-tsv: the spec's paths.
// synthetic: generates examples + evalExamples from one teacher into `dir`
// (reusing files a previous call left there) and splits them.
struct JobData {
  std::vector<std::string> train, eval;
  int64_t train_examples = -1;  // Known for synthetic data only.
};
absl::StatusOr<JobData> PrepareJobData(const JobSpec& spec, const std::string& dir);

// The arguments (after the binary) that run one process of a job's role:
// shared by the local launcher and `shadowsync pod`, so both start servers
// and trainers the same way from the same spec. Each carries the security
// flags of spec.security (file paths only).
struct PsProcess {
  std::string listen, metrics_listen, db;
  // --peers and --self-index matter only for a server's first start: after
  // it, the shard map persisted in its directory is the truth.
  std::vector<std::string> peers;
  int self_index = 0;
  bool join = false;  // Owns no slot until a reshard gives it some.
  std::string ready_file;
  // The admin token the server requires of its admin RPCs (the launcher's,
  // the operator's). Empty: none.
  std::string admin_token_file;
};
std::vector<std::string> PsArgs(const JobSpec& spec, const PsProcess& p);

struct SyncerProcess {
  std::string listen, metrics_listen, ready_file;
};
std::vector<std::string> SyncerArgs(const JobSpec& spec, const SyncerProcess& p);

struct TrainerProcess {
  std::string config;  // The job file (as the launcher or the operator rendered it).
  int index = 0;
  std::string ps;  // Any parameter server; the rest comes with its shard map.
  std::vector<std::string> syncers;
  std::string metrics_listen;
  JobData data;
  std::string checkpoint;
  std::string report_json, progress_file, ready_file;  // Optional.
  // In a cluster with exports (cli/cluster_export.h): the claim's mount,
  // this job's trainer files there, and the export-request file.
  std::string export_dir, trainers_dir, export_request_file;
  // A warm start in a cluster: the export's mounted path, and the rows
  // trainer 0 loaded (-1: not trainer 0, or no warm start).
  std::string init_model;
  int64_t init_imported_rows = -1;
};
std::vector<std::string> TrainerArgs(const JobSpec& spec, const TrainerProcess& p);

// Output for the person running a command, which is not a log
// (docs/architecture.md, "Logs and output"): the live progress line of
// `train` and `run`, and why a command they wait for exits non-zero. Written
// to stderr at any --log-level; besides glog, nothing else in the product
// writes to stderr. Results go to stdout. Thread-safe.
//
// Tells the user `line` (adding the newline), below any progress line shown.
void TellUser(absl::string_view line);
// Shows `line` as the progress: redrawn in place if `redraw` (stderr is a
// terminal), else printed as a line of its own.
void ShowProgress(absl::string_view line, bool redraw);
// Ends a progress line being redrawn, so that what follows (logs too) starts
// on a line of its own. Does nothing if none is.
void EndProgress();

}  // namespace shadowsync::cli

#endif  // SHADOWSYNC_CLI_CLI_UTIL_H_
