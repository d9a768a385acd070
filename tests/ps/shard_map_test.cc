#include "common/shard_map.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::StatusIs;
using ::testing::ElementsAre;

std::vector<std::string> Addresses(int n) {
  std::vector<std::string> a;
  for (int i = 0; i < n; ++i) a.push_back("ps-" + std::to_string(i) + ":7000");
  return a;
}

std::vector<int> Counts(const ShardMap& map) {
  std::vector<int> counts(map.num_servers(), 0);
  for (uint32_t s = 0; s < map.num_slots(); ++s) ++counts[map.owner_of_slot(s)];
  return counts;
}

// The fewest moves any balanced target can need, computed independently of
// PlanRebalance: each surviving server keeps at most its target, and at most
// S mod P of them can keep floor + 1.
size_t MinimalMoves(const ShardMap& map, int p) {
  const uint32_t floor = map.num_slots() / p;
  const uint32_t extra = map.num_slots() % p;
  size_t kept = 0;
  uint32_t above_floor = 0;
  std::vector<int> counts = Counts(map);
  for (int server = 0; server < p && server < static_cast<int>(counts.size()); ++server) {
    const uint32_t c = counts[server];
    kept += std::min(c, floor);
    if (c > floor) ++above_floor;
  }
  kept += std::min(above_floor, extra);
  return map.num_slots() - kept;
}

// Applies the plan and checks every property PlanRebalance promises. The
// direction rules (scale-out only onto new servers, scale-in only off removed
// ones) hold when `map` starts balanced; a skewed map must also fill or drain
// surviving servers.
void CheckPlan(const ShardMap& map, int p, bool starts_balanced = true) {
  SCOPED_TRACE("slots=" + std::to_string(map.num_slots()) + " from " +
               std::to_string(map.num_servers()) + " to " + std::to_string(p) + " servers");
  const std::vector<SlotMove> moves = map.PlanRebalance(p);
  EXPECT_EQ(moves.size(), MinimalMoves(map, p));

  std::set<uint32_t> moved;
  for (const SlotMove& m : moves) {
    EXPECT_TRUE(moved.insert(m.slot).second) << "slot " << m.slot << " moved twice";
    EXPECT_EQ(m.from, map.owner_of_slot(m.slot));
    EXPECT_NE(m.from, m.to);
    if (starts_balanced && p > map.num_servers()) {
      EXPECT_GE(m.to, static_cast<uint32_t>(map.num_servers())) << "scale-out onto an old server";
    }
    if (starts_balanced && p < map.num_servers()) {
      EXPECT_GE(m.from, static_cast<uint32_t>(p)) << "scale-in off a surviving server";
    }
  }

  auto next = map.WithMoves(moves, Addresses(p));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->epoch(), map.epoch() + 1);
  EXPECT_EQ(next->num_slots(), map.num_slots());
  ASSERT_EQ(next->num_servers(), p);
  const uint32_t floor = map.num_slots() / p;
  for (int c : Counts(*next)) {
    EXPECT_TRUE(c == static_cast<int>(floor) || c == static_cast<int>(floor) + 1) << c;
  }
  // Every slot owned exactly once: the per-server slot lists partition [0, S).
  std::vector<int> seen(map.num_slots(), 0);
  for (int server = 0; server < p; ++server) {
    for (uint32_t s : next->SlotsOwnedBy(server)) ++seen[s];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  // The plan moved exactly the slots whose owner differs.
  size_t changed = 0;
  for (uint32_t s = 0; s < map.num_slots(); ++s) {
    changed += next->owner_of_slot(s) != map.owner_of_slot(s);
  }
  EXPECT_EQ(changed, moves.size());
  // A balanced map needs no further moves.
  EXPECT_TRUE(next->PlanRebalance(p).empty());
}

