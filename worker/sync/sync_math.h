// The update rules of the dense-sync strategies, as pure functions on flat
// vectors, so each is unit-tested against hand-computed vectors.
//
// Every rule produces the *target* a sync round moves the replica to, given
// the snapshot s the round started from. The strategies then apply either
// the delta (target - s) to the live replica, keeping the Hogwild progress
// made while the round ran, or overwrite the replica with the target
// (sync.applyMode: overwrite, an ablation). Thread-safe: pure functions of
// their spans; the *Relaxed ones and OptimizerDelta's state share their
// vector with concurrent Hogwild writers.
#ifndef SHADOWSYNC_WORKER_SYNC_SYNC_MATH_H_
#define SHADOWSYNC_WORKER_SYNC_SYNC_MATH_H_

#include <span>
#include <vector>

#include "model/optimizer.h"

namespace shadowsync::worker {

// EASGD, elastic averaging against a centre c (TensorFlow's
// ElasticAverageOptimizer, the paper's asynchronous form):
//   d = alpha * (s - c);  target = s - d;  the centre receives c += d.
// Writes d to `elastic` (what the trainer adds to the centre).
void EasgdElastic(float alpha, std::span<const float> snapshot, std::span<const float> centre,
                  std::span<float> elastic);

// BMUF block momentum, the paper's form (Chen & Huo 2016) on the mean of the
// replicas, a = avg_i(s_i), with w_g the global model and v the momentum:
//   start = w_g + bm * v (Nesterov: where the block began) or w_g;
//   G = a - start;  v = bm * v + zeta * G;  w_g = w_g + v;
//   target = w_g + bm * v (Nesterov look-ahead) or w_g.
// G is the block's own progress, measured from where the replicas started
// it, as CNTK and fairseq measure it from their look-ahead point: taken
// from w_g instead, a Nesterov block would count the last look-ahead bm * v
// again as progress (v = 2 bm v + G, which never decays for bm >= 0.5).
// zeta is in units of the mean update (CNTK sums the replicas' updates and
// scales by 1 - bm), not fairseq's convention, whose effective zeta is
// block_lr / N. With bm = 0 and zeta = 1 it is plain model averaging.
// `global` (w_g) and `momentum` (v) are the state every trainer keeps
// identically.
struct BmufParams {
  float block_momentum = 0.5f;  // bm
  float block_lr = 1.0f;        // zeta
  bool nesterov = true;
};
void BmufStep(const BmufParams& p, std::span<const float> mean, std::span<float> global,
              std::span<float> momentum, std::span<float> target);

// replica[i] += delta[i], with relaxed atomics (Hogwild threads write the
// replica at the same time).
void AddRelaxed(std::span<float> replica, std::span<const float> delta);
// replica[i] = values[i], with relaxed atomics.
void StoreRelaxed(std::span<float> replica, std::span<const float> values);

// One optimizer update of `grad` written as a delta instead of applied:
// delta = -lr * g (SGD) or -lr * g / (sqrt(a) + eps) with a += g^2 (Adagrad,
// `state` updated with relaxed atomics). For the asynchronous modes, which
// send the update to the syncer's global weights.
void OptimizerDelta(const model::OptimizerConfig& config, std::span<float> state,
                    std::span<const float> grad, std::span<float> delta);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_SYNC_MATH_H_
