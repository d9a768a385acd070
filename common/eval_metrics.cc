#include "common/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace shadowsync {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double ClampedLoss(double p, double y) {
  p = std::clamp(p, kProbEpsilon, 1.0 - kProbEpsilon);
  return -(y * std::log(p) + (1.0 - y) * std::log(1.0 - p));
}

}  // namespace

double BinaryEntropy(double p) { return ClampedLoss(p, p); }

double LogLoss(std::span<const float> probs, std::span<const float> labels) {
  if (probs.empty()) return kNaN;
  double sum = 0;
  for (size_t i = 0; i < probs.size(); ++i) sum += ClampedLoss(probs[i], labels[i]);
  return sum / static_cast<double>(probs.size());
}

double NormalizedEntropy(std::span<const float> probs, std::span<const float> labels) {
  if (labels.empty()) return kNaN;
  double ctr = std::accumulate(labels.begin(), labels.end(), 0.0) / labels.size();
  if (ctr <= 0 || ctr >= 1) return kNaN;
  return LogLoss(probs, labels) / BinaryEntropy(ctr);
}

double Auc(std::span<const float> probs, std::span<const float> labels) {
  const size_t n = probs.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return probs[a] < probs[b]; });
  // Mann-Whitney U: sum of the positives' ranks, ties sharing their mean rank.
  double rank_sum = 0, positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    double tie_positives = 0;
    while (j < n && probs[order[j]] == probs[order[i]]) tie_positives += labels[order[j++]];
    double mean_rank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1 .. j
    rank_sum += tie_positives * mean_rank;
    positives += tie_positives;
    i = j;
  }
  double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return kNaN;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

void RunningEntropy::Add(float prob, float label) {
  ++count_;
  positives_ += label;
  loss_sum_ += ClampedLoss(prob, label);
}

void RunningEntropy::Merge(const RunningEntropy& other) {
  count_ += other.count_;
  positives_ += other.positives_;
  loss_sum_ += other.loss_sum_;
}

double RunningEntropy::logloss() const { return count_ == 0 ? kNaN : loss_sum_ / count_; }

double RunningEntropy::ne() const {
  if (count_ == 0) return kNaN;
  double ctr = positives_ / count_;
  if (ctr <= 0 || ctr >= 1) return kNaN;
  return logloss() / BinaryEntropy(ctr);
}

double Calibration(std::span<const float> probs, std::span<const float> labels) {
  const double positives = std::accumulate(labels.begin(), labels.end(), 0.0);
  if (positives <= 0) return kNaN;
  return std::accumulate(probs.begin(), probs.end(), 0.0) / positives;
}

QualityReport Evaluate(std::span<const float> probs, std::span<const float> labels) {
  QualityReport r;
  r.examples = static_cast<int64_t>(labels.size());
  r.logloss = LogLoss(probs, labels);
  r.ne = NormalizedEntropy(probs, labels);
  r.auc = Auc(probs, labels);
  r.calibration = Calibration(probs, labels);
  r.ctr =
      labels.empty() ? kNaN : std::accumulate(labels.begin(), labels.end(), 0.0) / labels.size();
  return r;
}

}  // namespace shadowsync
