#include "data/criteo_reader.h"

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::CriteoSamplePath;
using ::shadowsync::testing::ReadFile;
using ::shadowsync::testing::ScratchDir;
using ::shadowsync::testing::StatusIs;
using ::shadowsync::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// A valid line whose first categorical (C1) is `id`, so tests can tell which
// input line an example came from. The other fields vary with `id` too.
std::string Line(uint32_t id) {
  std::vector<std::string> f;
  f.push_back(id % 3 == 0 ? "1" : "0");
  for (int i = 0; i < kCriteoDense; ++i) {
    f.push_back(i % 4 == 3 ? "" : absl::StrCat((id + i) % 50));
  }
  f.push_back(absl::StrFormat("%08x", id));
  for (int i = 1; i < kCriteoSparse; ++i) {
    f.push_back(i % 5 == 4 ? "" : absl::StrFormat("%08X", id * 2654435761u + i));
  }
  return absl::StrJoin(f, "\t");
}

// Lines(a, b): lines for ids [a, b), each ending in '\n'.
std::string Lines(uint32_t begin, uint32_t end) {
  std::string out;
  for (uint32_t id = begin; id < end; ++id) absl::StrAppend(&out, Line(id), "\n");
  return out;
}

// Line(id) with field `field` (0-based) replaced by `value`.
std::string WithField(uint32_t id, int field, const std::string& value) {
  std::vector<std::string> f = absl::StrSplit(Line(id), '\t');
  f[field] = value;
  return absl::StrJoin(f, "\t");
}

std::vector<uint64_t> C1Ids(const ExampleBlock& block) {
  std::vector<uint64_t> ids;
  for (int64_t i = 0; i < block.size(); ++i) ids.push_back(block.sparse[i * kCriteoSparse]);
  return ids;
}

std::vector<uint64_t> Range(uint64_t begin, uint64_t end) {
  std::vector<uint64_t> out;
  for (uint64_t i = begin; i < end; ++i) out.push_back(i);
  return out;
}

void WriteGzip(const std::string& path, const std::string& contents) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, contents.data(), static_cast<unsigned>(contents.size())),
            static_cast<int>(contents.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

// Options that exercise the pipeline hard: chunks of a few lines, several
// parse threads, so ordering bugs show up even on small inputs.
// The reader's reports of `reason` at each of `lines` of `path`.
std::vector<std::string> ErrorsAt(const std::string& path, std::initializer_list<int> lines,
                                  const std::string& reason) {
  std::vector<std::string> errors;
  for (int line : lines) errors.push_back(absl::StrCat(path, ":", line, ": ", reason));
  return errors;
}

ReaderOptions SmallChunks(int threads = 4) {
  ReaderOptions o;
  o.parse_threads = threads;
  o.chunk_bytes = 700;
  return o;
}

// Reads everything, failing the test on an error.
ExampleBlock ReadAll(const std::vector<std::string>& paths, const ReaderOptions& options,
                     ReaderStats* stats = nullptr) {
  absl::StatusOr<ExampleBlock> all = ReadAllExamples(paths, options, stats);
  EXPECT_TRUE(all.ok()) << all.status();
  return all.ok() ? *std::move(all) : ExampleBlock();
}

void ExpectSameBlocks(const ExampleBlock& a, const ExampleBlock& b) {
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.dense, b.dense);
  EXPECT_EQ(a.sparse, b.sparse);
  EXPECT_EQ(a.sparse_offsets, b.sparse_offsets);
}

// ---------------------------------------------------------------------------
// ParseCriteoLine

