// The syncer against real gRPC servers on 127.0.0.1:0: the centre variable
// (first init wins, atomic adds, versions, range split over replicas), the
// all-reduce rounds (exact mean, membership by contributing or joining,
// timeouts, leave from one group or all, replacement, group isolation), input
// checks, and the metrics and health endpoints.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shadowsync/v1/syncer.grpc.pb.h"
#include "syncer/all_reduce.h"
#include "syncer/client/syncer_client.h"
#include "syncer/syncer_server.h"
#include "tests/util/grpc_call.h"
#include "tests/util/http_get.h"
#include "tests/util/test_util.h"

namespace shadowsync::syncer {
namespace {

using ::shadowsync::testing::CallRpc;
using ::shadowsync::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Clock = std::chrono::steady_clock;

// The mean exactly as the syncer computes it: double sums in member-name
// order (the map's), divided by the count, rounded to float.
std::vector<float> Mean(const std::map<std::string, std::vector<float>>& by_member) {
  const size_t n = by_member.begin()->second.size();
  std::vector<double> sum(n, 0.0);
  for (const auto& [member, v] : by_member) {
    for (size_t i = 0; i < n; ++i) sum[i] += static_cast<double>(v[i]);
  }
  std::vector<float> mean(n);
  for (size_t i = 0; i < n; ++i) {
    mean[i] = static_cast<float>(sum[i] / static_cast<double>(by_member.size()));
  }
  return mean;
}

// Values with long mantissas, so a different summation order would show.
std::vector<float> Values(int64_t n, int seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>((i * 7919 + seed * 104729) % 10007) / 3.0f - 1000.0f + 0.1f * seed;
  }
  return v;
}

// A centre request (InitCentre, AddToCentre, PullCentre, AllReduce) for
// [offset, ...) of a vector of `total` floats.
template <typename Request>
Request RangeRequest(uint64_t offset, uint64_t total) {
  Request request;
  request.set_offset(offset);
  request.set_total(total);
  return request;
}

class SyncerTest : public ::testing::Test {
 protected:
  void StartSyncers(int replicas, absl::Duration member_timeout = absl::Seconds(10),
                    const std::function<void(SyncerServerOptions&)>& configure = nullptr) {
    for (int i = 0; i < replicas; ++i) {
      SyncerServerOptions o;
      o.grpc_address = "127.0.0.1:0";
      o.metrics_address = "127.0.0.1:0";
      o.service.member_timeout = member_timeout;
      o.shutdown_grace = absl::Milliseconds(500);
      if (configure) configure(o);
      auto server = SyncerServer::Start(std::move(o));
      ASSERT_TRUE(server.ok()) << server.status();
      addresses_.push_back((*server)->address());
      stubs_.push_back(v1::Syncer::NewStub(
          grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials())));
      servers_.push_back(*std::move(server));
    }
  }

  std::unique_ptr<SyncerClient> Client(const std::string& member, int64_t n) {
    SyncerClientOptions o{
        .addresses = addresses_, .member = member, .rpc_deadline = absl::Seconds(20)};
    auto client = SyncerClient::Connect(std::move(o), n);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  v1::SyncerStatsResponse Stats(int replica) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineFromNow(absl::Seconds(5)));
    v1::SyncerStatsResponse response;
    EXPECT_TRUE(stubs_[replica]->Stats(&context, v1::SyncerStatsRequest(), &response).ok());
    return response;
  }

  // The open-round contributors of `group` on replica 0.
  std::vector<std::string> Contributors(const std::string& group) {
    const v1::SyncerStatsResponse stats = Stats(0);
    for (const v1::SyncerGroupStats& g : stats.groups()) {
      if (g.group() == group) return {g.contributors().begin(), g.contributors().end()};
    }
    return {};
  }

  // Waits (polling the Stats RPC) until the open round of `group` has exactly
  // `contributors` on every replica.
  void AwaitContributors(const std::string& group, const std::vector<std::string>& contributors) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      bool all = true;
      for (size_t r = 0; r < stubs_.size() && all; ++r) {
        all = false;
        const v1::SyncerStatsResponse stats = Stats(static_cast<int>(r));
        for (const v1::SyncerGroupStats& g : stats.groups()) {
          if (g.group() == group) {
            all = std::vector<std::string>(g.contributors().begin(), g.contributors().end()) ==
                  contributors;
          }
        }
      }
      if (all) return;
      std::this_thread::sleep_for(
          std::chrono::milliseconds(2));  // Polling another process's state.
    }
    ADD_FAILURE() << "contributors of '" << group << "' never became " << contributors.size();
  }

  // Makes `clients` (sorted by member name) the live members of a fresh
  // `group`: the first completes a round alone (a fresh group has no live
  // members), the others join the next round, which the first completes.
  void Bootstrap(const std::string& group, const std::vector<SyncerClient*>& clients,
                 const std::vector<std::string>& members, int64_t n) {
    std::vector<float> v(n, 0.0f);
    auto first = clients[0]->AllReduceMean(group, v, v);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_EQ(first->members, 1);
    std::vector<std::thread> threads;
    for (size_t i = 1; i < clients.size(); ++i) {
      threads.emplace_back([&, i] {
        std::vector<float> w(n, 0.0f);
        auto r = clients[i]->AllReduceMean(group, w, w);
        EXPECT_TRUE(r.ok()) << r.status();
        if (r.ok()) {
          EXPECT_EQ(r->members, static_cast<int>(clients.size()));
        }
      });
    }
    AwaitContributors(group, std::vector<std::string>(members.begin() + 1, members.end()));
    auto all = clients[0]->AllReduceMean(group, v, v);
    for (std::thread& t : threads) t.join();
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(all->members, static_cast<int>(clients.size()));
  }

  // Everyone in `clients` contributes `values[i]` concurrently; returns each
  // one's result and output.
  struct Contribution {
    absl::StatusOr<RoundResult> result;
    std::vector<float> out;
  };
  std::vector<Contribution> RoundConcurrently(const std::string& group,
                                              const std::vector<SyncerClient*>& clients,
                                              const std::vector<std::vector<float>>& values) {
    std::vector<Contribution> got(clients.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < clients.size(); ++i) {
      threads.emplace_back([&, i] {
        got[i].out.assign(values[i].size(), -1.0f);
        got[i].result = clients[i]->AllReduceMean(group, values[i], got[i].out);
      });
    }
    for (std::thread& t : threads) t.join();
    return got;
  }

  std::vector<std::unique_ptr<SyncerServer>> servers_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<v1::Syncer::Stub>> stubs_;
};

