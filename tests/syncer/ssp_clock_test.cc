// The SSP clock: SspClocks on its own (waits, leaves, silence, late joiners,
// max wait) and the Clock RPC through SyncerClient against a real syncer on
// 127.0.0.1:0, including input checks.
#include "syncer/ssp_clock.h"

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shadowsync/v1/syncer.grpc.pb.h"
#include "syncer/client/syncer_client.h"
#include "syncer/syncer_server.h"
#include "tests/util/grpc_call.h"
#include "tests/util/test_util.h"

namespace shadowsync::syncer {
namespace {

using ::shadowsync::testing::CallRpc;
using ::shadowsync::testing::StatusIs;

constexpr auto kLong = std::chrono::seconds(5);
constexpr auto kShort = std::chrono::milliseconds(50);

// One asynchronous answer (of SspClocks or of the Clock RPC), awaited with a
// bound instead of a sleep. The callback holds `this`: keep the Answer alive
// until it has run.
template <typename Result>
class Answer {
 public:
  std::function<void(absl::StatusOr<Result>)> Callback() {
    return [this](absl::StatusOr<Result> r) { promise_.set_value(std::move(r)); };
  }
  // Whether the answer came within `timeout`.
  bool Within(std::chrono::milliseconds timeout) {
    return future_.wait_for(timeout) == std::future_status::ready;
  }
  // The answer, or DeadlineExceeded when none came within kLong.
  absl::StatusOr<Result> Await() {
    if (!Within(kLong)) return absl::DeadlineExceededError("no answer");
    return future_.get();
  }

 private:
  std::promise<absl::StatusOr<Result>> promise_;
  std::future<absl::StatusOr<Result>> future_ = promise_.get_future();
};
using ClockAnswer = Answer<ClockOutcome>;

absl::StatusOr<ClockOutcome> ReportNow(SspClocks& clocks, const std::string& member, int64_t clock,
                                       int64_t staleness) {
  ClockAnswer a;
  clocks.Report(member, clock, staleness, absl::InfiniteDuration(), a.Callback());
  return a.Await();
}

// Members "a" and "b" both report clock 0: where most cases start.
absl::Status JoinAAndB(SspClocks& clocks, int64_t staleness = 0) {
  for (const char* member : {"a", "b"}) {
    absl::StatusOr<ClockOutcome> r = ReportNow(clocks, member, 0, staleness);
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

// JoinAAndB, then "a" reports `clock` (which "b" at 0 may hold back); the
// answer comes to `answer`.
absl::Status JoinThenReportA(SspClocks& clocks, int64_t clock, int64_t staleness,
                             absl::Duration max_wait, ClockAnswer& answer) {
  if (absl::Status joined = JoinAAndB(clocks); !joined.ok()) return joined;
  clocks.Report("a", clock, staleness, max_wait, answer.Callback());
  return absl::OkStatus();
}

// Most cases: members that time out only after 30 s.
class SspClocksTest : public ::testing::Test {
 protected:
  SspClocks clocks_{SspClockOptions{.member_timeout = absl::Seconds(30)}};
};

TEST_F(SspClocksTest, LockStepWaitsUntilTheOtherCatchesUp) {
  ClockAnswer a1;
  SS_ASSERT_OK(JoinThenReportA(clocks_, 1, 0, absl::InfiniteDuration(), a1));
  // b at 0 holds a at 1 back; b's own report at 0 is answered at once.
  auto b0 = ReportNow(clocks_, "b", 0, 0);
  SS_ASSERT_OK(b0);
  EXPECT_TRUE(b0->released);
  EXPECT_FALSE(a1.Within(kShort));
  auto b1 = ReportNow(clocks_, "b", 1, 0);
  SS_ASSERT_OK(b1);
  auto r = a1.Await();
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->min_clock, 1);
  EXPECT_EQ(r->live_members, 2);
  EXPECT_FALSE(r->joined);
}

TEST_F(SspClocksTest, StalenessBoundsTheLead) {
  SS_ASSERT_OK(JoinAAndB(clocks_, 2));
  auto a2 = ReportNow(clocks_, "a", 2, 2);  // 2 <= 0 + 2
  SS_ASSERT_OK(a2);
  EXPECT_TRUE(a2->released);
  ClockAnswer a3;
  clocks_.Report("a", 3, 2, absl::InfiniteDuration(), a3.Callback());
  EXPECT_FALSE(a3.Within(kShort));
  SS_ASSERT_OK(ReportNow(clocks_, "b", 1, 2));
  auto r = a3.Await();
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
}

TEST_F(SspClocksTest, HugeStalenessNeverWaits) {
  SS_ASSERT_OK(ReportNow(clocks_, "slow", 0, 1000000000));
  auto r = ReportNow(clocks_, "fast", 0, 1000000000);
  SS_ASSERT_OK(r);
  r = ReportNow(clocks_, "fast", 999999999, 1000000000);
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->min_clock, 0);
}

TEST_F(SspClocksTest, ADepartedMemberReleasesTheWaiters) {
  ClockAnswer a5;
  SS_ASSERT_OK(JoinThenReportA(clocks_, 5, 0, absl::InfiniteDuration(), a5));
  EXPECT_FALSE(a5.Within(kShort));
  EXPECT_TRUE(clocks_.Leave("b"));
  auto r = a5.Await();
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->min_clock, 5);
  EXPECT_EQ(r->live_members, 1);
  EXPECT_FALSE(clocks_.Leave("b"));
}

TEST_F(SspClocksTest, ASilentMemberIsDroppedAfterTheTimeout) {
  // Not the fixture's clocks_: here members time out after 200 ms.
  std::atomic<int> dropped{0};
  SspClocks clocks(
      SspClockOptions{.member_timeout = absl::Milliseconds(200),
                      .on_dropped = [&](const std::string& member, int64_t clock) { ++dropped; }});
  SS_ASSERT_OK(JoinAAndB(clocks));
  const auto start = std::chrono::steady_clock::now();
  ClockAnswer a1;
  clocks.Report("a", 1, 0, absl::InfiniteDuration(), a1.Callback());
  auto r = a1.Await();
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->live_members, 1);
  EXPECT_GE(r->waited, absl::Milliseconds(150));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
  EXPECT_EQ(dropped.load(), 1);
  // The waiting member itself was never silent.
  EXPECT_EQ(clocks.Snapshot().count("a"), 1u);
  EXPECT_EQ(clocks.Snapshot().count("b"), 0u);
}

