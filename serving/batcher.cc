#include "serving/batcher.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>

namespace shadowsync::serving {

// Each request is woken on its own condition variable: Mutex::Await wakes
// every waiter on every unlock, and with a request thread waiting per
// client that herd cost serve more CPU than its forward passes.
struct Batcher::Request {
  std::shared_ptr<const Scorer> scorer;
  ExampleBlock block;
  absl::Time enqueued;
  absl::StatusOr<std::vector<float>> result = absl::UnknownError("not scored");
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;  // Guarded by done_mu.
};

Batcher::Batcher(BatcherOptions options) : options_(std::move(options)) {
  for (int i = 0; i < std::max(1, options_.threads); ++i) threads_.emplace_back([this] { Run(); });
}

Batcher::~Batcher() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::StatusOr<std::vector<float>> Batcher::Score(std::shared_ptr<const Scorer> scorer,
                                                  ExampleBlock block) {
  Request request{.scorer = std::move(scorer), .block = std::move(block), .enqueued = absl::Now()};
  {
    MutexLock lock(&mu_);
    queue_.push_back(&request);
    queued_examples_ += request.block.size();
  }  // The unlock wakes the scoring threads' Await.
  std::unique_lock<std::mutex> lock(request.done_mu);
  request.done_cv.wait(lock, [&] { return request.done; });
  return std::move(request.result);
}

void Batcher::Run() {
  while (true) {
    std::vector<Request*> batch;
    {
      MutexLock lock(&mu_);
      mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // Stopping, and nothing is left.
      const absl::Duration waited = absl::Now() - queue_.front()->enqueued;
      if (waited < options_.max_delay) {
        mu_.AwaitWithTimeout(
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
              return stopping_ || queued_examples_ >= options_.max_batch_examples;
            },
            options_.max_delay - waited);
      }
      if (queue_.empty()) continue;  // Another thread took them meanwhile.
      int64_t examples = 0;
      while (!queue_.empty() && (batch.empty() || (queue_.front()->scorer == batch[0]->scorer &&
                                                   examples + queue_.front()->block.size() <=
                                                       options_.max_batch_examples))) {
        examples += queue_.front()->block.size();
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
      queued_examples_ -= examples;
    }
    absl::StatusOr<std::vector<float>> probs;
    if (batch.size() == 1) {
      probs = batch[0]->scorer->Score(batch[0]->block);
    } else {
      ExampleBlock merged = batch[0]->block;
      for (size_t i = 1; i < batch.size(); ++i) merged.Append(batch[i]->block);
      probs = batch[0]->scorer->Score(merged);
    }
    if (options_.on_batch && probs.ok()) options_.on_batch(static_cast<int64_t>(probs->size()));
    int64_t begin = 0;
    for (Request* r : batch) {
      const int64_t size = r->block.size();
      {
        std::lock_guard<std::mutex> lock(r->done_mu);
        if (!probs.ok()) {
          r->result = probs.status();
        } else if (batch.size() == 1) {
          r->result = std::move(*probs);
        } else {
          r->result = std::vector<float>(probs->begin() + begin, probs->begin() + begin + size);
        }
        r->done = true;
        // Notified under the lock: once the waiter sees `done` it returns
        // and destroys the request, condition variable included.
        r->done_cv.notify_one();
      }
      begin += size;
    }
  }
}

}  // namespace shadowsync::serving
