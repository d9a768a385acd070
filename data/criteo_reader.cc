#include "data/criteo_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shadowsync {
namespace {

// ---------------------------------------------------------------------------
// Line parsing. The hot path builds no strings: a reason is formatted only
// once a line is known to be malformed.

constexpr int kNumTabs = kCriteoFields - 1;

// One parsed row, staged so a malformed line appends nothing. A multi-hot
// field's first id goes to sparse[], its others, in order, to `more`.
struct Row {
  float label;
  float dense[kCriteoDense];
  uint64_t sparse[kCriteoSparse];
  std::vector<std::pair<int, uint64_t>> more;  // (field's column, id)
};

// Hex digit values; -1 for every other byte (including NUL and '\t').
struct HexTable {
  int8_t value[256];
  HexTable() {
    std::memset(value, -1, sizeof(value));
    for (int c = '0'; c <= '9'; ++c) value[c] = static_cast<int8_t>(c - '0');
    for (int c = 'a'; c <= 'f'; ++c) value[c] = static_cast<int8_t>(c - 'a' + 10);
    for (int c = 'A'; c <= 'F'; ++c) value[c] = static_cast<int8_t>(c - 'A' + 10);
  }
};

// log(1 + x) for the small counts that make up most Criteo integer fields;
// std::log1p costs tens of nanoseconds and a line has 13 of them.
struct Log1pTable {
  static constexpr int64_t kSize = 1024;
  float value[kSize];
  Log1pTable() {
    for (int64_t x = 0; x < kSize; ++x) value[x] = static_cast<float>(std::log1p(double(x)));
  }
};

const HexTable kHex;
const Log1pTable kLog1p;

// Debian's absl has its own string_view type (not an alias of std's), so
// std::string_view values are converted when handed to absl string functions.
absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Field names as the Criteo README uses them: label, I1..I13, C1..C26.
std::string FieldName(int field) {
  if (field == 0) return "label";
  if (field <= kCriteoDense) return absl::StrCat("I", field);
  return absl::StrCat("C", field - kCriteoDense);
}

// The field's content quoted for an error message: escaped so binary garbage
// stays readable on a terminal, and cut so a huge field cannot flood the log.
std::string Quote(std::string_view text) {
  constexpr size_t kMaxShown = 40;
  std::string shown = absl::CHexEscape(ToAbsl(text.substr(0, kMaxShown)));
  return absl::StrCat("'", shown, text.size() > kMaxShown ? "'..." : "'");
}

std::string FieldError(int field, std::string_view what, std::string_view text,
                       std::string_view detail = "") {
  return absl::StrCat("field ", field + 1, " (", FieldName(field), "): ", ToAbsl(what), " ",
                      Quote(text), ToAbsl(detail));
}

// A multi-hot field "id,id,...": each id 1 to 8 hex digits. Kept out of
// line: most data never comes here, and the hot loop stays small.
[[gnu::noinline, gnu::cold]] bool ParseIdList(std::string_view field, int column, Row* row,
                                              std::string* reason) {
  size_t start = 0;
  for (int k = 0; start <= field.size(); ++k) {
    size_t comma = field.find(',', start);
    if (comma == std::string_view::npos) comma = field.size();
    const std::string_view id = field.substr(start, comma - start);
    uint64_t v = 0;
    bool bad = id.empty() || id.size() > 8;
    for (char c : id) {
      const int d = kHex.value[static_cast<unsigned char>(c)];
      bad |= d < 0;
      v = (v << 4) | static_cast<uint64_t>(d & 0xf);
    }
    if (bad) {
      *reason =
          FieldError(1 + kCriteoDense + column, "bad hex", field,
                     absl::StrCat(" (id ", k + 1,
                                  " of a comma-separated list: ", id.empty() ? "empty" : Quote(id),
                                  "; each id is 1 to 8 hex digits)"));
      return false;
    }
    if (k == 0) {
      row->sparse[column] = v;
    } else {
      row->more.emplace_back(column, v);
    }
    start = comma + 1;
  }
  return true;
}

// Parses `line` (no '\n') into *row. On a malformed line returns false and
// sets *reason; *row is then unspecified.
bool ParseRow(std::string_view line, Row* row, std::string* reason) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) {
    *reason = "empty line";
    return false;
  }
  const char* p = line.data();
  const char* const end = p + line.size();
  // Checking the field count first gives one clear reason for truncated or
  // merged lines instead of a confusing per-field one; std::count vectorises.
  const auto tabs = std::count(p, end, '\t');
  if (tabs != kNumTabs) {
    *reason = absl::StrCat("expected ", kCriteoFields, " tab-separated fields, got ", tabs + 1);
    return false;
  }

  // Field 0: the label, exactly "0" or "1".
  const char* tab = static_cast<const char*>(std::memchr(p, '\t', end - p));
  if (tab - p != 1 || (*p != '0' && *p != '1')) {
    *reason = FieldError(0, "bad label", std::string_view(p, tab - p), " (want 0 or 1)");
    return false;
  }
  row->label = *p == '1' ? 1.0f : 0.0f;
  p = tab + 1;

  // Fields 1..13: decimal integers, empty = missing.
  for (int i = 0; i < kCriteoDense; ++i) {
    tab = static_cast<const char*>(std::memchr(p, '\t', end - p));  // Never null: 39 tabs.
    if (tab == p) {
      row->dense[i] = 0.0f;
    } else {
      int64_t x = 0;
      const auto [ptr, ec] = std::from_chars(p, tab, x);
      if (ec == std::errc::result_out_of_range) {
        *reason = FieldError(1 + i, "integer out of range", std::string_view(p, tab - p));
        return false;
      }
      if (ec != std::errc() || ptr != tab) {
        *reason = FieldError(1 + i, "not an integer", std::string_view(p, tab - p));
        return false;
      }
      row->dense[i] = CriteoDenseValue(x);
    }
    p = tab + 1;
  }

  // Fields 14..39: up to 8 hex digits (a 32-bit hash), empty = missing, or a
  // comma-separated list of them (multi-hot). The loop finds the field end
  // and decodes in one pass; a comma makes it bad, and only then is the field
  // read again as a list.
  row->more.clear();
  for (int i = 0; i < kCriteoSparse; ++i) {
    const char* q = p;
    uint64_t v = 0;
    bool bad = false;
    for (; q < end && *q != '\t'; ++q) {
      const int d = kHex.value[static_cast<unsigned char>(*q)];
      bad |= d < 0;
      v = (v << 4) | static_cast<uint64_t>(d & 0xf);
    }
    const int64_t digits = q - p;
    if (bad && std::memchr(p, ',', q - p) != nullptr) {
      if (!ParseIdList(std::string_view(p, q - p), i, row, reason)) return false;
      if (q < end) p = q + 1;
      continue;
    }
    if (bad || digits > 8) {
      *reason = FieldError(1 + kCriteoDense + i, "bad hex", std::string_view(p, q - p),
                           bad ? "" : " (more than 8 digits)");
      return false;
    }
    row->sparse[i] = digits == 0 ? kMissingId : v;
    if (q < end) p = q + 1;
  }
  return true;
}

