// Atomic, durable file replacement: the one way every process writes a file
// another process (or the same one after a crash) reads whole.
//
// A file is written under a temporary name in the target's directory,
// fsynced, renamed over the target, and the directory fsynced: a reader, or a
// restart after a crash or power loss, sees the old contents or the new ones,
// never a mix, and a successful return means the new ones survive a crash.
//
//   SS_RETURN_IF_ERROR(WriteFileAtomically(path, text));
//
//   SS_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Open(path));
//   out.Append(header);
//   for (...) out.Append(row);
//   SS_RETURN_IF_ERROR(out.Commit());
//
// Errors are Unavailable and name the file and the errno text.
//
// A writer of a large file that nobody reads back soon (an export's parts)
// asks for `direct_io`: the data goes from the writer's buffer to the device
// (O_DIRECT) instead of being copied into the page cache, which on the
// development VM costs more CPU than the disk write itself (dd of 1 GiB: 2.7 s
// of system time buffered, 0.08 s direct) and would push the servers' own
// files out of the cache. Such a writer writes on a thread of its own while
// the caller fills the next buffer, since a direct write waits for the device.
// Where the file system refuses O_DIRECT the writer falls back to ordinary
// writes; the file is the same either way.
//
// An AtomicFileWriter is used by one thread at a time.
#ifndef SHADOWSYNC_COMMON_FILE_UTIL_H_
#define SHADOWSYNC_COMMON_FILE_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shadowsync {

// Replaces `path` with `contents` atomically and durably.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

// The streaming form, for files too large to build in memory (checkpoints,
// models). Appends are buffered; the first error is kept and returned by
// Commit. Destroying an uncommitted writer removes the temporary file and
// leaves `path` as it was.
class AtomicFileWriter {
 public:
  struct Options {
    bool direct_io = false;
    // Permission bits of the new file, before the umask (0600: a secret).
    int mode = 0666;
  };
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path, Options options);
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path) {
    return Open(path, Options());
  }

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  void Append(std::string_view data);
  // Writes what is buffered, fsyncs, renames over the target and fsyncs the
  // directory. At most once.
  absl::Status Commit();

  const std::string& path() const { return path_; }
  // Whether the data bypasses the page cache (asked for, and the file
  // system accepted it).
  bool direct_io() const;

 private:
  class WriteBehind;
  AtomicFileWriter(std::string path, std::string temp_path, int fd, bool direct);
  absl::Status Flush();
  void Abandon();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;  // -1 once committed or abandoned.
  absl::Status status_;
  // Without direct I/O: appends collect here.
  std::string buffer_;
  // With direct I/O: a thread writes filled buffers while the next fills.
  std::unique_ptr<WriteBehind> behind_;
  char* fill_ = nullptr;  // The buffer being filled, from behind_; `used_` bytes.
  size_t used_ = 0;
};

// Makes the creation, rename or removal of `path` durable: fsyncs the
// directory that holds it. For callers that rename whole directories into
// place (exports, restored stores).
absl::Status SyncParentDirectory(const std::string& path);
// The same for the entries of `dir` itself.
absl::Status SyncDirectory(const std::string& dir);

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_FILE_UTIL_H_