// ---- Centre -----------------------------------------------------------------

TEST_F(SyncerTest, FirstInitWinsAndPullReturnsIt) {
  StartSyncers(1);
  constexpr int64_t kN = 1000;
  auto a = Client("trainer-0", kN);
  auto b = Client("trainer-1", kN);
  const std::vector<float> va = Values(kN, 1);
  const std::vector<float> vb = Values(kN, 2);
  std::vector<float> centre(kN);
  SS_ASSERT_OK(a->InitCentre(va, centre));
  EXPECT_EQ(centre, va);
  SS_ASSERT_OK(b->InitCentre(vb, centre));
  EXPECT_EQ(centre, va);  // The second init keeps the first values.
  std::vector<float> pulled(kN);
  uint64_t version = 99;
  SS_ASSERT_OK(b->PullCentre(pulled, &version));
  EXPECT_EQ(pulled, va);
  EXPECT_EQ(version, 0u);
}

TEST_F(SyncerTest, PullOrAddBeforeInitIsFailedPrecondition) {
  StartSyncers(2);
  auto client = Client("trainer-0", 11);
  std::vector<float> centre(11);
  EXPECT_THAT(client->PullCentre(centre),
              StatusIs(absl::StatusCode::kFailedPrecondition, "centre not initialised"));
  EXPECT_FALSE(Stats(0).has_range());  // A pull claims a length but never binds it.
  EXPECT_THAT(client->AddToCentre(centre),
              StatusIs(absl::StatusCode::kFailedPrecondition, "centre not initialised"));
}

TEST_F(SyncerTest, ConcurrentAddsLoseNothing) {
  StartSyncers(2);
  constexpr int64_t kN = 1001;  // Odd: replicas hold 500 and 501 floats.
  constexpr int kThreads = 4;
  constexpr int kAdds = 100;
  auto init = Client("init", kN);
  std::vector<float> zeros(kN, 0.0f), centre(kN);
  SS_ASSERT_OK(init->InitCentre(zeros, centre));
  // Deltas in multiples of 1/4 below 2: every partial sum is exact in float.
  auto delta = [](int thread, int64_t i) { return static_cast<float>((i + thread) % 8) * 0.25f; };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = Client("trainer-" + std::to_string(t), kN);
      std::vector<float> d(kN);
      for (int64_t i = 0; i < kN; ++i) d[i] = delta(t, i);
      for (int k = 0; k < kAdds; ++k) SS_EXPECT_OK(client->AddToCentre(d));
    });
  }
  for (std::thread& t : threads) t.join();
  uint64_t version = 0;
  SS_ASSERT_OK(init->PullCentre(centre, &version));
  EXPECT_EQ(version, static_cast<uint64_t>(kThreads * kAdds));
  for (int64_t i = 0; i < kN; ++i) {
    float want = 0;
    for (int t = 0; t < kThreads; ++t) want += kAdds * delta(t, i);
    ASSERT_EQ(centre[i], want) << "element " << i;
  }
  EXPECT_EQ(Stats(1).centre_version(), static_cast<uint64_t>(kThreads * kAdds));
}

TEST_F(SyncerTest, AddAndPullReturnsTheNewCentreAndVersionCountsAdds) {
  StartSyncers(2);
  constexpr int64_t kN = 7;
  auto client = Client("trainer-0", kN);
  std::vector<float> centre(kN);
  SS_ASSERT_OK(client->InitCentre(std::vector<float>(kN, 1.0f), centre));
  const std::vector<float> delta = {0.5f, -1.0f, 2.0f, 0.0f, 0.25f, 3.0f, -0.5f};
  uint64_t version = 0;
  SS_ASSERT_OK(client->AddAndPull(delta, centre, &version));
  EXPECT_THAT(centre, ElementsAre(1.5f, 0.0f, 3.0f, 1.0f, 1.25f, 4.0f, 0.5f));
  EXPECT_EQ(version, 1u);
  SS_ASSERT_OK(client->AddToCentre(delta));
  // AddAndPull may alias: the delta buffer receives the centre.
  std::vector<float> inout = delta;
  SS_ASSERT_OK(client->AddAndPull(inout, inout, &version));
  EXPECT_THAT(inout, ElementsAre(2.5f, -2.0f, 7.0f, 1.0f, 1.75f, 10.0f, -0.5f));
  EXPECT_EQ(version, 3u);
  EXPECT_GT(client->bytes_sent(), 0);
  EXPECT_GT(client->bytes_received(), 0);
}

