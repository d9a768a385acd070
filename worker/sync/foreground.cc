#include <vector>

#include "common/status_macros.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/interval_round.h"
#include "worker/sync/round_body.h"
#include "worker/sync/strategies.h"
#include "worker/sync/sync_math.h"

namespace shadowsync::worker {
namespace {

// fg-*: every `interval` steps of each thread, the trainer's threads meet and
// the last to arrive runs one round while the others wait.
class ForegroundStrategy final : public IntervalRoundStrategy {
 public:
  ForegroundStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                     prometheus::Registry* registry)
      : IntervalRoundStrategy(config, client, registry),
        body_(BodyOf(config.algorithm), config, client) {}

  absl::Status Start(const DenseReplica& replica) override {
    SS_RETURN_IF_ERROR(IntervalRoundStrategy::Start(replica));
    SS_RETURN_IF_ERROR(body_.Start(replica.params));
    snapshot_.resize(replica.params.size());
    target_.resize(replica.params.size());
    return absl::OkStatus();
  }

 private:
  absl::Status Round() override {
    const RoundStart start = BeginRound(*client_);
    model::CopyRelaxed(replica_.params.data(), snapshot_.data(),
                       static_cast<long>(snapshot_.size()));
    SS_RETURN_IF_ERROR(body_.Run(snapshot_, target_));
    StoreRelaxed(replica_.params, target_);
    EndRound(start, *client_);
    return absl::OkStatus();
  }

  RoundBody body_;
  std::vector<float> snapshot_, target_;  // Used by the round runner only.
};

}  // namespace

std::unique_ptr<SyncStrategy> NewForegroundStrategy(const SyncConfig& config,
                                                    syncer::SyncerClient* client,
                                                    prometheus::Registry* registry) {
  return std::make_unique<ForegroundStrategy>(config, client, registry);
}

}  // namespace shadowsync::worker
