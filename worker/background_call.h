// One call at a time on a thread kept for the object's lifetime: the
// trainer's prefetch of the next batch's embedding rows during a step.
// A std::async per step cost a thread's creation, stack and exit each step:
// in perf of the sync bench, clone and exit samples fell from 0.67% of the
// machine to 0.2% (the processes' own exits) with this.
//
//   BackgroundCall prefetch;
//   prefetch.Start([&] { return store->Lookup(rows); });
//   ... compute ...
//   absl::Status looked_up = prefetch.Wait();
//
// Not thread-safe: one owner thread calls Start and Wait; the call runs on
// the object's own thread.
#ifndef SHADOWSYNC_WORKER_BACKGROUND_CALL_H_
#define SHADOWSYNC_WORKER_BACKGROUND_CALL_H_

#include <functional>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace shadowsync::worker {

class BackgroundCall {
 public:
  BackgroundCall() = default;
  BackgroundCall(const BackgroundCall&) = delete;
  BackgroundCall& operator=(const BackgroundCall&) = delete;
  // Waits for a call in flight, then ends the thread.
  ~BackgroundCall();

  // Runs `fn` on the thread (started on first use). REQUIRES: no call in
  // flight (every Start is followed by Wait before the next).
  void Start(std::function<absl::Status()> fn);
  // Blocks until the started call returns; gives its status.
  // REQUIRES: a call was started since the last Wait.
  absl::Status Wait();

 private:
  void Loop();

  Mutex mu_;
  std::function<absl::Status()> fn_ ABSL_GUARDED_BY(mu_);  // Set while queued.
  std::optional<absl::Status> result_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Started and joined by the owner only.
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_BACKGROUND_CALL_H_