TEST_F(SspClocksTest, ALateMemberStartsLevelWithTheSlowest) {
  auto first = ReportNow(clocks_, "a", 0, 0);
  SS_ASSERT_OK(first);
  EXPECT_TRUE(first->joined);
  SS_ASSERT_OK(ReportNow(clocks_, "a", 7, 0));
  auto late = ReportNow(clocks_, "c", 0, 0);
  SS_ASSERT_OK(late);
  EXPECT_TRUE(late->joined);
  EXPECT_TRUE(late->released);
  EXPECT_EQ(late->member_clock, 7);
  EXPECT_EQ(late->min_clock, 7);
}

TEST_F(SspClocksTest, MaxWaitAnswersUnreleased) {
  ClockAnswer a;
  SS_ASSERT_OK(JoinThenReportA(clocks_, 3, 1, absl::Milliseconds(50), a));
  auto r = a.Await();
  SS_ASSERT_OK(r);
  EXPECT_FALSE(r->released);
  EXPECT_EQ(r->min_clock, 0);
  EXPECT_EQ(r->member_clock, 3);
}

TEST_F(SspClocksTest, CloseAnswersWaitersUnavailable) {
  ClockAnswer a;
  SS_ASSERT_OK(JoinThenReportA(clocks_, 1, 0, absl::InfiniteDuration(), a));
  clocks_.Close();
  EXPECT_THAT(a.Await(), StatusIs(absl::StatusCode::kUnavailable, "shutting down"));
  EXPECT_THAT(ReportNow(clocks_, "a", 0, 0), StatusIs(absl::StatusCode::kUnavailable, ""));
}

// ---- Through gRPC.

