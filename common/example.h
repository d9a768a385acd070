// Parsed training examples in the Criteo layout, stored column-wise so the
// trainer can hand dense features straight to GEMM. Plain value types;
// thread-compatible (not synchronised).
#ifndef SHADOWSYNC_COMMON_EXAMPLE_H_
#define SHADOWSYNC_COMMON_EXAMPLE_H_

#include <cstdint>
#include <span>
#include <vector>

namespace shadowsync {

// The Criteo Display Advertising layout: label, 13 integer features, 26
// categorical features (32-bit hashes written as 8 hex digits).
inline constexpr int kCriteoDense = 13;
inline constexpr int kCriteoSparse = 26;
inline constexpr int kCriteoFields = 1 + kCriteoDense + kCriteoSparse;

// The id a missing (empty) categorical field gets. Real values are 32-bit, so
// this cannot collide with one.
inline constexpr uint64_t kMissingId = 1ULL << 32;

// A block of n examples. A categorical field holds one id, or, in the TSV
// layout's multi-hot form "id,id,...", several; a block stores one id per
// field until it meets a field with several, and from then on offsets.
struct ExampleBlock {
  int num_dense = kCriteoDense;
  int num_sparse = kCriteoSparse;
  std::vector<float> labels;  // n values, 0 or 1
  std::vector<float> dense;   // n * num_dense, row-major, already log(1 + x)
  // Raw ids, field by field in example order: n * num_sparse of them unless
  // the block is multi-hot.
  std::vector<uint64_t> sparse;
  // Multi-hot blocks only, empty otherwise: n * num_sparse + 1 offsets; field
  // t of example e holds sparse[sparse_offsets[f], sparse_offsets[f + 1]),
  // f = e * num_sparse + t.
  std::vector<int64_t> sparse_offsets;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  bool multi_hot() const { return !sparse_offsets.empty(); }
  // The ids of field t of example e: never empty (a missing field is kMissingId).
  std::span<const uint64_t> ids(int64_t e, int t) const {
    const int64_t f = e * num_sparse + t;
    if (sparse_offsets.empty()) return {sparse.data() + f, 1};
    return {sparse.data() + sparse_offsets[f],
            static_cast<size_t>(sparse_offsets[f + 1] - sparse_offsets[f])};
  }
  void clear() {
    labels.clear();
    dense.clear();
    sparse.clear();
    sparse_offsets.clear();
  }
  // Switches to the offsets form; the ids stay as they are.
  void MakeMultiHot();
  // Appends every example of `other` (same layout).
  void Append(const ExampleBlock& other);
  // Keeps the first n examples.
  void Truncate(int64_t n);
};

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_EXAMPLE_H_
