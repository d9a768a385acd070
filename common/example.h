// Parsed training examples in the Criteo layout, stored column-wise so the
// trainer can hand dense features straight to GEMM. Plain value types;
// thread-compatible (not synchronised).
#ifndef SHADOWSYNC_COMMON_EXAMPLE_H_
#define SHADOWSYNC_COMMON_EXAMPLE_H_

#include <cstdint>
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

// A block of n examples.
struct ExampleBlock {
  int num_dense = kCriteoDense;
  int num_sparse = kCriteoSparse;
  std::vector<float> labels;     // n values, 0 or 1
  std::vector<float> dense;      // n * num_dense, row-major, already log(1 + x)
  std::vector<uint64_t> sparse;  // n * num_sparse raw ids, row-major

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  void clear() {
    labels.clear();
    dense.clear();
    sparse.clear();
  }
  // Appends example `i` of `other` (same layout).
  void AppendFrom(const ExampleBlock& other, int64_t i) {
    labels.push_back(other.labels[i]);
    dense.insert(dense.end(), other.dense.begin() + i * num_dense,
                 other.dense.begin() + (i + 1) * num_dense);
    sparse.insert(sparse.end(), other.sparse.begin() + i * num_sparse,
                  other.sparse.begin() + (i + 1) * num_sparse);
  }
};

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_EXAMPLE_H_
