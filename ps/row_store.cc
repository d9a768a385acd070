#include "ps/row_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"

namespace shadowsync::ps {

static_assert(std::endian::native == std::endian::little,
              "values, metadata and the redo log are stored in native little-endian order");

namespace {

namespace fs = std::filesystem;

constexpr int kShardBits = 6;
constexpr int kNumShards = 1 << kShardBits;
constexpr size_t kKeySize = 16;
// Caps the ownership bitmap (2 MiB) and keeps every slot far below the
// metadata prefix 0xFFFFFFFF.
constexpr uint32_t kMaxSlots = 1u << 24;
constexpr int kMaxDim = 4096;
// RAM a cached row costs beyond its floats: the key copy (16), the CLOCK,
// pin, flushing, carried and dirty marks (1 + 1 + 1 + 1 + 8) and the index
// entry (a 24-byte slot plus control byte, at absl's 7/8 maximum load: 29).
constexpr int64_t kCacheOverheadPerRow = 16 + 1 + 1 + 1 + 1 + 8 + 29;
// A dirty row that this many checkpoints in a row re-logged without a push
// in between goes to RocksDB at the next one. Re-logging a row is a
// sequential append (~0.2 us); writing it to RocksDB a memtable insert plus
// its share of flushes and compactions (~2-3 us), so rows that are pushed
// again within a few checkpoints are cheaper to re-log, and truly cold ones
// stop costing anything after this many.
constexpr uint8_t kMaxCarries = 8;
// Hits are bound by RAM latency (a request's rows are scattered over the
// cache): index probes run this many rows ahead of their use as prefetches,
// and the cached rows of a shard's batch are prefetched before they are
// copied, so the misses overlap.
constexpr uint32_t kPrefetchAhead = 8;
// How far a lookup's cache fill searches for a clean row to replace.
constexpr int kFillScan = 64;
// Debian's RocksDB is not built with ThreadSanitizer, so TSAN cannot see how
// RocksDB's write group hands one thread's batch to the thread that writes
// the group (atomics in uninstrumented code), and reports a race on the
// batch. Under TSAN only, the store serialises its RocksDB writes itself.
#if defined(__SANITIZE_THREAD__)
constexpr bool kSerializeDbWrites = true;
#else
constexpr bool kSerializeDbWrites = false;
#endif

// Metadata keys: 0xFFFFFFFF then a name. Row keys are exactly 16 bytes and
// start with a slot < kMaxSlots, so neither the length nor the prefix can
// collide, and every row scan bounded by [slot 0, slot num_slots) skips them.
constexpr char kFormatKey[] =
    "\xff\xff\xff\xff"
    "format";
constexpr char kOwnershipKey[] =
    "\xff\xff\xff\xff"
    "ownership";
constexpr char kRowCountKey[] =
    "\xff\xff\xff\xff"
    "row_count";
constexpr uint32_t kFormatVersion = 1;

template <size_t N>
rocksdb::Slice MetaKey(const char (&key)[N]) {
  return rocksdb::Slice(key, N - 1);
}

void PutBigEndian32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (24 - 8 * i));
}
uint32_t GetBigEndian32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

void EncodeRowKey(uint32_t slot, uint32_t table, uint64_t id, char* out) {
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

RowKey DecodeRowKey(const char* in) {
  return RowKey{GetBigEndian32(in + 4),
                (uint64_t{GetBigEndian32(in + 8)} << 32) | GetBigEndian32(in + 12)};
}

// The 4-byte prefix of slot `slot`: sorts before every row key of that slot,
// so [SlotBound(s), SlotBound(s + 1)) is exactly slot s.
std::string SlotBound(uint32_t slot) {
  std::string bound(4, '\0');
  PutBigEndian32(bound.data(), slot);
  return bound;
}

// Prefetches the cache lines of [p, p + n) for reading (and writing).
inline void PrefetchBytes(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  const char* line = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(c) & ~uintptr_t{63});
  for (; line < c + n; line += 64) __builtin_prefetch(line, 1, 3);
}

// Which cache shard a row lives in: the top bits of HashId, independent of
// the low bits `HashId % num_slots` uses.
inline int ShardOf(uint64_t hash) { return static_cast<int>(hash >> (64 - kShardBits)); }

template <typename T>
std::string EncodeFixed(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void AppendFixed(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain() || s.IsIncomplete()) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

absl::Status ErrnoError(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status ValidateOptions(const RowStoreOptions& o) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.db_path.empty()) return bad("db_path: empty");
  if (o.dim < 1 || o.dim > kMaxDim) return bad("dim: ", o.dim, ", want 1..", kMaxDim);
  if (o.tables.empty()) return bad("tables: empty");
  for (size_t t = 0; t < o.tables.size(); ++t) {
    if (o.tables[t].hash_buckets == 0) return bad("tables[", t, "].hash_buckets: 0");
  }
  if (o.num_slots < 1 || o.num_slots > kMaxSlots) {
    return bad("num_slots: ", o.num_slots, ", want 1..", kMaxSlots);
  }
  if (o.cache_bytes < 0) return bad("cache_bytes: ", o.cache_bytes, " is negative");
  if (o.block_cache_bytes < 0) {
    return bad("block_cache_bytes: ", o.block_cache_bytes, " is negative");
  }
  if (o.checkpoint_log_bytes < 1) {
    return bad("checkpoint_log_bytes: ", o.checkpoint_log_bytes, ", want >= 1");
  }
  if (o.checkpoint_interval <= absl::ZeroDuration()) {
    return bad("checkpoint_interval: ", absl::FormatDuration(o.checkpoint_interval), ", want > 0");
  }
  if (o.admission_min_count < 1 || o.admission_min_count > 65535) {
    return bad("admission_min_count: ", o.admission_min_count, ", want 1..65535");
  }
  if (!(o.admission_probability >= 0.0 && o.admission_probability <= 1.0)) {
    return bad("admission_probability: ", o.admission_probability, ", want 0..1");
  }
  if (o.ttl < absl::ZeroDuration())
    return bad("ttl: ", absl::FormatDuration(o.ttl), " is negative");
  if (o.max_rows < 0) return bad("max_rows: ", o.max_rows, " is negative");
  if (!std::isfinite(o.optimizer.learning_rate)) return bad("optimizer.learning_rate: not finite");
  return absl::OkStatus();
}

// RocksDB tuned for random point reads of small fixed-size rows;
// docs/ps-storage.md gives the measurements behind each choice.
rocksdb::Options MakeDbOptions(const RowStoreOptions& o) {
  rocksdb::Options db;
  db.create_if_missing = true;
  // Durability (docs/durability.md): every Write() hands its WAL record to
  // the OS before returning, and recovery keeps every complete record.
  db.manual_wal_flush = false;
  db.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db.max_background_jobs = 4;
  db.bytes_per_sync = 1 << 20;
  db.keep_log_file_num = 4;
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db.write_buffer_size = 64 << 20;
  db.max_write_buffer_number = 4;
  db.level_compaction_dynamic_level_bytes = true;
  db.max_bytes_for_level_base = 512 << 20;
  db.target_file_size_base = 64 << 20;
  // Rows are high-entropy floats: compression saves almost nothing and costs
  // read latency (measured in docs/ps-storage.md).
  db.compression = rocksdb::kNoCompression;
  db.bottommost_compression = rocksdb::kDisableCompressionOption;
  // Memtable bloom on whole keys: a miss (an unseen row) skips the skiplist.
  db.memtable_whole_key_filtering = true;
  db.memtable_prefix_bloom_size_ratio = 0.02;

  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  table.data_block_hash_table_util_ratio = 0.75;
  table.block_size = 4096;
  if (o.block_cache_bytes > 0) {
    table.block_cache = rocksdb::NewLRUCache(static_cast<size_t>(o.block_cache_bytes));
  } else {
    table.no_block_cache = true;
  }
  db.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return db;
}

// ---------------------------------------------------------------------------
// Redo log: what makes a write-back cache durable. Every mutation is appended
// (one record per request) before the request returns; checkpoints write the
// cached rows to RocksDB and delete the logs they cover; Open replays what is
// left. Records carry after-images (whole rows), so replay is idempotent and
// needs no optimizer state.
//
// Record = header {magic u32, type u32, payload length u64, checksum u64},
// then the payload: rows_after i64 (the store's row count once the record
// is applied), count u32, then
//   kRows:        count x (16-byte row key, row_floats floats)
//   kDeleteKeys:  count x 16-byte row key
//   kDeleteSlots: count x slot u32
enum class RecordType : uint32_t { kRows = 1, kDeleteKeys = 2, kDeleteSlots = 3 };