void AppendRow(const Row& row, ExampleBlock* out) {
  out->labels.push_back(row.label);
  out->dense.insert(out->dense.end(), row.dense, row.dense + kCriteoDense);
  if (row.more.empty() && !out->multi_hot()) {
    out->sparse.insert(out->sparse.end(), row.sparse, row.sparse + kCriteoSparse);
    return;
  }
  out->MakeMultiHot();
  size_t m = 0;
  for (int t = 0; t < kCriteoSparse; ++t) {
    out->sparse.push_back(row.sparse[t]);
    for (; m < row.more.size() && row.more[m].first == t; ++m) {
      out->sparse.push_back(row.more[m].second);
    }
    out->sparse_offsets.push_back(static_cast<int64_t>(out->sparse.size()));
  }
}

std::string OverlongReason(int64_t max_line_bytes) {
  return absl::StrCat("line longer than max_line_bytes (", max_line_bytes, ")");
}

// ---------------------------------------------------------------------------
// Input files: plain files through read(2), gzip through zlib.

class InputFile {
 public:
  static absl::StatusOr<std::unique_ptr<InputFile>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
    auto file = std::unique_ptr<InputFile>(new InputFile(path, fd));
    // pread leaves the offset at 0, so either decoder starts at the beginning.
    unsigned char magic[2] = {0, 0};
    const bool gzip_magic = ::pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_magic || absl::EndsWith(path, ".gz")) {
      file->gz_ = gzdopen(fd, "rb");
      if (file->gz_ == nullptr) return absl::InternalError(absl::StrCat("gzdopen failed: ", path));
      file->fd_ = -1;  // Owned by gz_ now.
      gzbuffer(file->gz_, 256 << 10);
    }
    return file;
  }

  ~InputFile() {
    if (gz_ != nullptr) gzclose(gz_);
    if (fd_ >= 0) ::close(fd_);
  }

  // Reads up to `n` bytes; 0 means end of file.
  absl::StatusOr<size_t> Read(char* buf, size_t n) {
    if (gz_ != nullptr) return ReadGzip(buf, n);
    while (true) {
      const ssize_t got = ::read(fd_, buf, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return absl::ErrnoToStatus(errno, absl::StrCat("read failed: ", path_));
    }
  }

 private:
  InputFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  absl::StatusOr<size_t> ReadGzip(char* buf, size_t n) {
    const int got = gzread(gz_, buf, static_cast<unsigned>(n));
    int err = Z_OK;
    const char* msg = gzerror(gz_, &err);
    // A truncated stream reads as a short final chunk plus Z_BUF_ERROR, so
    // the error check must also cover successful-looking reads.
    if (got < 0 || (err != Z_OK && err != Z_STREAM_END)) {
      return absl::DataLossError(absl::StrCat(path_, ": corrupt gzip stream: ", msg));
    }
    return static_cast<size_t>(got);
  }

  const std::string path_;
  int fd_ = -1;
  gzFile gz_ = nullptr;
};

