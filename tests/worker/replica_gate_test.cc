#include "worker/replica_gate.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shadowsync::worker {
namespace {

TEST(ReplicaGateTest, RunsOnTheCallerWhileNoTrainingThreadIsOpen) {
  ReplicaGate gate(/*serialised=*/true);
  std::thread::id ran_on;
  gate.Run([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(ReplicaGateTest, RunsOnTheCallerWhenHogwildThreadsWriteRelaxed) {
  ReplicaGate gate(/*serialised=*/false);
  gate.Open();  // Never served: a serialised gate would wait forever.
  std::thread::id ran_on;
  EXPECT_EQ(gate.Run([&] { ran_on = std::this_thread::get_id(); }), absl::ZeroDuration());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  gate.Close();
}

// An open gate runs the access on the training thread, at its next Serve,
// and the caller learns how long it waited for it.
TEST(ReplicaGateTest, AnOpenGateRunsTheAccessOnTheTrainingThreadAtItsNextServe) {
  ReplicaGate gate(/*serialised=*/true);
  gate.Open();
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  absl::Duration waited;
  std::thread outside([&] {
    waited = gate.Run([&] {
      ran_on = std::this_thread::get_id();
      ran = true;
    });
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(ran.load());  // No step boundary yet.
  gate.Serve();
  EXPECT_TRUE(ran.load());  // Served before Serve returns.
  outside.join();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_GE(waited, absl::Milliseconds(150));
  gate.Close();
}

// A training thread that stops (done, or failed) must not strand a caller.
TEST(ReplicaGateTest, ClosingReleasesAWaitingCallerWhichRunsTheAccessItself) {
  ReplicaGate gate(/*serialised=*/true);
  gate.Open();
  std::thread::id caller, ran_on;
  std::thread outside([&] {
    caller = std::this_thread::get_id();
    gate.Run([&] { ran_on = std::this_thread::get_id(); });
  });
  absl::SleepFor(absl::Milliseconds(100));
  gate.Close();
  outside.join();
  EXPECT_EQ(ran_on, caller);
}

// A lone training thread updates its vector with plain loads and stores,
// and two outside threads add to it through the gate meanwhile: none of the
// additions is lost, and under ThreadSanitizer no access races.
TEST(ReplicaGateTest, OutsideAccessesNeverOverlapTheTrainingThreadsSteps) {
  ReplicaGate gate(/*serialised=*/true);
  std::vector<float> replica(1024, 0.0f);
  constexpr int kSteps = 2000, kAccesses = 50;
  std::atomic<int> outside_done{0};
  gate.Open();
  std::thread training([&] {
    for (int step = 0; step < kSteps || outside_done.load() < 2; ++step) {
      if (step < kSteps) {
        for (float& v : replica) v += 1.0f;  // Plain: a lone thread's step.
      }
      gate.Serve();
    }
    gate.Close();
  });
  std::vector<std::thread> outside;
  for (int t = 0; t < 2; ++t) {
    outside.emplace_back([&] {
      for (int i = 0; i < kAccesses; ++i) {
        gate.Run([&] {
          for (float& v : replica) {
            std::atomic_ref<float> r(v);
            r.store(r.load(std::memory_order_relaxed) + 1000.0f, std::memory_order_relaxed);
          }
        });
      }
      outside_done.fetch_add(1);
    });
  }
  for (auto& t : outside) t.join();
  training.join();
  for (float v : replica) ASSERT_EQ(v, kSteps + 2 * kAccesses * 1000.0f);
}

}  // namespace
}  // namespace shadowsync::worker
