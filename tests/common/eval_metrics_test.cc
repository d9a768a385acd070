#include "common/eval_metrics.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace shadowsync {
namespace {

TEST(EvalMetricsTest, LogLossMatchesHandComputedValue) {
  // -(ln 0.8 + ln(1 - 0.4)) / 2
  std::vector<float> p = {0.8f, 0.4f}, y = {1, 0};
  EXPECT_NEAR(LogLoss(p, y), -(std::log(0.8) + std::log(0.6)) / 2, 1e-6);
}

TEST(EvalMetricsTest, BaseRatePredictorHasNeOne) {
  std::vector<float> y = {1, 0, 0, 0}, p(4, 0.25f);
  EXPECT_NEAR(NormalizedEntropy(p, y), 1.0, 1e-6);
}

TEST(EvalMetricsTest, NeIsLogLossOverBaseEntropy) {
  // ctr 0.5 -> entropy ln 2; predictions 0.9 for the positive, 0.2 for the negative.
  std::vector<float> p = {0.9f, 0.2f}, y = {1, 0};
  const double logloss = -(std::log(0.9) + std::log(0.8)) / 2;
  EXPECT_NEAR(NormalizedEntropy(p, y), logloss / std::log(2.0), 1e-6);
}

TEST(EvalMetricsTest, CalibrationIsPredictedOverObservedClicks) {
  // 0.9 + 0.2 + 0.4 + 0.3 = 1.8 predicted clicks against 2 observed.
  std::vector<float> p = {0.9f, 0.2f, 0.4f, 0.3f}, y = {1, 0, 1, 0};
  EXPECT_NEAR(Calibration(p, y), 0.9, 1e-6);
  // The base-rate predictor is calibrated whatever its NE.
  std::vector<float> base(4, 0.5f);
  EXPECT_NEAR(Calibration(base, y), 1.0, 1e-9);
  EXPECT_NEAR(Evaluate(p, y).calibration, 0.9, 1e-6);
  std::vector<float> no_clicks = {0, 0};
  EXPECT_TRUE(std::isnan(Calibration(std::vector<float>{0.1f, 0.2f}, no_clicks)));
}

TEST(EvalMetricsTest, AucCountsOrderedPairs) {
  // Positives at 0.9 and 0.4, negatives at 0.5 and 0.1: 3 of 4 pairs ordered.
  std::vector<float> p = {0.9f, 0.4f, 0.5f, 0.1f}, y = {1, 1, 0, 0};
  EXPECT_NEAR(Auc(p, y), 0.75, 1e-9);
}

TEST(EvalMetricsTest, AucTiesCountHalf) {
  std::vector<float> p = {0.5f, 0.5f, 0.5f}, y = {1, 0, 0};
  EXPECT_NEAR(Auc(p, y), 0.5, 1e-9);
  std::vector<float> p2 = {0.7f, 0.3f, 0.7f, 0.3f}, y2 = {1, 1, 0, 0};
  // Pairs (pos, neg): (0.7,0.7) half, (0.7,0.3) one, (0.3,0.7) zero, (0.3,0.3) half.
  EXPECT_NEAR(Auc(p2, y2), 0.5, 1e-9);
}

TEST(EvalMetricsTest, PerfectAndInvertedRankings) {
  std::vector<float> y = {0, 0, 1, 1};
  EXPECT_NEAR(Auc(std::vector<float>{0.1f, 0.2f, 0.8f, 0.9f}, y), 1.0, 1e-9);
  EXPECT_NEAR(Auc(std::vector<float>{0.9f, 0.8f, 0.2f, 0.1f}, y), 0.0, 1e-9);
}

TEST(EvalMetricsTest, SingleClassGivesNaN) {
  std::vector<float> p = {0.3f, 0.6f}, y = {1, 1};
  EXPECT_TRUE(std::isnan(Auc(p, y)));
  EXPECT_TRUE(std::isnan(NormalizedEntropy(p, y)));
}

TEST(EvalMetricsTest, RunningEntropyEqualsBatchComputation) {
  std::vector<float> p = {0.9f, 0.2f, 0.6f, 0.3f, 0.7f}, y = {1, 0, 1, 0, 0};
  RunningEntropy a, b;
  for (int i = 0; i < 2; ++i) a.Add(p[i], y[i]);
  for (int i = 2; i < 5; ++i) b.Add(p[i], y[i]);
  a.Merge(b);
  EXPECT_EQ(a.count(), 5);
  EXPECT_NEAR(a.logloss(), LogLoss(p, y), 1e-9);
  EXPECT_NEAR(a.ne(), NormalizedEntropy(p, y), 1e-9);
}

TEST(EvalMetricsTest, ProbabilitiesAreClampedBeforeLog) {
  std::vector<float> p = {0.0f}, y = {1};
  EXPECT_NEAR(LogLoss(p, y), -std::log(kProbEpsilon), 1e-6);
}

}  // namespace
}  // namespace shadowsync