class ClockRpcTest : public ::testing::Test {
 protected:
  void Start(int replicas, absl::Duration member_timeout) {
    for (int i = 0; i < replicas; ++i) {
      SyncerServerOptions o;
      o.metrics_address = "";
      o.service.member_timeout = member_timeout;
      o.shutdown_grace = absl::Milliseconds(500);
      auto server = SyncerServer::Start(std::move(o));
      ASSERT_TRUE(server.ok()) << server.status();
      addresses_.push_back((*server)->address());
      servers_.push_back(*std::move(server));
    }
  }
  std::unique_ptr<SyncerClient> Client(const std::string& member) {
    auto client = SyncerClient::Connect(
        SyncerClientOptions{
            .addresses = addresses_, .member = member, .rpc_deadline = absl::Seconds(20)},
        8);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
  // Starts the replicas and has clients a_ and b_ report clock 0.
  void StartAndJoin(int replicas, absl::Duration member_timeout) {
    ASSERT_NO_FATAL_FAILURE(Start(replicas, member_timeout));
    a_ = Client("a");
    b_ = Client("b");
    ASSERT_TRUE(a_ != nullptr && b_ != nullptr);
    SS_ASSERT_OK(a_->Clock(0, 0));
    SS_ASSERT_OK(b_->Clock(0, 0));
  }

  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<SyncerServer>> servers_;
  std::unique_ptr<SyncerClient> a_, b_;
};

TEST_F(ClockRpcTest, LockStepOverTwoReplicasAndLeave) {
  ASSERT_NO_FATAL_FAILURE(StartAndJoin(2, absl::Seconds(30)));
  Answer<ClockResult> a1;
  a_->ClockAsync(1, 0, absl::ZeroDuration(), a1.Callback());
  EXPECT_FALSE(a1.Within(kShort));
  // Leave (every group) releases a.
  SS_ASSERT_OK(b_->Leave());
  auto r = a1.Await();
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->live_members, 1);
  EXPECT_EQ(r->min_clock, 1);
  EXPECT_GT(r->waited, absl::ZeroDuration());
  // Stats of replica 0 list the live clocks.
  auto stub =
      v1::Syncer::NewStub(grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::SyncerStatsResponse stats;
  ASSERT_TRUE(stub->Stats(&context, v1::SyncerStatsRequest(), &stats).ok());
  ASSERT_EQ(stats.clocks().size(), 1u);
  EXPECT_EQ(stats.clocks().at("a"), 1);
}

TEST_F(ClockRpcTest, TimedOutMemberReleasesTheWaiter) {
  ASSERT_NO_FATAL_FAILURE(StartAndJoin(1, absl::Milliseconds(300)));
  // b's last report: the timeout runs from there, however long a takes to
  // ask (under tsan, a's call came 94 ms later and waited only 206 ms).
  const absl::Time b_last = absl::Now();
  SS_ASSERT_OK(b_->Clock(0, 0));
  auto r = a_->Clock(2, 0);  // b never reports again
  SS_ASSERT_OK(r);
  EXPECT_GE(absl::Now() - b_last, absl::Milliseconds(300));
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->live_members, 1);
  EXPECT_GT(r->waited, absl::ZeroDuration());
}

TEST_F(ClockRpcTest, ShortMaxWaitAnswersUnreleased) {
  ASSERT_NO_FATAL_FAILURE(StartAndJoin(1, absl::Seconds(30)));
  auto r = a_->Clock(4, 1, absl::Milliseconds(50));
  SS_ASSERT_OK(r);
  EXPECT_FALSE(r->released);
  EXPECT_EQ(r->min_clock, 0);
}

TEST_F(ClockRpcTest, RejectsBadInput) {
  Start(1, absl::Seconds(30));
  auto stub =
      v1::Syncer::NewStub(grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials()));
  v1::ClockRequest request;
  EXPECT_THAT(CallRpc(*stub, &v1::Syncer::Stub::Clock, request),
              StatusIs(absl::StatusCode::kInvalidArgument, "member"));
  request.set_member("a");
  request.set_staleness(-1);
  EXPECT_THAT(CallRpc(*stub, &v1::Syncer::Stub::Clock, request),
              StatusIs(absl::StatusCode::kInvalidArgument, "staleness: must be >= 0, got -1"));
  request.set_staleness(0);
  request.set_clock(-3);
  EXPECT_THAT(CallRpc(*stub, &v1::Syncer::Stub::Clock, request),
              StatusIs(absl::StatusCode::kInvalidArgument, "clock: must be >= 0, got -3"));
}

TEST_F(ClockRpcTest, ShutdownAnswersWaitersUnavailable) {
  ASSERT_NO_FATAL_FAILURE(StartAndJoin(1, absl::Seconds(30)));
  Answer<ClockResult> a1;
  a_->ClockAsync(1, 0, absl::ZeroDuration(), a1.Callback());
  EXPECT_FALSE(a1.Within(kShort));
  servers_[0]->Shutdown();
  EXPECT_THAT(a1.Await(), StatusIs(absl::StatusCode::kUnavailable, ""));
}

}  // namespace
}  // namespace shadowsync::syncer
