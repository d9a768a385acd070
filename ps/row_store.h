// The parameter server's embedding storage (docs/ps-storage.md): one RocksDB with a
// byte-bounded, sharded RAM cache of hot rows in front, the sparse optimizer
// applied in place, admission and eviction, and slot ownership. Knows nothing
// of gRPC: ps_service.h adapts RPCs to it. A slot is one contiguous key range
// (export = range scan, drop = DeleteRange). With a cache, pushes are written
// back through a redo log; either way every acknowledged push survives a kill
// of the process. docs/ps-storage.md has the layout and the tuning,
// docs/durability.md the promise.
// Thread-safe: any number of threads may call any method concurrently.
// Writers (Push, ImportRows, DropSlots, EvictNow, checkpoints) run one at a
// time; lookups run concurrently with each other and with a writer.
#ifndef SHADOWSYNC_PS_ROW_STORE_H_
#define SHADOWSYNC_PS_ROW_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/hash.h"
#include "model/embedding_table.h"
#include "model/optimizer.h"
#include "ps/change_log.h"
#include "ps/client/wrong_owner.h"

namespace shadowsync::ps {

struct RowStoreOptions {
  std::string db_path;                              // RocksDB directory; created if missing.
  int dim = 16;                                     // Embedding width.
  std::vector<model::EmbeddingTableConfig> tables;  // Sets each table's init scale.
  model::OptimizerConfig optimizer;                 // Sparse optimizer, applied on push.
  uint64_t seed = 1;                                // Row initialisation seed.
  uint32_t num_slots = 4096;                        // S in slot = H(table, id) mod S.
  int64_t cache_bytes = 256 << 20;                  // RAM cache budget. 0 disables the cache.
  int64_t block_cache_bytes = 64 << 20;             // RocksDB block cache (SST blocks), bytes.
  // Admission: a row not yet stored gets storage only once pushed
  // admission_min_count times (counted in a bounded sketch), and then with
  // admission_probability. Not-yet-admitted rows read as their initial value.
  // A rejected push of such a row is dropped (counted, not an error). The
  // count is a count-min sketch (4 x 2^18 16-bit counters, halved every 2^21
  // counts), so it may over-count, never under-count; min_count <= 65535.
  // The probability draw is a deterministic sequence seeded by `seed`.
  int64_t admission_min_count = 1;
  double admission_probability = 1.0;
  // Eviction: rows not accessed for `ttl` are deleted (0 = never); beyond
  // max_rows stored rows the least recently used go first (0 = no cap).
  // Both act in EvictNow() only. With either set, the store keeps a
  // last-access time per stored row in RAM (30-60 bytes a row, outside
  // cache_bytes); after a restart every row counts as accessed at Open.
  absl::Duration ttl = absl::ZeroDuration();
  int64_t max_rows = 0;
  // Durability of acknowledged writes; see docs/durability.md. true: each
  // is fsynced before it returns (its redo-log record, or with no cache its
  // RocksDB WAL record), so it also survives a machine crash.
  bool sync_writes = false;
  // Write-back checkpoints, run by a background thread once requests have
  // logged checkpoint_log_bytes or checkpoint_interval has passed: rows last
  // changed before the newest log go to RocksDB, the others are re-logged,
  // and the old logs are deleted. What a crash leaves to replay is at most
  // about checkpoint_log_bytes plus the cache (docs/ps-storage.md measures
  // 228 MiB replayed in 1.7 s).
  int64_t checkpoint_log_bytes = 256 << 20;
  absl::Duration checkpoint_interval = absl::Minutes(1);
  // Delta exports: at most this many distinct changed keys are remembered
  // between two exports (ps/change_log.h, ~40 bytes each); past it the next
  // export is a full one.
  int64_t change_log_max_keys = 1 << 23;
  // Time source for TTL; tests inject a fake. Null = the real clock.
  std::function<absl::Time()> now;
  // Tests only: called by a flush of dirty rows running alongside pushes,
  // between copying a shard's rows and writing them to RocksDB.
  std::function<void()> TEST_flush_hook;
};

// Counters for Stats and metrics, since Open. cache_hits/misses count row
// probes by lookups and pushes; push_rows counts distinct rows per push
// (after summing repeated ids); admissions counts rows given storage by a
// push, admission_rejects pushes of unstored rows the filter dropped;
// evictions counts rows deleted by EvictNow.
struct RowStoreStats {
  int64_t rows_stored = 0;
  int64_t cached_rows = 0;
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  int64_t lookup_rows = 0;
  int64_t push_rows = 0;
  int64_t admissions = 0;
  int64_t admission_rejects = 0;
  int64_t evictions = 0;
  uint32_t slots_owned = 0;
  uint64_t epoch = 0;
  int64_t redo_log_bytes = 0;  // in the current redo log
  int64_t checkpoints = 0;     // completed by the background thread
};

// A stored row as exported/imported for resharding: dim values then state.
struct StoredRow {
  uint32_t table = 0;
  uint64_t id = 0;
  std::vector<float> values;
};

// Rows packed for a bulk import (RowStore::ImportRowBlock): row i is
// (tables[i], ids[i]) with its dim values then optimizer state at
// values[i * row_floats, (i + 1) * row_floats). One allocation per field
// instead of one per row.
struct RowBlock {
  std::vector<uint32_t> tables;
  std::vector<uint64_t> ids;
  std::vector<float> values;