struct RecordHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t length;
  uint64_t checksum;
};
static_assert(sizeof(RecordHeader) == 24);
constexpr uint32_t kRecordMagic = 0x52454430;  // "0DER"
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 34;

// Detects torn and corrupt records; four independent lanes keep it at a
// fraction of a nanosecond per byte.
uint64_t RecordChecksum(uint32_t type, const char* data, size_t n) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  uint64_t lane[4] = {Mix64(type), Mix64(n), Mix64(type + 1), Mix64(n + 1)};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, data + i + 8 * l, 8);
      lane[l] = (lane[l] ^ w) * kMul;
      lane[l] ^= lane[l] >> 29;
    }
  }
  uint64_t h = Mix64(lane[0]) ^ Mix64(lane[1] + 1) ^ Mix64(lane[2] + 2) ^ Mix64(lane[3] + 3);
  for (; i < n; ++i) h = (h ^ static_cast<uint8_t>(data[i])) * kMul;
  return Mix64(h);
}

constexpr size_t kRecordPrefix = sizeof(int64_t) + sizeof(uint32_t);  // rows_after, count

// A record under construction: the header's room first, so the finished
// record goes out in one write.
class RecordBuilder {
 public:
  std::string& Start(RecordType type, int64_t rows_after, uint32_t count) {
    type_ = type;
    buffer_.assign(sizeof(RecordHeader), '\0');
    AppendFixed(buffer_, rows_after);
    AppendFixed(buffer_, count);
    return buffer_;
  }
  void SetCount(int64_t rows_after, uint32_t count) {
    std::memcpy(buffer_.data() + sizeof(RecordHeader), &rows_after, sizeof(rows_after));
    std::memcpy(buffer_.data() + sizeof(RecordHeader) + sizeof(rows_after), &count, sizeof(count));
  }
  std::string_view Finish() {
    const char* payload = buffer_.data() + sizeof(RecordHeader);
    const size_t n = buffer_.size() - sizeof(RecordHeader);
    const RecordHeader header{kRecordMagic, static_cast<uint32_t>(type_), n,
                              RecordChecksum(static_cast<uint32_t>(type_), payload, n)};
    std::memcpy(buffer_.data(), &header, sizeof(header));
    return buffer_;
  }

 private:
  RecordType type_ = RecordType::kRows;
  std::string buffer_;
};

std::string LogFileName(uint64_t generation) {
  char name[48];
  std::snprintf(name, sizeof(name), "redo-%020llu.log",
                static_cast<unsigned long long>(generation));
  return name;
}

std::optional<uint64_t> ParseLogFileName(const std::string& name) {
  uint64_t generation = 0;
  if (name.size() != 29 || !name.starts_with("redo-") || !name.ends_with(".log") ||
      !absl::SimpleAtoi(absl::string_view(name.data() + 5, 20), &generation)) {
    return std::nullopt;
  }
  return generation;
}

absl::Status SyncDirectory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(absl::StrCat("open ", dir.string()));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError(absl::StrCat("fsync ", dir.string()));
  return absl::OkStatus();
}

// One log file, appended to by the single writer at a time.
class RedoLog {
 public:
  static absl::StatusOr<std::unique_ptr<RedoLog>> Create(const fs::path& dir, uint64_t generation,
                                                         bool sync) {
    const fs::path path = dir / LogFileName(generation);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError(absl::StrCat("create redo log ", path.string()));
    std::unique_ptr<RedoLog> log(new RedoLog(fd, path, sync));
    // The directory entry must survive a machine crash before records do.
    if (sync) SS_RETURN_IF_ERROR(SyncDirectory(dir));
    return log;
  }
  ~RedoLog() { ::close(fd_); }
  RedoLog(const RedoLog&) = delete;
  RedoLog& operator=(const RedoLog&) = delete;

  // Writes `record` at the end of the file (and syncs it if asked). On
  // failure the file is cut back to its previous end, so replay never stops
  // early at a torn record followed by good ones.
  absl::Status Append(std::string_view record) {
    size_t done = 0;
    while (done < record.size()) {
      const ssize_t n = ::pwrite(fd_, record.data() + done, record.size() - done,
                                 static_cast<off_t>(size_ + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail(absl::StrCat("append to ", path_.string()));
      done += static_cast<size_t>(n);
    }
    if (sync_ && ::fdatasync(fd_) != 0) return Fail(absl::StrCat("fdatasync ", path_.string()));
    size_ += static_cast<int64_t>(record.size());
    return absl::OkStatus();
  }
  int64_t size() const { return size_; }
  absl::Status Sync() {
    if (::fdatasync(fd_) != 0) return ErrnoError(absl::StrCat("fdatasync ", path_.string()));
    return absl::OkStatus();
  }

 private:
  RedoLog(int fd, fs::path path, bool sync) : fd_(fd), path_(std::move(path)), sync_(sync) {}
  absl::Status Fail(const std::string& what) {
    absl::Status status = ErrnoError(what);
    if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      status = absl::DataLossError(
          absl::StrCat(status.message(), "; and cannot truncate: ", std::strerror(errno)));
    }
    return status;
  }

  const int fd_;
  const fs::path path_;
  const bool sync_;
  int64_t size_ = 0;
};

// The redo logs in `dir`, oldest first.
absl::StatusOr<std::vector<std::pair<uint64_t, fs::path>>> ListLogs(const fs::path& dir) {
  std::vector<std::pair<uint64_t, fs::path>> logs;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (std::optional<uint64_t> g = ParseLogFileName(entry.path().filename().string())) {
      logs.emplace_back(*g, entry.path());
    }
  }
  if (ec) return absl::UnavailableError(absl::StrCat("list ", dir.string(), ": ", ec.message()));
  std::sort(logs.begin(), logs.end());
  return logs;
}

// Calls apply(type, payload) for each record of the log at `path`, in order,
// up to the first record cut short or failing its checksum. In the newest log
// that is the write a kill interrupted (nothing follows it). In an older one
// it can only follow a machine crash without sync_writes (the OS lost part of
// the file): replay goes on with the next log, so every row still gets its
// newest surviving value, and says so on stderr.
absl::Status ReadLog(const fs::path& path, bool newest,
                     const std::function<absl::Status(RecordType, std::string_view)>& apply,
                     int64_t* records, bool* complete) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (file == nullptr) return ErrnoError(absl::StrCat("open redo log ", path.string()));
  std::string payload;
  int64_t offset = 0;
  while (true) {
    RecordHeader header;
    const size_t got = std::fread(&header, 1, sizeof(header), file.get());
    if (got == 0 && std::feof(file.get())) return absl::OkStatus();
    bool torn =
        got != sizeof(header) || header.magic != kRecordMagic || header.length > kMaxRecordBytes;
    if (!torn) {
      payload.resize(header.length);
      torn = std::fread(payload.data(), 1, payload.size(), file.get()) != payload.size() ||
             RecordChecksum(header.type, payload.data(), payload.size()) != header.checksum;
    }
    if (torn) {
      if (!newest) {
        std::fprintf(stderr, "redo log %s: bad record at offset %lld; skipping the rest\n",
                     path.c_str(), static_cast<long long>(offset));
        *complete = false;
      }
      return absl::OkStatus();
    }
    SS_RETURN_IF_ERROR(apply(static_cast<RecordType>(header.type), payload));
    ++*records;
    offset += static_cast<int64_t>(sizeof(header) + header.length);
  }
}

// ---------------------------------------------------------------------------

// Counts occurrences in bounded memory for min-count admission: a count-min
// sketch of 16-bit counters, all halved periodically so stale counts age out
// (TinyLFU's reset). May over-count through collisions, never under-count
// within a period.
class CountMinSketch {
 public:
  CountMinSketch() : counters_(new uint16_t[kRows * kWidth]()) {}

  // Adds one occurrence of `hash` and returns its estimated count.
  uint32_t Add(uint64_t hash) {
    uint32_t estimate = UINT32_MAX;
    for (int r = 0; r < kRows; ++r) {
      uint16_t& c = counters_[r * kWidth + (Mix64(hash + r) & (kWidth - 1))];
      if (c < UINT16_MAX) ++c;
      estimate = std::min<uint32_t>(estimate, c);
    }
    if (++additions_ >= kDecayEvery) {
      for (size_t i = 0; i < kRows * kWidth; ++i) counters_[i] /= 2;
      additions_ = 0;
    }
    return estimate;
  }