TEST_F(SyncerTest, RangesFollowTheReplicaSplit) {
  StartSyncers(3);
  constexpr int64_t kN = 1001;
  auto client = Client("trainer-0", kN);
  ASSERT_EQ(client->num_replicas(), 3);
  const std::vector<float> v = Values(kN, 3);
  std::vector<float> centre(kN);
  SS_ASSERT_OK(client->InitCentre(v, centre));
  EXPECT_EQ(centre, v);
  for (int r = 0; r < 3; ++r) {
    const v1::SyncerStatsResponse stats = Stats(r);
    ASSERT_TRUE(stats.has_range());
    EXPECT_EQ(stats.offset(), static_cast<uint64_t>(r * kN / 3));
    EXPECT_EQ(stats.offset() + stats.length(), static_cast<uint64_t>((r + 1) * kN / 3));
    EXPECT_EQ(stats.total(), static_cast<uint64_t>(kN));
  }
}

// ---- All-reduce ----------------------------------------------------------------

TEST_F(SyncerTest, SingleMemberCompletesAtOnceWithItsOwnValues) {
  StartSyncers(2);
  constexpr int64_t kN = 101;
  auto client = Client("trainer-0", kN);
  const std::vector<float> v = Values(kN, 4);
  std::vector<float> out(kN);
  auto r = client->AllReduceMean("", v, out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->members, 1);
  EXPECT_EQ(r->round, 1u);
  EXPECT_EQ(out, v);
}

TEST_F(SyncerTest, ThreeMembersGetExactlyTheMeanForTenRounds) {
  StartSyncers(2);
  constexpr int64_t kN = 5001;
  auto a = Client("trainer-0", kN), b = Client("trainer-1", kN), c = Client("trainer-2", kN);
  const std::vector<SyncerClient*> clients = {a.get(), b.get(), c.get()};
  Bootstrap("", clients, {"trainer-0", "trainer-1", "trainer-2"}, kN);
  for (int round = 0; round < 10; ++round) {
    std::vector<std::vector<float>> values;
    std::map<std::string, std::vector<float>> by_member;
    for (int m = 0; m < 3; ++m) {
      values.push_back(Values(kN, round * 3 + m));
      by_member["trainer-" + std::to_string(m)] = values.back();
    }
    const std::vector<float> want = Mean(by_member);
    const std::vector<Contribution> got = RoundConcurrently("", clients, values);
    for (int m = 0; m < 3; ++m) {
      ASSERT_TRUE(got[m].result.ok()) << got[m].result.status();
      EXPECT_EQ(got[m].result->members, 3);
      EXPECT_EQ(got[m].result->round,
                static_cast<uint64_t>(round + 3));  // After 2 bootstrap rounds.
      EXPECT_EQ(got[m].out, want) << "member " << m << " round " << round;
    }
  }
}

TEST_F(SyncerTest, OutputMayAliasInput) {
  StartSyncers(1);
  constexpr int64_t kN = 64;
  auto a = Client("a", kN), b = Client("b", kN);
  Bootstrap("", {a.get(), b.get()}, {"a", "b"}, kN);
  std::vector<float> va = Values(kN, 1), vb = Values(kN, 2);
  const std::vector<float> want = Mean({{"a", va}, {"b", vb}});
  std::thread tb([&] { SS_EXPECT_OK(b->AllReduceMean("", vb, vb)); });
  SS_ASSERT_OK(a->AllReduceMean("", va, va));
  tb.join();
  EXPECT_EQ(va, want);
  EXPECT_EQ(vb, want);
}

TEST_F(SyncerTest, GroupsDoNotMix) {
  StartSyncers(2);
  constexpr int64_t kN = 33;
  auto a = Client("a", kN), b = Client("b", kN), c = Client("c", kN), d = Client("d", kN);
  Bootstrap("g0", {a.get(), b.get()}, {"a", "b"}, kN);
  Bootstrap("g1", {c.get(), d.get()}, {"c", "d"}, kN);
  std::vector<std::vector<float>> v = {Values(kN, 1), Values(kN, 2), Values(kN, 3), Values(kN, 4)};
  std::vector<Contribution> g0, g1;
  std::thread t0([&] { g0 = RoundConcurrently("g0", {a.get(), b.get()}, {v[0], v[1]}); });
  std::thread t1([&] { g1 = RoundConcurrently("g1", {c.get(), d.get()}, {v[2], v[3]}); });
  t0.join();
  t1.join();
  for (const Contribution& x : g0) {
    ASSERT_TRUE(x.result.ok()) << x.result.status();
    EXPECT_EQ(x.result->members, 2);
    EXPECT_EQ(x.out, Mean({{"a", v[0]}, {"b", v[1]}}));
  }
  for (const Contribution& x : g1) {
    ASSERT_TRUE(x.result.ok()) << x.result.status();
    EXPECT_EQ(x.result->members, 2);
    EXPECT_EQ(x.out, Mean({{"c", v[2]}, {"d", v[3]}}));
  }
}

