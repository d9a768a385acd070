// The SSP clock: SspClocks on its own (waits, leaves, silence, late joiners,
// max wait) and the Clock RPC through SyncerClient against a real syncer on
// 127.0.0.1:0, including input checks.
#include "syncer/ssp_clock.h"

#include <chrono>
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
#include "tests/util/test_util.h"

namespace shadowsync::syncer {
namespace {

using ::shadowsync::testing::StatusIs;

// One report's answer, awaited with a bound instead of a sleep.
class Answer {
 public:
  ClockCallback Callback() {
    return [this](absl::StatusOr<ClockOutcome> r) { promise_.set_value(std::move(r)); };
  }
  // Whether the answer came within `timeout`.
  bool Within(std::chrono::milliseconds timeout) {
    return future_.wait_for(timeout) == std::future_status::ready;
  }
  absl::StatusOr<ClockOutcome> Get() { return future_.get(); }

 private:
  std::promise<absl::StatusOr<ClockOutcome>> promise_;
  std::future<absl::StatusOr<ClockOutcome>> future_ = promise_.get_future();
};

constexpr auto kLong = std::chrono::seconds(5);
constexpr auto kShort = std::chrono::milliseconds(50);

absl::StatusOr<ClockOutcome> ReportNow(SspClocks& clocks, const std::string& member, int64_t clock,
                                       int64_t staleness) {
  Answer a;
  clocks.Report(member, clock, staleness, absl::InfiniteDuration(), a.Callback());
  if (!a.Within(kLong)) return absl::DeadlineExceededError("no answer");
  return a.Get();
}

TEST(SspClocksTest, LockStepWaitsUntilTheOtherCatchesUp) {
  SspClocks clocks(SspClockOptions{.member_timeout = absl::Seconds(30)});
  SS_ASSERT_OK(ReportNow(clocks, "a", 0, 0));
  SS_ASSERT_OK(ReportNow(clocks, "b", 0, 0));
  Answer a1;
  clocks.Report("a", 1, 0, absl::InfiniteDuration(), a1.Callback());
  // b at 0 holds a at 1 back; b's own report at 0 is answered at once.
  auto b0 = ReportNow(clocks, "b", 0, 0);
  SS_ASSERT_OK(b0);
  EXPECT_TRUE(b0->released);
  EXPECT_FALSE(a1.Within(kShort));
  auto b1 = ReportNow(clocks, "b", 1, 0);
  SS_ASSERT_OK(b1);
  ASSERT_TRUE(a1.Within(kLong));
  auto r = a1.Get();
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->min_clock, 1);
  EXPECT_EQ(r->live_members, 2);
  EXPECT_FALSE(r->joined);
}

TEST(SspClocksTest, StalenessBoundsTheLead) {
  SspClocks clocks(SspClockOptions{.member_timeout = absl::Seconds(30)});
  SS_ASSERT_OK(ReportNow(clocks, "a", 0, 2));
  SS_ASSERT_OK(ReportNow(clocks, "b", 0, 2));
  auto a2 = ReportNow(clocks, "a", 2, 2);  // 2 <= 0 + 2
  SS_ASSERT_OK(a2);
  EXPECT_TRUE(a2->released);
  Answer a3;
  clocks.Report("a", 3, 2, absl::InfiniteDuration(), a3.Callback());
  EXPECT_FALSE(a3.Within(kShort));
  SS_ASSERT_OK(ReportNow(clocks, "b", 1, 2));
  ASSERT_TRUE(a3.Within(kLong));
  EXPECT_TRUE(a3.Get()->released);
}

TEST(SspClocksTest, HugeStalenessNeverWaits) {
  SspClocks clocks(SspClockOptions{.member_timeout = absl::Seconds(30)});
  SS_ASSERT_OK(ReportNow(clocks, "slow", 0, 1000000000));
  auto r = ReportNow(clocks, "fast", 0, 1000000000);
  SS_ASSERT_OK(r);
  r = ReportNow(clocks, "fast", 999999999, 1000000000);
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->min_clock, 0);
}

TEST(SspClocksTest, ADepartedMemberReleasesTheWaiters) {
  SspClocks clocks(SspClockOptions{.member_timeout = absl::Seconds(30)});
  SS_ASSERT_OK(ReportNow(clocks, "a", 0, 0));
  SS_ASSERT_OK(ReportNow(clocks, "b", 0, 0));
  Answer a5;
  clocks.Report("a", 5, 0, absl::InfiniteDuration(), a5.Callback());
  EXPECT_FALSE(a5.Within(kShort));
  EXPECT_TRUE(clocks.Leave("b"));
  ASSERT_TRUE(a5.Within(kLong));
  auto r = a5.Get();
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->min_clock, 5);
  EXPECT_EQ(r->live_members, 1);
  EXPECT_FALSE(clocks.Leave("b"));
}

