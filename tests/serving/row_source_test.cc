// The served model's row stores: RowTable (all in RAM) and DiskRows (RocksDB
// behind a CLOCK cache) read back what was put, as initial values what was
// not or was erased, and count where each row came from.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/embedding_table.h"
#include "serving/disk_rows.h"
#include "serving/row_table.h"
#include "tests/util/test_util.h"

namespace shadowsync::serving {
namespace {

using ::shadowsync::testing::IsOkAndHolds;
using ::shadowsync::testing::StatusIs;

model::LocalStoreOptions Options() {
  model::LocalStoreOptions o;
  o.dim = 4;
  o.tables = {{"a", 1000}, {"b", 50}};
  o.seed = 9;
  return o;
}

std::vector<float> Row(float x) { return {x, x + 1, x + 2, x + 3}; }

std::vector<float> Read(const RowSource& rows, uint32_t table, uint64_t id,
                        RowCounts* counts = nullptr) {
  std::vector<model::TableRows> lookup(2);
  lookup[table].ids = {id};
  RowCounts ignored;
  SS_EXPECT_OK(rows.Lookup(lookup, counts != nullptr ? counts : &ignored));
  return lookup[table].values;
}

std::vector<float> Initial(uint32_t table, uint64_t id) {
  std::vector<float> row(4);
  model::InitEmbeddingRow(9, table, id, Options().tables[table].hash_buckets, row);
  return row;
}

class RowSourceTest : public ::testing::TestWithParam<int64_t> {
 protected:
  // GetParam(): 0 for a RowTable, else DiskRows' cache bytes.
  std::unique_ptr<RowSource> Make() {
    if (GetParam() == 0) return std::make_unique<RowTable>(Options());
    absl::StatusOr<std::unique_ptr<DiskRows>> rows =
        DiskRows::Create(Options(), dir_.path().string(), GetParam());
    CHECK(rows.ok()) << rows.status();
    return *std::move(rows);
  }
  testing::ScratchDir dir_;
};

TEST_P(RowSourceTest, StoredRowsReadBackAndOthersReadAsTheirInitialValues) {
  std::unique_ptr<RowSource> rows = Make();
  SS_ASSERT_OK(rows->Put(0, 7, Row(1)));
  SS_ASSERT_OK(rows->Put(1, 7, Row(2)));
  SS_ASSERT_OK(rows->Put(0, 7, Row(3)));  // replaces
  SS_ASSERT_OK(rows->Seal());
  EXPECT_EQ(rows->num_rows(), 2);
  EXPECT_EQ(Read(*rows, 0, 7), Row(3));
  EXPECT_EQ(Read(*rows, 1, 7), Row(2));
  EXPECT_EQ(Read(*rows, 0, 8), Initial(0, 8));
  EXPECT_THAT(rows->Contains(0, 7), IsOkAndHolds(true));
  EXPECT_THAT(rows->Contains(0, 8), IsOkAndHolds(false));
}

// Against a std::map under random puts and erases: growth, deletion and
// row reuse (and for DiskRows, a cache far smaller than the rows) must
// never lose or misplace a row.
TEST_P(RowSourceTest, AgreesWithAMapUnderRandomPutsAndErases) {
  std::unique_ptr<RowSource> rows = Make();
  std::map<std::pair<uint32_t, uint64_t>, float> want;
  std::mt19937_64 rng(5);
  for (int step = 0; step < 100000; ++step) {
    const uint32_t table = rng() % 2;
    const uint64_t id = rng() % 3000;  // Collisions and reuse, many of each.
    if (rng() % 3 == 0) {
      SS_ASSERT_OK(rows->Erase(table, id));
      want.erase({table, id});
    } else {
      const float x = static_cast<float>(step);
      SS_ASSERT_OK(rows->Put(table, id, Row(x)));
      want[{table, id}] = x;
    }
  }
  SS_ASSERT_OK(rows->Seal());
  EXPECT_EQ(rows->num_rows(), static_cast<int64_t>(want.size()));
  RowCounts counts;
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t table = 0; table < 2; ++table) {
      for (uint64_t id = 0; id < 3000; ++id) {
        const auto it = want.find({table, id});
        ASSERT_EQ(Read(*rows, table, id, &counts),
                  it != want.end() ? Row(it->second) : Initial(table, id))
            << table << "/" << id;
      }
    }
  }
  const int64_t stored = 2 * static_cast<int64_t>(want.size());
  EXPECT_EQ(counts.initial, 2 * 6000 - stored);
  EXPECT_EQ(counts.memory + counts.cache + counts.disk, stored);
  if (GetParam() == 0) {
    EXPECT_EQ(counts.memory, stored);
  } else {
    // The cache holds a few hundred of the rows: most reads go to disk.
    EXPECT_GT(counts.disk, stored / 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, RowSourceTest, ::testing::Values(0, 16 << 10),
                         [](const auto& info) {
                           return info.param == 0 ? std::string("RowTable")
                                                  : std::string("DiskRows");
                         });

TEST(RowTableTest, ErasedRowsStorageIsReused) {
  RowTable rows(Options());
  for (uint64_t id = 0; id < 5000; ++id) SS_ASSERT_OK(rows.Put(0, id, Row(static_cast<float>(id))));
  for (uint64_t id = 0; id < 5000; ++id) SS_ASSERT_OK(rows.Erase(0, id));
  const int64_t bytes = rows.memory_bytes();
  EXPECT_EQ(rows.num_rows(), 0);
  for (uint64_t id = 5000; id < 10000; ++id) {
    SS_ASSERT_OK(rows.Put(0, id, Row(static_cast<float>(id))));
  }
  EXPECT_EQ(rows.memory_bytes(), bytes);
  EXPECT_EQ(std::vector<float>(rows.Find(0, 9999), rows.Find(0, 9999) + 4), Row(9999));
}

// A row read twice is read from disk once, then from the cache, as long
// as the cache can hold the rows read; the cache stays within its size.
TEST(DiskRowsTest, RepeatedReadsComeFromTheCacheWithinItsSize) {
  testing::ScratchDir dir;
  absl::StatusOr<std::unique_ptr<DiskRows>> rows =
      DiskRows::Create(Options(), dir.path().string(), 1 << 20);
  SS_ASSERT_OK(rows);
  for (uint64_t id = 0; id < 1000; ++id) {
    SS_ASSERT_OK((*rows)->Put(0, id, Row(static_cast<float>(id))));
  }
  SS_ASSERT_OK((*rows)->Seal());
  EXPECT_GT((*rows)->cache_rows(), 1000);
  RowCounts counts;
  for (uint64_t id = 0; id < 100; ++id) Read(**rows, 0, id, &counts);
  EXPECT_EQ(counts.disk, 100);
  EXPECT_EQ(counts.cache, 0);
  for (uint64_t id = 0; id < 100; ++id) {
    EXPECT_EQ(Read(**rows, 0, id, &counts), Row(static_cast<float>(id)));
  }
  EXPECT_EQ(counts.disk, 100);
  EXPECT_EQ(counts.cache, 100);
  EXPECT_LT((*rows)->memory_bytes(), 2 << 20);
  // The store's directory goes with it.
  const std::string store = (*rows)->dir();
  EXPECT_TRUE(std::filesystem::exists(store));
  rows->reset();
  EXPECT_FALSE(std::filesystem::exists(store));
}

TEST(DiskRowsTest, AParentDirectoryThatCannotBeMadeIsNamed) {
  testing::ScratchDir dir;
  const std::string file = dir.File("file");
  testing::WriteFile(file, "x");
  EXPECT_THAT(DiskRows::Create(Options(), file + "/under", 1 << 20),
              StatusIs(absl::StatusCode::kUnavailable, file));
}

}  // namespace
}  // namespace shadowsync::serving
