#include "operator/work_queue.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace shadowsync::kube {

// ---------------------------------------------------------------------------
// RateLimiter

RateLimiter::RateLimiter(RateLimiterOptions options)
    : options_(options), tokens_(static_cast<double>(options.burst)) {}

absl::Duration RateLimiter::When(const std::string& key, absl::Time now) {
  // Per key: base * 2^failures, computed in floating point so that a key
  // failing for days does not overflow before the cap.
  const int failures = failures_[key]++;
  const double item_seconds =
      absl::ToDoubleSeconds(options_.base_delay) * std::pow(2.0, std::min(failures, 1000));
  absl::Duration delay = item_seconds >= absl::ToDoubleSeconds(options_.max_delay)
                             ? options_.max_delay
                             : absl::Seconds(item_seconds);
  if (options_.qps > 0) {
    // Token bucket (golang.org/x/time/rate Reserve): refill, take one token;
    // a negative balance is the time until it is paid back.
    if (refilled_at_ != absl::InfinitePast() && now > refilled_at_) {
      tokens_ = std::min(static_cast<double>(options_.burst),
                         tokens_ + absl::ToDoubleSeconds(now - refilled_at_) * options_.qps);
    }
    refilled_at_ = std::max(refilled_at_, now);
    tokens_ -= 1;
    if (tokens_ < 0) delay = std::max(delay, absl::Seconds(-tokens_ / options_.qps));
  }
  return delay;
}

void RateLimiter::Forget(const std::string& key) { failures_.erase(key); }

int RateLimiter::NumRequeues(const std::string& key) const {
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

// ---------------------------------------------------------------------------
// WorkQueue

WorkQueue::WorkQueue(RateLimiterOptions options) : limiter_(options) {}

WorkQueue::~WorkQueue() { ShutDown(); }

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_ || dirty_.contains(key)) return;
  dirty_.insert(key);
  if (processing_.contains(key)) return;  // Done() queues it.
  queue_.push_back(key);
}

void WorkQueue::Add(const std::string& key) {
  MutexLock lock(&mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  MutexLock lock(&mu_);
  if (shutting_down_) return;
  if (delay <= absl::ZeroDuration()) {
    AddLocked(key);
    return;
  }
  const absl::Time at = absl::Now() + delay;
  auto it = waiting_at_.find(key);
  if (it != waiting_at_.end()) {
    if (it->second <= at) return;
    // Move the key to the earlier time.
    auto range = waiting_.equal_range(it->second);
    for (auto w = range.first; w != range.second; ++w) {
      if (w->second == key) {
        waiting_.erase(w);
        break;
      }
    }
  }
  waiting_.emplace(at, key);
  waiting_at_[key] = at;
  ++waiting_generation_;
}

void WorkQueue::AddRateLimited(const std::string& key) {
  absl::Duration delay;
  {
    MutexLock lock(&mu_);
    delay = limiter_.When(key, absl::Now());
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  MutexLock lock(&mu_);
  limiter_.Forget(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  MutexLock lock(&mu_);
  return limiter_.NumRequeues(key);
}

void WorkQueue::PromoteReadyLocked(absl::Time now) {
  while (!waiting_.empty() && waiting_.begin()->first <= now) {
    const std::string key = std::move(waiting_.begin()->second);
    waiting_.erase(waiting_.begin());
    waiting_at_.erase(key);
    AddLocked(key);
  }
}

std::optional<std::string> WorkQueue::Get() {
  MutexLock lock(&mu_);
  while (true) {
    PromoteReadyLocked(absl::Now());
    if (!queue_.empty()) break;
    if (shutting_down_) return std::nullopt;
    // Sleep until something is queued, the earliest delayed key is due, an
    // earlier delayed key arrives, or shutdown.
    const int64_t generation = waiting_generation_;
    const absl::Duration timeout =
        waiting_.empty() ? absl::InfiniteDuration() : waiting_.begin()->first - absl::Now();
    mu_.AwaitWithTimeout(
        [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || shutting_down_ || waiting_generation_ != generation;
        },
        timeout);
  }
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  MutexLock lock(&mu_);
  processing_.erase(key);
  if (dirty_.contains(key)) queue_.push_back(key);
}

void WorkQueue::ShutDown() {
  MutexLock lock(&mu_);
  shutting_down_ = true;
  waiting_.clear();
  waiting_at_.clear();
}

void WorkQueue::ShutDownWithDrain() {
  MutexLock lock(&mu_);
  shutting_down_ = true;
  waiting_.clear();
  waiting_at_.clear();
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return processing_.empty(); });
}

bool WorkQueue::ShuttingDown() const {
  MutexLock lock(&mu_);
  return shutting_down_;
}

size_t WorkQueue::Len() const {
  MutexLock lock(&mu_);
  // Count the due delayed keys as Get() would queue them, without moving them.
  size_t n = queue_.size();
  const absl::Time now = absl::Now();
  for (auto it = waiting_.begin(); it != waiting_.end() && it->first <= now; ++it) {
    if (!dirty_.contains(it->second) && !processing_.contains(it->second)) ++n;
  }
  return n;
}

}  // namespace shadowsync::kube
