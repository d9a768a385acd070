#include "worker/sync/ds_sync.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"
#include "syncer/client/syncer_client.h"
#include "worker/sync/interval_round.h"

namespace shadowsync::worker {
namespace {

// Uniform in [0, bound) by multiply-shift (Lemire; the bias is < 2^-32 for
// any trainer count) over SplitMix64, a fixed generator: every trainer,
// whatever its standard library, derives the same permutation from the same
// seed.
uint64_t Below(uint64_t& state, uint64_t bound) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(SplitMix64Next(state)) * bound) >>
                               64);
}

DsSyncPartition RandomPartition(int n, int g, uint64_t seed, int phase) {
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  uint64_t state = seed;
  state = SplitMix64Next(state) ^ static_cast<uint64_t>(phase);
  for (int i = n - 1; i > 0; --i) {
    std::swap(perm[i], perm[Below(state, static_cast<uint64_t>(i) + 1)]);
  }
  DsSyncPartition p;
  p.phase = phase;
  for (int start = 0; start < n; start += g) {
    std::vector<int> group(perm.begin() + start, perm.begin() + start + g);
    std::sort(group.begin(), group.end());
    p.groups.push_back(std::move(group));
    p.weights.emplace_back(g, 1.0 / g);
  }
  return p;
}

// Phase k of the mixed-radix butterfly (see ds_sync.h).
DsSyncPartition ButterflyPartition(int n, int g, const std::vector<int>& radices, int phase) {
  int64_t below = 1;  // P_{k-1}: trainers per value of digit k within a block.
  for (int k = 0; k < phase; ++k) below *= radices[k];
  const int radix = radices[phase];
  const int64_t block = below * radix;  // P_k
  const int64_t per_block = block / g;  // groups per block
  DsSyncPartition p;
  p.phase = phase;
  p.groups.assign(n / g, {});
  p.weights.assign(n / g, {});
  for (int i = 0; i < n; ++i) {
    const int64_t offset = i % block;  // digit k * below + lower digits
    p.groups[(i / block) * per_block + offset % per_block].push_back(i);
  }
  for (size_t j = 0; j < p.groups.size(); ++j) {
    const std::vector<int>& group = p.groups[j];
    std::vector<int> count(radix, 0);
    for (int i : group) ++count[(i % block) / below];
    for (int i : group) p.weights[j].push_back(1.0 / (radix * count[(i % block) / below]));
  }
  return p;
}

// This trainer's part in one phase of the schedule.
struct Phase {
  std::string group;  // syncer all-reduce group name
  float scale = 1;    // weight * g: the contribution is scale * x
  bool equal_weights = true;
};

class DsSyncStrategy final : public IntervalRoundStrategy {
 public:
  DsSyncStrategy(const SyncConfig& config, syncer::SyncerClient* client,
                 prometheus::Registry* registry, std::vector<Phase> phases)
      : IntervalRoundStrategy(config, client, registry), phases_(std::move(phases)) {
    if (registry == nullptr) return;
    const std::map<std::string, std::string> labels = {
        {"schedule", std::string(EnumName(config.ds_sync.schedule))}};
    partial_rounds_ =
        &prometheus::BuildCounter()
             .Name("shadowsync_trainer_ds_sync_partial_rounds_total")
             .Help("ds-sync rounds that completed without every group member; retried.")
             .Register(*registry)
             .Add(labels);
    wait_seconds_ = &prometheus::BuildCounter()
                         .Name("shadowsync_trainer_ds_sync_wait_seconds_total")
                         .Help("Seconds ds-sync rounds waited for the group's other members.")
                         .Register(*registry)
                         .Add(labels);
  }

  absl::Status Start(const DenseReplica& replica) override {
    SS_RETURN_IF_ERROR(IntervalRoundStrategy::Start(replica));
    // A fresh group's first round would complete with whoever contributes
    // first: be a member of every group of the period before any round.
    for (const Phase& phase : phases_) SS_RETURN_IF_ERROR(client_->Join(phase.group));
    snapshot_.resize(replica.params.size());
    input_.resize(replica.params.size());
    target_.resize(replica.params.size());
    return absl::OkStatus();
  }

 private:
  // The delta goes onto the snapshot (as in every strategy).
  absl::Status Round() override {
    const RoundStart start = BeginRound(*client_);
    const Phase& phase = phases_[round_ % static_cast<int64_t>(phases_.size())];
    const size_t n = snapshot_.size();
    model::CopyRelaxed(replica_.params.data(), snapshot_.data(), static_cast<long>(n));
    for (size_t i = 0; i < n; ++i) input_[i] = snapshot_[i] * phase.scale;
    SS_ASSIGN_OR_RETURN(syncer::RoundResult r,
                        client_->AllReduceMean(phase.group, input_, target_));
    if (wait_seconds_ != nullptr && r.waited < absl::InfiniteDuration()) {
      wait_seconds_->Increment(absl::ToDoubleSeconds(r.waited));
    }
    const bool full = r.members >= config_.ds_sync.group_size;
    if (full || phase.equal_weights) {
      if (config_.apply_mode == SyncApplyMode::kDelta) {
        for (size_t i = 0; i < n; ++i) target_[i] -= snapshot_[i];
        AddRelaxed(replica_.params, target_);
      } else {
        StoreRelaxed(replica_.params, target_);
      }
    }
    if (full) {
      ++round_;
    } else if (partial_rounds_ != nullptr) {
      partial_rounds_->Increment();
    }
    EndRound(start, *client_);
    return absl::OkStatus();
  }

