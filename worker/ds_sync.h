// DS-Sync (sync-algorithms.md §4): divide the N trainers into groups of g,
// average the dense PARAMETERS inside each group (the optimizer state stays
// local), and regroup every round. A foreground algorithm: every `interval`
// steps of each thread the trainer's threads meet and the last to arrive runs
// one round, like fg-ma. Each group of a round is its own named all-reduce
// group on the syncer, so a slow group never holds up another.
//
// The schedule is a pure function of (round, seed, N, g): every trainer
// computes the same partition without talking to the others.
//
//   butterfly  a mixed-radix g-ary butterfly. N = r_0 r_1 ... r_{m-1} with
//              r_0 = g, every r_k <= g and m = ceil(log_g N). Write a
//              trainer's index in those digits (r_0 least significant).
//              Phase k = round mod m averages, within each block of trainers
//              that agree on the digits above k (P_k = r_0...r_k trainers),
//              across digit k: the block is cut into P_k / g groups by
//              dealing its members, in index order, round-robin; each group
//              then holds members of every value of digit k, and its mean
//              weighs each digit value 1 / r_k (each member 1 / (r_k * the
//              count of its digit value in the group)). After phases 0..k
//              every trainer holds the exact mean of its block, so after
//              m rounds (one period, training paused) every replica is the
//              global mean. For N = g^m all weights are 1/g and this is the
//              plain g-ary butterfly: phase k groups the trainers whose
//              digits differ only in digit k (N = 4, g = 2: {0,1},{2,3} then
//              {0,2},{1,3}; the official code's second partition is
//              {0,3},{1,2}, the same mixing).
//              Other N are rejected: N / g must split into m - 1 factors of
//              at most g. Examples: (6,3), (12,3), (12,4), (18,3) are
//              admitted; (6,2), (12,2), (20,4) are not. For g = 2 only powers
//              of two qualify, and some N truly have no schedule: for (6,2)
//              round 1 leaves three pair means A, B, C (two copies each);
//              round 2's pairs are AA/BB/CC, AA/BC/BC, AB/AB/CC or AB/AC/BC,
//              and round 3 needs every pair to hold all of A, B and C: the
//              first three leave a block in two replicas for three pairs,
//              and AB/AC/BC with non-negative weights cannot give all three
//              round-3 pairs weight 1/3 on each block (solving for the
//              weights forces a ratio both below and above 1).
//   random     a shared-seed random permutation per round cut into
//              consecutive groups of g (the third-party variant), plain
//              means. To bound the syncer's per-group state the
//              permutations repeat after kDsSyncRandomPhases rounds.
//
// Weighted means ride on the syncer's plain mean: a member contributes
// w * g * x, so the mean over the g members is sum(w x). A round with
// unequal weights is not doubly stochastic (it does not keep the replicas'
// mean while they train); a whole period from phase 0 is exact.
//
// A trainer advances to the next round of the schedule only after a round
// in which every member of its group contributed; a round that completed
// with fewer (a group-mate not started yet, dropped after the syncer's member
// timeout, or finished) is retried at the next sync point, so every full
// round pairs members at the same position of the schedule. A partial round
// of equal weights is still a mean of the members present and is applied;
// with unequal weights it is dropped.
#ifndef SHADOWSYNC_WORKER_DS_SYNC_H_
#define SHADOWSYNC_WORKER_DS_SYNC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jobspec/job_spec.h"
#include "worker/sync_strategy.h"

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

#endif  // SHADOWSYNC_WORKER_DS_SYNC_H_
