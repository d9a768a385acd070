// RowStoreImpl (ps/row_store_internal.h), whole slots: consistent snapshots
// and slot export, row import (logged, or ingested as SST files), slot drops
// and checksums; and SortRowBlock.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "ps/cache_shard.h"
#include "ps/redo_log.h"
#include "ps/row_codec.h"
#include "ps/row_store.h"
#include "ps/row_store_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/write_batch.h"

namespace shadowsync::ps::internal {
namespace {

// Reads slots from one RocksDB snapshot.
class RowSnapshotImpl final : public RowStore::Snapshot {
 public:
  RowSnapshotImpl(rocksdb::DB* db, std::string db_path, uint32_t num_slots, size_t row_bytes,
                  int row_floats)
      : db_path_(std::move(db_path)),
        num_slots_(num_slots),
        row_bytes_(row_bytes),
        row_floats_(row_floats) {
    holder_.db = db;
  }
  SnapshotHolder& holder() { return holder_; }

  absl::Status ExportSlot(uint32_t slot,
                          const std::function<absl::Status(const StoredRow&)>& visit) override {
    row_.values.resize(row_floats_);
    return ExportSlotBytes(slot, [&](uint32_t table, uint64_t id, std::string_view values) {
      row_.table = table;
      row_.id = id;
      std::memcpy(row_.values.data(), values.data(), row_bytes_);
      return visit(row_);
    });
  }

  absl::Status ExportSlotBytes(uint32_t slot, const RowBytesVisitor& visit) override {
    if (slot >= num_slots_) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", slot, ": the store has ", num_slots_, " slots"));
    }
    // One iterator for every slot, not one per slot: a server exports runs
    // of consecutive slots, and the iterator left at the start of the next
    // slot goes on without a Seek, a new iterator's allocations, or a
    // readahead buffer started over for every SST file (a slot is ~1k rows).
    if (it_ == nullptr) {
      rocksdb::ReadOptions read;
      read.snapshot = holder_.snapshot;
      read.fill_cache = false;
      // Reading ahead makes the sweep a few large reads instead of one pread
      // per 4 KB block.
      read.readahead_size = 256 << 10;
      it_.reset(holder_.db->NewIterator(read));
    }
    if (at_slot_ != slot) it_->Seek(SlotBound(slot));
    at_slot_ = kNoSlot;  // Unknown until the slot is read to its end.
    const std::string upper = SlotBound(slot + 1);
    for (; it_->Valid() && it_->key().compare(upper) < 0; it_->Next()) {
      if (it_->key().size() != kKeySize || it_->value().size() != row_bytes_) {
        return absl::DataLossError(absl::StrCat(db_path_, ": slot ", slot, " holds a ",
                                                it_->key().size(), "-byte key with a ",
                                                it_->value().size(), "-byte value"));
      }
      const RowKey key = DecodeRowKey(it_->key().data());
      SS_RETURN_IF_ERROR(
          visit(key.table, key.id, std::string_view(it_->value().data(), it_->value().size())));
    }
    SS_RETURN_IF_ERROR(
        FromRocks(it_->status(), absl::StrCat("export slot ", slot, " of ", db_path_)));
    at_slot_ = slot + 1;
    return absl::OkStatus();
  }

  absl::StatusOr<bool> ReadRowBytes(uint32_t table, uint64_t id,
                                    const RowBytesVisitor& visit) override {
    char key[kKeySize];
    EncodeRowKey(SlotOf(table, id, num_slots_), table, id, key);
    rocksdb::ReadOptions read;
    read.snapshot = holder_.snapshot;
    rocksdb::PinnableSlice value;
    const rocksdb::Status got = holder_.db->Get(read, holder_.db->DefaultColumnFamily(),
                                                rocksdb::Slice(key, kKeySize), &value);
    if (got.IsNotFound()) return false;
    SS_RETURN_IF_ERROR(
        FromRocks(got, absl::StrCat("read (table ", table, ", id ", id, ") of ", db_path_)));
    if (value.size() != row_bytes_) {
      return absl::DataLossError(absl::StrCat(db_path_, ": (table ", table, ", id ", id,
                                              ") holds a ", value.size(), "-byte value"));
    }
    SS_RETURN_IF_ERROR(visit(table, id, std::string_view(value.data(), value.size())));
    return true;
  }