 private:
  static constexpr int kRows = 4;
  static constexpr size_t kWidth = size_t{1} << 18;
  static constexpr int64_t kDecayEvery = int64_t{1} << 21;
  std::unique_ptr<uint16_t[]> counters_;
  int64_t additions_ = 0;
};

// Finds repeated (table, id) pairs within one request without allocating:
// open addressing over a table that only grows, with a generation stamp so
// Reset() is O(1).
class DedupIndex {
 public:
  void Reset(size_t max_entries) {
    const size_t want = std::bit_ceil(std::max<size_t>(16, 2 * max_entries));
    if (want > slots_.size()) {
      slots_.assign(want, Slot{});
      generation_ = 0;
    }
    mask_ = slots_.size() - 1;
    if (++generation_ == 0) {  // Wrapped: stale stamps could match again.
      std::fill(slots_.begin(), slots_.end(), Slot{});
      generation_ = 1;
    }
  }
  // The value stored for (table, id), inserting `value` if absent.
  uint32_t FindOrInsert(uint64_t hash, uint32_t table, uint64_t id, uint32_t value) {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.generation != generation_) {
        s = Slot{id, table, generation_, value};
        return value;
      }
      if (s.id == id && s.table == table) return s.value;
    }
  }

 private:
  struct Slot {
    uint64_t id = 0;
    uint32_t table = 0;
    uint32_t generation = 0;
    uint32_t value = 0;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  uint32_t generation_ = 0;
};

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

// Batched RocksDB point reads; buffers persist across calls so the hot path
// does not allocate.
struct MultiGetBuffers {
  std::vector<char> key_bytes;
  std::vector<rocksdb::Slice> keys;
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;

