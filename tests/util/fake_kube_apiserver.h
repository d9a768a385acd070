// An in-process fake Kubernetes API server for the operator's tests: a real
// HTTP/1.1 server on loopback (keep-alive; chunked watch streams) over an
// in-memory store with one global revision counter, so resourceVersion, 409,
// 410, watch replay, /status, /scale, CRD registration and ownerReference
// garbage collection behave as a real kube-apiserver's do. Real kubectl 1.31
// runs against it in tests/operator/kubectl_test.cc to keep it honest.
// Requests are authorized by RBAC for the identities tests give their
// clients, so a client missing a permission in a cluster misses it here too.
// Thread-safe: the HTTP threads and the direct store methods share one lock.
//
//   SS_ASSIGN_OR_RETURN(auto api, FakeKubeApiServer::Start());
//   SS_RETURN_IF_ERROR(api->WriteKubeconfig(dir + "/kubeconfig"));
//   SS_RETURN_IF_ERROR(api->ApplyFile("deploy/rbac.yaml"));  // Roles and bindings
//   SS_RETURN_IF_ERROR(api->WriteKubeconfig(dir + "/sa", "default",
//                                           "system:serviceaccount:ns:name"));
//   ... point the operator (or kubectl) at api->url() ...
//   api->UpdateStatus("/apis/apps/v1/namespaces/default/statefulsets/job-ps", sts);  // as kubelet
//   api->InjectFault({.method = "PUT", .path_contains = "/shadowsyncjobs/", .code = 409});
//
// What is served
//  - Discovery: /version, /api, /api/v1, /apis, /apis/<group>[/<version>] as
//    legacy (non-aggregated) JSON: clients asking for aggregated discovery
//    (apidiscovery.k8s.io/v2) get Content-Type application/json and fall back,
//    as kubectl 1.31 does. /openapi/v3 is a minimal document per group
//    version: only PATCH operations with x-kubernetes-group-version-kind and
//    the fieldValidation parameter, which tells kubectl that the server
//    validates fields (it does not: fieldValidation is ignored) so kubectl
//    skips client-side validation; no schemas, so kubectl computes strategic
//    merge patches from its compiled-in types. /openapi/v2 is an empty
//    document (zero protobuf bytes). /healthz, /livez, /readyz answer "ok".
//  - Built-in resources: core v1 namespaces, pods, services, configmaps,
//    serviceaccounts, events, secrets, endpoints, persistentvolumeclaims;
//    apps/v1 statefulsets and deployments (both with /status and /scale);
//    coordination.k8s.io/v1 leases; events.k8s.io/v1 events;
//    networking.k8s.io/v1 networkpolicies; policy/v1 poddisruptionbudgets;
//    rbac.authorization.k8s.io/v1 roles, rolebindings, clusterroles,
//    clusterrolebindings; apiextensions.k8s.io/v1 customresourcedefinitions.
//    Namespaces default, kube-system, kube-public and kube-node-lease exist at
//    start; creating a namespaced object in a missing namespace is 404.
//  - A CRD registers every served version of its resource at once (status
//    conditions NamesAccepted and Established are True immediately); deleting
//    it unregisters the resource, deletes all its objects and ends its watches.
//
// Semantics (same for HTTP and the direct methods below)
//  - Every write takes the next global revision as metadata.resourceVersion
//    (a decimal string). Create sets uid, creationTimestamp, generation=1,
//    the namespace from the URL, and a name from generateName. A write that
//    changes nothing is a no-op (no new revision, no watch event).
//  - metadata.generation increments when anything outside metadata and status
//    changes. For kinds with a status subresource the main resource ignores
//    .status (create resets it: namespaces get phase Active, pods phase
//    Pending, everything else {}), and /status changes only .status.
//  - PUT with metadata.resourceVersion set is conditional (stale → 409
//    Conflict); without it, unconditional. PUT never creates.
//  - PATCH: application/merge-patch+json (RFC 7386), application/json-patch+json
//    (RFC 6902, "test" included), application/strategic-merge-patch+json
//    APPROXIMATED as a merge patch in which lists of objects whose elements
//    all carry a merge key (name, uid, type, mountPath, containerPort, port,
//    ip, devicePath) merge element-wise by that key and honour
//    {"$patch":"delete"} and $setElementOrder/ directives; other lists are
//    replaced. application/apply-patch+yaml (server-side apply) is approximated
//    the same way (JSON bodies only, no managedFields, creates when missing).
//  - DELETE honours DeleteOptions{propagationPolicy, preconditions}. Objects
//    with metadata.finalizers get deletionTimestamp and stay until an update
//    empties the list. Garbage collection runs synchronously inside the
//    delete: a dependent whose ownerReferences all point at deleted uids is
//    deleted (recursively), with Orphan only the reference is removed.
//    Deleting a namespace deletes everything in it at once.
//  - Watch (?watch=1|true) on a namespaced, all-namespaces or cluster-scoped
//    collection: resourceVersion "" or "0" sends ADDED for the current
//    objects then live events; a resourceVersion N replays the retained
//    events newer than N (the history keeps `watch_history` events for the
//    whole server); older than the history (or before Compact()) → one
//    ERROR event with Status{code 410, reason Expired} and the stream ends.
//    labelSelector/fieldSelector apply, and an object that stops (starts)
//    matching is sent as DELETED (ADDED). allowWatchBookmarks=true adds a
//    BOOKMARK every `bookmark_interval`. sendInitialEvents=true sends ADDED
//    for the current objects whatever the resourceVersion, then a BOOKMARK
//    annotated k8s.io/initial-events-end=true. timeoutSeconds ends the stream
//    cleanly. A watcher that falls behind the history gets the 410 too.
//  - List supports labelSelector (=, ==, !=, in, notin, exists, !exists),
//    fieldSelector (=, ==, != on metadata.name, metadata.namespace or any
//    dotted path with a scalar value) and limit/continue (pages are cut from
//    the live state, not a snapshot).
//  - Accept: application/json;as=Table;v=v1;g=meta.k8s.io renders a
//    meta.k8s.io/v1 Table (NAME, CRD additionalPrinterColumns with date
//    columns as ages, AGE last when there is no date column;
//    includeObject=None|Metadata|Object, default Metadata).
//  - Custom resources are validated against their CRD version's
//    openAPIV3Schema as kube-apiserver does, by tests/util/crd_validate.mjs
//    (Node, @bufbuild/cel) in a child process: defaults filled in, types,
//    enums, bounds, patterns, required fields, and the x-kubernetes-validations
//    CEL rules with self and, on update, oldSelf. Failures are 422 Invalid
//    with every cause (field, reason, message) at once. Unknown fields are
//    pruned from what is stored; fieldValidation=Strict (kubectl's default)
//    refuses them with 400 BadRequest, Warn (the default) adds a Warning
//    header. A CRD whose rules do not compile (parse, known functions,
//    declared fields, bounded iteration) is refused at creation. Writes to
//    the main resource, /status and /scale are all validated.
//  - Errors are metav1.Status bodies. The direct methods map them:
//      404 NotFound           → absl::NotFoundError
//      409 AlreadyExists      → absl::AlreadyExistsError
//      409 Conflict           → absl::AbortedError
//      400 BadRequest, 422 Invalid, 415 → absl::InvalidArgumentError
//      410 Expired/Gone       → absl::OutOfRangeError
//      405 MethodNotAllowed   → absl::UnimplementedError
//      anything else          → absl::InternalError
//    The Status's message is the absl message.
//  - JSON only: a protobuf request body is answered 415. helm 3.17 stores
//    releases through client-go typed clients, which POST Secrets as
//    protobuf, so `helm install` cannot run against this server (helm
//    template/lint need no server).
//  - Injected faults apply to HTTP requests only, never to the direct methods.
//
// Identities and RBAC
//  - Authentication by bearer token: TokenFor(user) (what WriteKubeconfig
//    writes for `user`) authenticates as `user`; a ServiceAccount's user
//    "system:serviceaccount:<ns>:<name>" is in the groups
//    system:serviceaccounts and system:serviceaccounts:<ns>, every user in
//    system:authenticated. Any other token, or none, is kFakeAdminUser, in
//    group system:masters (a cluster admin, as kubectl's usual kubeconfig):
//    so tests that pick no identity keep working unauthorized. kubectl is
//    always the admin here: client-go sends a kubeconfig's credentials over
//    TLS only, and this server speaks plain HTTP.
//  - Authorization (HTTP only; the direct methods act as the admin): a
//    system:masters request is allowed. Any other resource request is
//    allowed only if a rule of a Role or ClusterRole stored in the fake
//    grants it through a binding naming the user, one of its groups or its
//    ServiceAccount: ClusterRoleBindings everywhere, RoleBindings in their
//    namespace (to a Role there or a ClusterRole). A rule matches on verbs,
//    apiGroups, resources ("shadowsyncjobs/status" for a subresource, "*"
//    wildcards) and resourceNames. The verb is kube-apiserver's: GET of an
//    object get, of a collection list, with watch=1|true watch; POST create;
//    PUT update; PATCH patch; DELETE of an object delete, of a collection
//    deletecollection. Non-resource paths (discovery, /version, /openapi,
//    /healthz) are allowed to everyone, as the default system:discovery
//    bindings allow them. Aggregated ClusterRoles (aggregationRule) are not
//    computed. A denied request is 403 with a Status whose reason is
//    Forbidden and whose message is the real one, e.g.
//      events "j.1f" is forbidden: User "system:serviceaccount:a:b" cannot
//      get resource "events" in API group "" in the namespace "default"
#ifndef SHADOWSYNC_TESTS_UTIL_FAKE_KUBE_APISERVER_H_
#define SHADOWSYNC_TESTS_UTIL_FAKE_KUBE_APISERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace shadowsync::testing {

