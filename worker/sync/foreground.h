// fg-easgd, fg-ma, fg-bmuf (docs/sync.md): the shadow algorithms' round
// bodies in the foreground: every `interval` steps of each thread, all of
// the trainer's threads stop and the last to arrive runs one round.
// Thread-safe as the SyncStrategy contract requires.
#ifndef SHADOWSYNC_WORKER_SYNC_FOREGROUND_H_
#define SHADOWSYNC_WORKER_SYNC_FOREGROUND_H_

#include <memory>

#include "worker/sync/strategy.h"

namespace shadowsync::worker {

// REQUIRES: config.algorithm is an fg-* algorithm; `client` is not null and
// outlives the strategy.
std::unique_ptr<SyncStrategy> NewForegroundStrategy(const SyncConfig& config,
                                                    syncer::SyncerClient* client,
                                                    prometheus::Registry* registry);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_FOREGROUND_H_
