#include "common/file_util.h"

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace shadowsync
