// Saving and loading a trained model: the DLRM shape, the dense parameters and
// their optimizer state, and every embedding row of a LocalEmbeddingStore.
// Loading restores the exact bits, so predictions of a reloaded model equal
// the original's.
//
// File layout (little-endian): "SSMODEL1", u64 header length, header JSON,
// dense params (f32), dense optimizer state (f32), rows as
// {u32 table, u64 id, f32[dim] values, f32[state] optimizer state} in
// (table, id) order, then u32 CRC-32 of everything before it.
// Thread-safe, but SaveModel reads the store while no other thread pushes to
// it (LocalEmbeddingStore::ForEachRow).
#ifndef SHADOWSYNC_MODEL_MODEL_IO_H_
#define SHADOWSYNC_MODEL_MODEL_IO_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/dlrm.h"
#include "model/embedding_table.h"

namespace shadowsync::model {

struct SavedModel {
  DlrmConfig config;
  LocalStoreOptions store_options;  // tables, dim, optimizer, seed
  std::vector<float> params;
  std::vector<float> dense_state;  // Dense optimizer state (empty for SGD).
  std::unique_ptr<LocalEmbeddingStore> store;
};

// Writes atomically and durably (AtomicFileWriter, common/file_util.h).
// Returns Unavailable naming the path on I/O failure.
absl::Status SaveModel(const std::string& path, const DlrmConfig& config,
                       std::span<const float> params, std::span<const float> dense_state,
                       const LocalEmbeddingStore& store);

// DataLoss naming the path for a truncated or corrupt file, InvalidArgument
// for a file that is not a ShadowSync model.
absl::StatusOr<SavedModel> LoadModel(const std::string& path);

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_MODEL_MODEL_IO_H_