TEST_F(SyncerTest, SilentMemberIsDroppedAfterTheTimeoutAndRejoins) {
  StartSyncers(2, /*member_timeout=*/absl::Milliseconds(300));
  constexpr int64_t kN = 50;
  auto a = Client("a", kN), b = Client("b", kN), c = Client("c", kN);
  Bootstrap("", {a.get(), b.get(), c.get()}, {"a", "b", "c"}, kN);

  // c stays silent: a and b complete without it after the member timeout.
  const std::vector<std::vector<float>> v = {Values(kN, 1), Values(kN, 2), Values(kN, 3)};
  const auto start = Clock::now();
  std::vector<Contribution> got = RoundConcurrently("", {a.get(), b.get()}, {v[0], v[1]});
  const auto elapsed = Clock::now() - start;
  for (const Contribution& x : got) {
    ASSERT_TRUE(x.result.ok()) << x.result.status();
    EXPECT_EQ(x.result->members, 2);
    EXPECT_EQ(x.out, Mean({{"a", v[0]}, {"b", v[1]}}));
  }
  EXPECT_GE(elapsed, std::chrono::milliseconds(250));
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  for (int r = 0; r < 2; ++r) {
    const v1::SyncerStatsResponse stats = Stats(r);
    ASSERT_EQ(stats.groups_size(), 1);
    EXPECT_EQ(stats.groups(0).dropped_members(), 1u);
    EXPECT_THAT(stats.groups(0).live_members(), ElementsAre("a", "b"));
  }

  // c rejoins by contributing; the next round waits for all three.
  std::vector<float> out_c(kN);
  absl::StatusOr<RoundResult> rc;
  std::thread tc([&] { rc = c->AllReduceMean("", v[2], out_c); });
  AwaitContributors("", {"c"});
  got = RoundConcurrently("", {a.get(), b.get()}, {v[0], v[1]});
  tc.join();
  const std::vector<float> want = Mean({{"a", v[0]}, {"b", v[1]}, {"c", v[2]}});
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(rc->members, 3);
  EXPECT_EQ(out_c, want);
  for (const Contribution& x : got) {
    ASSERT_TRUE(x.result.ok()) << x.result.status();
    EXPECT_EQ(x.result->members, 3);
    EXPECT_EQ(x.out, want);
  }
}

TEST_F(SyncerTest, LeaveCompletesARoundWaitingForTheLeaver) {
  StartSyncers(2);  // Member timeout 10s: only Leave can end the wait quickly.
  constexpr int64_t kN = 20;
  auto a = Client("a", kN), b = Client("b", kN), c = Client("c", kN);
  Bootstrap("", {a.get(), b.get(), c.get()}, {"a", "b", "c"}, kN);
  const std::vector<std::vector<float>> v = {Values(kN, 1), Values(kN, 2)};
  std::vector<Contribution> got;
  const auto start = Clock::now();
  std::thread t([&] { got = RoundConcurrently("", {a.get(), b.get()}, v); });
  AwaitContributors("", {"a", "b"});
  SS_ASSERT_OK(c->Leave());
  t.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (const Contribution& x : got) {
    ASSERT_TRUE(x.result.ok()) << x.result.status();
    EXPECT_EQ(x.result->members, 2);
    EXPECT_EQ(x.out, Mean({{"a", v[0]}, {"b", v[1]}}));
  }
  EXPECT_THAT(Stats(1).groups(0).live_members(), ElementsAre("a", "b"));
}

TEST_F(SyncerTest, SecondContributionToTheSameRoundReplacesTheFirst) {
  StartSyncers(2);
  constexpr int64_t kN = 20;
  auto a = Client("a", kN), b = Client("b", kN);
  Bootstrap("", {a.get(), b.get()}, {"a", "b"}, kN);
  const std::vector<float> a1 = Values(kN, 1), a2 = Values(kN, 2), vb = Values(kN, 3);
  std::vector<float> out1(kN), out2(kN), outb(kN);
  absl::StatusOr<RoundResult> r1, r2, rb;
  std::thread t1([&] { r1 = a->AllReduceMean("", a1, out1); });
  AwaitContributors("", {"a"});
  std::thread t2([&] { r2 = a->AllReduceMean("", a2, out2); });  // e.g. a retry
  t1.join();                                                     // The replaced call fails at once.
  EXPECT_THAT(r1, StatusIs(absl::StatusCode::kAborted, "replaced by a newer contribution"));
  rb = b->AllReduceMean("", vb, outb);
  t2.join();
  const std::vector<float> want = Mean({{"a", a2}, {"b", vb}});
  ASSERT_TRUE(r2.ok()) << r2.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(r2->members, 2);
  EXPECT_EQ(out2, want);
  EXPECT_EQ(outb, want);
}

// ---- Explicit membership: Join and LeaveGroup ----------------------------------------

TEST_F(SyncerTest, JoinMakesTheFirstRoundWaitForEveryMember) {
  StartSyncers(2);  // Member timeout 10s: only b's contribution ends the wait quickly.
  constexpr int64_t kN = 41;
  auto a = Client("a", kN), b = Client("b", kN);
  SS_ASSERT_OK(a->Join("g"));
  SS_ASSERT_OK(b->Join("g"));
  SS_ASSERT_OK(b->Join("g"));  // Idempotent.
  for (int r = 0; r < 2; ++r) {
    const v1::SyncerStatsResponse stats = Stats(r);
    ASSERT_EQ(stats.groups_size(), 1);
    EXPECT_EQ(stats.groups(0).rounds_completed(), 0u);
    EXPECT_THAT(stats.groups(0).live_members(), ElementsAre("a", "b"));
  }
  const std::vector<float> va = Values(kN, 1), vb = Values(kN, 2);
  std::vector<float> out_a(kN), out_b(kN);
  absl::StatusOr<RoundResult> ra;
  std::thread ta([&] { ra = a->AllReduceMean("g", va, out_a); });
  // a's contribution is in on both replicas, and the round stays open for b.
  AwaitContributors("g", {"a"});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Stats(r).groups(0).rounds_completed(), 0u);
  auto rb = b->AllReduceMean("g", vb, out_b);
  ta.join();
  const std::vector<float> want = Mean({{"a", va}, {"b", vb}});
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(ra->members, 2);
  EXPECT_EQ(rb->members, 2);
  EXPECT_EQ(ra->round, 1u);
  EXPECT_EQ(out_a, want);
  EXPECT_EQ(out_b, want);
}

