// Optimizer arithmetic shared by the trainer (dense parameters), the
// in-process embedding store and the parameter server (sparse rows), so every
// engine applies identical updates. Adagrad follows torch.optim.Adagrad:
// element-wise accumulator starting at 0, eps added after the square root.
#ifndef SHADOWSYNC_COMMON_MODEL_OPTIMIZER_H_
#define SHADOWSYNC_COMMON_MODEL_OPTIMIZER_H_

#include <atomic>
#include <cmath>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace shadowsync::model {

enum class OptimizerKind { kSgd, kAdagrad };

absl::StatusOr<OptimizerKind> ParseOptimizerKind(std::string_view name);
std::string_view OptimizerName(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdagrad;
  float learning_rate = 0.05f;
  float epsilon = 1e-10f;  // Adagrad's denominator guard, as in PyTorch.
};

// Floats of optimizer state kept per parameter (0 for SGD, 1 for Adagrad).
constexpr int StateFloatsPerParam(OptimizerKind kind) {
  return kind == OptimizerKind::kAdagrad ? 1 : 0;
}

namespace optimizer_internal {
// kShared: other threads access the same values, so every access is a
// relaxed atomic (Hogwild). Otherwise plain accesses, which vectorise.
template <bool kShared>
inline float Load(const float& x) {
  if constexpr (kShared) return std::atomic_ref<const float>(x).load(std::memory_order_relaxed);
  return x;
}
template <bool kShared>
inline void Store(float& x, float v) {
  if constexpr (kShared) {
    std::atomic_ref<float>(x).store(v, std::memory_order_relaxed);
  } else {
    x = v;
  }
}
template <bool kShared>
inline void ApplyUpdate(const OptimizerConfig& config, float* params, float* state,
                        const float* grad, long n) {
  const float lr = config.learning_rate;
  if (config.kind == OptimizerKind::kSgd) {
    for (long i = 0; i < n; ++i) Store<kShared>(params[i], Load<kShared>(params[i]) - lr * grad[i]);
    return;
  }
  for (long i = 0; i < n; ++i) {
    const float g = grad[i];
    const float a = Load<kShared>(state[i]) + g * g;
    Store<kShared>(state[i], a);
    Store<kShared>(params[i], Load<kShared>(params[i]) - lr * g / (std::sqrt(a) + config.epsilon));
  }
}
}  // namespace optimizer_internal

// Applies one update to `n` parameters. `state` has n * StateFloatsPerParam
// floats. Every access is a relaxed atomic load or store: Hogwild threads race
// on the same values by design (lost updates are accepted, torn floats and
// undefined behaviour are not).
inline void ApplyUpdateRelaxed(const OptimizerConfig& config, float* params, float* state,
                               const float* grad, long n) {
  optimizer_internal::ApplyUpdate<true>(config, params, state, grad, n);
}

// The same update for values no other thread touches meanwhile.
inline void ApplyUpdateExclusive(const OptimizerConfig& config, float* params, float* state,
                                 const float* grad, long n) {
  optimizer_internal::ApplyUpdate<false>(config, params, state, grad, n);
}

// Copies n floats with relaxed atomic loads, for a consistent-enough private
// snapshot of values other threads are updating.
inline void CopyRelaxed(const float* src, float* dst, long n) {
  for (long i = 0; i < n; ++i) {
    dst[i] = std::atomic_ref<const float>(src[i]).load(std::memory_order_relaxed);
  }
}

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_COMMON_MODEL_OPTIMIZER_H_
