#include "operator/work_queue.h"

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shadowsync::kube {
namespace {

// Per-key backoff only: the token bucket off, so delays are exact.
RateLimiterOptions NoBucket(absl::Duration base = absl::Milliseconds(5),
                            absl::Duration max = absl::Seconds(1000)) {
  RateLimiterOptions o;
  o.base_delay = base;
  o.max_delay = max;
  o.qps = 0;
  return o;
}

TEST(RateLimiterTest, PerKeyExponentialBackoffWithCapAndForget) {
  RateLimiter limiter(NoBucket(absl::Milliseconds(5), absl::Milliseconds(100)));
  const absl::Time now = absl::UnixEpoch();
  EXPECT_EQ(limiter.When("a", now), absl::Milliseconds(5));
  EXPECT_EQ(limiter.When("a", now), absl::Milliseconds(10));
  EXPECT_EQ(limiter.When("a", now), absl::Milliseconds(20));
  EXPECT_EQ(limiter.When("b", now), absl::Milliseconds(5));  // Independent keys.
  EXPECT_EQ(limiter.When("a", now), absl::Milliseconds(40));
  EXPECT_EQ(limiter.When("a", now), absl::Milliseconds(80));
  EXPECT_EQ(limiter.When("a", now), absl::Milliseconds(100));  // Capped.
  EXPECT_EQ(limiter.NumRequeues("a"), 6);
  limiter.Forget("a");
  EXPECT_EQ(limiter.NumRequeues("a"), 0);
  EXPECT_EQ(limiter.When("a", now), absl::Milliseconds(5));
}

TEST(RateLimiterTest, DefaultsMatchClientGo) {
  RateLimiter limiter(NoBucket());
  const absl::Time now = absl::UnixEpoch();
  absl::Duration last;
  for (int i = 0; i < 40; ++i) last = limiter.When("k", now);
  EXPECT_EQ(last, absl::Seconds(1000));
  for (int i = 0; i < 5000; ++i) last = limiter.When("k", now);  // No overflow.
  EXPECT_EQ(last, absl::Seconds(1000));
}

TEST(RateLimiterTest, TokenBucketLimitsAllKeysTogether) {
  RateLimiterOptions o = NoBucket(absl::ZeroDuration(), absl::ZeroDuration());
  o.qps = 10;
  o.burst = 2;
  RateLimiter limiter(o);
  const absl::Time t0 = absl::UnixEpoch();
  EXPECT_EQ(limiter.When("a", t0), absl::ZeroDuration());
  EXPECT_EQ(limiter.When("b", t0), absl::ZeroDuration());
  EXPECT_EQ(limiter.When("c", t0), absl::Milliseconds(100));  // One token at 10 qps.
  EXPECT_EQ(limiter.When("d", t0), absl::Milliseconds(200));
  // 1 s later the bucket has refilled to its burst.
  EXPECT_EQ(limiter.When("e", t0 + absl::Seconds(1)), absl::ZeroDuration());
}

TEST(WorkQueueTest, AddDedupesQueuedKeysAndKeepsOrder) {
  WorkQueue q(NoBucket());
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.Get(), "a");
  EXPECT_EQ(q.Get(), "b");
  EXPECT_EQ(q.Len(), 0u);
  q.Done("a");
  q.Done("b");
}

TEST(WorkQueueTest, KeyAddedWhileProcessingIsRequeuedAfterDone) {
  WorkQueue q(NoBucket());
  q.Add("a");
  ASSERT_EQ(q.Get(), "a");
  q.Add("a");  // Not handed to a second worker while the first holds it.
  q.Add("a");
  EXPECT_EQ(q.Len(), 0u);
  q.Done("a");
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(q.Get(), "a");
  q.Done("a");
  EXPECT_EQ(q.Len(), 0u);
}

TEST(WorkQueueTest, NoKeyIsProcessedByTwoWorkersAtOnce) {
  WorkQueue q(NoBucket());
  std::atomic<int> in_flight_a = 0;
  std::atomic<int> max_in_flight_a = 0;
  std::atomic<int> processed = 0;
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) {
        if (*key == "a") {
          const int n = ++in_flight_a;
          max_in_flight_a = std::max(max_in_flight_a.load(), n);
          absl::SleepFor(absl::Microseconds(200));
          --in_flight_a;
        }
        ++processed;
        q.Done(*key);
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    q.Add("a");
    q.Add(absl::StrCat("k", i % 7));
    if (i % 20 == 0) absl::SleepFor(absl::Milliseconds(1));
  }
  // Drain: wait until nothing is queued, then shut down with drain.
  while (q.Len() > 0) absl::SleepFor(absl::Milliseconds(1));
  q.ShutDownWithDrain();
  for (std::thread& t : workers) t.join();
  EXPECT_EQ(max_in_flight_a, 1);
  EXPECT_GT(processed, 0);
}