 private:
  SnapshotHolder holder_;
  const std::string db_path_;
  const uint32_t num_slots_;
  const size_t row_bytes_;
  const int row_floats_;
  StoredRow row_;  // Reused by every row.
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  std::unique_ptr<rocksdb::Iterator> it_;  // Before holder_'s release: declared after it.
  uint32_t at_slot_ = kNoSlot;             // it_ is at this slot's first key.
};

// Under TSAN only (see kSerializeDbWrites): TSAN reported two stores of one
// process ingesting at once as a race inside Debian's uninstrumented RocksDB,
// on a std::unordered_set of strings it saw only through memcmp and operator
// new; whether RocksDB locks it, TSAN cannot tell. Stores share a process
// only in tests.
Mutex& TsanIngestMutex() {
  static auto* mu = new Mutex();
  return *mu;
}

}  // namespace

absl::Status RowStoreImpl::WriteBackDirtyRows() {
  MutexLock f(&flush_mu_);
  return FlushAllConcurrently(UINT64_MAX);
}

absl::Status RowStoreImpl::ConsistentSnapshot(SnapshotHolder* holder,
                                              const std::function<absl::Status()>& at_snapshot) {
  // Most dirty rows go while pushes continue; the rest under one hold, so
  // the snapshot is the state between two writes.
  MutexLock f(&flush_mu_);
  SS_RETURN_IF_ERROR(FlushAllConcurrently(UINT64_MAX));
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(FlushAllLocked(UINT64_MAX));
  holder->db = db_.get();
  holder->snapshot = db_->GetSnapshot();
  return at_snapshot == nullptr ? absl::OkStatus() : at_snapshot();
}

absl::Status RowStoreImpl::ValidateSlots(const std::vector<uint32_t>& slots,
                                         std::vector<uint32_t>* sorted) const {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] >= options_.num_slots) {
      return absl::InvalidArgumentError(absl::StrCat("slots[", i, "] = ", slots[i],
                                                     ": out of range (store has ",
                                                     options_.num_slots, " slots)"));
    }
  }
  *sorted = slots;
  std::sort(sorted->begin(), sorted->end());
  sorted->erase(std::unique(sorted->begin(), sorted->end()), sorted->end());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RowStore::Snapshot>> RowStoreImpl::TakeSnapshot() {
  auto snapshot = std::make_unique<RowSnapshotImpl>(db_.get(), options_.db_path, options_.num_slots,
                                                    row_bytes_, row_floats_);
  SS_RETURN_IF_ERROR(ConsistentSnapshot(&snapshot->holder()));
  return snapshot;
}

absl::StatusOr<std::unique_ptr<RowStore::Snapshot>> RowStoreImpl::TakeChangeSnapshot(
    const ChangeCursor* since, ChangeCursor* cursor, std::vector<ChangedRow>* changed) {
  auto snapshot = std::make_unique<RowSnapshotImpl>(db_.get(), options_.db_path, options_.num_slots,
                                                    row_bytes_, row_floats_);
  SS_RETURN_IF_ERROR(ConsistentSnapshot(&snapshot->holder(), [&]() -> absl::Status {
    SS_ASSIGN_OR_RETURN(*cursor, changes_.Close(since, changed));
    return absl::OkStatus();
  }));
  return snapshot;
}

absl::Status RowStoreImpl::ExportSlots(
    const std::vector<uint32_t>& slots,
    const std::function<absl::Status(uint32_t slot, const StoredRow&)>& visit) {
  std::vector<uint32_t> sorted;
  SS_RETURN_IF_ERROR(ValidateSlots(slots, &sorted));
  SS_ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> snapshot, TakeSnapshot());
  for (uint32_t slot : sorted) {
    SS_RETURN_IF_ERROR(
        snapshot->ExportSlot(slot, [&](const StoredRow& row) { return visit(slot, row); }));
  }
  return absl::OkStatus();
}

