// The SSP (stale synchronous parallel) clocks of a job, without any gRPC:
// members report their clocks and wait until they are at most `staleness`
// ahead of the slowest live member. Thread-safe; waits complete through
// callbacks, so a waiting report holds no thread.
//
// Semantics (proto/shadowsync/v1/syncer.proto, ClockRequest, has the full
// contract): a report of `clock` completes once
// clock <= min over live members' clocks + staleness (the reporter
// included). A member's clock is the largest it reported. Live members are
// those that reported and neither left nor stayed silent for
// `member_timeout`; a member with a waiting report is not silent. A member
// that is not live when it reports starts at max(clock, current minimum),
// so the minimum never decreases.
//
//   SspClocks clocks(SspClockOptions{.member_timeout = absl::Seconds(10)});
//   clocks.Report("trainer-0", 5, /*staleness=*/2, absl::InfiniteDuration(),
//                 [](absl::StatusOr<ClockOutcome> r) { ... });
#ifndef SHADOWSYNC_SYNCER_SSP_CLOCK_H_
#define SHADOWSYNC_SYNCER_SSP_CLOCK_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace shadowsync::syncer {

struct ClockOutcome {
  bool released = false;     // clock <= min_clock + staleness
  int64_t min_clock = 0;     // over the live members, at the answer
  int64_t member_clock = 0;  // the reporter's recorded clock
  bool joined = false;       // this report made the member live
  int live_members = 0;
  absl::Duration waited;  // from the report to the answer
};
using ClockCallback = std::function<void(absl::StatusOr<ClockOutcome>)>;

struct SspClockOptions {
  // A member that has not reported for this long, and has no waiting
  // report, stops holding the others back. Default: 10s.
  absl::Duration member_timeout = absl::Seconds(10);
  // Called (with the lock held: quick, no calls back) for each member
  // dropped for silence. May be empty.
  std::function<void(const std::string& member, int64_t clock)> on_dropped;
};

class SspClocks {
 public:
  explicit SspClocks(SspClockOptions options);
  // Close(), then joins the timer thread.
  ~SspClocks();

  SspClocks(const SspClocks&) = delete;
  SspClocks& operator=(const SspClocks&) = delete;

  // Records `member`'s `clock` and runs `done` exactly once: released when
  // clock <= minimum + staleness (at once, or on the thread of the report,
  // Leave or timer expiry that makes it so), unreleased after `max_wait`,
  // UNAVAILABLE after Close(). REQUIRES: clock >= 0, staleness >= 0.
  void Report(const std::string& member, int64_t clock, int64_t staleness, absl::Duration max_wait,
              ClockCallback done);

  // Removes `member`'s clock; waiting reports that then fit complete. Its
  // own waiting reports are answered unreleased. Returns whether it was live.
  bool Leave(const std::string& member);

  // Answers every waiting report, and every later one, UNAVAILABLE.
  void Close();

  // The live members' clocks.
  std::map<std::string, int64_t> Snapshot() const;

 private:
  struct Member {
    int64_t clock = 0;
    absl::Time last_seen;
    int waiting = 0;  // reports of the member not yet answered
  };
  struct Waiter {
    std::string member;
    int64_t clock = 0;
    int64_t staleness = 0;
    bool joined = false;
    absl::Time start;
    absl::Time deadline;
    ClockCallback done;
  };
  struct Answer {
    ClockCallback done;
    absl::StatusOr<ClockOutcome> outcome;
  };

  int64_t MinLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops silent members, answers waiters that fit or are out of time, and
  // returns the next time something may expire.
  absl::Time SweepLocked(absl::Time now, std::vector<Answer>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ClockOutcome OutcomeLocked(const Waiter& w, bool released, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(std::vector<Answer> answers);
  void TimerLoop();

  // Constant after construction.
  const SspClockOptions options_;

  mutable Mutex mu_;
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped when a waiter is added, so the timer recomputes its deadline.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread timer_;
};

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_SSP_CLOCK_H_
