// Helpers shared by every test: status matchers, scratch directories and the
// locations of built binaries and shared test data.
#ifndef SHADOWSYNC_TESTS_UTIL_TEST_UTIL_H_
#define SHADOWSYNC_TESTS_UTIL_TEST_UTIL_H_

#include <sys/types.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shadowsync::testing {

// absl at Debian 12's version has no status matchers; these are the two we use.
#define SS_ASSERT_OK(expr) \
  ASSERT_TRUE(::shadowsync::testing::AsStatus(expr).ok()) << ::shadowsync::testing::AsStatus(expr)
#define SS_EXPECT_OK(expr) \
  EXPECT_TRUE(::shadowsync::testing::AsStatus(expr).ok()) << ::shadowsync::testing::AsStatus(expr)

inline absl::Status AsStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// Matches a Status or StatusOr whose code is `code` and whose message contains `substr`.
MATCHER_P2(StatusIs, code, substr, "") {
  absl::Status s = ::shadowsync::testing::AsStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code && s.message().find(substr) != std::string::npos;
}

// Matches an ok StatusOr whose value equals `value`.
MATCHER_P(IsOkAndHolds, value, "") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return *arg == value;
}

// A fresh directory under the test's temp dir, removed at destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes `contents` to `path`, replacing it.
void WriteFile(const std::string& path, const std::string& contents);
std::string ReadFile(const std::string& path);

// A committed file, or the part of it from byte `begin` for `length` bytes,
// that is generated: expects it to be `generated` (else fails, telling how to
// `regenerate`); with $SHADOWSYNC_UPDATE_DOCS set, rewrites that part instead
// and returns true, and the caller then skips.
bool RewriteOrExpectGenerated(const std::string& path, const std::string& generated,
                              const std::string& regenerate, size_t begin = 0,
                              size_t length = std::string::npos);

// Directory of the built binaries ($SHADOWSYNC_BIN_DIR, else the build's bin/).
std::string BinDir();
// The source tree ($SHADOWSYNC_SOURCE_DIR, else the configured source dir).
std::string SourceDir();
// `relative` (e.g. "docs/job-spec.md") in the source tree.
std::string SourcePath(const std::string& relative);
// The real Criteo excerpt in ../shared/data/criteo, or "" when absent.
std::string CriteoSamplePath();

// Runs `cmd` in a shell; appends its stdout and stderr to `output`. Returns
// its exit code, -1 if it did not exit.
int RunShell(const std::string& cmd, std::string* output);

// Starts `<bin> run <job> --out <run>` in the background, its stderr in
// <run>.log and stdout in <run>.out; returns once <run>/<ready_trainer>.ready
// exists (or after 30 s). Aborts if it cannot start.
pid_t StartLauncher(const std::string& bin, const std::string& job, const std::string& run,
                    const std::string& ready_trainer = "trainer-1");

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_TEST_UTIL_H_