// ---------------------------------------------------------------------------
// The reader: one read thread cuts the input into line-aligned chunks, the
// parse threads turn chunks into blocks, and Next() hands blocks out in
// chunk (= file) order.

// A piece of one file holding whole lines, and later its parse result.
struct Chunk {
  int64_t seq = 0;          // Position in the output order.
  int file = 0;             // Index into paths_.
  int64_t first_line = 1;   // 1-based line number of the first line in the file.
  int64_t global_line = 0;  // 0-based global index of the first line (for sharding).
  int64_t num_lines = 0;    // Lines in `data`, counted by the read thread.
  int64_t bytes = 0;        // Input bytes this chunk accounts for.
  // Stands for one line longer than max_line_bytes that the read thread
  // dropped without buffering; `data` is empty.
  bool overlong = false;
  std::string data;

  // Filled in by a parse thread.
  ExampleBlock block;
  int64_t malformed = 0;
  std::vector<std::string> errors;  // At most max_reported_errors.
};

class CriteoReaderImpl : public CriteoReader {
 public:
  CriteoReaderImpl(std::vector<std::string> paths, const ReaderOptions& options)
      : paths_(std::move(paths)),
        options_(options),
        read_size_(
            static_cast<size_t>(std::clamp<int64_t>(options.chunk_bytes, 64 << 10, 4 << 20))),
        max_in_flight_(2 * options.parse_threads) {
    read_thread_ = std::thread([this] { ReadLoop(); });
    for (int i = 0; i < options_.parse_threads; ++i) {
      parse_threads_.emplace_back([this] { ParseLoop(); });
    }
  }

  ~CriteoReaderImpl() override {
    Shutdown();
    ReportTotals();
  }

