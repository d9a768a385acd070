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

// One block's bytes for the file (TSV text, or one gzip member of it) and
// the teacher's probabilities and drawn labels.
struct Block {
  std::string bytes;
  std::vector<float> probs;
  std::vector<float> labels;
};

constexpr char kHexDigits[] = "0123456789abcdef";

void AppendRow(const Teacher& teacher, const Row& row, bool label, std::string* out) {
  // Widest row: 2 + 13 * 12 + 26 * 9 characters.
  char buf[512];
  char* p = buf;
  *p++ = label ? '1' : '0';
  for (int j = 0; j < kCriteoDense; ++j) {
    *p++ = '\t';
    if (!row.dense_missing[j]) p = std::to_chars(p, buf + sizeof(buf), row.dense[j]).ptr;
  }
  for (int t = 0; t < kCriteoSparse; ++t) {
    *p++ = '\t';
    if (row.rank[t] == 0) continue;
    const uint32_t value = teacher.IdValue(t, row.rank[t]);
    for (int k = 7; k >= 0; --k) *p++ = kHexDigits[(value >> (4 * k)) & 0xf];
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

absl::StatusOr<Block> GenerateBlock(const Teacher& teacher, uint64_t seed, int64_t index,
                                    int64_t count, bool gzip) {
  Rng rng(Mix64(StreamKey(seed, Stream::kBlocks) + static_cast<uint64_t>(index)));
  Block block;
  block.bytes.reserve(count * 256);  // Rows average ~245 bytes.
  block.probs.reserve(count);
  block.labels.reserve(count);
  Row row;
  for (int64_t i = 0; i < count; ++i) {
    teacher.SampleRow(&rng, &row);
    const double prob = Sigmoid(teacher.Logit(row));
    const bool label = rng.Uniform() < prob;
    AppendRow(teacher, row, label, &block.bytes);
    block.probs.push_back(static_cast<float>(prob));
    block.labels.push_back(label ? 1.0f : 0.0f);
  }
  if (gzip) {
    SS_ASSIGN_OR_RETURN(block.bytes, GzipMember(block.bytes));
  }
  return block;
}

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

absl::StatusOr<TeacherReport> GenerateSynthetic(const SyntheticOptions& options) {
  if (options.out_path.empty()) return absl::InvalidArgumentError("out_path must not be empty");
  if (options.examples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("examples must be at least 1, got ", options.examples));
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads must be 0 (all cores) or positive, got ", options.threads));
  }
  // Open first so a bad path fails before the calibration work.
  SS_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(options.out_path));

  Teacher teacher(options.seed);
  teacher.Calibrate();

  const int64_t num_blocks = (options.examples + kBlockExamples - 1) / kBlockExamples;
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, num_blocks));
  const int64_t auc_stride = (options.examples + kMaxAucExamples - 1) / kMaxAucExamples;

  const bool gzip = absl::EndsWith(options.out_path, ".gz");
  auto make_block = [&teacher, &options, gzip](int64_t index) {
    const int64_t count = std::min(kBlockExamples, options.examples - index * kBlockExamples);
    return GenerateBlock(teacher, options.seed, index, count, gzip);
  };
  RunningEntropy entropy;
  double positives = 0;
  std::vector<float> auc_probs, auc_labels;
  auc_probs.reserve(options.examples / auc_stride + 1);
  auc_labels.reserve(options.examples / auc_stride + 1);
  auto consume = [&](const absl::StatusOr<Block>& result, int64_t index) -> absl::Status {
    SS_RETURN_IF_ERROR(result.status());
    const Block& block = *result;
    SS_RETURN_IF_ERROR(out->Write(block.bytes));
    for (size_t i = 0; i < block.probs.size(); ++i) {
      entropy.Add(block.probs[i], block.labels[i]);
      positives += block.labels[i];
      if ((index * kBlockExamples + static_cast<int64_t>(i)) % auc_stride == 0) {
        auc_probs.push_back(block.probs[i]);
        auc_labels.push_back(block.labels[i]);
      }
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
  SS_RETURN_IF_ERROR(out->Close());

  const QualityReport quality = Evaluate(auc_probs, auc_labels);
  TeacherReport report;
  report.examples = options.examples;
  report.ctr = quality.ctr;
  report.logloss = quality.logloss;
  report.ne = quality.ne;
  report.auc = quality.auc;
  if (auc_stride > 1) {
    // Evaluate() saw a subset; the streaming sums are exact.
    report.ctr = positives / static_cast<double>(options.examples);
    report.logloss = entropy.logloss();
    report.ne = entropy.ne();
  }
  SS_RETURN_IF_ERROR(
      WriteReport(options.out_path + ".teacher.json", report, options.seed, teacher));
  return report;
}

}  // namespace shadowsync
