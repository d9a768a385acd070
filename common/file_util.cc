#include "common/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace shadowsync {
namespace {

// Appends collect in a buffer this large; larger ones, when not direct, go
// straight to the file.
constexpr size_t kBufferBytes = 1 << 20;
// O_DIRECT wants buffers, offsets and lengths aligned to the device's logical
// block size; 4 KiB covers every device Linux has.
constexpr size_t kAlignment = 4096;

absl::Status ErrnoError(absl::string_view what, const std::string& path, int error) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(error), " (errno ", error, ")"));
}

absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", path, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

std::string ParentOf(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

// Direct I/O's writing thread. A direct write returns only once the device
// has the data (3.7 ms a MiB on the development VM while a job trains), so
// the writer fills one buffer while this thread writes the ones before it:
// the producer (an export's merge of server streams) never waits for the
// device unless it is faster than the device.
class AtomicFileWriter::WriteBehind {
 public:
  WriteBehind(int fd, const std::string& path) : fd_(fd), path_(path) {
    for (auto& buffer : buffers_) {
      buffer.reset(static_cast<char*>(std::aligned_alloc(kAlignment, kBufferBytes)));
      free_.push_back(buffer.get());
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~WriteBehind() { (void)Finish(); }

  // A buffer of kBufferBytes to fill; waits while all are queued.
  char* Take() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !free_.empty(); });
    char* buffer = free_.back();
    free_.pop_back();
    return buffer;
  }
  // Queues `bytes` of `buffer` (from Take) for writing; only the last may be
  // less than kBufferBytes.
  void Submit(char* buffer, size_t bytes) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    queue_.push_back({buffer, bytes});
  }
  // Writes what is queued, stops the thread and returns the first error; the
  // file then holds exactly the bytes submitted. Repeatable.
  absl::Status Finish() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    MutexLock lock(&mu_);
    if (status_.ok() && padded_) {  // The tail went out as a whole block.
      if (::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
        status_ = ErrnoError("cannot truncate", path_, errno);
      }
      padded_ = false;
    }
    return status_;
  }
  bool direct() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return direct_;
  }

 private:
  struct Pending {
    char* buffer;
    size_t bytes;
  };
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };

  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      Pending next;
      {
        MutexLock lock(&mu_);
        mu_.Await([this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; });
        if (queue_.empty()) return;
        next = queue_.front();
        queue_.pop_front();
        if (!status_.ok()) {  // After an error, buffers only come back.
          free_.push_back(next.buffer);
          continue;
        }
      }
      absl::Status s = Write(next);
      MutexLock lock(&mu_);
      if (!s.ok()) status_ = std::move(s);
      free_.push_back(next.buffer);
    }
  }

  // On the thread; written_, direct_ and padded_ change only here.
  absl::Status Write(Pending p) ABSL_LOCKS_EXCLUDED(mu_) {
    bool direct;
    uint64_t written;
    {
      MutexLock lock(&mu_);
      direct = direct_;
      written = written_;
    }
    while (true) {
      size_t n = p.bytes;
      if (direct && n % kAlignment != 0) {  // The tail: a whole block, cut back by Finish.
        n = (n + kAlignment - 1) / kAlignment * kAlignment;
        std::memset(p.buffer + p.bytes, 0, n - p.bytes);
      }
      std::string_view data(p.buffer, n);
      int error = 0;
      while (!data.empty() && error == 0) {
        const ssize_t w = ::write(fd_, data.data(), data.size());
        if (w >= 0) {
          data.remove_prefix(static_cast<size_t>(w));
        } else if (errno != EINTR) {
          error = errno;
        }
      }
      if (error == 0) {
        MutexLock lock(&mu_);
        written_ += p.bytes;
        padded_ = n != p.bytes;
        return absl::OkStatus();
      }
      if (!direct || error != EINVAL) return ErrnoError("cannot write", path_, error);
      // Accepted at open, refused at write (a device that wants a larger
      // alignment, a short write that left the offset unaligned): this
      // buffer again, through the page cache, from where the data ends.
      direct = false;
      {
        MutexLock lock(&mu_);
        direct_ = false;
      }
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0 ||
          ::ftruncate(fd_, static_cast<off_t>(written)) != 0 ||
          ::lseek(fd_, static_cast<off_t>(written), SEEK_SET) < 0) {
        return ErrnoError("cannot turn off direct I/O for", path_, errno);
      }
    }
  }

  const int fd_;
  const std::string path_;
  // Three: one filling, one being written, one queued between them.
  std::array<std::unique_ptr<char, Free>, 3> buffers_;
  std::thread thread_;
  mutable Mutex mu_;
  std::vector<char*> free_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool direct_ ABSL_GUARDED_BY(mu_) = true;
  bool padded_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path, Options options) {
  // A name of its own per writer (pid and sequence): concurrent writers of one
  // file never truncate each other's temporary file. It ends in .tmp so that
  // directory scans skip it, and O_EXCL refuses a stale one left by a crash.
  static std::atomic<uint64_t> sequence{0};
  const pid_t pid = ::getpid();
  for (int attempt = 0;; ++attempt) {
    std::string temp = absl::StrCat(path, ".", pid, "-", sequence.fetch_add(1), ".tmp");
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                          static_cast<mode_t>(options.mode));
    if (fd >= 0) {
      // Set after open, not in it: an open with O_DIRECT that the file system
      // refuses has already created the file (so O_EXCL would then refuse
      // the retry); fcntl just says no.
      const int flags = ::fcntl(fd, F_GETFL);
      const bool direct =
          options.direct_io && flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;
      return AtomicFileWriter(path, std::move(temp), fd, direct);
    }
    if (errno != EEXIST || attempt >= 100) {
      return ErrnoError(absl::StrCat("cannot create a temporary file for ", path, " at"), temp,
                        errno);
    }
  }
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp_path, int fd, bool direct)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {
  if (direct) behind_ = std::make_unique<WriteBehind>(fd_, temp_path_);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      status_(std::move(other.status_)),
      buffer_(std::move(other.buffer_)),
      behind_(std::move(other.behind_)),
      fill_(std::exchange(other.fill_, nullptr)),
      used_(std::exchange(other.used_, 0)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    status_ = std::move(other.status_);
    buffer_ = std::move(other.buffer_);
    behind_ = std::move(other.behind_);
    fill_ = std::exchange(other.fill_, nullptr);
    used_ = std::exchange(other.used_, 0);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ < 0) return;
  if (behind_ != nullptr) (void)behind_->Finish();  // Its thread writes to fd_.
  ::close(fd_);
  ::unlink(temp_path_.c_str());
  fd_ = -1;
}

