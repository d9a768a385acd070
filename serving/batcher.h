// Dynamic batching: concurrent requests' examples scored together in one
// forward pass, on scoring threads of the batcher's own (with full-size
// stacks, unlike the HTTP server's). A scoring thread takes the oldest
// request and whatever else is queued, up to max_batch_examples, waiting at
// most max_delay for more to arrive.
//
//   Batcher batcher(*scorer, {.threads = 2});
//   SS_ASSIGN_OR_RETURN(std::vector<float> p, batcher.Score(std::move(block)));
//
// Thread-safe.
#ifndef SHADOWSYNC_SERVING_BATCHER_H_
#define SHADOWSYNC_SERVING_BATCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/example.h"
#include "common/mutex.h"
#include "serving/scorer.h"

namespace shadowsync::serving {

struct BatcherOptions {
  int threads = 2;  // Scoring threads.
  // A request larger than this is scored alone. Larger batches run the GEMMs
  // nearer their peak: 1024 served 1.2-1.5x the examples/s of 256 in
  // bench/run.sh serve at 64 clients.
  int max_batch_examples = 1024;
  absl::Duration max_delay = absl::Milliseconds(1);
  // Called with each forward pass's example count (for metrics).
  std::function<void(int64_t examples)> on_batch;
};

class Batcher {
 public:
  explicit Batcher(BatcherOptions options);
  // Scores what is queued, then stops.
  ~Batcher();

  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // The probabilities of `block`'s examples, as scorer->Score gives them.
  absl::StatusOr<std::vector<float>> Score(std::shared_ptr<const Scorer> scorer,
                                           ExampleBlock block);

 private:
  struct Request;
  void Run();

  const BatcherOptions options_;
  Mutex mu_;
  std::deque<Request*> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_examples_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_BATCHER_H_
