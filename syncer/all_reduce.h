// All-reduce rounds with explicit membership, per named group: the mean of
// the members' vectors, without any gRPC. A round completes when every live
// member has contributed; a member silent for `member_timeout` is dropped;
// the mean does not depend on the order of arrival (docs/sync.md, "All-reduce
// membership, exactly", has the rules). Thread-safe; contributions complete
// through callbacks, so a waiting contribution holds no thread.
//
//   AllReduceRounds rounds(AllReduceOptions{.member_timeout = absl::Seconds(10)});
//   rounds.Contribute("", "trainer-0", values, [](absl::StatusOr<RoundOutcome> r) {
//     ...  // runs once the round completes; `values` must stay valid until then
//   });
#ifndef SHADOWSYNC_SYNCER_ALL_REDUCE_H_
#define SHADOWSYNC_SYNCER_ALL_REDUCE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace shadowsync::syncer {

struct RoundOutcome {
  uint64_t round = 0;  // completed rounds of the group, this one included
  int members = 0;     // contributions averaged
  // The mean, shared by every contributor of the round.
  std::shared_ptr<const std::vector<float>> mean;
};
using RoundCallback = std::function<void(absl::StatusOr<RoundOutcome>)>;

// Hooks for logs and metrics. Called with the rounds' lock held, so one at a
// time: they must be quick and must not call back into AllReduceRounds.
class AllReduceObserver {
 public:
  virtual ~AllReduceObserver() = default;
  virtual void OnRoundComplete(const std::string& group, uint64_t round, int members,
                               absl::Duration elapsed) {}
  virtual void OnMemberDropped(const std::string& group, const std::string& member,
                               uint64_t round) {}
  virtual void OnLiveMembers(const std::string& group, int live) {}
};

struct AllReduceOptions {
  // How long after a round's first contribution a live member may still
  // contribute before it is dropped. Default: 10s.
  absl::Duration member_timeout = absl::Seconds(10);
  // Not owned; may be null. Must outlive the AllReduceRounds.
  AllReduceObserver* observer = nullptr;
};

// One group, as Snapshot() reports it.
struct GroupSnapshot {
  std::string group;
  uint64_t rounds_completed = 0;
  std::vector<std::string> live_members;  // sorted
  std::vector<std::string> contributors;  // of the open round, sorted
  uint64_t dropped_members = 0;
};

class AllReduceRounds {
 public:
  explicit AllReduceRounds(AllReduceOptions options);
  // Close(), then joins the timer thread.
  ~AllReduceRounds();

  AllReduceRounds(const AllReduceRounds&) = delete;
  AllReduceRounds& operator=(const AllReduceRounds&) = delete;

  // Adds `member`'s `values` to the open round of `group`. `done` runs exactly
  // once: with the outcome when the round completes (on the thread that
  // completes it: this one, another contributor's, a Leave caller's or the
  // timer thread), or with an error: INVALID_ARGUMENT if `values` differs in
  // length from the open round's, ABORTED if a newer contribution of the
  // member replaces this one or the member leaves, UNAVAILABLE after Close().
  // `values` must stay valid until `done` runs.
  void Contribute(const std::string& group, const std::string& member,
                  std::span<const float> values, RoundCallback done);

  // Makes `member` live in `group` (creating the group if needed) without
  // contributing: the open round, or the next one if none is open, waits for
  // its contribution, subject to the usual drop after `member_timeout` from
  // the round's first contribution. Idempotent. Returns whether the member
  // was newly added (false if it was already live, or after Close()). If
  // `live_members` is not null, it receives the group's live members after
  // the call.
  bool Join(const std::string& group, const std::string& member, int* live_members = nullptr);

  // Removes `member` from `group`, or from every group if `group` is
  // nullopt, failing its pending contributions there with ABORTED; rounds
  // that then have every live contribution complete. Returns the number of
  // groups the member was live in (and left).
  int Leave(const std::string& member, std::optional<std::string> group = std::nullopt);

  // Fails every pending contribution, and every later one, with UNAVAILABLE.
  // Idempotent.
  void Close();

  // Every group, sorted by name.
  std::vector<GroupSnapshot> Snapshot() const;

 private:
  struct Pending {
    std::span<const float> values;
    RoundCallback done;
  };
  struct Group {
    uint64_t rounds_completed = 0;
    uint64_t dropped_members = 0;
    std::set<std::string> live;
    std::map<std::string, Pending> open;  // by member: the summation order
    absl::Time opened;                    // first contribution to the open round
    size_t length = 0;                    // of the open round's vectors
  };
  // A completed round, averaged and answered outside the lock.
  struct Completion {
    uint64_t round = 0;
    std::map<std::string, Pending> contributions;
  };
  struct Failure {
    RoundCallback done;
    absl::Status status;
  };

  // Completes the open round of `g` if every live member contributed.
  void MaybeCompleteLocked(const std::string& name, Group& g, std::vector<Completion>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the laggards of groups whose round has timed out at `now` and
  // completes those rounds; returns the next deadline.
  absl::Time ExpireLocked(absl::Time now, std::vector<Completion>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LiveChangedLocked(const std::string& name, const Group& g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leave() for one group; returns whether `member` was live in it.
  bool LeaveLocked(const std::string& name, Group& g, const std::string& member,
                   std::vector<Completion>* completions, std::vector<Failure>* failures)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(std::vector<Completion> completions, std::vector<Failure> failures);
  void TimerLoop();

  // Constant after construction.
  const AllReduceOptions options_;

  mutable Mutex mu_;
  std::map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped when a round opens, so the timer thread recomputes its deadline.
  uint64_t timer_epoch_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread timer_;
};

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_ALL_REDUCE_H_
