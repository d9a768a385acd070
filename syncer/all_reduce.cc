#include "syncer/all_reduce.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shadowsync::syncer {

AllReduceRounds::AllReduceRounds(AllReduceOptions options) : options_(std::move(options)) {
  timer_ = std::thread([this] { TimerLoop(); });
}

AllReduceRounds::~AllReduceRounds() {
  Close();
  timer_.join();
}

void AllReduceRounds::Contribute(const std::string& group, const std::string& member,
                                 std::span<const float> values, RoundCallback done) {
  std::vector<Completion> completions;
  std::vector<Failure> failures;
  {
    MutexLock lock(&mu_);
    if (closed_) {
      failures.push_back({std::move(done), absl::UnavailableError("syncer shutting down")});
    } else {
      Group& g = groups_[group];
      if (!g.open.empty() && values.size() != g.length) {
        failures.push_back({std::move(done), absl::InvalidArgumentError(absl::StrCat(
                                                 "values: ", values.size(), " floats, but round ",
                                                 g.rounds_completed + 1, " of group '", group,
                                                 "' averages ", g.length))});
      } else {
        if (g.open.empty()) {
          g.opened = absl::Now();
          g.length = values.size();
          ++timer_epoch_;
        }
        auto [it, inserted] = g.open.try_emplace(member);
        if (!inserted) {
          failures.push_back(
              {std::move(it->second.done),
               absl::AbortedError(absl::StrCat("replaced by a newer contribution of member '",
                                               member, "' to group '", group, "'"))});
        }
        it->second = Pending{values, std::move(done)};
        if (g.live.insert(member).second) LiveChangedLocked(group, g);
        MaybeCompleteLocked(group, g, &completions);
      }
    }
  }
  Run(std::move(completions), std::move(failures));
}

bool AllReduceRounds::Join(const std::string& group, const std::string& member, int* live_members) {
  MutexLock lock(&mu_);
  if (closed_) {
    if (live_members != nullptr) {
      auto it = groups_.find(group);
      *live_members = it == groups_.end() ? 0 : static_cast<int>(it->second.live.size());
    }
    return false;
  }
  Group& g = groups_[group];
  // Joining never completes a round: it only adds a member to wait for.
  const bool added = g.live.insert(member).second;
  if (added) LiveChangedLocked(group, g);
  if (live_members != nullptr) *live_members = static_cast<int>(g.live.size());
  return added;
}

int AllReduceRounds::Leave(const std::string& member, std::optional<std::string> group) {
  std::vector<Completion> completions;
  std::vector<Failure> failures;
  int groups = 0;
  {
    MutexLock lock(&mu_);
    if (group.has_value()) {
      if (auto it = groups_.find(*group); it != groups_.end()) {
        groups += LeaveLocked(it->first, it->second, member, &completions, &failures) ? 1 : 0;
      }
    } else {
      for (auto& [name, g] : groups_) {
        groups += LeaveLocked(name, g, member, &completions, &failures) ? 1 : 0;
      }
    }
  }
  Run(std::move(completions), std::move(failures));
  return groups;
}

bool AllReduceRounds::LeaveLocked(const std::string& name, Group& g, const std::string& member,
                                  std::vector<Completion>* completions,
                                  std::vector<Failure>* failures) {
  if (g.live.erase(member) == 0) return false;
  if (auto it = g.open.find(member); it != g.open.end()) {
    failures->push_back(
        {std::move(it->second.done),
         absl::AbortedError(absl::StrCat("member '", member, "' left group '", name, "'"))});
    g.open.erase(it);
  }
  LiveChangedLocked(name, g);
  MaybeCompleteLocked(name, g, completions);
  return true;
}

void AllReduceRounds::Close() {
  std::vector<Failure> failures;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& [name, g] : groups_) {
      for (auto& [member, pending] : g.open) {
        failures.push_back(
            {std::move(pending.done), absl::UnavailableError("syncer shutting down")});
      }
      g.open.clear();
    }
  }
  Run({}, std::move(failures));
}

