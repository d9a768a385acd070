// The operator's decisions as pure functions (docs/operator.md): given a
// ShadowSyncJob and what the controller observed of its children, pods and
// parameter servers, Reconcile() returns the desired child objects, the new
// .status, the events to record and the reshard to run. No I/O, no clock:
// the time is part of the input. Thread-safe.
//
//   Observed observed{.job = job_json, .now = absl::Now()};
//   ... fill stateful_sets / services / config_maps / pods / ps from the API ...
//   Actions a = Reconcile(observed, options);
//   for (const json& child : a.apply) ServerSideApply(child);        // controller
//   if (a.reshard) StartReshard(a.reshard->from_servers, a.reshard->to_servers);
//   WriteStatusIfChanged(a.status);
//
// The children, named "<job>-trainer|ps|syncer" and "<job>-config", are
// listed in docs/operator.md, "Children".
#ifndef SHADOWSYNC_OPERATOR_RECONCILE_H_
#define SHADOWSYNC_OPERATOR_RECONCILE_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/version.h"

namespace shadowsync::op {

enum class Role { kTrainer, kPs, kSyncer };
inline constexpr Role kRoles[] = {Role::kTrainer, Role::kPs, Role::kSyncer};

// "trainer", "ps", "syncer": the value of the shadowsync.io/role label, the
// name of the main container and the suffix of the child names.
std::string_view RoleName(Role role);

// Label keys on every child and pod.
inline constexpr std::string_view kJobNameLabel = "shadowsync.io/job-name";
inline constexpr std::string_view kRoleLabel = "shadowsync.io/role";

// Through the role's headless Service: "<job>-ps-3.<job>-ps.<namespace>.svc:7000".
inline constexpr std::string_view kDefaultAddressTemplate =
    "{job}-{role}-{index}.{job}-{role}.{namespace}.svc:{port}";

enum class GangScheduler {
  kNone,
  kVolcano,           // PodGroup scheduling.volcano.sh/v1beta1; schedulerName "volcano".
  kSchedulerPlugins,  // PodGroup scheduling.x-k8s.io/v1alpha1 (kubernetes-sigs/scheduler-plugins'
                      // coscheduling); schedulerName "scheduler-plugins-scheduler".
};
// "none", "volcano", "scheduler-plugins"; InvalidArgument naming `flag` otherwise.
absl::StatusOr<GangScheduler> ParseGangScheduler(std::string_view name, std::string_view flag);
// The PodGroup resource of `scheduler` (not kNone): group and version.
std::pair<std::string, std::string> PodGroupApi(GangScheduler scheduler);

struct ReconcileOptions {
  // Image of every pod unless its template sets one.
  std::string image = "shadowsync:" + std::string(kReleaseVersion);
  std::string image_pull_policy = "IfNotPresent";
  // The pods' imagePullSecrets, unless a template sets its own: Secrets that
  // must exist in each job's namespace (a pod can use no other).
  std::vector<std::string> image_pull_secrets;
  int ps_port = 7000;       // gRPC port of the parameter servers.
  int syncer_port = 7100;   // gRPC port of the syncers.
  int metrics_port = 9100;  // /metrics and /healthz of every pod (port name "metrics").
  // runAsUser, runAsGroup and fsGroup of the pods (fsGroup makes the PS
  // volume writable). Default: 65532, the image's non-root user.
  int64_t run_as_user = 65532;
  std::string config_dir = "/etc/shadowsync";  // Where the ConfigMap is mounted.
  // Per-pod state: the PS's RocksDB volume, trainers' and syncers' emptyDir.
  std::string data_dir = "/var/lib/shadowsync";
  // app.kubernetes.io/managed-by of the children.
  std::string manager = "shadowsync-operator";
  // How a pod's servers are reached: {job} {role} {role_index} (trainer 0,
  // ps 1, syncer 2) {index} {namespace} {port}. The ConfigMap's addresses
  // and the operator's own connections both follow it; tests that run the
  // pods as local processes give each pod a loopback address.
  std::string address_template = std::string(kDefaultAddressTemplate);
  // Requeue while resharding, to follow the PS (their state is not watched).
  absl::Duration reshard_poll = absl::Seconds(5);
  // Requeue while running, to refresh examplesProcessed and friends.
  absl::Duration progress_poll = absl::Seconds(30);
  // A NetworkPolicy per job: its servers' gRPC ports take connections only
  // from the job's own pods and the operator's (namespace and labels
  // below); /metrics stays open. Off: none (a cluster whose CNI ignores
  // NetworkPolicies gains nothing from one).
  bool network_policy = true;
  // The job's credentials Secret, CredentialsSecretName(job), which the
  // controller creates when it has a credentials key (operator/credentials.h,
  // docs/security.md "Credentials by default"). On: its admin token goes to
  // the parameter servers (and to the trainers of a warm start, which import
  // rows), its auth token to every pod of a job without
  // spec.security.authToken and, with credentials_tls, its TLS files to
  // every pod of a job without spec.security.tls, whose clients verify
  // credentials_tls_server_name. Off: none.
  bool credentials = false;
  bool credentials_tls = false;
  std::string credentials_tls_server_name = "shadowsync";
  std::string operator_namespace = "shadowsync-system";
  std::map<std::string, std::string> operator_pod_labels = {
      {"app.kubernetes.io/name", "shadowsync-operator"}};
  // Gang scheduling: every job gets a PodGroup of this scheduler's CRD
  // (spec.runPolicy.schedulingPolicy), and its pods the scheduler's name and
  // their group. kNone: no PodGroup; priorityClass still reaches the pods.
  GangScheduler gang_scheduler = GangScheduler::kNone;
  std::string gang_scheduler_name;  // The pods' schedulerName; "" = the scheduler's usual one.
};

// A reshard the controller is running (ps/resharder), as it reports it.
struct ReshardProgress {
  int from_servers = 0;
  int to_servers = 0;
  int64_t slots_moved = 0;
  int64_t slots_total = 0;
};

// The parameter servers' shard map as the controller read it from them.
struct PsClusterState {
  uint64_t epoch = 0;
  int num_slots = 0;
  std::vector<int> slots_per_server;       // Slots owned by ps-i, by index i.
  std::optional<ReshardProgress> reshard;  // Set while a reshard runs.
  // The servers disagree on the map, or its slots are not balanced over
  // the servers that own them: a reshard was cut short (an operator
  // restart) and must be finished.
  bool unbalanced = false;

