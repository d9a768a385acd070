// The round bodies that shadow-* and fg-* share: one sync round of EASGD, MA
// or BMUF, from a snapshot of the replica to the target the replica should
// move to (sync_math.h has the formulas). Not thread-safe: one thread at a
// time runs a body's rounds.
#ifndef SHADOWSYNC_WORKER_SYNC_ROUND_BODY_H_
#define SHADOWSYNC_WORKER_SYNC_ROUND_BODY_H_

#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "jobspec/job_spec.h"
#include "worker/sync/strategy.h"

namespace shadowsync::worker {

enum class Body { kEasgd, kMa, kBmuf };

// The body of a shadow-* or fg-* algorithm (kMa for anything else).
Body BodyOf(SyncAlgorithm algorithm);

class RoundBody {
 public:
  RoundBody(Body body, const SyncConfig& config, syncer::SyncerClient* client)
      : body_(body), config_(config), client_(client) {}

  // Agrees on the starting point: EASGD adopts the syncer's centre (the
  // first trainer's initial weights); BMUF starts its global model there.
  absl::Status Start(std::span<float> params);

  // After the syncer failed (e.g. it restarted and lost its state): seeds
  // the centre again from this replica unless another trainer already did,
  // or joins the rounds again. The replica is left as it is.
  absl::Status Rejoin(std::span<const float> replica);

  // `*waited`: time spent waiting for other members (all-reduce bodies).
  absl::Status Run(std::span<const float> snapshot, std::span<float> target,
                   absl::Duration* waited = nullptr);

 private:
  const Body body_;
  const SyncConfig config_;
  syncer::SyncerClient* const client_;
  std::vector<float> scratch_, global_, momentum_;
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_ROUND_BODY_H_
