// Private to operator/: the parts of Reconcile() (operator/reconcile.h), one
// file per concern:
//   reconcile.cc           Reconcile: the decision for one job, the public
//                          helpers, and the JSON field readers below
//   reconcile_spec.cc      the job: its reference, its spec as decoded and
//                          validated, the spec in effect, immutable changes
//   reconcile_status.cc    what the pods say (replicaStatuses) and the
//                          status conditions with their events
//   reconcile_children.cc  the desired children: pod template, StatefulSets,
//                          Services, ConfigMap, export claim
// Pure functions of their arguments, like Reconcile; thread-safe.
#ifndef SHADOWSYNC_OPERATOR_RECONCILE_INTERNAL_H_
#define SHADOWSYNC_OPERATOR_RECONCILE_INTERNAL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "jobspec/job_spec.h"
#include "operator/reconcile.h"

namespace shadowsync::op::internal {

using json = nlohmann::json;

// Debian's absl has its own string_view type; this bridges std::string_view.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The ConfigMap's files.
inline constexpr std::string_view kJobConfigKey = "job.json";
inline constexpr std::string_view kShardMapKey = "shard-map.json";

// --- JSON fields (reconcile.cc) ------------------------------------------------

std::string Rfc3339(absl::Time t);
std::optional<absl::Time> ParseTime(const json& j);
const json& Field(const json& object, std::string_view key);
// The API server sends integers for integer fields; anything else (a float,
// an unsigned beyond int64) is not one, and converting it would be undefined.
int64_t IntField(const json& object, std::string_view key, int64_t fallback = 0);
std::string StringField(const json& object, std::string_view key);
void MinRequeue(std::optional<absl::Duration>& requeue, absl::Duration d);

// --- The job (reconcile_spec.cc) ----------------------------------------------

struct JobRef {
  std::string name;
  std::string ns;
  std::string uid;
  int64_t generation = 0;
  json labels = json::object();  // metadata.labels, copied onto every child.
  // Exports (docs/export.md): on when spec.export is given. The claim the
  // trainers mount, and where; "" = exports are off.
  std::string export_claim;
  std::string export_mount;
  bool export_claim_created = false;  // The operator creates it (no volumeClaimName).
  // A warm start (spec.init): the claim holding the export ("" = none) and
  // whether trainer 0 has loaded it (status.init.imported).
  std::string init_claim;
  bool init_imported = false;
};

JobRef RefOf(const json& job);

// The spec as decoded (possibly invalid) and whether it validated.
struct ParsedSpec {
  std::optional<ShadowSyncJob> job;  // Decoded; set even when validation failed.
  bool valid = false;
  std::string error;  // Decoding or validation problems.
};

ParsedSpec ParseSpec(const json& object);

// The spec in effect: the one rendered into the ConfigMap by an earlier pass.
std::optional<ShadowSyncJob> SpecInEffect(const Observed& o, const JobRef& ref);

// Changes a live job cannot take; the CRD's CEL rules reject them too,
// this is the check for API servers without them.
std::string ImmutableChanges(const ShadowSyncJob& before, const ShadowSyncJob& after);

// --- Pods and conditions (reconcile_status.cc) ---------------------------------

struct RoleCounts {
  int ready = 0;
  int active = 0;
  int succeeded = 0;
  int failed = 0;
  int restarts = 0;  // Failed runs of the main containers (see CountPods).
  // Trainers: the latest termination message that says the run is not
  // learning ("<pod>: not learning: ..."), and whether a trainer stopped
  // for it (spec.trainer.learningCheck.fail).
  std::string learning_problem;
  bool stopped_not_learning = false;
  std::set<int> ready_indices;
  std::set<int> succeeded_indices;
};

RoleCounts CountPods(const Observed& o, const JobRef& ref, Role role);
// `desired`: the pods the spec asks for.
json ReplicaStatus(const RoleCounts& c, int desired);

struct Condition {
  std::string_view type;
  bool status = false;
  std::string reason;
  std::string message;
};

bool ConditionTrue(const json& status, std::string_view type);
// The condition's message; empty when it is absent.
std::string ConditionMessage(const json& status, std::string_view type);

// metav1.Conditions in kConditionTypes order; lastTransitionTime is kept
// from `previous` unless the status flipped.
json BuildConditions(const json& previous, const std::vector<Condition>& conditions,
                     int64_t generation, absl::Time now);

// Events for conditions that flipped between `before` and `after`.
void ConditionEvents(const json& before, const json& after, std::vector<EventSpec>& events);

// --- Children (reconcile_children.cc) ------------------------------------------

struct DesiredReplicas {
  int trainer = 0;
  int ps = 0;
  int syncer = 0;
  int Of(Role role) const {
    return role == Role::kTrainer ? trainer : role == Role::kPs ? ps : syncer;
  }
};

// The credentials Secret's metadata: named, labelled and owned as a child.
json CredentialsSecretMeta(const JobRef& ref, const ReconcileOptions& opt);

// Not owned by the job: the exports outlive it (kubectl delete pvc -l
// shadowsync.io/job-name=<job> removes them).
json RenderExportClaim(const JobSpec& spec, const JobRef& ref, const ReconcileOptions& opt);

// Fills a.apply with the children that are missing (if create_missing) or
// differ, and a.delete_paths with owned children no longer wanted.
void PlanChildren(Actions& a, const Observed& o, const ShadowSyncJob& job, const JobRef& ref,
                  const DesiredReplicas& replicas, int servers, uint64_t epoch,
                  const ReconcileOptions& opt, bool create_missing);

}  // namespace shadowsync::op::internal

#endif  // SHADOWSYNC_OPERATOR_RECONCILE_INTERNAL_H_
