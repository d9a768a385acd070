// The embedding rows a served model reads: per table an open-addressed hash
// from row id to the row's values, which lie in chunks of kChunkRows rows
// (no optimizer state, no per-row allocation, no copy as the table grows). Built once by one
// thread, then only read: lookups take no lock, so every scoring thread reads it at once.
//
//   RowTable rows(info.embeddings);
//   rows.Put(table, id, values);            // building
//   rows.Lookup(batch.rows());              // serving, from any thread
//
// Thread-safe for concurrent const calls once building is over; Put and
// Erase need the table to themselves.
#ifndef SHADOWSYNC_SERVING_ROW_TABLE_H_
#define SHADOWSYNC_SERVING_ROW_TABLE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/embedding_table.h"

namespace shadowsync::serving {

class RowTable {
 public:
  // `options`' tables, dim and seed (rows not stored read as their initial
  // values); its optimizer is not used.
  explicit RowTable(model::LocalStoreOptions options);

  // Stores or replaces a row (dim values).
  void Put(uint32_t table, uint64_t id, std::span<const float> values);
  // Forgets a row if stored: it reads as its initial value again.
  void Erase(uint32_t table, uint64_t id);

  // The row's dim values, or null if not stored.
  const float* Find(uint32_t table, uint64_t id) const;
  bool Contains(uint32_t table, uint64_t id) const { return Find(table, id) != nullptr; }
  // Fills rows[t].values for rows[t].ids as EmbeddingStore::Lookup does.
  // REQUIRES: rows.size() == the number of tables.
  void Lookup(std::span<model::TableRows> rows) const;

  int64_t num_rows() const;
  // The values, index and free lists held.
  int64_t bytes() const;

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
