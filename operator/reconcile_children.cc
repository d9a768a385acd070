// Reconcile (operator/reconcile_internal.h): the desired children, as full
// objects: the pod template (the operator's, merged with the user's), the
// StatefulSets, headless Services and ConfigMap, and the export claim.

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jobspec/job_spec.h"
#include "operator/crd.h"
#include "operator/reconcile_internal.h"

namespace shadowsync::op::internal {
namespace {

constexpr std::string_view kConfigVolume = "config";
constexpr std::string_view kDataVolume = "data";  // PS: the PVC; others: an emptyDir.
constexpr std::string_view kTmpVolume = "tmp";
constexpr std::string_view kExportVolume = "exports";  // Trainers: the export claim.
constexpr std::string_view kInitVolume = "init";       // Trainers: the warm start's claim.
constexpr std::string_view kInitMount = "/var/lib/shadowsync-init";
// spec.security's Secrets, mounted read-only at kTlsMountPath / kAuthMountPath.
constexpr std::string_view kTlsVolume = "shadowsync-tls";
constexpr std::string_view kAuthVolume = "shadowsync-auth-token";

std::string GangSchedulerName(const ReconcileOptions& opt) {
  if (!opt.gang_scheduler_name.empty()) return opt.gang_scheduler_name;
  return opt.gang_scheduler == GangScheduler::kVolcano ? "volcano" : "scheduler-plugins-scheduler";
}
constexpr std::string_view kCredentialsVolume = "shadowsync-credentials";
// Secret files readable by the pod's fsGroup only (0440).
constexpr int kSecretMode = 0440;

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

// Requests that let the scheduler place a pod where it fits, unless the
// template sets resources: a trainer's Hogwild threads, a parameter
// server's row cache (plus RocksDB and gRPC), a syncer's dense replicas.
// No limits: a limit the job author did not choose would only OOM-kill.
json DefaultResources(const JobSpec& spec, Role role) {
  switch (role) {
    case Role::kTrainer:
      return {{"requests", {{"cpu", std::to_string(spec.trainer.threads)}, {"memory", "1Gi"}}}};
    case Role::kPs:
      return {{"requests",
               {{"cpu", "1"},
                {"memory",
                 std::to_string(spec.parameter_server.cache_bytes.value + (int64_t{1} << 30))}}}};
    case Role::kSyncer:
      return {{"requests", {{"cpu", "500m"}, {"memory", "512Mi"}}}};
  }
  return json::object();
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
  if (role == Role::kTrainer) {
    args.push_back(absl::StrCat("--termination-message=", Av(kTerminationMessagePath)));
  }
  ports.push_back({{"name", "metrics"}, {"containerPort", opt.metrics_port}, {"protocol", "TCP"}});
  // Security: file paths only (the token never appears in the pod spec).
  // The job's credentials Secret fills in what spec.security leaves out.
  const SecuritySpec& security = spec.security;
  const std::string credentials_dir(kCredentialsMountPath);
  auto credential = [&](std::string_view key) {
    return absl::StrCat(credentials_dir, "/", std::string(key));
  };
  std::vector<std::string> credential_files;
  if (security.tls) {
    args.push_back(absl::StrCat("--tls-ca-file=", security.tls->ca_file));
    args.push_back(absl::StrCat("--tls-cert-file=", security.tls->cert_file));
    args.push_back(absl::StrCat("--tls-key-file=", security.tls->key_file));
    args.push_back(absl::StrCat("--tls-server-name=", security.tls->server_name));
  } else if (opt.credentials && opt.credentials_tls) {
    credential_files.insert(credential_files.end(), {credential(kTlsCaKey), credential(kTlsCertKey),
                                                     credential(kTlsKeyKey)});
    args.push_back(absl::StrCat("--tls-ca-file=", credential(kTlsCaKey)));
    args.push_back(absl::StrCat("--tls-cert-file=", credential(kTlsCertKey)));
    args.push_back(absl::StrCat("--tls-key-file=", credential(kTlsKeyKey)));
    args.push_back(absl::StrCat("--tls-server-name=", opt.credentials_tls_server_name));
  }
  if (security.auth_token) {
    args.push_back(absl::StrCat("--auth-token-file=", security.auth_token->file));
  } else if (opt.credentials) {
    credential_files.push_back(credential(kAuthTokenKey));
    args.push_back(absl::StrCat("--auth-token-file=", credential(kAuthTokenKey)));
  }
  // The admin RPCs' credential: the servers check it; trainer 0 of a warm
  // start imports the export's rows with it (ImportSlots), and the trainers
  // share one template. The trainers of other jobs never get it.
  if (opt.credentials && (role == Role::kPs || warm_start)) {
    credential_files.push_back(credential(kAdminTokenKey));
    args.push_back(absl::StrCat(Av(kAdminTokenFileArg), credential(kAdminTokenKey)));
  }

  auto field_env = [](std::string_view name, std::string_view path) {
    return json{{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", path}}}}}};
  };
  json container = {{"name", role_name},
                    {"image", opt.image},
                    {"imagePullPolicy", opt.image_pull_policy},
                    {"args", std::move(args)},
                    {"ports", std::move(ports)},
                    {"resources", DefaultResources(spec, role)},
                    {"terminationMessagePath", kTerminationMessagePath},
                    {"terminationMessagePolicy", "File"},
                    {"env",
                     {field_env("POD_NAME", "metadata.name"),
                      field_env("POD_NAMESPACE", "metadata.namespace"),
                      {{"name", "SHADOWSYNC_JOB_NAME"}, {"value", ref.name}},
                      {{"name", "SHADOWSYNC_ROLE"}, {"value", role_name}}}},
                    {"readinessProbe",
                     {{"httpGet", {{"path", "/healthz"}, {"port", "metrics"}}},
                      {"periodSeconds", 5},
                      {"failureThreshold", 3}}},
                    // /livez fails only on what a restart mends (a parameter
                    // server's failed store), never while starting or draining.
                    {"livenessProbe",
                     {{"httpGet", {{"path", "/livez"}, {"port", "metrics"}}},
                      {"periodSeconds", 10},
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
  if (!credential_files.empty()) {
    secrets.push_back({kCredentialsVolume, CredentialsSecretName(ref.name), kCredentialsMountPath,
                       std::move(credential_files)});
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

  json pull_secrets = json::array();
  for (const std::string& name : opt.image_pull_secrets) pull_secrets.push_back({{"name", name}});
  json pod_spec = {{"containers", {std::move(container)}},
                   {"volumes", std::move(volumes)},
                   {"restartPolicy", "Always"},
                   {"enableServiceLinks", false},
                   // The pods never call the Kubernetes API.
                   {"automountServiceAccountToken", false},
                   {"terminationGracePeriodSeconds", role == Role::kPs ? 60 : 30},
                   {"securityContext",
                    {{"runAsNonRoot", true},
                     {"runAsUser", opt.run_as_user},
                     {"runAsGroup", opt.run_as_user},
                     {"fsGroup", opt.run_as_user},
                     {"seccompProfile", {{"type", "RuntimeDefault"}}}}}};
  if (!pull_secrets.empty()) pod_spec["imagePullSecrets"] = std::move(pull_secrets);
  json labels = Labels(ref, role, opt);
  json annotations = {{"prometheus.io/scrape", "true"},
                      {"prometheus.io/port", std::to_string(opt.metrics_port)},
                      {"prometheus.io/path", "/metrics"}};
  // Gang scheduling: the scheduler, and the PodGroup (named after the job)
  // the way each scheduler finds it.
  const std::optional<SchedulingPolicySpec>& policy = spec.run_policy.scheduling_policy;
  if (policy && !policy->priority_class.empty()) {
    pod_spec["priorityClassName"] = policy->priority_class;
  }
  if (opt.gang_scheduler != GangScheduler::kNone) {
    pod_spec["schedulerName"] = GangSchedulerName(opt);
    if (opt.gang_scheduler == GangScheduler::kVolcano) {
      annotations["scheduling.k8s.io/group-name"] = ref.name;
    } else {
      labels["scheduling.x-k8s.io/pod-group"] = ref.name;
    }
  }
  json template_ = {
      {"metadata", {{"labels", std::move(labels)}, {"annotations", std::move(annotations)}}},
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

}  // namespace

json CredentialsSecretMeta(const JobRef& ref, const ReconcileOptions& opt) {
  json labels = Labels(ref, std::nullopt, opt);
  labels["app.kubernetes.io/component"] = "credentials";
  return ObjectMeta(ref, CredentialsSecretName(ref.name), std::move(labels));
}

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

namespace {

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

// Who may open the servers' gRPC ports: the job's own pods (trainers and
// servers) and the operator (resharding, shard-map reads). /metrics and the
// probes' port stay open to Prometheus and the kubelet.
json RenderNetworkPolicy(const JobRef& ref, const ReconcileOptions& opt) {
  json grpc_ports = json::array();
  for (Role role : kRoles) {
    if (std::optional<int> port = GrpcPort(role, opt)) {
      grpc_ports.push_back({{"port", *port}, {"protocol", "TCP"}});
    }
  }
  json job_pods = {{"podSelector", {{"matchLabels", {{std::string(kJobNameLabel), ref.name}}}}}};
  json operator_pods = {
      {"namespaceSelector",
       {{"matchLabels", {{"kubernetes.io/metadata.name", opt.operator_namespace}}}}},
      {"podSelector", {{"matchLabels", opt.operator_pod_labels}}}};
  json servers = {{"matchLabels", {{std::string(kJobNameLabel), ref.name}}},
                  {"matchExpressions",
                   {{{"key", std::string(kRoleLabel)},
                     {"operator", "In"},
                     {"values", {RoleName(Role::kPs), RoleName(Role::kSyncer)}}}}}};
  return {
      {"apiVersion", "networking.k8s.io/v1"},
      {"kind", "NetworkPolicy"},
      {"metadata", ObjectMeta(ref, NetworkPolicyName(ref.name), Labels(ref, std::nullopt, opt))},
      {"spec",
       {{"podSelector", std::move(servers)},
        {"policyTypes", {"Ingress"}},
        {"ingress",
         {{{"from", {std::move(job_pods), std::move(operator_pods)}},
           {"ports", std::move(grpc_ports)}},
          {{"ports", {{{"port", opt.metrics_port}, {"protocol", "TCP"}}}}}}}}}};
}

// A voluntary eviction (a node drain) takes one parameter server at a time:
// the trainers wait for its slots until it is back, and two at once would
// stall every step.
json RenderDisruptionBudget(const JobRef& ref, const ReconcileOptions& opt) {
  return {
      {"apiVersion", "policy/v1"},
      {"kind", "PodDisruptionBudget"},
      {"metadata", ObjectMeta(ref, ChildName(ref.name, Role::kPs), Labels(ref, Role::kPs, opt))},
      {"spec",
       {{"maxUnavailable", 1}, {"selector", {{"matchLabels", SelectorLabels(ref, Role::kPs)}}}}}};
}

// The job's PodGroup, in the gang scheduler's own CRD: every pod, or
// schedulingPolicy.minAvailable of them, is placed together or not at all.
json RenderPodGroup(const JobSpec& spec, const JobRef& ref, const ReconcileOptions& opt) {
  const std::optional<SchedulingPolicySpec>& policy = spec.run_policy.scheduling_policy;
  const int pods = spec.trainer.replicas + spec.parameter_server.replicas + spec.syncer.replicas;
  json pg_spec = {{"minMember", policy && policy->min_available ? *policy->min_available : pods}};
  if (opt.gang_scheduler == GangScheduler::kVolcano && policy) {
    if (!policy->queue.empty()) pg_spec["queue"] = policy->queue;
    if (!policy->priority_class.empty()) pg_spec["priorityClassName"] = policy->priority_class;
  }
  const auto [group, version] = PodGroupApi(opt.gang_scheduler);
  return {{"apiVersion", absl::StrCat(group, "/", version)},
          {"kind", "PodGroup"},
          {"metadata", ObjectMeta(ref, ref.name, Labels(ref, std::nullopt, opt))},
          {"spec", std::move(pg_spec)}};
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

}  // namespace

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
  if (opt.network_policy) want(o.network_policies, RenderNetworkPolicy(ref, opt));
  want(o.disruption_budgets, RenderDisruptionBudget(ref, opt));
  // Before the StatefulSets: a gang scheduler holds pods whose group is missing.
  if (opt.gang_scheduler != GangScheduler::kNone) {
    want(o.pod_groups, RenderPodGroup(job.spec, ref, opt));
  }
  for (Role role : {Role::kPs, Role::kSyncer, Role::kTrainer}) {
    want(o.stateful_sets, RenderStatefulSet(job.spec, ref, role, replicas.Of(role), opt));
  }
  std::set<std::string> wanted = {ConfigMapName(ref.name)};
  if (opt.network_policy) wanted.insert(NetworkPolicyName(ref.name));
  for (Role role : kRoles) wanted.insert(ChildName(ref.name, role));
  if (opt.gang_scheduler != GangScheduler::kNone) wanted.insert(ref.name);
  auto unwanted = [&](const std::map<std::string, json>& observed) {
    for (const auto& [name, object] : observed) {
      if (!wanted.contains(name)) a.delete_paths.push_back(ObjectPath(object));
    }
  };
  unwanted(o.config_maps);
  unwanted(o.services);
  unwanted(o.stateful_sets);
  unwanted(o.network_policies);
  unwanted(o.disruption_budgets);
  unwanted(o.pod_groups);
}

}  // namespace shadowsync::op::internal

namespace shadowsync::op {

nlohmann::json RenderCredentialsSecret(const nlohmann::json& job,
                                       const std::map<std::string, std::string>& data,
                                       const ReconcileOptions& options) {
  nlohmann::json encoded = nlohmann::json::object();
  for (const auto& [key, value] : data) encoded[key] = absl::Base64Escape(value);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", internal::CredentialsSecretMeta(internal::RefOf(job), options)},
          {"type", "Opaque"},
          {"data", std::move(encoded)}};
}

absl::StatusOr<GangScheduler> ParseGangScheduler(std::string_view name, std::string_view flag) {
  if (name == "none" || name.empty()) return GangScheduler::kNone;
  if (name == "volcano") return GangScheduler::kVolcano;
  if (name == "scheduler-plugins") return GangScheduler::kSchedulerPlugins;
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(flag), ": '", std::string(name),
                   "' is not one of none, volcano, scheduler-plugins"));
}

std::pair<std::string, std::string> PodGroupApi(GangScheduler scheduler) {
  if (scheduler == GangScheduler::kVolcano) return {"scheduling.volcano.sh", "v1beta1"};
  return {"scheduling.x-k8s.io", "v1alpha1"};
}

}  // namespace shadowsync::op
