#include "common/mutex.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shadowsync {
namespace {

TEST(MutexTest, AwaitWakesWhenAnotherThreadMakesThePredicateTrue) {
  Mutex mu;
  bool ready = false;
  std::thread t([&] {
    MutexLock l(&mu);
    ready = true;
  });
  {
    MutexLock l(&mu);
    mu.Await([&] { return ready; });
    EXPECT_TRUE(ready);
  }
  t.join();
}

TEST(MutexTest, AwaitWithTimeoutReturnsFalseWhenNothingChanges) {
  Mutex mu;
  MutexLock l(&mu);
  EXPECT_FALSE(mu.AwaitWithTimeout([] { return false; }, absl::Milliseconds(20)));
  EXPECT_TRUE(mu.AwaitWithTimeout([] { return true; }, absl::Milliseconds(20)));
}

TEST(MutexTest, ExclusiveLockSerialisesIncrements) {
  Mutex mu;
  int64_t counter = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 10000; ++k) {
        MutexLock l(&mu);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  ReaderMutexLock l(&mu);
  EXPECT_EQ(counter, 40000);
}

}  // namespace
}  // namespace shadowsync