TEST_F(SyncerTest, JoinAnswersWhetherTheMemberIsNewAndTheLiveCount) {
  StartSyncers(1);
  auto join = [&](const std::string& group, const std::string& member) {
    v1::JoinRequest request;
    request.set_group(group);
    request.set_member(member);
    v1::JoinResponse response;
    SS_EXPECT_OK(CallRpc(*stubs_[0], &v1::Syncer::Stub::Join, request, &response));
    return std::make_pair(response.added(), response.live_members());
  };
  EXPECT_EQ(join("g", "a"), std::make_pair(true, 1u));
  EXPECT_EQ(join("g", "b"), std::make_pair(true, 2u));
  EXPECT_EQ(join("g", "a"), std::make_pair(false, 2u));
  EXPECT_EQ(join("h", "a"), std::make_pair(true, 1u));
}

// The start barrier of bsp and sync-switch: nobody starts rounds alone.
TEST_F(SyncerTest, AwaitMembersWaitsUntilEveryMemberJoinedOnEveryReplica) {
  StartSyncers(2);
  auto a = Client("a", 4);
  auto b = Client("b", 4);
  EXPECT_THAT(a->AwaitMembers("g", 2, absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       "only 1 of 2 members joined group 'g' within 100ms"));
  absl::Status waited;
  std::thread waiter([&] { waited = a->AwaitMembers("g", 2, absl::Seconds(20)); });
  absl::SleepFor(absl::Milliseconds(100));
  SS_ASSERT_OK(b->Join("g"));
  waiter.join();
  SS_EXPECT_OK(waited);
  SS_EXPECT_OK(b->AwaitMembers("g", 2, absl::Milliseconds(1)));  // Already there: at once.
}

TEST_F(SyncerTest, JoinedMemberThatNeverContributesIsDroppedAfterTheTimeout) {
  StartSyncers(2, /*member_timeout=*/absl::Milliseconds(300));
  constexpr int64_t kN = 16;
  auto a = Client("a", kN), b = Client("b", kN);
  SS_ASSERT_OK(a->Join(""));
  SS_ASSERT_OK(b->Join(""));
  const std::vector<float> va = Values(kN, 1);
  std::vector<float> out(kN);
  const auto start = Clock::now();
  auto r = a->AllReduceMean("", va, out);
  const auto elapsed = Clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->members, 1);
  EXPECT_EQ(r->round, 1u);
  EXPECT_EQ(out, va);
  EXPECT_GE(elapsed, std::chrono::milliseconds(250));
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  for (int rep = 0; rep < 2; ++rep) {
    const v1::SyncerStatsResponse stats = Stats(rep);
    ASSERT_EQ(stats.groups_size(), 1);
    EXPECT_EQ(stats.groups(0).dropped_members(), 1u);
    EXPECT_THAT(stats.groups(0).live_members(), ElementsAre("a"));
  }
}

TEST_F(SyncerTest, LeaveGroupLeavesOnlyThatGroup) {
  StartSyncers(2);  // Member timeout 10s: only LeaveGroup can end the wait quickly.
  constexpr int64_t kN = 24;
  auto a = Client("a", kN), b = Client("b", kN);
  for (SyncerClient* c : {a.get(), b.get()}) {
    SS_ASSERT_OK(c->Join("g0"));
    SS_ASSERT_OK(c->Join("g1"));
  }
  // a waits for b in g0; b leaves g0, so a's round completes without it.
  const std::vector<float> va = Values(kN, 1), vb = Values(kN, 2);
  std::vector<float> out_a(kN), out_b(kN);
  absl::StatusOr<RoundResult> ra;
  const auto start = Clock::now();
  std::thread ta([&] { ra = a->AllReduceMean("g0", va, out_a); });
  AwaitContributors("g0", {"a"});
  SS_ASSERT_OK(b->LeaveGroup("g0"));
  ta.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  ASSERT_TRUE(ra.ok()) << ra.status();
  EXPECT_EQ(ra->members, 1);
  EXPECT_EQ(out_a, va);
  for (int r = 0; r < 2; ++r) {
    const v1::SyncerStatsResponse stats = Stats(r);
    ASSERT_EQ(stats.groups_size(), 2);
    EXPECT_EQ(stats.groups(0).group(), "g0");
    EXPECT_THAT(stats.groups(0).live_members(), ElementsAre("a"));
    EXPECT_EQ(stats.groups(0).dropped_members(), 0u);
    EXPECT_EQ(stats.groups(1).group(), "g1");
    EXPECT_THAT(stats.groups(1).live_members(), ElementsAre("a", "b"));
  }
  // b is still live in g1: a's round there waits for it.
  std::thread ta1([&] { ra = a->AllReduceMean("g1", va, out_a); });
  AwaitContributors("g1", {"a"});
  auto rb = b->AllReduceMean("g1", vb, out_b);
  ta1.join();
  const std::vector<float> want = Mean({{"a", va}, {"b", vb}});
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(ra->members, 2);
  EXPECT_EQ(out_a, want);
  EXPECT_EQ(out_b, want);

  // Leaving a group the member is not in changes nothing; Leave() leaves all.
  {
    v1::LeaveRequest request;
    request.set_member("b");
    request.set_group("g0");
    v1::LeaveResponse response;
    SS_ASSERT_OK(CallRpc(*stubs_[0], &v1::Syncer::Stub::Leave, request, &response));
    EXPECT_EQ(response.groups(), 0u);
  }
  SS_ASSERT_OK(a->Leave());
  const v1::SyncerStatsResponse after = Stats(0);
  for (const v1::SyncerGroupStats& g : after.groups()) {
    EXPECT_THAT(g.live_members(), ::testing::Not(::testing::Contains("a"))) << g.group();
  }
}

