// RowStoreImpl (ps/row_store_internal.h), checkpoints: the background
// checkpointer that writes dirty cached rows to RocksDB or re-logs them and
// retires old redo logs, the flushes it and others use, and RocksDB
// checkpoints (Checkpoint, RestoreCheckpoint).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps/cache_shard.h"
#include "ps/redo_log.h"
#include "ps/row_codec.h"
#include "ps/row_store.h"
#include "ps/row_store_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"

namespace shadowsync::ps::internal {
namespace {

// A dirty row that this many checkpoints in a row re-logged without a push
// in between goes to RocksDB at the next one. Re-logging a row is a
// sequential append (~0.2 us); writing it to RocksDB a memtable insert plus
// its share of flushes and compactions (~2-3 us), so rows that are pushed
// again within a few checkpoints are cheaper to re-log, and truly cold ones
// stop costing anything after this many.
constexpr uint8_t kMaxCarries = 8;

// Copies a checkpoint directory, hard-linking the immutable SST files.
absl::Status CopyCheckpoint(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("create ", to.string(), ": ", ec.message()));
  for (const fs::directory_entry& entry : fs::directory_iterator(from, ec)) {
    if (!entry.is_regular_file()) continue;
    const fs::path target = to / entry.path().filename();
    if (entry.path().extension() == ".sst") {
      fs::create_hard_link(entry.path(), target, ec);
      if (!ec) continue;
    }
    fs::copy_file(entry.path(), target, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("copy ", entry.path().string(), " to ",
                                                 target.string(), ": ", ec.message()));
    }
  }
  if (ec) return absl::UnavailableError(absl::StrCat("list ", from.string(), ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

void RowStoreImpl::CheckpointLoop() {
  absl::Time last = absl::Now();
  while (true) {
    {
      MutexLock l(&checkpoint_mu_);
      checkpoint_mu_.AwaitWithTimeout(
          [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_) { return stopping_; },
          absl::Milliseconds(50));
      if (stopping_) return;
    }
    if (logged_since_rotation_.load(std::memory_order_relaxed) < options_.checkpoint_log_bytes &&
        absl::Now() - last < options_.checkpoint_interval) {
      continue;
    }
    if (absl::Status s = RunCheckpoint(); !s.ok()) {
      // The store has failed (failure_ is set) or the disk is in trouble;
      // requests report it. Retry at the next interval.
      LOG(ERROR) << "row store " << options_.db_path << ": checkpoint failed: " << s.message();
    }
    last = absl::Now();
  }
}

absl::Status RowStoreImpl::RunCheckpoint() {
  MutexLock f(&flush_mu_);
  uint64_t limit = 0;
  {
    MutexLock w(&write_mu_);
    SS_RETURN_IF_ERROR(failure_);
    limit = log_generation_;
    SS_RETURN_IF_ERROR(RotateLogLocked());
  }
  // Every row changed under the old logs must end up in RocksDB or in the
  // new log before they go. Cold rows (last changed by a push before the
  // newest old log) go to RocksDB, alongside pushes; hot ones are re-logged,
  // which is a sequential append instead of a memtable insert per row, and
  // they will most likely change again before the next checkpoint anyway.
  // Rows re-logged by the last kMaxCarries checkpoints and not pushed since
  // are cold too: otherwise every checkpoint would re-log them for as long as
  // they stay cached (with a cache holding the working set, every row the
  // store has ever seen, each time).
  SS_RETURN_IF_ERROR(FlushAllConcurrently(limit - 1, /*carried_limit=*/limit));
  for (int s = 0; s < kNumShards; ++s) {
    MutexLock w(&write_mu_);
    SS_RETURN_IF_ERROR(CarryForwardLocked(s, limit));
  }
  {
    MutexLock w(&write_mu_);
    // Trusted on Open only when no log holds records, i.e. when nothing
    // changed after the rotation, so it matches RocksDB then.
    SS_RETURN_IF_ERROR(
        FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_stored_)),
                  absl::StrCat("persist row count of ", options_.db_path)));
    // The old logs may go once their rows' new copies survive a machine
    // crash too.
    SS_RETURN_IF_ERROR(SyncLogLocked());
  }
  SS_RETURN_IF_ERROR(FromRocks(db_->SyncWAL(), absl::StrCat("sync WAL of ", options_.db_path)));
  // Rows imported under the old logs skipped RocksDB's WAL: until the
  // memtable holding them is flushed to SST files (synced), the old logs are
  // their only durable copy. Imports after the rotation are in the new log.
  bool unlogged = false;
  {
    MutexLock w(&write_mu_);
    unlogged = unlogged_generation_ != 0 && unlogged_generation_ <= limit;
  }
  if (unlogged) {
    SS_RETURN_IF_ERROR(FromRocks(db_->Flush(rocksdb::FlushOptions()),
                                 absl::StrCat("flush imported rows of ", options_.db_path)));
    MutexLock w(&write_mu_);
    if (unlogged_generation_ <= limit) unlogged_generation_ = 0;
  }
  SS_RETURN_IF_ERROR(DeleteLogsUpTo(limit));
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status RowStoreImpl::CarryForwardLocked(int s, uint64_t limit) {
  Shard& shard = shards_[s];
  // Exclusive: lookups may not fill (or anything move) while positions are
  // collected and re-marked. No push is in progress, so nothing is pinned:
  // rows a concurrent flush skipped as pinned are caught here too.
  MutexLock l(&shard.mu);
  uint32_t count = 0;
  std::string& record = record_.Start(RecordType::kRows, rows_stored_, 0);
  char key[kKeySize];
  for (uint32_t pos = 0; pos < shard.size; ++pos) {
    if (shard.dirty[pos] == 0 || shard.dirty[pos] > limit) continue;
    KeyOf(shard.keys[pos], key);
    record.append(key, kKeySize);
    record.append(reinterpret_cast<const char*>(shard.Row(pos)), row_bytes_);
    ++count;
  }
  if (count == 0) return absl::OkStatus();
  record_.SetCount(rows_stored_, count);
  SS_RETURN_IF_ERROR(AppendLocked(record_.Finish(), /*carried=*/true));
  for (uint32_t pos = 0; pos < shard.size; ++pos) {
    if (shard.dirty[pos] != 0 && shard.dirty[pos] <= limit) {
      shard.dirty[pos] = log_generation_;
      if (shard.carried[pos] < UINT8_MAX) ++shard.carried[pos];
    }
  }
  return absl::OkStatus();
}

absl::Status RowStoreImpl::FlushShardLocked(int s, uint64_t limit) {
  if (!write_back_) return absl::OkStatus();
  Shard& shard = shards_[s];
  // Exclusive: the rows must not leave the cache before RocksDB has them.
  MutexLock l(&shard.mu);
  batch_.Clear();
  char key[kKeySize];
  for (uint32_t pos = 0; pos < shard.size; ++pos) {
    if (shard.dirty[pos] == 0 || shard.dirty[pos] > limit) continue;
    KeyOf(shard.keys[pos], key);
    batch_.Put(rocksdb::Slice(key, kKeySize),
               rocksdb::Slice(reinterpret_cast<const char*>(shard.Row(pos)), row_bytes_));
  }
  if (batch_.Count() == 0) return absl::OkStatus();
  SS_RETURN_IF_ERROR(WriteBatchLocked("write back cached rows"));
  for (uint32_t pos = 0; pos < shard.size; ++pos) {
    if (shard.dirty[pos] <= limit) {
      shard.dirty[pos] = 0;
      shard.carried[pos] = 0;
    }
  }
  return absl::OkStatus();
}

absl::Status RowStoreImpl::FlushAllConcurrently(uint64_t limit, uint64_t carried_limit) {
  if (!write_back_) return absl::OkStatus();
  FlushScratch& sc = flush_;
  for (int s = 0; s < kNumShards; ++s) {
    Shard& shard = shards_[s];
    sc.pos.clear();
    {
      MutexLock l(&shard.mu);
      for (uint32_t pos = 0; pos < shard.size; ++pos) {
        const uint64_t dirty = shard.dirty[pos];
        if (dirty == 0 || shard.pinned[pos] != 0) continue;
        if (dirty > limit && !(dirty <= carried_limit && shard.carried[pos] >= kMaxCarries)) {
          continue;
        }
        sc.pos.push_back(pos);
      }
      const size_t n = sc.pos.size();
      sc.keys.resize(n * kKeySize);
      sc.rows.resize(n * row_floats_);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t pos = sc.pos[i];
        shard.flushing[pos] = 1;
        KeyOf(shard.keys[pos], sc.keys.data() + i * kKeySize);
        std::memcpy(sc.rows.data() + i * row_floats_, shard.Row(pos), row_bytes_);
      }
    }
    if (sc.pos.empty()) continue;
    if (options_.TEST_flush_hook) options_.TEST_flush_hook();
    // In key order: faster memtable inserts (see Push).
    const size_t n = sc.pos.size();
    sc.order.resize(n);
    for (uint32_t i = 0; i < n; ++i) sc.order[i] = i;
    const char* keys = sc.keys.data();
    std::sort(sc.order.begin(), sc.order.end(), [keys](uint32_t a, uint32_t b) {
      return std::memcmp(keys + a * kKeySize, keys + b * kKeySize, kKeySize) < 0;
    });
    flush_batch_.Clear();
    for (uint32_t i : sc.order) {
      flush_batch_.Put(
          rocksdb::Slice(keys + i * kKeySize, kKeySize),
          rocksdb::Slice(reinterpret_cast<const char*>(sc.rows.data() + i * row_floats_),
                         row_bytes_));
    }
    const rocksdb::Status written = DbWrite(write_options_, &flush_batch_);
    const absl::Status status =
        written.ok()
            ? absl::OkStatus()
            : FromRocks(written, absl::StrCat("write back cached rows in ", options_.db_path));
    {
      // The rows stayed in place (flushing rows are not evicted, and only
      // flush_mu_ holders move rows); those no push changed meanwhile are
      // clean. (The generation alone cannot tell without a rotation.)
      MutexLock l(&shard.mu);
      for (uint32_t pos : sc.pos) {
        if (status.ok() && shard.flushing[pos] == 1 &&
            shard.dirty[pos] <= std::max(limit, carried_limit)) {
          shard.dirty[pos] = 0;
          shard.carried[pos] = 0;
        }
        shard.flushing[pos] = 0;
      }
    }
    if (!status.ok()) {
      Fail(absl::UnavailableError(
          absl::StrCat("row store failed (restart to recover): ", status.message())));
      return status;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RowStoreImpl::Checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::exists(path, ec)) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint ", path, ": already exists"));
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("checkpoint ", path, ": create ", parent.string(), ": ", ec.message()));
    }
  }
  MutexLock f(&flush_mu_);
  SS_RETURN_IF_ERROR(FlushAllConcurrently(UINT64_MAX));
  // Under write_mu_: every row is in RocksDB, and the count matches.
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(failure_);
  SS_RETURN_IF_ERROR(FlushAllLocked(UINT64_MAX));
  SS_RETURN_IF_ERROR(
      FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_stored_)),
                absl::StrCat("checkpoint ", path)));
  rocksdb::Checkpoint* raw = nullptr;
  SS_RETURN_IF_ERROR(
      FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), absl::StrCat("checkpoint ", path)));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  SS_RETURN_IF_ERROR(
      FromRocks(checkpoint->CreateCheckpoint(path), absl::StrCat("checkpoint ", path)));
  return rows_stored_;
}

}  // namespace shadowsync::ps::internal

namespace shadowsync::ps {

namespace fs = std::filesystem;
using internal::CopyCheckpoint;

absl::StatusOr<std::unique_ptr<RowStore>> RowStore::RestoreCheckpoint(const std::string& checkpoint,
                                                                      RowStoreOptions options) {
  std::error_code ec;
  if (!fs::is_directory(checkpoint, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint, ": not a directory"));
  }
  if (options.db_path.empty()) return absl::InvalidArgumentError("db_path: empty");
  if (fs::exists(options.db_path, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat("restore into ", options.db_path, ": already exists"));
  }
  // Copy beside the target, then rename: a crash never leaves a half-restored db_path.
  const fs::path staging = options.db_path + ".restoring";
  fs::remove_all(staging, ec);
  SS_RETURN_IF_ERROR(CopyCheckpoint(checkpoint, staging));
  fs::rename(staging, options.db_path, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("rename ", staging.string(), " to ", options.db_path, ": ", ec.message()));
  }
  SS_RETURN_IF_ERROR(SyncParentDirectory(options.db_path));
  return Open(std::move(options));
}

}  // namespace shadowsync::ps
