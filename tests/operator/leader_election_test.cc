// Lease leader election against the fake API server: acquisition, exactly
// one leader among contenders, fast takeover after a release, takeover only
// after lease_duration without one, the 409 race, and stepping down when
// renewals fail past renew_deadline. The electors run as the operator's
// ServiceAccount under deploy/rbac.yaml, with the Lease in its namespace.
#include "operator/leader_election.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/kube_client.h"
#include "operator/kube_config.h"
#include "tests/operator/fake_api_client.h"
#include "tests/operator/operator_rbac.h"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/test_util.h"

namespace shadowsync::kube {
namespace {

using ::shadowsync::testing::StatusIs;

constexpr char kLeasePath[] = "/apis/coordination.k8s.io/v1/namespaces/shadowsync-system/leases/op";

TEST(MicroTimeTest, FormatsAndParses) {
  const absl::Time t = absl::FromUnixMicros(1136214245000001);  // 2006-01-02T15:04:05.000001Z
  EXPECT_EQ(FormatMicroTime(t), "2006-01-02T15:04:05.000001Z");
  EXPECT_EQ(*ParseMicroTime("2006-01-02T15:04:05.000001Z"), t);
  EXPECT_EQ(*ParseMicroTime("2006-01-02T16:04:05.000001+01:00"), t);
  EXPECT_EQ(*ParseMicroTime("2006-01-02T15:04:05Z"), absl::FromUnixSeconds(1136214245));
  EXPECT_THAT(ParseMicroTime("yesterday"),
              StatusIs(absl::StatusCode::kInvalidArgument, "yesterday"));
}

// One replica: an elector and what its callbacks saw.
struct Replica {
  std::string id;
  std::atomic<int> started{0};
  std::atomic<int> stopped{0};
  std::unique_ptr<LeaderElector> elector;
};

class LeaderElectionTest : public FakeApiTest {
 protected:
  void SetUp() override {
    FakeApiTest::SetUp();
    SS_ASSERT_OK(testing::LoadOperatorRbac(*api_));
    const std::string kubeconfig = dir_.File("operator-kubeconfig");
    SS_ASSERT_OK(api_->WriteKubeconfig(kubeconfig, "default", testing::kOperatorUser));
    absl::StatusOr<KubeConfig> config = LoadKubeconfig(kubeconfig);
    SS_ASSERT_OK(config);
    absl::StatusOr<std::unique_ptr<KubeClient>> client = KubeClient::FromConfig(*config);
    SS_ASSERT_OK(client);
    client_ = *std::move(client);
  }
  void TearDown() override {
    EXPECT_THAT(testing::ForbiddenRequests(*api_), ::testing::IsEmpty())
        << "the elector made a call deploy/rbac.yaml does not allow";
  }

  // Short but ordered durations: lease 2 s > renew deadline 1 s > retry 100 ms.
  static LeaderElectionConfig Config(const std::string& id) {
    LeaderElectionConfig c;
    c.ns = testing::kOperatorNamespace;
    c.lease_name = "op";
    c.identity = id;
    c.lease_duration = absl::Seconds(2);
    c.renew_deadline = absl::Seconds(1);
    c.retry_period = absl::Milliseconds(100);
    return c;
  }

  std::unique_ptr<Replica> MakeReplica(const std::string& id,
                                       LeaderElectionConfig config = LeaderElectionConfig()) {
    if (config.lease_name.empty()) config = Config(id);
    auto r = std::make_unique<Replica>();
    r->id = id;
    Replica* raw = r.get();
    r->elector = std::make_unique<LeaderElector>(
        client_.get(), config, [raw] { ++raw->started; }, [raw] { ++raw->stopped; });
    return r;
  }

