// RowStoreImpl (ps/row_store_internal.h), the request path over the RAM
// cache (ps/cache_shard.h): Lookup, Push with admission and the cache update
// that displaces rows, and TTL / row-cap eviction (EvictNow).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "model/embedding_table.h"
#include "model/optimizer.h"
#include "ps/cache_shard.h"
#include "ps/client/wrong_owner.h"
#include "ps/redo_log.h"
#include "ps/row_codec.h"
#include "ps/row_store_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace shadowsync::ps::internal {
namespace {

// Hits are bound by RAM latency (a request's rows are scattered over the
// cache): index probes run this many rows ahead of their use as prefetches,
// and the cached rows of a shard's batch are prefetched before they are
// copied, so the misses overlap.
constexpr uint32_t kPrefetchAhead = 8;

// Prefetches the cache lines of [p, p + n) for reading (and writing).
inline void PrefetchBytes(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  const char* line = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(c) & ~uintptr_t{63});
  for (; line < c + n; line += 64) __builtin_prefetch(line, 1, 3);
}

// Per-thread scratch for Lookup, which runs concurrently on many threads.
struct LookupScratch {
  std::vector<uint64_t> hash;
  std::vector<uint32_t> table;
  std::vector<uint32_t> index;
  std::vector<uint32_t> misses;  // rows, in shard order
  std::vector<uint8_t> found;    // per miss: present in RocksDB
  std::vector<int64_t> pos;      // per row in shard order: cache position or -1
  ShardOrder shards;
  MultiGetBuffers get;
};

}  // namespace