TEST(ParseCriteoLineTest, ParsesFields) {
  std::vector<std::string> f(kCriteoFields, "");
  f[0] = "1";
  f[1] = "0";
  f[2] = "-1";  // Criteo's "none"; clips to 0.
  f[3] = "7";
  f[4] = "123456789";
  // f[5..13] empty -> 0.
  f[14] = "7e5c2ff4";
  f[15] = "FFFFFFFF";
  f[16] = "0";
  f[17] = "aBcD";
  // f[18..39] empty -> kMissingId.
  ExampleBlock block;
  SS_ASSERT_OK(ParseCriteoLine(absl::StrJoin(f, "\t"), &block));
  ASSERT_EQ(block.size(), 1);
  EXPECT_EQ(block.labels[0], 1.0f);
  ASSERT_EQ(block.dense.size(), kCriteoDense);
  EXPECT_EQ(block.dense[0], 0.0f);
  EXPECT_EQ(block.dense[1], 0.0f);
  EXPECT_FLOAT_EQ(block.dense[2], std::log(8.0f));
  EXPECT_FLOAT_EQ(block.dense[3], static_cast<float>(std::log(1.0 + 123456789.0)));
  for (int i = 4; i < kCriteoDense; ++i) EXPECT_EQ(block.dense[i], 0.0f) << i;
  ASSERT_EQ(block.sparse.size(), kCriteoSparse);
  EXPECT_EQ(block.sparse[0], 0x7e5c2ff4u);
  EXPECT_EQ(block.sparse[1], 0xffffffffu);
  EXPECT_EQ(block.sparse[2], 0u);
  EXPECT_EQ(block.sparse[3], 0xabcdu);
  for (int i = 4; i < kCriteoSparse; ++i) EXPECT_EQ(block.sparse[i], kMissingId) << i;
}

TEST(ParseCriteoLineTest, AcceptsCrlf) {
  ExampleBlock a, b;
  SS_ASSERT_OK(ParseCriteoLine(Line(5), &a));
  SS_ASSERT_OK(ParseCriteoLine(Line(5) + "\r", &b));
  ExpectSameBlocks(a, b);
}

TEST(ParseCriteoLineTest, LastFieldEmpty) {
  ExampleBlock block;
  SS_ASSERT_OK(ParseCriteoLine(WithField(1, kCriteoFields - 1, ""), &block));
  EXPECT_EQ(block.sparse.back(), kMissingId);
}

struct BadLine {
  std::string name;
  std::string line;
  std::string reason;
};

std::vector<BadLine> BadLines() {
  std::string nul_line = WithField(1, 20, "ab");
  nul_line[nul_line.find("\tab\t") + 2] = '\0';
  return {
      {"Empty", "", "empty line"},
      {"TooFewFields", Line(1).substr(0, Line(1).rfind('\t')),
       "expected 40 tab-separated fields, got 39"},
      {"TooManyFields", Line(1) + "\t", "expected 40 tab-separated fields, got 41"},
      {"SpacesNotTabs", "0 1 2 3", "expected 40 tab-separated fields, got 1"},
      {"BadLabel", WithField(1, 0, "2"), "field 1 (label): bad label '2' (want 0 or 1)"},
      {"EmptyLabel", WithField(1, 0, ""), "field 1 (label): bad label '' (want 0 or 1)"},
      {"LongLabel", WithField(1, 0, "01"), "field 1 (label): bad label '01' (want 0 or 1)"},
      {"NonNumericInt", WithField(1, 1, "12a"), "field 2 (I1): not an integer '12a'"},
      {"FloatInt", WithField(1, 13, "1.5"), "field 14 (I13): not an integer '1.5'"},
      {"OverflowInt", WithField(1, 5, "99999999999999999999"),
       "field 6 (I5): integer out of range '99999999999999999999'"},
      {"BadHexChars", WithField(1, 14, "zz12"), "field 15 (C1): bad hex 'zz12'"},
      {"HexTooLong", WithField(1, 39, "123456789"),
       "field 40 (C26): bad hex '123456789' (more than 8 digits)"},
      {"NulByte", nul_line, "field 21 (C7): bad hex 'a\\x00'"},
      {"EmptyIdInList", WithField(1, 20, "ab,,cd"),
       "field 21 (C7): bad hex 'ab,,cd' (id 2 of a comma-separated list: empty; each id is 1 "
       "to 8 hex digits)"},
      {"TrailingComma", WithField(1, 14, "ab,"),
       "field 15 (C1): bad hex 'ab,' (id 2 of a comma-separated list: empty; each id is 1 to 8 "
       "hex digits)"},
      {"LeadingComma", WithField(1, 14, ",ab"),
       "field 15 (C1): bad hex ',ab' (id 1 of a comma-separated list: empty; each id is 1 to 8 "
       "hex digits)"},
      {"LongIdInList", WithField(1, 39, "ab,123456789"),
       "field 40 (C26): bad hex 'ab,123456789' (id 2 of a comma-separated list: '123456789'; each "
       "id is 1 to 8 hex digits)"},
      {"BadHexInList", WithField(1, 39, "ab,cd,zz"),
       "field 40 (C26): bad hex 'ab,cd,zz' (id 3 of a comma-separated list: 'zz'; each "
       "id is 1 to 8 hex digits)"},
      {"NulInInteger", WithField(1, 3, std::string("1\0", 2)),
       "field 4 (I3): not an integer '1\\x00'"},
      {"NonAscii", WithField(1, 15, "\xc3\xa9"), "field 16 (C2): bad hex '\\xc3\\xa9'"},
      {"BinaryBlob", std::string("\x00\x01\xff\x7f\x00\x1f\x8b", 7),
       "expected 40 tab-separated fields, got 1"},
  };
}