  char* Prepare(size_t n) {
    key_bytes.resize(n * kKeySize);
    keys.resize(n);
    if (values.size() < n) values.resize(n);
    statuses.resize(n);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = rocksdb::Slice(key_bytes.data() + i * kKeySize, kKeySize);
    }
    return key_bytes.data();
  }
  void Run(rocksdb::DB* db, const rocksdb::ReadOptions& options, size_t n) {
    db->MultiGet(options, db->DefaultColumnFamily(), n, keys.data(), values.data(),
                 statuses.data());
  }
  // Releases pinned blocks; keeps the buffers.
  void Release(size_t n) {
    for (size_t i = 0; i < n; ++i) values[i].Reset();
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

// An increment of `seq` to odd on entry and back to even on exit, around any
// change of rows. Lookups fill the cache only if `seq` was even and
// unchanged from before their read to their fill, so a fill never installs a
// value some writer has replaced since.
class WriterSection {
 public:
  explicit WriterSection(std::atomic<uint64_t>& seq) : seq_(seq) {
    seq_.fetch_add(1, std::memory_order_acq_rel);
  }
  ~WriterSection() { seq_.fetch_add(1, std::memory_order_acq_rel); }
  WriterSection(const WriterSection&) = delete;
  WriterSection& operator=(const WriterSection&) = delete;

 private:
  std::atomic<uint64_t>& seq_;
};

struct SnapshotHolder {
  rocksdb::DB* db = nullptr;
  const rocksdb::Snapshot* snapshot = nullptr;
  SnapshotHolder() = default;
  SnapshotHolder(const SnapshotHolder&) = delete;
  SnapshotHolder& operator=(const SnapshotHolder&) = delete;
  ~SnapshotHolder() {
    if (snapshot != nullptr) db->ReleaseSnapshot(snapshot);
  }
};

class RowStoreImpl final : public RowStore {
 public:
  RowStoreImpl(RowStoreOptions options, std::unique_ptr<rocksdb::DB> db)
      : options_(std::move(options)),
        dim_(options_.dim),
        row_floats_(options_.dim * (1 + model::StateFloatsPerParam(options_.optimizer.kind))),
        row_bytes_(sizeof(float) * row_floats_),
        track_access_(options_.ttl > absl::ZeroDuration() || options_.max_rows > 0),
        filter_min_count_(options_.admission_min_count > 1),
        filter_probability_(options_.admission_probability < 1.0),
        cache_rows_(options_.cache_bytes /
                    (static_cast<int64_t>(row_bytes_) + kCacheOverheadPerRow)),
        write_back_(cache_rows_ > 0),
        redo_dir_(fs::path(options_.db_path) / "redo"),
        ingest_dir_(fs::path(options_.db_path) / "ingest"),
        db_(std::move(db)),
        shards_(new Shard[kNumShards]),
        sketch_(filter_min_count_ ? std::make_unique<CountMinSketch>() : nullptr) {
    for (int s = 0; s < kNumShards; ++s) {
      shards_[s].Init(
          static_cast<uint32_t>(cache_rows_ / kNumShards + (s < cache_rows_ % kNumShards)),
          row_floats_);
    }
    // Write-back: the redo log carries sync_writes; RocksDB's WAL is synced
    // before any log it makes redundant is deleted.
    write_options_.sync = options_.sync_writes && !write_back_;
    // Imports in write-back mode: the redo log carries them (see
    // ImportRowBlock), so RocksDB's WAL would be a second copy.
    import_write_options_.disableWAL = true;
  }

  ~RowStoreImpl() override;

  // Reads the metadata, replays redo logs, starts the checkpointer.
  absl::Status Start();

  absl::Status SetOwnership(uint64_t epoch, std::vector<bool> owned) override;
  uint64_t epoch() const override { return epoch_published_.load(std::memory_order_acquire); }
  absl::Status Lookup(std::span<model::TableRows> rows) override;
  absl::Status Push(std::span<const model::TableRows> grads) override;
  absl::Status ExportSlots(
      const std::vector<uint32_t>& slots,
      const std::function<absl::Status(uint32_t slot, const StoredRow&)>& visit) override;
  absl::StatusOr<std::unique_ptr<Snapshot>> TakeSnapshot() override;
  absl::Status ImportRows(std::span<const StoredRow> rows) override;
  absl::Status ImportRowBlock(const RowBlock& rows) override;
  absl::StatusOr<int64_t> DropSlots(const std::vector<uint32_t>& slots) override;
  absl::StatusOr<int64_t> Checkpoint(const std::string& path) override;
  absl::StatusOr<Checksums> ComputeChecksums() override;
  absl::StatusOr<int64_t> EvictNow() override;
  RowStoreStats stats() const override;
  const RowStoreOptions& options() const override { return options_; }

 private:
  // What the store knows of a slot's rows (slot_state_). Every row of an
  // unknown slot predates Open, so RocksDB has a key for it.
  static constexpr uint8_t kSlotUnknown = 0;
  static constexpr uint8_t kSlotEmpty = 1;  // no row, cached or stored
  static constexpr uint8_t kSlotMayHaveRows = 2;

  // Marker values of PushScratch::pos for rows not in the cache.
  static constexpr int64_t kMissStored = -1;    // read from RocksDB
  static constexpr int64_t kMissNew = -2;       // not stored; admitted now
  static constexpr int64_t kMissRejected = -3;  // not stored; admission said no

  struct UniqueRow {
    uint64_t hash;
    uint64_t id;
    uint32_t table;
    uint32_t slot;
  };
  // Push's buffers, reused across pushes (writers are serialised).
  struct PushScratch {
    DedupIndex dedup;
    std::vector<UniqueRow> unique;
    std::vector<float> grad;    // unique.size() * dim, summed
    std::vector<float> next;    // unique.size() * row_floats, the rows after the update
    std::vector<int64_t> pos;   // cache position of a hit, or a kMiss* marker
    std::vector<int64_t> slot;  // for misses: the cache position claimed, or -1
    std::vector<uint32_t> misses;
    std::vector<uint32_t> key_order;
    std::vector<char> evict_keys;  // rows UpdateCacheLocked writes to RocksDB: keys
    std::vector<char> evict_rows;  // and values
    uint32_t new_size[kNumShards];
    ShardOrder shards;
    MultiGetBuffers get;
    char key[kKeySize];
  };

  int64_t NowMs() const { return absl::ToUnixMillis(options_.now ? options_.now() : absl::Now()); }
  // Every RocksDB write of a running store goes through these (see
  // kSerializeDbWrites).
  rocksdb::Status DbWrite(const rocksdb::WriteOptions& options, rocksdb::WriteBatch* batch) {
    if (!kSerializeDbWrites) return db_->Write(options, batch);
    MutexLock l(&db_write_mu_);
    return db_->Write(options, batch);
  }
  rocksdb::Status DbPut(const rocksdb::WriteOptions& options, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) {
    rocksdb::WriteBatch batch;
    batch.Put(key, value).PermitUncheckedError();  // fails only past 4 GiB
    return DbWrite(options, &batch);
  }
  float* NextRow(PushScratch& sc, uint32_t u) const {
    return sc.next.data() + size_t{u} * row_floats_;
  }
  std::string RowCountValue(int64_t rows) const { return EncodeFixed(rows); }
  std::string Describe(uint32_t table, uint64_t id) const {
    return absl::StrCat("row (table ", table, ", id ", id, ")");
  }
  void KeyOf(const RowKey& key, char* out) const {
    EncodeRowKey(SlotOf(key.table, key.id, options_.num_slots), key.table, key.id, out);
  }
  // InvalidArgument if a request names tables beyond the configured ones.
  template <typename Rows>
  absl::Status CheckTables(std::span<Rows> rows) const;
  absl::Status ValidateSlots(const std::vector<uint32_t>& slots,
                             std::vector<uint32_t>* sorted) const;
  // Blocks while SetOwnership is pending, so it cannot starve.
  void PassTurnstile() { MutexLock l(&turnstile_); }
  absl::Status ReadStoredRow(const rocksdb::PinnableSlice& value, const rocksdb::Status& status,
                             uint32_t table, uint64_t id, bool* found) const;
  // Visits the key of every stored row in RocksDB.
  absl::Status ScanKeys(const std::function<void(const RowKey&)>& visit) const;

  bool Admit(uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Writes batch_ to RocksDB; a failure fails the store (see failure_).
  absl::Status WriteBatchLocked(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    return WriteBatchLocked(what, write_options_);
  }
  absl::Status WriteBatchLocked(const char* what, const rocksdb::WriteOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Whether RocksDB holds a row of a slot in [begin, end).
  absl::StatusOr<bool> AnyRowInDbLocked(uint32_t begin, uint32_t end) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // How many of `rows` (in key order, `keys` their encoded keys) are stored
  // nowhere yet; marks their slots as holding rows.
  absl::StatusOr<int64_t> CountNewRowsLocked(const RowBlock& rows, const char* keys,
                                             const uint32_t* slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Writes `rows` (in key order, `keys` their encoded keys) into an SST file
  // and has RocksDB ingest it; the store then holds `rows_after` rows.
  absl::Status IngestLocked(const RowBlock& rows, const char* keys, int64_t rows_after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Appends a finished record to the redo log (write-back mode only);
  // `carried` for rows a checkpoint re-logs.
  absl::Status AppendLocked(std::string_view record, bool carried = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status RotateLogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status SyncLogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Re-logs the rows of shard `s` dirty in generations <= `limit` into the
  // current log and marks them dirty in it.
  absl::Status CarryForwardLocked(int s, uint64_t limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Push's last step in write-back mode: claims cache positions for the
  // misses, writes the dirty rows they replace to RocksDB, then installs the
  // new rows.
  absl::Status UpdateCacheLocked(PushScratch& sc, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Writes the rows of shard `s` dirty in generations <= `limit` to RocksDB,
  // with pushes stopped.
  absl::Status FlushShardLocked(int s, uint64_t limit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_, write_mu_);
  absl::Status FlushAllLocked(uint64_t limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_, write_mu_) {
    for (int s = 0; s < kNumShards; ++s) SS_RETURN_IF_ERROR(FlushShardLocked(s, limit));
    return absl::OkStatus();
  }
  // As FlushAllLocked, but while pushes run: each shard's dirty rows are
  // copied and marked `flushing` under its lock, then written without any
  // lock pushes need. Rows a push has pinned are skipped (a later
  // FlushAllLocked catches them). Also flushes the rows in generations <=
  // `carried_limit` that checkpoints re-logged kMaxCarries times in a row.
  absl::Status FlushAllConcurrently(uint64_t limit, uint64_t carried_limit = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_) ABSL_LOCKS_EXCLUDED(write_mu_);
  // A RocksDB snapshot holding every row: dirty rows are flushed first.
  absl::Status ConsistentSnapshot(SnapshotHolder* holder) ABSL_LOCKS_EXCLUDED(write_mu_);
  // Rotates the redo log, flushes everything older, syncs RocksDB's WAL and
  // deletes the old logs.
  absl::Status RunCheckpoint() ABSL_LOCKS_EXCLUDED(write_mu_);
  void Fail(const absl::Status& status) ABSL_LOCKS_EXCLUDED(write_mu_) {
    MutexLock w(&write_mu_);
    if (failure_.ok()) failure_ = status;
  }
  void CheckpointLoop();
  absl::Status DeleteLogsUpTo(uint64_t generation) const;
  // Replays the redo logs left by a crash into RocksDB.
  absl::Status Recover() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Erases `key` from its shard's cache and, if `forget`, its access time.
  void Uncache(const RowKey& key, bool forget) {
    Shard& shard = shards_[ShardOf(HashId(key.table, key.id))];
    MutexLock l(&shard.mu);
    shard.Erase(key);
    if (forget) shard.last_access.erase(key);
  }

  // Constant after construction.
  const RowStoreOptions options_;
  const int dim_;
  const int row_floats_;  // dim + optimizer state floats
  const size_t row_bytes_;
  const bool track_access_;
  const bool filter_min_count_;
  const bool filter_probability_;
  const int64_t cache_rows_;
  // With a cache, rows are written back (redo log + checkpoints); without,
  // every push is written through to RocksDB.
  const bool write_back_;
  const fs::path redo_dir_;
  const fs::path ingest_dir_;  // SST files of imports, until RocksDB ingests them
  const std::unique_ptr<rocksdb::DB> db_;
  rocksdb::WriteOptions write_options_;
  rocksdb::WriteOptions import_write_options_;
  rocksdb::ReadOptions read_options_;

  // Has its own synchronisation.
  Mutex db_write_mu_;  // only with kSerializeDbWrites
  const std::unique_ptr<Shard[]> shards_;
  std::atomic<uint64_t> write_seq_{0};  // odd while a writer changes rows; see WriterSection

  // Lock order: turnstile_ (held alone, or by SetOwnership around owner_mu_),
  // owner_mu_, flush_mu_, write_mu_, then one shard's mu at a time.
  // checkpoint_mu_ is never held with another.
  Mutex turnstile_;
  mutable Mutex owner_mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(owner_mu_) = 0;
  std::vector<bool> owned_ ABSL_GUARDED_BY(owner_mu_);

  // Serialises everything that writes cached rows to RocksDB (checkpoints,
  // flushes) with ImportRows, DropSlots and EvictNow: a row's RocksDB writes
  // must land in the order the cache saw them. Pushes do not take it.
  Mutex flush_mu_;
  struct FlushScratch {
    std::vector<uint32_t> pos;
    std::vector<uint32_t> order;
    std::vector<char> keys;
    std::vector<float> rows;
  };
  FlushScratch flush_ ABSL_GUARDED_BY(flush_mu_);
  rocksdb::WriteBatch flush_batch_ ABSL_GUARDED_BY(flush_mu_);

  // Writers (Push, ImportRows, DropSlots, EvictNow, Checkpoint, flushes)
  // hold write_mu_: RocksDB and the redo log must receive a row's writes in
  // the order the cache saw them.
  Mutex write_mu_;
  // Set by a storage failure after a request was logged; every later write
  // fails with it. Restarting replays the log.
  absl::Status failure_ ABSL_GUARDED_BY(write_mu_);
  int64_t rows_stored_ ABSL_GUARDED_BY(write_mu_) = 0;
  // Per slot: kSlotUnknown, kSlotEmpty or kSlotMayHaveRows.
  std::vector<uint8_t> slot_state_ ABSL_GUARDED_BY(write_mu_);
  // The newest redo-log generation holding an import that skipped RocksDB's
  // WAL (0: none since the last memtable flush a checkpoint made).
  uint64_t unlogged_generation_ ABSL_GUARDED_BY(write_mu_) = 0;
  // Whether any redo-log record was written since Open (which replays and
  // retires every older log). Until then an import may bypass the log (see
  // IngestLocked).
  bool logged_since_open_ ABSL_GUARDED_BY(write_mu_) = false;
  uint64_t ingested_files_ ABSL_GUARDED_BY(write_mu_) = 0;
  std::unique_ptr<RedoLog> log_ ABSL_GUARDED_BY(write_mu_);
  uint64_t log_generation_ ABSL_GUARDED_BY(write_mu_) = 0;
  RecordBuilder record_ ABSL_GUARDED_BY(write_mu_);
  rocksdb::WriteBatch batch_ ABSL_GUARDED_BY(write_mu_);
  PushScratch push_ ABSL_GUARDED_BY(write_mu_);
  const std::unique_ptr<CountMinSketch> sketch_ ABSL_PT_GUARDED_BY(write_mu_);
  uint64_t admission_draws_ ABSL_GUARDED_BY(write_mu_) = 0;

  // The checkpointer thread.
  Mutex checkpoint_mu_;
  bool stopping_ ABSL_GUARDED_BY(checkpoint_mu_) = false;
  std::thread checkpointer_;

  // Counters, relaxed; mirrors of guarded state for stats() and epoch().
  std::atomic<uint64_t> epoch_published_{0};
  std::atomic<uint32_t> slots_owned_{0};
  std::atomic<int64_t> rows_stored_published_{0};
  std::atomic<int64_t> log_bytes_{0};
  // Bytes requests appended since the last rotation (not re-logged rows):
  // what triggers a checkpoint.
  std::atomic<int64_t> logged_since_rotation_{0};
  std::atomic<int64_t> checkpoints_{0};
  std::atomic<int64_t> cache_hits_{0};
  std::atomic<int64_t> cache_misses_{0};
  std::atomic<int64_t> lookup_rows_{0};
  std::atomic<int64_t> push_rows_{0};
  std::atomic<int64_t> admissions_{0};
  std::atomic<int64_t> admission_rejects_{0};
  std::atomic<int64_t> evictions_{0};
};

RowStoreImpl::~RowStoreImpl() {
  {
    MutexLock l(&checkpoint_mu_);
    stopping_ = true;
  }
  if (checkpointer_.joinable()) checkpointer_.join();
  if (write_back_) {
    // A clean shutdown leaves no log to replay: flush everything, then the
    // logs are redundant. On failure they stay for the next Open.
    absl::Status status;
    uint64_t generation = 0;
    {
      MutexLock f(&flush_mu_);
      MutexLock w(&write_mu_);
      status = failure_;
      if (status.ok()) status = FlushAllLocked(UINT64_MAX);
      if (status.ok()) {
        status =
            FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_stored_)),
                      "persist row count");
      }
      // Imported rows skipped the WAL: only the logs hold them until the
      // memtable is in SST files.
      if (status.ok() && unlogged_generation_ != 0) {
        status = FromRocks(db_->Flush(rocksdb::FlushOptions()), "flush imported rows");
      }
      generation = log_generation_;
      log_.reset();
    }
    if (status.ok()) status = FromRocks(db_->SyncWAL(), "sync RocksDB WAL");
    if (status.ok()) status = DeleteLogsUpTo(generation);
    if (!status.ok()) {
      std::fprintf(stderr, "row store %s: shutdown left redo logs to replay: %s\n",
                   options_.db_path.c_str(), std::string(status.message()).c_str());
    }
  }
  // Best effort: every acknowledged write is in a WAL already.
  db_->Close().PermitUncheckedError();
}

absl::Status RowStoreImpl::Start() {
  const std::string& path = options_.db_path;
  rocksdb::ReadOptions read;
  std::string value;

  // Format: refuse a database whose rows have another layout.
  struct Format {
    uint32_t version, dim, row_floats, num_slots;
  } want{kFormatVersion, static_cast<uint32_t>(dim_), static_cast<uint32_t>(row_floats_),
         options_.num_slots};
  rocksdb::Status s = db_->Get(read, MetaKey(kFormatKey), &value);
  if (s.IsNotFound()) {
    SS_RETURN_IF_ERROR(
        FromRocks(db_->Put(rocksdb::WriteOptions(), MetaKey(kFormatKey), EncodeFixed(want)),
                  absl::StrCat("write format record to ", path)));
  } else if (!s.ok()) {
    return FromRocks(s, absl::StrCat("read format record of ", path));
  } else {
    Format have;
    if (value.size() != sizeof(have)) {
      return absl::DataLossError(
          absl::StrCat(path, ": format record has ", value.size(), " bytes, want ", sizeof(have)));
    }
    std::memcpy(&have, value.data(), sizeof(have));
    if (have.version != want.version || have.dim != want.dim ||
        have.row_floats != want.row_floats || have.num_slots != want.num_slots) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " holds rows of dim ", have.dim, " with ", have.row_floats,
                       " floats per row (values + optimizer state) over ", have.num_slots,
                       " slots (format ", have.version, "); options ask for dim ", want.dim, ", ",
                       want.row_floats, " floats per row, ", want.num_slots, " slots"));
    }
  }

  // Ownership: a new database owns every slot at epoch 0.
  {
    MutexLock l(&owner_mu_);
    owned_.assign(options_.num_slots, true);
    epoch_ = 0;
    s = db_->Get(read, MetaKey(kOwnershipKey), &value);
    if (s.ok()) {
      const size_t bitmap = (options_.num_slots + 7) / 8;
      if (value.size() != 8 + bitmap) {
        return absl::DataLossError(absl::StrCat(path, ": ownership record has ", value.size(),
                                                " bytes, want ", 8 + bitmap));
      }
      std::memcpy(&epoch_, value.data(), 8);
      for (uint32_t slot = 0; slot < options_.num_slots; ++slot) {
        owned_[slot] = (static_cast<uint8_t>(value[8 + slot / 8]) >> (slot % 8)) & 1;
      }
    } else if (!s.IsNotFound()) {
      return FromRocks(s, absl::StrCat("read ownership of ", path));
    }
    epoch_published_.store(epoch_);
    slots_owned_.store(static_cast<uint32_t>(std::count(owned_.begin(), owned_.end(), true)));
  }

  {
    MutexLock w(&write_mu_);
    s = db_->Get(read, MetaKey(kRowCountKey), &value);
    if (s.ok()) {
      if (value.size() != sizeof(rows_stored_)) {
        return absl::DataLossError(
            absl::StrCat(path, ": row count record has ", value.size(), " bytes"));
      }
      std::memcpy(&rows_stored_, value.data(), sizeof(rows_stored_));
    } else if (!s.IsNotFound()) {
      return FromRocks(s, absl::StrCat("read row count of ", path));
    }
    SS_RETURN_IF_ERROR(Recover());
    // An ingested import removes the persisted count (IngestLocked) until
    // the next one is written; without it, a store with rows counts them.
    s = db_->Get(read, MetaKey(kRowCountKey), &value);
    if (s.IsNotFound()) {
      int64_t rows = 0;
      SS_RETURN_IF_ERROR(ScanKeys([&rows](const RowKey&) { ++rows; }));
      rows_stored_ = rows;
      if (rows > 0) {
        SS_RETURN_IF_ERROR(
            FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_stored_)),
                      absl::StrCat("persist row count of ", path)));
      }
    } else if (!s.ok()) {
      return FromRocks(s, absl::StrCat("read row count of ", path));
    }
    // SST files a crash left before RocksDB ingested them hold nothing
    // acknowledged.
    std::error_code ec;
    fs::remove_all(ingest_dir_, ec);
    fs::create_directories(ingest_dir_, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("create ", ingest_dir_.string(), ": ", ec.message()));
    }
    rows_stored_published_.store(rows_stored_);
    if (write_back_) SS_RETURN_IF_ERROR(RotateLogLocked());
    // A store without rows knows every slot empty, so an import into it
    // reads nothing back; otherwise each slot is checked when first needed.
    SS_ASSIGN_OR_RETURN(const bool any, AnyRowInDbLocked(0, options_.num_slots));
    slot_state_.assign(options_.num_slots, any ? kSlotUnknown : kSlotEmpty);
  }

  if (track_access_) {
    // Access times are not persisted: every row starts fresh at Open.
    const int64_t now = NowMs();
    SS_RETURN_IF_ERROR(ScanKeys([&](const RowKey& key) {
      Shard& shard = shards_[ShardOf(HashId(key.table, key.id))];
      MutexLock l(&shard.mu);
      shard.last_access[key].ms = now;
    }));
  }
  if (write_back_) checkpointer_ = std::thread([this] { CheckpointLoop(); });
  return absl::OkStatus();
}

