// A served model's embedding rows all in RAM: per table an open-addressed hash
// from row id to the row's values, which lie in chunks of kChunkRows rows
// (no optimizer state, no per-row allocation, no copy as the table grows). Built once by one
// thread, then only read: lookups take no lock, so every scoring thread reads it at once.
//
//   RowTable rows(info.embeddings);
//   SS_RETURN_IF_ERROR(rows.Put(table, id, values));  // building
//   SS_RETURN_IF_ERROR(rows.Lookup(batch.rows(), &counts));  // from any thread
//
// Thread-safe as RowSource says.
#ifndef SHADOWSYNC_SERVING_ROW_TABLE_H_
#define SHADOWSYNC_SERVING_ROW_TABLE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/embedding_table.h"
#include "serving/row_source.h"

namespace shadowsync::serving {

class RowTable final : public RowSource {
 public:
  // `options`' tables, dim and seed (rows not stored read as their initial
  // values); its optimizer is not used.
  explicit RowTable(model::LocalStoreOptions options);

  // Never fail.
  absl::Status Put(uint32_t table, uint64_t id, std::span<const float> values) override;
  absl::Status Erase(uint32_t table, uint64_t id) override;
  absl::Status Seal() override { return absl::OkStatus(); }
  absl::Status Lookup(std::span<model::TableRows> rows, RowCounts* counts) const override;
  absl::StatusOr<bool> Contains(uint32_t table, uint64_t id) const override {
    return Find(table, id) != nullptr;
  }
  int64_t num_rows() const override;
  // The values, index and free lists held.
  int64_t memory_bytes() const override;

  // The row's dim values, or null if not stored.
  const float* Find(uint32_t table, uint64_t id) const;

 private:
  static constexpr int64_t kChunkRows = 4096;
  struct Slot {
    uint64_t id;
    int64_t row;  // Row `row` of Table::chunks; -1: empty.
  };
  struct Table {
    std::vector<Slot> slots;                       // A power of two, at most half full.
    std::vector<std::unique_ptr<float[]>> chunks;  // kChunkRows rows each.
    int64_t next_row = 0;                          // Rows handed out.
    std::vector<int64_t> free_rows;                // Erased rows, reused by the next Put.
    int64_t size = 0;
  };

  // The slot holding `id`, or the empty slot where it would go.
  static size_t Probe(const Table& t, uint64_t id);
  static void Grow(Table& t);
  float* Row(const Table& t, int64_t row) const {
    return t.chunks[row / kChunkRows].get() + (row % kChunkRows) * dim_;
  }

  const model::LocalStoreOptions options_;
  const size_t dim_;
  std::vector<Table> tables_;
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_ROW_TABLE_H_
