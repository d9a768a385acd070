#include "common/file_util.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::StatusIs;

// The names in `dir`, sorted.
std::vector<std::string> Names(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(FileUtilTest, WriteFileAtomicallyReplacesTheContentsAndLeavesNoTemporaryFile) {
  testing::ScratchDir dir;
  const std::string path = dir.File("state.json");
  SS_ASSERT_OK(WriteFileAtomically(path, "first, and longer than the second\n"));
  EXPECT_EQ(testing::ReadFile(path), "first, and longer than the second\n");
  SS_ASSERT_OK(WriteFileAtomically(path, "second\n"));
  EXPECT_EQ(testing::ReadFile(path), "second\n");
  SS_ASSERT_OK(WriteFileAtomically(path, ""));
  EXPECT_EQ(testing::ReadFile(path), "");
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"state.json"});
}

// The target keeps its old contents until Commit, whatever was appended;
// appends past the buffer and larger than it arrive whole and in order.
TEST(FileUtilTest, StreamingWriterReplacesTheFileOnlyAtCommit) {
  testing::ScratchDir dir;
  const std::string path = dir.File("model");
  SS_ASSERT_OK(WriteFileAtomically(path, "old"));
  absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Open(path);
  SS_ASSERT_OK(out);
  EXPECT_EQ(out->path(), path);
  std::string expected;
  for (int i = 0; i < 50'000; ++i) {
    const std::string piece = std::to_string(i) + ",";
    out->Append(piece);
    expected += piece;
  }
  const std::string large(3 << 20, 'x');
  out->Append(large);
  expected += large;
  out->Append("end");
  expected += "end";
  EXPECT_EQ(testing::ReadFile(path), "old");
  EXPECT_EQ(Names(dir.path()).size(), 2u);  // The target and the temporary file.
  SS_ASSERT_OK(out->Commit());
  EXPECT_EQ(testing::ReadFile(path), expected);
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"model"});
  EXPECT_THAT(out->Commit(), StatusIs(absl::StatusCode::kFailedPrecondition, path));
}

TEST(FileUtilTest, AnUncommittedWriterRemovesItsTemporaryFileAndKeepsTheTarget) {
  testing::ScratchDir dir;
  const std::string path = dir.File("ckpt");
  SS_ASSERT_OK(WriteFileAtomically(path, "kept"));
  {
    absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Open(path);
    SS_ASSERT_OK(out);
    out->Append("abandoned");
    AtomicFileWriter moved = *std::move(out);  // Moving hands the file over, once.
  }
  EXPECT_EQ(testing::ReadFile(path), "kept");
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"ckpt"});
}

TEST(FileUtilTest, ErrorsNameThePathAndTheErrno) {
  testing::ScratchDir dir;
  const std::string missing = dir.File("missing-dir/file");
  EXPECT_THAT(WriteFileAtomically(missing, "x"), StatusIs(absl::StatusCode::kUnavailable, missing));
  EXPECT_THAT(WriteFileAtomically(missing, "x"),
              StatusIs(absl::StatusCode::kUnavailable, "No such file or directory"));
  // A parent that is a file, not a directory (root may write anywhere, so
  // permissions cannot make a directory unwritable here).
  testing::WriteFile(dir.File("plain"), "");
  const std::string under_file = dir.File("plain/file");
  EXPECT_THAT(AtomicFileWriter::Open(under_file),
              StatusIs(absl::StatusCode::kUnavailable, under_file));
  EXPECT_THAT(AtomicFileWriter::Open(under_file),
              StatusIs(absl::StatusCode::kUnavailable, "Not a directory"));
  // The target a directory: the rename fails, naming it, and nothing is left.
  const std::string a_dir = dir.File("a-dir");
  std::filesystem::create_directory(a_dir);
  EXPECT_THAT(WriteFileAtomically(a_dir, "x"),
              StatusIs(absl::StatusCode::kUnavailable, "cannot rename into place " + a_dir));
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"a-dir", "plain"}));
  EXPECT_THAT(SyncParentDirectory(missing),
              StatusIs(absl::StatusCode::kUnavailable, dir.File("missing-dir")));
  SS_EXPECT_OK(SyncParentDirectory(dir.File("plain")));
}