absl::Status RowStoreImpl::ScanKeys(const std::function<void(const RowKey&)>& visit) const {
  const std::string lower = SlotBound(0), upper = SlotBound(options_.num_slots);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions scan;
  scan.iterate_upper_bound = &upper_slice;
  scan.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan));
  for (it->Seek(lower); it->Valid(); it->Next()) {
    if (it->key().size() == kKeySize) visit(DecodeRowKey(it->key().data()));
  }
  return FromRocks(it->status(), absl::StrCat("scan rows of ", options_.db_path));
}

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
  return deleted ? SyncDirectory(redo_dir_) : absl::OkStatus();
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
  if (status.code() == absl::StatusCode::kDataLoss) failure_ = status;
  const int64_t before = log_bytes_.load(std::memory_order_relaxed);
  log_bytes_.store(log_->size(), std::memory_order_relaxed);
  if (!carried && status.ok()) {
    logged_since_rotation_.fetch_add(log_->size() - before, std::memory_order_relaxed);
  }
  return status;
}

absl::Status RowStoreImpl::WriteBatchLocked(const char* what,
                                            const rocksdb::WriteOptions& options) {
  const rocksdb::Status written = DbWrite(options, &batch_);
  if (written.ok()) return absl::OkStatus();
  absl::Status status = FromRocks(written, absl::StrCat(what, " in ", options_.db_path));
  failure_ = absl::UnavailableError(
      absl::StrCat("row store failed (restart to recover): ", status.message()));
  return status;
}

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
      std::fprintf(stderr, "row store %s: checkpoint failed: %s\n", options_.db_path.c_str(),
                   std::string(s.message()).c_str());
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