TEST(ParseCriteoLineTest, RejectsMalformedAndAppendsNothing) {
  for (const BadLine& bad : BadLines()) {
    SCOPED_TRACE(bad.name);
    ExampleBlock block;
    SS_ASSERT_OK(ParseCriteoLine(Line(7), &block));
    const absl::Status status = ParseCriteoLine(bad.line, &block);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, bad.reason));
    EXPECT_EQ(block.size(), 1);
    EXPECT_EQ(block.dense.size(), kCriteoDense);
    EXPECT_EQ(block.sparse.size(), kCriteoSparse);
  }
}

// A field "id,id,..." holds several ids: the block switches to offsets at
// the first such line and keeps the single-hot examples before it as they were.
TEST(ParseCriteoLineTest, MultiHotFieldsKeepEveryIdInOrder) {
  ExampleBlock block;
  SS_ASSERT_OK(ParseCriteoLine(Line(1), &block));
  ExampleBlock single = block;
  EXPECT_FALSE(block.multi_hot());
  std::string line = WithField(2, 15, "a,b0,c00");
  line = line.substr(0, line.rfind('\t')) + "\t1,2";  // C26 too
  SS_ASSERT_OK(ParseCriteoLine(line, &block));
  ASSERT_TRUE(block.multi_hot());
  ASSERT_EQ(block.size(), 2);
  EXPECT_EQ(block.sparse_offsets.size(), 2u * kCriteoSparse + 1);
  for (int t = 0; t < kCriteoSparse; ++t) {
    EXPECT_THAT(block.ids(0, t), ElementsAreArray(single.ids(0, t))) << t;
  }
  EXPECT_THAT(block.ids(1, 0), ElementsAre(2));
  EXPECT_THAT(block.ids(1, 1), ElementsAre(0xa, 0xb0, 0xc00));
  EXPECT_THAT(block.ids(1, 25), ElementsAre(1, 2));

  ExampleBlock twice;
  twice.Append(single);
  twice.Append(block);
  EXPECT_TRUE(twice.multi_hot());
  EXPECT_THAT(twice.ids(2, 1), ElementsAre(0xa, 0xb0, 0xc00));
  EXPECT_THAT(twice.ids(1, 1), ElementsAreArray(single.ids(0, 1)));
  block.Truncate(1);
  EXPECT_EQ(block.sparse.size(), static_cast<size_t>(kCriteoSparse));
  EXPECT_EQ(block.sparse_offsets.back(), kCriteoSparse);
}

TEST(ParseCriteoLineTest, QuotesHugeFieldsShortly) {
  ExampleBlock block;
  const absl::Status status = ParseCriteoLine(WithField(1, 14, std::string(5000, 'x')), &block);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, "field 15 (C1): bad hex 'xxx"));
  EXPECT_LT(status.message().size(), 200u);
}

// ---------------------------------------------------------------------------
// CriteoReader: malformed lines

// Every malformed kind, dropped into an otherwise good file at line 3, must be
// counted once, reported as path:3 with its reason, and skipped, for both
// the default options and tiny chunks.
TEST(CriteoReaderTest, CountsReportsAndSkipsEachMalformedKind) {
  ScratchDir dir;
  for (const BadLine& bad : BadLines()) {
    for (int64_t chunk_bytes : {int64_t{4} << 20, int64_t{300}}) {
      SCOPED_TRACE(absl::StrCat(bad.name, " chunk_bytes=", chunk_bytes));
      const std::string path = dir.File(bad.name + ".tsv");
      WriteFile(path, Lines(0, 2) + bad.line + "\n" + Lines(3, 6));
      ReaderOptions options = SmallChunks();
      options.chunk_bytes = chunk_bytes;
      ReaderStats stats;
      const ExampleBlock all = ReadAll({path}, options, &stats);
      EXPECT_THAT(C1Ids(all), ElementsAre(0, 1, 3, 4, 5));
      EXPECT_EQ(stats.lines, 6);
      EXPECT_EQ(stats.examples, 5);
      EXPECT_EQ(stats.malformed, 1);
      EXPECT_THAT(stats.first_errors, ElementsAreArray(ErrorsAt(path, {3}, bad.reason)));
    }
  }
}

