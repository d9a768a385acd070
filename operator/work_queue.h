// A rate-limited work queue of string keys ("namespace/name"), with
// client-go's workqueue semantics, so a controller built on it behaves like
// one built on controller-runtime:
//  - a key is queued at most once however often it is Add()ed (`dirty`);
//  - a key is handed to at most one worker at a time (`processing`); Add()
//    while it is processed queues it again when the worker calls Done();
//  - AddAfter() delays a key; AddRateLimited() delays it by the key's
//    exponential backoff (5 ms doubling to 1000 s) and an overall token bucket
//    (10 qps, burst 100), the larger of the two; Forget() resets the backoff.
// Thread-safe.
//
//   while (auto key = queue.Get()) {     // nullopt after ShutDown()
//     absl::Status s = Reconcile(*key);
//     if (s.ok()) queue.Forget(*key); else queue.AddRateLimited(*key);
//     queue.Done(*key);
//   }
#ifndef SHADOWSYNC_OPERATOR_WORK_QUEUE_H_
#define SHADOWSYNC_OPERATOR_WORK_QUEUE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace shadowsync::kube {

struct RateLimiterOptions {
  // Per-key backoff: base_delay * 2^(failures), capped at max_delay.
  // Default: 5 ms .. 1000 s (client-go's DefaultControllerRateLimiter).
  absl::Duration base_delay = absl::Milliseconds(5);
  absl::Duration max_delay = absl::Seconds(1000);
  // Overall token bucket shared by all keys, so a burst of failing keys does
  // not hammer the API server. qps <= 0 disables it. Default: 10 qps, burst 100.
  double qps = 10;
  int burst = 100;
};

// How long to wait before retrying a key. Not thread-safe: WorkQueue guards it.
class RateLimiter {
 public:
  explicit RateLimiter(RateLimiterOptions options = {});
  // Records one more failure of `key` at `now` and returns its delay.
  absl::Duration When(const std::string& key, absl::Time now);
  // Resets `key`'s backoff (it succeeded).
  void Forget(const std::string& key);
  // Failures recorded for `key` since the last Forget.
  int NumRequeues(const std::string& key) const;

 private:
  const RateLimiterOptions options_;
  absl::flat_hash_map<std::string, int> failures_;
  double tokens_;
  absl::Time refilled_at_ = absl::InfinitePast();
};

class WorkQueue {
 public:
  explicit WorkQueue(RateLimiterOptions options = {});
  ~WorkQueue();  // Shuts down; REQUIRES: no thread is still in Get().
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `key` unless it is already queued. Ignored after ShutDown().
  void Add(const std::string& key);
  // Queues `key` once `delay` has passed (at once if delay <= 0). A key
  // already waiting keeps the earlier of its two times.
  void AddAfter(const std::string& key, absl::Duration delay);
  // AddAfter with the rate limiter's delay for `key`.
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;

  // Blocks until a key is ready and returns it, marking it processing; the
  // caller must call Done(key). Returns nullopt once shut down and no queued
  // key is left (queued keys are still handed out after ShutDown()).
  std::optional<std::string> Get();
  // Ends processing of `key`; queues it again if it was added meanwhile.
  void Done(const std::string& key);

  // Stops accepting keys, drops delayed ones, wakes every Get().
  void ShutDown();
  // ShutDown, then waits until every key handed out is Done().
  void ShutDownWithDrain();
  bool ShuttingDown() const;

  // Keys ready to be handed out (not processing, not waiting on a delay).
  size_t Len() const;

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves delayed keys whose time has come to the queue.
  void PromoteReadyLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);       // Needs processing.
  absl::flat_hash_set<std::string> processing_ ABSL_GUARDED_BY(mu_);  // Handed out.
  // Delayed keys by ready time, and each waiting key's time (for dedup).
  std::multimap<absl::Time, std::string> waiting_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> waiting_at_ ABSL_GUARDED_BY(mu_);
  // Bumped by AddAfter so that Get() re-arms its timer for an earlier key.
  int64_t waiting_generation_ ABSL_GUARDED_BY(mu_) = 0;
  RateLimiter limiter_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shadowsync::kube

#endif  // SHADOWSYNC_OPERATOR_WORK_QUEUE_H_
