#include "worker/sync/factory.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/sync/ds_sync.h"
#include "worker/sync/ps_plus.h"
#include "worker/sync/ssp.h"
#include "worker/sync/strategies.h"
#include "worker/sync/sync_switch.h"

namespace shadowsync::worker {

SyncConfig SyncConfigFromJob(const JobSpec& spec) {
  SyncConfig c;
  c.algorithm = spec.sync.algorithm;
  c.interval = spec.sync.interval;
  c.min_interval = absl::Milliseconds(spec.sync.min_interval_ms);
  c.duty_cycle = spec.sync.duty_cycle;
  c.warmup_steps = spec.sync.warmup_steps;
  c.final_average = spec.sync.final_average;
  c.apply_mode = spec.sync.apply_mode;
  c.easgd_alpha = static_cast<float>(EffectiveEasgdAlpha(spec));
  c.bmuf.block_momentum = static_cast<float>(EffectiveBlockMomentum(spec));
  c.bmuf.block_lr = static_cast<float>(EffectiveBlockLearningRate(spec));
  c.bmuf.nesterov = spec.sync.bmuf.nesterov;
  c.num_trainers = spec.trainer.replicas;
  switch (spec.sync.algorithm) {
    case SyncAlgorithm::kAsp:
    case SyncAlgorithm::kSsp:
    case SyncAlgorithm::kPsPlus:
      c.lr_scale = EffectiveSharedLearningRateScale(spec);
      break;
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kShadowMa:
    case SyncAlgorithm::kShadowBmuf:
    case SyncAlgorithm::kFgEasgd:
    case SyncAlgorithm::kFgMa:
    case SyncAlgorithm::kFgBmuf:
      c.lr_scale = EffectiveReplicaLearningRateScale(spec);
      break;
    default:
      break;
  }
  c.ssp = spec.sync.ssp;
  c.ds_sync = spec.sync.ds_sync;
  c.sync_switch = spec.sync.sync_switch;
  c.ps_plus = spec.sync.ps_plus;
  return c;
}

namespace {

// none: independent replicas, each updated by its own optimizer.
class NoSync final : public SyncStrategy {
 public:
  NoSync(const SyncConfig& config, prometheus::Registry* registry)
      : SyncStrategy(config, registry) {}
};

}  // namespace

absl::StatusOr<std::unique_ptr<SyncStrategy>> MakeSyncStrategy(const SyncConfig& config,
                                                               syncer::SyncerClient* client,
                                                               prometheus::Registry* registry) {
  if (config.algorithm == SyncAlgorithm::kNone) {
    return std::unique_ptr<SyncStrategy>(new NoSync(config, registry));
  }
  if (client == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("sync.algorithm ",
                                                   std::string(EnumName(config.algorithm)),
                                                   " needs a syncer (none configured)"));
  }
  if (!(config.duty_cycle > 0 && config.duty_cycle <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.dutyCycle: must be in (0, 1], got ", config.duty_cycle));
  }
  if (config.interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.interval: must be at least 1, got ", config.interval));
  }
  switch (config.algorithm) {
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kShadowMa:
    case SyncAlgorithm::kShadowBmuf:
      return NewShadowStrategy(config, client, registry);
    case SyncAlgorithm::kFgEasgd:
    case SyncAlgorithm::kFgMa:
    case SyncAlgorithm::kFgBmuf:
      return NewForegroundStrategy(config, client, registry);
    case SyncAlgorithm::kBsp:
      return NewBspStrategy(config, client, registry);
    case SyncAlgorithm::kAsp:
      return NewAspStrategy(config, client, registry);
    case SyncAlgorithm::kSyncSwitch:
      return SyncSwitchStrategy::Create(config, client, registry);
    case SyncAlgorithm::kSsp:
      return SspStrategy::Create(config, client, registry);
    case SyncAlgorithm::kPsPlus:
      return PsPlusStrategy::Create(config, client, registry);
    case SyncAlgorithm::kDsSync:
      return MakeDsSyncStrategy(config, client, registry);
    case SyncAlgorithm::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("sync.algorithm: unknown value ", static_cast<int>(config.algorithm)));
}

}  // namespace shadowsync::worker