  std::string Holder() {
    absl::StatusOr<Json> lease = api_->Get(kLeasePath);
    if (!lease.ok()) return "<none>";
    return lease->value("/spec/holderIdentity"_json_pointer, "");
  }
};

TEST_F(LeaderElectionTest, RejectsBadConfig) {
  LeaderElectionConfig c = Config("a");
  c.renew_deadline = c.lease_duration;
  EXPECT_THAT(LeaderElector(client_.get(), c, nullptr, nullptr).Start(),
              StatusIs(absl::StatusCode::kInvalidArgument, "must exceed renew_deadline"));
  c = Config("a");
  c.retry_period = c.renew_deadline;
  EXPECT_THAT(LeaderElector(client_.get(), c, nullptr, nullptr).Start(),
              StatusIs(absl::StatusCode::kInvalidArgument, "must exceed retry_period"));
  c = Config("");
  EXPECT_THAT(LeaderElector(client_.get(), c, nullptr, nullptr).Start(),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity"));
}

TEST_F(LeaderElectionTest, SingleCandidateCreatesTheLeaseAndRenewsIt) {
  auto a = MakeReplica("a");
  SS_ASSERT_OK(a->elector->Start());
  // IsLeader turns true before the elector's thread runs the callback, so
  // wait for both (TSan once saw the callback still to come).
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader() && a->started > 0; }));
  EXPECT_EQ(a->started, 1);
  EXPECT_EQ(a->elector->leader(), "a");
  absl::StatusOr<Json> lease = api_->Get(kLeasePath);
  SS_ASSERT_OK(lease);
  const Json spec = (*lease)["spec"];
  EXPECT_EQ(spec["holderIdentity"], "a");
  EXPECT_EQ(spec["leaseDurationSeconds"], 2);
  EXPECT_EQ(spec["leaseTransitions"], 0);
  SS_EXPECT_OK(ParseMicroTime(spec["acquireTime"]));
  const std::string first_renew = spec["renewTime"];
  EXPECT_EQ(first_renew.size(), std::string("2006-01-02T15:04:05.000000Z").size());
  // Renewals move renewTime, not acquireTime.
  ASSERT_TRUE(
      Eventually([&] { return (*api_->Get(kLeasePath))["spec"]["renewTime"] != first_renew; }));
  EXPECT_EQ((*api_->Get(kLeasePath))["spec"]["acquireTime"], spec["acquireTime"]);
  EXPECT_TRUE(a->elector->IsLeader());

  // Stop releases the lease and reports the end of leadership.
  a->elector->Stop();
  EXPECT_EQ(a->stopped, 1);
  EXPECT_FALSE(a->elector->IsLeader());
  EXPECT_EQ(Holder(), "");
}

TEST_F(LeaderElectionTest, ExactlyOneOfThreeLeadsAndAReleaseHandsOverFast) {
  std::vector<std::unique_ptr<Replica>> replicas;
  for (const char* id : {"a", "b", "c"}) replicas.push_back(MakeReplica(id));
  for (auto& r : replicas) SS_ASSERT_OK(r->elector->Start());

  auto leaders = [&] {
    int n = 0;
    for (auto& r : replicas) n += r->elector != nullptr && r->elector->IsLeader();
    return n;
  };
  ASSERT_TRUE(Eventually([&] { return leaders() == 1; }));
  // Watch for a while: never two at once, and the lease names the leader.
  const absl::Time until = absl::Now() + absl::Milliseconds(1500);
  while (absl::Now() < until) {
    ASSERT_LE(leaders(), 1);
    absl::SleepFor(absl::Milliseconds(2));
  }
  Replica* leader = nullptr;
  for (auto& r : replicas) {
    if (r->elector->IsLeader()) leader = r.get();
  }
  ASSERT_NE(leader, nullptr);
  EXPECT_EQ(Holder(), leader->id);
  for (auto& r : replicas) EXPECT_EQ(r->started, r.get() == leader ? 1 : 0) << r->id;

  // The leader stops cleanly: one of the others leads well within
  // lease_duration, since the lease was released.
  const absl::Time stop_at = absl::Now();
  leader->elector->Stop();
  leader->elector.reset();
  ASSERT_TRUE(Eventually([&] { return leaders() == 1; }, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - stop_at, absl::Seconds(1));
  EXPECT_NE(Holder(), leader->id);
  EXPECT_EQ((*api_->Get(kLeasePath))["spec"]["leaseTransitions"], 1);
  EXPECT_EQ(leader->stopped, 1);
}

TEST_F(LeaderElectionTest, WithoutReleaseTheOtherWaitsForTheLeaseToExpire) {
  LeaderElectionConfig ca = Config("a");
  ca.release_on_stop = false;  // As if the process died.
  auto a = MakeReplica("a", ca);
  SS_ASSERT_OK(a->elector->Start());
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader(); }));
  auto b = MakeReplica("b");
  SS_ASSERT_OK(b->elector->Start());
  absl::SleepFor(absl::Milliseconds(300));  // b has observed a's renewals.
  EXPECT_FALSE(b->elector->IsLeader());
  EXPECT_EQ(b->elector->leader(), "a");

  a->elector->Stop();
  const absl::Time stopped_at = absl::Now();
  EXPECT_EQ(Holder(), "a");
  ASSERT_TRUE(Eventually([&] { return b->elector->IsLeader(); }, absl::Seconds(10)));
  const absl::Duration took = absl::Now() - stopped_at;
  // b counts lease_duration (2 s) from when it last saw the record change.
  EXPECT_GE(took, absl::Milliseconds(1500));
  EXPECT_LT(took, absl::Seconds(4));
  EXPECT_EQ(Holder(), "b");
  EXPECT_EQ((*api_->Get(kLeasePath))["spec"]["leaseTransitions"], 1);
}

