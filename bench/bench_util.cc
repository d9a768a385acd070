#include "bench/bench_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/subprocess.h"

namespace shadowsync::bench {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, const std::string& log_path) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<pid_t> pid = shadowsync::Spawn(
      argv, {.stdout_path = log_path, .stderr_path = log_path, .die_with_parent = true});
  if (!pid.ok()) return pid.status();
  return std::unique_ptr<ChildProcess>(new ChildProcess(*pid, start, log_path));
}

ChildProcess::~ChildProcess() {
  if (!exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool ChildProcess::Exited() {
  if (exited_) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) exited_ = true;
  return exited_;
}

absl::StatusOr<double> ChildProcess::Stop(int sig, absl::Duration timeout) {
  if (Exited()) return 0.0;
  const Clock::time_point start = Clock::now();
  kill(pid_, sig);
  const Clock::time_point deadline = start + absl::ToChronoNanoseconds(timeout);
  while (!Exited()) {
    if (Clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      exited_ = true;
      return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " did not exit within ",
                                                      absl::FormatDuration(timeout), " of signal ",
                                                      sig, " (log: ", log_path_, ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::StatusOr<std::pair<int, int>> ChildProcess::WaitReady(const std::string& ready_file,
                                                            absl::Duration timeout) {
  const Clock::time_point deadline = Clock::now() + absl::ToChronoNanoseconds(timeout);
  while (!std::filesystem::exists(ready_file)) {
    if (Exited()) {
      return absl::InternalError(
          absl::StrCat(log_path_, ": the server exited during startup:\n", LogTail()));
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no ", ready_file, " after ", absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::ifstream in(ready_file);
  int grpc_port = 0, metrics_port = 0;
  in >> grpc_port >> metrics_port;
  if (!in) return absl::InternalError(absl::StrCat("unreadable ready file ", ready_file));
  return std::make_pair(grpc_port, metrics_port);
}

std::string ChildProcess::LogTail() const {
  std::ifstream in(log_path_);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const size_t from = lines.size() > 10 ? lines.size() - 10 : 0;
  return absl::StrJoin(lines.begin() + from, lines.end(), "\n");
}

int64_t ProcStatusKb(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1);
  }
  return -1;
}

double ProcCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command, which may contain spaces, start after the last ')'.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
  if (fields.size() < 13) return 0;
  // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::atof(fields[11].c_str()) + std::atof(fields[12].c_str())) / ticks;
}

}  // namespace shadowsync::bench
