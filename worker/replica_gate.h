// Access to a trainer's dense replica from threads other than its training
// threads: the shadow sync thread, checkpoints, curve evaluations.
//
// Hogwild threads write the replica with relaxed atomic stores, which an
// outside thread may read and write at any time. A lone training thread
// writes it with plain, vectorised stores and computes on it in place
// (without the per-step snapshot a concurrent writer would force), so an
// outside access must not overlap its steps: the gate hands the access to
// the training thread, which runs it between two steps (Serve).
//
//   ReplicaGate gate(/*serialised=*/threads == 1);
//   training thread:  gate.Open(); while (...) { Step(); gate.Serve(); } gate.Close();
//   outside thread:   gate.Run([&] { CopyRelaxed(params, snapshot, n); });
//
// Thread-safe: Open, Serve and Close from the training thread, Run from any
// number of other threads.
#ifndef SHADOWSYNC_WORKER_REPLICA_GATE_H_
#define SHADOWSYNC_WORKER_REPLICA_GATE_H_

#include <atomic>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace shadowsync::worker {

class ReplicaGate {
 public:
  // `serialised`: one training thread writes with plain stores. Otherwise
  // Run calls its function at once and Serve does nothing.
  explicit ReplicaGate(bool serialised) : serialised_(serialised) {}
  ReplicaGate(const ReplicaGate&) = delete;
  ReplicaGate& operator=(const ReplicaGate&) = delete;

  bool serialised() const { return serialised_; }

  // Outside threads. Runs `fn`, which reads or writes the replica with
  // relaxed atomics: on the training thread at its next step boundary while
  // it is open, else on the caller. Returns the time spent waiting for the
  // boundary (idle time, not the access's cost).
  absl::Duration Run(absl::FunctionRef<void()> fn);

  // The training thread, between steps: runs the accesses waiting. One
  // relaxed load when none is.
  void Serve() {
    if (pending_.load(std::memory_order_acquire)) ServeWaiting();
  }

  // The training thread starts stepping, and is done (or failed): the
  // accesses waiting, and later ones, run on their callers.
  void Open();
  void Close();

 private:
  struct Request {
    absl::FunctionRef<void()> fn;
    bool done = false;
  };
  void ServeWaiting();

  const bool serialised_;
  std::atomic<bool> pending_{false};
  Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Request*> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_REPLICA_GATE_H_
