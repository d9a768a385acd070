// Streaming reader for Criteo-layout TSV files (plain or gzip), parsing in
// parallel while preserving file order. Malformed lines are counted, the first
// few reported with file:line and reason, and skipped. A CriteoReader is not
// thread-safe: it has one consumer thread (Next, stats); its parse threads are
// internal. ParseCriteoLine is thread-safe.
//
//   SS_ASSIGN_OR_RETURN(auto reader, CriteoReader::Open({"day0.tsv.gz"}, {}));
//   ExampleBlock block;
//   while (true) {
//     SS_ASSIGN_OR_RETURN(bool more, reader->Next(&block));
//     if (!more) break;
//     Consume(block);
//   }
#ifndef SHADOWSYNC_DATA_CRITEO_READER_H_
#define SHADOWSYNC_DATA_CRITEO_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/example.h"

namespace shadowsync {

struct ReaderOptions {
  int parse_threads = 2;              // Threads parsing chunks. Default: 2.
  int64_t chunk_bytes = 4 << 20;      // Bytes handed to one parse task. Default: 4 MiB.
  int64_t max_line_bytes = 64 << 10;  // Longer lines are malformed. Default: 64 KiB.
  int max_reported_errors = 5;        // Malformed lines logged in detail. Default: 5.
  // Sharding across trainers: this reader keeps only lines whose 0-based
  // global line index (counted over all files, in order) satisfies
  // index % num_shards == shard_index. Every line goes to exactly one shard.
  int shard_index = 0;
  int num_shards = 1;
  int64_t max_examples = -1;  // Stop after this many kept examples; -1 = all.
};

struct ReaderStats {
  int64_t lines = 0;      // Lines seen (all shards, including malformed ones).
  int64_t examples = 0;   // Examples returned to the caller.
  int64_t malformed = 0;  // Lines skipped as malformed (this shard's lines only).
  int64_t bytes = 0;      // Bytes of (decompressed) input consumed.
  // "file:line: reason" for the first max_reported_errors malformed lines.
  std::vector<std::string> first_errors;
};

// Parses one TSV line (without its newline) into `out` (appending one
// example). Returns InvalidArgument naming the field and reason on a
// malformed line, appending nothing. Integer features become log(1 + max(x, 0));
// an empty integer field becomes 0, an empty categorical field kMissingId. A
// categorical field is up to 8 hex digits, or a comma-separated list of such
// ids (multi-hot: the block switches to its offsets form, example.h).
absl::Status ParseCriteoLine(std::string_view line, ExampleBlock* out);
// The dense feature an integer field's value `x` becomes: log(1 + max(x, 0)).
float CriteoDenseValue(int64_t x);

class CriteoReader {
 public:
  // Opens `paths` (read in order; ".gz" files, or any file starting with the
  // gzip magic, are decompressed). Returns NotFound naming a missing file,
  // InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(std::vector<std::string> paths,
                                                            const ReaderOptions& options);
  virtual ~CriteoReader() = default;

  // Replaces *block with the next examples in file order. Returns false at the
  // end of input (block empty). Returns an error only for I/O failures (a
  // corrupt gzip stream, a read error), never for malformed lines.
  virtual absl::StatusOr<bool> Next(ExampleBlock* block) = 0;

  // Counters so far. Safe to call between Next() calls.
  virtual ReaderStats stats() const = 0;
};

// Reads every example of `paths` into one block (tests, evaluation files).
absl::StatusOr<ExampleBlock> ReadAllExamples(const std::vector<std::string>& paths,
                                             const ReaderOptions& options,
                                             ReaderStats* stats = nullptr);

}  // namespace shadowsync

#endif  // SHADOWSYNC_DATA_CRITEO_READER_H_