TEST(SspClocksTest, ASilentMemberIsDroppedAfterTheTimeout) {
  std::atomic<int> dropped{0};
  SspClocks clocks(
      SspClockOptions{.member_timeout = absl::Milliseconds(200),
                      .on_dropped = [&](const std::string& member, int64_t clock) { ++dropped; }});
  SS_ASSERT_OK(ReportNow(clocks, "a", 0, 0));
  SS_ASSERT_OK(ReportNow(clocks, "b", 0, 0));
  const auto start = std::chrono::steady_clock::now();
  Answer a1;
  clocks.Report("a", 1, 0, absl::InfiniteDuration(), a1.Callback());
  ASSERT_TRUE(a1.Within(kLong));
  auto r = a1.Get();
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

TEST(SspClocksTest, ALateMemberStartsLevelWithTheSlowest) {
  SspClocks clocks(SspClockOptions{.member_timeout = absl::Seconds(30)});
  auto first = ReportNow(clocks, "a", 0, 0);
  SS_ASSERT_OK(first);
  EXPECT_TRUE(first->joined);
  SS_ASSERT_OK(ReportNow(clocks, "a", 7, 0));
  auto late = ReportNow(clocks, "c", 0, 0);
  SS_ASSERT_OK(late);
  EXPECT_TRUE(late->joined);
  EXPECT_TRUE(late->released);
  EXPECT_EQ(late->member_clock, 7);
  EXPECT_EQ(late->min_clock, 7);
}

TEST(SspClocksTest, MaxWaitAnswersUnreleased) {
  SspClocks clocks(SspClockOptions{.member_timeout = absl::Seconds(30)});
  SS_ASSERT_OK(ReportNow(clocks, "a", 0, 0));
  SS_ASSERT_OK(ReportNow(clocks, "b", 0, 0));
  Answer a;
  clocks.Report("a", 3, 1, absl::Milliseconds(50), a.Callback());
  ASSERT_TRUE(a.Within(kLong));
  auto r = a.Get();
  SS_ASSERT_OK(r);
  EXPECT_FALSE(r->released);
  EXPECT_EQ(r->min_clock, 0);
  EXPECT_EQ(r->member_clock, 3);
}

TEST(SspClocksTest, CloseAnswersWaitersUnavailable) {
  SspClocks clocks(SspClockOptions{.member_timeout = absl::Seconds(30)});
  SS_ASSERT_OK(ReportNow(clocks, "a", 0, 0));
  SS_ASSERT_OK(ReportNow(clocks, "b", 0, 0));
  Answer a;
  clocks.Report("a", 1, 0, absl::InfiniteDuration(), a.Callback());
  clocks.Close();
  ASSERT_TRUE(a.Within(kLong));
  EXPECT_THAT(a.Get(), StatusIs(absl::StatusCode::kUnavailable, "shutting down"));
  EXPECT_THAT(ReportNow(clocks, "a", 0, 0), StatusIs(absl::StatusCode::kUnavailable, ""));
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

  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<SyncerServer>> servers_;
};

TEST_F(ClockRpcTest, LockStepOverTwoReplicasAndLeave) {
  Start(2, absl::Seconds(30));
  auto a = Client("a"), b = Client("b");
  SS_ASSERT_OK(a->Clock(0, 0));
  SS_ASSERT_OK(b->Clock(0, 0));
  std::promise<absl::StatusOr<ClockResult>> promise;
  auto future = promise.get_future();
  a->ClockAsync(1, 0, absl::ZeroDuration(),
                [&promise](absl::StatusOr<ClockResult> r) { promise.set_value(std::move(r)); });
  EXPECT_EQ(future.wait_for(kShort), std::future_status::timeout);
  // Leave (every group) releases a.
  SS_ASSERT_OK(b->Leave());
  ASSERT_EQ(future.wait_for(kLong), std::future_status::ready);
  auto r = future.get();
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
  Start(1, absl::Milliseconds(300));
  auto a = Client("a"), b = Client("b");
  SS_ASSERT_OK(a->Clock(0, 0));
  SS_ASSERT_OK(b->Clock(0, 0));
  auto r = a->Clock(2, 0);  // b never reports again
  SS_ASSERT_OK(r);
  EXPECT_TRUE(r->released);
  EXPECT_EQ(r->live_members, 1);
  EXPECT_GE(r->waited, absl::Milliseconds(250));
}

TEST_F(ClockRpcTest, ShortMaxWaitAnswersUnreleased) {
  Start(1, absl::Seconds(30));
  auto a = Client("a"), b = Client("b");
  SS_ASSERT_OK(a->Clock(0, 0));
  SS_ASSERT_OK(b->Clock(0, 0));
  auto r = a->Clock(4, 1, absl::Milliseconds(50));
  SS_ASSERT_OK(r);
  EXPECT_FALSE(r->released);
  EXPECT_EQ(r->min_clock, 0);
}

TEST_F(ClockRpcTest, RejectsBadInput) {
  Start(1, absl::Seconds(30));
  auto stub =
      v1::Syncer::NewStub(grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials()));
  auto call = [&](const v1::ClockRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ClockResponse response;
    return stub->Clock(&context, request, &response);
  };
  v1::ClockRequest request;
  grpc::Status s = call(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("member"));
  request.set_member("a");
  request.set_staleness(-1);
  s = call(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("staleness: must be >= 0, got -1"));
  request.set_staleness(0);
  request.set_clock(-3);
  s = call(request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("clock: must be >= 0, got -3"));
}

TEST_F(ClockRpcTest, ShutdownAnswersWaitersUnavailable) {
  Start(1, absl::Seconds(30));
  auto a = Client("a"), b = Client("b");
  SS_ASSERT_OK(a->Clock(0, 0));
  SS_ASSERT_OK(b->Clock(0, 0));
  std::promise<absl::StatusOr<ClockResult>> promise;
  auto future = promise.get_future();
  a->ClockAsync(1, 0, absl::ZeroDuration(),
                [&promise](absl::StatusOr<ClockResult> r) { promise.set_value(std::move(r)); });
  EXPECT_EQ(future.wait_for(kShort), std::future_status::timeout);
  servers_[0]->Shutdown();
  ASSERT_EQ(future.wait_for(kLong), std::future_status::ready);
  EXPECT_THAT(future.get(), StatusIs(absl::StatusCode::kUnavailable, ""));
}

}  // namespace
}  // namespace shadowsync::syncer