TEST(ShardMapTest, BalancedIsContiguousAndEven) {
  const ShardMap map = ShardMap::Balanced(4096, Addresses(3));
  EXPECT_EQ(map.epoch(), 1u);
  EXPECT_EQ(map.num_slots(), 4096u);
  EXPECT_THAT(Counts(map), ElementsAre(1366, 1365, 1365));
  EXPECT_EQ(map.owner_of_slot(0), 0u);
  EXPECT_EQ(map.owner_of_slot(4095), 2u);
  for (uint32_t s = 1; s < map.num_slots(); ++s) {
    EXPECT_GE(map.owner_of_slot(s), map.owner_of_slot(s - 1));
  }
}

TEST(ShardMapTest, OwnerOfFollowsTheSlotHash) {
  const ShardMap map = ShardMap::Balanced(64, Addresses(4));
  for (uint64_t id = 0; id < 1000; ++id) {
    EXPECT_EQ(map.OwnerOf(3, id), map.owner_of_slot(SlotOf(3, id, 64)));
  }
}

TEST(ShardMapTest, ProtoRoundTrip) {
  const ShardMap map = ShardMap::Balanced(100, Addresses(3), 7);
  const v1::ShardMap proto = map.ToProto();
  EXPECT_EQ(proto.epoch(), 7u);
  EXPECT_EQ(proto.num_slots(), 100u);
  EXPECT_EQ(proto.owner_size(), 100);
  EXPECT_EQ(proto.addresses_size(), 3);
  auto back = ShardMap::FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, map);
}