absl::Status RowStoreImpl::ImportRows(std::span<const StoredRow> rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const StoredRow& row = rows[i];
    if (row.table >= options_.tables.size()) {
      return absl::InvalidArgumentError(absl::StrCat("rows[", i, "]: table ", row.table,
                                                     " unknown (store has ", options_.tables.size(),
                                                     " tables)"));
    }
    if (row.values.size() != static_cast<size_t>(row_floats_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows[", i, "] (table ", row.table, ", id ", row.id,
                       "): ", row.values.size(), " values, want ", row_floats_, " (dim ", dim_,
                       " + ", row_floats_ - dim_, " optimizer state)"));
    }
  }
  if (rows.empty()) return absl::OkStatus();
  // Key order, the last of a repeated key winning.
  std::vector<std::tuple<uint32_t, uint32_t, uint64_t, size_t>> order(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    order[i] = {SlotOf(rows[i].table, rows[i].id, options_.num_slots), rows[i].table, rows[i].id,
                i};
  }
  std::sort(order.begin(), order.end());
  RowBlock block;
  for (size_t k = 0; k < order.size(); ++k) {
    if (k + 1 < order.size() && std::get<0>(order[k]) == std::get<0>(order[k + 1]) &&
        std::get<1>(order[k]) == std::get<1>(order[k + 1]) &&
        std::get<2>(order[k]) == std::get<2>(order[k + 1])) {
      continue;
    }
    const StoredRow& row = rows[std::get<3>(order[k])];
    block.tables.push_back(row.table);
    block.ids.push_back(row.id);
    block.values.insert(block.values.end(), row.values.begin(), row.values.end());
  }
  return ImportRowBlock(block);
}

absl::StatusOr<bool> RowStoreImpl::AnyRowInDbLocked(uint32_t begin, uint32_t end) const {
  const std::string upper = SlotBound(end);
  const rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  read.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  it->Seek(SlotBound(begin));
  const bool any = it->Valid();
  SS_RETURN_IF_ERROR(FromRocks(
      it->status(), absl::StrCat("scan slots [", begin, ", ", end, ") of ", options_.db_path)));
  return any;
}

absl::StatusOr<int64_t> RowStoreImpl::CountNewRowsLocked(const RowBlock& rows, const char* keys,
                                                         const uint32_t* slots) {
  const size_t n = rows.size();
  // Rows of empty slots are new; the others are new unless cached or in
  // RocksDB (one MultiGet).
  int64_t new_rows = 0;
  PushScratch& sc = push_;
  sc.misses.clear();
  for (size_t begin = 0, end = 0; begin < n; begin = end) {
    const uint32_t slot = slots[begin];
    for (end = begin + 1; end < n && slots[end] == slot; ++end) {
    }
    uint8_t& state = slot_state_[slot];
    if (state == kSlotUnknown) {
      SS_ASSIGN_OR_RETURN(const bool any, AnyRowInDbLocked(slot, slot + 1));
      state = any ? kSlotMayHaveRows : kSlotEmpty;
    }
    if (state == kSlotEmpty) {
      new_rows += static_cast<int64_t>(end - begin);
    } else {
      for (size_t i = begin; i < end; ++i) {
        const RowKey key{rows.tables[i], rows.ids[i]};
        Shard& shard = shards_[ShardOf(HashId(key.table, key.id))];
        ReaderMutexLock l(&shard.mu);
        if (shard.Find(key) < 0) sc.misses.push_back(static_cast<uint32_t>(i));
      }
    }
    state = kSlotMayHaveRows;
  }
  const size_t m = sc.misses.size();
  if (m == 0) return new_rows;
  char* get_keys = sc.get.Prepare(m);
  for (size_t j = 0; j < m; ++j) {
    std::memcpy(get_keys + j * kKeySize, keys + size_t{sc.misses[j]} * kKeySize, kKeySize);
  }
  sc.get.Run(db_.get(), read_options_, m);
  absl::Status status;
  for (size_t j = 0; j < m && status.ok(); ++j) {
    bool found = false;
    const uint32_t i = sc.misses[j];
    status =
        ReadStoredRow(sc.get.values[j], sc.get.statuses[j], rows.tables[i], rows.ids[i], &found);
    new_rows += !found;
  }
  sc.get.Release(m);
  SS_RETURN_IF_ERROR(status);
  return new_rows;
}