bool AtomicFileWriter::direct_io() const { return behind_ != nullptr && behind_->direct(); }

void AtomicFileWriter::Append(std::string_view data) {
  if (!status_.ok() || fd_ < 0) return;
  if (behind_ != nullptr) {
    while (!data.empty()) {
      if (fill_ == nullptr) fill_ = behind_->Take();
      const size_t n = std::min(data.size(), kBufferBytes - used_);
      std::memcpy(fill_ + used_, data.data(), n);
      used_ += n;
      data.remove_prefix(n);
      if (used_ == kBufferBytes) {
        behind_->Submit(std::exchange(fill_, nullptr), std::exchange(used_, 0));
      }
    }
    return;
  }
  if (buffer_.size() + data.size() > kBufferBytes) status_ = Flush();
  if (!status_.ok()) return;
  if (data.size() >= kBufferBytes) {
    status_ = WriteAll(fd_, data, temp_path_);
  } else {
    buffer_.append(data);
  }
}

absl::Status AtomicFileWriter::Flush() {
  if (behind_ != nullptr) {
    if (fill_ != nullptr) behind_->Submit(std::exchange(fill_, nullptr), std::exchange(used_, 0));
    return behind_->Finish();
  }
  absl::Status s = WriteAll(fd_, buffer_, temp_path_);
  buffer_.clear();
  return s;
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  if (status_.ok()) status_ = Flush();
  if (status_.ok() && ::fsync(fd_) != 0) status_ = ErrnoError("cannot fsync", temp_path_, errno);
  if (!status_.ok()) {
    Abandon();
    return status_;
  }
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0 || ::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp_path_.c_str());
    return ErrnoError(closed != 0 ? "cannot close" : "cannot rename into place", path_, error);
  }
  return SyncParentDirectory(path_);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Open(path);
  if (!out.ok()) return out.status();
  out->Append(contents);
  return out->Commit();
}

absl::Status SyncParentDirectory(const std::string& path) { return SyncDirectory(ParentOf(path)); }

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open directory", dir, errno);
  absl::Status s = absl::OkStatus();
  if (::fsync(fd) != 0) s = ErrnoError("cannot fsync directory", dir, errno);
  ::close(fd);
  return s;
}

}  // namespace shadowsync