// The identity of requests without a token of TokenFor(): a cluster admin.
inline constexpr char kFakeAdminUser[] = "kubernetes-admin";

struct FakeKubeApiServerOptions {
  std::string host = "127.0.0.1";  // Address to bind. Default: loopback.
  int port = 0;                    // 0: any free port (see port()).
  size_t watch_history = 10000;    // Events kept per server for watch replay.
  // BOOKMARK cadence on watches asking allowWatchBookmarks=true.
  absl::Duration bookmark_interval = absl::Seconds(1);
  // Print one line per answered request to stderr (method, target, status).
  bool log_requests = false;
  // The custom-resource validator's command line (see "Custom resources");
  // empty: custom resources are stored unvalidated, as a CRD without a schema.
  std::vector<std::string> crd_validator = DefaultCrdValidator();

  static std::vector<std::string> DefaultCrdValidator();
};

// One injected failure or delay for HTTP requests; see InjectFault().
struct FakeKubeFault {
  // "" any, else "GET" "POST" "PUT" "PATCH" "DELETE" or "WATCH" (a GET with
  // watch=1/true; a plain "GET" fault does not match watches).
  std::string method;
  std::string path_contains;  // Substring of the URL path ("" any).
  int code = 500;             // HTTP status answered with a metav1.Status body; 0 = delay only.
  int times = 1;              // Number of matching requests it applies to.
  absl::Duration delay = absl::ZeroDuration();  // Added before answering.
};

