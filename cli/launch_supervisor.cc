// Launch (cli/launch_internal.h): the child processes.
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/launch_internal.h"
#include "common/exit_codes.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "glog/logging.h"

namespace shadowsync::cli::internal {

namespace {

// "; last log line: ..." of the file at `path`, or "" if it has none.
std::string LastLogLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  const std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(tail), '\n', absl::SkipWhitespace());
  if (lines.empty()) return "";
  absl::string_view last = lines.back();
  if (last.size() > 300) last = last.substr(last.size() - 300);
  return absl::StrCat("; last log line: ", last);
}

}  // namespace

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
  // Its own process group: a terminal's Ctrl-C reaches the launcher only,
  // which then stops every child in order. And a child dies with the
  // launcher (even a SIGKILLed one) instead of living on as an orphan.
  absl::StatusOr<pid_t> pid = shadowsync::Spawn(args, {.stdout_path = c.log,
                                                       .stderr_path = c.log,
                                                       .new_process_group = true,
                                                       .die_with_parent = true});
  if (!pid.ok()) {
    c.pid = -1;
    return absl::UnavailableError(
        absl::StrCat("cannot start ", c.name, ": ", pid.status().message()));
  }
  c.pid = *pid;
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
          absl::StrCat(c.name, " exited before it was ready; see ", c.log, LastLogLine(c.log)));
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
    // Why it failed, where its log may not outlive the run (a test's or a
    // CI's temporary directory).
    const std::string last_line = LastLogLine(c.log);
    if (c.role == Role::kTrainer && WIFEXITED(status) && WEXITSTATUS(status) == kExitNotLearning) {
      return absl::AbortedError(absl::StrCat(c.name, " stopped: its run is not learning (",
                                             "spec.trainer.learningCheck.fail); see ", c.log,
                                             last_line));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == kExitBadInput) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.name, " ", how, " (bad input); see ", c.log, last_line));
    }
    if (++restarts_ > job_.spec.run_policy.backoff_limit) {
      return absl::AbortedError(absl::StrCat(
          c.name, " ", how, "; ", restarts_ - 1, " restarts used up runPolicy.backoffLimit = ",
          job_.spec.run_policy.backoff_limit, "; see ", c.log, last_line));
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
                                         : "")
                 << last_line;
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
                                          .ready_file = c.ready,
                                          .admin_token_file = admin_token_file_})) {
    c.argv.push_back(std::move(a));
  }
  return c;
}

void Launch::WriteLaunchState() const {
  nlohmann::json state = {{"parameter_servers", ps_addresses_.size()},
                          {"ps_addresses", ps_addresses_}};
  // The servers may disagree on the shard map until a resume repairs it.
  if (resharding_to_ > 0) state["resharding_to"] = resharding_to_;
  const std::string path = run_dir_ + "/launch.json";
  if (absl::Status s = WriteFileAtomically(path, state.dump(2) + "\n"); !s.ok()) {
    EndProgress();
    LOG(WARNING) << s.message();
  }
}

}  // namespace shadowsync::cli::internal
