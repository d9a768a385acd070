#include "syncer/ssp_clock.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shadowsync::syncer {

SspClocks::SspClocks(SspClockOptions options) : options_(std::move(options)) {
  timer_ = std::thread([this] { TimerLoop(); });
}

SspClocks::~SspClocks() {
  Close();
  timer_.join();
}

void SspClocks::Report(const std::string& member, int64_t clock, int64_t staleness,
                       absl::Duration max_wait, ClockCallback done) {
  std::vector<Answer> answers;
  {
    MutexLock lock(&mu_);
    if (closed_) {
      answers.push_back({std::move(done), absl::UnavailableError("syncer shutting down")});
    } else {
      const absl::Time now = absl::Now();
      // Silent members must not count in the minimum a newcomer starts at.
      SweepLocked(now, &answers);
      const int64_t min = MinLocked();
      auto [it, inserted] = members_.try_emplace(member);
      Member& m = it->second;
      // A newcomer starts level with the slowest: it neither stalls the
      // others nor waits for them while it catches up.
      m.clock =
          inserted ? std::max(clock, members_.size() == 1 ? clock : min) : std::max(m.clock, clock);
      m.last_seen = now;
      ++m.waiting;
      waiters_.push_back(Waiter{.member = member,
                                .clock = clock,
                                .staleness = staleness,
                                .joined = inserted,
                                .start = now,
                                .deadline = max_wait == absl::InfiniteDuration()
                                                ? absl::InfiniteFuture()
                                                : now + max_wait,
                                .done = std::move(done)});
      ++epoch_;
      SweepLocked(now, &answers);
    }
  }
  Run(std::move(answers));
}

bool SspClocks::Leave(const std::string& member) {
  std::vector<Answer> answers;
  bool live = false;
  {
    MutexLock lock(&mu_);
    live = members_.erase(member) > 0;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->member != member) {
        ++it;
        continue;
      }
      answers.push_back(
          {std::move(it->done), absl::AbortedError(absl::StrCat("member '", member, "' left"))});
      it = waiters_.erase(it);
    }
    // The others' minimum may have risen.
    SweepLocked(absl::Now(), &answers);
  }
  Run(std::move(answers));
  return live;
}

void SspClocks::Close() {
  std::vector<Answer> answers;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    for (Waiter& w : waiters_) {
      answers.push_back({std::move(w.done), absl::UnavailableError("syncer shutting down")});
    }
    waiters_.clear();
  }
  Run(std::move(answers));
}

std::map<std::string, int64_t> SspClocks::Snapshot() const {
  ReaderMutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  std::map<std::string, int64_t> out;
  for (const auto& [name, m] : members_) {
    // Silent members not yet swept are not live.
    if (m.waiting == 0 && now - m.last_seen >= options_.member_timeout) continue;
    out.emplace(name, m.clock);
  }
  return out;
}

int64_t SspClocks::MinLocked() const {
  int64_t min = std::numeric_limits<int64_t>::max();
  for (const auto& [name, m] : members_) min = std::min(min, m.clock);
  return min;
}

ClockOutcome SspClocks::OutcomeLocked(const Waiter& w, bool released, absl::Time now) const {
  auto it = members_.find(w.member);
  return ClockOutcome{.released = released,
                      .min_clock = members_.empty() ? 0 : MinLocked(),
                      .member_clock = it == members_.end() ? w.clock : it->second.clock,
                      .joined = w.joined,
                      .live_members = static_cast<int>(members_.size()),
                      .waited = now - w.start};
}

absl::Time SspClocks::SweepLocked(absl::Time now, std::vector<Answer>* out) {
  for (auto it = members_.begin(); it != members_.end();) {
    const Member& m = it->second;
    if (m.waiting > 0 || now - m.last_seen < options_.member_timeout) {
      ++it;
      continue;
    }
    if (options_.on_dropped) options_.on_dropped(it->first, m.clock);
    it = members_.erase(it);
  }
  const int64_t min = MinLocked();
  absl::Time next = absl::InfiniteFuture();
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    // clock - staleness <= min, written so that no sum overflows.
    const bool released = it->clock - it->staleness <= min;
    if (!released && now < it->deadline) {
      next = std::min(next, it->deadline);
      ++it;
      continue;
    }
    if (auto m = members_.find(it->member); m != members_.end()) {
      --m->second.waiting;
      m->second.last_seen = now;
    }
    out->push_back({std::move(it->done), OutcomeLocked(*it, released, now)});
    it = waiters_.erase(it);
  }
  if (!waiters_.empty()) {
    // Someone waits: the silence of the slowest may release it.
    for (const auto& [name, m] : members_) {
      if (m.waiting == 0) next = std::min(next, m.last_seen + options_.member_timeout);
    }
  }
  return next;
}

void SspClocks::Run(std::vector<Answer> answers) {
  for (Answer& a : answers) a.done(std::move(a.outcome));
}

void SspClocks::TimerLoop() {
  while (true) {
    std::vector<Answer> answers;
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      const absl::Time next = SweepLocked(absl::Now(), &answers);
      if (answers.empty()) {
        const uint64_t seen = epoch_;
        mu_.AwaitWithTimeout(
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || epoch_ != seen; },
            next == absl::InfiniteFuture() ? absl::InfiniteDuration()
                                           : std::max(absl::ZeroDuration(), next - absl::Now()));
        continue;
      }
    }
    Run(std::move(answers));
  }
}

}  // namespace shadowsync::syncer