TEST_F(SyncerTest, LeaveGroupAbortsTheLeaversPendingContribution) {
  StartSyncers(1);
  constexpr int64_t kN = 4;
  auto a = Client("a", kN), b = Client("b", kN);
  SS_ASSERT_OK(a->Join("g"));
  SS_ASSERT_OK(b->Join("g"));
  std::vector<float> v(kN, 1.0f), out(kN);
  absl::StatusOr<RoundResult> ra;
  std::thread ta([&] { ra = a->AllReduceMean("g", v, out); });
  AwaitContributors("g", {"a"});
  SS_ASSERT_OK(a->LeaveGroup("g"));
  ta.join();
  EXPECT_THAT(ra, StatusIs(absl::StatusCode::kAborted, "member 'a' left group 'g'"));
  EXPECT_THAT(Stats(0).groups(0).live_members(), ElementsAre("b"));
}

// The membership calls without gRPC: return values and the observer.
TEST(AllReduceRoundsTest, JoinAndLeaveOfOneGroupReportLiveMembers) {
  struct Observer : AllReduceObserver {
    void OnLiveMembers(const std::string& group, int live) override {
      calls.push_back(group + "=" + std::to_string(live));
    }
    std::vector<std::string> calls;  // Only this thread calls Join and Leave.
  } observer;
  AllReduceRounds rounds(
      AllReduceOptions{.member_timeout = absl::Seconds(10), .observer = &observer});
  int live = -1;
  EXPECT_TRUE(rounds.Join("g", "a", &live));
  EXPECT_EQ(live, 1);
  EXPECT_TRUE(rounds.Join("g", "b"));
  EXPECT_FALSE(rounds.Join("g", "a", &live));
  EXPECT_EQ(live, 2);
  EXPECT_TRUE(rounds.Join("h", "a"));
  EXPECT_EQ(rounds.Leave("a", "g"), 1);
  EXPECT_EQ(rounds.Leave("a", "g"), 0);
  EXPECT_EQ(rounds.Leave("a", "nowhere"), 0);
  EXPECT_EQ(rounds.Leave("b"), 1);
  EXPECT_THAT(observer.calls, ElementsAre("g=1", "g=2", "h=1", "g=1", "g=0"));
  const std::vector<GroupSnapshot> groups = rounds.Snapshot();
  ASSERT_EQ(groups.size(), 2u);  // Leaving "nowhere" created no group.
  EXPECT_THAT(groups[1].live_members, ElementsAre("a"));
  rounds.Close();
  EXPECT_FALSE(rounds.Join("g", "c", &live));
  EXPECT_EQ(live, 0);
}

// ---- Bad input -------------------------------------------------------------------

TEST_F(SyncerTest, RequestsForAnotherRangeAreInvalidArgumentAndChangeNothing) {
  StartSyncers(1);
  constexpr int64_t kN = 10;
  auto client = Client("trainer-0", kN);
  const std::vector<float> init = Values(kN, 1);
  std::vector<float> centre(kN);
  SS_ASSERT_OK(client->InitCentre(init, centre));

  v1::Syncer::Stub& stub = *stubs_[0];
  auto add = [&](uint64_t offset, uint64_t total, int length) {
    auto request = RangeRequest<v1::AddToCentreRequest>(offset, total);
    request.mutable_delta()->Resize(length, 1.0f);
    return CallRpc(stub, &v1::Syncer::Stub::AddToCentre, request);
  };
  EXPECT_THAT(add(1, kN, 9), StatusIs(absl::StatusCode::kInvalidArgument,
                                      "offset: 1, but this syncer holds [0, 10) of 10"));
  EXPECT_THAT(add(0, 20, 10), StatusIs(absl::StatusCode::kInvalidArgument, "total: 20"));
  EXPECT_THAT(add(0, kN, 9), StatusIs(absl::StatusCode::kInvalidArgument, "delta: 9 floats"));
  EXPECT_THAT(add(0, kN, 0), StatusIs(absl::StatusCode::kInvalidArgument, "delta: empty"));
  EXPECT_THAT(add(5, 4, 2), StatusIs(absl::StatusCode::kInvalidArgument, "offset: 5"));
  auto pull = RangeRequest<v1::PullCentreRequest>(0, kN);
  pull.set_length(11);
  EXPECT_THAT(CallRpc(stub, &v1::Syncer::Stub::PullCentre, pull),
              StatusIs(absl::StatusCode::kInvalidArgument, "length: 11 floats"));
  auto anonymous_round = RangeRequest<v1::AllReduceRequest>(0, kN);
  anonymous_round.mutable_values()->Resize(kN, 1.0f);
  EXPECT_THAT(CallRpc(stub, &v1::Syncer::Stub::AllReduce, anonymous_round),
              StatusIs(absl::StatusCode::kInvalidArgument, "member: empty"));
  auto init_too_long = RangeRequest<v1::InitCentreRequest>(0, kN + 1);
  init_too_long.mutable_values()->Resize(kN, 0.0f);
  EXPECT_THAT(CallRpc(stub, &v1::Syncer::Stub::InitCentre, init_too_long),
              StatusIs(absl::StatusCode::kInvalidArgument, "total: 11"));
  v1::JoinRequest join;
  join.set_group("g");
  EXPECT_THAT(CallRpc(stub, &v1::Syncer::Stub::Join, join),
              StatusIs(absl::StatusCode::kInvalidArgument, "member: empty"));
  join.set_group(std::string(257, 'g'));
  join.set_member("m");
  EXPECT_THAT(CallRpc(stub, &v1::Syncer::Stub::Join, join),
              StatusIs(absl::StatusCode::kInvalidArgument, "group: 257 bytes"));
  v1::LeaveRequest leave;
  leave.set_group("g");
  EXPECT_THAT(CallRpc(stub, &v1::Syncer::Stub::Leave, leave),
              StatusIs(absl::StatusCode::kInvalidArgument, "member: empty"));
  {
    auto anonymous = Client("", kN);
    EXPECT_THAT(anonymous->Join("g"),
                StatusIs(absl::StatusCode::kInvalidArgument, "member: empty"));
    EXPECT_THAT(anonymous->LeaveGroup("g"),
                StatusIs(absl::StatusCode::kInvalidArgument, "member: empty"));
  }
  EXPECT_EQ(Stats(0).groups_size(), 0);  // No refused Join created a group.
  // A client for a different n is refused the same way, naming its replica.
  auto wrong = Client("trainer-1", kN + 2);
  std::vector<float> wide(kN + 2);
  EXPECT_THAT(wrong->PullCentre(wide),
              StatusIs(absl::StatusCode::kInvalidArgument, "syncer replica 0 (127.0.0.1:"));
  EXPECT_THAT(client->AllReduceMean("", std::vector<float>(kN - 1), centre),
              StatusIs(absl::StatusCode::kInvalidArgument, "in: 9 floats"));

  // Still serving, and the centre is unchanged.
  uint64_t version = 1;
  SS_ASSERT_OK(client->PullCentre(centre, &version));
  EXPECT_EQ(centre, init);
  EXPECT_EQ(version, 0u);
  auto r = client->AllReduceMean("", init, centre);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->members, 1);
}

