#include "tests/util/json_line_process.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"

namespace shadowsync::testing {

absl::StatusOr<std::unique_ptr<JsonLineProcess>> JsonLineProcess::Start(
    std::vector<std::string> argv) {
  // A socket rather than pipes: send(MSG_NOSIGNAL) to a child that died
  // fails instead of killing this process with SIGPIPE.
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::UnavailableError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  absl::StatusOr<pid_t> pid = Spawn(argv, {.stdin_fd = sv[1], .stdout_fd = sv[1]});
  ::close(sv[1]);
  if (!pid.ok()) {
    ::close(sv[0]);
    return pid.status();
  }
  return std::unique_ptr<JsonLineProcess>(new JsonLineProcess(argv[0], *pid, sv[0]));
}

JsonLineProcess::~JsonLineProcess() {
  {
    absl::MutexLock l(&mu_);
    ::close(fd_);
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

absl::StatusOr<nlohmann::json> JsonLineProcess::Call(const nlohmann::json& request) {
  absl::MutexLock l(&mu_);
  const std::string line = request.dump() + "\n";
  for (size_t sent = 0; sent < line.size();) {
    const ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(
          absl::StrCat(name_, " exited or closed its input: ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  size_t end;
  while ((end = buffered_.find('\n')) == std::string::npos) {
    char buf[65536];
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat(name_, " exited without answering"));
    buffered_.append(buf, static_cast<size_t>(n));
  }
  std::string reply = buffered_.substr(0, end);
  buffered_.erase(0, end + 1);
  nlohmann::json parsed = nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::UnavailableError(absl::StrCat(name_, " answered with no JSON: ", reply));
  }
  return parsed;
}

}  // namespace shadowsync::testing