  const std::vector<Phase> phases_;  // Indexed by round mod period.
  prometheus::Counter* partial_rounds_ = nullptr;
  prometheus::Counter* wait_seconds_ = nullptr;
  // Used by the round runner only (one at a time, under the rendezvous).
  int64_t round_ = 0;  // Position in the schedule: full rounds so far.
  std::vector<float> snapshot_, input_, target_;
};

}  // namespace

absl::Status ValidateDsSync(int n, int g, DsSyncSchedule schedule) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.dsSync: needs at least one trainer, got ", n));
  }
  if (g < 2) {
    return absl::InvalidArgumentError(absl::StrCat("sync.dsSync.groupSize: must be >= 2, got ", g));
  }
  if (g > n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync.dsSync.groupSize: must be <= the number of trainers (", n, "), got ", g));
  }
  if (n % g != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.dsSync.groupSize: must divide the number of trainers (", n,
                     ") into equal groups, got ", g));
  }
  if (schedule == DsSyncSchedule::kButterfly) return DsSyncButterflyRadices(n, g).status();
  return absl::OkStatus();
}

int DsSyncPeriod(int n, int g, DsSyncSchedule schedule) {
  if (n == g) return 1;
  if (schedule == DsSyncSchedule::kButterfly) return DsSyncButterflyRounds(n, g);
  return kDsSyncRandomPhases;
}

absl::StatusOr<DsSyncPartition> DsSyncRoundPartition(int n, int g, DsSyncSchedule schedule,
                                                     uint64_t seed, int64_t round) {
  SS_RETURN_IF_ERROR(ValidateDsSync(n, g, schedule));
  if (round < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ds-sync round must be >= 0, got ", round));
  }
  const int phase = static_cast<int>(round % DsSyncPeriod(n, g, schedule));
  if (schedule == DsSyncSchedule::kRandom) return RandomPartition(n, g, seed, phase);
  SS_ASSIGN_OR_RETURN(std::vector<int> radices, DsSyncButterflyRadices(n, g));
  return ButterflyPartition(n, g, radices, phase);
}

std::vector<std::vector<int>> DsSyncGroups(int n, int g, DsSyncSchedule schedule, uint64_t seed,
                                           int64_t round) {
  absl::StatusOr<DsSyncPartition> p = DsSyncRoundPartition(n, g, schedule, seed, round);
  if (!p.ok()) return {};
  return std::move(p->groups);
}

absl::StatusOr<std::unique_ptr<SyncStrategy>> MakeDsSyncStrategy(const SyncConfig& config,
                                                                 syncer::SyncerClient* client,
                                                                 prometheus::Registry* registry) {
  const int n = config.num_trainers, g = config.ds_sync.group_size;
  const DsSyncSchedule schedule = config.ds_sync.schedule;
  SS_RETURN_IF_ERROR(ValidateDsSync(n, g, schedule));
  if (config.trainer_index < 0 || config.trainer_index >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("ds-sync trainer index must be in [0, ", n, "), got ", config.trainer_index));
  }
  if (client == nullptr) return absl::InvalidArgumentError("ds-sync needs a syncer");
  const uint64_t seed = static_cast<uint64_t>(config.ds_sync.seed);
  // Names carry everything the membership depends on, so a syncer that
  // outlives a job never mixes two schedules' groups; there are at most
  // period * n / g of them.
  std::string prefix = absl::StrCat(config.group.empty() ? "" : config.group + "/", "ds-sync/",
                                    std::string(EnumName(schedule)), "-n", n, "-g", g);
  if (schedule == DsSyncSchedule::kRandom) absl::StrAppend(&prefix, "-s", seed);
  std::vector<Phase> phases;
  const int period = DsSyncPeriod(n, g, schedule);
  for (int round = 0; round < period; ++round) {
    SS_ASSIGN_OR_RETURN(DsSyncPartition p, DsSyncRoundPartition(n, g, schedule, seed, round));
    for (size_t j = 0; j < p.groups.size(); ++j) {
      const std::vector<int>& group = p.groups[j];
      auto it = std::find(group.begin(), group.end(), config.trainer_index);
      if (it == group.end()) continue;
      const std::vector<double>& w = p.weights[j];
      Phase phase;
      phase.group = absl::StrCat(prefix, "/", p.phase, "/", j);
      phase.scale = static_cast<float>(w[it - group.begin()] * g);
      phase.equal_weights = std::all_of(w.begin(), w.end(), [&](double x) { return x == w[0]; });
      phases.push_back(std::move(phase));
    }
  }
  return std::unique_ptr<SyncStrategy>(
      new DsSyncStrategy(config, client, registry, std::move(phases)));
}

}  // namespace shadowsync::worker
