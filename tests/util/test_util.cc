#include "tests/util/test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

std::string SourceDir() {
  const char* src = std::getenv("SHADOWSYNC_SOURCE_DIR");
  return src ? src : SHADOWSYNC_DEFAULT_SOURCE_DIR;
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

}  // namespace shadowsync::testing