template <typename Rows>
absl::Status RowStoreImpl::CheckTables(std::span<Rows> rows) const {
  if (rows.size() <= options_.tables.size()) return absl::OkStatus();
  size_t bad = rows.size() - 1;
  for (size_t t = options_.tables.size(); t < rows.size(); ++t) {
    if (!rows[t].ids.empty() || !rows[t].values.empty()) {
      bad = t;
      break;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("table ", bad, ": unknown (store has ", options_.tables.size(), " tables)"));
}

absl::Status RowStoreImpl::ReadStoredRow(const rocksdb::PinnableSlice& value,
                                         const rocksdb::Status& status, uint32_t table, uint64_t id,
                                         bool* found) const {
  if (status.IsNotFound()) {
    *found = false;
    return absl::OkStatus();
  }
  if (!status.ok()) {
    return FromRocks(status,
                     absl::StrCat("read ", Describe(table, id), " from ", options_.db_path));
  }
  if (value.size() != row_bytes_) {
    return absl::DataLossError(absl::StrCat(Describe(table, id), " in ", options_.db_path, " has ",
                                            value.size(), " bytes, want ", row_bytes_));
  }
  *found = true;
  return absl::OkStatus();
}

absl::Status RowStoreImpl::Lookup(std::span<model::TableRows> rows) {
  SS_RETURN_IF_ERROR(CheckTables(rows));
  static thread_local LookupScratch scratch;
  LookupScratch& sc = scratch;
  size_t n = 0;
  for (const model::TableRows& r : rows) n += r.ids.size();
  if (n == 0) {
    for (model::TableRows& r : rows) r.values.clear();
    return absl::OkStatus();
  }

  PassTurnstile();
  ReaderMutexLock ownership(&owner_mu_);
  sc.hash.resize(n);
  sc.table.resize(n);
  sc.index.resize(n);
  size_t r = 0;
  for (uint32_t t = 0; t < rows.size(); ++t) {
    for (uint32_t i = 0; i < rows[t].ids.size(); ++i, ++r) {
      const uint64_t h = HashId(t, rows[t].ids[i]);
      const uint32_t slot = static_cast<uint32_t>(h % options_.num_slots);
      if (!owned_[slot]) return WrongOwnerError(slot, epoch_, kUnknownOwner);
      sc.hash[r] = h;
      sc.table[r] = t;
      sc.index[r] = i;
    }
  }
  for (model::TableRows& rs : rows) rs.values.resize(rs.ids.size() * dim_);
  auto out = [&](uint32_t row) {
    return rows[sc.table[row]].values.data() + size_t{sc.index[row]} * dim_;
  };
  auto key_of = [&](uint32_t row) {
    return RowKey{sc.table[row], rows[sc.table[row]].ids[sc.index[row]]};
  };

  const int64_t now = track_access_ ? NowMs() : 0;
  const uint64_t seq_before = write_seq_.load(std::memory_order_acquire);
  sc.shards.Build(n, [&](size_t row) { return sc.hash[row]; });
  sc.misses.clear();
  sc.pos.resize(n);
  int64_t hits = 0;
  for (int s = 0; s < kNumShards; ++s) {
    const uint32_t begin = sc.shards.begin[s], end = sc.shards.begin[s + 1];
    if (begin == end) continue;
    if (!write_back_) {
      sc.misses.insert(sc.misses.end(), sc.shards.order.begin() + begin,
                       sc.shards.order.begin() + end);
      continue;
    }
    Shard& shard = shards_[s];
    ReaderMutexLock l(&shard.mu);
    // Positions first (index probes prefetched ahead, each hit's row
    // prefetched once found), then the copies.
    const uint32_t* order = sc.shards.order.data();
    for (uint32_t k = begin; k < std::min(end, begin + kPrefetchAhead); ++k) {
      shard.PrefetchIndex(key_of(order[k]));
    }
    for (uint32_t k = begin; k < end; ++k) {
      if (k + kPrefetchAhead < end) shard.PrefetchIndex(key_of(order[k + kPrefetchAhead]));
      const uint32_t row = order[k];
      const int64_t pos = shard.Find(key_of(row), sc.hash[row]);
      sc.pos[k] = pos;
      if (pos >= 0) {
        PrefetchBytes(shard.Row(static_cast<uint32_t>(pos)), sizeof(float) * dim_);
        __builtin_prefetch(&shard.referenced[pos], 1, 3);
      }
    }
    for (uint32_t k = begin; k < end; ++k) {
      const uint32_t row = order[k];
      const RowKey key = key_of(row);
      const int64_t pos = sc.pos[k];
      if (pos < 0) {
        sc.misses.push_back(row);
        continue;
      }
      std::memcpy(out(row), shard.Row(static_cast<uint32_t>(pos)), sizeof(float) * dim_);
      shard.MarkReferenced(static_cast<uint32_t>(pos));
      if (track_access_) shard.Touch(key, now);
      ++hits;
    }
  }
  lookup_rows_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  if (write_back_) {
    cache_hits_.fetch_add(hits, std::memory_order_relaxed);
    cache_misses_.fetch_add(static_cast<int64_t>(sc.misses.size()), std::memory_order_relaxed);
  }
  if (sc.misses.empty()) return absl::OkStatus();

  // Rows not cached are current in RocksDB (Shard's invariant).
  const size_t m = sc.misses.size();
  char* keys = sc.get.Prepare(m);
  for (size_t j = 0; j < m; ++j) {
    const uint32_t row = sc.misses[j];
    const RowKey key = key_of(row);
    EncodeRowKey(static_cast<uint32_t>(sc.hash[row] % options_.num_slots), key.table, key.id,
                 keys + j * kKeySize);
  }
  sc.get.Run(db_.get(), read_options_, m);
  sc.found.assign(m, 0);
  bool any_found = false;
  absl::Status status;
  for (size_t j = 0; j < m; ++j) {
    const uint32_t row = sc.misses[j];
    const RowKey key = key_of(row);
    bool found = false;
    status = ReadStoredRow(sc.get.values[j], sc.get.statuses[j], key.table, key.id, &found);
    if (!status.ok()) break;
    if (found) {
      std::memcpy(out(row), sc.get.values[j].data(), sizeof(float) * dim_);
      sc.found[j] = 1;
      any_found = true;
    } else {
      model::InitEmbeddingRow(options_.seed, key.table, key.id,
                              options_.tables[key.table].hash_buckets,
                              std::span<float>(out(row), dim_));
    }
  }

  // Cache the rows read, unless a writer ran meanwhile (its rows may be
  // newer than what we read); refresh their access times.
  if (status.ok() && any_found && (write_back_ || track_access_)) {
    const bool may_fill = write_back_ && seq_before % 2 == 0;
    size_t j = 0;
    while (j < m) {
      const int s = ShardOf(sc.hash[sc.misses[j]]);
      size_t end = j;
      bool shard_found = false;
      while (end < m && ShardOf(sc.hash[sc.misses[end]]) == s) shard_found |= sc.found[end++];
      if (shard_found) {
        Shard& shard = shards_[s];
        MutexLock l(&shard.mu);
        const bool fill = may_fill && write_seq_.load(std::memory_order_acquire) == seq_before;
        for (size_t k = j; k < end; ++k) {
          if (!sc.found[k]) continue;
          const RowKey key = key_of(sc.misses[k]);
          if (fill) shard.Fill(key, reinterpret_cast<const float*>(sc.get.values[k].data()));
          if (track_access_) shard.Touch(key, now);
        }
      }
      j = end;
    }
  }
  sc.get.Release(m);
  return status;
}

bool RowStoreImpl::Admit(uint64_t hash) {
  if (filter_min_count_ &&
      sketch_->Add(hash) < static_cast<uint32_t>(options_.admission_min_count)) {
    return false;
  }
  if (filter_probability_) {
    const float u = UniformFromKey(Mix64(options_.seed ^ 0xad3155105eedULL) + admission_draws_++);
    if (!(u < options_.admission_probability)) return false;
  }
  return true;
}

absl::Status RowStoreImpl::Push(std::span<const model::TableRows> grads) {
  SS_RETURN_IF_ERROR(CheckTables(grads));
  size_t n = 0;
  for (uint32_t t = 0; t < grads.size(); ++t) {
    const model::TableRows& g = grads[t];
    if (g.values.size() != g.ids.size() * dim_) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", t, "]: ", g.values.size(),
                                                     " values for ", g.ids.size(), " ids of dim ",
                                                     dim_));
    }
    for (size_t i = 0; i < g.values.size(); ++i) {
      if (!std::isfinite(g.values[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("tables[", t, "].values[", i, "]: ", g.values[i], " is not finite"));
      }
    }
    n += g.ids.size();
  }
  if (n == 0) return absl::OkStatus();

  PassTurnstile();
  ReaderMutexLock ownership(&owner_mu_);
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(failure_);
  PushScratch& sc = push_;

  // Ownership of every id, and repeated ids summed, before anything changes.
  sc.dedup.Reset(n);
  sc.unique.clear();
  sc.grad.clear();
  for (uint32_t t = 0; t < grads.size(); ++t) {
    const model::TableRows& g = grads[t];
    for (size_t i = 0; i < g.ids.size(); ++i) {
      const uint64_t h = HashId(t, g.ids[i]);
      const uint32_t slot = static_cast<uint32_t>(h % options_.num_slots);
      if (!owned_[slot]) return WrongOwnerError(slot, epoch_, kUnknownOwner);
      const uint32_t next = static_cast<uint32_t>(sc.unique.size());
      const uint32_t u = sc.dedup.FindOrInsert(h, t, g.ids[i], next);
      const float* grad = g.values.data() + i * dim_;
      if (u == next) {
        sc.unique.push_back(UniqueRow{h, g.ids[i], t, slot});
        sc.grad.insert(sc.grad.end(), grad, grad + dim_);
      } else {
        float* sum = sc.grad.data() + size_t{u} * dim_;
        for (int k = 0; k < dim_; ++k) sum[k] += grad[k];
      }
    }
  }

  WriterSection writing(write_seq_);
  const size_t nu = sc.unique.size();
  const std::vector<UniqueRow>& unique = sc.unique;
  const int64_t now = track_access_ ? NowMs() : 0;
  sc.shards.Build(nu, [&unique](size_t u) { return unique[u].hash; });
  sc.next.resize(nu * row_floats_);
  sc.pos.assign(nu, kMissStored);
  sc.misses.clear();

  // 1. Current values of cached rows, pinned so step 4 cannot evict them.
  int64_t hits = 0;
  if (write_back_) {
    for (int s = 0; s < kNumShards; ++s) {
      const uint32_t begin = sc.shards.begin[s], end = sc.shards.begin[s + 1];
      if (begin == end) continue;
      Shard& shard = shards_[s];
      ReaderMutexLock l(&shard.mu);  // also orders us before any later fill of this shard
      // As in Lookup: positions with prefetched probes, then the copies.
      const uint32_t* order = sc.shards.order.data();
      auto key_of = [&unique](uint32_t u) { return RowKey{unique[u].table, unique[u].id}; };
      for (uint32_t k = begin; k < std::min(end, begin + kPrefetchAhead); ++k) {
        shard.PrefetchIndex(key_of(order[k]));
      }
      for (uint32_t k = begin; k < end; ++k) {
        if (k + kPrefetchAhead < end) shard.PrefetchIndex(key_of(order[k + kPrefetchAhead]));
        const uint32_t u = order[k];
        const int64_t pos = shard.Find(key_of(u), unique[u].hash);
        sc.pos[u] = pos;
        if (pos >= 0) {
          PrefetchBytes(shard.Row(static_cast<uint32_t>(pos)), row_bytes_);
          __builtin_prefetch(&shard.pinned[pos], 1, 3);
        }
      }
      for (uint32_t k = begin; k < end; ++k) {
        const uint32_t u = order[k];
        const int64_t pos = sc.pos[u];
        if (pos < 0) {
          sc.pos[u] = kMissStored;
          sc.misses.push_back(u);
          continue;
        }
        std::memcpy(NextRow(sc, u), shard.Row(static_cast<uint32_t>(pos)), row_bytes_);
        shard.pinned[pos] = 1;
        sc.pos[u] = pos;
        ++hits;
      }
    }
  } else {
    sc.misses = sc.shards.order;
  }
  // Undoes step 1's pins when the push fails before step 4.
  auto unpin = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    for (int s = 0; s < kNumShards; ++s) {
      const uint32_t begin = sc.shards.begin[s], end = sc.shards.begin[s + 1];
      if (begin == end) continue;
      MutexLock l(&shards_[s].mu);
      for (uint32_t k = begin; k < end; ++k) {
        const uint32_t u = sc.shards.order[k];
        if (sc.pos[u] >= 0) shards_[s].pinned[sc.pos[u]] = 0;
      }
    }
  };

  // 2. The rest from RocksDB; rows stored nowhere are initialised if admitted.
  int64_t new_rows = 0, rejected = 0;
  if (!sc.misses.empty()) {
    const size_t m = sc.misses.size();
    char* keys = sc.get.Prepare(m);
    for (size_t j = 0; j < m; ++j) {
      const UniqueRow& row = unique[sc.misses[j]];
      EncodeRowKey(row.slot, row.table, row.id, keys + j * kKeySize);
    }
    sc.get.Run(db_.get(), read_options_, m);
    absl::Status status;
    for (size_t j = 0; j < m; ++j) {
      const uint32_t u = sc.misses[j];
      const UniqueRow& row = unique[u];
      bool found = false;
      status = ReadStoredRow(sc.get.values[j], sc.get.statuses[j], row.table, row.id, &found);
      if (!status.ok()) break;
      float* next = NextRow(sc, u);
      if (found) {
        std::memcpy(next, sc.get.values[j].data(), row_bytes_);
      } else if (Admit(row.hash)) {
        model::InitEmbeddingRow(options_.seed, row.table, row.id,
                                options_.tables[row.table].hash_buckets,
                                std::span<float>(next, dim_));
        std::fill(next + dim_, next + row_floats_, 0.0f);
        sc.pos[u] = kMissNew;
        slot_state_[row.slot] = kSlotMayHaveRows;
        ++new_rows;
      } else {
        sc.pos[u] = kMissRejected;
        ++rejected;
      }
    }
    sc.get.Release(m);
    if (!status.ok()) {
      unpin();
      return status;
    }
  }

  // 3. Apply, and make the push durable: one redo-log record (write-back) or
  // one RocksDB batch (write-through), either atomic.
  for (uint32_t u = 0; u < nu; ++u) {
    if (sc.pos[u] == kMissRejected) continue;
    float* next = NextRow(sc, u);
    model::ApplyUpdateExclusive(options_.optimizer, next, next + dim_,
                                sc.grad.data() + size_t{u} * dim_, dim_);
  }
  if (write_back_) {
    std::string& record = record_.Start(RecordType::kRows, 0, 0);
    record.reserve(sizeof(RecordHeader) + kRecordPrefix + nu * (kKeySize + row_bytes_));
    uint32_t count = 0;
    for (uint32_t u = 0; u < nu; ++u) {
      if (sc.pos[u] == kMissRejected) continue;
      EncodeRowKey(unique[u].slot, unique[u].table, unique[u].id, sc.key);
      record.append(sc.key, kKeySize);
      record.append(reinterpret_cast<const char*>(NextRow(sc, u)), row_bytes_);
      ++count;
    }
    if (count > 0) {
      record_.SetCount(rows_stored_ + new_rows, count);
      if (absl::Status s = AppendLocked(record_.Finish()); !s.ok()) {
        unpin();
        return s;
      }
      // 4. The cache (and RocksDB for rows it displaces).
      SS_RETURN_IF_ERROR(UpdateCacheLocked(sc, now));
    }
  } else {
    // In key order: RocksDB inserts a batch into its memtable skiplist in
    // batch order, and sorted keys let each insert start from the last.
    sc.key_order.resize(nu);
    for (uint32_t u = 0; u < nu; ++u) sc.key_order[u] = u;
    std::sort(sc.key_order.begin(), sc.key_order.end(), [&unique](uint32_t a, uint32_t b) {
      return std::tie(unique[a].slot, unique[a].table, unique[a].id) <
             std::tie(unique[b].slot, unique[b].table, unique[b].id);
    });
    batch_.Clear();
    for (uint32_t u : sc.key_order) {
      if (sc.pos[u] == kMissRejected) continue;
      EncodeRowKey(unique[u].slot, unique[u].table, unique[u].id, sc.key);
      batch_.Put(rocksdb::Slice(sc.key, kKeySize),
                 rocksdb::Slice(reinterpret_cast<const char*>(NextRow(sc, u)), row_bytes_));
    }
    if (new_rows > 0) {
      batch_.Put(MetaKey(kRowCountKey), RowCountValue(rows_stored_ + new_rows));
    }
    if (batch_.Count() > 0) {
      if (const rocksdb::Status written = DbWrite(write_options_, &batch_); !written.ok()) {
        return FromRocks(written, absl::StrCat("write push to ", options_.db_path));
      }
    }
    if (track_access_) {
      for (uint32_t u = 0; u < nu; ++u) {
        if (sc.pos[u] == kMissRejected) continue;
        Shard& shard = shards_[ShardOf(unique[u].hash)];
        MutexLock l(&shard.mu);
        shard.last_access[RowKey{unique[u].table, unique[u].id}].ms = now;
      }
    }
  }
  for (uint32_t u = 0; u < nu; ++u) {
    if (sc.pos[u] != kMissRejected) changes_.Record(unique[u].table, unique[u].id);
  }
  rows_stored_ += new_rows;
  rows_stored_published_.store(rows_stored_, std::memory_order_relaxed);
  push_rows_.fetch_add(static_cast<int64_t>(nu), std::memory_order_relaxed);
  admissions_.fetch_add(new_rows, std::memory_order_relaxed);
  admission_rejects_.fetch_add(rejected, std::memory_order_relaxed);
  if (write_back_) {
    cache_hits_.fetch_add(hits, std::memory_order_relaxed);
    cache_misses_.fetch_add(static_cast<int64_t>(sc.misses.size()), std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status RowStoreImpl::UpdateCacheLocked(PushScratch& sc, int64_t now) {
  const std::vector<UniqueRow>& unique = sc.unique;
  const uint64_t generation = log_generation_;
  // 4a. Claim a position for every new cached row: a free one, else a CLOCK
  // victim. Dirty victims, and rows with no position at all, go to RocksDB
  // first; the victims stay readable in the cache until 4c. Their keys and
  // values are copied out, to be written in key order.
  sc.evict_keys.clear();
  sc.evict_rows.clear();
  sc.slot.assign(sc.unique.size(), -1);
  auto evict = [&](const char* row) {
    sc.evict_rows.insert(sc.evict_rows.end(), row, row + row_bytes_);
  };
  for (int s = 0; s < kNumShards; ++s) {
    const uint32_t begin = sc.shards.begin[s], end = sc.shards.begin[s + 1];
    if (begin == end) continue;
    Shard& shard = shards_[s];
    MutexLock l(&shard.mu);
    sc.new_size[s] = shard.size;
    for (uint32_t k = begin; k < end; ++k) {
      const uint32_t u = sc.shards.order[k];
      if (sc.pos[u] >= 0 || sc.pos[u] == kMissRejected) continue;
      int64_t pos = -1;
      if (sc.new_size[s] < shard.capacity) {
        pos = sc.new_size[s]++;
        shard.pinned[pos] = 1;  // not a victim for the next miss
      } else {
        pos = shard.ChooseVictim();
        if (pos >= 0 && shard.dirty[pos] != 0) {
          sc.evict_keys.resize(sc.evict_keys.size() + kKeySize);
          KeyOf(shard.keys[pos], sc.evict_keys.data() + sc.evict_keys.size() - kKeySize);
          evict(reinterpret_cast<const char*>(shard.Row(pos)));
        }
      }
      if (pos < 0) {
        sc.evict_keys.resize(sc.evict_keys.size() + kKeySize);
        EncodeRowKey(unique[u].slot, unique[u].table, unique[u].id,
                     sc.evict_keys.data() + sc.evict_keys.size() - kKeySize);
        evict(reinterpret_cast<const char*>(NextRow(sc, u)));
      }
      sc.slot[u] = pos;
    }
  }
  // 4b. The displaced rows, in key order (faster memtable inserts, see
  // Push). The push is already durable in the redo log, so a failure here
  // fails the store: a restart replays the log.
  if (const size_t n = sc.evict_keys.size() / kKeySize; n > 0) {
    sc.key_order.resize(n);
    for (uint32_t i = 0; i < n; ++i) sc.key_order[i] = i;
    const char* keys = sc.evict_keys.data();
    std::sort(sc.key_order.begin(), sc.key_order.end(), [keys](uint32_t a, uint32_t b) {
      return std::memcmp(keys + size_t{a} * kKeySize, keys + size_t{b} * kKeySize, kKeySize) < 0;
    });
    batch_.Clear();
    for (const uint32_t i : sc.key_order) {
      batch_.Put(rocksdb::Slice(keys + size_t{i} * kKeySize, kKeySize),
                 rocksdb::Slice(sc.evict_rows.data() + size_t{i} * row_bytes_, row_bytes_));
    }
    SS_RETURN_IF_ERROR(WriteBatchLocked("write back evicted rows"));
  }
  // 4c. Install: hits updated in place, misses over their claimed positions.
  for (int s = 0; s < kNumShards; ++s) {
    const uint32_t begin = sc.shards.begin[s], end = sc.shards.begin[s + 1];
    if (begin == end) continue;
    Shard& shard = shards_[s];
    MutexLock l(&shard.mu);
    // The marks of a hit are in arrays apart from its row: prefetch them
    // (and the row, possibly evicted from the CPU caches since step 1) ahead.
    auto prefetch = [&](uint32_t k) {
      const int64_t pos = sc.pos[sc.shards.order[k]];
      if (pos < 0) return;
      PrefetchBytes(shard.Row(static_cast<uint32_t>(pos)), row_bytes_);
      __builtin_prefetch(&shard.dirty[pos], 1, 3);
      __builtin_prefetch(&shard.carried[pos], 1, 3);
      __builtin_prefetch(&shard.referenced[pos], 1, 3);
      __builtin_prefetch(&shard.pinned[pos], 1, 3);
      __builtin_prefetch(&shard.flushing[pos], 1, 3);
    };
    for (uint32_t k = begin; k < std::min(end, begin + kPrefetchAhead); ++k) prefetch(k);
    for (uint32_t k = begin; k < end; ++k) {
      if (k + kPrefetchAhead < end) prefetch(k + kPrefetchAhead);
      const uint32_t u = sc.shards.order[k];
      const RowKey row_key{unique[u].table, unique[u].id};
      if (sc.pos[u] == kMissRejected) continue;
      if (sc.pos[u] >= 0) {
        const uint32_t pos = static_cast<uint32_t>(sc.pos[u]);
        std::memcpy(shard.Row(pos), NextRow(sc, u), row_bytes_);
        shard.dirty[pos] = generation;
        shard.carried[pos] = 0;
        shard.referenced[pos] = 1;
        shard.pinned[pos] = 0;
        if (shard.flushing[pos] != 0) shard.flushing[pos] = 2;  // the flushed copy is stale
      } else if (sc.slot[u] >= 0) {
        const uint32_t pos = static_cast<uint32_t>(sc.slot[u]);
        if (pos < shard.size) shard.index.erase(shard.keys[pos]);  // the victim
        shard.Place(pos, row_key, NextRow(sc, u), generation);
      }
      if (track_access_) shard.last_access[row_key].ms = now;
    }
    shard.size = sc.new_size[s];
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RowStoreImpl::EvictNow() {
  if (!track_access_) return 0;
  MutexLock f(&flush_mu_);
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(failure_);
  WriterSection writing(write_seq_);
  const int64_t now = NowMs();
  const int64_t ttl_ms = absl::ToInt64Milliseconds(options_.ttl);
  auto expired = [&](int64_t t) { return ttl_ms > 0 && now - t >= ttl_ms; };

  // Victims: expired rows, then the least recently accessed beyond max_rows.
  // A lookup may refresh a victim meanwhile; it is evicted anyway.
  std::vector<RowKey> victims;
  std::vector<int64_t> kept_times;
  for (int s = 0; s < kNumShards; ++s) {
    ReaderMutexLock l(&shards_[s].mu);
    for (const auto& [key, access] : shards_[s].last_access) {
      const int64_t t = std::atomic_ref<int64_t>(access.ms).load(std::memory_order_relaxed);
      if (expired(t)) {
        victims.push_back(key);
      } else if (options_.max_rows > 0) {
        kept_times.push_back(t);
      }
    }
  }
  const int64_t excess =
      options_.max_rows > 0 ? static_cast<int64_t>(kept_times.size()) - options_.max_rows : 0;
  if (excess > 0) {
    // Every row older than the excess-th oldest time goes, then rows at
    // exactly that time until the count is reached.
    std::nth_element(kept_times.begin(), kept_times.begin() + (excess - 1), kept_times.end());
    const int64_t cutoff = kept_times[excess - 1];
    const int64_t older =
        std::count_if(kept_times.begin(), kept_times.end(), [&](int64_t t) { return t < cutoff; });
    int64_t at_cutoff = excess - older;
    for (int s = 0; s < kNumShards; ++s) {
      ReaderMutexLock l(&shards_[s].mu);
      for (const auto& [key, access] : shards_[s].last_access) {
        const int64_t t = std::atomic_ref<int64_t>(access.ms).load(std::memory_order_relaxed);
        if (expired(t)) continue;  // a victim already
        if (t < cutoff || (t == cutoff && at_cutoff-- > 0)) victims.push_back(key);
      }
    }
  }
  if (victims.empty()) return 0;

  const int64_t n = static_cast<int64_t>(victims.size());
  char key[kKeySize];
  if (write_back_) {
    std::string& record =
        record_.Start(RecordType::kDeleteKeys, rows_stored_ - n, static_cast<uint32_t>(n));
    for (const RowKey& victim : victims) {
      KeyOf(victim, key);
      record.append(key, kKeySize);
    }
    SS_RETURN_IF_ERROR(AppendLocked(record_.Finish()));
  }
  batch_.Clear();
  for (const RowKey& victim : victims) {
    KeyOf(victim, key);
    batch_.Delete(rocksdb::Slice(key, kKeySize));
  }
  if (!write_back_) batch_.Put(MetaKey(kRowCountKey), RowCountValue(rows_stored_ - n));
  SS_RETURN_IF_ERROR(WriteBatchLocked("evict rows"));
  rows_stored_ -= n;
  rows_stored_published_.store(rows_stored_, std::memory_order_relaxed);
  for (const RowKey& victim : victims) {
    Uncache(victim, /*forget=*/true);
    changes_.Record(victim.table, victim.id);  // a tombstone in the next delta
  }
  evictions_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

}  // namespace shadowsync::ps::internal
