#include "common/hash.h"

#include <bit>
#include <cmath>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace shadowsync {
namespace {

// Pinned values: data on disk and shard maps depend on them never changing.
TEST(HashTest, ValuesArePinned) {
  EXPECT_EQ(Mix64(0), 0xe220a8397b1dcdafULL);
  static_assert(HashId(3, 42) == HashId(3, 42));
  EXPECT_NE(HashId(0, 42), HashId(1, 42));
}

TEST(HashTest, SlotsSpreadEvenly) {
  constexpr uint32_t kSlots = 64;
  std::vector<int> counts(kSlots);
  for (uint64_t id = 0; id < 64000; ++id) ++counts[SlotOf(5, id, kSlots)];
  for (int c : counts) {
    EXPECT_GT(c, 800);
    EXPECT_LT(c, 1200);
  }
}

// RowValueHash as its comment defines it, written the slow way.
uint64_t ReferenceRowValueHash(uint32_t table, uint64_t id, const std::vector<float>& v) {
  const uint64_t key = RowKeyHash(table, id);
  uint64_t lane[4];
  for (uint64_t k = 0; k < 4; ++k) lane[k] = Mix64(key + k);
  for (size_t j = 0; 2 * j < v.size(); ++j) {
    uint64_t word = std::bit_cast<uint32_t>(v[2 * j]);
    if (2 * j + 1 < v.size()) {
      word |= static_cast<uint64_t>(std::bit_cast<uint32_t>(v[2 * j + 1])) << 32;
    }
    lane[j % 4] = Mix64(lane[j % 4] ^ word);
  }
  return Mix64(Mix64(Mix64(lane[0] ^ lane[1]) ^ lane[2]) ^ lane[3] ^ v.size());
}

TEST(HashTest, RowValueHashFollowsItsDefinition) {
  for (size_t n : {0, 1, 2, 7, 8, 9, 16, 31, 32, 64, 65}) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.37f - 3.0f;
    EXPECT_EQ(RowValueHash(4, 99, v), ReferenceRowValueHash(4, 99, v)) << n << " floats";
  }
}

// The stream checksums rely on a changed, moved or missing value changing
// the row's hash.
TEST(HashTest, RowValueHashSeesEveryValueAndItsPosition) {
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) + 0.5f;
  std::set<uint64_t> seen = {RowValueHash(1, 7, v)};
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<float> changed = v;
    changed[i] = std::nextafter(changed[i], 1e9f);  // one bit
    EXPECT_TRUE(seen.insert(RowValueHash(1, 7, changed)).second) << "value " << i;
    std::vector<float> swapped = v;
    std::swap(swapped[i], swapped[(i + 1) % v.size()]);
    EXPECT_TRUE(seen.insert(RowValueHash(1, 7, swapped)).second) << "swap at " << i;
  }
  std::vector<float> longer = v;
  longer.push_back(0.0f);  // a trailing zero is not the same row
  EXPECT_TRUE(seen.insert(RowValueHash(1, 7, longer)).second);
  EXPECT_TRUE(seen.insert(RowValueHash(1, 8, v)).second);  // another id
  EXPECT_TRUE(seen.insert(RowValueHash(2, 7, v)).second);  // another table
}

TEST(HashTest, UniformFromKeyIsInUnitInterval) {
  double sum = 0;
  for (uint64_t k = 0; k < 10000; ++k) {
    const float u = UniformFromKey(k);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace shadowsync
