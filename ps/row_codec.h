// How the row store (ps/row_store.h) lays out bytes: the 16-byte RocksDB key
// of a row, big-endian slot (u32) | table (u32) | id (u64), so one slot is one
// contiguous key range; and fixed-width values (row floats, metadata, redo-log
// fields) copied in native byte order, which must be little-endian.
// Internal to ps/row_store*.cc and ps/redo_log.cc. Stateless: thread-safe.
#ifndef SHADOWSYNC_PS_ROW_CODEC_H_
#define SHADOWSYNC_PS_ROW_CODEC_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/hash.h"

namespace shadowsync::ps::internal {

static_assert(std::endian::native == std::endian::little,
              "values, metadata and the redo log are stored in native little-endian order");

inline constexpr size_t kKeySize = 16;
// Caps the ownership bitmap (2 MiB) and keeps every slot far below the
// metadata prefix 0xFFFFFFFF.
inline constexpr uint32_t kMaxSlots = 1u << 24;

inline void PutBigEndian32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (24 - 8 * i));
}
inline uint32_t GetBigEndian32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

inline void EncodeRowKey(uint32_t slot, uint32_t table, uint64_t id, char* out) {
  PutBigEndian32(out, slot);
  PutBigEndian32(out + 4, table);
  PutBigEndian32(out + 8, static_cast<uint32_t>(id >> 32));
  PutBigEndian32(out + 12, static_cast<uint32_t>(id));
}

struct RowKey {
  uint32_t table = 0;
  uint64_t id = 0;
  bool operator==(const RowKey&) const = default;
};

struct RowKeyHasher {
  size_t operator()(const RowKey& k) const { return HashId(k.table, k.id); }
};

inline RowKey DecodeRowKey(const char* in) {
  return RowKey{GetBigEndian32(in + 4),
                (uint64_t{GetBigEndian32(in + 8)} << 32) | GetBigEndian32(in + 12)};
}

// The 4-byte prefix of slot `slot`: sorts before every row key of that slot,
// so [SlotBound(s), SlotBound(s + 1)) is exactly slot s.
inline std::string SlotBound(uint32_t slot) {
  std::string bound(4, '\0');
  PutBigEndian32(bound.data(), slot);
  return bound;
}

template <typename T>
std::string EncodeFixed(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void AppendFixed(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace shadowsync::ps::internal

#endif  // SHADOWSYNC_PS_ROW_CODEC_H_
