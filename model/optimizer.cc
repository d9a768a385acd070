#include "model/optimizer.h"

#include "absl/strings/str_cat.h"

namespace shadowsync::model {

absl::StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adagrad") return OptimizerKind::kAdagrad;
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer: expected \"sgd\" or \"adagrad\", got \"", std::string(name), "\""));
}

std::string_view OptimizerName(OptimizerKind kind) {
  return kind == OptimizerKind::kSgd ? "sgd" : "adagrad";
}

}  // namespace shadowsync::model
