// The one stable 64-bit hash every component uses to place embedding rows:
// bucketing raw categorical values, slot assignment (DESIGN.md §4) and
// deterministic row initialisation. Changing any constant here invalidates
// stored data and shard maps, so it never changes.
#ifndef SHADOWSYNC_COMMON_HASH_H_
#define SHADOWSYNC_COMMON_HASH_H_

#include <bit>
#include <cstdint>
#include <span>

namespace shadowsync {

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijection on 64 bits
// with full avalanche. Pure function, safe everywhere.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Hash of an id within a table: distinct tables map the same raw id to
// independent values.
constexpr uint64_t HashId(uint32_t table, uint64_t id) {
  return Mix64(id ^ Mix64(0x5ad0'5eed'0000'0000ULL + table));
}

// The hash slot of an embedding row: slot = H(table, id) mod num_slots.
constexpr uint32_t SlotOf(uint32_t table, uint64_t id, uint32_t num_slots) {
  return static_cast<uint32_t>(HashId(table, id) % num_slots);
}

// A counter-based uniform in [0, 1) from any 64-bit key; used for
// deterministic initialisation that every process and restart agrees on.
constexpr float UniformFromKey(uint64_t key) {
  return static_cast<float>(Mix64(key) >> 40) * (1.0f / 16777216.0f);
}

// Per-row hashes of the parameter servers' checksums, shared by everything
// that streams rows (resharding, model export and import):
//   RowKeyHash(t, id)      = Mix64(HashId(t, id))
//   RowValueHash(t, id, v) = h_n, where h_0 = RowKeyHash(t, id) and
//                            h_{i+1} = Mix64(h_i ^ bits(v[i])), bits(x) being
//                            the IEEE-754 binary32 pattern of x
// over the full stored value (dim values, then optimizer state). A set's
// checksum is the sum mod 2^64, so it is independent of order and of
// num_slots.
constexpr uint64_t RowKeyHash(uint32_t table, uint64_t id) { return Mix64(HashId(table, id)); }
constexpr uint64_t RowValueHash(uint32_t table, uint64_t id, std::span<const float> values) {
  uint64_t h = RowKeyHash(table, id);
  for (float v : values) h = Mix64(h ^ std::bit_cast<uint32_t>(v));
  return h;
}

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_HASH_H_