TEST(CriteoReaderTest, OverlongLines) {
  ScratchDir dir;
  const std::string path = dir.File("long.tsv");
  // Line 2 fits in one read; line 4 (3 MB) spans many reads and must be
  // skipped without buffering; line 6 is the unterminated last line.
  const std::string longish = WithField(1, 14, std::string(2000, 'a'));
  const std::string huge = std::string(3 << 20, '0');
  WriteFile(path,
            Line(0) + "\n" + longish + "\n" + Line(2) + "\n" + huge + "\n" + Line(4) + "\n" + huge);
  for (int64_t chunk_bytes : {int64_t{4} << 20, int64_t{100}}) {
    SCOPED_TRACE(chunk_bytes);
    ReaderOptions options = SmallChunks(2);
    options.chunk_bytes = chunk_bytes;
    options.max_line_bytes = 1000;
    ReaderStats stats;
    const ExampleBlock all = ReadAll({path}, options, &stats);
    EXPECT_THAT(C1Ids(all), ElementsAre(0, 2, 4));
    EXPECT_EQ(stats.lines, 6);
    EXPECT_EQ(stats.malformed, 3);
    EXPECT_EQ(stats.bytes, static_cast<int64_t>(ReadFile(path).size()));
    EXPECT_THAT(
        stats.first_errors,
        ElementsAreArray(ErrorsAt(path, {2, 4, 6}, "line longer than max_line_bytes (1000)")));
  }
}

TEST(CriteoReaderTest, LimitsReportedErrorsButCountsAll) {
  ScratchDir dir;
  const std::string path = dir.File("bad.tsv");
  std::string contents;
  for (int i = 0; i < 50; ++i) absl::StrAppend(&contents, Line(i), "\n", "garbage\n");
  WriteFile(path, contents);
  ReaderOptions options = SmallChunks();
  options.max_reported_errors = 3;
  ReaderStats stats;
  const ExampleBlock all = ReadAll({path}, options, &stats);
  EXPECT_EQ(all.size(), 50);
  EXPECT_EQ(stats.malformed, 50);
  EXPECT_THAT(stats.first_errors, ElementsAreArray(ErrorsAt(
                                      path, {2, 4, 6}, "expected 40 tab-separated fields, got 1")));
}

TEST(CriteoReaderTest, TrailingNewlineIsNotAnEmptyLine) {
  ScratchDir dir;
  const std::string with = dir.File("with.tsv");
  const std::string without = dir.File("without.tsv");
  const std::string blank = dir.File("blank.tsv");
  WriteFile(with, Lines(0, 3));
  WriteFile(without, Line(0) + "\n" + Line(1) + "\n" + Line(2));
  WriteFile(blank, Lines(0, 3) + "\n");  // A real empty line 4 before the final newline.
  ReaderStats stats;
  EXPECT_THAT(C1Ids(ReadAll({with}, {}, &stats)), ElementsAre(0, 1, 2));
  EXPECT_EQ(stats.malformed, 0);
  EXPECT_EQ(stats.lines, 3);
  EXPECT_THAT(C1Ids(ReadAll({without}, {}, &stats)), ElementsAre(0, 1, 2));
  EXPECT_EQ(stats.malformed, 0);
  EXPECT_EQ(stats.lines, 3);
  EXPECT_THAT(C1Ids(ReadAll({blank}, {}, &stats)), ElementsAre(0, 1, 2));
  EXPECT_EQ(stats.malformed, 1);
  EXPECT_THAT(stats.first_errors, ElementsAreArray(ErrorsAt(blank, {4}, "empty line")));
}

