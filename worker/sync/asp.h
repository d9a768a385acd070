// asp (docs/sync.md): every step of every thread, the optimizer update
// goes to the syncer's global weights, which come back and replace the
// replica; no trainer waits for another. Thread-safe as the SyncStrategy
// contract requires.
#ifndef SHADOWSYNC_WORKER_SYNC_ASP_H_
#define SHADOWSYNC_WORKER_SYNC_ASP_H_

#include <memory>

#include "worker/sync/strategy.h"

namespace shadowsync::worker {

// `client` is not null and outlives the strategy.
std::unique_ptr<SyncStrategy> NewAspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                                             prometheus::Registry* registry);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_ASP_H_
