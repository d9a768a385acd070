#include "common/example.h"

#include <numeric>

namespace shadowsync {

void ExampleBlock::MakeMultiHot() {
  if (multi_hot()) return;
  sparse_offsets.resize(sparse.size() + 1);
  std::iota(sparse_offsets.begin(), sparse_offsets.end(), int64_t{0});
}

void ExampleBlock::Append(const ExampleBlock& other) {
  if (other.multi_hot()) MakeMultiHot();
  labels.insert(labels.end(), other.labels.begin(), other.labels.end());
  dense.insert(dense.end(), other.dense.begin(), other.dense.end());
  const auto base = static_cast<int64_t>(sparse.size());
  sparse.insert(sparse.end(), other.sparse.begin(), other.sparse.end());
  if (!multi_hot()) return;
  sparse_offsets.pop_back();  // `other`'s first offset (0, plus base) replaces it
  const int64_t fields = other.size() * other.num_sparse;
  for (int64_t f = 0; f <= fields; ++f) {
    sparse_offsets.push_back(base + (other.multi_hot() ? other.sparse_offsets[f] : f));
  }
}

void ExampleBlock::Truncate(int64_t n) {
  if (n >= size()) return;
  labels.resize(n);
  dense.resize(n * num_dense);
  if (multi_hot()) {
    sparse_offsets.resize(n * num_sparse + 1);
    sparse.resize(sparse_offsets.back());
  } else {
    sparse.resize(n * num_sparse);
  }
}

}  // namespace shadowsync
