// shadow-easgd, shadow-ma, shadow-bmuf (docs/sync.md): a background thread
// loops over sync rounds off the training path and applies each result as a
// delta on the snapshot it sent, so Hogwild progress made meanwhile is kept.
// A foreground warm-up precedes it, a final averaging round follows it.
// Thread-safe as the SyncStrategy contract requires.
#ifndef SHADOWSYNC_WORKER_SYNC_SHADOW_H_
#define SHADOWSYNC_WORKER_SYNC_SHADOW_H_

#include <memory>

#include "worker/sync/strategy.h"

namespace shadowsync::worker {

// REQUIRES: config.algorithm is a shadow-* algorithm; `client` is not null
// and outlives the strategy.
std::unique_ptr<SyncStrategy> NewShadowStrategy(const SyncConfig& config,
                                                syncer::SyncerClient* client,
                                                prometheus::Registry* registry);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_SHADOW_H_
