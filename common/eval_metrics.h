// Quality metrics of a CTR model: logloss, normalized entropy (NE; the
// ShadowSync paper's metric) and AUC. The functions are pure and thread-safe;
// RunningEntropy is thread-compatible (not synchronised: one writer, or a
// per-thread accumulator Merge()d at the end).
#ifndef SHADOWSYNC_COMMON_EVAL_METRICS_H_
#define SHADOWSYNC_COMMON_EVAL_METRICS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace shadowsync {

// Probabilities are clamped to [kProbEpsilon, 1 - kProbEpsilon] before log.
inline constexpr double kProbEpsilon = 1e-7;

// Binary entropy of a Bernoulli(p) in nats: the logloss of always predicting p.
double BinaryEntropy(double p);

// Mean binary cross-entropy (nats) of `probs` against `labels` (0 or 1).
double LogLoss(std::span<const float> probs, std::span<const float> labels);

// Normalized entropy: logloss divided by the entropy of the labels' mean.
// 1.0 for the base-rate predictor, lower is better. NaN if all labels agree.
double NormalizedEntropy(std::span<const float> probs, std::span<const float> labels);

// Calibration: mean predicted probability over the labels' mean (1.0 is
// calibrated, above 1 over-predicts). NE moves with calibration where AUC,
// a ranking metric, does not; reported beside both. NaN without positives.
double Calibration(std::span<const float> probs, std::span<const float> labels);

// Exact ROC AUC by sorting; tied scores count one half. NaN with one class only.
double Auc(std::span<const float> probs, std::span<const float> labels);

// Running logloss and NE over a stream of predictions (progressive
// validation: each prediction made before the model saw the label).
class RunningEntropy {
 public:
  void Add(float prob, float label);
  void Merge(const RunningEntropy& other);
  int64_t count() const { return count_; }
  double logloss() const;  // NaN when empty.
  double ne() const;       // NaN when empty or one class only.

 private:
  int64_t count_ = 0;
  double positives_ = 0;
  double loss_sum_ = 0;
};

struct QualityReport {
  int64_t examples = 0;
  double logloss = 0;
  double ne = 0;
  double auc = 0;
  double ctr = 0;
  double calibration = 0;
};
QualityReport Evaluate(std::span<const float> probs, std::span<const float> labels);

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_EVAL_METRICS_H_
