// A small generic Kubernetes REST client over cpprestsdk (docs/operator.md):
// path-based CRUD on JSON objects, list, streaming watch. Objects are
// nlohmann::json as the server sends them; typed views belong to callers.
//
// Every call blocks its calling thread until the answer is in, so call it from
// your own threads (informer, workers, elector), never from a PPL
// continuation: cpprestsdk's pool threads must not block. A KubeClient is
// safe for concurrent use.
//
//   SS_ASSIGN_OR_RETURN(auto client, KubeClient::FromConfig(config));
//   const std::string pods =
//       ResourcePath{.version = "v1", .plural = "pods", .ns = "ml"}.Collection();
//   SS_ASSIGN_OR_RETURN(ListResult list, client->List(pods, {.label_selector = "app=x"}));
//   absl::Status s = client->Watch(pods, {.resource_version = list.resource_version},
//                                  [&](const WatchEvent& e) { ...; return true; });
//
// Errors are absl codes mapped from the HTTP status (StatusFromHttp). A call
// that fails with Unavailable may still have been applied, so a retried
// Create can meet AlreadyExists for its own object (docs/operator.md, "The
// Kubernetes client layer").
#ifndef SHADOWSYNC_OPERATOR_KUBE_CLIENT_H_
#define SHADOWSYNC_OPERATOR_KUBE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "operator/kube_config.h"

namespace shadowsync::kube {

using Json = nlohmann::json;

// ---------------------------------------------------------------------------
// Paths

// Names one resource collection, object or subresource.
//   ResourcePath{"apps", "v1", "statefulsets", "ml", "job-ps"}.ToString()
//     == "/apis/apps/v1/namespaces/ml/statefulsets/job-ps"
//   ResourcePath{"", "v1", "pods", "ml"}.ToString() == "/api/v1/namespaces/ml/pods"
// An empty `ns` means cluster-scoped, or all namespaces for a collection.
struct ResourcePath {
  std::string group;  // "" for the core group (/api/v1).
  std::string version;
  std::string plural;
  std::string ns;
  std::string name;         // "" for the collection.
  std::string subresource;  // "status", "scale"; needs a name.

  // The full path of what the fields name.
  std::string ToString() const;
  // The collection path, ignoring name and subresource.
  std::string Collection() const;
};

// The path of the object `object` inside `collection_path`, e.g. for
// Create's result: ObjectPath("/api/v1/namespaces/a/pods", pod) + "/status".
std::string ObjectPath(std::string_view collection_path, const Json& object);

// "namespace/name", or "name" for a cluster-scoped object (client-go's
// MetaNamespaceKeyFunc): the key informers cache by and work queues carry.
std::string ObjectKey(const Json& object);
// Splits a key from ObjectKey into namespace ("" if none) and name.
std::pair<std::string, std::string> SplitObjectKey(std::string_view key);

// metadata.resourceVersion of `object`, "" if absent.
std::string ResourceVersionOf(const Json& object);

// Percent-encodes a query parameter value (label selectors contain = , !).
std::string QueryEscape(std::string_view value);

// ---------------------------------------------------------------------------
// Errors

// Maps an API server answer to a Status: 404 NotFound; 409 with reason
// AlreadyExists AlreadyExists, other 409 Aborted; 410 OutOfRange; 400/422
// InvalidArgument; 401 Unauthenticated; 403 PermissionDenied; 429
// ResourceExhausted; 5xx Unavailable; other non-2xx Unknown. The message
// names the method, path, code and the metav1.Status message in `body`.
absl::Status StatusFromHttp(std::string_view method, std::string_view path, int code,
                            std::string_view body);

// Calls fn() until it returns anything but Aborted (a 409 Conflict), at most
// `attempts` times, sleeping ~10 ms (jittered) in between. fn must re-read the
// object it updates, so each attempt carries a fresh resourceVersion.
absl::Status RetryOnConflict(const std::function<absl::Status()>& fn, int attempts = 5);

// ---------------------------------------------------------------------------
// Cancellation

// Cancels blocking calls (Watch) and sleeps from another thread. One-shot and
// thread-safe; shared by a loop and whoever stops it.
class Cancellation {
 public:
  void Cancel();
  bool cancelled() const;
  // Sleeps for `d` or until cancelled. Returns false if cancelled.
  bool SleepFor(absl::Duration d);
  // Runs `fn` on Cancel(), or at once if already cancelled. Returns an id for
  // Unregister, which must be called before what `fn` touches goes away;
  // Unregister waits for a running `fn` to finish.
  int Register(std::function<void()> fn);
  void Unregister(int id);

 private:
  mutable Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = -1;  // The id whose fn Cancel() is running.
  std::vector<std::pair<int, std::function<void()>>> callbacks_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------
// Watch framing

// Splits a watch stream into lines: feed it bytes as they arrive, in chunks
// that may cut lines anywhere, and take the complete lines; the partial tail
// is kept for the next Feed. "\r\n" and blank lines are tolerated. Not
// thread-safe: one per stream.
class LineSplitter {
 public:
  // Appends `bytes` and returns the lines completed by them, without "\n".
  std::vector<std::string> Feed(std::string_view bytes);
  // What is left of an unterminated last line.
  const std::string& tail() const { return tail_; }

