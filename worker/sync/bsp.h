// bsp (docs/sync.md): every step, the trainer's threads pool their
// gradients, the pooled mean is all-reduced over the trainers, and one
// optimizer update is applied (a global batch of N * T * b). Thread-safe as
// the SyncStrategy contract requires.
#ifndef SHADOWSYNC_WORKER_SYNC_BSP_H_
#define SHADOWSYNC_WORKER_SYNC_BSP_H_

#include <memory>

#include "worker/sync/strategy.h"

namespace shadowsync::worker {

// `client` is not null and outlives the strategy.
std::unique_ptr<SyncStrategy> NewBspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                                             prometheus::Registry* registry);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_BSP_H_
