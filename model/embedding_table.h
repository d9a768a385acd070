// Embedding storage behind one interface: the trainer looks rows up and pushes
// their gradients through EmbeddingStore, whether the rows live in this
// process (LocalEmbeddingStore) or on parameter servers (the PS client).
#ifndef SHADOWSYNC_MODEL_EMBEDDING_TABLE_H_
#define SHADOWSYNC_MODEL_EMBEDDING_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "model/optimizer.h"

namespace shadowsync::model {

struct EmbeddingTableConfig {
  std::string name;
  uint64_t hash_buckets = 1'000'000;  // Rows the raw ids are hashed into.
};

// The row a raw categorical value of `table` maps to: HashId(table, raw) mod buckets.
uint64_t BucketOf(uint32_t table, uint64_t raw, uint64_t hash_buckets);

// Deterministic initial value of a row never seen before: Uniform(-s, s) with
// s = sqrt(1 / hash_buckets) (the DLRM reference's scale), drawn from
// (seed, table, id) so every process and every restart agrees.
void InitEmbeddingRow(uint64_t seed, uint32_t table, uint64_t id, uint64_t hash_buckets,
                      std::span<float> row);

// One table's part of a request: unique row ids and their values (lookup
// output, or the summed gradients to push), ids.size() * dim floats.
struct TableRows {
  std::vector<uint64_t> ids;
  std::vector<float> values;
};

// Thread-safe: any number of threads may call Lookup and Push concurrently.
class EmbeddingStore {
 public:
  virtual ~EmbeddingStore() = default;
  virtual int dim() const = 0;
  virtual int num_tables() const = 0;
  // Fills rows[t].values for rows[t].ids, for every table t (rows.size() ==
  // num_tables()). Ids within a table are unique. A row never pushed reads as
  // its deterministic initial value and is not stored.
  virtual absl::Status Lookup(std::span<TableRows> rows) = 0;
  // Applies the optimizer to every listed row with its gradient. Ids within a
  // table are unique (the caller sums repeated occurrences).
  virtual absl::Status Push(std::span<const TableRows> grads) = 0;
};

struct LocalStoreOptions {
  int dim = 16;
  std::vector<EmbeddingTableConfig> tables;
  OptimizerConfig optimizer;
  uint64_t seed = 1;
};

// Embedding rows in this process's memory, created on first touch. Rows are
// read and written with relaxed atomics (Hogwild); the row index of each table
// is sharded behind Mutexes. Thread-safe as EmbeddingStore promises;
// ForEachRow alone needs the pushes to have stopped.
class LocalEmbeddingStore final : public EmbeddingStore {
 public:
  explicit LocalEmbeddingStore(LocalStoreOptions options);
  ~LocalEmbeddingStore() override;

  int dim() const override { return options_.dim; }
  int num_tables() const override { return static_cast<int>(options_.tables.size()); }
  absl::Status Lookup(std::span<TableRows> rows) override;
  absl::Status Push(std::span<const TableRows> grads) override;

  const LocalStoreOptions& options() const { return options_; }
  int64_t num_rows() const;

  // Visits every stored row as (table, id, values[dim], state[state_floats]),
  // in (table, id) order. REQUIRES: no concurrent Push.
  using RowVisitor = std::function<void(uint32_t table, uint64_t id, std::span<const float> values,
                                        std::span<const float> state)>;
  void ForEachRow(const RowVisitor& visit) const;
  // Stores a row verbatim (loading a saved model).
  void PutRow(uint32_t table, uint64_t id, std::span<const float> values,
              std::span<const float> state);
  // Forgets a row (a delta export's tombstone): it reads as its initial
  // value again. Its storage is reclaimed with the store.
  void EraseRow(uint32_t table, uint64_t id);

 private:
  static constexpr int kShards = 64;
  static constexpr int64_t kRowsPerChunk = 4096;

  // A shard maps row ids to slots in its append-only arena of chunks, so row
  // pointers stay valid while other threads insert.
  struct Shard {
    mutable Mutex mu;
    absl::flat_hash_map<uint64_t, float*> rows ABSL_GUARDED_BY(mu);
    std::vector<std::unique_ptr<float[]>> chunks ABSL_GUARDED_BY(mu);
    int64_t used_in_last_chunk ABSL_GUARDED_BY(mu) = kRowsPerChunk;
  };

  // The row's storage (dim values then state), or null if never stored.
  float* Find(uint32_t table, uint64_t id) const;
  // The row's storage, created and initialised if new.
  float* GetOrCreate(uint32_t table, uint64_t id);
  float* AllocateLocked(Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  Shard& ShardFor(uint32_t table, uint64_t id) const;

  const LocalStoreOptions options_;
  const int state_floats_;  // Per row: dim for Adagrad, 0 for SGD.
  const int row_floats_;    // dim + state_floats_.
  // One shard array per table.
  std::vector<std::unique_ptr<Shard[]>> shards_;
};

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_MODEL_EMBEDDING_TABLE_H_
