// Starting child processes: the one fork/exec of the launcher, the pod
// command, the benchmarks and the tests.
//
//   SS_ASSIGN_OR_RETURN(pid_t pid, Spawn({binary, "ps", "--listen", address},
//                                        {.stdout_path = log, .stderr_path = log,
//                                         .new_process_group = true}));
//   ... waitpid(pid, &status, 0);
//
// Everything the child needs (argv, environment, opened files, the program's
// path) is prepared before fork: between fork and exec the child makes only
// async-signal-safe calls, since another thread may hold malloc's or a
// logger's lock at the moment of the fork. The caller reaps the child.
#ifndef SHADOWSYNC_COMMON_SUBPROCESS_H_
#define SHADOWSYNC_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shadowsync {

struct SpawnOptions {
  // "NAME=value" entries over this process's environment (each replaces a
  // variable of the same name).
  std::vector<std::string> env;
  // Files for the child's standard streams; empty keeps this process's.
  // Output files are created (0644) and appended to, or truncated first with
  // `truncate_output`; stdout and stderr naming one file share one
  // descriptor, so their lines interleave in order.
  std::string stdin_path;
  std::string stdout_path;
  std::string stderr_path;
  bool truncate_output = false;
  // Instead of stdin_path or stdout_path: a descriptor this process holds (a
  // pipe's read or write end). -1: none.
  int stdin_fd = -1;
  int stdout_fd = -1;
  // A process group of its own (its pgid is its pid): a terminal's Ctrl-C
  // reaches only this process, and kill(-pid, sig) reaches the child and
  // everything it starts.
  bool new_process_group = false;
  // SIGTERM to the child when this process dies, even by SIGKILL
  // (PR_SET_PDEATHSIG), so that nothing lives on as an orphan.
  bool die_with_parent = false;
};

// Starts argv[0] (a path, or a name looked up on $PATH) with `argv` and
// returns its pid once it has exec'd. The child starts with no signals
// blocked. Errors name the program: NotFound when it is not on $PATH,
// Unavailable when a file cannot be opened, fork fails or exec fails (the
// failed child is reaped).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_SUBPROCESS_H_
