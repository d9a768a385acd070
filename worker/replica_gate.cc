#include "worker/replica_gate.h"

#include <chrono>

namespace shadowsync::worker {

absl::Duration ReplicaGate::Run(absl::FunctionRef<void()> fn) {
  if (!serialised_) {
    fn();
    return absl::ZeroDuration();
  }
  const auto start = std::chrono::steady_clock::now();
  MutexLock l(&mu_);
  Request request{fn};
  if (open_) {
    waiting_.push_back(&request);
    pending_.store(true, std::memory_order_release);
    auto served_or_closed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return request.done || !open_;
    };
    mu_.Await(served_or_closed);
  }
  const absl::Duration waited = absl::FromChrono(std::chrono::steady_clock::now() - start);
  // Under the lock: Open waits for it, so no step overlaps it.
  if (!request.done) fn();
  return waited;
}

void ReplicaGate::ServeWaiting() {
  MutexLock l(&mu_);
  for (Request* r : waiting_) {
    r->fn();
    r->done = true;
  }
  waiting_.clear();
  pending_.store(false, std::memory_order_relaxed);
}

void ReplicaGate::Open() {
  if (!serialised_) return;
  MutexLock l(&mu_);
  open_ = true;
}

void ReplicaGate::Close() {
  if (!serialised_) return;
  MutexLock l(&mu_);
  open_ = false;
  // Their callers run them (they are awake once the lock is released).
  waiting_.clear();
  pending_.store(false, std::memory_order_relaxed);
}

}  // namespace shadowsync::worker
