// RowStoreImpl, the RowStore of ps/row_store.h, and the helpers its parts
// share. Internal to the row store: its members are defined by concern in
// row_store.cc (open, metadata, shutdown, ownership, stats), row_store_log.cc
// (redo log and recovery), row_store_cache.cc (lookup, push, eviction),
// row_store_checkpoint.cc (checkpoints and flushes of dirty rows) and
// row_store_slots.cc (snapshots, slot export, import, drop, checksums).
// Thread-safe as RowStore promises; every member says which lock guards it
// (ABSL_GUARDED_BY), and the lock order is at the mutexes below.
#ifndef SHADOWSYNC_PS_ROW_STORE_INTERNAL_H_
#define SHADOWSYNC_PS_ROW_STORE_INTERNAL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/embedding_table.h"
#include "model/optimizer.h"
#include "ps/admission.h"
#include "ps/cache_shard.h"
#include "ps/redo_log.h"
#include "ps/row_codec.h"
#include "ps/row_store.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/snapshot.h"
#include "rocksdb/status.h"
#include "rocksdb/write_batch.h"

namespace shadowsync::ps::internal {

namespace fs = std::filesystem;

// Debian's RocksDB is not built with ThreadSanitizer, so TSAN cannot see how
// RocksDB's write group hands one thread's batch to the thread that writes
// the group (atomics in uninstrumented code), and reports a race on the
// batch. Under TSAN only, the store serialises its RocksDB writes itself.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kSerializeDbWrites = true;
#else
inline constexpr bool kSerializeDbWrites = false;
#endif

// Metadata keys: 0xFFFFFFFF then a name. Row keys are exactly 16 bytes and
// start with a slot < kMaxSlots, so neither the length nor the prefix can
// collide, and every row scan bounded by [slot 0, slot num_slots) skips them.
inline constexpr char kFormatKey[] =
    "\xff\xff\xff\xff"
    "format";
inline constexpr char kOwnershipKey[] =
    "\xff\xff\xff\xff"
    "ownership";
inline constexpr char kRowCountKey[] =
    "\xff\xff\xff\xff"
    "row_count";
inline constexpr uint32_t kFormatVersion = 1;

template <size_t N>
rocksdb::Slice MetaKey(const char (&key)[N]) {
  return rocksdb::Slice(key, N - 1);
}

// `s` as an absl::Status whose message starts with `what`: NotFound,
// DataLoss (corruption), InvalidArgument, Unavailable (I/O, busy, timeouts)
// or Internal.
absl::Status FromRocks(const rocksdb::Status& s, const std::string& what);

// Finds repeated (table, id) pairs within one request without allocating:
// open addressing over a table that only grows, with a generation stamp so
// Reset() is O(1). Not thread-safe: per-request scratch.
class DedupIndex {
 public:
  void Reset(size_t max_entries) {
    const size_t want = std::bit_ceil(std::max<size_t>(16, 2 * max_entries));
    if (want > slots_.size()) {
      slots_.assign(want, Slot{});
      generation_ = 0;
    }
    mask_ = slots_.size() - 1;
    if (++generation_ == 0) {  // Wrapped: stale stamps could match again.
      std::fill(slots_.begin(), slots_.end(), Slot{});
      generation_ = 1;
    }
  }
  // The value stored for (table, id), inserting `value` if absent.
  uint32_t FindOrInsert(uint64_t hash, uint32_t table, uint64_t id, uint32_t value) {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.generation != generation_) {
        s = Slot{id, table, generation_, value};
        return value;
      }
      if (s.id == id && s.table == table) return s.value;
    }
  }

 private:
  struct Slot {
    uint64_t id = 0;
    uint32_t table = 0;
    uint32_t generation = 0;
    uint32_t value = 0;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  uint32_t generation_ = 0;
};

// Batched RocksDB point reads; buffers persist across calls so the hot path
// does not allocate. Not thread-safe: per-thread or per-writer scratch.
struct MultiGetBuffers {
  std::vector<char> key_bytes;
  std::vector<rocksdb::Slice> keys;
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;

  char* Prepare(size_t n) {
    key_bytes.resize(n * kKeySize);
    keys.resize(n);
    if (values.size() < n) values.resize(n);
    statuses.resize(n);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = rocksdb::Slice(key_bytes.data() + i * kKeySize, kKeySize);
    }
    return key_bytes.data();
  }
  void Run(rocksdb::DB* db, const rocksdb::ReadOptions& options, size_t n) {
    db->MultiGet(options, db->DefaultColumnFamily(), n, keys.data(), values.data(),
                 statuses.data());
  }
  // Releases pinned blocks; keeps the buffers.
  void Release(size_t n) {
    for (size_t i = 0; i < n; ++i) values[i].Reset();
  }
};

