// Reconcile (operator/reconcile.h): the decision for one job, from its spec
// and status and what the controller observed; the public naming helpers;
// the JSON field readers the other reconcile_*.cc share.
#include "operator/reconcile.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "jobspec/job_spec.h"
#include "operator/reconcile_internal.h"

namespace shadowsync::op {
namespace internal {

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::optional<absl::Time> ParseTime(const json& j) {
  if (!j.is_string()) return std::nullopt;
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, j.get<std::string>(), &t, &error)) return std::nullopt;
  return t;
}

const json& Field(const json& object, std::string_view key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(std::string(key));
  return it == object.end() ? kNull : *it;
}

int64_t IntField(const json& object, std::string_view key, int64_t fallback) {
  const json& v = Field(object, key);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? static_cast<int64_t>(u)
                                                                           : fallback;
  }
  return v.is_number_integer() ? v.get<int64_t>() : fallback;
}

std::string StringField(const json& object, std::string_view key) {
  const json& v = Field(object, key);
  return v.is_string() ? v.get<std::string>() : "";
}

void MinRequeue(std::optional<absl::Duration>& requeue, absl::Duration d) {
  d = std::max(d, absl::Seconds(1));
  requeue = requeue ? std::min(*requeue, d) : d;
}

}  // namespace internal

using internal::Av;
using internal::Field;
using internal::json;
using internal::StringField;

// --- Public helpers ---------------------------------------------------------------

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kTrainer:
      return "trainer";
    case Role::kPs:
      return "ps";
    case Role::kSyncer:
      return "syncer";
  }
  return "trainer";
}

int PsClusterState::OwningServers() const {
  for (int i = static_cast<int>(slots_per_server.size()) - 1; i >= 0; --i) {
    if (slots_per_server[i] > 0) return i + 1;
  }
  return 0;
}

std::string ChildName(std::string_view job, Role role) {
  return absl::StrCat(Av(job), "-", Av(RoleName(role)));
}

std::string ConfigMapName(std::string_view job) { return absl::StrCat(Av(job), "-config"); }
std::string CredentialsSecretName(std::string_view job) {
  return absl::StrCat(Av(job), "-credentials");
}

std::string NetworkPolicyName(std::string_view job) { return absl::StrCat(Av(job), "-servers"); }

std::string ExportClaimName(std::string_view job) { return absl::StrCat(Av(job), "-exports"); }

std::string PodAddress(std::string_view job, Role role, int index, std::string_view ns, int port) {
  return FormatAddress(kDefaultAddressTemplate, job, role, index, ns, port);
}

std::string FormatAddress(std::string_view address_template, std::string_view job, Role role,
                          int index, std::string_view ns, int port) {
  const int role_index = role == Role::kTrainer ? 0 : role == Role::kPs ? 1 : 2;
  return absl::StrReplaceAll(Av(address_template), {{"{job}", Av(job)},
                                                    {"{role}", Av(RoleName(role))},
                                                    {"{role_index}", absl::StrCat(role_index)},
                                                    {"{index}", absl::StrCat(index)},
                                                    {"{namespace}", Av(ns)},
                                                    {"{port}", absl::StrCat(port)}});
}

std::string TrainerSelector(std::string_view job) {
  return absl::StrCat(Av(kJobNameLabel), "=", Av(job), ",", Av(kRoleLabel), "=",
                      Av(RoleName(Role::kTrainer)));
}

