// ds-sync (sync-algorithms.md §4): every `interval` steps, the dense
// parameters are averaged inside groups of g trainers that change every
// round, by a schedule (butterfly or random) each trainer computes alone.
// docs/sync.md defines the schedules and the partial-round rule.
// Thread-safety: the schedule functions are pure; the strategy is
// thread-safe as the SyncStrategy contract requires.
#ifndef SHADOWSYNC_WORKER_SYNC_DS_SYNC_H_
#define SHADOWSYNC_WORKER_SYNC_DS_SYNC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jobspec/job_spec.h"
#include "worker/sync/strategy.h"

namespace shadowsync::worker {

// Rounds after which the random schedule's permutations repeat.
inline constexpr int kDsSyncRandomPhases = 16;

// One round's partition. groups[j] lists trainer indices in ascending order;
// weights[j][i] is the weight of groups[j][i] in its group's mean (positive,
// summing to 1 over the group).
struct DsSyncPartition {
  int phase = 0;  // round mod the period: rounds of equal phase group alike
  std::vector<std::vector<int>> groups;
  std::vector<std::vector<double>> weights;
};

// OK if a schedule exists for n trainers in groups of g. INVALID_ARGUMENT
// naming sync.dsSync.groupSize (g < 2, g > n, or g does not divide n) or
// sync.dsSync.schedule (a butterfly n outside the rule above).
absl::Status ValidateDsSync(int n, int g, DsSyncSchedule schedule);

// DsSyncButterflyRounds and DsSyncButterflyRadices (the shape rule) are in
// jobspec/job_spec.h: job validation applies it too.

// Rounds after which the partitions repeat: m for butterfly,
// kDsSyncRandomPhases for random, 1 when n == g.
// REQUIRES: ValidateDsSync(n, g, schedule) is OK.
int DsSyncPeriod(int n, int g, DsSyncSchedule schedule);

// The partition of round `round` (>= 0), or ValidateDsSync's error.
absl::StatusOr<DsSyncPartition> DsSyncRoundPartition(int n, int g, DsSyncSchedule schedule,
                                                     uint64_t seed, int64_t round);

// Just the groups of DsSyncRoundPartition; empty if it fails.
std::vector<std::vector<int>> DsSyncGroups(int n, int g, DsSyncSchedule schedule, uint64_t seed,
                                           int64_t round);

// The ds-sync strategy (what MakeSyncStrategy returns for kDsSync). Uses
// config.ds_sync, config.num_trainers, config.trainer_index and
// config.interval; config.group, if not empty, prefixes the syncer group
// names. INVALID_ARGUMENT for a configuration ValidateDsSync rejects or a
// trainer_index outside [0, num_trainers). `registry` may be null; it gets
// shadowsync_trainer_ds_sync_partial_rounds_total and
// shadowsync_trainer_ds_sync_wait_seconds_total.
absl::StatusOr<std::unique_ptr<SyncStrategy>> MakeDsSyncStrategy(const SyncConfig& config,
                                                                 syncer::SyncerClient* client,
                                                                 prometheus::Registry* registry);

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_DS_SYNC_H_
