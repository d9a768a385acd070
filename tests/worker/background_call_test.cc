#include "worker/background_call.h"

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shadowsync::worker {
namespace {

TEST(BackgroundCallTest, EveryCallRunsOnOneThreadOtherThanTheCallers) {
  BackgroundCall call;
  std::set<std::thread::id> threads;
  for (int i = 0; i < 50; ++i) {
    call.Start([&] {
      threads.insert(std::this_thread::get_id());  // Ordered by Wait.
      return absl::OkStatus();
    });
    ASSERT_TRUE(call.Wait().ok());
  }
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(*threads.begin(), std::this_thread::get_id());
}

TEST(BackgroundCallTest, WaitGivesEachCallsOwnStatus) {
  BackgroundCall call;
  for (int i = 0; i < 20; ++i) {
    call.Start([i] {
      return i % 3 == 0 ? absl::UnavailableError(absl::StrCat("call ", i)) : absl::OkStatus();
    });
    const absl::Status status = call.Wait();
    if (i % 3 == 0) {
      EXPECT_EQ(status, absl::UnavailableError(absl::StrCat("call ", i)));
    } else {
      EXPECT_TRUE(status.ok()) << status;
    }
  }
}

TEST(BackgroundCallTest, RunsWhileTheCallerWorksAndWaitBlocksUntilItEnds) {
  BackgroundCall call;
  std::atomic<bool> release{false};
  std::atomic<bool> started{false};
  call.Start([&] {
    started = true;
    while (!release) std::this_thread::yield();
    return absl::OkStatus();
  });
  // The call makes progress without Wait: the caller's work overlaps it.
  while (!started) std::this_thread::yield();
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    EXPECT_TRUE(call.Wait().ok());
    waited = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(waited);  // Still running.
  release = true;
  waiter.join();
  EXPECT_TRUE(waited);
}

TEST(BackgroundCallTest, DestroyingRunsAQueuedCallToTheEnd) {
  int ran = 0;  // Read after the destructor's join.
  {
    BackgroundCall call;
    call.Start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++ran;
      return absl::OkStatus();
    });
  }  // No Wait, as on an early error return.
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace shadowsync::worker
