#include "worker/learning_check.h"

#include <cmath>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shadowsync::worker {
namespace {

using ::testing::HasSubstr;

// A batch of n examples with click rate 1/4, all predicted at p: p = 0.25
// is the base-rate predictor (NE 1), p = NaN a diverged model.
RunningEntropy Batch(int n, float p) {
  RunningEntropy e;
  for (int i = 0; i < n; ++i) e.Add(p, i % 4 == 0 ? 1.0f : 0.0f);
  return e;
}

// A batch a model that learned scores well: confident and mostly right.
RunningEntropy GoodBatch(int n) {
  RunningEntropy e;
  for (int i = 0; i < n; ++i) {
    const bool click = i % 4 == 0;
    e.Add(click ? 0.7f : 0.1f, click ? 1.0f : 0.0f);
  }
  return e;
}

TEST(LearningCheckTest, ANonFiniteLossIsReportedOnceWithItsExamples) {
  LearningCheck check({.after_examples = 0});
  EXPECT_EQ(check.Add(GoodBatch(100)), std::nullopt);
  std::optional<std::string> problem = check.Add(Batch(50, std::nanf("")));
  ASSERT_TRUE(problem.has_value());
  EXPECT_THAT(*problem, HasSubstr("not finite"));
  EXPECT_THAT(*problem, HasSubstr("examples 100-150"));
  EXPECT_EQ(check.Add(Batch(50, std::nanf(""))), std::nullopt) << "reported once";
}

TEST(LearningCheckTest, ABaseRateWindowEndingAtAfterExamplesIsReported) {
  LearningCheck check({.after_examples = 1000, .max_train_ne = 0.99});
  // Windows of 500: [0, 500) ends before 1000 and is not judged, however bad.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(check.Add(Batch(100, 0.25f)), std::nullopt);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(check.Add(Batch(100, 0.25f)), std::nullopt);
  std::optional<std::string> problem = check.Add(Batch(100, 0.25f));
  ASSERT_TRUE(problem.has_value());
  EXPECT_THAT(*problem, HasSubstr("not learning: train NE 1.0000 over examples 500-1000"));
}

TEST(LearningCheckTest, ARunThatLearnsAfterABadStartIsNotReported) {
  LearningCheck check({.after_examples = 1000, .max_train_ne = 0.99});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(check.Add(Batch(100, 0.25f)), std::nullopt);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(check.Add(GoodBatch(100)), std::nullopt);
}

TEST(LearningCheckTest, ZeroAfterExamplesChecksOnlyTheLoss) {
  LearningCheck check({.after_examples = 0});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(check.Add(Batch(100, 0.25f)), std::nullopt);
  EXPECT_TRUE(check.Add(Batch(1, std::nanf(""))).has_value());
}

}  // namespace
}  // namespace shadowsync::worker
