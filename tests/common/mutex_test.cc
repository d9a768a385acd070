#include "common/mutex.h"

#include <memory>
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

// An object whose owner awaits a flag another thread sets may be destroyed
// as soon as Await returns, so Unlock must not touch the mutex once another
// thread can hold it. It once notified after unlocking: a use after free
// that hung a pull callback in StalenessStrategiesTest, and that the tsan
// preset reports here as a race with the delete.
TEST(MutexTest, AwaiterMayDestroyTheMutexOnceThePredicateHolds) {
  struct Flag {
    Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
  };
  for (int i = 0; i < 3000; ++i) {
    auto flag = std::make_unique<Flag>();
    std::thread setter([f = flag.get()] {
      MutexLock l(&f->mu);
      f->done = true;
    });
    {
      MutexLock l(&flag->mu);
      flag->mu.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(flag->mu) { return flag->done; });
    }
    flag.reset();
    setter.join();
  }
}

}  // namespace
}  // namespace shadowsync
