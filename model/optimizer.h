// Optimizer arithmetic shared by the trainer (dense parameters), the
// in-process embedding store and the parameter server (sparse rows), so every
// engine applies identical updates. Adagrad follows torch.optim.Adagrad:
// element-wise accumulator starting at 0, eps added after the square root.
// Thread-safety is per function: ApplyUpdateExclusive needs its values to
// itself, the Relaxed ones share them with other Hogwild threads.
#ifndef SHADOWSYNC_MODEL_OPTIMIZER_H_
#define SHADOWSYNC_MODEL_OPTIMIZER_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
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

// The linear learning-rate warm-up: the factor of the learning rate at the
// 0-based `step` of `warmup_steps` (1 from then on, and with no warm-up).
// Adagrad's first step moves every weight by the full learning rate whatever
// its gradient; spread over warm-up steps, those first steps cannot push a
// whole ReLU layer dead (docs/decisions.md, "learning-rate warm-up").
constexpr float WarmupFactor(int64_t step, int64_t warmup_steps) {
  return step >= warmup_steps ? 1.0f
                              : static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
}

// Floats of optimizer state kept per parameter (0 for SGD, 1 for Adagrad).
constexpr int StateFloatsPerParam(OptimizerKind kind) {
  return kind == OptimizerKind::kAdagrad ? 1 : 0;
}

// Copies n floats with relaxed atomic loads, for a consistent-enough private
// snapshot of values other threads are updating.
inline void CopyRelaxed(const float* src, float* dst, long n) {
  for (long i = 0; i < n; ++i) {
    dst[i] = std::atomic_ref<const float>(src[i]).load(std::memory_order_relaxed);
  }
}

// Stores n floats with relaxed atomic stores into values other threads read.
inline void StoreRelaxed(const float* src, float* dst, long n) {
  for (long i = 0; i < n; ++i) {
    std::atomic_ref<float>(dst[i]).store(src[i], std::memory_order_relaxed);
  }
}

// Applies one update to `n` parameters no other thread touches meanwhile.
// `state` has n * StateFloatsPerParam floats. Vectorises.
inline void ApplyUpdateExclusive(const OptimizerConfig& config, float* params, float* state,
                                 const float* grad, long n) {
  const float lr = config.learning_rate;
  if (config.kind == OptimizerKind::kSgd) {
    for (long i = 0; i < n; ++i) params[i] -= lr * grad[i];
    return;
  }
  for (long i = 0; i < n; ++i) {
    const float g = grad[i];
    state[i] += g * g;
    params[i] -= lr * g / (std::sqrt(state[i]) + config.epsilon);
  }
}

// The same update of values other Hogwild threads update too. Every access to
// them is a relaxed atomic load or store: lost updates are accepted, torn
// floats and undefined behaviour are not. Each chunk is loaded into a private
// buffer, updated there by the vectorised loop above and stored back: the
// same per-value race as a scalar loop, without its scalar sqrt and division.
inline void ApplyUpdateRelaxed(const OptimizerConfig& config, float* params, float* state,
                               const float* grad, long n) {
  constexpr long kChunk = 256;
  const bool adagrad = config.kind == OptimizerKind::kAdagrad;
  alignas(64) float p[kChunk], s[kChunk];
  for (long begin = 0; begin < n; begin += kChunk) {
    const long m = std::min(kChunk, n - begin);
    CopyRelaxed(params + begin, p, m);
    if (adagrad) CopyRelaxed(state + begin, s, m);
    ApplyUpdateExclusive(config, p, s, grad + begin, m);
    if (adagrad) StoreRelaxed(s, state + begin, m);
    StoreRelaxed(p, params + begin, m);
  }
}

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_MODEL_OPTIMIZER_H_
