#include "serving/disk_rows.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace shadowsync::serving {
namespace {

namespace fs = std::filesystem;

// Writes are batched this many at a time while the store is built.
constexpr int kBatchOps = 1 << 16;

// Big-endian, so the store's order is (table, id).
std::string EncodeKey(uint32_t table, uint64_t id) {
  std::string key(12, '\0');
  for (int i = 0; i < 4; ++i) key[i] = static_cast<char>(table >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) key[4 + i] = static_cast<char>(id >> (56 - 8 * i));
  return key;
}

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", s.ToString()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskRows>> DiskRows::Create(model::LocalStoreOptions options,
                                                           const std::string& parent_dir,
                                                           int64_t cache_bytes) {
  std::error_code ec;
  fs::create_directories(parent_dir, ec);
  std::string dir = (fs::path(parent_dir) / "rows-XXXXXX").string();
  if (ec || mkdtemp(dir.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot make a row store directory under ",
                                               parent_dir, ": ",
                                               ec ? ec.message() : strerror(errno)));
  }
  rocksdb::Options db;
  db.create_if_missing = true;
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // The row cache is ours; data blocks come through the OS page cache.
  table.no_block_cache = true;
  db.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* raw = nullptr;
  if (absl::Status s = FromRocks(rocksdb::DB::Open(db, dir, &raw), absl::StrCat("open ", dir));
      !s.ok()) {
    fs::remove_all(dir, ec);
    return s;
  }
  return std::unique_ptr<DiskRows>(
      new DiskRows(std::move(options), dir, std::unique_ptr<rocksdb::DB>(raw), cache_bytes));
}

DiskRows::DiskRows(model::LocalStoreOptions options, std::string dir,
                   std::unique_ptr<rocksdb::DB> db, int64_t cache_bytes)
    : options_(std::move(options)),
      dim_(static_cast<size_t>(options_.dim)),
      dir_(std::move(dir)),
      db_(std::move(db)),
      batch_(std::make_unique<rocksdb::WriteBatch>()),
      shards_(new Shard[kShards]) {
  // A slot's values, key, CLOCK bit and its index entry (about twice a
  // key and slot number, at the hash map's load).
  const int64_t slot_bytes = static_cast<int64_t>(dim_ * sizeof(float) + sizeof(Key) + 1 +
                                                  2 * (sizeof(Key) + sizeof(uint32_t)));
  const int64_t per_shard = std::max<int64_t>(0, cache_bytes) / slot_bytes / kShards;
  for (int i = 0; i < kShards; ++i) {
    Shard& s = shards_[i];
    MutexLock lock(&s.mu);
    s.capacity = static_cast<size_t>(per_shard);
    s.keys.reserve(s.capacity);
    s.values.reserve(s.capacity * dim_);
    s.referenced.reserve(s.capacity);
    s.index.reserve(s.capacity);
  }
}

DiskRows::~DiskRows() {
  db_.reset();
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (ec) LOG(WARNING) << "cannot remove " << dir_ << ": " << ec.message();
}

int64_t DiskRows::cache_rows() const { return static_cast<int64_t>(shards_[0].capacity) * kShards; }

absl::Status DiskRows::FlushBatch() {
  rocksdb::WriteOptions write;
  write.disableWAL = true;  // Built from the export; a crash rebuilds it.
  SS_RETURN_IF_ERROR(FromRocks(db_->Write(write, batch_.get()), absl::StrCat("write ", dir_)));
  batch_->Clear();
  return absl::OkStatus();
}

absl::Status DiskRows::Put(uint32_t table, uint64_t id, std::span<const float> values) {
  CHECK_LT(table, options_.tables.size());
  CHECK_EQ(values.size(), dim_);
  batch_->Put(EncodeKey(table, id),
              rocksdb::Slice(reinterpret_cast<const char*>(values.data()), values.size_bytes()));
  return batch_->Count() >= kBatchOps ? FlushBatch() : absl::OkStatus();
}

absl::Status DiskRows::Erase(uint32_t table, uint64_t id) {
  CHECK_LT(table, options_.tables.size());
  batch_->Delete(EncodeKey(table, id));
  return batch_->Count() >= kBatchOps ? FlushBatch() : absl::OkStatus();
}

absl::Status DiskRows::Seal() {
  SS_RETURN_IF_ERROR(FlushBatch());
  SS_RETURN_IF_ERROR(FromRocks(db_->Flush(rocksdb::FlushOptions()), absl::StrCat("flush ", dir_)));
  SS_RETURN_IF_ERROR(FromRocks(db_->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr),
                               absl::StrCat("compact ", dir_)));
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  num_rows_ = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++num_rows_;
  return FromRocks(it->status(), absl::StrCat("scan ", dir_));
}