  absl::StatusOr<bool> Next(ExampleBlock* block) override {
    block->clear();
    while (true) {
      if (finished_) return false;
      if (options_.max_examples >= 0 && stats_.examples >= options_.max_examples) {
        Finish();
        return false;
      }
      Chunk chunk;
      {
        MutexLock lock(&mu_);
        mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return NextChunkReady(); });
        auto it = done_.find(next_seq_);
        if (it == done_.end()) {
          // Every chunk before the end (or the I/O error) has been delivered.
          if (!read_status_.ok()) return read_status_;
          finished_ = true;
          return false;
        }
        chunk = std::move(it->second);
        done_.erase(it);
        ++next_seq_;
        --in_flight_;
      }
      Account(&chunk);
      if (chunk.block.size() == 0) continue;  // All lines malformed or in other shards.
      if (options_.max_examples >= 0) {
        const int64_t room = options_.max_examples - stats_.examples;
        if (chunk.block.size() > room) chunk.block.Truncate(room);
      }
      stats_.examples += chunk.block.size();
      *block = std::move(chunk.block);
      return true;
    }
  }

  ReaderStats stats() const override { return stats_; }

 private:
  // --- Consumer side (the thread calling Next(); no lock needed). ---

  // Adds a delivered chunk's counters and errors to stats_, logging the
  // reported errors in file order.
  void Account(Chunk* chunk) {
    stats_.lines += chunk->num_lines;
    stats_.bytes += chunk->bytes;
    stats_.malformed += chunk->malformed;
    for (std::string& error : chunk->errors) {
      if (static_cast<int>(stats_.first_errors.size()) >= options_.max_reported_errors) break;
      LOG(WARNING) << "CriteoReader: skipping malformed line " << error;
      stats_.first_errors.push_back(std::move(error));
    }
  }

  // One summary line when the reader goes away, so malformed lines beyond the
  // reported ones are not silent.
  void ReportTotals() const {
    const auto reported = static_cast<int64_t>(stats_.first_errors.size());
    if (stats_.malformed > reported) {
      LOG(WARNING) << "CriteoReader: skipped " << stats_.malformed << " malformed lines in total ("
                   << reported << " shown)";
    }
  }

  // Stops the threads once the caller has all it asked for.
  void Finish() {
    finished_ = true;
    Shutdown();
  }

  void Shutdown() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    if (read_thread_.joinable()) read_thread_.join();
    for (std::thread& t : parse_threads_) {
      if (t.joinable()) t.join();
    }
  }

  // --- Read thread. ---

  void ReadLoop() {
    absl::Status status;
    // Stops at the first error, including Stopped().
    for (int file = 0; file < static_cast<int>(paths_.size()) && status.ok(); ++file) {
      status = ReadFile(file);
    }
    MutexLock lock(&mu_);
    if (!status.ok() && !stop_) read_status_ = status;
    read_done_ = true;
  }

  bool Stopping() {
    MutexLock lock(&mu_);
    return stop_;
  }
  // What ReadFile returns when the reader stops; ReadLoop drops it.
  static absl::Status Stopped() { return absl::CancelledError("reader stopped"); }

  // Cuts file `file` into chunks of whole lines and pushes them.
  absl::Status ReadFile(int file) {
    SS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> in, InputFile::Open(paths_[file]));
    const auto chunk_bytes = static_cast<size_t>(options_.chunk_bytes);
    const auto max_line = static_cast<size_t>(options_.max_line_bytes);
    // buf holds the input not yet handed out. [0, line_start) are whole lines
    // (`lines` of them) not yet cut into a chunk; from line_start on is an
    // incomplete line whose bytes before `scanned` hold no newline.
    std::string buf;
    size_t line_start = 0;
    size_t scanned = 0;
    int64_t lines = 0;
    int64_t next_line = 1;  // In-file number of buf's first line.
    // While true we are discarding the rest of an over-long line; it has
    // cost skipped_bytes so far.
    bool skipping = false;
    int64_t skipped_bytes = 0;

    // Hands buf[begin, end), holding n whole lines, to the parse threads.
    auto emit = [&](size_t begin, size_t end, int64_t n) {
      Chunk chunk;
      chunk.file = file;
      chunk.first_line = next_line;
      chunk.num_lines = n;
      chunk.bytes = static_cast<int64_t>(end - begin);
      chunk.data.assign(buf.data() + begin, end - begin);
      next_line += n;
      return Push(std::move(chunk));
    };
    auto emit_overlong = [&]() {
      Chunk chunk;
      chunk.file = file;
      chunk.first_line = next_line;
      chunk.num_lines = 1;
      chunk.bytes = skipped_bytes;
      chunk.overlong = true;
      next_line += 1;
      return Push(std::move(chunk));
    };

    while (true) {
      if (Stopping()) return Stopped();
      const size_t old_size = buf.size();
      buf.resize(old_size + read_size_);
      SS_ASSIGN_OR_RETURN(const size_t got, in->Read(buf.data() + old_size, read_size_));
      buf.resize(old_size + got);
      const bool eof = got == 0;

      if (skipping) {
        const auto* nl = static_cast<const char*>(std::memchr(buf.data(), '\n', buf.size()));
        if (nl == nullptr && !eof) {
          skipped_bytes += static_cast<int64_t>(buf.size());
          buf.clear();
          continue;
        }
        const size_t rest = nl == nullptr ? buf.size() : nl - buf.data() + 1;
        skipped_bytes += static_cast<int64_t>(rest);
        buf.erase(0, rest);
        skipping = false;
        if (!emit_overlong()) return Stopped();
        if (eof) return absl::OkStatus();
      }

      // Count lines, cutting a chunk whenever chunk_bytes of whole lines have
      // accumulated. `cut` is where the pending chunk starts in buf.
      size_t cut = 0;
      while (true) {
        const auto* nl =
            static_cast<const char*>(std::memchr(buf.data() + scanned, '\n', buf.size() - scanned));
        if (nl == nullptr) break;
        ++lines;
        line_start = scanned = nl - buf.data() + 1;
        if (line_start - cut >= chunk_bytes) {
          if (!emit(cut, line_start, lines)) return Stopped();
          cut = line_start;
          lines = 0;
        }
      }
      buf.erase(0, cut);
      line_start -= cut;
      scanned = buf.size();

      if (buf.size() - line_start > max_line) {
        // The incomplete line is already too long: hand out the lines before
        // it, then drop it without buffering the rest.
        if (line_start > 0 && !emit(0, line_start, lines)) return Stopped();
        skipping = true;
        skipped_bytes = static_cast<int64_t>(buf.size() - line_start);
        buf.clear();
        line_start = scanned = 0;
        lines = 0;
        if (eof) return emit_overlong() ? absl::OkStatus() : Stopped();
        continue;
      }
      if (eof) {
        // A last line without '\n' still counts; a trailing '\n' adds none.
        if (buf.size() > line_start) ++lines;
        if (!buf.empty() && !emit(0, buf.size(), lines)) return Stopped();
        return absl::OkStatus();
      }
    }
  }

  // Queues a chunk once fewer than max_in_flight_ are outstanding. Returns
  // false if the reader is stopping.
  bool Push(Chunk chunk) {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return CanPush(); });
    if (stop_) return false;
    chunk.seq = pushed_++;
    chunk.global_line = global_lines_;
    global_lines_ += chunk.num_lines;
    ++in_flight_;
    queue_.push_back(std::move(chunk));
    return true;
  }

  // --- Parse threads. ---

  void ParseLoop() {
    while (true) {
      Chunk chunk;
      {
        MutexLock lock(&mu_);
        mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return WorkOrExit(); });
        if (stop_ || queue_.empty()) return;
        chunk = std::move(queue_.front());
        queue_.pop_front();
      }
      ParseChunk(&chunk);
      MutexLock lock(&mu_);
      const int64_t seq = chunk.seq;
      done_.emplace(seq, std::move(chunk));
    }
  }

  void RecordError(Chunk* chunk, int64_t line_in_chunk, std::string_view reason) const {
    ++chunk->malformed;
    if (static_cast<int>(chunk->errors.size()) < options_.max_reported_errors) {
      chunk->errors.push_back(absl::StrCat(
          paths_[chunk->file], ":", chunk->first_line + line_in_chunk, ": ", ToAbsl(reason)));
    }
  }

  void ParseChunk(Chunk* chunk) const {
    const int64_t shards = options_.num_shards;
    // Offset in this chunk of the first line that belongs to our shard.
    int64_t next_kept = (options_.shard_index - chunk->global_line % shards + shards) % shards;
    if (chunk->overlong) {
      if (next_kept == 0) RecordError(chunk, 0, OverlongReason(options_.max_line_bytes));
      return;
    }
    ExampleBlock& block = chunk->block;
    const int64_t expected = chunk->num_lines / shards + 1;
    block.labels.reserve(expected);
    block.dense.reserve(expected * kCriteoDense);
    block.sparse.reserve(expected * kCriteoSparse);

    const char* p = chunk->data.data();
    const char* const end = p + chunk->data.size();
    Row row;
    std::string reason;
    for (int64_t i = 0; p < end; ++i) {
      const auto* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
      const char* line_end = nl == nullptr ? end : nl;
      if (i == next_kept) {
        next_kept += shards;
        const std::string_view line(p, line_end - p);
        if (static_cast<int64_t>(line.size()) > options_.max_line_bytes) {
          RecordError(chunk, i, OverlongReason(options_.max_line_bytes));
        } else if (ParseRow(line, &row, &reason)) {
          AppendRow(row, &block);
        } else {
          RecordError(chunk, i, reason);
        }
      }
      p = nl == nullptr ? end : nl + 1;
    }
    chunk->data = std::string();  // Free the input early; the block is what travels on.
  }

  // --- Await conditions (called with mu_ held). ---

  bool NextChunkReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_.contains(next_seq_) || (read_done_ && next_seq_ == pushed_);
  }
  bool CanPush() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || in_flight_ < max_in_flight_;
  }
  bool WorkOrExit() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !queue_.empty() || read_done_;
  }

  // Constant after construction.
  const std::vector<std::string> paths_;
  const ReaderOptions options_;
  const size_t read_size_;       // Bytes per read call.
  const int64_t max_in_flight_;  // Chunks read but not yet returned by Next().

  // Owned by the consumer thread.
  ReaderStats stats_;
  bool finished_ = false;

  Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;         // Set on destruction or early finish.
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;    // The read thread pushed its last chunk.
  absl::Status read_status_ ABSL_GUARDED_BY(mu_);  // Why reading ended early.
  int64_t pushed_ ABSL_GUARDED_BY(mu_) = 0;        // Chunks pushed = next sequence number.
  int64_t global_lines_ ABSL_GUARDED_BY(mu_) = 0;  // Lines in the chunks pushed.
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;     // The chunk Next() returns next.
  std::deque<Chunk> queue_ ABSL_GUARDED_BY(mu_);  // Waiting for a parse thread.
  // Parsed chunks waiting for their turn. Bounded by max_in_flight_.
  std::map<int64_t, Chunk> done_ ABSL_GUARDED_BY(mu_);

  std::thread read_thread_;
  std::vector<std::thread> parse_threads_;
};

