#include "data/synthetic.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/example.h"
#include "data/criteo_reader.h"
#include "data/synthetic_internal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::ReadFile;
using ::shadowsync::testing::ScratchDir;
using ::shadowsync::testing::StatusIs;
using ::testing::HasSubstr;

// absl::StrSplit takes absl::string_view, which is not std::string_view in
// the absl we build against.
std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines = Split(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

std::string Gunzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return "";
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(file, buf, sizeof(buf))) > 0) out.append(buf, n);
  gzclose(file);
  return out;
}

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// One 50k-example file (seed 1) shared by the statistical tests, generated on
// first use: it dominates their cost, and ctest runs each case in its own
// process, so the cases that do not need it should not pay for it. The files
// are read into memory and removed at once.
struct SharedData {
  SharedData() {
    ScratchDir dir;
    SyntheticOptions options;
    options.out_path = dir.File("shared.tsv");
    options.examples = kExamples;
    options.seed = 1;
    absl::StatusOr<TeacherReport> result = GenerateSynthetic(options);
    status = result.status();
    if (result.ok()) report = *result;
    text = ReadFile(options.out_path);
    json_text = ReadFile(options.out_path + ".teacher.json");
  }

  static constexpr int64_t kExamples = 50'000;
  absl::Status status;
  TeacherReport report;
  std::string text;
  std::string json_text;
};

class SyntheticTest : public ::testing::Test {
 protected:
  static const SharedData& Shared() {
    static const SharedData* const shared = new SharedData();
    return *shared;
  }

  // Generates `examples` examples for `seed` into `name` in this test's
  // scratch dir and returns the path.
  std::string Generate(const std::string& name, int64_t examples, uint64_t seed, int threads = 0,
                       TeacherReport* report = nullptr) {
    SyntheticOptions options;
    options.out_path = dir_.File(name);
    options.examples = examples;
    options.seed = seed;
    options.threads = threads;
    absl::StatusOr<TeacherReport> result = GenerateSynthetic(options);
    EXPECT_TRUE(result.ok()) << result.status();
    if (report != nullptr && result.ok()) *report = *result;
    return options.out_path;
  }

  static constexpr int64_t kSharedExamples = SharedData::kExamples;
  ScratchDir dir_;
};

