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
#ifndef SHADOWSYNC_COMMON_FILE_UTIL_H_
#define SHADOWSYNC_COMMON_FILE_UTIL_H_

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
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path);

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

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd);
  absl::Status Flush();
  void Abandon();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;  // -1 once committed or abandoned.
  std::string buffer_;
  absl::Status status_;
};

// Makes the creation, rename or removal of `path` durable: fsyncs the
// directory that holds it. For callers that rename whole directories into
// place (exports, restored stores).
absl::Status SyncParentDirectory(const std::string& path);
// The same for the entries of `dir` itself.
absl::Status SyncDirectory(const std::string& dir);

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_FILE_UTIL_H_
