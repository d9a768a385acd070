#include "worker/checkpoint.h"

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace shadowsync::worker {
namespace {

// The layout is defined little-endian and written with memcpy.
static_assert(std::endian::native == std::endian::little);

constexpr char kMagic[8] = {'S', 'S', 'C', 'K', 'P', 'T', '0', '1'};
constexpr uint32_t kVersion = 1;
// magic, version, examples, param count, state count.
constexpr size_t kHeaderBytes = sizeof(kMagic) + 4 + 8 + 8 + 8;
constexpr size_t kCrcBytes = 4;

constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

constexpr uint32_t Crc32cOf(std::string_view data) {
  uint32_t crc = ~0u;
  for (char ch : data) {
    crc = kCrc32cTable[(crc ^ static_cast<unsigned char>(ch)) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}
// The standard check value (RFC 3720, appendix B.4).
static_assert(Crc32cOf("123456789") == 0xE3069283u);

template <typename T>
void Append(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T ReadAt(const std::string& data, size_t pos) {
  T v;
  std::memcpy(&v, data.data() + pos, sizeof(v));
  return v;
}

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

uint32_t Crc32c(std::string_view data) { return Crc32cOf(data); }

absl::Status SaveDenseCheckpoint(const std::string& path, const DenseCheckpointView& checkpoint) {
  std::string data;
  data.reserve(kHeaderBytes + checkpoint.params.size_bytes() + checkpoint.dense_state.size_bytes() +
               kCrcBytes);
  data.append(kMagic, sizeof(kMagic));
  Append<uint32_t>(data, kVersion);
  Append<int64_t>(data, checkpoint.examples);
  Append<uint64_t>(data, checkpoint.params.size());
  Append<uint64_t>(data, checkpoint.dense_state.size());
  data.append(reinterpret_cast<const char*>(checkpoint.params.data()),
              checkpoint.params.size_bytes());
  data.append(reinterpret_cast<const char*>(checkpoint.dense_state.data()),
              checkpoint.dense_state.size_bytes());
  Append<uint32_t>(data, Crc32cOf(data));

  return WriteFileAtomically(path, data);
}

absl::StatusOr<DenseCheckpoint> LoadDenseCheckpoint(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (!ec) return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
    return absl::UnavailableError(absl::StrCat("cannot stat ", path, ": ", ec.message()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open checkpoint file", path);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return ErrnoError("cannot read checkpoint file", path);
  if (data.size() >= sizeof(kMagic) && std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a ShadowSync dense checkpoint (bad magic)"));
  }
  if (data.size() < kHeaderBytes + kCrcBytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated checkpoint (", data.size(), " bytes)"));
  }
  // The checksum first: nothing below trusts a byte it has not covered.
  const size_t payload = data.size() - kCrcBytes;
  const uint32_t stored_crc = ReadAt<uint32_t>(data, payload);
  const uint32_t crc = Crc32cOf(std::string_view(data).substr(0, payload));
  if (crc != stored_crc) {
    return absl::DataLossError(
        absl::StrCat(path, ": checkpoint checksum mismatch (file corrupt or truncated)"));
  }
  size_t pos = sizeof(kMagic);
  const auto version = ReadAt<uint32_t>(data, pos);
  pos += 4;
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoint format version ", version,
                                                   ", this build reads ", kVersion));
  }
  DenseCheckpoint c;
  c.examples = ReadAt<int64_t>(data, pos);
  pos += 8;
  const auto num_params = ReadAt<uint64_t>(data, pos);
  pos += 8;
  const auto num_state = ReadAt<uint64_t>(data, pos);
  pos += 8;
  // Compared by division so huge counts cannot overflow the sum.
  const size_t floats = (payload - kHeaderBytes) / sizeof(float);
  if ((payload - kHeaderBytes) % sizeof(float) != 0 || num_params > floats ||
      num_state != floats - num_params) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint holds ", payload - kHeaderBytes,
                                            " payload bytes, its header says ", num_params,
                                            " params + ", num_state, " state floats"));
  }
  if (c.examples < 0) {
    return absl::DataLossError(absl::StrCat(path, ": negative example count ", c.examples));
  }
  c.params.resize(num_params);
  std::memcpy(c.params.data(), data.data() + pos, num_params * sizeof(float));
  pos += num_params * sizeof(float);
  c.dense_state.resize(num_state);
  std::memcpy(c.dense_state.data(), data.data() + pos, num_state * sizeof(float));
  return c;
}

}  // namespace shadowsync::worker
