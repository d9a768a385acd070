// The embedding rows a batch of examples looks up, gathered as Dlrm::Step
// reads them: per table, the unique rows (raw ids hashed to rows by
// BucketOf), each id occurrence's index into them, and each example's
// offsets. The trainer, the evaluator and the online scorer gather batches
// through it, so they look up the same rows for the same examples.
// Reused from batch to batch (its buffers keep their capacity).
// Thread-compatible.
//
//   batch.Collect(block, 0, block.size(), tables);
//   SS_RETURN_IF_ERROR(store->Lookup(batch.rows));
//   batch.Bind(inputs);  // then Dlrm::Step
#ifndef SHADOWSYNC_MODEL_SPARSE_BATCH_H_
#define SHADOWSYNC_MODEL_SPARSE_BATCH_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/example.h"
#include "model/dlrm.h"
#include "model/embedding_table.h"

namespace shadowsync::model {

class SparseBatch {
 public:
  explicit SparseBatch(int num_tables);

  // Gathers examples [begin, end) of `block`, one table per entry of
  // `tables`. The rows' values are left for EmbeddingStore::Lookup(rows()).
  void Collect(const ExampleBlock& block, int64_t begin, int64_t end,
               std::span<const EmbeddingTableConfig> tables);
  // Unique rows per table: the ids Collect found, and their values once
  // looked up.
  std::vector<TableRows>& rows() { return rows_; }
  const std::vector<TableRows>& rows() const { return rows_; }
  // One SparseInput per table over the rows' values, into `inputs`; valid
  // until the next Collect.
  void Bind(std::span<SparseInput> inputs) const;

 private:
  std::vector<absl::flat_hash_map<uint64_t, int32_t>> dedupe_;  // row -> unique index
  std::vector<std::vector<int32_t>> row_index_, offsets_;
  std::vector<TableRows> rows_;
};

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_MODEL_SPARSE_BATCH_H_
