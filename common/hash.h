// The one stable 64-bit hash every component uses to place embedding rows:
// bucketing raw categorical values, slot assignment (docs/resharding.md) and
// deterministic row initialisation. Changing any constant here invalidates
// stored data and shard maps, so it never changes. Pure constexpr functions;
// thread-safe.
#ifndef SHADOWSYNC_COMMON_HASH_H_
#define SHADOWSYNC_COMMON_HASH_H_

#include <bit>
#include <cstdint>
#include <span>

namespace shadowsync {

// SplitMix64's increment, the golden ratio in 64 bits.
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijection on 64 bits
// with full avalanche. Pure function, safe everywhere.
constexpr uint64_t Mix64(uint64_t x) {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// SplitMix64 as a generator: the next value of the sequence `state` seeds,
// the same on every platform (unlike the standard library's engines and
// distributions). Advances `state`.
constexpr uint64_t SplitMix64Next(uint64_t& state) {
  const uint64_t x = state;
  state += kGoldenGamma;
  return Mix64(x);
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
//   RowValueHash(t, id, v) over the values as 64-bit words, two floats each
//                          (w_j = bits(v[2j]) | bits(v[2j+1]) << 32, a last odd
//                          float alone; bits(x) is the IEEE-754 binary32
//                          pattern of x), word j folded into lane j mod 4:
//                          l_k = Mix64(RowKeyHash(t, id) + k), then
//                          l = Mix64(l ^ w_j); the result is
//                          Mix64(Mix64(Mix64(l_0 ^ l_1) ^ l_2) ^ l_3 ^ n),
//                          n being the number of floats,
// over the full stored value (dim values, then optimizer state). Four
// independent lanes instead of one chain of a Mix64 per float: the hash is
// on every row of every export, import and reshard, on both ends, and the
// one chain cost 270 ns per 64-float row. A set's checksum is the sum mod
// 2^64, so it is independent of order and of num_slots. Nothing stores these
// hashes; both ends of a stream compute them with the same build.
constexpr uint64_t RowKeyHash(uint32_t table, uint64_t id) { return Mix64(HashId(table, id)); }
constexpr uint64_t RowValueHash(uint32_t table, uint64_t id, std::span<const float> values) {
  const uint64_t key = RowKeyHash(table, id);
  uint64_t lane[4] = {Mix64(key), Mix64(key + 1), Mix64(key + 2), Mix64(key + 3)};
  auto word = [&](size_t j) {  // floats j and j + 1
    return std::bit_cast<uint32_t>(values[j]) |
           (static_cast<uint64_t>(std::bit_cast<uint32_t>(values[j + 1])) << 32);
  };
  const size_t n = values.size();
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {  // one word per lane, so the four chains overlap
    lane[0] = Mix64(lane[0] ^ word(j));
    lane[1] = Mix64(lane[1] ^ word(j + 2));
    lane[2] = Mix64(lane[2] ^ word(j + 4));
    lane[3] = Mix64(lane[3] ^ word(j + 6));
  }
  for (; j + 2 <= n; j += 2) lane[(j / 2) % 4] = Mix64(lane[(j / 2) % 4] ^ word(j));
  if (j < n) lane[(j / 2) % 4] = Mix64(lane[(j / 2) % 4] ^ std::bit_cast<uint32_t>(values[j]));
  return Mix64(Mix64(Mix64(lane[0] ^ lane[1]) ^ lane[2]) ^ lane[3] ^ n);
}

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_HASH_H_