// Limits (docs/reliability.md): a message over the server's limits.max_message_bytes
// is refused with RESOURCE_EXHAUSTED before any handler runs, and the server
// keeps serving with its centre unchanged.
TEST(SyncerLimitsTest, OversizeRequestIsResourceExhaustedAndChangesNothing) {
  SyncerServerOptions o;
  o.metrics_address = "";
  o.limits.max_message_bytes = 1 << 20;
  o.shutdown_grace = absl::Milliseconds(200);
  auto server = SyncerServer::Start(std::move(o));
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Syncer::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  constexpr int kN = 1000;
  auto init = RangeRequest<v1::InitCentreRequest>(0, kN);
  init.mutable_values()->Resize(kN, 2.0f);
  SS_ASSERT_OK(CallRpc(*stub, &v1::Syncer::Stub::InitCentre, init));
  auto round = RangeRequest<v1::AllReduceRequest>(0, kN);
  round.set_member("trainer-0");
  round.mutable_values()->Resize(1 << 19, 1.0f);  // 2 MiB of floats.
  EXPECT_THAT(CallRpc(*stub, &v1::Syncer::Stub::AllReduce, round),
              StatusIs(absl::StatusCode::kResourceExhausted, ""));
  auto pull = RangeRequest<v1::PullCentreRequest>(0, kN);
  pull.set_length(kN);
  v1::CentreResponse centre;
  SS_ASSERT_OK(CallRpc(*stub, &v1::Syncer::Stub::PullCentre, pull, &centre));
  ASSERT_EQ(centre.values_size(), kN);
  EXPECT_EQ(centre.values(0), 2.0f);
}

// Limits: the waiting all-reduce calls together hold at most
// max_waiting_bytes. A call that would pass it is RESOURCE_EXHAUSTED at once
// (it neither waits nor joins the round), and the bytes come back when the
// round completes.
TEST_F(SyncerTest, WaitingCallsBeyondTheirByteLimitAreResourceExhausted) {
  constexpr int64_t kN = 1000;
  // Room for two waiting contributions of kN floats, not three.
  StartSyncers(1, absl::Seconds(30), [](SyncerServerOptions& o) {
    o.service.max_waiting_bytes = 2 * (kN * 4 + 64 + SyncerService::kWaitingCallOverhead) + 100;
  });
  auto m0 = Client("m0", kN), m1 = Client("m1", kN), m2 = Client("m2", kN), x = Client("x", kN);
  for (SyncerClient* c : {m0.get(), m1.get(), m2.get()}) SS_ASSERT_OK(c->Join("g"));
  const std::vector<float> v0 = Values(kN, 1), v1 = Values(kN, 2);
  std::vector<float> out0(kN), out1(kN);
  absl::StatusOr<RoundResult> r0, r1;
  std::thread t0([&] { r0 = m0->AllReduceMean("g", v0, out0); });
  std::thread t1([&] { r1 = m1->AllReduceMean("g", v1, out1); });
  AwaitContributors("g", {"m0", "m1"});  // Both wait for m2.

  std::vector<float> out(kN);
  EXPECT_THAT(x->AllReduceMean("g", Values(kN, 3), out),
              StatusIs(absl::StatusCode::kResourceExhausted, "max_waiting_bytes"));
  EXPECT_THAT(Stats(0).groups(0).live_members(), ElementsAre("m0", "m1", "m2"));
  SS_ASSERT_OK(m2->LeaveGroup("g"));  // The round completes with m0 and m1.
  t0.join();
  t1.join();
  ASSERT_TRUE(r0.ok()) << r0.status();
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r0->members, 2);
  EXPECT_EQ(out0, Mean({{"m0", v0}, {"m1", v1}}));
  // The bytes are back: a fresh group's first round completes with x alone.
  auto alone = x->AllReduceMean("h", Values(kN, 3), out);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(alone->members, 1);
}

TEST(SyncerLimitsTest, UnworkableLimitsAreRefusedAtStart) {
  SyncerServerOptions o;
  o.metrics_address = "";
  o.limits.max_concurrent_streams = 0;
  EXPECT_THAT(SyncerServer::Start(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "syncer: limits.max_concurrent_streams: must be positive, got 0"));
  o.limits = GrpcServerLimits();
  o.service.max_waiting_bytes = -1;
  EXPECT_THAT(SyncerServer::Start(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "syncer: service.max_waiting_bytes: must be positive, got -1"));
}

