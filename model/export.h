// The model export: the one format a trained model leaves a job in, whether
// `shadowsync train --save-model` wrote it from one process or a distributed
// job from its parameter servers. A directory of a manifest, the dense
// parameters and the rows in parts by hash-slot range, so it does not depend
// on how many servers held them (docs/export.md, "Layout"). The writer builds
// it under a temporary name and renames it into place: a reader sees the
// previous export or the whole new one.
// An ExportWriter is not thread-safe (one owner). An ExportReader is
// immutable once opened: its const readers may run on several threads at
// once. The free functions are thread-safe.
#ifndef SHADOWSYNC_MODEL_EXPORT_H_
#define SHADOWSYNC_MODEL_EXPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_util.h"
#include "model/dlrm.h"
#include "model/embedding_table.h"
#include "model/gemm.h"
#include "model/model_io.h"
#include "nlohmann/json.hpp"

namespace shadowsync::model {

inline constexpr int kExportFormatVersion = 1;

// What an export holds besides the numbers.
struct ExportInfo {
  DlrmConfig config;
  LocalStoreOptions embeddings;  // tables, dim, sparse optimizer, init seed
  bool with_optimizer_state = true;
  uint32_t num_slots = 4096;  // The slot space the parts divide.
  int num_parts = 16;
  std::string dense_source;  // Which dense parameters: "trainer replica", "easgd centre", ...
  int64_t examples_trained = 0;
  // eval_ne, eval_auc, ... at export time, and the fp32 GEMM kernel that
  // scored it (gemm), which a repeat of the score runs.
  nlohmann::json eval = nlohmann::json::object();
  nlohmann::json job = nullptr;  // the job spec, when a job wrote it
  // A delta export (docs/export.md, "Delta exports"): the name of the export
  // beside it that this one changes, whose rows it replaces and removes;
  // empty for a full export.
  std::string delta_base;
  // Where each parameter server's change log stood at this export, for the
  // next delta (exporter/job_export.h); null when nobody tracks changes.
  nlohmann::json changes = nullptr;
};

// The first slot of part `part` of an export: p * S / P (S slots, P parts).
inline uint32_t PartSlotBegin(const ExportInfo& info, int part) {
  return static_cast<uint32_t>(static_cast<uint64_t>(part) * info.num_slots /
                               static_cast<uint64_t>(info.num_parts));
}

// Which rows to load: true keeps the row. A row left out reads as its
// initial value (InitEmbeddingRow), as a row never trained does.
using RowFilter = std::function<bool(uint32_t table, uint64_t id)>;

class ExportWriter {
 public:
  // Starts an export that Commit() will put at `dir` (replacing an export
  // there, atomically); until then it is built in a temporary directory
  // beside `dir`, removed if the writer is destroyed uncommitted.
  static absl::StatusOr<std::unique_ptr<ExportWriter>> Create(std::string dir, ExportInfo info);
  ~ExportWriter();

  // `dense_state` is ignored without info.with_optimizer_state.
  absl::Status WriteDense(std::span<const float> params, std::span<const float> dense_state);
  // Part p holds slots [p * S / P, (p + 1) * S / P). Parts are written in
  // increasing order; rows in any order within a part.
  uint32_t PartBegin(int part) const { return PartSlotBegin(info_, part); }
  absl::Status BeginPart(int part);
  // InvalidArgument if the row's slot is outside the open part's range.
  absl::Status AddRow(uint32_t table, uint64_t id, std::span<const float> values,
                      std::span<const float> state);
  // Rows already laid out as a part file's records (RecordBytes() each: the
  // table, the id, the values and, when carried, the state), with `crc` the
  // zlib CRC-32 of `records` that the caller has checked: written as they
  // are, the part's CRC extended with crc32_combine, not recomputed.
  // InvalidArgument as AddRow, for the first row out of place.
  absl::Status AddRecords(std::string_view records, uint32_t crc);
  size_t RecordBytes() const;
  // A delta's rows removed since its base (evicted by the servers), as
  // records of the table (uint32) and the id (uint64), in the open part.
  // InvalidArgument as AddRecords; FailedPrecondition for a full export.
  absl::Status AddTombstones(std::string_view records);
  absl::Status EndPart();
  // From here on, the rows `keep` keeps are also held in memory, exactly as
  // written, for Commit's scorer: an eval's rows, which it then needs no
  // second read of every part to find (an export of many GB). Call before
  // the first row.
  absl::Status KeepRows(RowFilter keep);
  // Scores the export, finished but not yet in place: called with the model
  // as LoadExport(dir, keep) would return it from the files written, made
  // from the dense parameters and the rows KeepRows kept (none without it).
  // What it returns becomes the manifest's `eval`, so the score is of
  // exactly what is committed.
  using Scorer = std::function<absl::StatusOr<nlohmann::json>(SavedModel& model)>;
  // Writes the manifest and renames the export into place; with `score`,
  // first scores the export as Scorer says (an error from it commits
  // nothing).
  absl::Status Commit(const Scorer& score = nullptr);

  const std::string& dir() const { return dir_; }
  const ExportInfo& info() const { return info_; }
  // The manifest's `changes` (ExportInfo::changes), known only once the
  // rows are streamed.
  void set_changes(nlohmann::json changes) { changes_ = std::move(changes); }

 private:
  ExportWriter(std::string dir, std::string tmp, ExportInfo info);
  absl::Status WriteFile(const std::string& name, const std::string& bytes, int64_t rows);
  absl::Status WriteManifest(const nlohmann::json& eval);
  // A written row (its record's bytes) into kept_, if keep_ keeps it.
  void Keep(uint32_t table, uint64_t id, const char* values);