absl::Status RowStoreImpl::SyncLogLocked() {
  absl::Status status = log_->Sync();
  if (!status.ok()) failure_ = status;
  return status;
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

absl::Status RowStoreImpl::ConsistentSnapshot(SnapshotHolder* holder) {
  // Most dirty rows go while pushes continue; the rest under one hold, so
  // the snapshot is the state between two writes.
  MutexLock f(&flush_mu_);
  SS_RETURN_IF_ERROR(FlushAllConcurrently(UINT64_MAX));
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(FlushAllLocked(UINT64_MAX));
  holder->db = db_.get();
  holder->snapshot = db_->GetSnapshot();
  return absl::OkStatus();
}

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

absl::Status RowStoreImpl::SetOwnership(uint64_t epoch, std::vector<bool> owned) {
  if (owned.size() != options_.num_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("ownership lists ", owned.size(), " slots, store has ", options_.num_slots));
  }
  MutexLock turnstile(&turnstile_);
  MutexLock l(&owner_mu_);
  if (epoch < epoch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ownership epoch ", epoch, " is older than the store's epoch ", epoch_));
  }
  std::string record = EncodeFixed(epoch);
  record.resize(8 + (owned.size() + 7) / 8, '\0');
  uint32_t count = 0;
  for (size_t slot = 0; slot < owned.size(); ++slot) {
    if (owned[slot]) {
      record[8 + slot / 8] = static_cast<char>(record[8 + slot / 8] | (1 << (slot % 8)));
      ++count;
    }
  }
  // Synced whatever sync_writes says: a restarted server must never serve
  // slots it gave away.
  rocksdb::WriteOptions sync;
  sync.sync = true;
  SS_RETURN_IF_ERROR(FromRocks(DbPut(sync, MetaKey(kOwnershipKey), record),
                               absl::StrCat("persist ownership to ", options_.db_path)));
  owned_ = std::move(owned);
  epoch_ = epoch;
  epoch_published_.store(epoch, std::memory_order_release);
  slots_owned_.store(count, std::memory_order_relaxed);
  return absl::OkStatus();
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

absl::Status RowStoreImpl::ValidateSlots(const std::vector<uint32_t>& slots,
                                         std::vector<uint32_t>* sorted) const {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] >= options_.num_slots) {
      return absl::InvalidArgumentError(absl::StrCat("slots[", i, "] = ", slots[i],
                                                     ": out of range (store has ",
                                                     options_.num_slots, " slots)"));
    }
  }
  *sorted = slots;
  std::sort(sorted->begin(), sorted->end());
  sorted->erase(std::unique(sorted->begin(), sorted->end()), sorted->end());
  return absl::OkStatus();
}

// Reads slots from one RocksDB snapshot.
class RowSnapshotImpl final : public RowStore::Snapshot {
 public:
  RowSnapshotImpl(rocksdb::DB* db, std::string db_path, uint32_t num_slots, size_t row_bytes,
                  int row_floats)
      : db_path_(std::move(db_path)),
        num_slots_(num_slots),
        row_bytes_(row_bytes),
        row_floats_(row_floats) {
    holder_.db = db;
  }
  SnapshotHolder& holder() { return holder_; }

  absl::Status ExportSlot(uint32_t slot,
                          const std::function<absl::Status(const StoredRow&)>& visit) override {
    row_.values.resize(row_floats_);
    return ExportSlotBytes(slot, [&](uint32_t table, uint64_t id, std::string_view values) {
      row_.table = table;
      row_.id = id;
      std::memcpy(row_.values.data(), values.data(), row_bytes_);
      return visit(row_);
    });
  }

  absl::Status ExportSlotBytes(uint32_t slot, const RowBytesVisitor& visit) override {
    if (slot >= num_slots_) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", slot, ": the store has ", num_slots_, " slots"));
    }
    rocksdb::ReadOptions read;
    read.snapshot = holder_.snapshot;
    read.fill_cache = false;
    // A slot's rows are a few hundred KB read front to back: reading ahead
    // makes that a few large reads instead of one pread per 4 KB block.
    read.readahead_size = 256 << 10;
    const std::string upper = SlotBound(slot + 1);
    const rocksdb::Slice upper_slice(upper);
    read.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(holder_.db->NewIterator(read));
    for (it->Seek(SlotBound(slot)); it->Valid(); it->Next()) {
      if (it->key().size() != kKeySize || it->value().size() != row_bytes_) {
        return absl::DataLossError(absl::StrCat(db_path_, ": slot ", slot, " holds a ",
                                                it->key().size(), "-byte key with a ",
                                                it->value().size(), "-byte value"));
      }
      const RowKey key = DecodeRowKey(it->key().data());
      SS_RETURN_IF_ERROR(
          visit(key.table, key.id, std::string_view(it->value().data(), it->value().size())));
    }
    return FromRocks(it->status(), absl::StrCat("export slot ", slot, " of ", db_path_));
  }

 private:
  SnapshotHolder holder_;
  const std::string db_path_;
  const uint32_t num_slots_;
  const size_t row_bytes_;
  const int row_floats_;
  StoredRow row_;  // Reused by every row.
};

absl::StatusOr<std::unique_ptr<RowStore::Snapshot>> RowStoreImpl::TakeSnapshot() {
  auto snapshot = std::make_unique<RowSnapshotImpl>(db_.get(), options_.db_path, options_.num_slots,
                                                    row_bytes_, row_floats_);
  SS_RETURN_IF_ERROR(ConsistentSnapshot(&snapshot->holder()));
  return snapshot;
}

absl::Status RowStoreImpl::ExportSlots(
    const std::vector<uint32_t>& slots,
    const std::function<absl::Status(uint32_t slot, const StoredRow&)>& visit) {
  std::vector<uint32_t> sorted;
  SS_RETURN_IF_ERROR(ValidateSlots(slots, &sorted));
  SS_ASSIGN_OR_RETURN(std::unique_ptr<Snapshot> snapshot, TakeSnapshot());
  for (uint32_t slot : sorted) {
    SS_RETURN_IF_ERROR(
        snapshot->ExportSlot(slot, [&](const StoredRow& row) { return visit(slot, row); }));
  }
  return absl::OkStatus();
}

absl::Status RowStoreImpl::ImportRows(std::span<const StoredRow> rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const StoredRow& row = rows[i];
    if (row.table >= options_.tables.size()) {
      return absl::InvalidArgumentError(absl::StrCat("rows[", i, "]: table ", row.table,
                                                     " unknown (store has ", options_.tables.size(),
                                                     " tables)"));
    }
    if (row.values.size() != static_cast<size_t>(row_floats_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows[", i, "] (table ", row.table, ", id ", row.id,
                       "): ", row.values.size(), " values, want ", row_floats_, " (dim ", dim_,
                       " + ", row_floats_ - dim_, " optimizer state)"));
    }
  }
  if (rows.empty()) return absl::OkStatus();
  // Key order, the last of a repeated key winning.
  std::vector<std::tuple<uint32_t, uint32_t, uint64_t, size_t>> order(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    order[i] = {SlotOf(rows[i].table, rows[i].id, options_.num_slots), rows[i].table, rows[i].id,
                i};
  }
  std::sort(order.begin(), order.end());
  RowBlock block;
  for (size_t k = 0; k < order.size(); ++k) {
    if (k + 1 < order.size() && std::get<0>(order[k]) == std::get<0>(order[k + 1]) &&
        std::get<1>(order[k]) == std::get<1>(order[k + 1]) &&
        std::get<2>(order[k]) == std::get<2>(order[k + 1])) {
      continue;
    }
    const StoredRow& row = rows[std::get<3>(order[k])];
    block.tables.push_back(row.table);
    block.ids.push_back(row.id);
    block.values.insert(block.values.end(), row.values.begin(), row.values.end());
  }
  return ImportRowBlock(block);
}

