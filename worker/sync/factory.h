// Builds the strategy a job's sync block names (docs/sync.md lists them).
// Thread-safe: pure functions.
#ifndef SHADOWSYNC_WORKER_SYNC_FACTORY_H_
#define SHADOWSYNC_WORKER_SYNC_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "jobspec/job_spec.h"
#include "worker/sync/strategy.h"

namespace shadowsync::worker {

// SyncConfig from a job, for a job of spec.trainer.replicas trainers.
SyncConfig SyncConfigFromJob(const JobSpec& spec);

// The strategy of `config`. `client` reaches the syncer and must outlive the
// strategy; it may be null only for `none`. `registry` (may be null) gets the
// shadowsync_trainer_sync_* metrics. INVALID_ARGUMENT for settings the
// strategy cannot run with, naming the field.
absl::StatusOr<std::unique_ptr<SyncStrategy>> MakeSyncStrategy(const SyncConfig& config,
                                                               syncer::SyncerClient* client,
                                                               prometheus::Registry* registry);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_FACTORY_H_
