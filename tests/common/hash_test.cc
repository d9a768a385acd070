#include "common/hash.h"

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