absl::StatusOr<bool> RowStoreImpl::AnyRowInDbLocked(uint32_t begin, uint32_t end) const {
  const std::string upper = SlotBound(end);
  const rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  read.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  it->Seek(SlotBound(begin));
  const bool any = it->Valid();
  SS_RETURN_IF_ERROR(FromRocks(
      it->status(), absl::StrCat("scan slots [", begin, ", ", end, ") of ", options_.db_path)));
  return any;
}

absl::StatusOr<int64_t> RowStoreImpl::CountNewRowsLocked(const RowBlock& rows, const char* keys,
                                                         const uint32_t* slots) {
  const size_t n = rows.size();
  // Rows of empty slots are new; the others are new unless cached or in
  // RocksDB (one MultiGet).
  int64_t new_rows = 0;
  PushScratch& sc = push_;
  sc.misses.clear();
  for (size_t begin = 0, end = 0; begin < n; begin = end) {
    const uint32_t slot = slots[begin];
    for (end = begin + 1; end < n && slots[end] == slot; ++end) {
    }
    uint8_t& state = slot_state_[slot];
    if (state == kSlotUnknown) {
      SS_ASSIGN_OR_RETURN(const bool any, AnyRowInDbLocked(slot, slot + 1));
      state = any ? kSlotMayHaveRows : kSlotEmpty;
    }
    if (state == kSlotEmpty) {
      new_rows += static_cast<int64_t>(end - begin);
    } else {
      for (size_t i = begin; i < end; ++i) {
        const RowKey key{rows.tables[i], rows.ids[i]};
        Shard& shard = shards_[ShardOf(HashId(key.table, key.id))];
        ReaderMutexLock l(&shard.mu);
        if (shard.Find(key) < 0) sc.misses.push_back(static_cast<uint32_t>(i));
      }
    }
    state = kSlotMayHaveRows;
  }
  const size_t m = sc.misses.size();
  if (m == 0) return new_rows;
  char* get_keys = sc.get.Prepare(m);
  for (size_t j = 0; j < m; ++j) {
    std::memcpy(get_keys + j * kKeySize, keys + size_t{sc.misses[j]} * kKeySize, kKeySize);
  }
  sc.get.Run(db_.get(), read_options_, m);
  absl::Status status;
  for (size_t j = 0; j < m && status.ok(); ++j) {
    bool found = false;
    const uint32_t i = sc.misses[j];
    status =
        ReadStoredRow(sc.get.values[j], sc.get.statuses[j], rows.tables[i], rows.ids[i], &found);
    new_rows += !found;
  }
  sc.get.Release(m);
  SS_RETURN_IF_ERROR(status);
  return new_rows;
}

absl::Status RowStoreImpl::ImportRowBlock(const RowBlock& rows) {
  const size_t n = rows.size();
  if (rows.tables.size() != n || rows.values.size() != n * row_floats_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row block: ", rows.tables.size(), " tables, ", n, " ids and ", rows.values.size(),
        " values; want one table per id and ", row_floats_, " values per row (dim ", dim_, " + ",
        row_floats_ - dim_, " optimizer state)"));
  }
  if (n == 0) return absl::OkStatus();
  // Keys in order, checked before anything is locked.
  std::vector<char> keys(n * kKeySize);
  std::vector<uint32_t> slots(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t table = rows.tables[i];
    if (table >= options_.tables.size()) {
      return absl::InvalidArgumentError(absl::StrCat("rows[", i, "]: table ", table,
                                                     " unknown (store has ", options_.tables.size(),
                                                     " tables)"));
    }
    slots[i] = SlotOf(table, rows.ids[i], options_.num_slots);
    char* key = keys.data() + i * kKeySize;
    EncodeRowKey(slots[i], table, rows.ids[i], key);
    if (i > 0) {
      const int order = std::memcmp(key - kKeySize, key, kKeySize);
      if (order >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("rows[", i, "] (table ", table, ", id ", rows.ids[i], ") ",
                         order == 0 ? "repeats rows[" : "sorts before rows[", i - 1,
                         "]; a row block is in key order, each key once (SortRowBlock)"));
      }
    }
  }

  MutexLock f(&flush_mu_);
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(failure_);
  WriterSection writing(write_seq_);
  SS_ASSIGN_OR_RETURN(const int64_t new_rows, CountNewRowsLocked(rows, keys.data(), slots.data()));

  // Written to RocksDB directly (imports are bulk; they would only displace
  // hot rows from the cache). Ingested as an SST file when no redo-log
  // record could be replayed over it after a crash: without a cache, or
  // before anything was logged (a warm start into new servers). Otherwise
  // logged, then written through the memtable: a replayed push or slot drop
  // logged before the import would land on top of an ingested file.
  const char* values = reinterpret_cast<const char*>(rows.values.data());
  if (!write_back_ || !logged_since_open_) {
    SS_RETURN_IF_ERROR(IngestLocked(rows, keys.data(), rows_stored_ + new_rows));
  } else {
    std::string& record =
        record_.Start(RecordType::kRows, rows_stored_ + new_rows, static_cast<uint32_t>(n));
    record.reserve(record.size() + n * (kKeySize + row_bytes_));
    for (size_t i = 0; i < n; ++i) {
      record.append(keys.data() + i * kKeySize, kKeySize);
      record.append(values + i * row_bytes_, row_bytes_);
    }
    SS_RETURN_IF_ERROR(AppendLocked(record_.Finish()));
    batch_.Clear();
    for (size_t i = 0; i < n; ++i) {
      batch_.Put(rocksdb::Slice(keys.data() + i * kKeySize, kKeySize),
                 rocksdb::Slice(values + i * row_bytes_, row_bytes_));
    }
    // The redo log record above is the durable copy until a checkpoint
    // flushes the memtable (RunCheckpoint), as for a push's cached rows.
    SS_RETURN_IF_ERROR(WriteBatchLocked("write imported rows", import_write_options_));
    unlogged_generation_ = log_generation_;
  }
  rows_stored_ += new_rows;
  rows_stored_published_.store(rows_stored_, std::memory_order_relaxed);

  // Cached copies are stale now: drop them (the next read refills). A bulk
  // import into a server that has cached nothing skips the per-row probes.
  bool any_cached = false;
  for (int s = 0; s < kNumShards && write_back_ && !any_cached; ++s) {
    ReaderMutexLock l(&shards_[s].mu);
    any_cached = shards_[s].size > 0;
  }
  if (!any_cached && !track_access_) return absl::OkStatus();
  const int64_t now = track_access_ ? NowMs() : 0;
  for (size_t i = 0; i < n; ++i) {
    const RowKey k{rows.tables[i], rows.ids[i]};
    Shard& shard = shards_[ShardOf(HashId(k.table, k.id))];
    MutexLock l(&shard.mu);
    shard.Erase(k);
    if (track_access_) shard.last_access[k].ms = now;
  }
  return absl::OkStatus();
}

absl::Status RowStoreImpl::IngestLocked(const RowBlock& rows, const char* keys,
                                        int64_t rows_after) {
  // No redo-log record, memtable insert, flush or compaction: the file goes
  // to the lowest level it does not overlap, and a warm start's files, each
  // a range of slots, overlap nothing. RocksDB syncs it before ingestion.
  // The persisted row count would be stale once the file is in: it goes
  // first, synced, and comes back after (nothing is logged, so the count is
  // RocksDB's); Open counts the rows of a store that lost it in between.
  rocksdb::WriteOptions synced = write_options_;
  synced.sync = true;
  rocksdb::WriteBatch forget;
  forget.Delete(MetaKey(kRowCountKey));
  rocksdb::Status s = DbWrite(synced, &forget);
  const std::string path = (ingest_dir_ / absl::StrCat(++ingested_files_, ".sst")).string();
  const char* values = reinterpret_cast<const char*>(rows.values.data());
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), db_->GetOptions());
  if (s.ok()) s = writer.Open(path);
  for (size_t i = 0; i < rows.size() && s.ok(); ++i) {
    s = writer.Put(rocksdb::Slice(keys + i * kKeySize, kKeySize),
                   rocksdb::Slice(values + i * row_bytes_, row_bytes_));
  }
  if (s.ok()) s = writer.Finish();
  if (s.ok()) {
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;  // a hard link: the file is not copied
    s = db_->IngestExternalFile({path}, ingest);
  }
  // Linked into the database, or never applied (ingestion is atomic).
  std::error_code ec;
  fs::remove(path, ec);
  SS_RETURN_IF_ERROR(
      FromRocks(s, absl::StrCat("ingest ", rows.size(), " imported rows into ", options_.db_path)));
  const absl::Status counted =
      FromRocks(DbPut(write_options_, MetaKey(kRowCountKey), RowCountValue(rows_after)),
                absl::StrCat("persist row count of ", options_.db_path));
  if (!counted.ok()) {
    // The rows are in: the store cannot go on as if they were not.
    failure_ = absl::UnavailableError(
        absl::StrCat("row store failed (restart to recover): ", counted.message()));
  }
  return counted;
}