TEST(WorkQueueTest, GetBlocksUntilAddOrShutDown) {
  WorkQueue q(NoBucket());
  std::optional<std::string> got;
  std::thread getter([&] { got = q.Get(); });
  absl::SleepFor(absl::Milliseconds(20));
  q.Add("x");
  getter.join();
  EXPECT_EQ(got, "x");
  q.Done("x");

  std::thread waiter([&] { got = q.Get(); });
  absl::SleepFor(absl::Milliseconds(20));
  q.ShutDown();
  waiter.join();
  EXPECT_EQ(got, std::nullopt);
  EXPECT_TRUE(q.ShuttingDown());
}

TEST(WorkQueueTest, QueuedKeysAreStillHandedOutAfterShutDownButNewOnesAreDropped) {
  WorkQueue q(NoBucket());
  q.Add("a");
  q.AddAfter("later", absl::Milliseconds(1));
  q.ShutDown();
  q.Add("b");
  EXPECT_EQ(q.Get(), "a");
  q.Done("a");
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(q.Get(), std::nullopt);
}

TEST(WorkQueueTest, AddAfterDelaysAndKeepsTheEarlierTime) {
  WorkQueue q(NoBucket());
  const absl::Time start = absl::Now();
  q.AddAfter("slow", absl::Milliseconds(60));
  q.AddAfter("fast", absl::Milliseconds(300));
  q.AddAfter("fast", absl::Milliseconds(20));    // Earlier wins.
  q.AddAfter("slow", absl::Milliseconds(5000));  // Later is ignored.
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.Get(), "fast");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  EXPECT_EQ(q.Get(), "slow");
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(60));
  EXPECT_LT(waited, absl::Milliseconds(3000));
  q.Done("fast");
  q.Done("slow");
  q.AddAfter("now", absl::ZeroDuration());
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, AnEarlierDelayedKeyWakesAWaitingGet) {
  WorkQueue q(NoBucket());
  q.AddAfter("late", absl::Seconds(30));
  std::optional<std::string> got;
  const absl::Time start = absl::Now();
  std::thread getter([&] { got = q.Get(); });
  absl::SleepFor(absl::Milliseconds(20));
  q.AddAfter("soon", absl::Milliseconds(10));
  getter.join();
  EXPECT_EQ(got, "soon");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(WorkQueueTest, AddRateLimitedBacksOffPerKeyAndForgetResets) {
  WorkQueue q(NoBucket(absl::Milliseconds(20), absl::Seconds(10)));
  // 1st failure: 20 ms, 2nd: 40 ms, 3rd: 80 ms.
  for (const absl::Duration expected :
       {absl::Milliseconds(20), absl::Milliseconds(40), absl::Milliseconds(80)}) {
    const absl::Time start = absl::Now();
    q.AddRateLimited("k");
    EXPECT_EQ(q.Len(), 0u);
    ASSERT_EQ(q.Get(), "k");
    EXPECT_GE(absl::Now() - start, expected);
    q.Done("k");
  }
  EXPECT_EQ(q.NumRequeues("k"), 3);
  q.Forget("k");
  EXPECT_EQ(q.NumRequeues("k"), 0);
  const absl::Time start = absl::Now();
  q.AddRateLimited("k");
  ASSERT_EQ(q.Get(), "k");
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(80));
  q.Done("k");
}

TEST(WorkQueueTest, DelayedKeyThatIsAlreadyQueuedIsNotDuplicated) {
  WorkQueue q(NoBucket());
  q.Add("k");
  q.AddAfter("k", absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(q.Get(), "k");
  EXPECT_EQ(q.Len(), 0u);
  q.Done("k");
}

TEST(WorkQueueTest, ShutDownWithDrainWaitsForDone) {
  WorkQueue q(NoBucket());
  q.Add("k");
  ASSERT_EQ(q.Get(), "k");
  std::atomic<bool> drained = false;
  std::thread shutter([&] {
    q.ShutDownWithDrain();
    drained = true;
  });
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(drained);
  q.Done("k");
  shutter.join();
  EXPECT_TRUE(drained);
}

}  // namespace
}  // namespace shadowsync::kube