absl::Status ValidateOptions(const ReaderOptions& o) {
  auto bad = [](std::string_view name, int64_t value, std::string_view want) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReaderOptions.", ToAbsl(name), " must be ", ToAbsl(want), ", got ", value));
  };
  if (o.parse_threads < 1) return bad("parse_threads", o.parse_threads, ">= 1");
  if (o.chunk_bytes < 1) return bad("chunk_bytes", o.chunk_bytes, ">= 1");
  if (o.max_line_bytes < 1) return bad("max_line_bytes", o.max_line_bytes, ">= 1");
  if (o.max_reported_errors < 0) {
    return bad("max_reported_errors", o.max_reported_errors, ">= 0");
  }
  if (o.num_shards < 1) return bad("num_shards", o.num_shards, ">= 1");
  if (o.shard_index < 0 || o.shard_index >= o.num_shards) {
    return bad("shard_index", o.shard_index, absl::StrCat("in [0, ", o.num_shards, ")"));
  }
  if (o.max_examples < -1) return bad("max_examples", o.max_examples, ">= -1");
  return absl::OkStatus();
}

}  // namespace

float CriteoDenseValue(int64_t x) {
  if (x <= 0) return 0.0f;  // Criteo uses -1 (and a few other negatives) as "none".
  if (x < Log1pTable::kSize) return kLog1p.value[x];
  return static_cast<float>(std::log1p(static_cast<double>(x)));
}

