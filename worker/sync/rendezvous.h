// A barrier for a trainer's Hogwild threads whose party shrinks as threads
// run out of data: the last thread to arrive runs the round while the
// others wait, and every thread returns the round's status. Used by the
// foreground strategies (fg-*, bsp), ds-sync and sync-switch. Thread-safe:
// it is what the training threads meet at.
#ifndef SHADOWSYNC_WORKER_SYNC_RENDEZVOUS_H_
#define SHADOWSYNC_WORKER_SYNC_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace shadowsync::worker {

class Rendezvous {
 public:
  explicit Rendezvous(int parties) : parties_(parties) {}

  absl::Status Arrive(const std::function<absl::Status()>& round) {
    MutexLock l(&mu_);
    const uint64_t generation = generation_;
    ++arrived_;
    while (generation_ == generation) {
      if (arrived_ >= parties_ && !running_) {
        running_ = true;
        mu_.Unlock();
        absl::Status status = round();
        mu_.Lock();
        status_ = std::move(status);
        running_ = false;
        arrived_ = 0;
        ++generation_;
        break;
      }
      auto done_or_ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return generation_ != generation || (arrived_ >= parties_ && !running_);
      };
      mu_.Await(done_or_ready);
    }
    return status_;
  }

  // A party that will never arrive again; a waiting round may now be complete.
  void Leave() {
    MutexLock l(&mu_);
    --parties_;
  }

 private:
  Mutex mu_;
  int parties_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shadowsync::worker

#endif  // SHADOWSYNC_WORKER_SYNC_RENDEZVOUS_H_