absl::StatusOr<int64_t> RowStoreImpl::DropSlots(const std::vector<uint32_t>& slots) {
  std::vector<uint32_t> sorted;
  SS_RETURN_IF_ERROR(ValidateSlots(slots, &sorted));
  if (sorted.empty()) return 0;
  MutexLock f(&flush_mu_);
  MutexLock w(&write_mu_);
  SS_RETURN_IF_ERROR(failure_);
  WriterSection writing(write_seq_);
  // With every row in RocksDB, the count of what goes is a range scan.
  SS_RETURN_IF_ERROR(FlushAllLocked(UINT64_MAX));
  int64_t dropped = 0;
  std::string upper;
  rocksdb::Slice upper_slice;
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  read.iterate_upper_bound = &upper_slice;
  for (uint32_t slot : sorted) {
    upper = SlotBound(slot + 1);
    upper_slice = rocksdb::Slice(upper);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
    for (it->Seek(SlotBound(slot)); it->Valid(); it->Next()) ++dropped;
    SS_RETURN_IF_ERROR(FromRocks(
        it->status(), absl::StrCat("count rows of slot ", slot, " in ", options_.db_path)));
  }
  if (write_back_) {
    std::string& record = record_.Start(RecordType::kDeleteSlots, rows_stored_ - dropped,
                                        static_cast<uint32_t>(sorted.size()));
    for (uint32_t slot : sorted) AppendFixed(record, slot);
    SS_RETURN_IF_ERROR(AppendLocked(record_.Finish()));
  }
  batch_.Clear();
  for (uint32_t slot : sorted) batch_.DeleteRange(SlotBound(slot), SlotBound(slot + 1));
  if (!write_back_) batch_.Put(MetaKey(kRowCountKey), RowCountValue(rows_stored_ - dropped));
  SS_RETURN_IF_ERROR(WriteBatchLocked("drop slots"));
  for (uint32_t slot : sorted) slot_state_[slot] = kSlotEmpty;
  rows_stored_ -= dropped;
  rows_stored_published_.store(rows_stored_, std::memory_order_relaxed);

  std::vector<bool> drop(options_.num_slots, false);
  for (uint32_t slot : sorted) drop[slot] = true;
  auto dropping = [&](const RowKey& key) {
    return drop[SlotOf(key.table, key.id, options_.num_slots)];
  };
  for (int s = 0; s < kNumShards; ++s) {
    Shard& shard = shards_[s];
    MutexLock l(&shard.mu);
    for (uint32_t pos = 0; pos < shard.size;) {
      if (dropping(shard.keys[pos])) {
        shard.EraseAt(pos);  // moves another row into pos
      } else {
        ++pos;
      }
    }
    absl::erase_if(shard.last_access, [&](const auto& entry) { return dropping(entry.first); });
  }
  return dropped;
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

absl::StatusOr<RowStore::Checksums> RowStoreImpl::ComputeChecksums() {
  SnapshotHolder snapshot;
  SS_RETURN_IF_ERROR(ConsistentSnapshot(&snapshot));
  const std::string upper = SlotBound(options_.num_slots);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions read;
  read.snapshot = snapshot.snapshot;
  read.fill_cache = false;
  read.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  Checksums sums;
  std::vector<float> values(row_floats_);
  for (it->Seek(SlotBound(0)); it->Valid(); it->Next()) {
    if (it->key().size() != kKeySize || it->value().size() != row_bytes_) {
      return absl::DataLossError(absl::StrCat(options_.db_path, ": a ", it->key().size(),
                                              "-byte key with a ", it->value().size(),
                                              "-byte value among the rows"));
    }
    const RowKey key = DecodeRowKey(it->key().data());
    std::memcpy(values.data(), it->value().data(), row_bytes_);
    ++sums.rows;
    sums.keys += RowKeyHash(key.table, key.id);
    sums.values += RowValueHash(key.table, key.id, values);
  }
  SS_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("checksum ", options_.db_path)));
  return sums;
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
  for (const RowKey& victim : victims) Uncache(victim, /*forget=*/true);
  evictions_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

RowStoreStats RowStoreImpl::stats() const {
  RowStoreStats st;
  st.rows_stored = rows_stored_published_.load(std::memory_order_relaxed);
  int64_t cached = 0;
  for (int s = 0; s < kNumShards; ++s) {
    ReaderMutexLock l(&shards_[s].mu);
    cached += shards_[s].size;
  }
  st.cached_rows = cached;
  st.cache_hits = cache_hits_.load(std::memory_order_relaxed);
  st.cache_misses = cache_misses_.load(std::memory_order_relaxed);
  st.lookup_rows = lookup_rows_.load(std::memory_order_relaxed);
  st.push_rows = push_rows_.load(std::memory_order_relaxed);
  st.admissions = admissions_.load(std::memory_order_relaxed);
  st.admission_rejects = admission_rejects_.load(std::memory_order_relaxed);
  st.evictions = evictions_.load(std::memory_order_relaxed);
  st.slots_owned = slots_owned_.load(std::memory_order_relaxed);
  st.epoch = epoch_published_.load(std::memory_order_acquire);
  st.redo_log_bytes = log_bytes_.load(std::memory_order_relaxed);
  st.checkpoints = checkpoints_.load(std::memory_order_relaxed);
  return st;
}

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

absl::Status SortRowBlock(uint32_t num_slots, RowBlock* rows) {
  const size_t n = rows->size();
  if (rows->tables.size() != n || (n > 0 && rows->values.size() % n != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("row block: ", rows->tables.size(), " tables, ",
                                                   n, " ids and ", rows->values.size(), " values"));
  }
  using Key = std::tuple<uint32_t, uint32_t, uint64_t>;
  auto key_of = [&](size_t i) {
    return Key{SlotOf(rows->tables[i], rows->ids[i], num_slots), rows->tables[i], rows->ids[i]};
  };
  bool sorted = true;
  for (size_t i = 1; i < n && sorted; ++i) sorted = key_of(i - 1) < key_of(i);
  if (!sorted) {
    std::vector<std::pair<Key, size_t>> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = {key_of(i), i};
    std::sort(order.begin(), order.end());
    const size_t row_floats = n == 0 ? 0 : rows->values.size() / n;
    RowBlock out;
    out.tables.resize(n);
    out.ids.resize(n);
    out.values.resize(rows->values.size());
    for (size_t k = 0; k < n; ++k) {
      const size_t i = order[k].second;
      out.tables[k] = rows->tables[i];
      out.ids[k] = rows->ids[i];
      std::memcpy(out.values.data() + k * row_floats, rows->values.data() + i * row_floats,
                  row_floats * sizeof(float));
    }
    *rows = std::move(out);
  }
  for (size_t i = 1; i < n; ++i) {
    if (rows->tables[i] == rows->tables[i - 1] && rows->ids[i] == rows->ids[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("(table ", rows->tables[i], ", id ", rows->ids[i], ") appears twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RowStore>> RowStore::Open(RowStoreOptions options) {
  SS_RETURN_IF_ERROR(ValidateOptions(options));
  std::error_code ec;
  fs::create_directories(options.db_path, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("create db_path ", options.db_path, ": ", ec.message()));
  }
  rocksdb::DB* raw = nullptr;
  SS_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(MakeDbOptions(options), options.db_path, &raw),
                               absl::StrCat("open RocksDB at ", options.db_path)));
  auto store =
      std::make_unique<RowStoreImpl>(std::move(options), std::unique_ptr<rocksdb::DB>(raw));
  SS_RETURN_IF_ERROR(store->Start());
  return store;
}

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
  return Open(std::move(options));
}

}  // namespace shadowsync::ps
