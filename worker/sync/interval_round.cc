#include "worker/sync/interval_round.h"

#include <utility>

#include "common/status_macros.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/rendezvous.h"

namespace shadowsync::worker {

IntervalRoundStrategy::IntervalRoundStrategy(SyncConfig config, syncer::SyncerClient* client,
                                             prometheus::Registry* registry)
    : SyncStrategy(std::move(config), registry), client_(client) {}

IntervalRoundStrategy::~IntervalRoundStrategy() = default;

absl::Status IntervalRoundStrategy::Start(const DenseReplica& replica) {
  SS_RETURN_IF_ERROR(SyncStrategy::Start(replica));
  rendezvous_ = std::make_unique<Rendezvous>(replica.threads);
  thread_steps_.assign(replica.threads, 0);
  return absl::OkStatus();
}

absl::Status IntervalRoundStrategy::AfterStep(int thread) {
  SS_RETURN_IF_ERROR(SyncStrategy::AfterStep(thread));
  if (++thread_steps_[thread] % config_.interval != 0) return absl::OkStatus();
  const Clock::time_point start = Clock::now();
  absl::Status status = rendezvous_->Arrive([this] { return Round(); });
  RecordBlocked(Since(start));
  return status;
}

void IntervalRoundStrategy::ThreadDone(int thread) { rendezvous_->Leave(); }

absl::Status IntervalRoundStrategy::Finish() { return client_->Leave(); }

}  // namespace shadowsync::worker
