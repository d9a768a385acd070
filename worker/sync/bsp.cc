#include <algorithm>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/rendezvous.h"
#include "worker/sync/strategies.h"

namespace shadowsync::worker {
namespace {

// bsp: the trainer's threads pool their gradients every step; the pool's
// mean is averaged over the trainers and applied once.
class BspStrategy final : public SyncStrategy {
 public:
  BspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
              prometheus::Registry* registry)
      : SyncStrategy(config, registry), client_(client) {}

  absl::Status Start(const DenseReplica& replica) override {
    SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
    // Every step is one round of all trainers: none may start without the others.
    SS_RETURN_IF_ERROR(
        client_->AwaitMembers(config_.group, config_.num_trainers, kStartBarrierTimeout));
    rendezvous_ = std::make_unique<Rendezvous>(replica.threads);
    MutexLock l(&mu_);
    sum_.assign(replica.params.size(), 0.0f);
    mean_.resize(replica.params.size());
    return absl::OkStatus();
  }

  absl::Status ApplyGradient(int thread, std::span<const float> grad) override {
    const Clock::time_point start = Clock::now();
    {
      MutexLock l(&mu_);
      for (size_t i = 0; i < grad.size(); ++i) sum_[i] += grad[i];
      ++pooled_;
    }
    absl::Status status = rendezvous_->Arrive([this] { return Round(); });
    RecordBlocked(Since(start));
    return status;
  }

  void ThreadDone(int thread) override { rendezvous_->Leave(); }

  absl::Status Finish() override { return client_->Leave(); }

 private:
  absl::Status Round() {
    const RoundStart start = BeginRound(*client_);
    MutexLock l(&mu_);
    const float scale = 1.0f / static_cast<float>(std::max(pooled_, 1));
    for (float& g : sum_) g *= scale;
    SS_RETURN_IF_ERROR(client_->AllReduceMean(config_.group, sum_, mean_).status());
    model::ApplyUpdateRelaxed(DenseOptimizer(), replica_.params.data(), replica_.state.data(),
                              mean_.data(), static_cast<long>(mean_.size()));
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    pooled_ = 0;
    EndRound(start, *client_);
    return absl::OkStatus();
  }

  syncer::SyncerClient* const client_;
  std::unique_ptr<Rendezvous> rendezvous_;
  Mutex mu_;
  std::vector<float> sum_ ABSL_GUARDED_BY(mu_);
  std::vector<float> mean_ ABSL_GUARDED_BY(mu_);
  int pooled_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<SyncStrategy> NewBspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                                             prometheus::Registry* registry) {
  return std::make_unique<BspStrategy>(config, client, registry);
}

}  // namespace shadowsync::worker
