// An informer: a local, eventually consistent cache of one resource
// collection, kept current by list-then-watch on its own thread, with change
// callbacks — client-go's reflector + store + shared informer in one class.
// It watches again from the last resourceVersion seen, relists on 410 Gone
// and delivers the difference, and backs off on errors (docs/operator.md,
// "The Kubernetes client layer").
//
// Callbacks run on the informer's thread after the cache has been updated,
// one at a time, in event order; they should be quick (enqueue a key).
// Everything else is thread-safe.
//
//   Informer pods(client, "/api/v1/namespaces/ml/pods", "shadowsync.io/job");
//   pods.AddEventHandler({.on_add = [&](const Json& p) { queue.Add(OwnerKey(p)); }, ...});
//   pods.Start();
//   pods.WaitForSync(absl::Seconds(30));
#ifndef SHADOWSYNC_OPERATOR_INFORMER_H_
#define SHADOWSYNC_OPERATOR_INFORMER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "operator/kube_client.h"

namespace shadowsync::kube {

struct InformerOptions {
  std::string field_selector;
  // Each watch asks the server to end it after a random time in [min, max]
  // (whole seconds), so that reconnects of many clients spread out.
  // Default: 300..600 s, as client-go's reflector.
  absl::Duration min_watch_timeout = absl::Minutes(5);
  absl::Duration max_watch_timeout = absl::Minutes(10);
  // Backoff after a failed LIST or WATCH. Default: 800 ms doubling to 30 s.
  absl::Duration initial_backoff = absl::Milliseconds(800);
  absl::Duration max_backoff = absl::Seconds(30);
};

// Change callbacks. Any may be empty. on_update also fires for an unchanged
// object seen again on a relist only if its resourceVersion changed.
struct ResourceEventHandlers {
  std::function<void(const Json& object)> on_add;
  std::function<void(const Json& old_object, const Json& new_object)> on_update;
  // For a delete seen on a relist, `object` is the last state the cache had.
  std::function<void(const Json& object)> on_delete;
};

class Informer {
 public:
  // `collection_path` as for KubeClient::List; `client` must outlive this.
  Informer(KubeClient* client, std::string collection_path, std::string label_selector = "",
           InformerOptions options = {});
  ~Informer();  // Stops.
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // REQUIRES: before Start().
  void AddEventHandler(ResourceEventHandlers handlers);

  // Starts the list-and-watch thread. REQUIRES: not started yet.
  void Start();
  // Cancels the watch and joins the thread; idempotent. No callback runs
  // after it returns.
  void Stop();

  // True once the first LIST has been stored (and its adds delivered).
  bool HasSynced() const;
  // Waits up to `timeout` for HasSynced().
  bool WaitForSync(absl::Duration timeout) const;

  // The cached object, by namespace ("" for cluster-scoped) and name.
  std::optional<Json> Get(const std::string& ns, const std::string& name) const;
  // The cached object by ObjectKey.
  std::optional<Json> GetByKey(const std::string& key) const;
  // Every cached object, ordered by key.
  std::vector<Json> ListCached() const;
  // The resourceVersion the next watch would start from.
  std::string last_resource_version() const;

  // Counters for tests and metrics.
  struct Stats {
    int lists = 0;    // LIST calls that succeeded.
    int watches = 0;  // WATCH calls started.
    int relists_after_expiry = 0;
  };
  Stats stats() const;

 private:
  void Run();
  // LIST and replace the cache, delivering the differences. OK or the error.
  absl::Status ListAndReplace();
  // One WATCH from last_rv_.
  absl::Status WatchOnce();
  void Deliver(const std::string& type, const Json* old_object, const Json& object);

  // Constant after construction:
  KubeClient* const client_;
  const std::string collection_path_;
  const std::string label_selector_;
  const InformerOptions options_;

  // Set before Start(), read-only after:
  std::vector<ResourceEventHandlers> handlers_;

  Cancellation cancel_;  // Has its own synchronization.
  std::thread thread_;   // Touched only by Start/Stop (the owner's thread).

  mutable Mutex mu_;
  std::map<std::string, Json> cache_ ABSL_GUARDED_BY(mu_);  // By ObjectKey.
  std::string last_rv_ ABSL_GUARDED_BY(mu_);
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shadowsync::kube

#endif  // SHADOWSYNC_OPERATOR_INFORMER_H_
