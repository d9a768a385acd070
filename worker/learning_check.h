// Whether a run is learning. A run whose loss turns non-finite, or whose
// train NE is still at the base rate's after many examples, trains on to the
// end without an error and hands over a model no better than predicting the
// click rate. LearningCheck says so as soon as it is clear.
//
// Not thread-safe: the trainer feeds it under its progress lock.
#ifndef SHADOWSYNC_WORKER_LEARNING_CHECK_H_
#define SHADOWSYNC_WORKER_LEARNING_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/eval_metrics.h"

namespace shadowsync::worker {

struct LearningCheckOptions {
  // The train NE is judged over windows of after_examples / 2 examples (in
  // the order they were trained), each one that ends at or after
  // after_examples. 0: only the loss's finiteness is checked.
  int64_t after_examples = 100'000;
  // A window whose NE is at or above this has learned nothing worth having
  // (1.0 is the base-rate predictor's).
  double max_train_ne = 0.99;
};

class LearningCheck {
 public:
  explicit LearningCheck(LearningCheckOptions options) : options_(options) {}

  // One batch's progressive scores (each example scored before its update).
  // Returns the first problem found, once: a message for a person.
  std::optional<std::string> Add(const RunningEntropy& batch);

 private:
  const LearningCheckOptions options_;
  int64_t examples_ = 0;
  RunningEntropy window_;
  bool reported_ = false;
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_LEARNING_CHECK_H_