std::vector<GroupSnapshot> AllReduceRounds::Snapshot() const {
  ReaderMutexLock lock(&mu_);
  std::vector<GroupSnapshot> out;
  out.reserve(groups_.size());
  for (const auto& [name, g] : groups_) {
    GroupSnapshot s{.group = name,
                    .rounds_completed = g.rounds_completed,
                    .live_members = {g.live.begin(), g.live.end()},
                    .contributors = {},
                    .dropped_members = g.dropped_members};
    for (const auto& [member, pending] : g.open) s.contributors.push_back(member);
    out.push_back(std::move(s));
  }
  return out;
}

void AllReduceRounds::MaybeCompleteLocked(const std::string& name, Group& g,
                                          std::vector<Completion>* out) {
  // Contributors are always live, so equal sizes mean every live member is in.
  if (g.open.empty() || g.open.size() != g.live.size()) return;
  ++g.rounds_completed;
  if (options_.observer != nullptr) {
    options_.observer->OnRoundComplete(name, g.rounds_completed, static_cast<int>(g.open.size()),
                                       absl::Now() - g.opened);
  }
  out->push_back(Completion{.round = g.rounds_completed, .contributions = std::move(g.open)});
  g.open.clear();
}

absl::Time AllReduceRounds::ExpireLocked(absl::Time now, std::vector<Completion>* out) {
  absl::Time next = absl::InfiniteFuture();
  for (auto& [name, g] : groups_) {
    if (g.open.empty()) continue;
    const absl::Time deadline = g.opened + options_.member_timeout;
    if (deadline > now) {
      next = std::min(next, deadline);
      continue;
    }
    bool dropped = false;
    for (auto it = g.live.begin(); it != g.live.end();) {
      if (g.open.contains(*it)) {
        ++it;
        continue;
      }
      ++g.dropped_members;
      dropped = true;
      if (options_.observer != nullptr) {
        options_.observer->OnMemberDropped(name, *it, g.rounds_completed + 1);
      }
      it = g.live.erase(it);
    }
    if (dropped) LiveChangedLocked(name, g);
    MaybeCompleteLocked(name, g, out);
  }
  return next;
}

void AllReduceRounds::LiveChangedLocked(const std::string& name, const Group& g) {
  if (options_.observer != nullptr) {
    options_.observer->OnLiveMembers(name, static_cast<int>(g.live.size()));
  }
}

void AllReduceRounds::Run(std::vector<Completion> completions, std::vector<Failure> failures) {
  for (Failure& f : failures) f.done(std::move(f.status));
  for (Completion& c : completions) {
    const size_t length = c.contributions.begin()->second.values.size();
    // Member-name order (the map's), in double: the same result whatever the
    // arrival order.
    std::vector<double> sum(length, 0.0);
    for (const auto& [member, pending] : c.contributions) {
      const float* v = pending.values.data();
      for (size_t i = 0; i < length; ++i) sum[i] += static_cast<double>(v[i]);
    }
    const double members = static_cast<double>(c.contributions.size());
    auto mean = std::make_shared<std::vector<float>>(length);
    for (size_t i = 0; i < length; ++i) (*mean)[i] = static_cast<float>(sum[i] / members);
    const RoundOutcome outcome{.round = c.round,
                               .members = static_cast<int>(c.contributions.size()),
                               .mean = std::move(mean)};
    for (auto& [member, pending] : c.contributions) pending.done(outcome);
  }
}

void AllReduceRounds::TimerLoop() {
  while (true) {
    std::vector<Completion> completions;
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      const absl::Time next = ExpireLocked(absl::Now(), &completions);
      if (completions.empty()) {
        const uint64_t seen = timer_epoch_;
        mu_.AwaitWithTimeout(
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || timer_epoch_ != seen; },
            next == absl::InfiniteFuture() ? absl::InfiniteDuration() : next - absl::Now());
        continue;
      }
    }
    Run(std::move(completions), {});
  }
}

}  // namespace shadowsync::syncer
