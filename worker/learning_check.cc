#include "worker/learning_check.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace shadowsync::worker {

std::optional<std::string> LearningCheck::Add(const RunningEntropy& batch) {
  if (reported_ || batch.count() == 0) return std::nullopt;
  const int64_t begin = examples_;
  examples_ += batch.count();
  if (!std::isfinite(batch.logloss())) {
    reported_ = true;
    return absl::StrFormat(
        "the training loss is not finite (%g) in the batch of examples %d-%d: the model diverged "
        "(try a lower trainer.learningRate)",
        batch.logloss(), begin, examples_);
  }
  if (options_.after_examples <= 0) return std::nullopt;
  window_.Merge(batch);
  const int64_t window = std::max<int64_t>(options_.after_examples / 2, 1);
  if (window_.count() < window) return std::nullopt;
  const double ne = window_.ne();
  const int64_t window_begin = examples_ - window_.count();
  window_ = RunningEntropy();
  if (examples_ < options_.after_examples || !(ne >= options_.max_train_ne)) return std::nullopt;
  reported_ = true;
  return absl::StrFormat(
      "the model is not learning: train NE %.4f over examples %d-%d, at or above %.4f (1.0 is "
      "the base rate's); check the data's labels and features, and the learning rate",
      ne, window_begin, examples_, options_.max_train_ne);
}

}  // namespace shadowsync::worker