DiskRows::Shard& DiskRows::ShardOf(uint32_t table, uint64_t id) const {
  return shards_[Mix64(HashId(table, id)) % kShards];
}

bool DiskRows::FromCache(const Key& key, float* out) const {
  Shard& s = ShardOf(key.first, key.second);
  MutexLock lock(&s.mu);
  const auto it = s.index.find(key);
  if (it == s.index.end()) return false;
  std::memcpy(out, s.values.data() + it->second * dim_, dim_ * sizeof(float));
  s.referenced[it->second] = 1;
  return true;
}

void DiskRows::Cache(const Key& key, const float* row) const {
  Shard& s = ShardOf(key.first, key.second);
  MutexLock lock(&s.mu);
  if (s.capacity == 0 || s.index.contains(key)) return;  // Another reader cached it meanwhile.
  size_t slot;
  if (s.keys.size() < s.capacity) {
    slot = s.keys.size();
    s.keys.push_back(key);
    s.values.resize(s.values.size() + dim_);
    s.referenced.push_back(0);
  } else {
    // CLOCK: the first slot not referenced since the hand last passed it.
    while (s.referenced[s.hand] != 0) {
      s.referenced[s.hand] = 0;
      s.hand = (s.hand + 1) % s.capacity;
    }
    slot = s.hand;
    s.hand = (s.hand + 1) % s.capacity;
    s.index.erase(s.keys[slot]);
    s.keys[slot] = key;
  }
  s.index[key] = static_cast<uint32_t>(slot);
  std::memcpy(s.values.data() + slot * dim_, row, dim_ * sizeof(float));
}

absl::StatusOr<bool> DiskRows::FromStore(const Key& key, float* out) const {
  rocksdb::PinnableSlice value;
  const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
                                     EncodeKey(key.first, key.second), &value);
  if (s.IsNotFound()) return false;
  SS_RETURN_IF_ERROR(FromRocks(s, absl::StrCat("read a row from ", dir_)));
  if (value.size() != dim_ * sizeof(float)) {
    return absl::DataLossError(absl::StrCat(dir_, ": table ", key.first, " row ", key.second,
                                            " holds ", value.size(), " bytes, not ",
                                            dim_ * sizeof(float)));
  }
  std::memcpy(out, value.data(), value.size());
  return true;
}

absl::Status DiskRows::Lookup(std::span<model::TableRows> rows, RowCounts* counts) const {
  CHECK_EQ(rows.size(), options_.tables.size());
  RowCounts n;
  for (uint32_t t = 0; t < rows.size(); ++t) {
    model::TableRows& r = rows[t];
    r.values.resize(r.ids.size() * dim_);
    for (size_t i = 0; i < r.ids.size(); ++i) {
      float* out = r.values.data() + i * dim_;
      const Key key{t, r.ids[i]};
      if (FromCache(key, out)) {
        ++n.cache;
        continue;
      }
      SS_ASSIGN_OR_RETURN(const bool stored, FromStore(key, out));
      if (stored) {
        Cache(key, out);
        ++n.disk;
      } else {
        model::InitEmbeddingRow(options_.seed, t, r.ids[i], options_.tables[t].hash_buckets,
                                std::span<float>(out, dim_));
        ++n.initial;
      }
    }
  }
  counts->cache += n.cache;
  counts->disk += n.disk;
  counts->initial += n.initial;
  return absl::OkStatus();
}

absl::StatusOr<bool> DiskRows::Contains(uint32_t table, uint64_t id) const {
  std::vector<float> row(dim_);
  if (FromCache({table, id}, row.data())) return true;
  return FromStore({table, id}, row.data());
}

int64_t DiskRows::memory_bytes() const {
  uint64_t readers = 0;
  db_->GetAggregatedIntProperty("rocksdb.estimate-table-readers-mem", &readers);
  int64_t cache = 0;
  for (int i = 0; i < kShards; ++i) {
    const Shard& s = shards_[i];
    MutexLock lock(&s.mu);
    cache += static_cast<int64_t>(s.values.capacity() * sizeof(float) +
                                  s.keys.capacity() * sizeof(Key) + s.referenced.capacity() +
                                  s.index.capacity() * (sizeof(Key) + sizeof(uint32_t) + 1));
  }
  return cache + static_cast<int64_t>(readers);
}

}  // namespace shadowsync::serving
