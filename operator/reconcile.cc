#include "operator/reconcile.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "jobspec/job_spec.h"
#include "operator/crd.h"

namespace shadowsync::op {
namespace {

using json = nlohmann::json;

// Debian's absl has its own string_view type; this bridges std::string_view.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::string_view kConfigVolume = "config";
constexpr std::string_view kDataVolume = "data";  // PS: the PVC; others: an emptyDir.
constexpr std::string_view kTmpVolume = "tmp";
constexpr std::string_view kExportVolume = "exports";  // Trainers: the export claim.
constexpr std::string_view kDefaultExportMount = "/var/lib/shadowsync-exports";
constexpr std::string_view kInitVolume = "init";  // Trainers: the warm start's claim.
constexpr std::string_view kInitMount = "/var/lib/shadowsync-init";
// spec.security's Secrets, mounted read-only at kTlsMountPath / kAuthMountPath.
constexpr std::string_view kTlsVolume = "shadowsync-tls";
constexpr std::string_view kAuthVolume = "shadowsync-auth-token";
// Secret files readable by the pod's fsGroup only (0440).
constexpr int kSecretMode = 0440;
constexpr std::string_view kJobConfigKey = "job.json";
constexpr std::string_view kShardMapKey = "shard-map.json";

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

// The API server sends integers for integer fields; anything else (a float,
// an unsigned beyond int64) is not one, and converting it would be undefined.
int64_t IntField(const json& object, std::string_view key, int64_t fallback = 0) {
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

// --- The job ------------------------------------------------------------------

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

JobRef RefOf(const json& job) {
  const json& meta = Field(job, "metadata");
  JobRef ref{.name = StringField(meta, "name"),
             .ns = StringField(meta, "namespace"),
             .uid = StringField(meta, "uid"),
             .generation = IntField(meta, "generation")};
  if (ref.ns.empty()) ref.ns = "default";
  if (Field(meta, "labels").is_object()) ref.labels = meta["labels"];
  // Presence, not values: `export: {}` asks for exports with the defaults.
  if (const json& e = Field(Field(job, "spec"), "export"); e.is_object()) {
    ref.export_claim = StringField(e, "volumeClaimName");
    ref.export_claim_created = ref.export_claim.empty();
    if (ref.export_claim_created) ref.export_claim = ExportClaimName(ref.name);
    ref.export_mount = StringField(e, "path");
    if (ref.export_mount.empty()) ref.export_mount = kDefaultExportMount;
  }
  const json& init = Field(Field(job, "spec"), "init");
  if (!StringField(init, "fromModel").empty()) {
    ref.init_claim = StringField(init, "volumeClaimName");
    ref.init_imported = Field(Field(Field(job, "status"), "init"), "imported") == json(true);
  }
  return ref;
}

json OwnerReference(const JobRef& ref) {
  return {{"apiVersion", kJobApiVersion},
          {"kind", kJobKind},
          {"name", ref.name},
          {"uid", ref.uid},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

json Labels(const JobRef& ref, std::optional<Role> role, const ReconcileOptions& options) {
  json labels = ref.labels;
  labels[std::string(kJobNameLabel)] = ref.name;
  labels["app.kubernetes.io/name"] = "shadowsync";
  labels["app.kubernetes.io/instance"] = ref.name;
  labels["app.kubernetes.io/managed-by"] = options.manager;
  if (role) {
    labels[std::string(kRoleLabel)] = RoleName(*role);
    labels["app.kubernetes.io/component"] = RoleName(*role);
  } else {
    labels["app.kubernetes.io/component"] = "config";
  }
  return labels;
}

json SelectorLabels(const JobRef& ref, Role role) {
  return {{std::string(kJobNameLabel), ref.name}, {std::string(kRoleLabel), RoleName(role)}};
}

json ObjectMeta(const JobRef& ref, const std::string& name, json labels) {
  return {{"name", name},
          {"namespace", ref.ns},
          {"labels", std::move(labels)},
          {"ownerReferences", {OwnerReference(ref)}}};
}

// The spec as decoded (possibly invalid) and whether it validated.
struct ParsedSpec {
  std::optional<ShadowSyncJob> job;  // Decoded; set even when validation failed.
  bool valid = false;
  std::string error;  // Decoding or validation problems.
};

ParsedSpec ParseSpec(const json& object) {
  ParsedSpec p;
  absl::StatusOr<ShadowSyncJob> job = JobFromJson(object);
  if (!job.ok()) {
    p.error = std::string(job.status().message());
    return p;
  }
  p.job = *std::move(job);
  if (absl::Status s = ValidateJob(*p.job); !s.ok()) {
    p.error = std::string(s.message());
    return p;
  }
  if (const InitSpec& init = p.job->spec.init; !init.from_model.empty()) {
    if (init.volume_claim_name.empty()) {
      p.error =
          "spec.init.volumeClaimName: required with spec.init.fromModel on Kubernetes (the claim "
          "holding the export, e.g. an earlier job's <job>-exports)";
      return p;
    }
    if (init.from_model.starts_with("/") || init.from_model == ".." ||
        init.from_model.starts_with("../") || init.from_model.find("/../") != std::string::npos) {
      p.error = absl::StrCat(
          "spec.init.fromModel: on Kubernetes, a path inside spec.init.volumeClaimName "
          "(e.g. model-000003), got \"",
          init.from_model, "\"");
      return p;
    }
  }
  if (!p.job->spec.export_.path.empty() && !p.job->spec.export_.path.starts_with("/")) {
    p.error = absl::StrCat(
        "spec.export.path: on Kubernetes, the absolute path where the trainer "
        "pods mount the export claim, got \"",
        p.job->spec.export_.path, "\"");
    return p;
  }
  p.valid = true;
  return p;
}

// The spec in effect: the one rendered into the ConfigMap by an earlier pass.
std::optional<ShadowSyncJob> SpecInEffect(const Observed& o, const JobRef& ref) {
  auto it = o.config_maps.find(ConfigMapName(ref.name));
  if (it == o.config_maps.end()) return std::nullopt;
  const json& text = Field(Field(it->second, "data"), kJobConfigKey);
  if (!text.is_string()) return std::nullopt;
  absl::StatusOr<ShadowSyncJob> job = ParseJobJson(text.get<std::string>(), "ConfigMap");
  if (!job.ok() || !ValidateJob(*job).ok()) return std::nullopt;
  return *std::move(job);
}

// Changes a live job cannot take; the CRD's CEL rules reject them too,
// this is the check for API servers without them.
std::string ImmutableChanges(const ShadowSyncJob& before, const ShadowSyncJob& after) {
  std::vector<std::string> problems;
  if (before.spec.parameter_server.slots != after.spec.parameter_server.slots) {
    problems.push_back(absl::StrCat(
        "spec.parameterServer.slots: cannot change while the job exists (",
        before.spec.parameter_server.slots, " -> ", after.spec.parameter_server.slots, ")"));
  }
  if (before.spec.model != after.spec.model) {
    problems.push_back(
        "spec.model: cannot change while the job exists (tables, embedding dimension and layers "
        "are fixed)");
  }
  if (!(before.spec.init == after.spec.init)) {
    problems.push_back("spec.init: cannot change while the job exists (the model it started from)");
  }
  if (!(before.spec.export_ == after.spec.export_)) {
    problems.push_back(
        "spec.export: cannot change while the job exists (the trainer pods mount its claim)");
  }
  if (before.spec.parameter_server.storage != after.spec.parameter_server.storage) {
    problems.push_back(
        "spec.parameterServer.storage: cannot change while the job exists (a StatefulSet's "
        "volumeClaimTemplates are immutable)");
  }
  return absl::StrJoin(problems, "\n");
}

// --- Pods ---------------------------------------------------------------------

struct RoleCounts {
  int ready = 0;
  int active = 0;
  int succeeded = 0;
  int failed = 0;
  int restarts = 0;  // Failed runs of the main containers (see CountPods).
  std::set<int> ready_indices;
  std::set<int> succeeded_indices;
};

std::optional<int> PodIndex(const std::string& pod_name, const std::string& prefix) {
  if (!pod_name.starts_with(prefix)) return std::nullopt;
  int index = 0;
  if (!absl::SimpleAtoi(Av(std::string_view(pod_name).substr(prefix.size())), &index) ||
      index < 0) {
    return std::nullopt;
  }
  return index;
}

const json& MainContainerStatus(const json& pod, Role role) {
  const json& statuses = Field(Field(pod, "status"), "containerStatuses");
  static const json kNone = json::object();
  if (!statuses.is_array() || statuses.empty()) return kNone;
  for (const json& c : statuses) {
    if (StringField(c, "name") == RoleName(role)) return c;
  }
  return statuses[0];
}

constexpr int64_t kNotTerminated = std::numeric_limits<int64_t>::min();

// The exit code of a terminated container state, else kNotTerminated.
int64_t ExitCode(const json& container_state) {
  const json& terminated = Field(container_state, "terminated");
  if (!terminated.is_object()) return kNotTerminated;
  return IntField(terminated, "exitCode", -1);
}

bool PodReady(const json& pod) {
  const json& conditions = Field(Field(pod, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const json& c : conditions) {
    if (StringField(c, "type") == "Ready") return StringField(c, "status") == "True";
  }
  return false;
}

RoleCounts CountPods(const Observed& o, const JobRef& ref, Role role) {
  RoleCounts counts;
  const std::string prefix = ChildName(ref.name, role) + "-";
  for (const json& pod : o.pods) {
    const json& meta = Field(pod, "metadata");
    const json& labels = Field(meta, "labels");
    if (StringField(labels, kJobNameLabel) != ref.name ||
        StringField(labels, kRoleLabel) != RoleName(role)) {
      continue;
    }
    std::optional<int> index = PodIndex(StringField(meta, "name"), prefix);
    if (!index) continue;
    const bool deleting = !Field(meta, "deletionTimestamp").is_null();
    const std::string phase = StringField(Field(pod, "status"), "phase");
    const json& main = MainContainerStatus(pod, role);
    const json& state = Field(main, "state");
    const int64_t exit_now = ExitCode(state);
    const int64_t exit_last = ExitCode(Field(main, "lastState"));
    // The kubelet counts an instance in restartCount once the next one
    // starts; until then the dead one shows as state.terminated, or as
    // state.waiting (back-off) with lastState.terminated.
    const int64_t exit_latest_dead = exit_now != kNotTerminated            ? exit_now
                                     : Field(state, "waiting").is_object() ? exit_last
                                                                           : kNotTerminated;
    const bool latest_dead = exit_latest_dead != kNotTerminated;
    const int dead = static_cast<int>(IntField(main, "restartCount")) + (latest_dead ? 1 : 0);
    // A trainer exits 0 once its share is done; the StatefulSet restarts it
    // (restartPolicy Always) and the pod command then idles (docs/operator.md).
    const bool latest_exit_zero = latest_dead ? exit_latest_dead == 0 : exit_last == 0;
    const bool succeeded = !deleting && (phase == "Succeeded" || latest_exit_zero);
    const bool failing = phase == "Failed" || (latest_dead && exit_latest_dead != 0);
    const int failures =
        std::max(0, dead - (latest_exit_zero ? 1 : 0)) + (phase == "Failed" && dead == 0 ? 1 : 0);

    if (!deleting && PodReady(pod)) {
      ++counts.ready;
      counts.ready_indices.insert(*index);
    }
    if (!deleting && (phase.empty() || phase == "Pending" || phase == "Running")) ++counts.active;
    if (succeeded) {
      ++counts.succeeded;
      counts.succeeded_indices.insert(*index);
    }
    if (failing) ++counts.failed;
    counts.restarts += failures;
  }
  return counts;
}

json ReplicaStatus(const RoleCounts& c) {
  return {{"ready", c.ready},
          {"active", c.active},
          {"succeeded", c.succeeded},
          {"failed", c.failed},
          {"restarts", c.restarts}};
}

// --- Conditions ---------------------------------------------------------------

struct Condition {
  std::string_view type;
  bool status = false;
  std::string reason;
  std::string message;
};

const json* FindCondition(const json& status, std::string_view type) {
  const json& conditions = Field(status, "conditions");
  if (!conditions.is_array()) return nullptr;
  for (const json& c : conditions) {
    if (StringField(c, "type") == type) return &c;
  }
  return nullptr;
}

bool ConditionTrue(const json& status, std::string_view type) {
  const json* c = FindCondition(status, type);
  return c != nullptr && StringField(*c, "status") == "True";
}

// metav1.Conditions in kConditionTypes order; lastTransitionTime is kept
// from `previous` unless the status flipped.
json BuildConditions(const json& previous, const std::vector<Condition>& conditions,
                     int64_t generation, absl::Time now) {
  json out = json::array();
  for (std::string_view type : kConditionTypes) {
    auto it = std::find_if(conditions.begin(), conditions.end(),
                           [&](const Condition& c) { return c.type == type; });
    if (it == conditions.end()) continue;
    const std::string status = it->status ? "True" : "False";
    std::string transition = Rfc3339(now);
    if (const json* old = FindCondition(previous, type);
        old != nullptr && StringField(*old, "status") == status &&
        Field(*old, "lastTransitionTime").is_string()) {
      transition = StringField(*old, "lastTransitionTime");
    }
    out.push_back({{"type", type},
                   {"status", status},
                   {"reason", it->reason},
                   {"message", it->message},
                   {"lastTransitionTime", transition},
                   {"observedGeneration", generation}});
  }
  return out;
}

// Events for conditions that flipped between `before` and `after`.
void ConditionEvents(const json& before, const json& after, std::vector<EventSpec>& events) {
  for (std::string_view type : kConditionTypes) {
    const json* now = FindCondition(after, type);
    if (now == nullptr) continue;
    const bool was = ConditionTrue(before, type);
    const bool is = StringField(*now, "status") == "True";
    if (was == is) continue;
    const std::string reason = StringField(*now, "reason");
    const std::string message = StringField(*now, "message");
    if (is) {
      if (type == "Failed") {
        events.push_back({"Warning", reason, message});
      } else if (type == "Created" || type == "Running" || type == "Suspended" ||
                 type == "Succeeded" || type == "Resharding") {
        events.push_back({"Normal", std::string(type), message});
      }
    } else if (type == "Suspended") {
      events.push_back({"Normal", "Resumed", message});
    } else if (type == "Resharding" && FindCondition(before, type) != nullptr) {
      events.push_back({"Normal", "ReshardComplete", message});
    }
  }
}

// --- Children -----------------------------------------------------------------

// Lists of named items (env, volumes, ports, volumeMounts, containers):
// `extra` items replace same-named `base` items when extra_wins, else are
// dropped; new names are appended.
json MergeByName(json base, const json& extra, bool extra_wins) {
  if (!extra.is_array()) return base;
  if (!base.is_array()) base = json::array();
  for (const json& item : extra) {
    const std::string name = StringField(item, "name");
    auto it = std::find_if(base.begin(), base.end(), [&](const json& b) {
      return !name.empty() && StringField(b, "name") == name;
    });
    if (it == base.end()) {
      base.push_back(item);
    } else if (extra_wins) {
      *it = item;
    }
  }
  return base;
}

// Object keys of `extra` override `base` (one level).
json MergeObject(json base, const json& extra) {
  if (!extra.is_object()) return base;
  if (!base.is_object()) base = json::object();
  for (const auto& [k, v] : extra.items()) base[k] = v;
  return base;
}

// The user's main container is merged into ours: their image, resources,
// probes, command, envFrom, ... win; env entries are added (theirs win on
// a name); volumeMounts and ports are added (ours win on a name); their
// args are appended to ours; securityContext keys are overlaid.
json MergeContainer(json ours, const json& user) {
  for (const auto& [k, v] : user.items()) {
    if (k == "name" || k == "env" || k == "volumeMounts" || k == "ports" || k == "args" ||
        k == "securityContext") {
      continue;
    }
    ours[k] = v;
  }
  ours["env"] = MergeByName(ours["env"], Field(user, "env"), true);
  ours["volumeMounts"] = MergeByName(ours["volumeMounts"], Field(user, "volumeMounts"), false);
  ours["ports"] = MergeByName(ours["ports"], Field(user, "ports"), false);
  if (Field(user, "args").is_array()) {
    for (const json& a : user["args"]) ours["args"].push_back(a);
  }
  ours["securityContext"] = MergeObject(ours["securityContext"], Field(user, "securityContext"));
  return ours;
}

// spec.<role>.template (a PodTemplateSpec) merged into the operator's pod
// template. restartPolicy stays Always (required by StatefulSets).
json MergePodTemplate(json ours, const json& user, Role role) {
  if (!user.is_object()) return ours;
  const json& user_meta = Field(user, "metadata");
  json& meta = ours["metadata"];
  json labels = MergeObject(Field(user_meta, "labels"), meta["labels"]);  // Ours win.
  meta["labels"] = std::move(labels);
  meta["annotations"] = MergeObject(meta["annotations"], Field(user_meta, "annotations"));

  const json& user_spec = Field(user, "spec");
  if (!user_spec.is_object()) return ours;
  json& spec = ours["spec"];
  for (const auto& [k, v] : user_spec.items()) {
    if (k == "containers" || k == "restartPolicy") continue;
    if (k == "volumes") {
      spec["volumes"] = MergeByName(spec["volumes"], v, false);
    } else if (k == "securityContext") {
      spec["securityContext"] = MergeObject(spec["securityContext"], v);
    } else {
      spec[k] = v;
    }
  }
  const json& containers = Field(user_spec, "containers");
  if (!containers.is_array()) return ours;
  // The main container: named like the role (or "shadowsync"), or the only one.
  int main = -1;
  for (size_t i = 0; i < containers.size(); ++i) {
    const std::string name = StringField(containers[i], "name");
    if (name == RoleName(role) || name == "shadowsync") main = static_cast<int>(i);
  }
  if (main < 0 && containers.size() == 1) main = 0;
  for (size_t i = 0; i < containers.size(); ++i) {
    if (static_cast<int>(i) == main) {
      spec["containers"][0] = MergeContainer(spec["containers"][0], containers[i]);
    } else {
      spec["containers"].push_back(containers[i]);
    }
  }
  return ours;
}

const json& UserTemplate(const JobSpec& spec, Role role) {
  switch (role) {
    case Role::kTrainer:
      return spec.trainer.pod_template;
    case Role::kPs:
      return spec.parameter_server.pod_template;
    case Role::kSyncer:
      return spec.syncer.pod_template;
  }
  return spec.trainer.pod_template;
}

std::optional<int> GrpcPort(Role role, const ReconcileOptions& options) {
  switch (role) {
    case Role::kPs:
      return options.ps_port;
    case Role::kSyncer:
      return options.syncer_port;
    case Role::kTrainer:
      return std::nullopt;
  }
  return std::nullopt;
}

json PodTemplate(const JobSpec& spec, const JobRef& ref, Role role, const ReconcileOptions& opt) {
  const std::string role_name(RoleName(role));
  json args = {"pod", absl::StrCat("--role=", role_name),
               absl::StrCat("--config=", opt.config_dir, "/", Av(kJobConfigKey)),
               absl::StrCat("--shard-map=", opt.config_dir, "/", Av(kShardMapKey)),
               absl::StrCat("--data-dir=", opt.data_dir)};
  json ports = json::array();
  if (std::optional<int> port = GrpcPort(role, opt)) {
    args.push_back(absl::StrCat("--listen=0.0.0.0:", *port));
    ports.push_back({{"name", "grpc"}, {"containerPort", *port}, {"protocol", "TCP"}});
  }
  args.push_back(absl::StrCat("--metrics-listen=0.0.0.0:", opt.metrics_port));
  const bool exports = role == Role::kTrainer && !ref.export_claim.empty();
  if (exports) {
    args.push_back(absl::StrCat("--export-dir=", ref.export_mount));
    args.push_back(absl::StrCat("--job-uid=", ref.uid));
  }
  const bool warm_start = role == Role::kTrainer && !ref.init_claim.empty();
  if (warm_start) args.push_back(absl::StrCat("--init-dir=", Av(kInitMount)));
  ports.push_back({{"name", "metrics"}, {"containerPort", opt.metrics_port}, {"protocol", "TCP"}});
  // Security: file paths only (the token never appears in the pod spec).
  const SecuritySpec& security = spec.security;
  if (security.tls) {
    args.push_back(absl::StrCat("--tls-ca-file=", security.tls->ca_file));
    args.push_back(absl::StrCat("--tls-cert-file=", security.tls->cert_file));
    args.push_back(absl::StrCat("--tls-key-file=", security.tls->key_file));
    args.push_back(absl::StrCat("--tls-server-name=", security.tls->server_name));
  }
  if (security.auth_token) {
    args.push_back(absl::StrCat("--auth-token-file=", security.auth_token->file));
  }

  auto field_env = [](std::string_view name, std::string_view path) {
    return json{{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", path}}}}}};
  };
  json container = {{"name", role_name},
                    {"image", opt.image},
                    {"imagePullPolicy", opt.image_pull_policy},
                    {"args", std::move(args)},
                    {"ports", std::move(ports)},
                    {"env",
                     {field_env("POD_NAME", "metadata.name"),
                      field_env("POD_NAMESPACE", "metadata.namespace"),
                      {{"name", "SHADOWSYNC_JOB_NAME"}, {"value", ref.name}},
                      {{"name", "SHADOWSYNC_ROLE"}, {"value", role_name}}}},
                    {"readinessProbe",
                     {{"httpGet", {{"path", "/healthz"}, {"port", "metrics"}}},
                      {"periodSeconds", 5},
                      {"failureThreshold", 3}}},
                    {"volumeMounts",
                     {{{"name", kConfigVolume}, {"mountPath", opt.config_dir}, {"readOnly", true}},
                      {{"name", kDataVolume}, {"mountPath", opt.data_dir}},
                      {{"name", kTmpVolume}, {"mountPath", "/tmp"}}}},
                    {"securityContext",
                     {{"allowPrivilegeEscalation", false},
                      {"readOnlyRootFilesystem", true},
                      {"capabilities", {{"drop", {"ALL"}}}}}}};

  json volumes = {{{"name", kConfigVolume}, {"configMap", {{"name", ConfigMapName(ref.name)}}}},
                  {{"name", kTmpVolume}, {"emptyDir", json::object()}}};
  if (role != Role::kPs) volumes.push_back({{"name", kDataVolume}, {"emptyDir", json::object()}});
  if (exports) {
    volumes.push_back(
        {{"name", kExportVolume}, {"persistentVolumeClaim", {{"claimName", ref.export_claim}}}});
    container["volumeMounts"].push_back({{"name", kExportVolume}, {"mountPath", ref.export_mount}});
  }
  if (warm_start) {
    volumes.push_back(
        {{"name", kInitVolume},
         {"persistentVolumeClaim", {{"claimName", ref.init_claim}, {"readOnly", true}}}});
    container["volumeMounts"].push_back(
        {{"name", kInitVolume}, {"mountPath", kInitMount}, {"readOnly", true}});
  }
  // spec.security's Secrets. Under the ConfigMap's mount (the default
  // /etc/shadowsync) they are projected into the same volume: a separate
  // mount nested in a read-only one cannot get its mount point.
  struct SecretFiles {
    std::string_view volume;
    std::string secret;
    std::string_view mount;
    std::vector<std::string> files;
  };
  std::vector<SecretFiles> secrets;
  if (security.tls && !security.tls->secret_name.empty()) {
    secrets.push_back({kTlsVolume,
                       security.tls->secret_name,
                       kTlsMountPath,
                       {security.tls->ca_file, security.tls->cert_file, security.tls->key_file}});
  }
  if (security.auth_token && !security.auth_token->secret_name.empty()) {
    secrets.push_back({kAuthVolume,
                       security.auth_token->secret_name,
                       kAuthMountPath,
                       {security.auth_token->file}});
  }
  const std::string config_prefix = opt.config_dir + "/";
  json projected = json::array();
  for (const SecretFiles& sf : secrets) {
    const std::string mount(sf.mount);
    if (!absl::StartsWith(mount, config_prefix)) {
      volumes.push_back({{"name", sf.volume},
                         {"secret", {{"secretName", sf.secret}, {"defaultMode", kSecretMode}}}});
      container["volumeMounts"].push_back(
          {{"name", sf.volume}, {"mountPath", mount}, {"readOnly", true}});
      continue;
    }
    // Each file is the Secret's key of its base name (ca.crt, tls.crt,
    // tls.key, token), at its path relative to the ConfigMap's mount.
    json items = json::array();
    for (const std::string& file : sf.files) {
      if (!absl::StartsWith(file, mount + "/")) continue;  // Validation rejects it.
      items.push_back(
          {{"key", file.substr(file.rfind('/') + 1)}, {"path", file.substr(config_prefix.size())}});
    }
    projected.push_back({{"secret", {{"name", sf.secret}, {"items", std::move(items)}}}});
  }
  if (!projected.empty()) {
    projected.insert(projected.begin(), json{{"configMap", {{"name", ConfigMapName(ref.name)}}}});
    volumes[0] = {{"name", kConfigVolume},
                  {"projected", {{"sources", std::move(projected)}, {"defaultMode", kSecretMode}}}};
  }

  json pod_spec = {{"containers", {std::move(container)}},
                   {"volumes", std::move(volumes)},
                   {"restartPolicy", "Always"},
                   {"enableServiceLinks", false},
                   {"terminationGracePeriodSeconds", role == Role::kPs ? 60 : 30},
                   {"securityContext",
                    {{"runAsNonRoot", true},
                     {"runAsUser", opt.run_as_user},
                     {"runAsGroup", opt.run_as_user},
                     {"fsGroup", opt.run_as_user},
                     {"seccompProfile", {{"type", "RuntimeDefault"}}}}}};
  json template_ = {{"metadata",
                     {{"labels", Labels(ref, role, opt)},
                      {"annotations",
                       {{"prometheus.io/scrape", "true"},
                        {"prometheus.io/port", std::to_string(opt.metrics_port)},
                        {"prometheus.io/path", "/metrics"}}}}},
                    {"spec", std::move(pod_spec)}};
  return MergePodTemplate(std::move(template_), UserTemplate(spec, role), role);
}

json RenderStatefulSet(const JobSpec& spec, const JobRef& ref, Role role, int replicas,
                       const ReconcileOptions& opt) {
  json sts_spec = {{"replicas", replicas},
                   {"serviceName", ChildName(ref.name, role)},
                   // Parallel: the initial servers start together (they form
                   // the first shard map together), trainers scale at once.
                   {"podManagementPolicy", "Parallel"},
                   // OnDelete: a template change (operator upgrade, edited
                   // pod template) must not restart a running job's pods.
                   {"updateStrategy", {{"type", "OnDelete"}}},
                   {"selector", {{"matchLabels", SelectorLabels(ref, role)}}},
                   {"template", PodTemplate(spec, ref, role, opt)}};
  if (role == Role::kPs) {
    const StorageSpec& storage = spec.parameter_server.storage;
    json claim_spec = {{"accessModes", {"ReadWriteOnce"}},
                       {"resources", {{"requests", {{"storage", storage.size.text}}}}}};
    if (!storage.storage_class_name.empty()) {
      claim_spec["storageClassName"] = storage.storage_class_name;
    }
    sts_spec["volumeClaimTemplates"] = {
        {{"metadata", {{"name", kDataVolume}, {"labels", SelectorLabels(ref, role)}}},
         {"spec", std::move(claim_spec)}}};
    // Scale-in only removes drained servers, and scale to 0 (suspend is not
    // one; cleanPodPolicy is) keeps the trained embeddings: retain on scale.
    sts_spec["persistentVolumeClaimRetentionPolicy"] = {{"whenDeleted", "Delete"},
                                                        {"whenScaled", "Retain"}};
  }
  return {{"apiVersion", "apps/v1"},
          {"kind", "StatefulSet"},
          {"metadata", ObjectMeta(ref, ChildName(ref.name, role), Labels(ref, role, opt))},
          {"spec", std::move(sts_spec)}};
}

// Not owned by the job: the exports outlive it (kubectl delete pvc -l
// shadowsync.io/job-name=<job> removes them).
json RenderExportClaim(const JobSpec& spec, const JobRef& ref, const ReconcileOptions& opt) {
  const StorageSpec& storage = spec.export_.storage;
  // ReadWriteMany: every trainer pod mounts it, on whichever node.
  json claim_spec = {{"accessModes", {"ReadWriteMany"}},
                     {"resources", {{"requests", {{"storage", storage.size.text}}}}}};
  if (!storage.storage_class_name.empty()) {
    claim_spec["storageClassName"] = storage.storage_class_name;
  }
  json labels = Labels(ref, std::nullopt, opt);
  labels["app.kubernetes.io/component"] = "exports";
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata",
           {{"name", ref.export_claim}, {"namespace", ref.ns}, {"labels", std::move(labels)}}},
          {"spec", std::move(claim_spec)}};
}

json RenderService(const JobRef& ref, Role role, const ReconcileOptions& opt) {
  json ports = json::array();
  if (std::optional<int> port = GrpcPort(role, opt)) {
    ports.push_back(
        {{"name", "grpc"}, {"port", *port}, {"targetPort", "grpc"}, {"protocol", "TCP"}});
  }
  ports.push_back({{"name", "metrics"},
                   {"port", opt.metrics_port},
                   {"targetPort", "metrics"},
                   {"protocol", "TCP"}});
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", ObjectMeta(ref, ChildName(ref.name, role), Labels(ref, role, opt))},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", SelectorLabels(ref, role)},
            {"ports", std::move(ports)}}}};
}

json RenderConfigMap(const ShadowSyncJob& job, const JobRef& ref, int servers, uint64_t epoch,
                     const ReconcileOptions& opt) {
  ShadowSyncJob rendered = job;
  rendered.metadata.annotations.clear();  // kubectl's last-applied copy is no config.
  rendered.metadata.name = ref.name;
  rendered.metadata.namespace_name = ref.ns;
  json ps_addresses = json::array();
  for (int i = 0; i < servers; ++i) {
    ps_addresses.push_back(
        FormatAddress(opt.address_template, ref.name, Role::kPs, i, ref.ns, opt.ps_port));
  }
  json syncer_addresses = json::array();
  for (int i = 0; i < job.spec.syncer.replicas; ++i) {
    syncer_addresses.push_back(
        FormatAddress(opt.address_template, ref.name, Role::kSyncer, i, ref.ns, opt.syncer_port));
  }
  json data = {{std::string(kJobConfigKey), JobToJson(rendered).dump(2) + "\n"}};
  if (!ref.export_claim.empty()) {
    auto it = job.metadata.annotations.find(std::string(kExportRequestAnnotation));
    data[std::string(kExportRequestKey)] = it == job.metadata.annotations.end() ? "" : it->second;
  }
  if (!ref.init_claim.empty()) {
    data[std::string(kInitImportedKey)] = ref.init_imported ? "true" : "false";
  }
  const json shard_map = {{"epoch", epoch},
                          {"slots", job.spec.parameter_server.slots},
                          {"numServers", servers},
                          {"psAddresses", std::move(ps_addresses)},
                          {"syncerAddresses", std::move(syncer_addresses)}};
  data[std::string(kShardMapKey)] = shard_map.dump(2) + "\n";
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", ObjectMeta(ref, ConfigMapName(ref.name), Labels(ref, std::nullopt, opt))},
          {"data", std::move(data)}};
}

struct DesiredReplicas {
  int trainer = 0;
  int ps = 0;
  int syncer = 0;
  int Of(Role role) const {
    return role == Role::kTrainer ? trainer : role == Role::kPs ? ps : syncer;
  }
};

int ObservedReplicas(const Observed& o, const JobRef& ref, Role role) {
  auto it = o.stateful_sets.find(ChildName(ref.name, role));
  if (it == o.stateful_sets.end()) return -1;
  return static_cast<int>(IntField(Field(it->second, "spec"), "replicas", 1));
}

// Fills a.apply with the children that are missing (if create_missing) or
// differ, and a.delete_paths with owned children no longer wanted.
void PlanChildren(Actions& a, const Observed& o, const ShadowSyncJob& job, const JobRef& ref,
                  const DesiredReplicas& replicas, int servers, uint64_t epoch,
                  const ReconcileOptions& opt, bool create_missing) {
  auto want = [&](const std::map<std::string, json>& observed, json desired) {
    auto it = observed.find(StringField(desired["metadata"], "name"));
    if (it == observed.end() ? create_missing : !IsSubset(desired, it->second)) {
      a.apply.push_back(std::move(desired));
    }
  };
  want(o.config_maps, RenderConfigMap(job, ref, servers, epoch, opt));
  for (Role role : kRoles) want(o.services, RenderService(ref, role, opt));
  for (Role role : {Role::kPs, Role::kSyncer, Role::kTrainer}) {
    want(o.stateful_sets, RenderStatefulSet(job.spec, ref, role, replicas.Of(role), opt));
  }
  std::set<std::string> wanted = {ConfigMapName(ref.name)};
  for (Role role : kRoles) wanted.insert(ChildName(ref.name, role));
  auto unwanted = [&](const std::map<std::string, json>& observed) {
    for (const auto& [name, object] : observed) {
      if (!wanted.contains(name)) a.delete_paths.push_back(ObjectPath(object));
    }
  };
  unwanted(o.config_maps);
  unwanted(o.services);
  unwanted(o.stateful_sets);
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

}  // namespace

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
  return absl::StrCat(api_version.find('/') == std::string::npos ? "/api/" : "/apis/", api_version,
                      "/namespaces/", ns, "/", kind, "s/", StringField(meta, "name"));
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

// --- Reconcile ------------------------------------------------------------------------

namespace {

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
  status["replicaStatuses"] = {{"trainer", ReplicaStatus(trainers)},
                               {"ps", ReplicaStatus(servers_pods)},
                               {"syncer", ReplicaStatus(syncers)}};
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
  }

  // --- Finished now?
  const int64_t restarts = std::max<int64_t>(IntField(previous, "restarts"), trainers.restarts);
  status["restarts"] = restarts;
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
    MinRequeue(a.requeue_after, opt.reshard_poll);
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
  const std::vector<Condition> conditions = {
      {"Created", true, "JobCreated",
       absl::StrCat("StatefulSets, Services and ConfigMap of ", ref.name, " created")},
      running_condition,
      {"Resharding", resharding, reshard_reason, reshard_message},
      suspended ? Condition{"Suspended", true, "Suspended",
                            "runPolicy.suspend: trainers and syncers stopped, parameter servers "
                            "kept"}
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

Actions Reconcile(const Observed& observed, const ReconcileOptions& options) {
  Actions actions = ReconcileJob(observed, options);
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