TEST(SyncerClientTest, ConnectRejectsBadAddressesAndSizes) {
  EXPECT_THAT(SyncerClient::Connect({.addresses = {}, .member = "m"}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, "addresses"));
  EXPECT_THAT(SyncerClient::Connect({.addresses = {"127.0.0.1:7100", "nohost"}, .member = "m"}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, "addresses[1]: 'nohost'"));
  EXPECT_THAT(SyncerClient::Connect({.addresses = {"h:99999"}, .member = "m"}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, "addresses[0]"));
  EXPECT_THAT(SyncerClient::Connect({.addresses = {"a:1", "b:2", "c:3"}, .member = "m"}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_params: 2"));
  SS_EXPECT_OK(SyncerClient::Connect({.addresses = {"[::1]:7100", "localhost:7101"}}, 2));
}

// ---- Lifecycle and endpoints -------------------------------------------------------

TEST_F(SyncerTest, ShutdownAnswersAWaitingRoundUnavailable) {
  StartSyncers(1);
  constexpr int64_t kN = 8;
  auto a = Client("a", kN), b = Client("b", kN);
  Bootstrap("", {a.get(), b.get()}, {"a", "b"}, kN);
  std::vector<float> v(kN, 1.0f);
  absl::StatusOr<RoundResult> r;
  std::thread t([&] { r = a->AllReduceMean("", v, v); });
  AwaitContributors("", {"a"});
  const auto start = Clock::now();
  servers_[0]->Shutdown();
  t.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable, ""));
}

// The emulated network time: every reply is held for the delay, calls in
// flight are held side by side (a timer, not a thread each), and shutdown
// sends the held replies at once.
TEST_F(SyncerTest, ReplyDelayHoldsEveryReplyConcurrentlyAndShutdownSendsThem) {
  constexpr absl::Duration kDelay = absl::Seconds(1);
  StartSyncers(1, absl::Seconds(10),
               [&](SyncerServerOptions& o) { o.service.reply_delay = kDelay; });
  constexpr int64_t kN = 4;
  auto client = Client("trainer-0", kN);
  std::vector<float> centre(kN);
  auto start = Clock::now();
  SS_ASSERT_OK(client->InitCentre(std::vector<float>(kN, 1.0f), centre));
  EXPECT_GE(Clock::now() - start, absl::ToChronoMilliseconds(kDelay));
  EXPECT_THAT(centre, ElementsAre(1.0f, 1.0f, 1.0f, 1.0f));

  // Eight adds at once: together they take about one delay, not eight.
  constexpr int kCalls = 8;
  std::vector<absl::Status> results(kCalls);
  std::vector<std::thread> threads;
  start = Clock::now();
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back(
        [&, i] { results[i] = client->AddToCentre(std::vector<float>(kN, 1.0f)); });
  }
  for (auto& t : threads) t.join();
  const auto together = Clock::now() - start;
  for (const absl::Status& s : results) SS_EXPECT_OK(s);
  EXPECT_GE(together, absl::ToChronoMilliseconds(kDelay));
  EXPECT_LT(together, absl::ToChronoMilliseconds(3 * kDelay));
  uint64_t version = 0;
  SS_ASSERT_OK(client->PullCentre(centre, &version));
  EXPECT_EQ(version, static_cast<uint64_t>(kCalls));
  EXPECT_THAT(centre, ElementsAre(9.0f, 9.0f, 9.0f, 9.0f));

  // A reply still held when the server shuts down is sent, not dropped.
  absl::Status held;
  Clock::time_point answered;
  std::thread late([&] {
    held = client->PullCentre(centre, &version);
    answered = Clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  start = Clock::now();
  servers_[0]->Shutdown();
  late.join();
  SS_EXPECT_OK(held);
  // Held to the end, it would have come 900 ms after the shutdown began.
  EXPECT_LT(answered - start, absl::ToChronoMilliseconds(kDelay * 0.7));
}

TEST_F(SyncerTest, MetricsAndHealthzOverHttp) {
  StartSyncers(1, absl::Milliseconds(100));
  constexpr int64_t kN = 8;
  auto a = Client("a", kN), b = Client("b", kN);
  std::vector<float> v(kN, 1.0f);
  SS_ASSERT_OK(a->InitCentre(v, v));
  SS_ASSERT_OK(a->AddToCentre(v));
  Bootstrap("g0", {a.get(), b.get()}, {"a", "b"}, kN);
  SS_ASSERT_OK(a->AllReduceMean("g0", v, v));  // b is dropped.
  const int port = servers_[0]->metrics_port();
  std::string body;
  ASSERT_EQ(testing::HttpGet(port, "/healthz", &body), 200);
  EXPECT_EQ(body, "ok\n");
  ASSERT_EQ(testing::HttpGet(port, "/metrics", &body), 200);
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_rounds_total{group=\"g0\"} 3"));
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_members{group=\"g0\"} 1"));
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_dropped_members_total 1"));
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_centre_adds_total 1"));
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_round_seconds_count 3"));
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_request_seconds_count{method=\"AllReduce\"} 4"));
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_request_seconds_count{method=\"Join\"} 0"));
  for (const std::string& name : SyncerMetrics::MetricNames()) {
    EXPECT_THAT(body, HasSubstr(name)) << name;
  }
  EXPECT_THAT(body, ::testing::Not(HasSubstr("shadowsync_syncer_received_bytes_total 0\n")));
  EXPECT_THAT(body, ::testing::Not(HasSubstr("shadowsync_syncer_sent_bytes_total 0\n")));
  servers_[0]->Shutdown();
  EXPECT_NE(testing::HttpGet(port, "/healthz", &body), 200);
}

}  // namespace
}  // namespace shadowsync::syncer
