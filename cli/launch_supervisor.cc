// Launch (cli/launch_internal.h): the child processes.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/cli_util.h"
#include "cli/launch_internal.h"
#include "common/status_macros.h"
#include "glog/logging.h"

extern char** environ;

namespace shadowsync::cli::internal {

absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  if (!ok) return absl::UnavailableError("cannot find a free port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

double Num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
int64_t Int(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}

absl::Status Launch::Spawn(Child& c) {
  if (!c.ready.empty()) fs::remove(c.ready);
  std::vector<std::string> args = c.argv;
  if (c.skip_examples > 0) {
    args.insert(args.end(), {"--skip-examples", std::to_string(c.skip_examples)});
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Opened before the fork: the child may only make async-signal-safe calls.
  const int log = open(c.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::UnavailableError(absl::StrCat("cannot open ", c.log));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Its own process group: a terminal's Ctrl-C reaches the launcher only,
    // which then stops every child in order. And a child dies with the
    // launcher (even a SIGKILLed one) instead of living on as an orphan.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the launcher died before prctl
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execve(argv[0], argv.data(), environ);
    _exit(127);
  }
  close(log);
  if (pid < 0) {
    c.pid = -1;
    return absl::UnavailableError(absl::StrCat("cannot start ", c.name, ": ", strerror(errno)));
  }
  c.pid = pid;
  return absl::OkStatus();
}

absl::Status Launch::AwaitReady(Child& c) {
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    if (options_.stop != nullptr && options_.stop->load()) return absl::CancelledError("stopped");
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      c.pid = -1;
      return absl::UnavailableError(
          absl::StrCat(c.name, " exited before it was ready; see ", c.log));
    }
    std::ifstream in(c.ready);
    int grpc_port = 0, metrics_port = 0;
    if (in >> grpc_port >> metrics_port) {
      c.metrics_port = metrics_port;
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(c.name, " not ready after 120 s; see ", c.log));
}

absl::Status Launch::Reap() {
  while (true) {
    int status = 0;
    rusage usage{};
    const pid_t pid = wait4(-1, &status, WNOHANG, &usage);
    if (pid <= 0) return absl::OkStatus();
    auto it = std::find_if(children_.begin(), children_.end(),
                           [pid](const Child& c) { return c.pid == pid; });
    if (it == children_.end()) continue;
    Child& c = *it;
    c.pid = -1;
    c.peak_rss_kb = std::max<int64_t>(c.peak_rss_kb, usage.ru_maxrss);
    if (c.role == Role::kTrainer && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      c.finished = true;
      continue;
    }
    const std::string how = WIFSIGNALED(status)
                                ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                : absl::StrCat("exited with ", WEXITSTATUS(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.name, " ", how, " (bad input); see ", c.log));
    }
    if (++restarts_ > job_.spec.run_policy.backoff_limit) {
      return absl::AbortedError(absl::StrCat(c.name, " ", how, "; ", restarts_ - 1,
                                             " restarts used up runPolicy.backoffLimit = ",
                                             job_.spec.run_policy.backoff_limit, "; see ", c.log));
    }
    if (c.role == Role::kTrainer) {
      // Resume after what its last progress report counted: at most one
      // progress interval of its share is trained twice.
      std::ifstream in(run_dir_ + "/" + c.name + ".progress.json");
      nlohmann::json p = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (p.is_object()) c.skip_examples += Int(p, "examples");
      fs::remove(run_dir_ + "/" + c.name + ".progress.json");
    }
    EndProgress();
    LOG(WARNING) << c.name << " " << how << "; restarting (" << restarts_ << " of "
                 << job_.spec.run_policy.backoff_limit << ")"
                 << (c.skip_examples > 0 ? absl::StrCat(", resuming after ", c.skip_examples,
                                                        " examples of its share")
                                         : "");
    SS_RETURN_IF_ERROR(Spawn(c));
    if (c.role != Role::kTrainer) SS_RETURN_IF_ERROR(AwaitReady(c));
  }
}

// Waits for `c` (sent SIGTERM already), with SIGKILL after `deadline`.
void Launch::AwaitExit(Child& c, Clock::time_point deadline) {
  while (c.pid > 0) {
    int status = 0;
    rusage usage{};
    const pid_t pid = wait4(c.pid, &status, WNOHANG, &usage);
    if (pid == c.pid || pid < 0) {
      c.peak_rss_kb = std::max<int64_t>(c.peak_rss_kb, usage.ru_maxrss);
      c.pid = -1;
      break;
    }
    if (Clock::now() > deadline) kill(c.pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Launch::Stop(Child& c) {
  if (c.pid <= 0) return;
  kill(c.pid, SIGTERM);
  AwaitExit(c, Clock::now() + std::chrono::seconds(20));
}

void Launch::StopAll() {
  // Every child at once, then the waits: shutdowns overlap.
  for (Child& c : children_) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  for (Child& c : children_) AwaitExit(c, deadline);
}

Child Launch::PsChild(int i, const std::string& address, bool join) const {
  Child c{.name = absl::StrCat("ps-", i), .role = Role::kPs};
  c.log = absl::StrCat(run_dir_, "/", c.name, ".log");
  c.ready = absl::StrCat(run_dir_, "/", c.name, ".ready");
  c.argv = {options_.binary};
  for (std::string& a : PsArgs(job_.spec, {.listen = address,
                                          .metrics_listen = "127.0.0.1:0",
                                          .db = absl::StrCat(run_dir_, "/ps-", i),
                                          .peers = ps_addresses_,
                                          .self_index = i,
                                          .join = join,
                                          .ready_file = c.ready})) {
    c.argv.push_back(std::move(a));
  }
  return c;
}

void Launch::WriteLaunchState() const {
  const nlohmann::json state = {{"parameter_servers", ps_addresses_.size()},
                                {"ps_addresses", ps_addresses_}};
  const std::string path = run_dir_ + "/launch.json";
  std::ofstream(path + ".tmp") << state.dump(2) << "\n";
  fs::rename(path + ".tmp", path);
}

}  // namespace shadowsync::cli::internal
