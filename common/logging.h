// Logging of every ShadowSync process: glog (LOG(INFO|WARNING|ERROR),
// VLOG(n)), to stderr only. Containers, the launcher and `shadowsync pod`
// capture stderr, so no process writes log files. What is a log and what is
// output for the user of a command: docs/architecture.md, "Logs and output".
//
//   int main(int argc, char** argv) {
//     shadowsync::InitLogging(argv[0], {.level = shadowsync::LogLevel::kWarning});
//     LOG(INFO) << "hidden";  LOG(WARNING) << "shown";
//   }
#ifndef SHADOWSYNC_COMMON_LOGGING_H_
#define SHADOWSYNC_COMMON_LOGGING_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shadowsync {

// The least severe messages shown; glog's severities, in its order.
enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2 };

// "info", "warning" or "error" (the --log-level values); InvalidArgument otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
// The --log-level values, for a flag's help text: "info|warning|error".
std::string LogLevelNames();

struct LogOptions {
  // Unset: $GLOG_minloglevel, else kInfo.
  std::optional<LogLevel> level;
  // VLOG(n) is shown for n <= verbosity (and only if INFO is). Unset: $GLOG_v, else 0.
  std::optional<int> verbosity;
};

// Starts glog for this process, logging to stderr only, at the given level
// and verbosity. Both are also exported as $GLOG_minloglevel and $GLOG_v, from
// which glog takes its defaults, so the processes this one starts (the
// launcher's servers and trainers, the role `shadowsync pod` runs) log at the
// same level. Call once, early in main, before any thread that logs.
void InitLogging(const char* argv0, const LogOptions& options = {});

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_LOGGING_H_
