#include <vector>

#include "common/status_macros.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/strategies.h"
#include "worker/sync/sync_math.h"

namespace shadowsync::worker {
namespace {

// asp: each step's update goes to the syncer's global weights, which replace
// the replica; nobody waits for anybody else.
class AspStrategy final : public SyncStrategy {
 public:
  AspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
              prometheus::Registry* registry)
      : SyncStrategy(config, registry), client_(client) {}

  absl::Status Start(const DenseReplica& replica) override {
    SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
    const size_t n = replica.params.size();
    buffers_.resize(replica.threads);
    for (auto& b : buffers_) {
      b.delta.resize(n);
      b.global.resize(n);
    }
    std::vector<float> init(replica.params.begin(), replica.params.end());
    SS_RETURN_IF_ERROR(client_->InitCentre(init, buffers_[0].global));
    StoreRelaxed(replica.params, buffers_[0].global);
    return absl::OkStatus();
  }

  absl::Status ApplyGradient(int thread, std::span<const float> grad) override {
    Buffers& b = buffers_[thread];
    const Clock::time_point start = Clock::now();
    // Counted per thread: concurrent threads share the client's counters.
    const int64_t bytes = static_cast<int64_t>(grad.size() * sizeof(float));
    OptimizerDelta(DenseOptimizer(), replica_.state, grad, b.delta);
    SS_RETURN_IF_ERROR(client_->AddAndPull(b.delta, b.global));
    StoreRelaxed(replica_.params, b.global);
    const absl::Duration took = Since(start);
    RecordBlocked(took);
    RecordRound(took, bytes, bytes);
    return absl::OkStatus();
  }

 private:
  struct Buffers {
    std::vector<float> delta, global;
  };
  syncer::SyncerClient* const client_;
  std::vector<Buffers> buffers_;  // One per thread.
};

}  // namespace

std::unique_ptr<SyncStrategy> NewAspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                                             prometheus::Registry* registry) {
  return std::make_unique<AspStrategy>(config, client, registry);
}

}  // namespace shadowsync::worker
