// RowStoreImpl (ps/row_store_internal.h), core: options, opening RocksDB,
// the metadata records, shutdown, ownership and stats. The other concerns
// are in row_store_log.cc, row_store_cache.cc, row_store_checkpoint.cc and
// row_store_slots.cc.
#include "ps/row_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps/cache_shard.h"
#include "ps/row_codec.h"
#include "ps/row_store_internal.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace shadowsync::ps::internal {
namespace {

constexpr int kMaxDim = 4096;

absl::Status ValidateOptions(const RowStoreOptions& o) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.db_path.empty()) return bad("db_path: empty");
  if (o.dim < 1 || o.dim > kMaxDim) return bad("dim: ", o.dim, ", want 1..", kMaxDim);
  if (o.tables.empty()) return bad("tables: empty");
  for (size_t t = 0; t < o.tables.size(); ++t) {
    if (o.tables[t].hash_buckets == 0) return bad("tables[", t, "].hash_buckets: 0");
  }
  if (o.num_slots < 1 || o.num_slots > kMaxSlots) {
    return bad("num_slots: ", o.num_slots, ", want 1..", kMaxSlots);
  }
  if (o.cache_bytes < 0) return bad("cache_bytes: ", o.cache_bytes, " is negative");
  if (o.block_cache_bytes < 0) {
    return bad("block_cache_bytes: ", o.block_cache_bytes, " is negative");
  }
  if (o.checkpoint_log_bytes < 1) {
    return bad("checkpoint_log_bytes: ", o.checkpoint_log_bytes, ", want >= 1");
  }
  if (o.checkpoint_interval <= absl::ZeroDuration()) {
    return bad("checkpoint_interval: ", absl::FormatDuration(o.checkpoint_interval), ", want > 0");
  }
  if (o.admission_min_count < 1 || o.admission_min_count > 65535) {
    return bad("admission_min_count: ", o.admission_min_count, ", want 1..65535");
  }
  if (!(o.admission_probability >= 0.0 && o.admission_probability <= 1.0)) {
    return bad("admission_probability: ", o.admission_probability, ", want 0..1");
  }
  if (o.ttl < absl::ZeroDuration())
    return bad("ttl: ", absl::FormatDuration(o.ttl), " is negative");
  if (o.max_rows < 0) return bad("max_rows: ", o.max_rows, " is negative");
  if (!std::isfinite(o.optimizer.learning_rate)) return bad("optimizer.learning_rate: not finite");
  return absl::OkStatus();
}

// RocksDB tuned for random point reads of small fixed-size rows;
// docs/ps-storage.md gives the measurements behind each choice.
rocksdb::Options MakeDbOptions(const RowStoreOptions& o) {
  rocksdb::Options db;
  db.create_if_missing = true;
  // Durability (docs/durability.md): every Write() hands its WAL record to
  // the OS before returning, and recovery keeps every complete record.
  db.manual_wal_flush = false;
  db.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db.max_background_jobs = 4;
  db.bytes_per_sync = 1 << 20;
  db.keep_log_file_num = 4;
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db.write_buffer_size = 64 << 20;
  db.max_write_buffer_number = 4;
  db.level_compaction_dynamic_level_bytes = true;
  db.max_bytes_for_level_base = 512 << 20;
  db.target_file_size_base = 64 << 20;
  // Rows are high-entropy floats: compression saves almost nothing and costs
  // read latency (measured in docs/ps-storage.md).
  db.compression = rocksdb::kNoCompression;
  db.bottommost_compression = rocksdb::kDisableCompressionOption;
  // Memtable bloom on whole keys: a miss (an unseen row) skips the skiplist.
  db.memtable_whole_key_filtering = true;
  db.memtable_prefix_bloom_size_ratio = 0.02;

  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  table.data_block_hash_table_util_ratio = 0.75;
  table.block_size = 4096;
  if (o.block_cache_bytes > 0) {
    table.block_cache = rocksdb::NewLRUCache(static_cast<size_t>(o.block_cache_bytes));
  } else {
    table.no_block_cache = true;
  }
  db.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return db;
}

}  // namespace

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain() || s.IsIncomplete()) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

RowStoreImpl::~RowStoreImpl() {
  {
    MutexLock l(&checkpoint_mu_);
    stopping_ = true;
  }
  if (checkpointer_.joinable()) checkpointer_.join();
  if (write_back_) {
    // A clean shutdown leaves no log to replay: flush everything, then the
    // logs are redundant. On failure they stay for the next Open.
    absl::Status status;
    uint64_t generation = 0;
    {
      MutexLock f(&flush_mu_);
      MutexLock w(&write_mu_);
      status = failure_;
      if (status.ok()) status = FlushAllLocked(UINT64_MAX);
      if (status.ok()) {
        status =
            FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_stored_)),
                      "persist row count");
      }
      // Imported rows skipped the WAL: only the logs hold them until the
      // memtable is in SST files.
      if (status.ok() && unlogged_generation_ != 0) {
        status = FromRocks(db_->Flush(rocksdb::FlushOptions()), "flush imported rows");
      }
      generation = log_generation_;
      log_.reset();
    }
    if (status.ok()) status = FromRocks(db_->SyncWAL(), "sync RocksDB WAL");
    if (status.ok()) status = DeleteLogsUpTo(generation);
    if (!status.ok()) {
      LOG(WARNING) << "row store " << options_.db_path
                   << ": shutdown left redo logs to replay: " << status.message();
    }
  }
  // Best effort: every acknowledged write is in a WAL already.
  db_->Close().PermitUncheckedError();
}

