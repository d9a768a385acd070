#include "common/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shadowsync {
namespace {

// Appends this large go straight to the file; smaller ones collect.
constexpr size_t kBufferBytes = 1 << 20;

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

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path) {
  // A name of its own per writer (pid and sequence): concurrent writers of one
  // file never truncate each other's temporary file. It ends in .tmp so that
  // directory scans skip it, and O_EXCL refuses a stale one left by a crash.
  static std::atomic<uint64_t> sequence{0};
  const pid_t pid = ::getpid();
  for (int attempt = 0;; ++attempt) {
    std::string temp = absl::StrCat(path, ".", pid, "-", sequence.fetch_add(1), ".tmp");
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return AtomicFileWriter(path, std::move(temp), fd);
    if (errno != EEXIST || attempt >= 100) {
      return ErrnoError(absl::StrCat("cannot create a temporary file for ", path, " at"), temp,
                        errno);
    }
  }
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      buffer_(std::move(other.buffer_)),
      status_(std::move(other.status_)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    buffer_ = std::move(other.buffer_);
    status_ = std::move(other.status_);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_path_.c_str());
  fd_ = -1;
}

void AtomicFileWriter::Append(std::string_view data) {
  if (!status_.ok() || fd_ < 0) return;
  if (buffer_.size() + data.size() > kBufferBytes) status_ = Flush();
  if (!status_.ok()) return;
  if (data.size() >= kBufferBytes) {
    status_ = WriteAll(fd_, data, temp_path_);
  } else {
    buffer_.append(data);
  }
}

absl::Status AtomicFileWriter::Flush() {
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
