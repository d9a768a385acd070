// Private to cli/: the launcher behind `shadowsync run` (cli/launcher.h), one
// Launch per job, split by concern:
//   launcher.cc         Run: the job from start to report, and RunJob
//   launch_supervisor.cc  the child processes: spawn, readiness, reaping and
//                       restarts, stopping
//   launch_report.cc    the progress line, the report JSON and its chart
//   launch_scale.cc     live resharding (`shadowsync scale`)
//   launch_export.cc    model exports while training and at the end
//   launch_control.cc   the control directory: requests from `shadowsync
//                       scale|export` and their answers, both sides
// Not thread-safe: a Launch is driven by the one thread that calls Run (a
// background export runs on a future that touches none of its members).
#ifndef SHADOWSYNC_CLI_LAUNCH_INTERNAL_H_
#define SHADOWSYNC_CLI_LAUNCH_INTERNAL_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/launcher.h"
#include "common/grpc_security.h"
#include "exporter/job_export.h"
#include "jobspec/job_spec.h"
#include "nlohmann/json.hpp"

namespace shadowsync::cli::internal {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// How long a drained parameter server keeps answering after a scale-in.
inline constexpr std::chrono::seconds kDrainedLinger(2);

absl::StatusOr<int> FreePort();

// A number field of a child's JSON file, or 0: a NaN is written as null,
// and a file may be older than the field.
double Num(const nlohmann::json& j, const char* key);
int64_t Int(const nlohmann::json& j, const char* key);

enum class Role { kPs, kSyncer, kTrainer };

struct Child {
  std::string name;  // "ps-0", "syncer-0", "trainer-1"
  Role role;
  std::vector<std::string> argv;
  std::string log, ready;
  pid_t pid = -1;
  bool finished = false;      // A trainer that exited 0.
  int64_t skip_examples = 0;  // A restarted trainer resumes after these.
  std::string checkpoint;     // A trainer's dense checkpoint.
  int metrics_port = 0;
  int64_t peak_rss_kb = 0;  // Over every incarnation.
};

class Launch {
 public:
  explicit Launch(const LaunchOptions& options) : options_(options) {}
  ~Launch() { StopAll(); }

  absl::StatusOr<nlohmann::json> Run();

 private:
  absl::Status Spawn(Child& c);
  // Waits for c's ready file; its metrics port is the file's second number.
  absl::Status AwaitReady(Child& c);
  // Reaps exited children; restarts crashed ones. Error when out of restarts.
  absl::Status Reap();
  void StopAll();
  // Stops one child (SIGTERM, then SIGKILL after 20 s) and reaps it.
  void Stop(Child& c);
  void AwaitExit(Child& c, Clock::time_point deadline);
  // ps-i at `address`; `join`: owning nothing until a reshard gives it slots.
  Child PsChild(int i, const std::string& address, bool join) const;
  // Serves a pending `shadowsync scale` request, if any. Only a reshard that
  // lost data is an error: the job must not go on.
  absl::Status PollControl();
  absl::StatusOr<nlohmann::json> ScaleTo(int n, bool pause);
  // On --resume of a launcher killed during a reshard to `n` servers:
  // ps_addresses_ lists every server the reshard involved, serving on new
  // ports. Repairs their shard maps, then completes the reshard.
  absl::Status FinishInterruptedReshard(int n);
  // After a reshard failed: repairs the shard maps of `involved` (every
  // server the reshard touched), restarting dead servers meanwhile, for up
  // to a minute.
  absl::Status RepairAfterFailedReshard(const std::vector<std::string>& involved);
  // Stops ps-`first` and every later server, which have left the job.
  void StopServersFrom(int first);
  // ReshardOptions::kill_point of the launcher's reshards, from
  // $SHADOWSYNC_KILL_POINT (docs/resharding.md).
  std::function<absl::Status(std::string_view, int)> KillPoint();
  // Exports of the model (exporter/job_export.h). While training runs, an
  // export runs in the background after the trainers were asked for fresh
  // checkpoints (SIGUSR1); one at a time. `request_id` (a `shadowsync
  // export`, "" for an interval) is answered when it ends; a request that
  // finds an export running is queued for the next one, which starts as
  // soon as it ends (or is answered by the final export). `delta`: a delta
  // export over the newest (spec.export.deltaIntervalSeconds), started only
  // when no export runs.
  void StartExport(const std::string& request_id, bool delta = false);
  // Collects a finished background export; `wait`: waits for a running one.
  void PollExport(bool wait);
  // Once training has ended: the export scored on the eval data.
  absl::StatusOr<nlohmann::json> FinalExport();
  void AnswerQueuedExports(const absl::StatusOr<nlohmann::json>& summary);
  exporter::JobExportRequest ExportRequest() const;
  std::string ExportsDir() const;
  void LogExport(const nlohmann::json& summary) const;
  // Writes control/<kind>-<id>.result.json through a rename.
  void AnswerControl(const std::string& kind, const std::string& id,
                     const nlohmann::json& result) const;
  // What a resume needs to know beyond the job: the parameter servers now,
  // and the reshard under way (resharding_to_).
  void WriteLaunchState() const;
  void ShowProgress(bool final);
  // Logs where a child's /metrics and log file are.
  void LogEndpoints(const Child& c) const;
  nlohmann::json Report(double seconds);
  // The report's chart (report.svg), with the eval and teacher NE of `report`.
  void WritePlot(const std::string& path, const nlohmann::json& report) const;

  const LaunchOptions& options_;
  ShadowSyncJob job_;
  // Of the launcher's own calls to the servers: spec.security, plus the admin
  // token in admin_token_file_ (<run_dir>/admin-token), which they send.
  GrpcSecurity security_;
  std::string run_dir_;
  std::string admin_token_file_;
  std::vector<Child> children_;
  std::vector<std::string> ps_addresses_;  // ps-i at [i]; changes with scale
  int resharding_to_ = 0;                  // While a reshard runs: its server count.
  int kill_point_calls_ = 0;               // Of KillPoint()'s point, so far.
  std::vector<std::string> syncer_addresses_;
  std::vector<std::string> checkpoints_;  // trainer-i's at [i]
  std::vector<std::string> eval_data_;
  nlohmann::json init_;                     // The warm start's import, if any.
  nlohmann::json latest_export_ = nullptr;  // Summary of the newest export.
  Clock::time_point last_export_;
  Clock::time_point last_delta_;  // Or full export: either makes the model fresh.
  struct RunningExport {
    std::future<absl::StatusOr<nlohmann::json>> result;
    std::vector<std::string> request_ids;
    double job_seconds = 0;  // When it started.
  };
  std::optional<RunningExport> export_;
  std::vector<std::string> queued_export_requests_;
  nlohmann::json reshards_ = nlohmann::json::array();
  nlohmann::json retired_peak_rss_ = nlohmann::json::object();  // Servers scaled away.
  int restarts_ = 0;
  int64_t total_examples_ = -1;
  Clock::time_point start_;
  struct Sample {
    double seconds, examples_per_second, train_ne;
    int64_t examples;
  };
  std::vector<Sample> samples_;
  int64_t last_examples_ = 0;
  double last_seconds_ = 0;
};

}  // namespace shadowsync::cli::internal

#endif  // SHADOWSYNC_CLI_LAUNCH_INTERNAL_H_