absl::Status RowStoreImpl::Start() {
  const std::string& path = options_.db_path;
  rocksdb::ReadOptions read;
  std::string value;

  // Format: refuse a database whose rows have another layout.
  struct Format {
    uint32_t version, dim, row_floats, num_slots;
  } want{kFormatVersion, static_cast<uint32_t>(dim_), static_cast<uint32_t>(row_floats_),
         options_.num_slots};
  rocksdb::Status s = db_->Get(read, MetaKey(kFormatKey), &value);
  if (s.IsNotFound()) {
    SS_RETURN_IF_ERROR(
        FromRocks(db_->Put(rocksdb::WriteOptions(), MetaKey(kFormatKey), EncodeFixed(want)),
                  absl::StrCat("write format record to ", path)));
  } else if (!s.ok()) {
    return FromRocks(s, absl::StrCat("read format record of ", path));
  } else {
    Format have;
    if (value.size() != sizeof(have)) {
      return absl::DataLossError(
          absl::StrCat(path, ": format record has ", value.size(), " bytes, want ", sizeof(have)));
    }
    std::memcpy(&have, value.data(), sizeof(have));
    if (have.version != want.version || have.dim != want.dim ||
        have.row_floats != want.row_floats || have.num_slots != want.num_slots) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " holds rows of dim ", have.dim, " with ", have.row_floats,
                       " floats per row (values + optimizer state) over ", have.num_slots,
                       " slots (format ", have.version, "); options ask for dim ", want.dim, ", ",
                       want.row_floats, " floats per row, ", want.num_slots, " slots"));
    }
  }

  // Ownership: a new database owns every slot at epoch 0.
  {
    MutexLock l(&owner_mu_);
    owned_.assign(options_.num_slots, true);
    epoch_ = 0;
    s = db_->Get(read, MetaKey(kOwnershipKey), &value);
    if (s.ok()) {
      const size_t bitmap = (options_.num_slots + 7) / 8;
      if (value.size() != 8 + bitmap) {
        return absl::DataLossError(absl::StrCat(path, ": ownership record has ", value.size(),
                                                " bytes, want ", 8 + bitmap));
      }
      std::memcpy(&epoch_, value.data(), 8);
      for (uint32_t slot = 0; slot < options_.num_slots; ++slot) {
        owned_[slot] = (static_cast<uint8_t>(value[8 + slot / 8]) >> (slot % 8)) & 1;
      }
    } else if (!s.IsNotFound()) {
      return FromRocks(s, absl::StrCat("read ownership of ", path));
    }
    epoch_published_.store(epoch_);
    slots_owned_.store(static_cast<uint32_t>(std::count(owned_.begin(), owned_.end(), true)));
  }

  {
    MutexLock w(&write_mu_);
    s = db_->Get(read, MetaKey(kRowCountKey), &value);
    if (s.ok()) {
      if (value.size() != sizeof(rows_stored_)) {
        return absl::DataLossError(
            absl::StrCat(path, ": row count record has ", value.size(), " bytes"));
      }
      std::memcpy(&rows_stored_, value.data(), sizeof(rows_stored_));
    } else if (!s.IsNotFound()) {
      return FromRocks(s, absl::StrCat("read row count of ", path));
    }
    SS_RETURN_IF_ERROR(Recover());
    // An ingested import removes the persisted count (IngestLocked) until
    // the next one is written; without it, a store with rows counts them.
    s = db_->Get(read, MetaKey(kRowCountKey), &value);
    if (s.IsNotFound()) {
      int64_t rows = 0;
      SS_RETURN_IF_ERROR(ScanKeys([&rows](const RowKey&) { ++rows; }));
      rows_stored_ = rows;
      if (rows > 0) {
        SS_RETURN_IF_ERROR(
            FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_stored_)),
                      absl::StrCat("persist row count of ", path)));
      }
    } else if (!s.ok()) {
      return FromRocks(s, absl::StrCat("read row count of ", path));
    }
    // SST files a crash left before RocksDB ingested them hold nothing
    // acknowledged.
    std::error_code ec;
    fs::remove_all(ingest_dir_, ec);
    fs::create_directories(ingest_dir_, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("create ", ingest_dir_.string(), ": ", ec.message()));
    }
    rows_stored_published_.store(rows_stored_);
    if (write_back_) SS_RETURN_IF_ERROR(RotateLogLocked());
    // A store without rows knows every slot empty, so an import into it
    // reads nothing back; otherwise each slot is checked when first needed.
    SS_ASSIGN_OR_RETURN(const bool any, AnyRowInDbLocked(0, options_.num_slots));
    slot_state_.assign(options_.num_slots, any ? kSlotUnknown : kSlotEmpty);
  }

  if (track_access_) {
    // Access times are not persisted: every row starts fresh at Open.
    const int64_t now = NowMs();
    SS_RETURN_IF_ERROR(ScanKeys([&](const RowKey& key) {
      Shard& shard = shards_[ShardOf(HashId(key.table, key.id))];
      MutexLock l(&shard.mu);
      shard.last_access[key].ms = now;
    }));
  }
  if (write_back_) checkpointer_ = std::thread([this] { CheckpointLoop(); });
  return absl::OkStatus();
}

