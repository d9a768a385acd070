// RowStoreImpl (ps/row_store_internal.h), redo log: appending records,
// rotating and deleting logs, and replaying them at Open. The record format
// and the log file are ps/redo_log.h.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "ps/redo_log.h"
#include "ps/row_codec.h"
#include "ps/row_store_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace shadowsync::ps::internal {
namespace {

// After-images being replayed, newest per key, written to RocksDB sorted and
// in bounded batches.
class ReplayRows {
 public:
  explicit ReplayRows(size_t row_bytes) : row_bytes_(row_bytes) {}
  void Put(const char* key, const char* row) {
    auto [it, inserted] = index_.try_emplace(DecodeRowKey(key), index_.size());
    if (inserted) {
      keys_.insert(keys_.end(), key, key + kKeySize);
      rows_.insert(rows_.end(), row, row + row_bytes_);
    } else {
      std::memcpy(rows_.data() + it->second * row_bytes_, row, row_bytes_);
    }
  }
  absl::Status Flush(rocksdb::DB* db, const rocksdb::WriteOptions& options,
                     const std::string& path) {
    const size_t n = index_.size();
    std::vector<uint32_t> order(n);
    for (uint32_t i = 0; i < n; ++i) order[i] = i;
    const char* keys = keys_.data();
    std::sort(order.begin(), order.end(), [keys](uint32_t a, uint32_t b) {
      return std::memcmp(keys + a * kKeySize, keys + b * kKeySize, kKeySize) < 0;
    });
    rocksdb::WriteBatch batch;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t e = order[i];
      batch.Put(rocksdb::Slice(keys + e * kKeySize, kKeySize),
                rocksdb::Slice(rows_.data() + e * row_bytes_, row_bytes_));
      if (batch.Count() == 16384 || i + 1 == n) {
        SS_RETURN_IF_ERROR(
            FromRocks(db->Write(options, &batch), absl::StrCat("replay redo log into ", path)));
        batch.Clear();
      }
    }
    index_.clear();
    keys_.clear();
    rows_.clear();
    return absl::OkStatus();
  }

 private:
  const size_t row_bytes_;
  absl::flat_hash_map<RowKey, size_t, RowKeyHasher> index_;
  std::vector<char> keys_;
  std::vector<char> rows_;
};

}  // namespace

