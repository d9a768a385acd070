// A trainer's dense checkpoint: its dense replica, the dense optimizer state
// and how many examples of its share are behind them, so a restarted trainer
// resumes from its own weights instead of a fresh initialisation. Embedding
// rows are not in it: they live on the parameter servers, which persist them.
//
// File layout (little-endian): "SSCKPT01", u32 version (1), i64 examples,
// u64 param count, u64 state count, f32 params, f32 state, then the u32
// CRC-32C (Castagnoli) of every byte before it.
//
//   SS_RETURN_IF_ERROR(SaveDenseCheckpoint(path, {examples, params, state}));
//   SS_ASSIGN_OR_RETURN(DenseCheckpoint c, LoadDenseCheckpoint(path));
//
// Thread-safe, but a path has one writer at a time (each write goes through
// `<path>.tmp`). The structs are plain values.
#ifndef SHADOWSYNC_WORKER_CHECKPOINT_H_
#define SHADOWSYNC_WORKER_CHECKPOINT_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace shadowsync::worker {

struct DenseCheckpoint {
  // Examples of this trainer's share trained into the weights, counted from
  // the start of the share (skipped ones included).
  int64_t examples = 0;
  std::vector<float> params;
  std::vector<float> dense_state;  // Dense optimizer state (empty for SGD).
};

struct DenseCheckpointView {
  int64_t examples = 0;
  std::span<const float> params;
  std::span<const float> dense_state;
};

// Writes atomically and durably (WriteFileAtomically, common/file_util.h):
// a crash leaves either the old or the new file, never a mix; a failed write
// removes the temporary file. Returns Unavailable naming the file on I/O
// errors.
absl::Status SaveDenseCheckpoint(const std::string& path, const DenseCheckpointView& checkpoint);

// NotFound when `path` does not exist; InvalidArgument for a file that is
// not a dense checkpoint or has an unknown version; DataLoss for a corrupt
// or truncated one. Every message names the file. Never a partial load.
absl::StatusOr<DenseCheckpoint> LoadDenseCheckpoint(const std::string& path);

// CRC-32C (Castagnoli, as iSCSI and ext4 use) of `data`.
uint32_t Crc32c(std::string_view data);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_CHECKPOINT_H_
