// GenerateSynthetic (data/synthetic.h): examples from the planted teacher
// (data/synthetic_teacher.cc), written in order, and the teacher's report.
//
// Determinism. Examples come in blocks of kBlockExamples, each with its own
// RNG stream keyed by (seed, block index), so the bytes depend only on the
// options (not on the thread count) for a given build, libm and zlib. Worker
// threads generate (and for ".gz", compress into one gzip member each) blocks;
// the calling thread writes them in order.
#include "data/synthetic.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/eval_metrics.h"
#include "common/example.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "data/synthetic_internal.h"
#include "nlohmann/json.hpp"

namespace shadowsync {
namespace {

using synthetic_internal::Json;
using synthetic_internal::kBlockExamples;
using synthetic_internal::kMaxIdsPerField;
using synthetic_internal::Rng;
using synthetic_internal::Row;
using synthetic_internal::Sigmoid;
using synthetic_internal::Stream;
using synthetic_internal::StreamKey;
using synthetic_internal::Teacher;

// AUC needs every probability in memory; beyond this many examples it is
// computed on an evenly strided subset (logloss and NE stay exact).
constexpr int64_t kMaxAucExamples = int64_t{1} << 24;
// Level 1 compresses ~3x faster than the default 6, keeping gzip output near
// the plain generation speed; files are ~15% larger.
constexpr int kGzipLevel = 1;

// One block's bytes for each file (TSV text, or one gzip member of it; a
// block straddles the two files at most once) and the teacher's probabilities
// and drawn labels.
struct Block {
  std::string bytes[2];  // Training file, held-out file.
  std::vector<float> probs;
  std::vector<float> labels;
};

constexpr char kHexDigits[] = "0123456789abcdef";

void AppendRow(const Teacher& teacher, const Row& row, bool label, std::string* out) {
  // Widest row: 2 + 13 * 12 + 26 * kMaxIdsPerField * 9 characters.
  char buf[4096];
  char* p = buf;
  *p++ = label ? '1' : '0';
  for (int j = 0; j < kCriteoDense; ++j) {
    *p++ = '\t';
    if (!row.dense_missing[j]) p = std::to_chars(p, buf + sizeof(buf), row.dense[j]).ptr;
  }
  auto hex = [&](int t, uint32_t rank) {
    const uint32_t value = teacher.IdValue(t, rank);
    for (int k = 7; k >= 0; --k) *p++ = kHexDigits[(value >> (4 * k)) & 0xf];
  };
  const uint32_t* more = row.more_rank.data();
  for (int t = 0; t < kCriteoSparse; ++t) {
    *p++ = '\t';
    if (row.rank[t] == 0) continue;
    hex(t, row.rank[t]);
    for (int k = 0; k < row.more[t]; ++k) {
      *p++ = ',';
      hex(t, *more++);
    }
  }
  *p++ = '\n';
  out->append(buf, p - buf);
}

// Compresses `text` into one complete gzip member. A sequence of members is
// a valid gzip file (RFC 1952 2.2) that gunzip and zlib's gzread read as one
// stream, so blocks are compressed independently by the worker threads.
absl::StatusOr<std::string> GzipMember(std::string_view text) {
  z_stream z{};
  // windowBits 15 + 16 selects the gzip wrapper (zlib writes mtime 0, so the
  // bytes are reproducible).
  if (deflateInit2(&z, kGzipLevel, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError("deflateInit2 failed");
  }
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return absl::InternalError(absl::StrCat("deflate failed: ", rc));
  return out;
}

// The block's first `train` examples go to the training file, the rest to
// the held-out one.
absl::StatusOr<Block> GenerateBlock(const Teacher& teacher, uint64_t seed, int64_t index,
                                    int64_t count, int64_t train, bool gzip) {
  Rng rng(Mix64(StreamKey(seed, Stream::kBlocks) + static_cast<uint64_t>(index)));
  Block block;
  block.bytes[train > 0 ? 0 : 1].reserve(count * 256);  // Rows average ~245 bytes.
  block.probs.reserve(count);
  block.labels.reserve(count);
  Row row;
  for (int64_t i = 0; i < count; ++i) {
    teacher.SampleRow(&rng, &row);
    const double prob = Sigmoid(teacher.Logit(row));
    const bool label = rng.Uniform() < prob;
    AppendRow(teacher, row, label, &block.bytes[i < train ? 0 : 1]);
    block.probs.push_back(static_cast<float>(prob));
    block.labels.push_back(label ? 1.0f : 0.0f);
  }
  if (gzip) {
    for (std::string& bytes : block.bytes) {
      if (!bytes.empty()) {
        SS_ASSIGN_OR_RETURN(bytes, GzipMember(bytes));
      }
    }
  }
  return block;
}

// The teacher's quality over one file's examples, as they stream by.
class Tally {
 public:
  explicit Tally(int64_t examples)
      : examples_(examples), auc_stride_((examples + kMaxAucExamples - 1) / kMaxAucExamples) {
    auc_probs_.reserve(examples / auc_stride_ + 1);
    auc_labels_.reserve(examples / auc_stride_ + 1);
  }

  void Add(float prob, float label) {
    entropy_.Add(prob, label);
    positives_ += label;
    if (seen_++ % auc_stride_ == 0) {
      auc_probs_.push_back(prob);
      auc_labels_.push_back(label);
    }
  }

  TeacherReport Report() const {
    const QualityReport quality = Evaluate(auc_probs_, auc_labels_);
    TeacherReport report;
    report.examples = examples_;
    report.ctr = quality.ctr;
    report.logloss = quality.logloss;
    report.ne = quality.ne;
    report.auc = quality.auc;
    if (auc_stride_ > 1) {
      // Evaluate() saw a subset; the streaming sums are exact.
      report.ctr = positives_ / static_cast<double>(examples_);
      report.logloss = entropy_.logloss();
      report.ne = entropy_.ne();
    }
    return report;
  }

 private:
  const int64_t examples_;
  const int64_t auc_stride_;
  int64_t seen_ = 0;
  RunningEntropy entropy_;
  double positives_ = 0;
  std::vector<float> auc_probs_, auc_labels_;
};

// "<what> <path>: <strerror>", with the code errno implies (NotFound for a
// missing directory, PermissionDenied, ResourceExhausted for a full disk...).
absl::Status FileError(const char* what, const std::string& path, int error_number) {
  if (error_number == 0) return absl::UnknownError(absl::StrCat(what, " ", path));
  return absl::ErrnoToStatus(error_number, absl::StrCat(what, " ", path));
}

// The data file. Writes are buffered by stdio.
class OutputFile {
 public:
  static absl::StatusOr<std::unique_ptr<OutputFile>> Open(const std::string& path) {
    FILE* file = std::fopen(path.c_str(), "wb");
    if (file == nullptr) return FileError("cannot open", path, errno);
    return std::unique_ptr<OutputFile>(new OutputFile(path, file));
  }

  ~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);  // Only on an error path.
  }

