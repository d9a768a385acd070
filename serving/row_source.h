// Where a served model's embedding rows come from: all in RAM (RowTable), or
// an on-disk store behind a RAM cache for tables larger than memory
// (DiskRows, `serve --cache-bytes`). Built by one thread (Put, Erase, then
// Seal), then read by every scoring thread at once.
#ifndef SHADOWSYNC_SERVING_ROW_SOURCE_H_
#define SHADOWSYNC_SERVING_ROW_SOURCE_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/embedding_table.h"

namespace shadowsync::serving {

// Where a lookup found its rows (serve's shadowsync_serve_rows_total).
struct RowCounts {
  int64_t memory = 0;   // RowTable: every stored row is in RAM.
  int64_t cache = 0;    // DiskRows: in its RAM cache.
  int64_t disk = 0;     // DiskRows: read from the on-disk store.
  int64_t initial = 0;  // Not stored: the row's initial value.
};

class RowSource {
 public:
  virtual ~RowSource() = default;

  // Building. Stores or replaces a row (dim values).
  virtual absl::Status Put(uint32_t table, uint64_t id, std::span<const float> values) = 0;
  // Forgets a row if stored: it reads as its initial value again.
  virtual absl::Status Erase(uint32_t table, uint64_t id) = 0;
  // Building is over; reads may start.
  virtual absl::Status Seal() = 0;

  // Reading, thread-safe. Fills rows[t].values for rows[t].ids as
  // EmbeddingStore::Lookup does, adding to `counts`. REQUIRES: rows.size()
  // is the number of tables.
  virtual absl::Status Lookup(std::span<model::TableRows> rows, RowCounts* counts) const = 0;
  virtual absl::StatusOr<bool> Contains(uint32_t table, uint64_t id) const = 0;
  virtual int64_t num_rows() const = 0;
  // RAM the rows take (for DiskRows, its cache and index).
  virtual int64_t memory_bytes() const = 0;
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_ROW_SOURCE_H_
