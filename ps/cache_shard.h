// The row store's RAM cache (ps/row_store.h): kNumShards shards of cached
// rows with CLOCK replacement, plus each shard's last-access table, and the
// grouping of a request's rows by shard. Internal to ps/row_store*.cc.
// Thread-safety: a Shard's fields are guarded by its `mu` as annotated; the
// comments on `rows` and the marks say which are instead settled by the
// store's writer lock or relaxed atomics. ShardOrder is per-request scratch,
// not thread-safe.
#ifndef SHADOWSYNC_PS_CACHE_SHARD_H_
#define SHADOWSYNC_PS_CACHE_SHARD_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <new>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "ps/row_codec.h"

namespace shadowsync::ps::internal {

inline constexpr int kShardBits = 6;
inline constexpr int kNumShards = 1 << kShardBits;
// RAM a cached row costs beyond its floats: the key copy (16), the CLOCK,
// pin, flushing, carried and dirty marks (1 + 1 + 1 + 1 + 8) and the index
// entry (a 24-byte slot plus control byte, at absl's 7/8 maximum load: 29).
inline constexpr int64_t kCacheOverheadPerRow = 16 + 1 + 1 + 1 + 1 + 8 + 29;
// How far a lookup's cache fill searches for a clean row to replace.
inline constexpr int kFillScan = 64;

// Which cache shard a row lives in: the top bits of HashId, independent of
// the low bits `HashId % num_slots` uses.
inline int ShardOf(uint64_t hash) { return static_cast<int>(hash >> (64 - kShardBits)); }

// Orders request rows by cache shard (a counting sort), so each shard's lock
// is taken once per request rather than once per row.
struct ShardOrder {
  std::vector<uint32_t> order;          // row indices, grouped by shard
  uint32_t begin[kNumShards + 1] = {};  // shard s = order[begin[s], begin[s + 1])

  template <typename HashOf>
  void Build(size_t n, HashOf hash_of) {
    std::fill(std::begin(begin), std::end(begin), 0);
    for (size_t r = 0; r < n; ++r) ++begin[ShardOf(hash_of(r)) + 1];
    for (int s = 0; s < kNumShards; ++s) begin[s + 1] += begin[s];
    uint32_t next[kNumShards];
    std::copy(begin, begin + kNumShards, next);
    order.resize(n);
    for (size_t r = 0; r < n; ++r) order[next[ShardOf(hash_of(r))]++] = static_cast<uint32_t>(r);
  }
};

// One of kNumShards partitions of the RAM cache (rows by HashId's top bits)
// and of the last-access side table. The cache is a fixed array of
// `capacity` rows with CLOCK replacement: a hit sets the row's bit; the hand
// clears bits until it finds a clear one to replace. CLOCK, unlike LRU, lets
// hits run under a shared lock (the bit is a relaxed atomic).
//
// A cached row is dirty (dirty[pos] = the redo-log generation holding its
// latest after-image) until a checkpoint or its eviction writes it to
// RocksDB. Invariant: RocksDB holds the latest value of every row that is not
// cached. `carried[pos]` counts the checkpoints in a row that re-logged the
// row without a push changing it in between (saturating; 0 after a push),
// so a row that went cold is written to RocksDB once (kMaxCarries) instead
// of being re-logged by every checkpoint for as long as it stays cached.
struct Shard {
  mutable Mutex mu;
  // Constant after Init.
  uint32_t capacity = 0;
  int row_floats = 0;
  // Arrays of `capacity` entries; positions [0, size) are in use. Read under
  // mu, written under mu held exclusively, except: `referenced` bytes are
  // relaxed atomics that readers set under a shared lock; `pinned` is set
  // and cleared only by the writer holding write_mu_, under at least a
  // shared lock (it marks rows the push in progress has claimed, and is
  // clear between pushes, so checkpoints and fills, which take the lock
  // exclusively, see it settled); `flushing` marks rows a
  // checkpoint is writing to RocksDB (1, or 2 once a push changed the row
  // meanwhile, so the copy written is already stale), which must stay cached
  // (and in place) until that write has landed. clang cannot annotate the
  // pointees of array unique_ptrs.
  struct AlignedDelete {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<float[], AlignedDelete> rows;
  std::unique_ptr<RowKey[]> keys;
  std::unique_ptr<uint64_t[]> dirty;
  std::unique_ptr<uint8_t[]> carried;
  std::unique_ptr<uint8_t[]> referenced;
  std::unique_ptr<uint8_t[]> pinned;
  std::unique_ptr<uint8_t[]> flushing;
  absl::flat_hash_map<RowKey, uint32_t, RowKeyHasher> index ABSL_GUARDED_BY(mu);
  uint32_t size ABSL_GUARDED_BY(mu) = 0;
  uint32_t hand ABSL_GUARDED_BY(mu) = 0;
  // Last access (unix ms) of every stored row of this shard, when the store
  // evicts by TTL or row cap. `ms` is a relaxed atomic, updated under a
  // shared lock.
  struct AccessTime {
    mutable int64_t ms = 0;
  };
  absl::flat_hash_map<RowKey, AccessTime, RowKeyHasher> last_access ABSL_GUARDED_BY(mu);

