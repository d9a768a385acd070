#include "common/grpc_util.h"

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace shadowsync {
namespace {

// Takes two absl::Mutexes in one order, then in the other: a potential
// deadlock by absl's detector, though nothing can deadlock here.
void LockInBothOrders() {
  absl::Mutex a, b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
}

// Why DisableMutexDeadlockDetection exists: Debian's libabsl runs the
// detector by default (it is built without NDEBUG), and gRPC's locks pay for
// it. The threadsafe style re-runs this test alone in a fresh process, so the
// test below has not yet switched the detector off there.
TEST(GrpcUtilDeathTest, DebiansAbslDetectsDeadlocksByDefault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(LockInBothOrders(), "potential deadlock");
}

TEST(GrpcUtilTest, DisableMutexDeadlockDetectionStopsTheDetector) {
  DisableMutexDeadlockDetection();
  LockInBothOrders();  // Would abort with the detector on.
  SUCCEED();
}

TEST(GrpcUtilTest, StatusesKeepCodeAndMessageBothWays) {
  const absl::Status s = absl::FailedPreconditionError("shard 3 moved");
  const grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(g.error_message(), "shard 3 moved");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace shadowsync