// An increment of `seq` to odd on entry and back to even on exit, around any
// change of rows. Lookups fill the cache only if `seq` was even and
// unchanged from before their read to their fill, so a fill never installs a
// value some writer has replaced since.
class WriterSection {
 public:
  explicit WriterSection(std::atomic<uint64_t>& seq) : seq_(seq) {
    seq_.fetch_add(1, std::memory_order_acq_rel);
  }
  ~WriterSection() { seq_.fetch_add(1, std::memory_order_acq_rel); }
  WriterSection(const WriterSection&) = delete;
  WriterSection& operator=(const WriterSection&) = delete;

 private:
  std::atomic<uint64_t>& seq_;
};

struct SnapshotHolder {
  rocksdb::DB* db = nullptr;
  const rocksdb::Snapshot* snapshot = nullptr;
  SnapshotHolder() = default;
  SnapshotHolder(const SnapshotHolder&) = delete;
  SnapshotHolder& operator=(const SnapshotHolder&) = delete;
  ~SnapshotHolder() {
    if (snapshot != nullptr) db->ReleaseSnapshot(snapshot);
  }
};

class RowStoreImpl final : public RowStore {
 public:
  RowStoreImpl(RowStoreOptions options, std::unique_ptr<rocksdb::DB> db)
      : options_(std::move(options)),
        dim_(options_.dim),
        row_floats_(options_.dim * (1 + model::StateFloatsPerParam(options_.optimizer.kind))),
        row_bytes_(sizeof(float) * row_floats_),
        track_access_(options_.ttl > absl::ZeroDuration() || options_.max_rows > 0),
        filter_min_count_(options_.admission_min_count > 1),
        filter_probability_(options_.admission_probability < 1.0),
        cache_rows_(options_.cache_bytes /
                    (static_cast<int64_t>(row_bytes_) + kCacheOverheadPerRow)),
        write_back_(cache_rows_ > 0),
        redo_dir_(fs::path(options_.db_path) / "redo"),
        ingest_dir_(fs::path(options_.db_path) / "ingest"),
        db_(std::move(db)),
        shards_(new Shard[kNumShards]),
        changes_(ChangeLog::NewIncarnation(), options_.num_slots, options_.change_log_max_keys),
        sketch_(filter_min_count_ ? std::make_unique<CountMinSketch>() : nullptr) {
    for (int s = 0; s < kNumShards; ++s) {
      shards_[s].Init(
          static_cast<uint32_t>(cache_rows_ / kNumShards + (s < cache_rows_ % kNumShards)),
          row_floats_);
    }
    // Write-back: the redo log carries sync_writes; RocksDB's WAL is synced
    // before any log it makes redundant is deleted.
    write_options_.sync = options_.sync_writes && !write_back_;
    // Imports in write-back mode: the redo log carries them (see
    // ImportRowBlock), so RocksDB's WAL would be a second copy.
    import_write_options_.disableWAL = true;
  }

  ~RowStoreImpl() override;

  // Reads the metadata, replays redo logs, starts the checkpointer.
  absl::Status Start();

  absl::Status SetOwnership(uint64_t epoch, std::vector<bool> owned) override;
  uint64_t epoch() const override { return epoch_published_.load(std::memory_order_acquire); }
  absl::Status Lookup(std::span<model::TableRows> rows) override;
  absl::Status Push(std::span<const model::TableRows> grads) override;
  absl::Status ExportSlots(
      const std::vector<uint32_t>& slots,
      const std::function<absl::Status(uint32_t slot, const StoredRow&)>& visit) override;
  absl::StatusOr<std::unique_ptr<Snapshot>> TakeSnapshot() override;
  absl::StatusOr<std::unique_ptr<Snapshot>> TakeChangeSnapshot(
      const ChangeCursor* since, ChangeCursor* cursor, std::vector<ChangedRow>* changed) override;
  absl::Status WriteBackDirtyRows() override ABSL_LOCKS_EXCLUDED(write_mu_);
  absl::Status ImportRows(std::span<const StoredRow> rows) override;
  absl::Status ImportRowBlock(const RowBlock& rows) override;
  absl::StatusOr<int64_t> DropSlots(const std::vector<uint32_t>& slots) override;
  absl::StatusOr<int64_t> Checkpoint(const std::string& path) override;
  absl::StatusOr<Checksums> ComputeChecksums() override;
  absl::StatusOr<int64_t> EvictNow() override;
  RowStoreStats stats() const override;
  const RowStoreOptions& options() const override { return options_; }
  absl::Status health() const override ABSL_LOCKS_EXCLUDED(health_mu_) {
    MutexLock lock(&health_mu_);
    return health_;
  }