  void Init(uint32_t cap, int floats) {
    capacity = cap;
    row_floats = floats;
    if (cap == 0) return;
    // Not value-initialised: pages are touched only as rows arrive. Cache-line
    // aligned, so a row of 64 bytes (dim 16) is one line, not two.
    rows.reset(static_cast<float*>(
        ::operator new[](sizeof(float) * size_t{cap} * floats, std::align_val_t{64})));
    keys.reset(new RowKey[cap]);
    dirty.reset(new uint64_t[cap]());
    carried.reset(new uint8_t[cap]());
    referenced.reset(new uint8_t[cap]());
    pinned.reset(new uint8_t[cap]());
    flushing.reset(new uint8_t[cap]());
  }

  int64_t Find(const RowKey& key) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    if (capacity == 0) return -1;
    auto it = index.find(key);
    return it == index.end() ? -1 : static_cast<int64_t>(it->second);
  }
  // Find with the key's HashId already known (RowKeyHasher's value).
  int64_t Find(const RowKey& key, uint64_t hash) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    if (capacity == 0) return -1;
    auto it = index.find(key, static_cast<size_t>(hash));
    return it == index.end() ? -1 : static_cast<int64_t>(it->second);
  }
  // Starts loading what Find(key) will read.
  void PrefetchIndex(const RowKey& key) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    if (capacity != 0) index.prefetch(key);
  }
  float* Row(uint32_t pos) const { return rows.get() + size_t{pos} * row_floats; }
  void MarkReferenced(uint32_t pos) const {
    std::atomic_ref<uint8_t> bit(referenced[pos]);
    if (bit.load(std::memory_order_relaxed) == 0) bit.store(1, std::memory_order_relaxed);
  }
  void Advance() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { hand = hand + 1 == capacity ? 0 : hand + 1; }

  // A lookup's fill: caches `row` (clean, as read from RocksDB) unless `key`
  // is cached already. Replaces only a clean row, so lookups never write to
  // RocksDB; gives up if kFillScan steps find none.
  void Fill(const RowKey& key, const float* row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (capacity == 0 || index.contains(key)) return;
    uint32_t pos = size;
    if (size < capacity) {
      ++size;
    } else {
      int steps = 0;
      while (referenced[hand] != 0 || dirty[hand] != 0) {
        referenced[hand] = 0;
        Advance();
        if (++steps == kFillScan) return;
      }
      pos = hand;
      Advance();
      index.erase(keys[pos]);
    }
    Place(pos, key, row, 0);
  }
  // The push's victim search: the next row neither pinned nor being
  // flushed whose CLOCK bit is clear, pinned for the caller; -1 if none.
  int64_t ChooseVictim() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // A cache of fewer rows than shards leaves some shards without any.
    if (capacity == 0) return -1;
    for (uint64_t step = 0; step <= 2 * uint64_t{capacity}; ++step) {
      const uint32_t pos = hand;
      Advance();
      if (pinned[pos] != 0 || flushing[pos] != 0) continue;
      if (referenced[pos] != 0) {
        referenced[pos] = 0;
        continue;
      }
      pinned[pos] = 1;
      return pos;
    }
    return -1;
  }
  // Puts `key` at `pos` (a free position, or one whose old row the caller
  // has dropped from the index).
  void Place(uint32_t pos, const RowKey& key, const float* row, uint64_t dirty_gen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    keys[pos] = key;
    index.insert_or_assign(key, pos);
    std::memcpy(Row(pos), row, sizeof(float) * row_floats);
    dirty[pos] = dirty_gen;
    carried[pos] = 0;
    referenced[pos] = 1;
    pinned[pos] = 0;
  }
  // Removes the row at `pos`, moving the last row into its place.
  void EraseAt(uint32_t pos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    index.erase(keys[pos]);
    const uint32_t last = --size;
    if (pos != last) {
      keys[pos] = keys[last];
      std::memcpy(Row(pos), Row(last), sizeof(float) * row_floats);
      dirty[pos] = dirty[last];
      carried[pos] = carried[last];
      referenced[pos] = referenced[last];
      index[keys[pos]] = pos;
    }
    if (hand >= size) hand = 0;
  }
  void Erase(const RowKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const int64_t pos = Find(key);
    if (pos >= 0) EraseAt(static_cast<uint32_t>(pos));
  }
  // Refreshes the last access of a stored row.
  void Touch(const RowKey& key, int64_t now_ms) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    auto it = last_access.find(key);
    if (it != last_access.end()) {
      std::atomic_ref<int64_t>(it->second.ms).store(now_ms, std::memory_order_relaxed);
    }
  }
};

}  // namespace shadowsync::ps::internal

#endif  // SHADOWSYNC_PS_CACHE_SHARD_H_
