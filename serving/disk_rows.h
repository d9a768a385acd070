// A served model's embedding rows in an on-disk store (RocksDB, built from
// the export when the model loads) behind a RAM cache of a fixed size, for
// tables larger than memory (`serve --cache-bytes`). The cache is CLOCK
// (second chance) over fixed slots in 64 shards, each behind its own lock;
// a miss reads the store, whose index and Bloom filters stay in RAM, so a
// row that was never stored costs no disk read.
//
//   SS_ASSIGN_OR_RETURN(auto rows, DiskRows::Create(info.embeddings, "/var/tmp", 1 << 30));
//
// Thread-safe as RowSource says.
#ifndef SHADOWSYNC_SERVING_DISK_ROWS_H_
#define SHADOWSYNC_SERVING_DISK_ROWS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "model/embedding_table.h"
#include "serving/row_source.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace shadowsync::serving {

class DiskRows final : public RowSource {
 public:
  // A new, empty store in a fresh directory under `parent_dir` (created if
  // missing), which is deleted with this object, and a cache of about
  // `cache_bytes` of rows (0: none). Unavailable naming the directory if it
  // cannot be made or opened.
  static absl::StatusOr<std::unique_ptr<DiskRows>> Create(model::LocalStoreOptions options,
                                                          const std::string& parent_dir,
                                                          int64_t cache_bytes);
  ~DiskRows() override;

  absl::Status Put(uint32_t table, uint64_t id, std::span<const float> values) override;
  absl::Status Erase(uint32_t table, uint64_t id) override;
  // Writes what is buffered and compacts the store, so each read probes one
  // sorted run.
  absl::Status Seal() override;
  absl::Status Lookup(std::span<model::TableRows> rows, RowCounts* counts) const override;
  absl::StatusOr<bool> Contains(uint32_t table, uint64_t id) const override;
  int64_t num_rows() const override { return num_rows_; }
  int64_t memory_bytes() const override;

  const std::string& dir() const { return dir_; }
  // Rows the cache holds at most.
  int64_t cache_rows() const;

 private:
  static constexpr int kShards = 64;
  using Key = std::pair<uint32_t, uint64_t>;
  struct Shard {
    mutable Mutex mu;
    absl::flat_hash_map<Key, uint32_t> index ABSL_GUARDED_BY(mu);  // -> slot
    std::vector<Key> keys ABSL_GUARDED_BY(mu);                     // Of the used slots.
    std::vector<float> values ABSL_GUARDED_BY(mu);                 // dim per slot.
    std::vector<uint8_t> referenced ABSL_GUARDED_BY(mu);           // CLOCK bits.
    size_t hand ABSL_GUARDED_BY(mu) = 0;
    size_t capacity = 0;  // Slots; fixed at creation.
  };

  DiskRows(model::LocalStoreOptions options, std::string dir, std::unique_ptr<rocksdb::DB> db,
           int64_t cache_bytes);
  Shard& ShardOf(uint32_t table, uint64_t id) const;
  // Copies the cached row into `out`; false if not cached.
  bool FromCache(const Key& key, float* out) const;
  void Cache(const Key& key, const float* row) const;
  // Reads the row from the store into `out`; false if not stored.
  absl::StatusOr<bool> FromStore(const Key& key, float* out) const;
  absl::Status FlushBatch();

  const model::LocalStoreOptions options_;
  const size_t dim_;
  const std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<rocksdb::WriteBatch> batch_;  // Building only.
  int64_t num_rows_ = 0;                        // Set by Seal.
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_DISK_ROWS_H_
