// SlotChunk.packed_rows (ps.proto): rows as fixed-size records, each the
// table (uint32), the id (uint64), then the row's floats, all little-endian
// and unpadded, checked by SlotChunk.packed_crc32. Beside the contract so
// that the server that writes them and the clients that read them share one
// definition. Pure functions over caller-owned buffers; thread-safe.
#ifndef SHADOWSYNC_PROTO_V1_PACKED_ROWS_H_
#define SHADOWSYNC_PROTO_V1_PACKED_ROWS_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "zlib.h"

namespace shadowsync::v1 {

static_assert(std::endian::native == std::endian::little,
              "packed rows are copied as they lie in memory");

inline constexpr size_t kPackedRowHeaderBytes = sizeof(uint32_t) + sizeof(uint64_t);

// Bytes of one record of a row of `floats` floats.
constexpr size_t PackedRowBytes(size_t floats) {
  return kPackedRowHeaderBytes + floats * sizeof(float);
}

// Appends one record; `value_bytes` holds the row's floats.
inline void AppendPackedRow(std::string* out, uint32_t table, uint64_t id,
                            std::string_view value_bytes) {
  char header[kPackedRowHeaderBytes];
  std::memcpy(header, &table, sizeof(table));
  std::memcpy(header + sizeof(table), &id, sizeof(id));
  out->append(header, sizeof(header));
  out->append(value_bytes.data(), value_bytes.size());
}

// SlotChunk.packed_crc32: zlib's CRC-32, the export format's checksum too,
// so that a client writing the records to an export file as they are
// extends the file's CRC with crc32_combine instead of a second pass.
inline uint32_t PackedRowsCrc(std::string_view packed) {
  return static_cast<uint32_t>(
      crc32_z(0, reinterpret_cast<const Bytef*>(packed.data()), packed.size()));
}

// The packed_crc32 of a chunk with tombstones: over the rows, then the
// tombstones.
inline uint32_t PackedChunkCrc(std::string_view rows, std::string_view tombstones) {
  return static_cast<uint32_t>(crc32_z(
      PackedRowsCrc(rows), reinterpret_cast<const Bytef*>(tombstones.data()), tombstones.size()));
}

struct PackedRow {
  uint32_t table;
  uint64_t id;
  // Points into the packed bytes, which stay 4-byte aligned as long as the
  // buffer is: every record is a multiple of 4 bytes long.
  std::span<const float> values;
};

// Record `i` of `packed`, whose records hold `floats` floats each; the
// caller checks that packed.size() is a multiple of PackedRowBytes(floats).
inline PackedRow PackedRowAt(std::string_view packed, size_t floats, size_t i) {
  const char* p = packed.data() + i * PackedRowBytes(floats);
  PackedRow row;
  std::memcpy(&row.table, p, sizeof(row.table));
  std::memcpy(&row.id, p + sizeof(row.table), sizeof(row.id));
  row.values =
      std::span<const float>(reinterpret_cast<const float*>(p + kPackedRowHeaderBytes), floats);
  return row;
}

}  // namespace shadowsync::v1

#endif  // SHADOWSYNC_PROTO_V1_PACKED_ROWS_H_
