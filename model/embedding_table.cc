#include "model/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace shadowsync::model {

uint64_t BucketOf(uint32_t table, uint64_t raw, uint64_t hash_buckets) {
  return HashId(table, raw) % hash_buckets;
}

void InitEmbeddingRow(uint64_t seed, uint32_t table, uint64_t id, uint64_t hash_buckets,
                      std::span<float> row) {
  const float scale = static_cast<float>(std::sqrt(1.0 / static_cast<double>(hash_buckets)));
  const uint64_t base = Mix64(HashId(table, id) ^ Mix64(seed));
  for (size_t k = 0; k < row.size(); ++k) {
    row[k] = (2.0f * UniformFromKey(base + k) - 1.0f) * scale;
  }
}

LocalEmbeddingStore::LocalEmbeddingStore(LocalStoreOptions options)
    : options_(std::move(options)),
      state_floats_(options_.dim * StateFloatsPerParam(options_.optimizer.kind)),
      row_floats_(options_.dim + state_floats_) {
  for (size_t t = 0; t < options_.tables.size(); ++t) {
    shards_.push_back(std::make_unique<Shard[]>(kShards));
  }
}

LocalEmbeddingStore::~LocalEmbeddingStore() = default;

LocalEmbeddingStore::Shard& LocalEmbeddingStore::ShardFor(uint32_t table, uint64_t id) const {
  return shards_[table][Mix64(id) % kShards];
}

float* LocalEmbeddingStore::AllocateLocked(Shard& shard) {
  if (shard.used_in_last_chunk == kRowsPerChunk) {
    // Not zeroed: every row is written when it is allocated, so a chunk's
    // pages are touched (and cost memory) only as rows fill it. Zeroing the
    // whole chunk up front faulted in 26 x 64 chunks of 4096 rows on the
    // first step of a run, most of them for a handful of rows.
    shard.chunks.push_back(std::make_unique_for_overwrite<float[]>(kRowsPerChunk * row_floats_));
    shard.used_in_last_chunk = 0;
  }
  return shard.chunks.back().get() + shard.used_in_last_chunk++ * row_floats_;
}

float* LocalEmbeddingStore::Find(uint32_t table, uint64_t id) const {
  Shard& shard = ShardFor(table, id);
  ReaderMutexLock lock(&shard.mu);
  auto it = shard.rows.find(id);
  return it == shard.rows.end() ? nullptr : it->second;
}

float* LocalEmbeddingStore::GetOrCreate(uint32_t table, uint64_t id) {
  if (float* row = Find(table, id); row != nullptr) return row;
  Shard& shard = ShardFor(table, id);
  MutexLock lock(&shard.mu);
  auto [it, inserted] = shard.rows.try_emplace(id, nullptr);
  if (inserted) {
    // Initialised before it is published under the lock, so no reader can see
    // a half-written row.
    float* row = AllocateLocked(shard);
    InitEmbeddingRow(options_.seed, table, id, options_.tables[table].hash_buckets,
                     std::span<float>(row, options_.dim));
    std::fill(row + options_.dim, row + row_floats_, 0.0f);
    it->second = row;
  }
  return it->second;
}

absl::Status LocalEmbeddingStore::Lookup(std::span<TableRows> rows) {
  if (rows.size() != options_.tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookup names ", rows.size(), " tables, store has ", options_.tables.size()));
  }
  const int dim = options_.dim;
  for (uint32_t t = 0; t < rows.size(); ++t) {
    TableRows& r = rows[t];
    r.values.resize(r.ids.size() * dim);
    for (size_t i = 0; i < r.ids.size(); ++i) {
      float* out = r.values.data() + i * dim;
      if (const float* row = Find(t, r.ids[i]); row != nullptr) {
        CopyRelaxed(row, out, dim);
      } else {
        InitEmbeddingRow(options_.seed, t, r.ids[i], options_.tables[t].hash_buckets,
                         std::span<float>(out, dim));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LocalEmbeddingStore::Push(std::span<const TableRows> grads) {
  if (grads.size() != options_.tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push names ", grads.size(), " tables, store has ", options_.tables.size()));
  }
  const int dim = options_.dim;
  for (uint32_t t = 0; t < grads.size(); ++t) {
    const TableRows& g = grads[t];
    if (g.values.size() != g.ids.size() * dim) {
      return absl::InvalidArgumentError(absl::StrCat("push to table ", t, ": ", g.values.size(),
                                                     " gradient values for ", g.ids.size(),
                                                     " ids of dim ", dim));
    }
    for (size_t i = 0; i < g.ids.size(); ++i) {
      float* row = GetOrCreate(t, g.ids[i]);
      ApplyUpdateRelaxed(options_.optimizer, row, row + dim, g.values.data() + i * dim, dim);
    }
  }
  return absl::OkStatus();
}

int64_t LocalEmbeddingStore::num_rows() const {
  int64_t n = 0;
  for (size_t t = 0; t < shards_.size(); ++t) {
    for (int s = 0; s < kShards; ++s) {
      ReaderMutexLock lock(&shards_[t][s].mu);
      n += static_cast<int64_t>(shards_[t][s].rows.size());
    }
  }
  return n;
}

void LocalEmbeddingStore::ForEachRow(const RowVisitor& visit) const {
  const int dim = options_.dim;
  for (uint32_t t = 0; t < shards_.size(); ++t) {
    std::vector<std::pair<uint64_t, const float*>> rows;
    for (int s = 0; s < kShards; ++s) {
      ReaderMutexLock lock(&shards_[t][s].mu);
      for (const auto& [id, row] : shards_[t][s].rows) rows.emplace_back(id, row);
    }
    std::sort(rows.begin(), rows.end());
    for (const auto& [id, row] : rows) {
      visit(t, id, std::span<const float>(row, dim),
            std::span<const float>(row + dim, state_floats_));
    }
  }
}

void LocalEmbeddingStore::EraseRow(uint32_t table, uint64_t id) {
  Shard& shard = ShardFor(table, id);
  MutexLock lock(&shard.mu);
  shard.rows.erase(id);
}

void LocalEmbeddingStore::PutRow(uint32_t table, uint64_t id, std::span<const float> values,
                                 std::span<const float> state) {
  float* row = GetOrCreate(table, id);
  std::copy(values.begin(), values.end(), row);
  std::copy(state.begin(), state.end(), row + options_.dim);
}

}  // namespace shadowsync::model