  // Servers 0..n-1 own every slot: n = highest index owning a slot + 1;
  // 0 when no server owns one (unknown).
  int OwningServers() const;
};

// What the controller read from the API server, the servers and the clock.
struct Observed {
  nlohmann::json job;  // The ShadowSyncJob object, with metadata and status.
  // Children owned by this job, by metadata.name.
  std::map<std::string, nlohmann::json> stateful_sets, services, config_maps;
  std::map<std::string, nlohmann::json> network_policies, disruption_budgets;
  std::map<std::string, nlohmann::json> pod_groups;  // With a gang scheduler only.
  std::vector<nlohmann::json> pods;                  // Pods labelled shadowsync.io/job-name=<job>.
  std::optional<PsClusterState> ps;                  // Absent: the servers could not be asked.
  // Training progress collected by the controller (e.g. from the trainers'
  // /metrics); absent keeps the previous status values.
  std::optional<int64_t> examples_processed;
  std::optional<double> examples_per_second;
  std::optional<double> train_ne;
  // The newest export trainer 0 reports (its /metrics): model, request,
  // final, rows, evalNE, evalAUC, examplesTrained, time; absent keeps the
  // status's.
  std::optional<nlohmann::json> latest_export;
  // A warm start: the rows trainer 0 reports it loaded (its /metrics);
  // present once it has.
  std::optional<int64_t> init_imported_rows;
  absl::Time now = absl::UnixEpoch();
};

struct EventSpec {
  std::string type;  // "Normal" or "Warning".
  std::string reason;
  std::string message;
  bool operator==(const EventSpec&) const = default;
};

// Move slots so that servers 0..to_servers-1 own them all. The controller
// runs it at most once at a time and reports progress in
// Observed::ps->reshard; Reconcile asks again only when none runs.
struct ReshardRequest {
  int from_servers = 0;
  int to_servers = 0;
  bool operator==(const ReshardRequest&) const = default;
};

struct Actions {
  // Create-or-update (server-side apply) these full child objects. Only
  // children that are missing or differ from the observed ones are listed;
  // order: ConfigMap, Services, NetworkPolicy, PodDisruptionBudget,
  // StatefulSets.
  std::vector<nlohmann::json> apply;
  // API paths of owned children to delete (owned but no longer wanted).
  std::vector<std::string> delete_paths;
  nlohmann::json status;  // The full new .status; write it if it changed.
  std::vector<EventSpec> events;
  std::optional<ReshardRequest> reshard;
  std::optional<absl::Duration> requeue_after;
  bool delete_job = false;  // ttlSecondsAfterFinished has expired.
};

// The decision for one job. A job being deleted (deletionTimestamp set)
// gets empty actions and its status unchanged: ownerReferences do the rest.
Actions Reconcile(const Observed& observed, const ReconcileOptions& options = {});

// --- Building blocks, shared with the controller and tests -----------------

// "<job>-trainer", "<job>-ps", "<job>-syncer": StatefulSet, headless Service.
std::string ChildName(std::string_view job, Role role);
// "<job>-config".
std::string ConfigMapName(std::string_view job);
// "<job>-credentials": the job's credentials Secret (ReconcileOptions).
std::string CredentialsSecretName(std::string_view job);
// Its keys: the admin token, the auth token and the TLS files.
inline constexpr std::string_view kAdminTokenKey = "admin-token";
inline constexpr std::string_view kAuthTokenKey = "token";
inline constexpr std::string_view kTlsCaKey = "ca.crt";
inline constexpr std::string_view kTlsCertKey = "tls.crt";
inline constexpr std::string_view kTlsKeyKey = "tls.key";
// Where the pods find them.
inline constexpr std::string_view kCredentialsMountPath = "/etc/shadowsync/credentials";
// Where a trainer's container writes why it ended (its run not learning,
// common/exit_codes.h): the container's terminationMessagePath, passed to
// `shadowsync pod` too.
inline constexpr std::string_view kTerminationMessagePath = "/dev/termination-log";
// The argument that hands a pod the admin token; UsesCredentials looks for it.
inline constexpr std::string_view kAdminTokenFileArg = "--admin-token-file=";
// Whether a job's pods get its credentials: options.credentials, for a new
// job (no parameter-server StatefulSet yet) or one whose servers already run
// with them; a job started without keeps running without (its pods must
// agree on TLS and tokens), until it is recreated.
bool UsesCredentials(const nlohmann::json* ps_stateful_set, const ReconcileOptions& options);
// The Secret itself, with `data` (key -> contents, base64-encoded here),
// labelled and owned like the job's other children.
nlohmann::json RenderCredentialsSecret(const nlohmann::json& job,
                                       const std::map<std::string, std::string>& data,
                                       const ReconcileOptions& options);
// "<job>-servers": the NetworkPolicy guarding the job's servers.
std::string NetworkPolicyName(std::string_view job);
// "<job>-exports": the export claim the operator creates when
// spec.export.volumeClaimName is empty.
std::string ExportClaimName(std::string_view job);
// On-demand exports: a new value of this annotation on the job is copied to
// the ConfigMap's `export-request` file, which trainer 0 watches; it
// exports once per value and reports the value back (status.export.request).
inline constexpr std::string_view kExportRequestAnnotation = "shadowsync.io/export-request";
inline constexpr std::string_view kExportRequestKey = "export-request";
// A warm start: "true" once trainer 0 has loaded spec.init.fromModel onto
// the servers (status.init.imported), so that no restart loads it again.
inline constexpr std::string_view kInitImportedKey = "init-imported";
// "<job>-ps-3.<job>-ps.<namespace>.svc:7000": pod i of a role, through
// the role's headless Service.
std::string PodAddress(std::string_view job, Role role, int index, std::string_view ns, int port);
// `address_template` (ReconcileOptions) with its placeholders filled in.
std::string FormatAddress(std::string_view address_template, std::string_view job, Role role,
                          int index, std::string_view ns, int port);
// The trainer pods' selector, as written to status.selector for the scale
// subresource: "shadowsync.io/job-name=<job>,shadowsync.io/role=trainer".
std::string TrainerSelector(std::string_view job);
// The REST path of a namespaced object from its apiVersion, kind, namespace
// and name: "/apis/apps/v1/namespaces/ns/statefulsets/j-ps".
std::string ObjectPath(const nlohmann::json& object);
// True if every field of `desired` is in `observed` with an equal value
// (objects recursively, lists element-wise with equal length): what the
// API server added (defaults, status, managedFields) does not count.
bool IsSubset(const nlohmann::json& desired, const nlohmann::json& observed);

}  // namespace shadowsync::op

#endif  // SHADOWSYNC_OPERATOR_RECONCILE_H_
