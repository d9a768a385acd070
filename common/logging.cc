#include "common/logging.h"

#include <stdlib.h>

#include <array>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace shadowsync {
namespace {

// Indexed by LogLevel.
constexpr std::array<const char*, 3> kLevelNames = {"info", "warning", "error"};

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (name == kLevelNames[i]) return static_cast<LogLevel>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", name, "' is not one of ", LogLevelNames()));
}

std::string LogLevelNames() { return absl::StrJoin(kLevelNames, "|"); }

void InitLogging(const char* argv0, const LogOptions& options) {
  FLAGS_logtostderr = true;
  if (options.level.has_value()) {
    FLAGS_minloglevel = static_cast<int>(*options.level);
    setenv("GLOG_minloglevel", std::to_string(FLAGS_minloglevel).c_str(), 1);
  }
  if (options.verbosity.has_value()) {
    FLAGS_v = *options.verbosity;
    setenv("GLOG_v", std::to_string(FLAGS_v).c_str(), 1);
  }
  // glog may be initialised once per process; a second call only sets the level.
  if (!google::IsGoogleLoggingInitialized()) google::InitGoogleLogging(argv0);
}

}  // namespace shadowsync
