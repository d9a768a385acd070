#include "worker/sync/sync_math.h"

#include <atomic>
#include <cmath>
#include <cstddef>

namespace shadowsync::worker {

void EasgdElastic(float alpha, std::span<const float> snapshot, std::span<const float> centre,
                  std::span<float> elastic) {
  for (size_t i = 0; i < snapshot.size(); ++i) elastic[i] = alpha * (snapshot[i] - centre[i]);
}

void BmufStep(const BmufParams& p, std::span<const float> mean, std::span<float> global,
              std::span<float> momentum, std::span<float> target) {
  for (size_t i = 0; i < mean.size(); ++i) {
    const float start = p.nesterov ? global[i] + p.block_momentum * momentum[i] : global[i];
    const float v = p.block_momentum * momentum[i] + p.block_lr * (mean[i] - start);
    momentum[i] = v;
    global[i] += v;
    target[i] = p.nesterov ? global[i] + p.block_momentum * v : global[i];
  }
}

void AddRelaxed(std::span<float> replica, std::span<const float> delta) {
  for (size_t i = 0; i < replica.size(); ++i) {
    std::atomic_ref<float> x(replica[i]);
    x.store(x.load(std::memory_order_relaxed) + delta[i], std::memory_order_relaxed);
  }
}

void StoreRelaxed(std::span<float> replica, std::span<const float> values) {
  model::StoreRelaxed(values.data(), replica.data(), static_cast<long>(replica.size()));
}

void OptimizerDelta(const model::OptimizerConfig& config, std::span<float> state,
                    std::span<const float> grad, std::span<float> delta) {
  const float lr = config.learning_rate;
  if (config.kind == model::OptimizerKind::kSgd) {
    for (size_t i = 0; i < grad.size(); ++i) delta[i] = -lr * grad[i];
    return;
  }
  for (size_t i = 0; i < grad.size(); ++i) {
    std::atomic_ref<float> s(state[i]);
    const float a = s.load(std::memory_order_relaxed) + grad[i] * grad[i];
    s.store(a, std::memory_order_relaxed);
    delta[i] = -lr * grad[i] / (std::sqrt(a) + config.epsilon);
  }
}

}  // namespace shadowsync::worker
