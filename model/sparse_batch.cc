#include "model/sparse_batch.h"

namespace shadowsync::model {

SparseBatch::SparseBatch(int num_tables)
    : dedupe_(num_tables), row_index_(num_tables), offsets_(num_tables), rows_(num_tables) {}

void SparseBatch::Collect(const ExampleBlock& block, int64_t begin, int64_t end,
                          std::span<const EmbeddingTableConfig> tables) {
  for (size_t t = 0; t < tables.size(); ++t) {
    auto& dedupe = dedupe_[t];
    auto& ids = rows_[t].ids;
    auto& index = row_index_[t];
    auto& offsets = offsets_[t];
    dedupe.clear();
    ids.clear();
    index.clear();
    offsets.assign(1, 0);
    for (int64_t e = begin; e < end; ++e) {
      for (const uint64_t id : block.ids(e, static_cast<int>(t))) {
        const uint64_t row = BucketOf(static_cast<uint32_t>(t), id, tables[t].hash_buckets);
        auto [it, inserted] = dedupe.try_emplace(row, static_cast<int32_t>(ids.size()));
        if (inserted) ids.push_back(row);
        index.push_back(it->second);
      }
      offsets.push_back(static_cast<int32_t>(index.size()));
    }
  }
}

void SparseBatch::Bind(std::span<SparseInput> inputs) const {
  for (size_t t = 0; t < inputs.size(); ++t) {
    inputs[t] = SparseInput{rows_[t].values, row_index_[t], offsets_[t]};
  }
}

}  // namespace shadowsync::model
