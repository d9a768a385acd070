// A model export loaded for online scoring: the dense parameters, and every
// embedding row in RAM or on disk behind a RAM cache (RowSource), read-only, shared by all serving
// threads. A score is the probability the model gives an example, computed exactly as `shadowsync
// eval` computes it (the same batch gathering, forward pass and fp32 GEMM kernel), so the two
// agree.
//
//   SS_ASSIGN_OR_RETURN(std::unique_ptr<Scorer> scorer, Scorer::Load("exports/model-000002"));
//   SS_ASSIGN_OR_RETURN(std::vector<float> p, scorer->Score(block));
//
// Thread-safe: any number of threads may call Score at once.
#ifndef SHADOWSYNC_SERVING_SCORER_H_
#define SHADOWSYNC_SERVING_SCORER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/example.h"
#include "common/mutex.h"
#include "model/dlrm.h"
#include "model/export.h"
#include "model/gemm.h"
#include "serving/row_source.h"

namespace shadowsync::serving {

struct ScorerOptions {
  // Examples per forward pass; a larger request is scored in pieces.
  int max_batch = 1024;
  // nullopt: the kernel that scored the export (its manifest's eval.gemm),
  // else the fastest here.
  std::optional<model::GemmKernel> gemm;
  // 0: every row in RAM (RowTable). Else the rows go to an on-disk store in
  // a fresh directory under `cache_dir` (empty: the system's temporary
  // directory, $TMPDIR or /tmp), read through a RAM cache of this many bytes
  // (DiskRows).
  int64_t cache_bytes = 0;
  std::string cache_dir;
  // Called after each forward pass's lookups with where they found their
  // rows (for metrics); from the scoring threads.
  std::function<void(const RowCounts& counts)> on_rows;
};

class Scorer {
 public:
  // Errors as model::LoadExport gives them, naming the file. A delta export
  // loads as its chain (LoadExport).
  static absl::StatusOr<std::unique_ptr<Scorer>> Load(const std::string& dir,
                                                      ScorerOptions options = {});
  ~Scorer();

  // This model with the delta exports `deltas` applied in order (each over
  // the one before, the first over this model's export): their dense
  // parameters, changed rows and tombstones. The rows this model holds are
  // shared, not copied, so a delta costs its own rows. FailedPrecondition
  // if a delta is not of this model's shape; ExportReader's errors.
  absl::StatusOr<std::unique_ptr<Scorer>> WithDeltas(const std::vector<std::string>& deltas) const;
  // Deltas applied over the export loaded whole: each costs a probe per
  // looked-up row, so past a few a full load is better.
  int num_deltas() const { return static_cast<int>(deltas_.size()); }

  // The probability of a click for each example of `block` (its labels are
  // ignored). InvalidArgument if the block's layout is not the model's
  // (dense or categorical field counts); the row store's read errors.
  absl::StatusOr<std::vector<float>> Score(const ExampleBlock& block) const;

  const std::string& dir() const { return dir_; }
  const model::ExportInfo& info() const { return info_; }
  const model::DlrmConfig& config() const { return model_.config(); }
  model::GemmKernel gemm() const { return gemm_; }
  int64_t num_rows() const;
  // RAM the embedding rows take (with DiskRows, its cache and index).
  int64_t rows_memory_bytes() const { return store_->memory_bytes(); }

 private:
  struct Context;  // One forward pass's buffers.
  // One delta's rows over the layers below: an index into `values` (dim
  // floats a row), or -1 for a tombstone.
  struct DeltaRows {
    absl::flat_hash_map<std::pair<uint32_t, uint64_t>, int64_t> index;
    std::vector<float> values;
  };

  Scorer(std::string dir, model::ExportInfo info, model::DlrmConfig config,
         std::vector<float> params, std::shared_ptr<const RowSource> store,
         std::vector<std::shared_ptr<const DeltaRows>> deltas, int64_t num_rows,
         ScorerOptions options, model::GemmKernel gemm);
  // Rows the deltas change, over what the store looked up.
  void ApplyDeltas(std::span<model::TableRows> rows) const;
  std::unique_ptr<Context> Acquire() const;
  void Release(std::unique_ptr<Context> context) const;

  const std::string dir_;
  const model::ExportInfo info_;
  const model::Dlrm model_;
  const std::vector<float> params_;
  // Shared with the models that deltas made from this one.
  const std::shared_ptr<const RowSource> store_;
  const std::vector<std::shared_ptr<const DeltaRows>> deltas_;  // Oldest first.
  const int64_t num_rows_;
  const ScorerOptions options_;
  const model::GemmKernel gemm_;
  mutable Mutex mu_;
  // Idle buffers, reused by the next Score.
  mutable std::vector<std::unique_ptr<Context>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_SCORER_H_
