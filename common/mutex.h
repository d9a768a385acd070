// The project's mutex: absl::Mutex's interface subset we use (exclusive and
// shared locks, Await on a predicate), annotated for clang's thread-safety
// analysis, built on the standard library. Mutex is thread-safe (it is
// the synchronisation); a MutexLock or ReaderMutexLock belongs to
// the scope, and thread, that made it.
//
// Why not absl::Mutex directly: Debian's libabsl is not built with
// ThreadSanitizer, so TSAN cannot see its happens-before edges and reports
// every access it guards as a race. std::shared_mutex goes through pthreads,
// which TSAN intercepts, so the `tsan` preset checks our real synchronisation.
//
//   Mutex mu;
//   int n ABSL_GUARDED_BY(mu) = 0;
//   { MutexLock l(&mu); ++n; }
//   { MutexLock l(&mu); mu.Await([&] { return n > 0; }); }
#ifndef SHADOWSYNC_COMMON_MUTEX_H_
#define SHADOWSYNC_COMMON_MUTEX_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace shadowsync {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  // Wakes Await()ers, whose predicates may have changed under the lock.
  // Notifies before unlocking: a waiter that then returns may destroy this
  // mutex (an object whose last owner awaited "done"), and notify_all after
  // the unlock would touch the destroyed condition variable.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (waiters_.load(std::memory_order_acquire) > 0) cv_.notify_all();
    mu_.unlock();
  }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

  // Blocks until pred() holds. REQUIRES: exclusively held; released while waiting.
  template <typename Pred>
  void Await(Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    AwaitWithTimeout(pred, absl::InfiniteDuration());
  }

  // As Await, giving up after `timeout`. Returns pred() at return.
  template <typename Pred>
  bool AwaitWithTimeout(Pred pred, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::shared_mutex> lock(mu_, std::adopt_lock);
    waiters_.fetch_add(1, std::memory_order_acq_rel);
    bool ok;
    if (timeout == absl::InfiniteDuration()) {
      cv_.wait(lock, pred);
      ok = true;
    } else {
      ok = cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), pred);
    }
    waiters_.fetch_sub(1, std::memory_order_acq_rel);
    lock.release();  // Still held; the caller's scope releases it.
    return ok;
  }

  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::shared_mutex mu_;
  std::condition_variable_any cv_;
  std::atomic<int> waiters_{0};
};

// Scoped exclusive lock.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Scoped shared lock.
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_MUTEX_H_