 private:
  // What the store knows of a slot's rows (slot_state_). Every row of an
  // unknown slot predates Open, so RocksDB has a key for it.
  static constexpr uint8_t kSlotUnknown = 0;
  static constexpr uint8_t kSlotEmpty = 1;  // no row, cached or stored
  static constexpr uint8_t kSlotMayHaveRows = 2;

  // Marker values of PushScratch::pos for rows not in the cache.
  static constexpr int64_t kMissStored = -1;    // read from RocksDB
  static constexpr int64_t kMissNew = -2;       // not stored; admitted now
  static constexpr int64_t kMissRejected = -3;  // not stored; admission said no

  struct UniqueRow {
    uint64_t hash;
    uint64_t id;
    uint32_t table;
    uint32_t slot;
  };
  // Push's buffers, reused across pushes (writers are serialised).
  struct PushScratch {
    DedupIndex dedup;
    std::vector<UniqueRow> unique;
    std::vector<float> grad;    // unique.size() * dim, summed
    std::vector<float> next;    // unique.size() * row_floats, the rows after the update
    std::vector<int64_t> pos;   // cache position of a hit, or a kMiss* marker
    std::vector<int64_t> slot;  // for misses: the cache position claimed, or -1
    std::vector<uint32_t> misses;
    std::vector<uint32_t> key_order;
    std::vector<char> evict_keys;  // rows UpdateCacheLocked writes to RocksDB: keys
    std::vector<char> evict_rows;  // and values
    uint32_t new_size[kNumShards];
    ShardOrder shards;
    MultiGetBuffers get;
    char key[kKeySize];
  };

  int64_t NowMs() const { return absl::ToUnixMillis(options_.now ? options_.now() : absl::Now()); }
  // Every RocksDB write of a running store goes through these (see
  // kSerializeDbWrites).
  rocksdb::Status DbWrite(const rocksdb::WriteOptions& options, rocksdb::WriteBatch* batch) {
    if (!kSerializeDbWrites) return db_->Write(options, batch);
    MutexLock l(&db_write_mu_);
    return db_->Write(options, batch);
  }
  rocksdb::Status DbPut(const rocksdb::WriteOptions& options, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) {
    rocksdb::WriteBatch batch;
    batch.Put(key, value).PermitUncheckedError();  // fails only past 4 GiB
    return DbWrite(options, &batch);
  }
  float* NextRow(PushScratch& sc, uint32_t u) const {
    return sc.next.data() + size_t{u} * row_floats_;
  }
  std::string RowCountValue(int64_t rows) const { return EncodeFixed(rows); }
  std::string Describe(uint32_t table, uint64_t id) const {
    return absl::StrCat("row (table ", table, ", id ", id, ")");
  }
  void KeyOf(const RowKey& key, char* out) const {
    EncodeRowKey(SlotOf(key.table, key.id, options_.num_slots), key.table, key.id, out);
  }
  // InvalidArgument if a request names tables beyond the configured ones.
  template <typename Rows>
  absl::Status CheckTables(std::span<Rows> rows) const;
  absl::Status ValidateSlots(const std::vector<uint32_t>& slots,
                             std::vector<uint32_t>* sorted) const;
  // Blocks while SetOwnership is pending, so it cannot starve.
  void PassTurnstile() { MutexLock l(&turnstile_); }
  absl::Status ReadStoredRow(const rocksdb::PinnableSlice& value, const rocksdb::Status& status,
                             uint32_t table, uint64_t id, bool* found) const;
  // Visits the key of every stored row in RocksDB.
  absl::Status ScanKeys(const std::function<void(const RowKey&)>& visit) const;