TEST(ShardMapTest, CreateRejectsZeroSlots) {
  EXPECT_THAT(ShardMap::Create(1, 0, {}, Addresses(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_slots = 0"));
}

TEST(ShardMapTest, CreateRejectsNoServers) {
  EXPECT_THAT(ShardMap::Create(1, 2, {0, 0}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "addresses is empty"));
}

TEST(ShardMapTest, CreateRejectsWrongOwnerSize) {
  EXPECT_THAT(
      ShardMap::Create(1, 4, {0, 0, 0}, Addresses(1)),
      StatusIs(absl::StatusCode::kInvalidArgument, "owner has 3 entries but num_slots = 4"));
}

TEST(ShardMapTest, CreateRejectsOwnerOutOfRange) {
  EXPECT_THAT(ShardMap::Create(1, 3, {0, 5, 1}, Addresses(3)),
              StatusIs(absl::StatusCode::kInvalidArgument, "owner[1] = 5 but only 3 servers"));
}

TEST(ShardMapTest, FromProtoValidates) {
  v1::ShardMap proto = ShardMap::Balanced(8, Addresses(2)).ToProto();
  proto.set_num_slots(9);
  EXPECT_THAT(ShardMap::FromProto(proto), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   "owner has 8 entries but num_slots = 9"));
  proto = ShardMap::Balanced(8, Addresses(2)).ToProto();
  proto.set_owner(7, 2);
  EXPECT_THAT(ShardMap::FromProto(proto),
              StatusIs(absl::StatusCode::kInvalidArgument, "owner[7] = 2 but only 2 servers"));
}

TEST(ShardMapTest, SlotsOwnedBy) {
  const ShardMap map = ShardMap::Balanced(6, Addresses(3));
  EXPECT_THAT(map.SlotsOwnedBy(0), ElementsAre(0, 1));
  EXPECT_THAT(map.SlotsOwnedBy(1), ElementsAre(2, 3));
  EXPECT_THAT(map.SlotsOwnedBy(2), ElementsAre(4, 5));
  EXPECT_TRUE(map.SlotsOwnedBy(3).empty());
}

// The plan from a balanced map of 4096 slots on `from` servers to `to`
// servers, after CheckPlan has checked it.
std::vector<SlotMove> CheckedPlan(int from, int to) {
  const ShardMap map = ShardMap::Balanced(4096, Addresses(from));
  CheckPlan(map, to);
  return map.PlanRebalance(to);
}

TEST(ShardMapTest, ScaleOutMovesAQuarterOntoTheNewServer) {
  const std::vector<SlotMove> moves = CheckedPlan(3, 4);
  EXPECT_EQ(moves.size(), 1024u);
  for (const SlotMove& m : moves) EXPECT_EQ(m.to, 3u);
}

TEST(ShardMapTest, ScaleInDrainsOnlyTheHighestServer) {
  const std::vector<SlotMove> moves = CheckedPlan(4, 3);
  EXPECT_EQ(moves.size(), 1024u);
  for (const SlotMove& m : moves) EXPECT_EQ(m.from, 3u);
}

TEST(ShardMapTest, SameServerCountIsANoOpWhenBalanced) {
  EXPECT_TRUE(ShardMap::Balanced(4096, Addresses(5)).PlanRebalance(5).empty());
}

TEST(ShardMapTest, PlansAreBalancedAndMinimalForManyShapes) {
  for (uint32_t slots : {1u, 2u, 3u, 5u, 7u, 16u, 100u, 127u, 4096u}) {
    for (int from = 1; from <= 9; ++from) {
      for (int to = 1; to <= 9; ++to) {
        CheckPlan(ShardMap::Balanced(slots, Addresses(from)), to);
      }
    }
  }
}

TEST(ShardMapTest, RebalancesASkewedMapMinimally) {
  // Server 0 holds almost everything; the plan must still be minimal.
  std::vector<uint32_t> owner(100, 0);
  for (int s = 90; s < 100; ++s) owner[s] = 1 + s % 2;
  auto map = ShardMap::Create(3, 100, owner, Addresses(3));
  ASSERT_TRUE(map.ok()) << map.status();
  for (int p = 1; p <= 6; ++p) CheckPlan(*map, p, /*starts_balanced=*/false);
}

TEST(ShardMapTest, ChainedScaleOutThenScaleIn) {
  ShardMap map = ShardMap::Balanced(4096, Addresses(2));
  for (int p : {3, 5, 8, 4, 1, 6}) {
    CheckPlan(map, p);
    auto next = map.WithMoves(map.PlanRebalance(p), Addresses(p));
    ASSERT_TRUE(next.ok()) << next.status();
    map = *std::move(next);
  }
  EXPECT_EQ(map.epoch(), 7u);
}

TEST(ShardMapTest, WithMovesRejectsSlotOutOfRange) {
  const ShardMap map = ShardMap::Balanced(8, Addresses(2));
  EXPECT_THAT(map.WithMoves({{.slot = 8, .from = 1, .to = 0}}, Addresses(2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "moves[0].slot = 8 but num_slots = 8"));
}

TEST(ShardMapTest, WithMovesRejectsWrongFrom) {
  const ShardMap map = ShardMap::Balanced(8, Addresses(2));
  EXPECT_THAT(
      map.WithMoves({{.slot = 0, .from = 1, .to = 0}}, Addresses(2)),
      StatusIs(absl::StatusCode::kInvalidArgument, "moves[0].from = 1 but slot 0 is owned by 0"));
  // Moving the same slot twice from its original owner is caught too.
  EXPECT_THAT(map.WithMoves({{.slot = 0, .from = 0, .to = 1}, {.slot = 0, .from = 0, .to = 1}},
                            Addresses(2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "moves[1].from = 0"));
}

TEST(ShardMapTest, WithMovesRejectsDestinationOutOfRange) {
  const ShardMap map = ShardMap::Balanced(8, Addresses(2));
  EXPECT_THAT(map.WithMoves({{.slot = 0, .from = 0, .to = 2}}, Addresses(2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "moves[0].to = 2 but only 2 servers"));
}

TEST(ShardMapTest, WithMovesRejectsScaleInThatLeavesSlotsOnARemovedServer) {
  const ShardMap map = ShardMap::Balanced(8, Addresses(3));
  // Nothing moved off server 2, yet the new server list has only two entries.
  EXPECT_THAT(map.WithMoves({}, Addresses(2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "but only 2 servers"));
}

}  // namespace
}  // namespace shadowsync