absl::Status RowStoreImpl::Recover() {
  std::error_code ec;
  fs::create_directories(redo_dir_, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("create ", redo_dir_.string(), ": ", ec.message()));
  }
  SS_ASSIGN_OR_RETURN(const auto logs, ListLogs(redo_dir_));
  if (logs.empty()) return absl::OkStatus();

  // Apply every record in order. After-images and deletions are idempotent,
  // so a crash during replay just replays again. Consecutive after-images
  // are merged first (the hot rows are in most records) and written sorted.
  ReplayRows pending(row_bytes_);
  int64_t records = 0, rows_after = rows_stored_;
  bool complete = true;
  const size_t entry = kKeySize + row_bytes_;
  for (size_t i = 0; i < logs.size(); ++i) {
    const std::string file = logs[i].second.string();
    auto apply = [&](RecordType type, std::string_view payload) -> absl::Status {
      uint32_t count = 0;
      if (payload.size() >= kRecordPrefix) {
        std::memcpy(&rows_after, payload.data(), sizeof(rows_after));
        std::memcpy(&count, payload.data() + sizeof(rows_after), sizeof(count));
      }
      const size_t per = type == RecordType::kRows          ? entry
                         : type == RecordType::kDeleteKeys  ? kKeySize
                         : type == RecordType::kDeleteSlots ? sizeof(uint32_t)
                                                            : 0;
      if (per == 0 || payload.size() != kRecordPrefix + size_t{count} * per) {
        return absl::DataLossError(absl::StrCat("redo log ", file, ": record of type ",
                                                static_cast<uint32_t>(type), " with ",
                                                payload.size(), " bytes"));
      }
      const char* p = payload.data() + kRecordPrefix;
      if (type == RecordType::kRows) {
        for (uint32_t k = 0; k < count; ++k, p += per) pending.Put(p, p + kKeySize);
        return absl::OkStatus();
      }
      // Deletions apply after everything before them.
      SS_RETURN_IF_ERROR(pending.Flush(db_.get(), write_options_, options_.db_path));
      rocksdb::WriteBatch batch;
      for (uint32_t k = 0; k < count; ++k, p += per) {
        if (type == RecordType::kDeleteKeys) {
          batch.Delete(rocksdb::Slice(p, kKeySize));
          continue;
        }
        uint32_t slot;
        std::memcpy(&slot, p, 4);
        if (slot >= options_.num_slots) {
          return absl::DataLossError(
              absl::StrCat("redo log ", file, ": drops slot ", slot, " of ", options_.num_slots));
        }
        batch.DeleteRange(SlotBound(slot), SlotBound(slot + 1));
      }
      return FromRocks(DbWrite(write_options_, &batch),
                       absl::StrCat("replay redo log ", file, " into ", options_.db_path));
    };
    SS_RETURN_IF_ERROR(ReadLog(logs[i].second, i + 1 == logs.size(), apply, &records, &complete));
  }
  SS_RETURN_IF_ERROR(pending.Flush(db_.get(), write_options_, options_.db_path));
  if (records > 0) {
    // Each record carries the count after it; a log with a hole (see
    // ReadLog) leaves the count to a scan.
    rows_stored_ = rows_after;
    if (!complete) {
      int64_t rows = 0;
      SS_RETURN_IF_ERROR(ScanKeys([&rows](const RowKey&) { ++rows; }));
      rows_stored_ = rows;
    }
    SS_RETURN_IF_ERROR(
        FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_stored_)),
                  absl::StrCat("persist row count of ", options_.db_path)));
  }
  SS_RETURN_IF_ERROR(FromRocks(db_->SyncWAL(), absl::StrCat("sync WAL of ", options_.db_path)));
  log_generation_ = logs.back().first;
  return DeleteLogsUpTo(log_generation_);
}

absl::Status RowStoreImpl::DeleteLogsUpTo(uint64_t generation) const {
  SS_ASSIGN_OR_RETURN(const auto logs, ListLogs(redo_dir_));
  bool deleted = false;
  for (const auto& [g, path] : logs) {
    if (g > generation) break;
    std::error_code ec;
    fs::remove(path, ec);
    if (ec)
      return absl::UnavailableError(absl::StrCat("delete ", path.string(), ": ", ec.message()));
    deleted = true;
  }
  // A deleted log that came back after a machine crash would be replayed
  // over newer rows.
  return deleted ? SyncDirectory(redo_dir_.string()) : absl::OkStatus();
}

absl::Status RowStoreImpl::RotateLogLocked() {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<RedoLog> next,
                      RedoLog::Create(redo_dir_, log_generation_ + 1, options_.sync_writes));
  log_ = std::move(next);
  ++log_generation_;
  log_bytes_.store(0, std::memory_order_relaxed);
  logged_since_rotation_.store(0, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status RowStoreImpl::AppendLocked(std::string_view record, bool carried) {
  logged_since_open_ = true;
  absl::Status status = log_->Append(record);
  if (status.code() == absl::StatusCode::kDataLoss) FailLocked(status);
  const int64_t before = log_bytes_.load(std::memory_order_relaxed);
  log_bytes_.store(log_->size(), std::memory_order_relaxed);
  if (!carried && status.ok()) {
    logged_since_rotation_.fetch_add(log_->size() - before, std::memory_order_relaxed);
  }
  return status;
}

absl::Status RowStoreImpl::SyncLogLocked() {
  absl::Status status = log_->Sync();
  if (!status.ok()) FailLocked(status);
  return status;
}

}  // namespace shadowsync::ps::internal
