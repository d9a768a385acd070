// The job spec's core: derived defaults, ValidateJob's cross-field rules,
// JobSummary and DS-Sync's butterfly shape. The codec, the text parsers and
// the generated schema and reference are in the files job_spec_internal.h
// lists.
#include "jobspec/job_spec.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/example.h"
#include "jobspec/job_spec_fields.h"
#include "jobspec/job_spec_internal.h"
#include "jobspec/text_checks.h"

namespace shadowsync {
namespace job_spec_internal {
namespace {

// ---------------------------------------------------------------------------
// Validation beyond per-field ranges.

void ValidateMetadata(const JobMetadata& m, Problems& p) {
  if (m.name.empty()) {
    p.push_back({"metadata.name", "required field is missing"});
  }
  if (!m.name.empty() && !HasDns1035Shape(m.name)) {
    p.push_back({"metadata.name",
                 absl::StrCat("must be a DNS-1035 label: lowercase letters, digits and '-', "
                              "starting with a letter and ending with a letter or digit, got ",
                              Dump(json(m.name)))});
  }
  if (m.name.size() > static_cast<size_t>(kMaxJobNameLength)) {
    p.push_back({"metadata.name",
                 absl::StrCat("must be at most ", kMaxJobNameLength,
                              " characters so child names such as \"<name>-trainer-12\" stay "
                              "within Kubernetes limits, got ",
                              m.name.size())});
  }
  if (!m.namespace_name.empty() && !IsDns1123Label(m.namespace_name)) {
    p.push_back({"metadata.namespace",
                 absl::StrCat("must be a DNS-1123 label (lowercase letters, digits and '-'), got ",
                              Dump(json(m.namespace_name)))});
  }
  for (const auto& [key, value] : m.labels) {
    if (!IsQualifiedName(key)) {
      p.push_back({Join("metadata.labels", key),
                   "invalid label key: [prefix/]name, name at most 63 characters of "
                   "[A-Za-z0-9-_.] starting and ending alphanumeric"});
    } else if (!value.empty() && !IsQualifiedNamePart(value)) {
      p.push_back({Join("metadata.labels", key),
                   absl::StrCat("invalid label value: at most 63 characters of [A-Za-z0-9-_.] "
                                "starting and ending alphanumeric, got ",
                                Dump(json(value)))});
    }
  }
  for (const auto& [key, value] : m.annotations) {
    if (!IsQualifiedName(key)) {
      p.push_back({Join("metadata.annotations", key), "invalid annotation key"});
    }
  }
}

// A path the pods read from a Secret mounted at `mount` must lie under it.
void CheckMountedFile(const std::string& path, const std::string& field, std::string_view mount,
                      std::string_view secret_field, Problems& p) {
  if (path.empty()) {
    p.push_back({field, "must not be empty"});
  } else if (!secret_field.empty() && !absl::StartsWith(path, absl::StrCat(Av(mount), "/"))) {
    p.push_back(
        {field, absl::StrCat("with ", Av(secret_field), " set the Secret is mounted at ", Av(mount),
                             ", so the file must be under it, got ", Dump(json(path)))});
  }
}

void SecurityProblems(const SecuritySpec& sec, Problems& p) {
  if (sec.tls) {
    const TlsSpec& tls = *sec.tls;
    const std::string_view secret = tls.secret_name.empty() ? "" : "spec.security.tls.secretName";
    CheckMountedFile(tls.ca_file, "spec.security.tls.caFile", kTlsMountPath, secret, p);
    CheckMountedFile(tls.cert_file, "spec.security.tls.certFile", kTlsMountPath, secret, p);
    CheckMountedFile(tls.key_file, "spec.security.tls.keyFile", kTlsMountPath, secret, p);
    if (!tls.server_name.empty() && !IsDns1123Subdomain(tls.server_name)) {
      p.push_back({"spec.security.tls.serverName",
                   absl::StrCat("must be a DNS name (a DNS-1123 subdomain) or empty, got ",
                                Dump(json(tls.server_name)))});
    }
    if (!tls.secret_name.empty() && !IsDns1123Subdomain(tls.secret_name)) {
      p.push_back({"spec.security.tls.secretName",
                   absl::StrCat("must be a Secret name (a DNS-1123 subdomain), got ",
                                Dump(json(tls.secret_name)))});
    }
  }
  if (sec.auth_token) {
    const AuthTokenSpec& token = *sec.auth_token;
    CheckMountedFile(token.file, "spec.security.authToken.file", kAuthMountPath,
                     token.secret_name.empty() ? "" : "spec.security.authToken.secretName", p);
    if (!token.secret_name.empty() && !IsDns1123Subdomain(token.secret_name)) {
      p.push_back({"spec.security.authToken.secretName",
                   absl::StrCat("must be a Secret name (a DNS-1123 subdomain), got ",
                                Dump(json(token.secret_name)))});
    }
  }
}

void ValidateSpec(const JobSpec& s, Problems& p) {
  const ModelSpec& model = s.model;
  if (model.dense_features != kCriteoDense) {
    p.push_back({"spec.model.denseFeatures",
                 absl::StrCat("must be ", kCriteoDense,
                              ", the dense columns of the Criteo layout both data formats "
                              "produce, got ",
                              model.dense_features)});
  }
  if (model.tables.size() != static_cast<size_t>(kCriteoSparse)) {
    p.push_back({"spec.model.tables",
                 absl::StrCat("must list ", kCriteoSparse,
                              " tables, one per categorical column of the Criteo layout, got ",
                              model.tables.size())});
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < model.tables.size(); ++i) {
    const std::string path = Index("spec.model.tables", i) + ".name";
    const std::string& name = model.tables[i].name;
    if (name.empty()) {
      p.push_back({path, "must not be empty"});
    } else if (auto [it, inserted] = seen.emplace(name, i); !inserted) {
      p.push_back({path, absl::StrCat("duplicate table name ", Dump(json(name)), " (also ",
                                      Index("spec.model.tables", it->second), ")")});
    }
  }

  const DataSpec& data = s.data;
  if (data.format == DataFormat::kCriteoTsv && data.paths.empty()) {
    p.push_back(
        {"spec.data.paths", "must list at least one file when spec.data.format is criteo-tsv"});
  }
  for (size_t i = 0; i < data.paths.size(); ++i) {
    if (data.paths[i].empty()) {
      p.push_back({Index("spec.data.paths", i), "must not be empty"});
    }
  }
  for (size_t i = 0; i < data.eval_paths.size(); ++i) {
    if (data.eval_paths[i].empty()) {
      p.push_back({Index("spec.data.evalPaths", i), "must not be empty"});
    }
  }
  // Each trainer reads its own share: a trainer without an example would
  // never take a step (and hold every synchronous strategy back).
  if (data.format == DataFormat::kSynthetic && data.synthetic.examples >= 1 &&
      data.synthetic.examples < s.trainer.replicas) {
    p.push_back({"spec.trainer.replicas",
                 absl::StrCat(s.trainer.replicas, " trainers for ", data.synthetic.examples,
                              " examples (spec.data.synthetic.examples): every trainer needs at "
                              "least one")});
  }

  const TrainerSpec& trainer = s.trainer;
  if (trainer.straggler && trainer.straggler->count > trainer.replicas) {
    p.push_back({"spec.trainer.straggler.count",
                 absl::StrCat("must be <= spec.trainer.replicas (", trainer.replicas, "), got ",
                              trainer.straggler->count)});
  }

  const ParameterServerSpec& ps = s.parameter_server;
  if (const auto& policy = s.run_policy.scheduling_policy; policy && policy->min_available) {
    const int pods = trainer.replicas + ps.replicas + s.syncer.replicas;
    if (*policy->min_available > pods) {
      p.push_back({"spec.runPolicy.schedulingPolicy.minAvailable",
                   absl::StrCat("must be <= the job's ", pods,
                                " pods (trainers + parameter servers + syncers), got ",
                                *policy->min_available)});
    }
  }
  if (ps.replicas >= 1 && ps.slots >= 1 && ps.slots < ps.replicas) {
    p.push_back({"spec.parameterServer.slots",
                 absl::StrCat("must be >= spec.parameterServer.replicas (", ps.replicas,
                              ") so every server owns a slot, got ", ps.slots)});
  }
  auto dns_name = [&p](std::string_view path, const std::string& value) {
    if (!value.empty() && !IsDns1123Subdomain(value)) {
      p.push_back({std::string(path),
                   absl::StrCat("must be a DNS-1123 subdomain, got ", Dump(json(value)))});
    }
  };
  dns_name("spec.parameterServer.storage.storageClassName", ps.storage.storage_class_name);
  dns_name("spec.export.volumeClaimName", s.export_.volume_claim_name);
  dns_name("spec.export.storage.storageClassName", s.export_.storage.storage_class_name);
  dns_name("spec.init.volumeClaimName", s.init.volume_claim_name);
  if (const auto& policy = s.run_policy.scheduling_policy; policy) {
    dns_name("spec.runPolicy.schedulingPolicy.priorityClass", policy->priority_class);
    dns_name("spec.runPolicy.schedulingPolicy.queue", policy->queue);
  }

  SecurityProblems(s.security, p);

  const SyncSpec& sync = s.sync;
  if (sync.algorithm != SyncAlgorithm::kNone && s.syncer.replicas == 0) {
    p.push_back({"spec.syncer.replicas",
                 absl::StrCat("must be >= 1 for algorithm ", Av(EnumName(sync.algorithm)),
                              " (only none runs without a syncer), got 0")});
  }
  if (sync.algorithm == SyncAlgorithm::kDsSync && trainer.replicas >= 1) {
    const int g = sync.ds_sync.group_size;
    const int n = trainer.replicas;
    if (g > n) {
      p.push_back({"spec.sync.dsSync.groupSize",
                   absl::StrCat("must be <= spec.trainer.replicas (", n, "), got ", g)});
    } else if (g >= 2 && n % g != 0) {
      p.push_back({"spec.sync.dsSync.groupSize", absl::StrCat("must divide spec.trainer.replicas (",
                                                              n, ") into equal groups, got ", g)});
    }
    if (sync.ds_sync.schedule == DsSyncSchedule::kButterfly && g >= 2 && g <= n && n % g == 0) {
      if (absl::Status s = DsSyncButterflyRadices(n, g).status(); !s.ok()) {
        // The message starts with the field path; keep only the reason.
        std::string reason(s.message());
        const std::string prefix = "sync.dsSync.schedule: ";
        if (reason.starts_with(prefix)) reason = reason.substr(prefix.size());
        p.push_back({"spec.sync.dsSync.schedule", reason});
      }
    }
  }
}

// Problems in field-table order, whatever check found them.
void SortByFieldOrder(Problems& problems) {
  std::map<std::string, size_t> order;
  std::vector<std::string> paths = JobFieldPaths();
  for (size_t i = 0; i < paths.size(); ++i) {
    order.emplace(paths[i], i);
  }
  auto rank = [&](const std::string& path) {
    // "spec.model.tables[3].name" -> "spec.model.tables[].name"; map keys
    // ("metadata.labels.app") rank with their map.
    std::string generic;
    for (size_t i = 0; i < path.size(); ++i) {
      generic.push_back(path[i]);
      if (path[i] == '[') {
        while (i + 1 < path.size() && path[i + 1] != ']') {
          ++i;
        }
      }
    }
    while (!generic.empty()) {
      if (auto it = order.find(generic); it != order.end()) {
        return it->second;
      }
      size_t dot = generic.rfind('.');
      generic = dot == std::string::npos ? "" : generic.substr(0, dot);
    }
    return paths.size();
  };
  std::stable_sort(problems.begin(), problems.end(),
                   [&](const Problem& a, const Problem& b) { return rank(a.path) < rank(b.path); });
}

}  // namespace

Problems JobProblems(const ShadowSyncJob& job) {
  Problems problems;
  RangeChecker checker("", problems);
  Fields(checker, job);
  ValidateMetadata(job.metadata, problems);
  ValidateSpec(job.spec, problems);
  CheckPodTemplate(job.spec.trainer.pod_template, "spec.trainer.template", problems);
  CheckPodTemplate(job.spec.parameter_server.pod_template, "spec.parameterServer.template",
                   problems);
  CheckPodTemplate(job.spec.syncer.pod_template, "spec.syncer.template", problems);
  SortByFieldOrder(problems);
  return problems;
}

}  // namespace job_spec_internal

using job_spec_internal::Av;
using job_spec_internal::FormatProblems;
using job_spec_internal::JobProblems;
using job_spec_internal::Problems;

// ---------------------------------------------------------------------------
// Public API.

std::vector<TableSpec> CriteoTables(int64_t hash_buckets) {
  std::vector<TableSpec> tables;
  for (int i = 1; i <= kCriteoSparse; ++i) {
    tables.push_back({absl::StrCat("C", i), hash_buckets});
  }
  return tables;
}

double EffectiveEasgdAlpha(const JobSpec& spec) {
  return spec.sync.easgd.alpha.value_or(0.9 / std::max(1, spec.trainer.replicas));
}

double EffectiveBlockMomentum(const JobSpec& spec) {
  // With the block learning rate at its default (a filter gain of 1), the
  // momentum only smooths the block updates, lagging bm / (1 - bm) rounds.
  // The paper's 1 - 1/N made the lag grow with the trainer count; on the
  // Criteo excerpt with 4 trainers it cost shadow-bmuf 0.5% NE (docs/sync.md).
  return spec.sync.bmuf.block_momentum.value_or(0.5);
}

double EffectiveBlockLearningRate(const JobSpec& spec) {
  return spec.sync.bmuf.block_learning_rate.value_or(1.0 - EffectiveBlockMomentum(spec));
}

double EffectivePsLearningRate(const JobSpec& spec) {
  return spec.parameter_server.learning_rate.value_or(spec.trainer.learning_rate);
}

double EffectiveAspLearningRateScale(const JobSpec& spec) {
  return spec.sync.sync_switch.asp_learning_rate_scale.value_or(1.0 /
                                                                std::max(1, spec.trainer.replicas));
}

double EffectiveSharedLearningRateScale(const JobSpec& spec) {
  return spec.sync.learning_rate_scale.value_or(1.0 / std::max(1, spec.trainer.replicas));
}

double EffectiveReplicaLearningRateScale(const JobSpec& spec) {
  if (spec.sync.replica_learning_rate_scale.has_value()) {
    return *spec.sync.replica_learning_rate_scale;
  }
  if (spec.trainer.optimizer != Optimizer::kAdagrad) return 1.0;
  return 1.0 / std::sqrt(static_cast<double>(std::max(1, spec.trainer.replicas)));
}

int EffectiveAspBatchSize(const JobSpec& spec) {
  return spec.sync.sync_switch.asp_batch_size.value_or(spec.trainer.batch_size);
}

absl::Status ValidateJob(const ShadowSyncJob& job) {
  Problems problems = JobProblems(job);
  if (problems.empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(FormatProblems(problems, "", nullptr));
}

std::string JobSummary(const ShadowSyncJob& job) {
  const JobSpec& s = job.spec;
  const SyncSpec& sync = s.sync;
  std::vector<std::string> parts = {absl::StrCat("job=", job.metadata.name),
                                    absl::StrCat("algorithm=", Av(EnumName(sync.algorithm)))};
  // Values are numbers, strings, or enum names (std::string_view).
  auto add = [&](const char* key, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string_view>) {
      parts.push_back(absl::StrCat(key, "=", Av(value)));
    } else {
      parts.push_back(absl::StrCat(key, "=", value));
    }
  };
  switch (sync.algorithm) {
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kFgEasgd:
      add("alpha", EffectiveEasgdAlpha(s));
      break;
    case SyncAlgorithm::kShadowBmuf:
    case SyncAlgorithm::kFgBmuf:
      add("block_momentum", EffectiveBlockMomentum(s));
      add("block_lr", EffectiveBlockLearningRate(s));
      add("nesterov", sync.bmuf.nesterov ? "true" : "false");
      break;
    case SyncAlgorithm::kAsp:
      add("lr_scale", EffectiveSharedLearningRateScale(s));
      break;
    case SyncAlgorithm::kSsp:
      add("staleness", sync.ssp.staleness);
      add("lr_scale", EffectiveSharedLearningRateScale(s));
      break;
    case SyncAlgorithm::kDsSync:
      add("group_size", sync.ds_sync.group_size);
      add("schedule", EnumName(sync.ds_sync.schedule));
      break;
    case SyncAlgorithm::kSyncSwitch:
      add("policy", EnumName(sync.sync_switch.policy));
      if (sync.sync_switch.switch_step.has_value()) {
        add("switch_step", *sync.sync_switch.switch_step);
      } else {
        add("switch_fraction", sync.sync_switch.switch_fraction);
      }
      add("asp_lr_scale", EffectiveAspLearningRateScale(s));
      if (sync.sync_switch.policy == SyncSwitchPolicy::kOnline) {
        add("straggler_factor", sync.sync_switch.straggler_factor);
        add("window_steps", sync.sync_switch.window_steps);
      }
      break;
    case SyncAlgorithm::kPsPlus:
      add("lr_scale", EffectiveSharedLearningRateScale(s));
      add("lr_modulation", EnumName(sync.ps_plus.lr_modulation));
      if (sync.ps_plus.lr_modulation == StalenessLrRule::kExponential) {
        add("gamma", sync.ps_plus.gamma);
      }
      break;
    default:
      break;
  }
  switch (sync.algorithm) {
    case SyncAlgorithm::kFgEasgd:
    case SyncAlgorithm::kFgMa:
    case SyncAlgorithm::kFgBmuf:
      add("interval", sync.interval);
      add("lr_scale", EffectiveReplicaLearningRateScale(s));
      break;
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kShadowMa:
    case SyncAlgorithm::kShadowBmuf:
      add("apply", EnumName(sync.apply_mode));
      if (sync.min_interval_ms > 0) {
        add("min_interval_ms", sync.min_interval_ms);
      }
      add("duty_cycle", sync.duty_cycle);
      if (sync.warmup_steps > 0) add("warmup_steps", sync.warmup_steps);
      if (sync.final_average) add("final_average", "true");
      add("lr_scale", EffectiveReplicaLearningRateScale(s));
      break;
    default:
      break;
  }
  add("trainers", s.trainer.replicas);
  add("threads", s.trainer.threads);
  add("batch", s.trainer.batch_size);
  add("lr", s.trainer.learning_rate);
  add("optimizer", EnumName(s.trainer.optimizer));
  if (s.trainer.dense_precision != GemmPrecision::kFp32)
    add("precision", EnumName(s.trainer.dense_precision));
  if (s.trainer.straggler) {
    add("stragglers", absl::StrCat(s.trainer.straggler->count, "x", s.trainer.straggler->delay_ms,
                                   "ms+", s.trainer.straggler->jitter_ms, "ms"));
  }
  add("ps", s.parameter_server.replicas);
  add("slots", s.parameter_server.slots);
  add("ps_optimizer", EnumName(s.parameter_server.optimizer));
  add("ps_lr", EffectivePsLearningRate(s));
  add("cache", s.parameter_server.cache_bytes.text);
  add("syncers", s.syncer.replicas);
  add("data", EnumName(s.data.format));
  if (s.data.format == DataFormat::kSynthetic) {
    add("examples", s.data.synthetic.examples);
    add("eval_examples", s.data.synthetic.eval_examples);
    add("seed", s.data.synthetic.seed);
  } else {
    add("files", s.data.paths.size());
    add("eval_files", s.data.eval_paths.size());
  }
  add("model", absl::StrCat(s.model.dense_features, "d-", s.model.tables.size(), "t-",
                            s.model.embedding_dim, "e"));
  add("bottom", s.model.bottom_mlp.empty() ? "-" : absl::StrJoin(s.model.bottom_mlp, "-"));
  add("top", s.model.top_mlp.empty() ? "-" : absl::StrJoin(s.model.top_mlp, "-"));
  if (s.model.interaction == ModelInteraction::kDcn) {
    add("interaction", absl::StrCat("dcn-", s.model.dcn.layers, "x", s.model.dcn.low_rank));
  }
  if (!s.checkpoint.path.empty()) {
    add("checkpoint", absl::StrCat(s.checkpoint.path, "@", s.checkpoint.interval_seconds, "s"));
  }
  if (!s.init.from_model.empty()) add("init", s.init.from_model);
  return absl::StrJoin(parts, " ");
}

namespace {

// q as `slots` factors, non-increasing, each <= cap (1s pad), if possible.
std::optional<std::vector<int>> FactorInto(int q, int slots, int cap) {
  if (q == 1) return std::vector<int>(slots, 1);
  if (slots == 0) return std::nullopt;
  for (int d = std::min(cap, q); d >= 2; --d) {
    if (q % d != 0) continue;
    std::optional<std::vector<int>> rest = FactorInto(q / d, slots - 1, d);
    if (!rest.has_value()) continue;
    rest->insert(rest->begin(), d);
    return rest;
  }
  return std::nullopt;
}

}  // namespace

int DsSyncButterflyRounds(int n, int g) {
  int m = 0;
  for (int64_t reach = 1; reach < n; reach *= g) ++m;
  return m;
}

absl::StatusOr<std::vector<int>> DsSyncButterflyRadices(int n, int g) {
  if (g < 2 || n < g || n % g != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.dsSync.groupSize: butterfly needs groups of >= 2 dividing the ", n,
                     " trainers, got ", g));
  }
  const int m = DsSyncButterflyRounds(n, g);
  std::optional<std::vector<int>> rest = FactorInto(n / g, m - 1, g);
  if (!rest.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync.dsSync.schedule: butterfly cannot give every one of ", n,
        " trainers the exact mean in groups of ", g, " within ceil(log_", g, " ", n, ") = ", m,
        " rounds: it needs ", n, " / ", g, " = ", n / g, " to be a product of ", m - 1,
        " factors of at most ", g, " (use the random schedule or another trainer count)"));
  }
  rest->insert(rest->begin(), g);
  return *std::move(rest);
}

}  // namespace shadowsync
