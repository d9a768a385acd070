#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace shadowsync {
namespace {

absl::Status ErrnoError(absl::string_view what, absl::string_view name, int error) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", name, ": ", std::strerror(error), " (errno ", error, ")"));
}

// As execvp looks a name up, but in the parent: execvp may allocate.
absl::StatusOr<std::string> FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return absl::NotFoundError(absl::StrCat("cannot start ", name, ": not found on $PATH"));
}

// This process's environment with `overrides` set over it.
std::vector<std::string> Environment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& o : overrides) {
      replaced = replaced || (o.size() > name.size() && o.compare(0, name.size(), name) == 0 &&
                              o[name.size()] == '=');
    }
    if (!replaced) env.emplace_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

// Makes `fd` the child's descriptor `target`. Async-signal-safe.
bool Redirect(int fd, int target) {
  if (fd < 0) return true;
  // The same number: only the close-on-exec flag to clear (dup2 would not).
  if (fd == target) return ::fcntl(target, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("Spawn: empty argv");
  absl::StatusOr<std::string> program = FindProgram(argv[0]);
  if (!program.ok()) return program.status();
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env = Environment(options.env);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  // Every descriptor opened here is close-on-exec: only the redirected copies
  // reach the program, and no other thread's child inherits them.
  std::vector<int> opened;
  absl::Cleanup close_opened = [&opened] {
    for (const int fd : opened) ::close(fd);
  };
  auto open_file = [&opened](const std::string& path, int flags) -> absl::StatusOr<int> {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("cannot open", path, errno);
    opened.push_back(fd);
    return fd;
  };
  const int out_flags = O_WRONLY | O_CREAT | (options.truncate_output ? O_TRUNC : O_APPEND);
  int in_fd = options.stdin_fd, out_fd = options.stdout_fd, err_fd = -1;
  if (!options.stdin_path.empty() && options.stdin_fd < 0) {
    absl::StatusOr<int> fd = open_file(options.stdin_path, O_RDONLY);
    if (!fd.ok()) return fd.status();
    in_fd = *fd;
  }
  if (!options.stdout_path.empty() && options.stdout_fd < 0) {
    absl::StatusOr<int> fd = open_file(options.stdout_path, out_flags);
    if (!fd.ok()) return fd.status();
    out_fd = *fd;
  }
  if (!options.stderr_path.empty()) {
    if (options.stderr_path == options.stdout_path && options.stdout_fd < 0) {
      err_fd = out_fd;
    } else {
      absl::StatusOr<int> fd = open_file(options.stderr_path, out_flags);
      if (!fd.ok()) return fd.status();
      err_fd = *fd;
    }
  }
  // The child writes exec's errno here; end of file means exec succeeded.
  int exec_error[2];
  if (::pipe2(exec_error, O_CLOEXEC) != 0) return ErrnoError("cannot start", argv[0], errno);
  opened.push_back(exec_error[0]);
  opened.push_back(exec_error[1]);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: async-signal-safe calls only, from here to exec.
    if (options.new_process_group) ::setpgid(0, 0);
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);  // The parent died before prctl.
    }
    // A blocked signal stays blocked across exec; the caller's threads may
    // block the ones they wait for.
    ::sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    if (Redirect(in_fd, STDIN_FILENO) && Redirect(out_fd, STDOUT_FILENO) &&
        Redirect(err_fd, STDERR_FILENO)) {
      ::execve(program->c_str(), args.data(), envp.data());
    }
    const int error = errno;
    if (::write(exec_error[1], &error, sizeof(error)) < 0) {
    }
    ::_exit(127);
  }
  if (pid < 0) return ErrnoError("cannot fork to start", argv[0], errno);
  ::close(exec_error[1]);
  opened.pop_back();
  int error = 0;
  ssize_t n;
  while ((n = ::read(exec_error[0], &error, sizeof(error))) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof(error))) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return ErrnoError("cannot execute", *program, error);
  }
  return pid;
}

}  // namespace shadowsync