// Writers of one file at once each use a temporary file of their own: the
// file ends as one writer's whole contents, never a mix or a truncation.
TEST(FileUtilTest, ConcurrentWritersOfOneFileNeverMix) {
  testing::ScratchDir dir;
  const std::string path = dir.File("shared");
  constexpr int kWriters = 4;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&path, w] {
      const std::string contents(64 << 10, static_cast<char>('a' + w));
      for (int i = 0; i < 20; ++i) SS_EXPECT_OK(WriteFileAtomically(path, contents));
    });
  }
  for (std::thread& t : writers) t.join();
  const std::string final_contents = testing::ReadFile(path);
  ASSERT_EQ(final_contents.size(), size_t{64 << 10});
  EXPECT_EQ(final_contents.find_first_not_of(final_contents[0]), std::string::npos);
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"shared"});
}

// Bytes `begin`.. of a recognisable pattern: a misplaced block shows.
std::string Pattern(size_t begin, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((begin + i) * 2654435761u >> 13);
  return s;
}

// How many of `path`'s pages are in the page cache.
size_t CachedPages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  const size_t size = std::filesystem::file_size(path);
  if (fd < 0 || size == 0) return 0;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_NE(map, MAP_FAILED);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  EXPECT_EQ(::mincore(map, size, resident.data()), 0);
  ::munmap(map, size);
  return static_cast<size_t>(std::count_if(resident.begin(), resident.end(),
                                           [](unsigned char r) { return (r & 1) != 0; }));
}

// Whether the file system of `dir` takes O_DIRECT, asked directly.
bool TakesDirectIo(const std::string& dir) {
  const std::string probe = dir + "/o_direct_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  std::filesystem::remove(probe);
  return fd >= 0;
}

// Writes `sizes` as appends through a writer with `direct_io` and expects the
// file to hold exactly those bytes, whatever their alignment; when the file
// system takes O_DIRECT, the data must not have landed in the page cache.
void ExpectDirectWriterWritesExactly(const std::string& dir, const std::string& name,
                                     const std::vector<size_t>& sizes) {
  const std::string path = dir + "/" + name;
  absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Open(path, {.direct_io = true});
  SS_ASSERT_OK(out);
  EXPECT_EQ(out->direct_io(), TakesDirectIo(dir)) << path;
  std::string expected;
  for (size_t n : sizes) {
    const std::string piece = Pattern(expected.size(), n);
    out->Append(piece);
    expected += piece;
  }
  SS_ASSERT_OK(out->Commit());
  struct statfs fs;
  ASSERT_EQ(::statfs(dir.c_str(), &fs), 0);
  if (out->direct_io() && fs.f_type != TMPFS_MAGIC) {  // tmpfs files live in the page cache
    // The padded tail is written and cut back: at most its pages stay cached.
    EXPECT_LE(CachedPages(path), 2u) << path;
  }
  const std::string got = testing::ReadFile(path);
  ASSERT_EQ(got.size(), expected.size()) << path;
  EXPECT_TRUE(got == expected) << path;
}

// Direct I/O writes whole aligned blocks; a file of any length, from appends
// of any sizes (across and larger than the writer's 1 MiB buffer), comes out
// exactly. The scratch directory (ext4 here) takes O_DIRECT; tmpfs takes it
// since Linux 6.6 and refuses it before, where the writer falls back to
// ordinary writes.
TEST(FileUtilTest, DirectIoWritesExactlyWhatWasAppendedAndBypassesThePageCache) {
  testing::ScratchDir scratch;
  std::vector<std::string> dirs = {scratch.path().string()};
  struct statfs fs;
  if (::statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    dirs.push_back(absl::StrCat("/dev/shm/file_util_test-", ::getpid()));
    std::filesystem::create_directory(dirs.back());
  }
  const std::vector<std::vector<size_t>> cases = {
      {},
      {1},
      {4095},
      {4096},
      {4097},
      {(1 << 20) - 1},
      {1 << 20},
      {(1 << 20) + 1},
      {3 << 20, 17},
      {100, 3 << 20},
      {4096, 4096, 1},
  };
  for (const std::string& dir : dirs) {
    for (size_t c = 0; c < cases.size(); ++c) {
      ExpectDirectWriterWritesExactly(dir, "part-" + std::to_string(c), cases[c]);
    }
  }
  if (dirs.size() > 1) std::filesystem::remove_all(dirs.back());
  // Ordinary writes do fill the page cache: the check above can tell.
  const std::string buffered = scratch.File("buffered");
  SS_ASSERT_OK(WriteFileAtomically(buffered, Pattern(0, 3 << 20)));
  EXPECT_GT(CachedPages(buffered), 500u);
}

}  // namespace
}  // namespace shadowsync
