#include "worker/background_call.h"

#include <utility>

namespace shadowsync::worker {

BackgroundCall::~BackgroundCall() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void BackgroundCall::Start(std::function<absl::Status()> fn) {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  MutexLock lock(&mu_);
  fn_ = std::move(fn);
  result_.reset();
}

absl::Status BackgroundCall::Wait() {
  MutexLock lock(&mu_);
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return result_.has_value(); });
  absl::Status status = std::move(*result_);
  result_.reset();
  return status;
}

void BackgroundCall::Loop() {
  while (true) {
    std::function<absl::Status()> fn;
    {
      MutexLock lock(&mu_);
      // A queued call runs even once stop_ is set: the owner may destroy
      // this object after a Start without a Wait (an early error return).
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return fn_ != nullptr || stop_; });
      if (fn_ == nullptr) return;
      fn = std::move(fn_);
      fn_ = nullptr;
    }
    absl::Status status = fn();
    MutexLock lock(&mu_);
    result_ = std::move(status);  // The unlock wakes Wait.
  }
}

}  // namespace shadowsync::worker