TEST(CriteoReaderTest, Crlf) {
  ScratchDir dir;
  const std::string lf = dir.File("lf.tsv");
  const std::string crlf = dir.File("crlf.tsv");
  std::string contents;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&contents, Line(i), "\r\n");
  WriteFile(crlf, contents);
  WriteFile(lf, Lines(0, 100));
  ReaderStats stats;
  const ExampleBlock a = ReadAll({crlf}, SmallChunks(), &stats);
  EXPECT_EQ(stats.malformed, 0);
  EXPECT_EQ(a.size(), 100);
  ExpectSameBlocks(a, ReadAll({lf}, SmallChunks()));
}

TEST(CriteoReaderTest, LineNumbersRestartPerFile) {
  ScratchDir dir;
  const std::string a = dir.File("a.tsv");
  const std::string b = dir.File("b.tsv");
  WriteFile(a, Lines(0, 10));
  WriteFile(b, Lines(10, 14) + "oops\n" + Lines(15, 20));
  ReaderStats stats;
  const ExampleBlock all = ReadAll({a, b}, SmallChunks(), &stats);
  EXPECT_EQ(all.size(), 19);
  EXPECT_EQ(stats.lines, 20);
  EXPECT_THAT(stats.first_errors,
              ElementsAreArray(ErrorsAt(b, {5}, "expected 40 tab-separated fields, got 1")));
}

// ---------------------------------------------------------------------------
// CriteoReader: streaming, order, gzip

TEST(CriteoReaderTest, PreservesOrderAcrossManySmallChunks) {
  ScratchDir dir;
  std::vector<std::string> paths;
  for (int f = 0; f < 3; ++f) {
    paths.push_back(dir.File(absl::StrCat("part", f, ".tsv")));
    WriteFile(paths.back(), Lines(f * 1000, (f + 1) * 1000));
  }
  for (int64_t chunk_bytes : {1, 257, 4096}) {
    SCOPED_TRACE(chunk_bytes);
    ReaderOptions options = SmallChunks(4);
    options.chunk_bytes = chunk_bytes;
    absl::StatusOr<std::unique_ptr<CriteoReader>> opened = CriteoReader::Open(paths, options);
    SS_ASSERT_OK(opened);
    std::unique_ptr<CriteoReader> reader = *std::move(opened);
    std::vector<uint64_t> ids;
    int blocks = 0;
    ExampleBlock block;
    while (true) {
      absl::StatusOr<bool> more = reader->Next(&block);
      SS_ASSERT_OK(more);
      if (!*more) break;
      ASSERT_GT(block.size(), 0);
      ASSERT_EQ(block.dense.size(), block.size() * kCriteoDense);
      ASSERT_EQ(block.sparse.size(), block.size() * kCriteoSparse);
      for (uint64_t id : C1Ids(block)) ids.push_back(id);
      ++blocks;
    }
    EXPECT_EQ(block.size(), 0);
    EXPECT_EQ(ids, Range(0, 3000));
    EXPECT_GT(blocks, 10);
    EXPECT_EQ(reader->stats().lines, 3000);
    EXPECT_EQ(reader->stats().examples, 3000);
    // Next() keeps returning false after the end.
    absl::StatusOr<bool> again = reader->Next(&block);
    SS_ASSERT_OK(again);
    EXPECT_FALSE(*again);
  }
}

TEST(CriteoReaderTest, ThreadCountDoesNotChangeOutput) {
  ScratchDir dir;
  const std::string path = dir.File("data.tsv");
  WriteFile(path, Lines(0, 2000));
  const ExampleBlock one = ReadAll({path}, SmallChunks(1));
  EXPECT_EQ(one.size(), 2000);
  ExpectSameBlocks(one, ReadAll({path}, SmallChunks(3)));
  ExpectSameBlocks(one, ReadAll({path}, ReaderOptions()));
}

TEST(CriteoReaderTest, GzipMatchesPlain) {
  ScratchDir dir;
  const std::string contents = Lines(0, 1500) + "bad line\n" + Lines(1501, 3000);
  const std::string plain = dir.File("data.tsv");
  const std::string gz = dir.File("data.tsv.gz");
  const std::string gz_no_suffix = dir.File("data_gz.tsv");  // Detected by its magic bytes.
  WriteFile(plain, contents);
  WriteGzip(gz, contents);
  WriteGzip(gz_no_suffix, contents);
  ASSERT_NE(ReadFile(gz), contents);
  for (const ReaderOptions& options : {ReaderOptions(), SmallChunks()}) {
    ReaderStats plain_stats, gz_stats, magic_stats;
    const ExampleBlock a = ReadAll({plain}, options, &plain_stats);
    EXPECT_EQ(a.size(), 2999);
    ExpectSameBlocks(a, ReadAll({gz}, options, &gz_stats));
    ExpectSameBlocks(a, ReadAll({gz_no_suffix}, options, &magic_stats));
    EXPECT_EQ(gz_stats.bytes, static_cast<int64_t>(contents.size()));
    EXPECT_EQ(gz_stats.malformed, 1);
    EXPECT_THAT(gz_stats.first_errors, ElementsAre(HasSubstr("data.tsv.gz:1501: ")));
  }
}