absl::Status RowStoreImpl::ImportRowBlock(const RowBlock& rows) {
  const size_t n = rows.size();
  if (rows.tables.size() != n || rows.values.size() != n * row_floats_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row block: ", rows.tables.size(), " tables, ", n, " ids and ", rows.values.size(),
        " values; want one table per id and ", row_floats_, " values per row (dim ", dim_, " + ",
        row_floats_ - dim_, " optimizer state)"));
  }
  if (n == 0) return absl::OkStatus();
  // Keys in order, checked before anything is locked.
  std::vector<char> keys(n * kKeySize);
  std::vector<uint32_t> slots(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t table = rows.tables[i];
    if (table >= options_.tables.size()) {
      return absl::InvalidArgumentError(absl::StrCat("rows[", i, "]: table ", table,
                                                     " unknown (store has ", options_.tables.size(),
                                                     " tables)"));
    }
    slots[i] = SlotOf(table, rows.ids[i], options_.num_slots);
    char* key = keys.data() + i * kKeySize;
    EncodeRowKey(slots[i], table, rows.ids[i], key);
    if (i > 0) {
      const int order = std::memcmp(key - kKeySize, key, kKeySize);
      if (order >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("rows[", i, "] (table ", table, ", id ", rows.ids[i], ") ",
                         order == 0 ? "repeats rows[" : "sorts before rows[", i - 1,
                         "]; a row block is in key order, each key once (SortRowBlock)"));
      }
    }
  }

  MutexLock f(&flush_mu_);
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(failure_);
  WriterSection writing(write_seq_);
  SS_ASSIGN_OR_RETURN(const int64_t new_rows, CountNewRowsLocked(rows, keys.data(), slots.data()));

  // Written to RocksDB directly (imports are bulk; they would only displace
  // hot rows from the cache). Ingested as an SST file when no redo-log
  // record could be replayed over it after a crash: without a cache, or
  // before anything was logged (a warm start into new servers). Otherwise
  // logged, then written through the memtable: a replayed push or slot drop
  // logged before the import would land on top of an ingested file.
  const char* values = reinterpret_cast<const char*>(rows.values.data());
  if (!write_back_ || !logged_since_open_) {
    SS_RETURN_IF_ERROR(IngestLocked(rows, keys.data(), rows_stored_ + new_rows));
  } else {
    std::string& record =
        record_.Start(RecordType::kRows, rows_stored_ + new_rows, static_cast<uint32_t>(n));
    record.reserve(record.size() + n * (kKeySize + row_bytes_));
    for (size_t i = 0; i < n; ++i) {
      record.append(keys.data() + i * kKeySize, kKeySize);
      record.append(values + i * row_bytes_, row_bytes_);
    }
    SS_RETURN_IF_ERROR(AppendLocked(record_.Finish()));
    batch_.Clear();
    for (size_t i = 0; i < n; ++i) {
      batch_.Put(rocksdb::Slice(keys.data() + i * kKeySize, kKeySize),
                 rocksdb::Slice(values + i * row_bytes_, row_bytes_));
    }
    // The redo log record above is the durable copy until a checkpoint
    // flushes the memtable (RunCheckpoint), as for a push's cached rows.
    SS_RETURN_IF_ERROR(WriteBatchLocked("write imported rows", import_write_options_));
    unlogged_generation_ = log_generation_;
  }
  rows_stored_ += new_rows;
  rows_stored_published_.store(rows_stored_, std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) changes_.Record(rows.tables[i], rows.ids[i]);

  // Cached copies are stale now: drop them (the next read refills). A bulk
  // import into a server that has cached nothing skips the per-row probes.
  bool any_cached = false;
  for (int s = 0; s < kNumShards && write_back_ && !any_cached; ++s) {
    ReaderMutexLock l(&shards_[s].mu);
    any_cached = shards_[s].size > 0;
  }
  if (!any_cached && !track_access_) return absl::OkStatus();
  const int64_t now = track_access_ ? NowMs() : 0;
  for (size_t i = 0; i < n; ++i) {
    const RowKey k{rows.tables[i], rows.ids[i]};
    Shard& shard = shards_[ShardOf(HashId(k.table, k.id))];
    MutexLock l(&shard.mu);
    shard.Erase(k);
    if (track_access_) shard.last_access[k].ms = now;
  }
  return absl::OkStatus();
}