TEST_F(LeaderElectionTest, ConcurrentTakeoverOfAReleasedLeaseHasOneWinner) {
  // A released lease: both candidates may take it at once; the loser's PUT
  // carries the stale resourceVersion and gets 409.
  SS_ASSERT_OK(api_->Create("/apis/coordination.k8s.io/v1/namespaces/shadowsync-system/leases",
                            {{"apiVersion", "coordination.k8s.io/v1"},
                             {"kind", "Lease"},
                             {"metadata", {{"name", "op"}}},
                             {"spec", {{"holderIdentity", ""}, {"leaseDurationSeconds", 2}}}}));
  for (int round = 0; round < 5; ++round) {
    auto a = MakeReplica("a");
    auto b = MakeReplica("b");
    // Hold both PUTs so that both candidates have read the same version
    // before either write lands. (A delayed GET would read after the delay.)
    api_->InjectFault({.method = "PUT",
                       .path_contains = "/leases/op",
                       .code = 0,
                       .times = 2,
                       .delay = absl::Milliseconds(200)});
    std::atomic<bool> won_a = false;
    std::atomic<bool> won_b = false;
    std::thread ta([&] { won_a = a->elector->TEST_TryAcquireOrRenew(); });
    std::thread tb([&] { won_b = b->elector->TEST_TryAcquireOrRenew(); });
    ta.join();
    tb.join();
    EXPECT_NE(won_a.load(), won_b.load()) << "round " << round;
    EXPECT_EQ(Holder(), won_a ? "a" : "b");
    bool saw_conflict = false;
    for (const auto& r : api_->Requests()) {
      if (r.method == "PUT" && r.status == 409) saw_conflict = true;
    }
    EXPECT_TRUE(saw_conflict);
    api_->ClearRequests();
    // Release for the next round.
    Json lease = *api_->Get(kLeasePath);
    lease["spec"]["holderIdentity"] = "";
    SS_ASSERT_OK(api_->Update(kLeasePath, lease));
  }
}

TEST_F(LeaderElectionTest, LeaderStepsDownWhenRenewalsFailPastTheDeadline) {
  auto a = MakeReplica("a");
  SS_ASSERT_OK(a->elector->Start());
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader(); }));
  api_->InjectFault({.method = "PUT", .path_contains = "/leases/", .code = 500, .times = 1000000});
  const absl::Time failing_since = absl::Now();
  ASSERT_TRUE(Eventually([&] { return a->stopped == 1; }, absl::Seconds(5)));
  EXPECT_FALSE(a->elector->IsLeader());
  const absl::Duration took = absl::Now() - failing_since;
  EXPECT_GE(took, absl::Milliseconds(800));
  EXPECT_LT(took, absl::Seconds(2));  // Before anyone else could take over (2 s).
  // Once the server accepts writes again it competes and leads again.
  api_->ClearFaults();
  ASSERT_TRUE(Eventually([&] { return a->started == 2 && a->elector->IsLeader(); }));
}

TEST_F(LeaderElectionTest, HungRenewalsDoNotKeepAStaleLeader) {
  auto a = MakeReplica("a");
  SS_ASSERT_OK(a->elector->Start());
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader(); }));
  // Every lease call hangs far beyond the lease: IsLeader() must turn false
  // within renew_deadline even while a call is stuck.
  api_->InjectFault(
      {.path_contains = "/leases/", .code = 0, .times = 1000000, .delay = absl::Seconds(5)});
  const absl::Time hung_since = absl::Now();
  ASSERT_TRUE(Eventually([&] { return !a->elector->IsLeader(); }, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - hung_since, absl::Milliseconds(1500));
  ASSERT_TRUE(Eventually([&] { return a->stopped == 1; }, absl::Seconds(10)));
  api_->ClearFaults();
}

}  // namespace
}  // namespace shadowsync::kube