TEST_F(SyntheticTest, SameSeedGivesIdenticalBytesForAnyThreadCount) {
  // 3 threads and a partial last block exercise the in-order block pipeline.
  const std::string one = Generate("one.tsv", 10'000, 7, /*threads=*/1);
  const std::string three = Generate("three.tsv", 10'000, 7, /*threads=*/3);
  const std::string a = ReadFile(one);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadFile(three));
  EXPECT_EQ(ReadFile(one + ".teacher.json"), ReadFile(three + ".teacher.json"));
}

// Held-out examples continue the training file's stream: the same teacher,
// and together exactly the bytes of one file of both counts, whatever the
// split's place in a block.
TEST_F(SyntheticTest, HeldOutExamplesContinueTheSameStream) {
  const std::string whole = ReadFile(Generate("whole.tsv", 10'000, 7, /*threads=*/3));
  for (const int64_t train : {int64_t{4096}, int64_t{5'000}}) {
    SyntheticOptions options;
    options.out_path = dir_.File(absl::StrCat("train", train, ".tsv"));
    options.eval_out_path = dir_.File(absl::StrCat("eval", train, ".tsv"));
    options.examples = train;
    options.eval_examples = 10'000 - train;
    options.seed = 7;
    options.threads = 3;
    TeacherReport eval;
    absl::StatusOr<TeacherReport> report = GenerateSynthetic(options, &eval);
    SS_ASSERT_OK(report);
    const std::string head = ReadFile(options.out_path);
    const std::string tail = ReadFile(options.eval_out_path);
    EXPECT_EQ(Lines(head).size(), static_cast<size_t>(train));
    EXPECT_EQ(Lines(tail).size(), static_cast<size_t>(10'000 - train));
    EXPECT_TRUE(head + tail == whole) << "split at " << train;
    EXPECT_EQ(report->examples, train);
    EXPECT_EQ(eval.examples, 10'000 - train);
    EXPECT_GT(eval.ne, 0.5);
    EXPECT_LT(eval.ne, 1.0);
    const auto json = nlohmann::json::parse(ReadFile(options.eval_out_path + ".teacher.json"));
    EXPECT_EQ(json["examples"], 10'000 - train);
    EXPECT_DOUBLE_EQ(json["ne"].get<double>(), eval.ne);
  }
}

TEST_F(SyntheticTest, HeldOutExamplesNeedTheirOwnPathOfTheSameCompression) {
  SyntheticOptions options;
  options.out_path = dir_.File("t.tsv");
  options.examples = 10;
  options.eval_examples = 5;
  EXPECT_THAT(GenerateSynthetic(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "eval_out_path"));
  options.eval_out_path = options.out_path;
  EXPECT_THAT(GenerateSynthetic(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "eval_out_path"));
  options.eval_out_path = dir_.File("e.tsv.gz");
  EXPECT_THAT(GenerateSynthetic(options), StatusIs(absl::StatusCode::kInvalidArgument, ".gz"));
  options.eval_out_path = dir_.File("e.tsv");
  options.eval_examples = -1;
  EXPECT_THAT(GenerateSynthetic(options),
              StatusIs(absl::StatusCode::kInvalidArgument, "eval_examples"));
}

TEST_F(SyntheticTest, DifferentSeedsGiveDifferentData) {
  const std::string a = ReadFile(Generate("a.tsv", 2'000, 7));
  const std::string b = ReadFile(Generate("b.tsv", 2'000, 8));
  ASSERT_EQ(Lines(a).size(), 2'000u);
  ASSERT_EQ(Lines(b).size(), 2'000u);
  EXPECT_NE(a, b);
}

TEST_F(SyntheticTest, EveryLineHasTheCriteoLayout) {
  const SharedData& shared = Shared();
  SS_ASSERT_OK(shared.status);
  const std::vector<std::string_view> lines = Lines(shared.text);
  ASSERT_EQ(static_cast<int64_t>(lines.size()), kSharedExamples);
  int64_t empty_dense = 0, empty_sparse = 0;
  for (std::string_view line : lines) {
    const std::vector<std::string_view> fields = Split(line, '\t');
    ASSERT_EQ(fields.size(), static_cast<size_t>(kCriteoFields)) << line;
    ASSERT_TRUE(fields[0] == "0" || fields[0] == "1") << line;
    for (int j = 1; j <= kCriteoDense; ++j) {
      std::string_view f = fields[j];
      if (f.empty()) {
        ++empty_dense;
        continue;
      }
      if (f == "-1") continue;
      ASSERT_TRUE(std::all_of(f.begin(), f.end(), [](char c) { return c >= '0' && c <= '9'; }))
          << "I" << j << " = '" << f << "'";
    }
    for (int t = 0; t < kCriteoSparse; ++t) {
      std::string_view f = fields[1 + kCriteoDense + t];
      if (f.empty()) {
        ++empty_sparse;
        continue;
      }
      ASSERT_EQ(f.size(), 8u) << "C" << t + 1 << " = '" << f << "'";
      ASSERT_TRUE(IsLowerHex(f)) << "C" << t + 1 << " = '" << f << "'";
    }
  }
  // Both kinds of field are sometimes missing, as in real Criteo data.
  EXPECT_GT(empty_dense, 0);
  EXPECT_GT(empty_sparse, 0);
}

TEST_F(SyntheticTest, ParsesWithTheCriteoParser) {
  const SharedData& shared = Shared();
  SS_ASSERT_OK(shared.status);
  ExampleBlock block;
  const std::vector<std::string_view> lines = Lines(shared.text);
  for (std::string_view line : lines) SS_ASSERT_OK(ParseCriteoLine(line, &block));
  ASSERT_EQ(block.size(), kSharedExamples);
  // Spot-check the first line's values against its text.
  const std::vector<std::string_view> fields = Split(lines[0], '\t');
  EXPECT_EQ(block.labels[0], fields[0] == "1" ? 1.0f : 0.0f);
  for (int j = 0; j < kCriteoDense; ++j) {
    const double x = fields[1 + j].empty() ? 0 : std::stod(std::string(fields[1 + j]));
    EXPECT_NEAR(block.dense[j], std::log1p(std::max(x, 0.0)), 1e-5) << "I" << j + 1;
  }
  for (int t = 0; t < kCriteoSparse; ++t) {
    std::string_view f = fields[1 + kCriteoDense + t];
    const uint64_t want = f.empty() ? kMissingId : std::stoull(std::string(f), nullptr, 16);
    EXPECT_EQ(block.sparse[t], want) << "C" << t + 1;
  }
}

// --multi-hot-columns 3 --max-ids-per-field 4: C24..C26 hold 1 to 4 ids
// (every count seen), the rest one; the bytes still do not depend on the
// thread count, and the parser reads the lists back.
TEST_F(SyntheticTest, MultiHotColumnsHoldOneToMaxIdsAndTheOthersOne) {
  auto generate = [&](const std::string& name, int threads) {
    SyntheticOptions options;
    options.out_path = dir_.File(name);
    options.examples = 5000;
    options.seed = 3;
    options.threads = threads;
    options.multi_hot_columns = 3;
    options.max_ids_per_field = 4;
    SS_EXPECT_OK(GenerateSynthetic(options).status());
    return ReadFile(options.out_path);
  };
  const std::string text = generate("mh.tsv", 1);
  EXPECT_EQ(generate("mh4.tsv", 4), text);
  std::vector<int> counts(5, 0);
  ExampleBlock block;
  for (std::string_view line : Lines(text)) {
    const std::vector<std::string_view> fields = Split(line, '\t');
    ASSERT_EQ(fields.size(), static_cast<size_t>(kCriteoFields));
    for (int t = 0; t < kCriteoSparse; ++t) {
      const std::string_view f = fields[1 + kCriteoDense + t];
      if (f.empty()) continue;
      const std::vector<std::string_view> ids = Split(f, ',');
      if (t < kCriteoSparse - 3) ASSERT_EQ(ids.size(), 1u) << "C" << t + 1 << " = " << f;
      ASSERT_LE(ids.size(), 4u) << f;
      if (t >= kCriteoSparse - 3) ++counts[ids.size()];
      for (std::string_view id : ids) ASSERT_TRUE(id.size() == 8 && IsLowerHex(id)) << f;
    }
    SS_ASSERT_OK(ParseCriteoLine(line, &block));
  }
  for (int n = 1; n <= 4; ++n) EXPECT_GT(counts[n], 500) << n << " ids";
  EXPECT_TRUE(block.multi_hot());

  SyntheticOptions bad;
  bad.out_path = dir_.File("bad.tsv");
  bad.multi_hot_columns = 27;
  EXPECT_THAT(GenerateSynthetic(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "multi_hot_columns must be in [0, 26]"));
  bad.multi_hot_columns = 1;
  bad.max_ids_per_field = 0;
  EXPECT_THAT(GenerateSynthetic(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "max_ids_per_field must be in [1, 16]"));
}

// The teacher scores a multi-hot field as the mean of its ids' effects: the
// same id three times scores as that id alone, other ids move the logit.
TEST(SyntheticTeacherTest, AMultiHotFieldScoresAsTheMeanOfItsIds) {
  using synthetic_internal::Row;
  synthetic_internal::Teacher teacher(5, {.columns = 2, .max_ids = 3});
  teacher.Calibrate();
  synthetic_internal::Rng rng(17);
  Row row;
  do {
    teacher.SampleRow(&rng, &row);
  } while (row.rank[25] == 0 || row.rank[24] == 0);
  Row single = row;
  single.more.fill(0);
  single.more_rank.clear();
  const double alone = teacher.Logit(single);

  Row same = single;
  same.more[25] = 2;
  same.more_rank = {row.rank[25], row.rank[25]};
  EXPECT_NEAR(teacher.Logit(same), alone, 1e-9);

  Row other = single;
  other.more[24] = 1;
  other.more[25] = 1;
  other.more_rank = {row.rank[24] + 1, row.rank[25] + 7};
  EXPECT_GT(std::abs(teacher.Logit(other) - alone), 1e-4);
}

TEST_F(SyntheticTest, MissingValuesFollowCriteoRates) {
  const SharedData& shared = Shared();
  SS_ASSERT_OK(shared.status);
  std::vector<int64_t> missing(kCriteoFields, 0);
  int64_t minus_one = 0;
  for (std::string_view line : Lines(shared.text)) {
    const std::vector<std::string_view> fields = Split(line, '\t');
    for (int i = 1; i < kCriteoFields; ++i) missing[i] += fields[i].empty();
    minus_one += fields[2] == "-1";
  }
  auto rate = [&](int field) { return static_cast<double>(missing[field]) / kSharedExamples; };
  EXPECT_NEAR(rate(1), 0.45, 0.02);                              // I1
  EXPECT_EQ(missing[2], 0);                                      // I2 is never missing...
  EXPECT_NEAR(minus_one / double{kSharedExamples}, 0.10, 0.01);  // ...but often -1.
  EXPECT_NEAR(rate(1 + kCriteoDense + 2), 0.035, 0.01);          // C3
  EXPECT_NEAR(rate(1 + kCriteoDense + 18), 0.44, 0.02);          // C19
}

TEST_F(SyntheticTest, CtrIsAboutAQuarter) {
  const SharedData& shared = Shared();
  SS_ASSERT_OK(shared.status);
  int64_t positives = 0;
  for (std::string_view line : Lines(shared.text)) positives += line[0] == '1';
  const double ctr = static_cast<double>(positives) / kSharedExamples;
  EXPECT_GE(ctr, 0.2);
  EXPECT_LE(ctr, 0.3);
  EXPECT_NEAR(shared.report.ctr, ctr, 1e-12);
  EXPECT_EQ(shared.report.examples, kSharedExamples);
}

TEST_F(SyntheticTest, TeacherIsClearlyBetterThanTheBaseRate) {
  const SharedData& shared = Shared();
  SS_ASSERT_OK(shared.status);
  EXPECT_GE(shared.report.ne, 0.7);
  EXPECT_LE(shared.report.ne, 0.9);
  EXPECT_GT(shared.report.auc, 0.7);
  EXPECT_GT(shared.report.logloss, 0);
}

TEST_F(SyntheticTest, IdsAreZipfDistributed) {
  const SharedData& shared = Shared();
  SS_ASSERT_OK(shared.status);
  std::vector<std::unordered_map<std::string_view, int64_t>> counts(kCriteoSparse);
  for (std::string_view line : Lines(shared.text)) {
    const std::vector<std::string_view> fields = Split(line, '\t');
    for (int t = 0; t < kCriteoSparse; ++t) {
      std::string_view f = fields[1 + kCriteoDense + t];
      if (!f.empty()) ++counts[t][f];
    }
  }
  int checked = 0;
  for (int t = 0; t < kCriteoSparse; ++t) {
    std::vector<int64_t> sorted;
    for (const auto& [id, n] : counts[t]) sorted.push_back(n);
    if (sorted.size() < 100) continue;
    std::sort(sorted.rbegin(), sorted.rend());
    // Zipf with s >= 1.05 gives a top-to-100th ratio of at least 100^1.05.
    EXPECT_GT(sorted[0], 20 * sorted[99]) << "C" << t + 1;
    ++checked;
  }
  EXPECT_GE(checked, 10);
  // Scrambled: the most frequent id is not a small number.
  const auto top =
      std::max_element(counts[2].begin(), counts[2].end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  EXPECT_GT(std::stoull(std::string(top->first), nullptr, 16), 0xffffu);
}

TEST_F(SyntheticTest, ReportFileMatchesReturnedReport) {
  const SharedData& shared = Shared();
  SS_ASSERT_OK(shared.status);
  const nlohmann::json json = nlohmann::json::parse(shared.json_text);
  EXPECT_EQ(json.at("examples").get<int64_t>(), shared.report.examples);
  EXPECT_EQ(json.at("seed").get<uint64_t>(), 1u);
  EXPECT_DOUBLE_EQ(json.at("ctr").get<double>(), shared.report.ctr);
  EXPECT_DOUBLE_EQ(json.at("logloss").get<double>(), shared.report.logloss);
  EXPECT_DOUBLE_EQ(json.at("ne").get<double>(), shared.report.ne);
  EXPECT_DOUBLE_EQ(json.at("auc").get<double>(), shared.report.auc);
  const nlohmann::json& generator = json.at("generator");
  EXPECT_GE(generator.at("version").get<int>(), 1);
  ASSERT_EQ(generator.at("vocabularies").size(), static_cast<size_t>(kCriteoSparse));
  ASSERT_EQ(generator.at("zipf_exponents").size(), static_cast<size_t>(kCriteoSparse));
  for (const nlohmann::json& s : generator.at("zipf_exponents")) {
    EXPECT_GE(s.get<double>(), 1.05);
    EXPECT_LE(s.get<double>(), 1.4);
  }
  const auto& vocabularies = generator.at("vocabularies");
  EXPECT_LE(std::min_element(vocabularies.begin(), vocabularies.end())->get<int64_t>(), 10);
  EXPECT_GE(std::max_element(vocabularies.begin(), vocabularies.end())->get<int64_t>(), 100'000);
}

TEST_F(SyntheticTest, GzipOutputDecompressesToThePlainBytes) {
  TeacherReport plain_report, gz_report;
  const std::string plain = Generate("data.tsv", 5'000, 3, 0, &plain_report);
  const std::string gz = Generate("data.tsv.gz", 5'000, 3, 0, &gz_report);
  const std::string compressed = ReadFile(gz);
  ASSERT_GE(compressed.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(compressed[0]), 0x1f);  // gzip magic
  EXPECT_EQ(static_cast<unsigned char>(compressed[1]), 0x8b);
  const std::string expected = ReadFile(plain);
  EXPECT_LT(compressed.size(), expected.size() / 2);
  EXPECT_TRUE(Gunzip(gz) == expected);
  EXPECT_EQ(gz_report.ne, plain_report.ne);

  // The file is one gzip member per block; the reader must see all of them.
  absl::StatusOr<ExampleBlock> from_gz = ReadAllExamples({gz}, ReaderOptions());
  absl::StatusOr<ExampleBlock> from_plain = ReadAllExamples({plain}, ReaderOptions());
  SS_ASSERT_OK(from_gz);
  SS_ASSERT_OK(from_plain);
  EXPECT_EQ(from_gz->size(), 5'000);
  EXPECT_EQ(from_gz->labels, from_plain->labels);
  EXPECT_EQ(from_gz->sparse, from_plain->sparse);
}

TEST_F(SyntheticTest, RejectsNonPositiveExamples) {
  SyntheticOptions options;
  options.out_path = dir_.File("x.tsv");
  options.examples = 0;
  EXPECT_THAT(GenerateSynthetic(options), StatusIs(absl::StatusCode::kInvalidArgument, "examples"));
  options.examples = -5;
  EXPECT_THAT(GenerateSynthetic(options), StatusIs(absl::StatusCode::kInvalidArgument, "examples"));
}

TEST_F(SyntheticTest, RejectsEmptyOutPath) {
  SyntheticOptions options;
  options.examples = 10;
  EXPECT_THAT(GenerateSynthetic(options), StatusIs(absl::StatusCode::kInvalidArgument, "out_path"));
}

TEST_F(SyntheticTest, RejectsNegativeThreads) {
  SyntheticOptions options;
  options.out_path = dir_.File("x.tsv");
  options.examples = 10;
  options.threads = -1;
  EXPECT_THAT(GenerateSynthetic(options), StatusIs(absl::StatusCode::kInvalidArgument, "threads"));
}

TEST_F(SyntheticTest, UnwritablePathErrorNamesThePath) {
  for (const char* name : {"no_such_dir/data.tsv", "no_such_dir/data.tsv.gz"}) {
    SyntheticOptions options;
    options.out_path = dir_.File(name);
    options.examples = 10;
    absl::StatusOr<TeacherReport> report = GenerateSynthetic(options);
    ASSERT_FALSE(report.ok());
    EXPECT_THAT(std::string(report.status().message()), HasSubstr(options.out_path));
  }
}

TEST_F(SyntheticTest, OneExampleIsEnough) {
  const std::string path = Generate("one_example.tsv", 1, 5);
  EXPECT_EQ(Lines(ReadFile(path)).size(), 1u);
  EXPECT_FALSE(ReadFile(path + ".teacher.json").empty());
}

}  // namespace
}  // namespace shadowsync