absl::Status RowStoreImpl::IngestLocked(const RowBlock& rows, const char* keys,
                                        int64_t rows_after) {
  // No redo-log record, memtable insert, flush or compaction: the file goes
  // to the lowest level it does not overlap, and a warm start's files, each
  // a range of slots, overlap nothing. RocksDB syncs it before ingestion.
  // The persisted row count would be stale once the file is in: it goes
  // first, synced, and comes back after (nothing is logged, so the count is
  // RocksDB's); Open counts the rows of a store that lost it in between.
  rocksdb::WriteOptions synced = write_options_;
  synced.sync = true;
  rocksdb::WriteBatch forget;
  forget.Delete(MetaKey(kRowCountKey));
  rocksdb::Status s = DbWrite(synced, &forget);
  const std::string path = (ingest_dir_ / absl::StrCat(++ingested_files_, ".sst")).string();
  const char* values = reinterpret_cast<const char*>(rows.values.data());
  std::optional<MutexLock> serialized;
  if (kSerializeDbWrites) serialized.emplace(&TsanIngestMutex());
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), db_->GetOptions());
  if (s.ok()) s = writer.Open(path);
  for (size_t i = 0; i < rows.size() && s.ok(); ++i) {
    s = writer.Put(rocksdb::Slice(keys + i * kKeySize, kKeySize),
                   rocksdb::Slice(values + i * row_bytes_, row_bytes_));
  }
  if (s.ok()) s = writer.Finish();
  if (s.ok()) {
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;  // a hard link: the file is not copied
    s = db_->IngestExternalFile({path}, ingest);
  }
  // Linked into the database, or never applied (ingestion is atomic).
  std::error_code ec;
  fs::remove(path, ec);
  SS_RETURN_IF_ERROR(
      FromRocks(s, absl::StrCat("ingest ", rows.size(), " imported rows into ", options_.db_path)));
  const absl::Status counted =
      FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_after)),
                absl::StrCat("persist row count of ", options_.db_path));
  if (!counted.ok()) {
    // The rows are in: the store cannot go on as if they were not.
    FailLocked(absl::UnavailableError(
        absl::StrCat("row store failed (restart to recover): ", counted.message())));
  }
  return counted;
}

absl::StatusOr<int64_t> RowStoreImpl::DropSlots(const std::vector<uint32_t>& slots) {
  std::vector<uint32_t> sorted;
  SS_RETURN_IF_ERROR(ValidateSlots(slots, &sorted));
  if (sorted.empty()) return 0;
  MutexLock f(&flush_mu_);
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(failure_);
  WriterSection writing(write_seq_);
  // With every row in RocksDB, the count of what goes is a range scan.
  SS_RETURN_IF_ERROR(FlushAllLocked(UINT64_MAX));
  int64_t dropped = 0;
  std::string upper;
  rocksdb::Slice upper_slice;
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  read.iterate_upper_bound = &upper_slice;
  for (uint32_t slot : sorted) {
    upper = SlotBound(slot + 1);
    upper_slice = rocksdb::Slice(upper);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
    for (it->Seek(SlotBound(slot)); it->Valid(); it->Next()) ++dropped;
    SS_RETURN_IF_ERROR(FromRocks(
        it->status(), absl::StrCat("count rows of slot ", slot, " in ", options_.db_path)));
  }
  if (write_back_) {
    std::string& record = record_.Start(RecordType::kDeleteSlots, rows_stored_ - dropped,
                                        static_cast<uint32_t>(sorted.size()));
    for (uint32_t slot : sorted) AppendFixed(record, slot);
    SS_RETURN_IF_ERROR(AppendLocked(record_.Finish()));
  }
  batch_.Clear();
  for (uint32_t slot : sorted) batch_.DeleteRange(SlotBound(slot), SlotBound(slot + 1));
  if (!write_back_) batch_.Put(MetaKey(kRowCountKey), RowCountValue(rows_stored_ - dropped));
  SS_RETURN_IF_ERROR(WriteBatchLocked("drop slots"));
  for (uint32_t slot : sorted) slot_state_[slot] = kSlotEmpty;
  rows_stored_ -= dropped;
  rows_stored_published_.store(rows_stored_, std::memory_order_relaxed);

  std::vector<bool> drop(options_.num_slots, false);
  for (uint32_t slot : sorted) drop[slot] = true;
  auto dropping = [&](const RowKey& key) {
    return drop[SlotOf(key.table, key.id, options_.num_slots)];
  };
  for (int s = 0; s < kNumShards; ++s) {
    Shard& shard = shards_[s];
    MutexLock l(&shard.mu);
    for (uint32_t pos = 0; pos < shard.size;) {
      if (dropping(shard.keys[pos])) {
        shard.EraseAt(pos);  // moves another row into pos
      } else {
        ++pos;
      }
    }
    absl::erase_if(shard.last_access, [&](const auto& entry) { return dropping(entry.first); });
  }
  return dropped;
}

