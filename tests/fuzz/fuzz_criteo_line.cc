// Fuzzes the Criteo TSV line parser (data/criteo_reader.h), which reads
// every byte of the training data. Invariants: no crash or sanitizer report;
// a parsed line appends exactly one well-formed example; a refused line
// appends nothing and says why.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/example.h"
#include "data/criteo_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  shadowsync::ExampleBlock block;
  // Each line on its own, as the reader hands them over.
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    const int64_t before = block.size();
    const absl::Status status =
        shadowsync::ParseCriteoLine(input.substr(start, end - start), &block);
    if (status.ok()) {
      if (block.size() != before + 1) std::abort();
      const float label = block.labels.back();
      if (label != 0.0f && label != 1.0f) std::abort();
      for (int64_t i = before * block.num_dense; i < block.size() * block.num_dense; ++i) {
        if (!std::isfinite(block.dense[i])) std::abort();
      }
    } else if (block.size() != before || status.message().empty()) {
      std::abort();
    }
    if (block.labels.size() * block.num_dense != block.dense.size()) std::abort();
    if (!block.multi_hot()) {
      if (block.labels.size() * block.num_sparse != block.sparse.size()) std::abort();
    } else {
      // Offsets of every field, each holding at least one id, ending at the last id.
      const auto& offsets = block.sparse_offsets;
      if (offsets.size() != block.labels.size() * block.num_sparse + 1 || offsets.front() != 0 ||
          offsets.back() != static_cast<int64_t>(block.sparse.size())) {
        std::abort();
      }
      for (size_t f = 0; f + 1 < offsets.size(); ++f) {
        if (offsets[f + 1] <= offsets[f]) std::abort();
      }
    }
    start = end + 1;
  }
  return 0;
}