  size_t size() const { return ids.size(); }
  void Clear() {
    tables.clear();
    ids.clear();
    values.clear();
  }
};

// Puts `rows` in RocksDB key order (slot = H(table, id) mod num_slots, then
// table, then id), which ImportRowBlock requires; rows already in it (a
// resharder's or exporter's stream) cost one pass. InvalidArgument
// "(table 3, id 17) appears twice" for a repeated key; `rows` is then in
// key order but still holds both.
absl::Status SortRowBlock(uint32_t num_slots, RowBlock* rows);

// RowKeyHash and RowValueHash (common/hash.h) are the per-row hashes behind
// RowStore::Checksums.

// Typical use (the service owns one):
//   RowStoreOptions o{.db_path = "/data/ps0", .tables = tables};
//   SS_ASSIGN_OR_RETURN(std::unique_ptr<RowStore> store, RowStore::Open(o));
//   SS_RETURN_IF_ERROR(store->SetOwnership(map.epoch(), owned_by_me));
//   SS_RETURN_IF_ERROR(store->Lookup(rows));   // rows[t].ids filled in
//   SS_RETURN_IF_ERROR(store->Push(grads));    // durable when OK
class RowStore {
 public:
  // Opens or creates the database; a reopened store serves the rows it had
  // and its ownership. A new database owns every slot at epoch 0, so a lone
  // server works without a shard map. InvalidArgument names a bad option;
  // FailedPrecondition if the database was created with another dim,
  // optimizer or num_slots; other errors name db_path.
  static absl::StatusOr<std::unique_ptr<RowStore>> Open(RowStoreOptions options);
  // Restores a Checkpoint() directory into `options.db_path` (which must not
  // exist: AlreadyExists) and opens it. SST files are hard-linked when the
  // file system allows, everything else copied; the checkpoint stays usable.
  static absl::StatusOr<std::unique_ptr<RowStore>> RestoreCheckpoint(const std::string& checkpoint,
                                                                     RowStoreOptions options);
  virtual ~RowStore() = default;

  // Ownership: slots this store serves, by epoch. `owned` has num_slots
  // entries. Requests arriving after this returns see the new set; a request
  // in flight finishes against the set it started with. Ownership is stored
  // in the database (synced) and survives restarts. InvalidArgument if the
  // epoch is older than the current one or the size is wrong; the same epoch
  // again is accepted (a retried call). Waits for in-flight requests, and
  // new requests queue behind it, so it cannot starve.
  virtual absl::Status SetOwnership(uint64_t epoch, std::vector<bool> owned) = 0;
  virtual uint64_t epoch() const = 0;

  // Fills rows[t].values (ids.size() * dim) for every table; rows[t] is
  // table t, and rows.size() may be below the number of tables. Unknown
  // table (InvalidArgument "table 30: unknown (store has 26 tables)"), or any
  // id in an unowned slot (WrongOwnerError): an error and nothing read.
  // Empty requests are fine.
  virtual absl::Status Lookup(std::span<model::TableRows> rows) = 0;
  // Sums repeated ids, applies the optimizer, and persists (see durability)
  // before returning. All-or-nothing: on any error nothing is applied.
  // InvalidArgument for an unknown table, "tables[1]: 31 values for 2 ids of
  // dim 16", or a non-finite gradient; WrongOwnerError for the first id of an
  // unowned slot. Empty requests are fine (nothing written).
  virtual absl::Status Push(std::span<const model::TableRows> grads) = 0;