  const std::string dir_, tmp_;
  const ExportInfo info_;
  const int state_floats_;  // Per row, when carried.
  nlohmann::json files_ = nlohmann::json::array();
  bool dense_written_ = false, committed_ = false;
  std::vector<float> params_, dense_state_;  // As written, for the scorer.
  RowFilter keep_;
  std::unique_ptr<LocalEmbeddingStore> kept_;
  std::vector<float> values_, state_;  // Keep's aligned copies of one row.
  int next_part_ = 0;
  // The open part.
  int part_ = -1;
  uint32_t part_begin_ = 0, part_end_ = 0;
  static constexpr size_t kWriteBufferBytes = 1 << 20;
  void FlushBuffer();
  std::optional<AtomicFileWriter> out_;  // The open part's file.
  std::string buffer_;                   // Rows of the open part not yet written.
  uint64_t crc_ = 0, bytes_ = 0;
  int64_t rows_ = 0, total_rows_ = 0;
  std::string tombstones_;  // A delta's, written by Commit.
  nlohmann::json changes_;
};

// An export on disk, its manifest checked: the format version, the files it
// lists present with their sizes. Contents are checked as they are read.
class ExportReader {
 public:
  // NotFound for a missing directory or file, DataLoss for a truncated file,
  // InvalidArgument for an unknown format version or a malformed manifest;
  // each names the file (and the manifest field).
  static absl::StatusOr<ExportReader> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& manifest() const { return manifest_; }
  const DlrmConfig& config() const { return info_.config; }
  const ExportInfo& info() const { return info_; }
  int64_t num_rows() const;

  // InvalidArgument naming the field ("model.bottomMlp: ...") unless the
  // export's model and embedding tables are `config` and `tables`; for a
  // warm start, so also FailedPrecondition for a delta export (its rows are
  // only the changes).
  absl::Status CheckShape(const DlrmConfig& config,
                          const std::vector<EmbeddingTableConfig>& tables) const;

  // DataLoss naming the file on a checksum mismatch.
  absl::Status ReadDense(std::vector<float>* params, std::vector<float>* dense_state) const;
  // Every row, part by part; a part's checksum is verified before any of its
  // rows is visited. `state` is empty for an export without optimizer state.
  using RowVisitor = std::function<absl::Status(
      uint32_t table, uint64_t id, std::span<const float> values, std::span<const float> state)>;
  // `part_order`, when given, lists every part once: the order to read them
  // in (a warm start reads parts bound for different servers in turn).
  absl::Status ForEachRow(const RowVisitor& visit, std::span<const int> part_order = {}) const;
  // Every part's records as they lie in its file: the table (uint32), the id
  // (uint64), the row's dim floats, then its state floats, little-endian,
  // RecordBytes() each. Verified first: checksum, whole records, known
  // tables. `records` is valid only during the visit.
  using PartVisitor = std::function<absl::Status(int part, std::string_view records)>;
  absl::Status ForEachPart(const PartVisitor& visit, std::span<const int> part_order = {}) const;
  size_t RecordBytes() const;
  // A delta's tombstones (AddTombstones), checksum verified first; none for
  // a full export.
  absl::Status ForEachTombstone(
      const std::function<absl::Status(uint32_t table, uint64_t id)>& visit) const;
  bool is_delta() const { return !info_.delta_base.empty(); }
  // The export a delta changes: a sibling directory.
  std::string BaseDir() const;
  // Reads every file and checks its checksum: for a caller that must not
  // change anything if any part is corrupt.
  absl::Status Verify() const;

 private:
  std::string dir_;
  nlohmann::json manifest_;
  ExportInfo info_;
};

// The fp32 GEMM kernel that scored the export (its manifest's eval.gemm),
// which a repeat of that score must run to repeat it to the bit; nullopt if
// the manifest names none. InvalidArgument naming
// `<dir>/manifest.json: eval.gemm` if it is not a kernel's name.
absl::StatusOr<std::optional<GemmKernel>> ScoredGemmKernel(const ExportReader& reader);

// An export as a trainable model in this process: dense parameters and
// state, and a LocalEmbeddingStore of every row (zero optimizer state where
// the export carries none), or of the rows `keep` keeps. A delta export is
// its base chain's full export with every delta up to it applied. Every file
// is read and its checksum verified whatever `keep` says; on any error no
// model is returned.
absl::StatusOr<SavedModel> LoadExport(const std::string& dir, const RowFilter& keep = nullptr);
// The exports LoadExport(dir) reads: `dir` and, for a delta, the bases back
// to its full export, oldest (the full export) first, manifests checked.
// FailedPrecondition if the bases form a cycle or a delta's model differs
// from its full export's.
absl::StatusOr<std::vector<ExportReader>> OpenExportChain(const std::string& dir);
// Every row of `reader` (that `keep` keeps, when given) into `store` (a
// warm start of `train --init-model`), with zero optimizer state where the
// export has none or another optimizer's. The caller checks the shape
// (CheckShape) first.
absl::Status LoadExportRows(const ExportReader& reader, LocalEmbeddingStore* store,
                            const RowFilter& keep = nullptr);

// Writes a single-process model (train --save-model) as an export.
absl::Status ExportLocalModel(const std::string& dir, ExportInfo info,
                              std::span<const float> params, std::span<const float> dense_state,
                              const LocalEmbeddingStore& store);

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_MODEL_EXPORT_H_