std::string ObjectPath(const nlohmann::json& object) {
  const std::string api_version = StringField(object, "apiVersion");
  std::string kind = StringField(object, "kind");
  std::transform(kind.begin(), kind.end(), kind.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const json& meta = Field(object, "metadata");
  std::string ns = StringField(meta, "namespace");
  if (ns.empty()) ns = "default";
  // The plural of every kind a job owns: NetworkPolicy -> networkpolicies.
  const std::string plural =
      kind.ends_with('y') ? kind.substr(0, kind.size() - 1) + "ies" : kind + "s";
  return absl::StrCat(api_version.find('/') == std::string::npos ? "/api/" : "/apis/", api_version,
                      "/namespaces/", ns, "/", plural, "/", StringField(meta, "name"));
}

bool IsSubset(const nlohmann::json& desired, const nlohmann::json& observed) {
  if (desired.is_object()) {
    if (!observed.is_object()) return false;
    for (const auto& [k, v] : desired.items()) {
      auto it = observed.find(k);
      if (it == observed.end() || !IsSubset(v, *it)) return false;
    }
    return true;
  }
  if (desired.is_array()) {
    if (!observed.is_array() || observed.size() != desired.size()) return false;
    for (size_t i = 0; i < desired.size(); ++i) {
      if (!IsSubset(desired[i], observed[i])) return false;
    }
    return true;
  }
  return desired == observed;
}

namespace internal {
namespace {

int ObservedReplicas(const Observed& o, const JobRef& ref, Role role) {
  auto it = o.stateful_sets.find(ChildName(ref.name, role));
  if (it == o.stateful_sets.end()) return -1;
  return static_cast<int>(IntField(Field(it->second, "spec"), "replicas", 1));
}

// Replicas of a finished job's role under cleanPodPolicy: None leaves the
// pods; Running stops what still runs (after success: the servers; the
// finished trainers stay for their logs); All stops everything. The PS
// volumes are kept either way.
int CleanupReplicas(Role role, bool succeeded, CleanPodPolicy policy, int current) {
  switch (policy) {
    case CleanPodPolicy::kNone:
      return current;
    case CleanPodPolicy::kAll:
      return 0;
    case CleanPodPolicy::kRunning:
      return succeeded && role == Role::kTrainer ? current : 0;
  }
  return current;
}

std::string ReadyMessage(const RoleCounts& trainer, const RoleCounts& ps, const RoleCounts& syncer,
                         const DesiredReplicas& want) {
  return absl::StrCat("ready: trainer ", trainer.ready, "/", want.trainer, ", ps ", ps.ready, "/",
                      want.ps, ", syncer ", syncer.ready, "/", want.syncer);
}

std::optional<int64_t> TtlSeconds(const json& job, const std::optional<ShadowSyncJob>& decoded) {
  if (decoded) return decoded->spec.run_policy.ttl_seconds_after_finished;
  const json& v = Field(Field(Field(job, "spec"), "runPolicy"), "ttlSecondsAfterFinished");
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  return std::nullopt;
}

void ApplyTtl(Actions& a, const json& status, std::optional<int64_t> ttl, absl::Time now) {
  if (!ttl) return;
  std::optional<absl::Time> done = ParseTime(Field(status, "completionTime"));
  if (!done) return;
  const absl::Time expiry = *done + absl::Seconds(*ttl);
  if (now >= expiry) {
    a.delete_job = true;
  } else {
    MinRequeue(a.requeue_after, expiry - now);
  }
}

Actions ReconcileJob(const Observed& o, const ReconcileOptions& opt) {
  Actions a;
  const json& job = o.job;
  const json previous = Field(job, "status").is_object() ? job["status"] : json::object();
  a.status = previous;
  if (!Field(Field(job, "metadata"), "deletionTimestamp").is_null()) return a;

  const JobRef ref = RefOf(job);
  const std::string previous_phase = StringField(previous, "phase");
  const bool was_terminal = previous_phase == "Succeeded" || previous_phase == "Failed";
  const bool has_children =
      !o.stateful_sets.empty() || !o.services.empty() || !o.config_maps.empty();

  // The spec in effect: the new one if valid and compatible with the one
  // the children run, else the one they run (from the ConfigMap).
  const ParsedSpec parsed = ParseSpec(job);
  const std::optional<ShadowSyncJob> in_effect = SpecInEffect(o, ref);
  std::optional<ShadowSyncJob> effective;
  std::string rejection, rejection_reason = "InvalidSpec";
  if (parsed.valid) {
    rejection = in_effect ? ImmutableChanges(*in_effect, *parsed.job) : "";
    if (rejection.empty()) {
      effective = parsed.job;
    } else {
      rejection_reason = "ImmutableFieldChanged";
      effective = in_effect;
    }
  } else {
    rejection = parsed.error;
    effective = in_effect;
  }

  json status = previous;
  const RoleCounts trainers = CountPods(o, ref, Role::kTrainer);
  const RoleCounts servers_pods = CountPods(o, ref, Role::kPs);
  const RoleCounts syncers = CountPods(o, ref, Role::kSyncer);
  // Desired as the spec in effect says (none while it is invalid).
  const JobSpec* desired = effective ? &effective->spec : nullptr;
  status["replicaStatuses"] = {
      {"trainer", ReplicaStatus(trainers, desired ? desired->trainer.replicas : 0)},
      {"ps", ReplicaStatus(servers_pods, desired ? desired->parameter_server.replicas : 0)},
      {"syncer", ReplicaStatus(syncers, desired ? desired->syncer.replicas : 0)}};
  status["selector"] = TrainerSelector(ref.name);
  if (o.examples_processed) status["examplesProcessed"] = *o.examples_processed;
  if (o.examples_per_second) status["examplesPerSecond"] = *o.examples_per_second;
  if (o.train_ne) status["trainNE"] = *o.train_ne;
  if (!ref.init_claim.empty()) {
    json& init = status["init"];
    if (!init.is_object()) init = json::object();
    init["claim"] = ref.init_claim;
    init["model"] = StringField(Field(Field(job, "spec"), "init"), "fromModel");
    // Sticky: a restarted trainer 0 that skipped the load reports 0 rows.
    if (o.init_imported_rows && init.value("imported", false) != true) {
      init["imported"] = true;
      init["rows"] = *o.init_imported_rows;
    }
    if (!init.contains("imported")) init["imported"] = false;
  }
  if (!ref.export_claim.empty()) {
    json& e = status["export"];
    if (!e.is_object()) e = json::object();
    e["claim"] = ref.export_claim;
    e["path"] = ref.export_mount;
    if (o.latest_export) {
      e["latest"] = *o.latest_export;
      e["request"] = o.latest_export->value("request", "");
    }
  }
  if (o.ps) {
    json assignment = json::array();
    for (int n : o.ps->slots_per_server) assignment.push_back(n);
    status["shardMap"] = {{"epoch", o.ps->epoch},
                          {"slots", o.ps->num_slots},
                          {"numServers", o.ps->OwningServers()},
                          {"assignment", std::move(assignment)}};
  }

  // --- Finished: sticky. Only the cleanup policy and the TTL still act.
  if (was_terminal) {
    const std::optional<ShadowSyncJob>& policy_spec = parsed.valid ? parsed.job : effective;
    const std::optional<ShadowSyncJob>& render_spec = in_effect ? in_effect : effective;
    if (render_spec && has_children) {
      const CleanPodPolicy policy =
          (policy_spec ? *policy_spec : *render_spec).spec.run_policy.clean_pod_policy;
      DesiredReplicas want;
      const bool succeeded = previous_phase == "Succeeded";
      want.trainer = CleanupReplicas(Role::kTrainer, succeeded, policy,
                                     std::max(0, ObservedReplicas(o, ref, Role::kTrainer)));
      want.ps = CleanupReplicas(Role::kPs, succeeded, policy,
                                std::max(0, ObservedReplicas(o, ref, Role::kPs)));
      want.syncer = CleanupReplicas(Role::kSyncer, succeeded, policy,
                                    std::max(0, ObservedReplicas(o, ref, Role::kSyncer)));
      const json& shard_map = Field(status, "shardMap");
      PlanChildren(a, o, *render_spec, ref, want,
                   static_cast<int>(IntField(shard_map, "numServers",
                                             render_spec->spec.parameter_server.replicas)),
                   static_cast<uint64_t>(IntField(shard_map, "epoch")), opt,
                   /*create_missing=*/false);
    }
    ApplyTtl(a, status, TtlSeconds(job, parsed.job), o.now);
    a.status = std::move(status);
    return a;
  }

  // --- Invalid from the start: no children, ever. Failed is final.
  if (!effective) {
    if (has_children) {
      // Children without a readable ConfigMap and an invalid spec: leave
      // them alone and say why nothing happens.
      if (IntField(Field(previous, "rejectedSpec"), "generation", -1) != ref.generation) {
        a.events.push_back({"Warning", rejection_reason, rejection});
      }
      status["rejectedSpec"] = {{"generation", ref.generation}, {"message", rejection}};
      a.status = std::move(status);
      return a;
    }
    const std::vector<Condition> conditions = {
        {"Created", false, "InvalidSpec", "no children were created: the spec is invalid"},
        {"Running", false, "InvalidSpec", "the spec is invalid"},
        {"Resharding", false, "InvalidSpec", "the spec is invalid"},
        {"Suspended", false, "InvalidSpec", "the spec is invalid"},
        {"Succeeded", false, "InvalidSpec", "the spec is invalid"},
        {"Failed", true, "InvalidSpec", rejection}};
    status["phase"] = "Failed";
    status["conditions"] = BuildConditions(previous, conditions, ref.generation, o.now);
    status["observedGeneration"] = ref.generation;
    status["completionTime"] = Rfc3339(o.now);
    ConditionEvents(previous, status, a.events);
    ApplyTtl(a, status, TtlSeconds(job, parsed.job), o.now);
    a.status = std::move(status);
    return a;
  }

  if (!rejection.empty()) {
    if (IntField(Field(previous, "rejectedSpec"), "generation", -1) != ref.generation) {
      a.events.push_back(
          {"Warning", rejection_reason,
           absl::StrCat("spec change not applied; the job keeps running with generation ",
                        IntField(previous, "observedGeneration"), "'s spec: ", rejection)});
    }
    status["rejectedSpec"] = {{"generation", ref.generation}, {"message", rejection}};
  } else {
    status["observedGeneration"] = ref.generation;
    status.erase("rejectedSpec");
  }
  const int64_t generation = IntField(status, "observedGeneration", ref.generation);

  const JobSpec& spec = effective->spec;
  const RunPolicySpec& policy = spec.run_policy;
  const bool suspended = policy.suspend;

  // startTime: when the job became active; cleared while suspended, so
  // activeDeadlineSeconds counts from the resume (as Kubernetes Jobs do).
  if (suspended) {
    status.erase("startTime");
  } else if (!ParseTime(Field(status, "startTime"))) {
    status["startTime"] = Rfc3339(o.now);
  }
  const std::optional<absl::Time> start = ParseTime(Field(status, "startTime"));

  // Parameter servers: those owning slots (O) vs those asked for (P).
  const int asked = spec.parameter_server.replicas;
  int owning = o.ps ? o.ps->OwningServers() : 0;
  if (owning == 0) owning = static_cast<int>(IntField(Field(previous, "shardMap"), "numServers"));
  if (owning == 0) owning = ObservedReplicas(o, ref, Role::kPs);
  if (owning <= 0) owning = asked;
  const ReshardProgress* running_reshard = o.ps && o.ps->reshard ? &*o.ps->reshard : nullptr;
  const uint64_t epoch =
      o.ps ? o.ps->epoch : static_cast<uint64_t>(IntField(Field(previous, "shardMap"), "epoch"));
  if (!o.ps && !Field(status, "shardMap").is_object()) {
    status["shardMap"] = {
        {"epoch", epoch}, {"slots", spec.parameter_server.slots}, {"numServers", owning}};
  }

  DesiredReplicas want;
  want.trainer = suspended ? 0 : spec.trainer.replicas;
  // A warm start: trainer 0 alone until it has loaded the export onto the
  // servers, so that no other trainer trains on rows about to be replaced.
  if (!ref.init_claim.empty() && Field(Field(status, "init"), "imported") != json(true)) {
    want.trainer = std::min(want.trainer, 1);
  }
  want.syncer = suspended ? 0 : spec.syncer.replicas;
  // Never below a server that owns slots, nor below either end of a
  // running reshard: scale-in removes servers only once they are drained.
  want.ps = std::max(asked, owning);
  if (running_reshard) {
    want.ps = std::max({want.ps, running_reshard->from_servers, running_reshard->to_servers});
  } else if (suspended) {
    // A suspended job runs no pod (what Kueue and quota systems expect). The
    // servers' volumes stay (whenScaled: Retain), so each comes back with its
    // rows and its shard map; a running reshard finishes first.
    want.ps = 0;
  }

  // --- Finished now?
  const int64_t restarts = std::max<int64_t>(IntField(previous, "restarts"), trainers.restarts);
  status["restarts"] = restarts;
  // A trainer's report that its run is not learning; kept once seen (a
  // restarted container's message goes with its state).
  std::string learning_problem = trainers.learning_problem;
  if (learning_problem.empty()) learning_problem = ConditionMessage(previous, "NotLearning");
  std::optional<Condition> finished;  // The Succeeded or Failed condition.
  bool all_trainers_done = spec.trainer.replicas > 0;
  for (int i = 0; i < spec.trainer.replicas; ++i) {
    all_trainers_done &= trainers.succeeded_indices.contains(i);
  }
  // With exports, trainer 0 exits only after the final export; the job
  // succeeds once that export is reported too (status.export.latest).
  const bool final_export_pending =
      !ref.export_claim.empty() &&
      Field(Field(Field(status, "export"), "latest"), "final") != json(true);
  if (!suspended && all_trainers_done && !final_export_pending) {
    finished =
        Condition{"Succeeded", true, "AllTrainersSucceeded",
                  absl::StrCat("all ", spec.trainer.replicas, " trainers finished their data")};
  } else if (!suspended && start && policy.active_deadline_seconds &&
             o.now >= *start + absl::Seconds(*policy.active_deadline_seconds)) {
    finished =
        Condition{"Failed", true, "DeadlineExceeded",
                  absl::StrCat("the job was active longer than runPolicy.activeDeadlineSeconds (",
                               *policy.active_deadline_seconds, " s)")};
  } else if (trainers.stopped_not_learning) {
    finished = Condition{"Failed", true, "NotLearning",
                         absl::StrCat(learning_problem.empty() ? "a trainer" : learning_problem,
                                      " (spec.trainer.learningCheck.fail)")};
  } else if (restarts > policy.backoff_limit) {
    finished = Condition{
        "Failed", true, "BackoffLimitExceeded",
        absl::StrCat("trainer pods restarted or failed ", restarts,
                     " times, more than runPolicy.backoffLimit (", policy.backoff_limit, ")")};
  }

  if (finished) {
    const bool succeeded = finished->type == "Succeeded";
    const std::string running_reason = succeeded ? "JobSucceeded" : "JobFailed";
    std::vector<Condition> conditions = {
        {"Created", true, "JobCreated", "children created"},
        {"Running", false, running_reason, finished->message},
        {"Resharding", false, running_reason, "the job has finished"},
        {"Suspended", false, "NotSuspended", ""},
        {"Succeeded", succeeded, succeeded ? finished->reason : "JobFailed",
         succeeded ? finished->message : ""},
        {"Failed", !succeeded, succeeded ? "JobSucceeded" : finished->reason,
         succeeded ? "" : finished->message}};
    if (!learning_problem.empty()) {
      conditions.push_back({"NotLearning", true, "NotLearning", learning_problem});
    }
    status["phase"] = succeeded ? "Succeeded" : "Failed";
    status["conditions"] = BuildConditions(previous, conditions, generation, o.now);
    status["completionTime"] = Rfc3339(o.now);
    status.erase("resharding");
    ConditionEvents(previous, status, a.events);
    DesiredReplicas cleaned;
    cleaned.trainer =
        CleanupReplicas(Role::kTrainer, succeeded, policy.clean_pod_policy, want.trainer);
    cleaned.ps = CleanupReplicas(Role::kPs, succeeded, policy.clean_pod_policy, want.ps);
    cleaned.syncer =
        CleanupReplicas(Role::kSyncer, succeeded, policy.clean_pod_policy, want.syncer);
    PlanChildren(a, o, *effective, ref, cleaned, owning, epoch, opt, /*create_missing=*/false);
    ApplyTtl(a, status, policy.ttl_seconds_after_finished, o.now);
    a.status = std::move(status);
    return a;
  }

  // --- Active (or suspended): resharding.
  const bool resharding =
      owning != asked || running_reshard != nullptr || (o.ps && o.ps->unbalanced);
  std::string reshard_reason, reshard_message;
  if (resharding) {
    const int from = running_reshard ? running_reshard->from_servers : owning;
    const int to = running_reshard ? running_reshard->to_servers : asked;
    const json& before = Field(previous, "resharding");
    const bool same = IntField(before, "from", -1) == from && IntField(before, "to", -1) == to;
    json progress = {
        {"from", from},
        {"to", to},
        {"slotsMoved", running_reshard ? running_reshard->slots_moved
                                       : (same ? IntField(before, "slotsMoved") : 0)},
        {"slotsTotal", running_reshard ? running_reshard->slots_total
                                       : (same ? IntField(before, "slotsTotal") : 0)},
        {"startedAt", same && Field(before, "startedAt").is_string() ? before["startedAt"]
                                                                     : json(Rfc3339(o.now))}};
    std::vector<int> not_ready;
    for (int i = owning; i < asked; ++i) {
      if (!servers_pods.ready_indices.contains(i)) not_ready.push_back(i);
    }
    if (running_reshard) {
      reshard_reason = "MovingSlots";
      reshard_message = absl::StrCat("moving slots from ", from, " to ", to,
                                     " parameter servers: ", progress["slotsMoved"].dump(), "/",
                                     progress["slotsTotal"].dump(), " slots moved");
    } else if (suspended) {
      reshard_reason = "Suspended";
      reshard_message = absl::StrCat("scaling parameter servers from ", from, " to ", to,
                                     ": waits for the job to resume");
    } else if (!o.ps) {
      reshard_reason = "WaitingForShardMap";
      reshard_message = absl::StrCat("scaling parameter servers from ", from, " to ", to,
                                     ": waiting to read the shard map from the servers");
    } else if (!not_ready.empty()) {
      reshard_reason = "WaitingForServers";
      reshard_message =
          absl::StrCat("scaling parameter servers from ", from, " to ", to, ": waiting for ",
                       absl::StrJoin(not_ready, ", ",
                                     [&](std::string* out, int i) {
                                       absl::StrAppend(out, ChildName(ref.name, Role::kPs), "-", i);
                                     }),
                       " to be ready");
    } else {
      reshard_reason = "MovingSlots";
      reshard_message = absl::StrCat("moving slots from ", from, " to ", to, " parameter servers");
      a.reshard = ReshardRequest{from, to};
      a.events.push_back({"Normal", "ReshardStarted", reshard_message});
    }
    status["resharding"] = std::move(progress);
    if (!suspended || running_reshard) MinRequeue(a.requeue_after, opt.reshard_poll);
  } else {
    status.erase("resharding");
    reshard_reason = "ServersMatchSpec";
    reshard_message =
        absl::StrCat(asked, " parameter servers own the ", spec.parameter_server.slots, " slots");
  }

  // --- Phase and conditions.
  const bool all_ready = trainers.ready >= want.trainer && servers_pods.ready >= want.ps &&
                         syncers.ready >= want.syncer;
  const bool running = !suspended && (ConditionTrue(previous, "Running") || all_ready);
  const std::string ready = ReadyMessage(trainers, servers_pods, syncers, want);
  Condition running_condition{"Running", false, "WaitingForReplicas", ready};
  if (suspended) {
    running_condition = {"Running", false, "Suspended", "the job is suspended"};
  } else if (running) {
    running_condition = {"Running", true, all_ready ? "AllReplicasReady" : "ReplicasNotReady",
                         ready};
  }
  std::vector<Condition> conditions = {
      {"Created", true, "JobCreated",
       absl::StrCat("StatefulSets, Services and ConfigMap of ", ref.name, " created")},
      running_condition,
      {"Resharding", resharding, reshard_reason, reshard_message},
      suspended ? Condition{"Suspended", true, "Suspended",
                            running_reshard
                                ? "runPolicy.suspend: trainers and syncers stopped; the parameter "
                                  "servers stop once the running reshard ends"
                                : "runPolicy.suspend: every pod stopped; the parameter servers' "
                                  "volumes keep the embedding rows"}
                : Condition{"Suspended", false,
                            ConditionTrue(previous, "Suspended") ? "Resumed" : "NotSuspended", ""},
      all_trainers_done && final_export_pending
          ? Condition{"Succeeded", false, "WaitingForFinalExport",
                      "every trainer finished; waiting for trainer 0 to report the final export"}
          : Condition{"Succeeded", false, "NotFinished",
                      absl::StrCat("trainers finished: ", trainers.succeeded_indices.size(), "/",
                                   spec.trainer.replicas)},
      {"Failed", false, "NotFailed",
       absl::StrCat("trainer restarts: ", restarts, " of backoffLimit ", policy.backoff_limit)}};
  if (!learning_problem.empty()) {
    conditions.push_back({"NotLearning", true, "NotLearning", learning_problem});
  }
  status["phase"] = suspended    ? "Suspended"
                    : resharding ? "Resharding"
                    : running    ? "Running"
                                 : "Pending";
  status["conditions"] = BuildConditions(previous, conditions, generation, o.now);
  ConditionEvents(previous, status, a.events);

  if (const int had = ObservedReplicas(o, ref, Role::kTrainer);
      !suspended && had > 0 && had != want.trainer) {
    a.events.push_back(
        {"Normal", "TrainersScaled", absl::StrCat("trainer replicas ", had, " -> ", want.trainer)});
  }

  PlanChildren(a, o, *effective, ref, want, owning, epoch, opt, /*create_missing=*/true);
  // The export claim, once: before the StatefulSets whose pods mount it,
  // recorded in status.export.claimCreated when the create went through.
  if (ref.export_claim_created && Field(Field(previous, "export"), "claimCreated") != json(true)) {
    a.apply.insert(a.apply.begin(), RenderExportClaim(spec, ref, opt));
    status["export"]["claimCreated"] = true;
  }

  if (start && policy.active_deadline_seconds && !suspended) {
    MinRequeue(a.requeue_after, *start + absl::Seconds(*policy.active_deadline_seconds) - o.now);
  }
  if (running && !suspended) MinRequeue(a.requeue_after, opt.progress_poll);
  a.status = std::move(status);
  return a;
}

}  // namespace
}  // namespace internal

bool UsesCredentials(const nlohmann::json* ps_stateful_set, const ReconcileOptions& options) {
  if (!options.credentials) return false;
  if (ps_stateful_set == nullptr) return true;  // A new job.
  const nlohmann::json& containers = ps_stateful_set->value(
      "/spec/template/spec/containers"_json_pointer, nlohmann::json::array());
  if (!containers.is_array() || containers.empty() || !containers[0].is_object()) return false;
  for (const nlohmann::json& arg : containers[0].value("args", nlohmann::json::array())) {
    if (arg.is_string() && arg.get<std::string>().starts_with(kAdminTokenFileArg)) return true;
  }
  return false;
}

Actions Reconcile(const Observed& observed, const ReconcileOptions& options) {
  // A job whose servers run without credentials (started before the
  // operator had a key) keeps running without: a restarted pod of it with
  // TLS and tokens could not talk to its peers.
  auto ps = observed.stateful_sets.find(ChildName(internal::RefOf(observed.job).name, Role::kPs));
  ReconcileOptions effective = options;
  effective.credentials =
      UsesCredentials(ps == observed.stateful_sets.end() ? nullptr : &ps->second, options);
  if (!effective.credentials) effective.credentials_tls = false;
  Actions actions = internal::ReconcileJob(observed, effective);
  // Event messages are capped (the API accepts at most 1 KiB in a note).
  constexpr size_t kMaxEventMessage = 1024;
  for (EventSpec& e : actions.events) {
    if (e.message.size() > kMaxEventMessage) {
      e.message.resize(kMaxEventMessage - 3);
      e.message += "...";
    }
  }
  return actions;
}

}  // namespace shadowsync::op
