// The base of the strategies whose training threads meet every `interval`
// local steps for one synchronous round (fg-*, ds-sync). Thread-safe as the
// SyncStrategy contract requires; Round() runs on one thread at a time.
#ifndef SHADOWSYNC_WORKER_SYNC_INTERVAL_ROUND_H_
#define SHADOWSYNC_WORKER_SYNC_INTERVAL_ROUND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "worker/sync/strategy.h"

namespace shadowsync::worker {

class Rendezvous;

// A strategy whose training threads meet every `interval` local steps (per
// thread) for one synchronous round: the last to arrive runs Round() while
// the others wait, so the replica is the round's alone. fg-easgd/ma/bmuf and
// ds-sync are built on it. Start() joins nothing: subclasses that need
// groups join them in their own Start(), after calling this one.
class IntervalRoundStrategy : public SyncStrategy {
 public:
  ~IntervalRoundStrategy() override;
  absl::Status Start(const DenseReplica& replica) override;
  absl::Status AfterStep(int thread) override;
  void ThreadDone(int thread) override;
  absl::Status Finish() override;

 protected:
  IntervalRoundStrategy(SyncConfig config, syncer::SyncerClient* client,
                        prometheus::Registry* registry);
  // One round; only ever one at a time, with every other thread waiting.
  virtual absl::Status Round() = 0;

  syncer::SyncerClient* const client_;

 private:
  std::unique_ptr<Rendezvous> rendezvous_;
  std::vector<int64_t> thread_steps_;  // Each entry written by its own thread only.
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_INTERVAL_ROUND_H_
