// The constructors of the algorithms whose classes are private to their
// files (docs/sync.md describes each): asp.cc, bsp.cc, foreground.cc and
// shadow.cc. Each returns a strategy that is thread-safe as the SyncStrategy
// contract requires; `client` is not null and outlives the strategy.
#ifndef SHADOWSYNC_WORKER_SYNC_STRATEGIES_H_
#define SHADOWSYNC_WORKER_SYNC_STRATEGIES_H_

#include <memory>

#include "worker/sync/strategy.h"

namespace shadowsync::worker {

// asp: every step of every thread, the optimizer update goes to the
// syncer's global weights, which come back and replace the replica.
std::unique_ptr<SyncStrategy> NewAspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                                             prometheus::Registry* registry);

// bsp: every step, the pooled gradient of the trainer's threads is
// all-reduced over the trainers and one optimizer update is applied.
std::unique_ptr<SyncStrategy> NewBspStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                                             prometheus::Registry* registry);

// fg-easgd, fg-ma, fg-bmuf: every `interval` steps of each thread, all of
// the trainer's threads stop and the last to arrive runs one round.
// REQUIRES: config.algorithm is an fg-* algorithm.
std::unique_ptr<SyncStrategy> NewForegroundStrategy(const SyncConfig& config,
                                                    syncer::SyncerClient* client,
                                                    prometheus::Registry* registry);

// shadow-easgd, shadow-ma, shadow-bmuf: a background thread loops over
// rounds off the training path and applies each result as a delta on the
// snapshot it sent. REQUIRES: config.algorithm is a shadow-* algorithm.
std::unique_ptr<SyncStrategy> NewShadowStrategy(const SyncConfig& config,
                                                syncer::SyncerClient* client,
                                                prometheus::Registry* registry);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_STRATEGIES_H_