  // Resharding. Export visits every stored row of `slots` (each slot once,
  // ascending, rows in key order) from a consistent snapshot (dirty cached
  // rows are written to RocksDB first), stopping at the
  // visitor's first error; Import writes rows (replacing any with the same
  // key; values = dim + optimizer state floats) in one atomic batch per
  // call; DropSlots deletes every row of `slots` and returns how many. None
  // of them checks ownership (resharding moves rows of unowned slots).
  // Slots >= num_slots, unknown tables or wrong value sizes: InvalidArgument.
  virtual absl::Status ExportSlots(
      const std::vector<uint32_t>& slots,
      const std::function<absl::Status(uint32_t slot, const StoredRow&)>& visit) = 0;
  // The same consistent snapshot, read a slot at a time: a long stream (a
  // model export) sees one moment of the store however long it reads, while
  // pushes go on. Must not outlive the store. Not thread-safe: one reader
  // (ExportSlot reuses one row).
  class Snapshot {
   public:
    virtual ~Snapshot() = default;
    // Every row of `slot` (< num_slots, else InvalidArgument) in key order.
    virtual absl::Status ExportSlot(uint32_t slot,
                                    const std::function<absl::Status(const StoredRow&)>& visit) = 0;
    // The same rows without a copy: `values` is the stored value (dim then
    // optimizer state floats, little-endian binary32, not necessarily
    // aligned), valid during the call only.
    using RowBytesVisitor =
        std::function<absl::Status(uint32_t table, uint64_t id, std::string_view values)>;
    virtual absl::Status ExportSlotBytes(uint32_t slot, const RowBytesVisitor& visit) = 0;
    // One row, visited as ExportSlotBytes would; false (and no visit) if
    // the snapshot does not hold it.
    virtual absl::StatusOr<bool> ReadRowBytes(uint32_t table, uint64_t id,
                                              const RowBytesVisitor& visit) = 0;
  };
  virtual absl::StatusOr<std::unique_ptr<Snapshot>> TakeSnapshot() = 0;
  // TakeSnapshot for a delta export: also closes the change log's generation
  // at the snapshot (ChangeLog::Close, starting to record changes if it was
  // not), so `*cursor` names exactly the rows the snapshot holds; with
  // `since`, `*changed` lists the rows pushed, imported or evicted after it.
  // ChangeLog::Close's errors.
  virtual absl::StatusOr<std::unique_ptr<Snapshot>> TakeChangeSnapshot(
      const ChangeCursor* since, ChangeCursor* cursor, std::vector<ChangedRow>* changed) = 0;
  // Writes the dirty cached rows to RocksDB while pushes go on, holding no
  // lock a push needs for longer than a copy of one cache shard's rows: the
  // bulk of a snapshot's (or checkpoint's) write-back, which a caller may
  // run at low priority. A TakeSnapshot right after has only the rows pushed
  // meanwhile left to write under the lock that stops pushes.
  virtual absl::Status WriteBackDirtyRows() = 0;
  // A repeated key within one call: the last occurrence is stored.
  virtual absl::Status ImportRows(std::span<const StoredRow> rows) = 0;
  // The bulk form: rows in key order with no key twice (SortRowBlock), else
  // InvalidArgument and nothing written. Rows go to RocksDB as one sorted
  // batch (its memtable inserts then each start where the last ended);
  // slots known to hold no row skip the read that counts new rows; with a
  // cache, the batch skips RocksDB's WAL, the redo log record making it
  // durable as it does a push (a checkpoint flushes the memtable before it
  // deletes that log).
  virtual absl::Status ImportRowBlock(const RowBlock& rows) = 0;
  virtual absl::StatusOr<int64_t> DropSlots(const std::vector<uint32_t>& slots) = 0;

  // A RocksDB checkpoint (hard links) at `path`, which must not exist
  // (AlreadyExists). Returns the rows it holds. Writes the dirty cached rows
  // to RocksDB first; pushes wait while RocksDB flushes its memtable.
  virtual absl::StatusOr<int64_t> Checkpoint(const std::string& path) = 0;

  // Order-independent checksums over every stored row: of the keys only, and
  // of keys and values. Equal before and after a correct resharding.
  // keys = sum of RowKeyHash, values = sum of RowValueHash (mod 2^64), over
  // one consistent snapshot. O(rows stored), and writes the dirty cached
  // rows to RocksDB first: not for every metrics scrape.
  struct Checksums {
    int64_t rows = 0;
    uint64_t keys = 0;
    uint64_t values = 0;
  };
  virtual absl::StatusOr<Checksums> ComputeChecksums() = 0;

  // Runs TTL and row-cap eviction once (also run periodically by the server):
  // deletes rows whose last access is `ttl` or more ago, then, while more
  // than max_rows remain, the least recently accessed. Returns rows deleted.
  // O(rows stored); pushes wait meanwhile.
  virtual absl::StatusOr<int64_t> EvictNow() = 0;

  virtual RowStoreStats stats() const = 0;
  virtual const RowStoreOptions& options() const = 0;
  // OK, or the storage failure after which the store refuses every write
  // until a restart replays its redo log. Cheap; never waits for a writer.
  virtual absl::Status health() const = 0;
};

}  // namespace shadowsync::ps

#endif  // SHADOWSYNC_PS_ROW_STORE_H_