  bool Admit(uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Writes batch_ to RocksDB; a failure fails the store (see failure_).
  absl::Status WriteBatchLocked(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    return WriteBatchLocked(what, write_options_);
  }
  absl::Status WriteBatchLocked(const char* what, const rocksdb::WriteOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Whether RocksDB holds a row of a slot in [begin, end).
  absl::StatusOr<bool> AnyRowInDbLocked(uint32_t begin, uint32_t end) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // How many of `rows` (in key order, `keys` their encoded keys) are stored
  // nowhere yet; marks their slots as holding rows.
  absl::StatusOr<int64_t> CountNewRowsLocked(const RowBlock& rows, const char* keys,
                                             const uint32_t* slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Writes `rows` (in key order, `keys` their encoded keys) into an SST file
  // and has RocksDB ingest it; the store then holds `rows_after` rows.
  absl::Status IngestLocked(const RowBlock& rows, const char* keys, int64_t rows_after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Appends a finished record to the redo log (write-back mode only);
  // `carried` for rows a checkpoint re-logs.
  absl::Status AppendLocked(std::string_view record, bool carried = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status RotateLogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status SyncLogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Re-logs the rows of shard `s` dirty in generations <= `limit` into the
  // current log and marks them dirty in it.
  absl::Status CarryForwardLocked(int s, uint64_t limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Push's last step in write-back mode: claims cache positions for the
  // misses, writes the dirty rows they replace to RocksDB, then installs the
  // new rows.
  absl::Status UpdateCacheLocked(PushScratch& sc, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Writes the rows of shard `s` dirty in generations <= `limit` to RocksDB,
  // with pushes stopped.
  absl::Status FlushShardLocked(int s, uint64_t limit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_, write_mu_);
  absl::Status FlushAllLocked(uint64_t limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_, write_mu_) {
    for (int s = 0; s < kNumShards; ++s) SS_RETURN_IF_ERROR(FlushShardLocked(s, limit));
    return absl::OkStatus();
  }
  // As FlushAllLocked, but while pushes run: each shard's dirty rows are
  // copied and marked `flushing` under its lock, then written without any
  // lock pushes need. Rows a push has pinned are skipped (a later
  // FlushAllLocked catches them). Also flushes the rows in generations <=
  // `carried_limit` that checkpoints re-logged kMaxCarries times in a row.
  absl::Status FlushAllConcurrently(uint64_t limit, uint64_t carried_limit = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_) ABSL_LOCKS_EXCLUDED(write_mu_);
  // A RocksDB snapshot holding every row: dirty rows are flushed first.
  // `at_snapshot` runs with writes stopped, right after it is taken.
  absl::Status ConsistentSnapshot(SnapshotHolder* holder,
                                  const std::function<absl::Status()>& at_snapshot = nullptr)
      ABSL_LOCKS_EXCLUDED(write_mu_);
  // Rotates the redo log, flushes everything older, syncs RocksDB's WAL and
  // deletes the old logs.
  absl::Status RunCheckpoint() ABSL_LOCKS_EXCLUDED(write_mu_);
  void Fail(const absl::Status& status) ABSL_LOCKS_EXCLUDED(write_mu_) {
    MutexLock w(&write_mu_);
    FailLocked(status);
  }
  // Fails the store with `status` unless it has failed already.
  void FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_)
      ABSL_LOCKS_EXCLUDED(health_mu_) {
    if (!failure_.ok()) return;
    failure_ = status;
    LOG(ERROR) << "row store " << options_.db_path << " failed: " << status;
    MutexLock lock(&health_mu_);
    health_ = status;
  }
  void CheckpointLoop();
  absl::Status DeleteLogsUpTo(uint64_t generation) const;
  // Replays the redo logs left by a crash into RocksDB.
  absl::Status Recover() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Erases `key` from its shard's cache and, if `forget`, its access time.
  void Uncache(const RowKey& key, bool forget) {
    Shard& shard = shards_[ShardOf(HashId(key.table, key.id))];
    MutexLock l(&shard.mu);
    shard.Erase(key);
    if (forget) shard.last_access.erase(key);
  }

  // Constant after construction.
  const RowStoreOptions options_;
  const int dim_;
  const int row_floats_;  // dim + optimizer state floats
  const size_t row_bytes_;
  const bool track_access_;
  const bool filter_min_count_;
  const bool filter_probability_;
  const int64_t cache_rows_;
  // With a cache, rows are written back (redo log + checkpoints); without,
  // every push is written through to RocksDB.
  const bool write_back_;
  const fs::path redo_dir_;
  const fs::path ingest_dir_;  // SST files of imports, until RocksDB ingests them
  const std::unique_ptr<rocksdb::DB> db_;
  rocksdb::WriteOptions write_options_;
  rocksdb::WriteOptions import_write_options_;
  rocksdb::ReadOptions read_options_;

  // Has its own synchronisation.
  Mutex db_write_mu_;  // only with kSerializeDbWrites
  const std::unique_ptr<Shard[]> shards_;
  // Every writer records the keys it changes here, under write_mu_, so a
  // snapshot's cursor (closed under write_mu_) splits writes exactly.
  ChangeLog changes_;
  std::atomic<uint64_t> write_seq_{0};  // odd while a writer changes rows; see WriterSection

  // Lock order: turnstile_ (held alone, or by SetOwnership around owner_mu_),
  // owner_mu_, flush_mu_, write_mu_, then one shard's mu at a time.
  // checkpoint_mu_ is never held with another.
  Mutex turnstile_;
  mutable Mutex owner_mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(owner_mu_) = 0;
  std::vector<bool> owned_ ABSL_GUARDED_BY(owner_mu_);

  // Serialises everything that writes cached rows to RocksDB (checkpoints,
  // flushes) with ImportRows, DropSlots and EvictNow: a row's RocksDB writes
  // must land in the order the cache saw them. Pushes do not take it.
  Mutex flush_mu_;
  struct FlushScratch {
    std::vector<uint32_t> pos;
    std::vector<uint32_t> order;
    std::vector<char> keys;
    std::vector<float> rows;
  };
  FlushScratch flush_ ABSL_GUARDED_BY(flush_mu_);
  rocksdb::WriteBatch flush_batch_ ABSL_GUARDED_BY(flush_mu_);

  // Writers (Push, ImportRows, DropSlots, EvictNow, Checkpoint, flushes)
  // hold write_mu_: RocksDB and the redo log must receive a row's writes in
  // the order the cache saw them.
  Mutex write_mu_;
  // Set by a storage failure after a request was logged; every later write
  // fails with it. Restarting replays the log.
  // Set only through FailLocked.
  absl::Status failure_ ABSL_GUARDED_BY(write_mu_);
  // A copy of failure_ for health(), which must not wait behind a long write.
  mutable Mutex health_mu_ ABSL_ACQUIRED_AFTER(write_mu_);
  absl::Status health_ ABSL_GUARDED_BY(health_mu_);
  int64_t rows_stored_ ABSL_GUARDED_BY(write_mu_) = 0;
  // Per slot: kSlotUnknown, kSlotEmpty or kSlotMayHaveRows.
  std::vector<uint8_t> slot_state_ ABSL_GUARDED_BY(write_mu_);
  // The newest redo-log generation holding an import that skipped RocksDB's
  // WAL (0: none since the last memtable flush a checkpoint made).
  uint64_t unlogged_generation_ ABSL_GUARDED_BY(write_mu_) = 0;
  // Whether any redo-log record was written since Open (which replays and
  // retires every older log). Until then an import may bypass the log (see
  // IngestLocked).
  bool logged_since_open_ ABSL_GUARDED_BY(write_mu_) = false;
  uint64_t ingested_files_ ABSL_GUARDED_BY(write_mu_) = 0;
  std::unique_ptr<RedoLog> log_ ABSL_GUARDED_BY(write_mu_);
  uint64_t log_generation_ ABSL_GUARDED_BY(write_mu_) = 0;
  RecordBuilder record_ ABSL_GUARDED_BY(write_mu_);
  rocksdb::WriteBatch batch_ ABSL_GUARDED_BY(write_mu_);
  PushScratch push_ ABSL_GUARDED_BY(write_mu_);
  const std::unique_ptr<CountMinSketch> sketch_ ABSL_PT_GUARDED_BY(write_mu_);
  uint64_t admission_draws_ ABSL_GUARDED_BY(write_mu_) = 0;

  // The checkpointer thread.
  Mutex checkpoint_mu_;
  bool stopping_ ABSL_GUARDED_BY(checkpoint_mu_) = false;
  std::thread checkpointer_;

  // Counters, relaxed; mirrors of guarded state for stats() and epoch().
  std::atomic<uint64_t> epoch_published_{0};
  std::atomic<uint32_t> slots_owned_{0};
  std::atomic<int64_t> rows_stored_published_{0};
  std::atomic<int64_t> log_bytes_{0};
  // Bytes requests appended since the last rotation (not re-logged rows):
  // what triggers a checkpoint.
  std::atomic<int64_t> logged_since_rotation_{0};
  std::atomic<int64_t> checkpoints_{0};
  std::atomic<int64_t> cache_hits_{0};
  std::atomic<int64_t> cache_misses_{0};
  std::atomic<int64_t> lookup_rows_{0};
  std::atomic<int64_t> push_rows_{0};
  std::atomic<int64_t> admissions_{0};
  std::atomic<int64_t> admission_rejects_{0};
  std::atomic<int64_t> evictions_{0};
};

}  // namespace shadowsync::ps::internal

#endif  // SHADOWSYNC_PS_ROW_STORE_INTERNAL_H_
