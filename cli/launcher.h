// The local launcher behind `shadowsync run job.yaml`: the whole job as child
// processes on loopback (docs/architecture.md). It validates the job with the
// operator's code, prepares the data, starts the parameter servers and
// syncers on ports chosen up front (a restarted server comes back at the same
// address), then the trainers; it shows progress, restarts a crashed child up
// to runPolicy.backoffLimit times, reshards and exports on request (below),
// exports every spec.export.intervalSeconds and at completion, and writes
// report.json and report.svg into the run directory. A killed launcher
// resumes with LaunchOptions::resume (docs/resharding.md).
// Thread-safe: RunJob blocks its calling thread for the whole job; the
// Request* functions talk to it through files in its run directory, from
// any thread or process.
#ifndef SHADOWSYNC_CLI_LAUNCHER_H_
#define SHADOWSYNC_CLI_LAUNCHER_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace shadowsync::cli {

struct LaunchOptions {
  std::string job_path;
  std::string run_dir;  // Output folder; created. Default: runs/<job name>.
  std::string binary;   // The `shadowsync` executable the children run.
  double progress_interval_seconds = 2.0;
  bool tty = false;  // Redraw one progress line instead of printing one per interval.
  // Set (e.g. by a signal handler) to stop the job: every child gets SIGTERM.
  const std::atomic<bool>* stop = nullptr;
  // Continue the job in run_dir from its servers' state and the trainers'
  // checkpoints instead of starting fresh.
  bool resume = false;
  // Sets spec.trainer.learningCheck.fail: a trainer whose run is not
  // learning fails the job.
  bool fail_on_divergence = false;
};

struct ScaleRequest {
  std::string run_dir;
  int parameter_servers = 0;
  // Stop the trainers (SIGSTOP) while the slots move, so that the cluster's
  // row and value checksums must be equal before and after.
  bool pause = false;
  double timeout_seconds = 600;
};

// Asks the launcher running in request.run_dir to reshard, and waits for
// its answer: the resharding report (ps/client/resharder.h's ReshardReportToJson).
// FailedPrecondition if no launcher runs there; the launcher's error if the
// reshard failed (a failed step is rolled back; training goes on).
absl::StatusOr<nlohmann::json> RequestScale(const ScaleRequest& request);

// Asks the launcher running in run_dir for an export of the model now
// (docs/export.md), and waits for its summary (exporter::ExportJob's).
// FailedPrecondition if no launcher runs there.
absl::StatusOr<nlohmann::json> RequestExport(const std::string& run_dir, double timeout_seconds);

// Runs the job to its end. InvalidArgument (before anything starts) for an
// invalid job; Cancelled when stopped; Aborted when a child crashed more
// often than backoffLimit allows. The report is also written to
// <run_dir>/report.json.
absl::StatusOr<nlohmann::json> RunJob(const LaunchOptions& options);

}  // namespace shadowsync::cli

#endif  // SHADOWSYNC_CLI_LAUNCHER_H_