 private:
  std::string tail_;
};

// ---------------------------------------------------------------------------
// Client

enum class PatchType {
  kMerge,           // application/merge-patch+json (RFC 7386); works for CRs.
  kJsonPatch,       // application/json-patch+json (RFC 6902); body is an array.
  kStrategicMerge,  // application/strategic-merge-patch+json; built-in types only.
};

enum class PropagationPolicy { kBackground, kForeground, kOrphan };

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  // "" (default): a consistent read of the latest state. "0": any cached state.
  std::string resource_version;
  // Page size; the pages are joined. 0: one unpaginated request.
  int64_t limit = 500;
};

struct ListResult {
  std::vector<Json> items;
  std::string resource_version;  // The list's metadata.resourceVersion: watch from here.
};

struct WatchOptions {
  std::string resource_version;  // Events after this version; "": from now-ish.
  std::string label_selector;
  std::string field_selector;
  // The server ends the stream after this long, Watch then returns OK.
  // The watch's HTTP idle timeout is set above it (+ watch_timeout_margin).
  int64_t timeout_seconds = 300;
  bool allow_bookmarks = true;
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK (ERROR ends Watch).
  Json object;
};

// Decodes one line of a watch stream: {"type": "<string>", "object": {...}}.
// InvalidArgument naming what is wrong for anything else (not JSON, type
// missing or not a string, object missing or not an object), so one bad line
// is skipped rather than ending the watch or the process.
absl::StatusOr<WatchEvent> ParseWatchLine(std::string_view line);

struct KubeClientOptions {
  // HTTP idle timeout of ordinary calls. Default: 30 s.
  absl::Duration request_timeout = absl::Seconds(30);
  // Added to a watch's timeout_seconds for its client's idle timeout, so the
  // server, not cpprestsdk's timer, ends a quiet watch. Default: 30 s.
  absl::Duration watch_timeout_margin = absl::Seconds(30);
  std::string user_agent = "shadowsync-operator";
};

class KubeClient {
 public:
  // Builds the HTTP clients (and TLS context) for `config`. Connects lazily;
  // InvalidArgument if the server URL is malformed.
  static absl::StatusOr<std::unique_ptr<KubeClient>> FromConfig(KubeConfig config,
                                                                KubeClientOptions options = {});
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  const KubeConfig& config() const;

  // GET `path` (an object path).
  absl::StatusOr<Json> Get(const std::string& path);
  // GET a collection, following `continue` pages.
  absl::StatusOr<ListResult> List(const std::string& collection_path,
                                  const ListOptions& options = {});
  // POST `object` to the collection; returns the created object.
  absl::StatusOr<Json> Create(const std::string& collection_path, const Json& object);
  // PUT `object` (with the resourceVersion it was read at: a stale one is
  // Aborted) to `path`; returns the stored object.
  absl::StatusOr<Json> Update(const std::string& path, const Json& object);
  // PUT `path`/status: only .status changes.
  absl::StatusOr<Json> UpdateStatus(const std::string& path, const Json& object);
  absl::StatusOr<Json> Patch(const std::string& path, const Json& patch,
                             PatchType type = PatchType::kMerge);
  absl::StatusOr<Json> PatchStatus(const std::string& path, const Json& patch,
                                   PatchType type = PatchType::kMerge);
  // DELETE with DeleteOptions{propagationPolicy}. NotFound if already gone.
  absl::Status Delete(const std::string& path,
                      PropagationPolicy propagation = PropagationPolicy::kBackground);
  // The scale subresource (autoscaling/v1 Scale) of `path`.
  absl::StatusOr<Json> GetScale(const std::string& path);
  absl::StatusOr<Json> UpdateScale(const std::string& path, const Json& scale);

  // Streams events of `collection_path` to `on_event` (called on this thread)
  // until:
  //  - the server ends the stream (timeout_seconds): OK;
  //  - on_event returns false: OK;
  //  - an ERROR event: its Status mapped as StatusFromHttp (410 Expired/Gone
  //    is OutOfRange: the caller must relist);
  //  - the connection fails: Unavailable; a non-2xx answer: mapped;
  //  - `cancel` (may be null) is cancelled: Cancelled.
  // Each watch uses its own HTTP client, whose idle timeout exceeds timeout_seconds.
  absl::Status Watch(const std::string& collection_path, const WatchOptions& options,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     Cancellation* cancel = nullptr);

  // One request, for anything the helpers above do not cover. `body` null:
  // no body. Returns the parsed JSON answer (null for an empty body).
  absl::StatusOr<Json> Request(const std::string& method, const std::string& path_and_query,
                               const Json* body,
                               const std::string& content_type = "application/json");

 private:
  class Impl;
  explicit KubeClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shadowsync::kube

#endif  // SHADOWSYNC_OPERATOR_KUBE_CLIENT_H_
