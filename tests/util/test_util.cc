#include "tests/util/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/subprocess.h"

namespace shadowsync::testing {

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  const char* base = std::getenv("TEST_TMPDIR");
  path_ = std::filesystem::path(base ? base : std::filesystem::temp_directory_path().string()) /
          ("shadowsync_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool RewriteOrExpectGenerated(const std::string& path, const std::string& generated,
                              const std::string& regenerate, size_t begin, size_t length) {
  std::string committed = ReadFile(path);
  if (std::getenv("SHADOWSYNC_UPDATE_DOCS") != nullptr) {
    committed.replace(begin, length, generated);
    WriteFile(path, committed);
    return true;
  }
  EXPECT_EQ(committed.substr(begin, length), generated)
      << path << " is stale; regenerate with " << regenerate;
  return false;
}

std::string SourceDir() {
  const char* src = std::getenv("SHADOWSYNC_SOURCE_DIR");
  return src ? src : SHADOWSYNC_DEFAULT_SOURCE_DIR;
}

std::string SourcePath(const std::string& relative) {
  return (std::filesystem::path(SourceDir()) / relative).string();
}

std::string BinDir() {
  const char* dir = std::getenv("SHADOWSYNC_BIN_DIR");
  return dir ? dir : SHADOWSYNC_DEFAULT_BIN_DIR;
}

std::string CriteoSamplePath() {
  const char* src = std::getenv("SHADOWSYNC_SOURCE_DIR");
  std::filesystem::path p = std::filesystem::path(src ? src : SHADOWSYNC_DEFAULT_SOURCE_DIR) /
                            ".." / "shared" / "data" / "criteo" / "criteo_sample.tsv";
  return std::filesystem::exists(p) ? p.lexically_normal().string() : "";
}

int RunShell(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

pid_t StartLauncher(const std::string& bin, const std::string& job, const std::string& run,
                    const std::string& ready_trainer) {
  absl::StatusOr<pid_t> started =
      Spawn({bin, "run", job, "--out", run, "--progress-interval", "0.2"},
            {.stdout_path = run + ".out", .stderr_path = run + ".log", .truncate_output = true});
  // Never -1: the caller's kill(-1, sig) would signal every process.
  if (!started.ok()) {
    std::cerr << "StartLauncher: " << started.status() << "\n";
    std::abort();
  }
  const pid_t launcher = *started;
  const std::string ready = run + "/" + ready_trainer + ".ready";
  for (int i = 0; i < 600 && !std::filesystem::exists(ready); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return launcher;
}

}  // namespace shadowsync::testing