absl::StatusOr<RowStore::Checksums> RowStoreImpl::ComputeChecksums() {
  SnapshotHolder snapshot;
  SS_RETURN_IF_ERROR(ConsistentSnapshot(&snapshot));
  const std::string upper = SlotBound(options_.num_slots);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions read;
  read.snapshot = snapshot.snapshot;
  read.fill_cache = false;
  read.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  Checksums sums;
  std::vector<float> values(row_floats_);
  for (it->Seek(SlotBound(0)); it->Valid(); it->Next()) {
    if (it->key().size() != kKeySize || it->value().size() != row_bytes_) {
      return absl::DataLossError(absl::StrCat(options_.db_path, ": a ", it->key().size(),
                                              "-byte key with a ", it->value().size(),
                                              "-byte value among the rows"));
    }
    const RowKey key = DecodeRowKey(it->key().data());
    std::memcpy(values.data(), it->value().data(), row_bytes_);
    ++sums.rows;
    sums.keys += RowKeyHash(key.table, key.id);
    sums.values += RowValueHash(key.table, key.id, values);
  }
  SS_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("checksum ", options_.db_path)));
  return sums;
}

}  // namespace shadowsync::ps::internal

namespace shadowsync::ps {

absl::Status SortRowBlock(uint32_t num_slots, RowBlock* rows) {
  const size_t n = rows->size();
  if (rows->tables.size() != n || (n > 0 && rows->values.size() % n != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("row block: ", rows->tables.size(), " tables, ",
                                                   n, " ids and ", rows->values.size(), " values"));
  }
  using Key = std::tuple<uint32_t, uint32_t, uint64_t>;
  auto key_of = [&](size_t i) {
    return Key{SlotOf(rows->tables[i], rows->ids[i], num_slots), rows->tables[i], rows->ids[i]};
  };
  bool sorted = true;
  for (size_t i = 1; i < n && sorted; ++i) sorted = key_of(i - 1) < key_of(i);
  if (!sorted) {
    std::vector<std::pair<Key, size_t>> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = {key_of(i), i};
    std::sort(order.begin(), order.end());
    const size_t row_floats = n == 0 ? 0 : rows->values.size() / n;
    RowBlock out;
    out.tables.resize(n);
    out.ids.resize(n);
    out.values.resize(rows->values.size());
    for (size_t k = 0; k < n; ++k) {
      const size_t i = order[k].second;
      out.tables[k] = rows->tables[i];
      out.ids[k] = rows->ids[i];
      std::memcpy(out.values.data() + k * row_floats, rows->values.data() + i * row_floats,
                  row_floats * sizeof(float));
    }
    *rows = std::move(out);
  }
  for (size_t i = 1; i < n; ++i) {
    if (rows->tables[i] == rows->tables[i - 1] && rows->ids[i] == rows->ids[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("(table ", rows->tables[i], ", id ", rows->ids[i], ") appears twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace shadowsync::ps