TEST(CriteoReaderTest, CorruptGzipIsAnErrorNamingTheFile) {
  ScratchDir dir;
  const std::string good = dir.File("good.tsv.gz");
  WriteGzip(good, Lines(0, 3000));
  const std::string compressed = ReadFile(good);
  ASSERT_GT(compressed.size(), 1000u);

  const std::string truncated = dir.File("truncated.tsv.gz");
  WriteFile(truncated, compressed.substr(0, compressed.size() / 2));
  const std::string flipped = dir.File("flipped.tsv.gz");
  std::string bad = compressed;
  for (size_t i = 100; i < 200; ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  WriteFile(flipped, bad);

  for (const std::string& path : {truncated, flipped}) {
    SCOPED_TRACE(path);
    absl::StatusOr<ExampleBlock> all = ReadAllExamples({path}, SmallChunks());
    EXPECT_THAT(all, StatusIs(absl::StatusCode::kDataLoss, path));
  }
}

// Random mixes of valid, mutated, binary, empty, CRLF and over-long lines
// must give what a naive line-by-line ParseCriteoLine loop gives, for any
// chunk size and shard.
TEST(CriteoReaderTest, RandomInputMatchesLineByLineParse) {
  ScratchDir dir;
  std::mt19937 rng(1234);
  constexpr int64_t kMaxLine = 600;
  for (int round = 0; round < 6; ++round) {
    std::string contents;
    const int n = 300;
    for (int i = 0; i < n; ++i) {
      std::string line = Line(i);
      switch (rng() % 10) {
        case 0: {  // Flip a few bytes to anything, including '\t' and NUL.
          for (int k = 0; k < 3; ++k) line[rng() % line.size()] = static_cast<char>(rng() % 256);
          break;
        }
        case 1:
          line = std::string(rng() % 50, '\0');
          for (char& c : line) c = static_cast<char>(rng() % 256);
          break;
        case 2:
          line += "\r";
          break;
        case 3:
          line = rng() % 2 ? "" : std::string(kMaxLine + rng() % 100000, 'f');
          break;
        default:
          break;
      }
      absl::StrAppend(&contents, line, "\n");
    }
    if (rng() % 2) contents.pop_back();  // Sometimes no final newline.
    // The reference splits the file naively; random bytes may add '\n's.
    std::vector<std::string> ref_lines = absl::StrSplit(contents, '\n');
    if (!contents.empty() && contents.back() == '\n') ref_lines.pop_back();

    const std::string path = dir.File(absl::StrCat("random", round, ".tsv"));
    WriteFile(path, contents);
    for (int num_shards : {1, 3}) {
      const int shard = static_cast<int>(rng() % num_shards);
      ExampleBlock want;
      int64_t want_malformed = 0;
      for (size_t i = 0; i < ref_lines.size(); ++i) {
        if (static_cast<int>(i % num_shards) != shard) continue;
        if (static_cast<int64_t>(ref_lines[i].size()) > kMaxLine ||
            !ParseCriteoLine(ref_lines[i], &want).ok()) {
          ++want_malformed;
        }
      }
      ASSERT_GT(want.size(), 10);  // The mix really has both kinds.
      ASSERT_GT(want_malformed, 3);
      for (int64_t chunk_bytes : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
        SCOPED_TRACE(absl::StrCat("round ", round, " shards ", num_shards, " chunk ", chunk_bytes));
        ReaderOptions options = SmallChunks(3);
        options.chunk_bytes = chunk_bytes;
        options.max_line_bytes = kMaxLine;
        options.num_shards = num_shards;
        options.shard_index = shard;
        options.max_reported_errors = 0;
        ReaderStats stats;
        ExpectSameBlocks(ReadAll({path}, options, &stats), want);
        EXPECT_EQ(stats.lines, static_cast<int64_t>(ref_lines.size()));
        EXPECT_EQ(stats.malformed, want_malformed);
        EXPECT_EQ(stats.bytes, static_cast<int64_t>(contents.size()));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// CriteoReader: sharding and limits

TEST(CriteoReaderTest, ShardsPartitionTheLines) {
  ScratchDir dir;
  const std::string a = dir.File("a.tsv");
  const std::string b = dir.File("b.tsv");
  // Malformed lines still take a line index, so they shift the shards.
  WriteFile(a, Lines(0, 500) + "bad\n" + Lines(501, 777));
  WriteFile(b, Lines(777, 1000) + "\n" + Lines(1001, 1300));
  const int64_t total_lines = 1300;
  for (int num_shards : {1, 3, 4}) {
    SCOPED_TRACE(num_shards);
    std::set<uint64_t> seen;
    int64_t examples = 0;
    int64_t malformed = 0;
    for (int shard = 0; shard < num_shards; ++shard) {
      ReaderOptions options = SmallChunks(3);
      options.num_shards = num_shards;
      options.shard_index = shard;
      ReaderStats stats;
      const ExampleBlock part = ReadAll({a, b}, options, &stats);
      EXPECT_EQ(stats.lines, total_lines);
      for (uint64_t id : C1Ids(part)) {
        EXPECT_EQ(static_cast<int>(id % num_shards), shard) << id;  // Line index == id here.
        EXPECT_TRUE(seen.insert(id).second) << "id " << id << " in two shards";
      }
      examples += part.size();
      malformed += stats.malformed;
    }
    EXPECT_EQ(examples, total_lines - 2);
    EXPECT_EQ(malformed, 2);
    EXPECT_EQ(seen.size(), static_cast<size_t>(total_lines - 2));
  }
}

TEST(CriteoReaderTest, MaxExamplesStopsEarly) {
  ScratchDir dir;
  const std::string path = dir.File("data.tsv");
  WriteFile(path, Lines(0, 2000));
  for (int64_t max : {0, 1, 37, 1999, 2000, 5000}) {
    SCOPED_TRACE(max);
    ReaderOptions options = SmallChunks();
    options.max_examples = max;
    ReaderStats stats;
    const ExampleBlock all = ReadAll({path}, options, &stats);
    const int64_t want = std::min<int64_t>(max, 2000);
    EXPECT_EQ(C1Ids(all), Range(0, want));
    EXPECT_EQ(stats.examples, want);
  }
  // Together with sharding: the first 10 of shard 1 of 2.
  ReaderOptions options = SmallChunks();
  options.max_examples = 10;
  options.num_shards = 2;
  options.shard_index = 1;
  EXPECT_THAT(C1Ids(ReadAll({path}, options)), ElementsAre(1, 3, 5, 7, 9, 11, 13, 15, 17, 19));
}

// Multi-hot lines among single-hot ones, across chunk boundaries and a
// max_examples cut: what the reader returns is what parsing line by line gives.
TEST(CriteoReaderTest, MultiHotLinesReadAsParsedLineByLine) {
  ScratchDir dir;
  const std::string path = dir.File("data.tsv");
  std::string text;
  for (uint32_t id = 0; id < 300; ++id) {
    absl::StrAppend(
        &text, id % 7 == 3 ? WithField(id, 16, absl::StrFormat("%x,%x,5", id, id + 1)) : Line(id),
        "\n");
  }
  WriteFile(path, text);
  for (int64_t max : {-1, 150}) {
    SCOPED_TRACE(max);
    ExampleBlock want;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (max >= 0 && want.size() == max) break;
      SS_ASSERT_OK(ParseCriteoLine(std::string_view(line.data(), line.size()), &want));
    }
    ReaderOptions options = SmallChunks();
    options.max_examples = max;
    const ExampleBlock got = ReadAll({path}, options);
    ExpectSameBlocks(got, want);
    EXPECT_THAT(got.ids(10, 2), ElementsAre(10, 11, 5));
  }
}

TEST(CriteoReaderTest, DestroyingEarlyDoesNotHang) {
  ScratchDir dir;
  const std::string path = dir.File("data.tsv");
  WriteFile(path, Lines(0, 3000));
  const std::string gz = dir.File("data.tsv.gz");
  WriteGzip(gz, Lines(0, 3000));
  for (int blocks_read : {0, 1, 5}) {
    for (const std::string& p : {path, gz}) {
      ReaderOptions options = SmallChunks(3);
      options.chunk_bytes = 100;
      auto reader = CriteoReader::Open({p, p, p}, options);
      SS_ASSERT_OK(reader);
      ExampleBlock block;
      for (int i = 0; i < blocks_read; ++i) SS_ASSERT_OK((*reader)->Next(&block));
      reader->reset();  // Joins the threads; the test hangs or leaks if that fails.
    }
  }
}

TEST(CriteoReaderTest, EmptyFile) {
  ScratchDir dir;
  const std::string path = dir.File("empty.tsv");
  WriteFile(path, "");
  ReaderStats stats;
  EXPECT_EQ(ReadAll({path, path}, {}, &stats).size(), 0);
  EXPECT_EQ(stats.lines, 0);
  EXPECT_EQ(stats.malformed, 0);
}

// ---------------------------------------------------------------------------
// Errors from Open

TEST(CriteoReaderTest, MissingFileIsNotFound) {
  ScratchDir dir;
  const std::string good = dir.File("good.tsv");
  WriteFile(good, Lines(0, 3));
  const std::string missing = dir.File("no_such_file.tsv");
  EXPECT_THAT(CriteoReader::Open({good, missing}, {}),
              StatusIs(absl::StatusCode::kNotFound, missing));
  EXPECT_THAT(ReadAllExamples({missing}, {}), StatusIs(absl::StatusCode::kNotFound, missing));
}

TEST(CriteoReaderTest, BadOptionsAreInvalidArgument) {
  ScratchDir dir;
  const std::string path = dir.File("data.tsv");
  WriteFile(path, Lines(0, 3));
  struct Case {
    std::string option;
    ReaderOptions options;
  };
  std::vector<Case> cases(7);
  cases[0] = {"num_shards", {}};
  cases[0].options.num_shards = 0;
  cases[1] = {"shard_index", {}};
  cases[1].options.num_shards = 2;
  cases[1].options.shard_index = 2;
  cases[2] = {"shard_index", {}};
  cases[2].options.shard_index = -1;
  cases[3] = {"parse_threads", {}};
  cases[3].options.parse_threads = 0;
  cases[4] = {"chunk_bytes", {}};
  cases[4].options.chunk_bytes = 0;
  cases[5] = {"max_line_bytes", {}};
  cases[5].options.max_line_bytes = 0;
  cases[6] = {"max_examples", {}};
  cases[6].options.max_examples = -2;
  for (const Case& c : cases) {
    EXPECT_THAT(CriteoReader::Open({path}, c.options),
                StatusIs(absl::StatusCode::kInvalidArgument, c.option));
  }
  EXPECT_THAT(CriteoReader::Open({}, {}), StatusIs(absl::StatusCode::kInvalidArgument, "paths"));
}

// ---------------------------------------------------------------------------
// The real Criteo excerpt

TEST(CriteoReaderTest, RealSample) {
  const std::string path = CriteoSamplePath();
  if (path.empty()) GTEST_SKIP() << "criteo_sample.tsv not found under ../shared/data/criteo";
  ReaderStats stats;
  const ExampleBlock all = ReadAll({path}, ReaderOptions(), &stats);
  EXPECT_EQ(stats.lines, 109711);
  EXPECT_EQ(stats.examples, 109711);
  EXPECT_EQ(stats.malformed, 0);
  EXPECT_TRUE(stats.first_errors.empty());
  ASSERT_EQ(all.size(), 109711);
  double sum = 0;
  for (float label : all.labels) sum += label;
  EXPECT_NEAR(sum / all.size(), 0.256720, 1e-6);
  // First row: "0\t\t1\t\t\t23255\t...\t7e5c2ff4\td833535f...".
  EXPECT_EQ(all.labels[0], 0.0f);
  EXPECT_EQ(all.dense[0], 0.0f);
  EXPECT_FLOAT_EQ(all.dense[1], std::log(2.0f));
  EXPECT_FLOAT_EQ(all.dense[4], static_cast<float>(std::log1p(23255.0)));
  EXPECT_EQ(all.sparse[0], 0x7e5c2ff4u);
  EXPECT_EQ(all.sparse[1], 0xd833535fu);
}

}  // namespace
}  // namespace shadowsync
