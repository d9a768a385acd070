// Helpers the benchmark programs share: server child processes and /proc.
// A ChildProcess is not thread-safe (one owner: Exited and Stop reap it); the
// /proc readers are thread-safe.
#ifndef SHADOWSYNC_BENCH_BENCH_UTIL_H_
#define SHADOWSYNC_BENCH_BENCH_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shadowsync::bench {

// A child process (common/subprocess.h) running `argv` with stdout and stderr appended to a
// log file. It gets SIGTERM if this process dies (PR_SET_PDEATHSIG), so an interrupted
// benchmark leaves no server behind; the destructor SIGKILLs one still running.
class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;

  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const std::string& log_path);
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  Clock::time_point started() const { return started_; }
  const std::string& log_path() const { return log_path_; }

  // True once the child has exited (reaps it).
  bool Exited();
  // Sends `sig`, waits for the exit; returns the seconds it took. DeadlineExceeded (and a
  // SIGKILL) if it outlives `timeout`.
  absl::StatusOr<double> Stop(int sig, absl::Duration timeout);
  // Waits until the child writes `ready_file` ("GRPC_PORT METRICS_PORT", the
  // --ready-file of `shadowsync ps` and `shadowsync syncer`) and returns both ports.
  absl::StatusOr<std::pair<int, int>> WaitReady(const std::string& ready_file,
                                                absl::Duration timeout);
  // The last lines of the log, for error messages.
  std::string LogTail() const;

 private:
  ChildProcess(pid_t pid, Clock::time_point started, std::string log_path)
      : pid_(pid), started_(started), log_path_(std::move(log_path)) {}
  const pid_t pid_;
  const Clock::time_point started_;
  const std::string log_path_;
  bool exited_ = false;
};

// A field of /proc/PID/status in kB (VmRSS, VmHWM); -1 if unreadable.
int64_t ProcStatusKb(pid_t pid, const std::string& field);

// User + system CPU seconds of a process (all its threads) from /proc/PID/stat.
double ProcCpuSeconds(pid_t pid);

}  // namespace shadowsync::bench

#endif  // SHADOWSYNC_BENCH_BENCH_UTIL_H_