class FakeKubeApiServer {
 public:
  // Binds options.host:options.port and starts serving. Unavailable if the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<FakeKubeApiServer>> Start(
      FakeKubeApiServerOptions options = {});
  ~FakeKubeApiServer();  // Stops; closes every connection (watches end abruptly).

  FakeKubeApiServer(const FakeKubeApiServer&) = delete;
  FakeKubeApiServer& operator=(const FakeKubeApiServer&) = delete;

  std::string url() const;  // "http://127.0.0.1:PORT"
  int port() const;
  // Writes a kubeconfig (cluster, user with TokenFor(`user`), context with
  // namespace `ns`, current-context) pointing at url().
  absl::Status WriteKubeconfig(const std::string& path, const std::string& ns = "default",
                               const std::string& user = kFakeAdminUser) const;
  // The bearer token that authenticates as `user` (see "Identities and RBAC").
  static std::string TokenFor(const std::string& user);

  // Direct store access: same semantics and same resourceVersion counter as
  // HTTP; paths are API paths, e.g.
  // "/apis/apps/v1/namespaces/default/statefulsets/job-ps". Used by tests
  // acting as kubelet or controller-manager. Errors: see the mapping above.
  absl::StatusOr<nlohmann::json> Get(const std::string& path) const;
  // Items of a collection ("/api/v1/namespaces/default/pods", or
  // "/api/v1/pods" for all namespaces), ordered by namespace and name.
  absl::StatusOr<std::vector<nlohmann::json>> List(const std::string& collection_path) const;
  absl::StatusOr<nlohmann::json> Create(const std::string& collection_path, nlohmann::json object);
  // Conditional when object.metadata.resourceVersion is set (stale → Aborted).
  absl::StatusOr<nlohmann::json> Update(const std::string& path, nlohmann::json object);
  // The /status subresource; `path` is the object's path (a trailing
  // "/status" is accepted too).
  absl::StatusOr<nlohmann::json> UpdateStatus(const std::string& path, nlohmann::json object);
  absl::Status Delete(const std::string& path);
  // PATCH `path` (may end in /status or /scale); `content_type` as in HTTP,
  // e.g. "application/merge-patch+json".
  absl::StatusOr<nlohmann::json> Patch(const std::string& path, const nlohmann::json& patch,
                                       const std::string& content_type);
  // Creates every object of a multi-document YAML file, replacing one that
  // exists (as `kubectl apply -f` would, without the three-way merge), e.g.
  // deploy/rbac.yaml. Namespaced objects without a namespace go to
  // "default"; the namespaces must exist. Stops at the first error.
  absl::Status ApplyFile(const std::string& yaml_path);

  int64_t resource_version() const;  // The current global revision.
  // Forgets the watch history: a watch from an older resourceVersion than
  // the current one gets 410 Expired.
  void Compact();
  // Closes every open watch stream now, mid-stream (no final chunk); the
  // client must re-watch.
  void DropWatches();
  // Faults are matched in injection order; the first live match applies.
  void InjectFault(FakeKubeFault fault);
  void ClearFaults();

  // Every HTTP request answered, in order. `method` is the HTTP method
  // (watches are "GET" with watch=... in `query`, recorded when the stream
  // starts); `query` is the raw query string; `status` the HTTP status;
  // `user` who asked (see "Identities and RBAC").
  struct Request {
    std::string method;
    std::string path;
    std::string query;
    int status = 0;
    std::string user;
  };
  std::vector<Request> Requests() const;
  void ClearRequests();

  // Number of watch streams open now.
  int active_watches() const;
  // Waits until at least `n` watch streams are open. False on timeout.
  bool WaitForWatches(int n, absl::Duration timeout) const;

 private:
  class Impl;
  explicit FakeKubeApiServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_FAKE_KUBE_APISERVER_H_