  absl::Status Write(std::string_view data) {
    if (std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
      return FileError("cannot write", path_, errno);
    }
    return absl::OkStatus();
  }

  absl::Status Close() {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) return FileError("cannot close", path_, errno);
    return absl::OkStatus();
  }

 private:
  OutputFile(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  FILE* file_;
};

absl::Status WriteReport(const std::string& path, const TeacherReport& report, uint64_t seed,
                         const Teacher& teacher) {
  const Json json = {
      {"examples", report.examples},     {"seed", seed},    {"ctr", report.ctr},
      {"logloss", report.logloss},       {"ne", report.ne}, {"auc", report.auc},
      {"generator", teacher.Describe()},
  };
  const std::string text = json.dump(2) + "\n";
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return FileError("cannot open", path, errno);
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int write_errno = errno;
  if (std::fclose(file) != 0) return FileError("cannot close", path, errno);
  if (!written) return FileError("cannot write", path, write_errno);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TeacherReport> GenerateSynthetic(const SyntheticOptions& options,
                                                TeacherReport* eval_report) {
  if (options.out_path.empty()) return absl::InvalidArgumentError("out_path must not be empty");
  if (options.examples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("examples must be at least 1, got ", options.examples));
  }
  if (options.eval_examples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval_examples must not be negative, got ", options.eval_examples));
  }
  const bool held_out = options.eval_examples > 0;
  if (held_out && (options.eval_out_path.empty() || options.eval_out_path == options.out_path)) {
    return absl::InvalidArgumentError(
        "eval_out_path must be set, and differ from out_path, when eval_examples > 0");
  }
  if (held_out &&
      absl::EndsWith(options.eval_out_path, ".gz") != absl::EndsWith(options.out_path, ".gz")) {
    return absl::InvalidArgumentError(
        "eval_out_path and out_path must both end in .gz, or neither (one compression for both)");
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads must be 0 (all cores) or positive, got ", options.threads));
  }
  if (options.multi_hot_columns < 0 || options.multi_hot_columns > kCriteoSparse) {
    return absl::InvalidArgumentError(absl::StrCat(
        "multi_hot_columns must be in [0, ", kCriteoSparse, "], got ", options.multi_hot_columns));
  }
  if (options.max_ids_per_field < 1 || options.max_ids_per_field > kMaxIdsPerField) {
    return absl::InvalidArgumentError(absl::StrCat("max_ids_per_field must be in [1, ",
                                                   kMaxIdsPerField, "], got ",
                                                   options.max_ids_per_field));
  }
  // Open first so a bad path fails before the calibration work.
  std::unique_ptr<OutputFile> out[2];
  SS_ASSIGN_OR_RETURN(out[0], OutputFile::Open(options.out_path));
  if (held_out) {
    SS_ASSIGN_OR_RETURN(out[1], OutputFile::Open(options.eval_out_path));
  }

  Teacher teacher(options.seed,
                  {.columns = options.multi_hot_columns, .max_ids = options.max_ids_per_field});
  teacher.Calibrate();

  const int64_t total = options.examples + options.eval_examples;
  const int64_t num_blocks = (total + kBlockExamples - 1) / kBlockExamples;
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, num_blocks));

  const bool gzip = absl::EndsWith(options.out_path, ".gz");
  auto make_block = [&teacher, &options, total, gzip](int64_t index) {
    const int64_t begin = index * kBlockExamples;
    const int64_t count = std::min(kBlockExamples, total - begin);
    const int64_t train = std::clamp<int64_t>(options.examples - begin, 0, count);
    return GenerateBlock(teacher, options.seed, index, count, train, gzip);
  };
  Tally tally[2] = {Tally(options.examples), Tally(std::max<int64_t>(options.eval_examples, 1))};
  auto consume = [&](const absl::StatusOr<Block>& result, int64_t index) -> absl::Status {
    SS_RETURN_IF_ERROR(result.status());
    const Block& block = *result;
    for (int f : {0, 1}) {
      if (!block.bytes[f].empty()) SS_RETURN_IF_ERROR(out[f]->Write(block.bytes[f]));
    }
    for (size_t i = 0; i < block.probs.size(); ++i) {
      const bool train = index * kBlockExamples + static_cast<int64_t>(i) < options.examples;
      tally[train ? 0 : 1].Add(block.probs[i], block.labels[i]);
    }
    return absl::OkStatus();
  };

  if (threads == 1) {
    for (int64_t b = 0; b < num_blocks; ++b) SS_RETURN_IF_ERROR(consume(make_block(b), b));
  } else {
    // `threads` blocks in flight, consumed in order; a future's destructor
    // waits for its block, so an early return cannot leave work running.
    std::deque<std::future<absl::StatusOr<Block>>> pending;
    int64_t next = 0;
    for (; next < num_blocks && next < threads; ++next) {
      pending.push_back(std::async(std::launch::async, make_block, next));
    }
    for (int64_t b = 0; b < num_blocks; ++b) {
      absl::StatusOr<Block> block = pending.front().get();
      pending.pop_front();
      if (next < num_blocks) pending.push_back(std::async(std::launch::async, make_block, next++));
      SS_RETURN_IF_ERROR(consume(block, b));
    }
  }
  SS_RETURN_IF_ERROR(out[0]->Close());
  const TeacherReport report = tally[0].Report();
  SS_RETURN_IF_ERROR(
      WriteReport(options.out_path + ".teacher.json", report, options.seed, teacher));
  if (held_out) {
    SS_RETURN_IF_ERROR(out[1]->Close());
    const TeacherReport eval = tally[1].Report();
    SS_RETURN_IF_ERROR(
        WriteReport(options.eval_out_path + ".teacher.json", eval, options.seed, teacher));
    if (eval_report != nullptr) *eval_report = eval;
  }
  return report;
}

}  // namespace shadowsync