absl::Status ParseCriteoLine(std::string_view line, ExampleBlock* out) {
  if (out->num_dense != kCriteoDense || out->num_sparse != kCriteoSparse) {
    return absl::InvalidArgumentError("ParseCriteoLine: block does not have the Criteo layout");
  }
  Row row;
  std::string reason;
  if (!ParseRow(line, &row, &reason)) return absl::InvalidArgumentError(reason);
  AppendRow(row, out);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(std::vector<std::string> paths,
                                                                 const ReaderOptions& options) {
  SS_RETURN_IF_ERROR(ValidateOptions(options));
  if (paths.empty()) return absl::InvalidArgumentError("CriteoReader: no input paths");
  // Check every file up front so a typo in the last of many files fails now,
  // not hours into training.
  for (const std::string& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("CriteoReader: cannot open ", path));
    }
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("CriteoReader: ", path, " is a directory"));
    }
  }
  return std::unique_ptr<CriteoReader>(new CriteoReaderImpl(std::move(paths), options));
}

absl::StatusOr<ExampleBlock> ReadAllExamples(const std::vector<std::string>& paths,
                                             const ReaderOptions& options, ReaderStats* stats) {
  SS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader, CriteoReader::Open(paths, options));
  ExampleBlock all;
  ExampleBlock block;
  while (true) {
    SS_ASSIGN_OR_RETURN(const bool more, reader->Next(&block));
    if (!more) break;
    all.Append(block);
  }
  if (stats != nullptr) *stats = reader->stats();
  return all;
}

}  // namespace shadowsync
