// The local launcher behind `shadowsync run job.yaml`: the whole job as child
// processes on loopback (DESIGN.md §1). It validates the job with the same
// code the operator uses, prepares the data, starts the parameter servers
// and syncers (each on a port chosen up front, so a restarted server comes
// back at the same address), waits until each is ready, starts the trainers,
// shows one progress display, restarts a crashed child up to
// runPolicy.backoffLimit times, and finally writes report.json and
// report.svg into the run directory.
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
};

// Runs the job to its end. InvalidArgument (before anything starts) for an
// invalid job; Cancelled when stopped; Aborted when a child crashed more
// often than backoffLimit allows. The report is also written to
// <run_dir>/report.json.
absl::StatusOr<nlohmann::json> RunJob(const LaunchOptions& options);

}  // namespace shadowsync::cli

#endif  // SHADOWSYNC_CLI_LAUNCHER_H_
