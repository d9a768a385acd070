#include "serving/row_table.h"

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/embedding_table.h"

namespace shadowsync::serving {
namespace {

model::LocalStoreOptions Options() {
  model::LocalStoreOptions o;
  o.dim = 4;
  o.tables = {{"a", 1000}, {"b", 50}};
  o.seed = 9;
  return o;
}

std::vector<float> Row(float x) { return {x, x + 1, x + 2, x + 3}; }

TEST(RowTableTest, StoredRowsReadBackAndOthersReadAsTheirInitialValues) {
  RowTable rows(Options());
  rows.Put(0, 7, Row(1));
  rows.Put(1, 7, Row(2));
  rows.Put(0, 7, Row(3));  // replaces
  EXPECT_EQ(rows.num_rows(), 2);

  std::vector<model::TableRows> lookup(2);
  lookup[0].ids = {7, 8};
  lookup[1].ids = {7};
  rows.Lookup(lookup);
  EXPECT_EQ(std::vector<float>(lookup[0].values.begin(), lookup[0].values.begin() + 4), Row(3));
  EXPECT_EQ(lookup[1].values, Row(2));
  std::vector<float> initial(4);
  model::InitEmbeddingRow(9, 0, 8, 1000, initial);
  EXPECT_EQ(std::vector<float>(lookup[0].values.begin() + 4, lookup[0].values.end()), initial);
}

// Against a std::map under random puts and erases: growth, backward-shift
// deletion and row reuse must never lose or misplace a row.
TEST(RowTableTest, AgreesWithAMapUnderRandomPutsAndErases) {
  RowTable rows(Options());
  std::map<std::pair<uint32_t, uint64_t>, float> want;
  std::mt19937_64 rng(5);
  for (int step = 0; step < 200000; ++step) {
    const uint32_t table = rng() % 2;
    const uint64_t id = rng() % 3000;  // Collisions and reuse, many of each.
    if (rng() % 3 == 0) {
      rows.Erase(table, id);
      want.erase({table, id});
    } else {
      const float x = static_cast<float>(step);
      rows.Put(table, id, Row(x));
      want[{table, id}] = x;
    }
  }
  EXPECT_EQ(rows.num_rows(), static_cast<int64_t>(want.size()));
  for (uint32_t table = 0; table < 2; ++table) {
    for (uint64_t id = 0; id < 3000; ++id) {
      const float* row = rows.Find(table, id);
      const auto it = want.find({table, id});
      ASSERT_EQ(row != nullptr, it != want.end()) << table << "/" << id;
      if (row != nullptr) {
        ASSERT_EQ(std::vector<float>(row, row + 4), Row(it->second)) << table << "/" << id;
      }
    }
  }
}

TEST(RowTableTest, ErasedRowsReadAsTheirInitialValuesAndTheirStorageIsReused) {
  RowTable rows(Options());
  for (uint64_t id = 0; id < 5000; ++id) rows.Put(0, id, Row(static_cast<float>(id)));
  for (uint64_t id = 0; id < 5000; ++id) rows.Erase(0, id);
  const int64_t bytes = rows.bytes();
  EXPECT_EQ(rows.num_rows(), 0);
  EXPECT_FALSE(rows.Contains(0, 17));
  for (uint64_t id = 5000; id < 10000; ++id) rows.Put(0, id, Row(static_cast<float>(id)));
  EXPECT_EQ(rows.bytes(), bytes);
  EXPECT_EQ(std::vector<float>(rows.Find(0, 9999), rows.Find(0, 9999) + 4), Row(9999));
}

}  // namespace
}  // namespace shadowsync::serving
