#include "ps/redo_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shadowsync::ps::internal {
namespace {

absl::Status ErrnoError(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

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

}  // namespace

uint64_t RecordChecksum(uint32_t type, const char* data, size_t n) {
  constexpr uint64_t kMul = kGoldenGamma;
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

absl::StatusOr<std::unique_ptr<RedoLog>> RedoLog::Create(const fs::path& dir, uint64_t generation,
                                                         bool sync) {
  const fs::path path = dir / LogFileName(generation);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(absl::StrCat("create redo log ", path.string()));
  std::unique_ptr<RedoLog> log(new RedoLog(fd, path, sync));
  // The directory entry must survive a machine crash before records do.
  if (sync) SS_RETURN_IF_ERROR(SyncDirectory(dir.string()));
  return log;
}

RedoLog::~RedoLog() { ::close(fd_); }

absl::Status RedoLog::Append(std::string_view record) {
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n =
        ::pwrite(fd_, record.data() + done, record.size() - done, static_cast<off_t>(size_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(absl::StrCat("append to ", path_.string()));
    done += static_cast<size_t>(n);
  }
  if (sync_ && ::fdatasync(fd_) != 0) return Fail(absl::StrCat("fdatasync ", path_.string()));
  size_ += static_cast<int64_t>(record.size());
  return absl::OkStatus();
}

absl::Status RedoLog::Sync() {
  if (::fdatasync(fd_) != 0) return ErrnoError(absl::StrCat("fdatasync ", path_.string()));
  return absl::OkStatus();
}

absl::Status RedoLog::Fail(const std::string& what) {
  absl::Status status = ErrnoError(what);
  if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
    status = absl::DataLossError(
        absl::StrCat(status.message(), "; and cannot truncate: ", std::strerror(errno)));
  }
  return status;
}

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
        LOG(WARNING) << "redo log " << path << ": bad record at offset " << offset
                     << "; skipping the rest";
        *complete = false;
      }
      return absl::OkStatus();
    }
    SS_RETURN_IF_ERROR(apply(static_cast<RecordType>(header.type), payload));
    ++*records;
    offset += static_cast<int64_t>(sizeof(header) + header.length);
  }
}

}  // namespace shadowsync::ps::internal
