// Embedding-table layouts for the store and server tests.
#ifndef SHADOWSYNC_TESTS_UTIL_EMBEDDING_TABLES_H_
#define SHADOWSYNC_TESTS_UTIL_EMBEDDING_TABLES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/embedding_table.h"

namespace shadowsync::testing {

// `count` tables named <prefix>0, <prefix>1, ..., each of `hash_buckets` rows.
inline std::vector<model::EmbeddingTableConfig> NumberedTables(int count, uint64_t hash_buckets,
                                                               std::string_view prefix = "t") {
  std::vector<model::EmbeddingTableConfig> tables;
  for (int t = 0; t < count; ++t) {
    tables.push_back(
        {.name = std::string(prefix) + std::to_string(t), .hash_buckets = hash_buckets});
  }
  return tables;
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_EMBEDDING_TABLES_H_