absl::Status RowStoreImpl::ScanKeys(const std::function<void(const RowKey&)>& visit) const {
  const std::string lower = SlotBound(0), upper = SlotBound(options_.num_slots);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions scan;
  scan.iterate_upper_bound = &upper_slice;
  scan.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan));
  for (it->Seek(lower); it->Valid(); it->Next()) {
    if (it->key().size() == kKeySize) visit(DecodeRowKey(it->key().data()));
  }
  return FromRocks(it->status(), absl::StrCat("scan rows of ", options_.db_path));
}

absl::Status RowStoreImpl::WriteBatchLocked(const char* what,
                                            const rocksdb::WriteOptions& options) {
  const rocksdb::Status written = DbWrite(options, &batch_);
  if (written.ok()) return absl::OkStatus();
  absl::Status status = FromRocks(written, absl::StrCat(what, " in ", options_.db_path));
  FailLocked(absl::UnavailableError(
      absl::StrCat("row store failed (restart to recover): ", status.message())));
  return status;
}

absl::Status RowStoreImpl::SetOwnership(uint64_t epoch, std::vector<bool> owned) {
  if (owned.size() != options_.num_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("ownership lists ", owned.size(), " slots, store has ", options_.num_slots));
  }
  MutexLock turnstile(&turnstile_);
  MutexLock l(&owner_mu_);
  if (epoch < epoch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ownership epoch ", epoch, " is older than the store's epoch ", epoch_));
  }
  std::string record = EncodeFixed(epoch);
  record.resize(8 + (owned.size() + 7) / 8, '\0');
  uint32_t count = 0;
  for (size_t slot = 0; slot < owned.size(); ++slot) {
    if (owned[slot]) {
      record[8 + slot / 8] = static_cast<char>(record[8 + slot / 8] | (1 << (slot % 8)));
      ++count;
    }
  }
  // Synced whatever sync_writes says: a restarted server must never serve
  // slots it gave away.
  rocksdb::WriteOptions sync;
  sync.sync = true;
  SS_RETURN_IF_ERROR(FromRocks(DbPut(sync, MetaKey(kOwnershipKey), record),
                               absl::StrCat("persist ownership to ", options_.db_path)));
  owned_ = std::move(owned);
  epoch_ = epoch;
  epoch_published_.store(epoch, std::memory_order_release);
  slots_owned_.store(count, std::memory_order_relaxed);
  return absl::OkStatus();
}

RowStoreStats RowStoreImpl::stats() const {
  RowStoreStats st;
  st.rows_stored = rows_stored_published_.load(std::memory_order_relaxed);
  int64_t cached = 0;
  for (int s = 0; s < kNumShards; ++s) {
    ReaderMutexLock l(&shards_[s].mu);
    cached += shards_[s].size;
  }
  st.cached_rows = cached;
  st.cache_hits = cache_hits_.load(std::memory_order_relaxed);
  st.cache_misses = cache_misses_.load(std::memory_order_relaxed);
  st.lookup_rows = lookup_rows_.load(std::memory_order_relaxed);
  st.push_rows = push_rows_.load(std::memory_order_relaxed);
  st.admissions = admissions_.load(std::memory_order_relaxed);
  st.admission_rejects = admission_rejects_.load(std::memory_order_relaxed);
  st.evictions = evictions_.load(std::memory_order_relaxed);
  st.slots_owned = slots_owned_.load(std::memory_order_relaxed);
  st.epoch = epoch_published_.load(std::memory_order_acquire);
  st.redo_log_bytes = log_bytes_.load(std::memory_order_relaxed);
  st.checkpoints = checkpoints_.load(std::memory_order_relaxed);
  return st;
}

}  // namespace shadowsync::ps::internal

namespace shadowsync::ps {

namespace fs = std::filesystem;
using internal::FromRocks;
using internal::MakeDbOptions;
using internal::RowStoreImpl;
using internal::ValidateOptions;

absl::StatusOr<std::unique_ptr<RowStore>> RowStore::Open(RowStoreOptions options) {
  SS_RETURN_IF_ERROR(ValidateOptions(options));
  std::error_code ec;
  fs::create_directories(options.db_path, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("create db_path ", options.db_path, ": ", ec.message()));
  }
  rocksdb::DB* raw = nullptr;
  SS_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(MakeDbOptions(options), options.db_path, &raw),
                               absl::StrCat("open RocksDB at ", options.db_path)));
  auto store =
      std::make_unique<RowStoreImpl>(std::move(options), std::unique_ptr<rocksdb::DB>(raw));
  SS_RETURN_IF_ERROR(store->Start());
  return store;
}

}  // namespace shadowsync::ps
