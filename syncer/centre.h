// The centre variable of one syncer's range: the EASGD centre, and the global
// weights of the async modes. Set once by the first Init, then changed only
// by atomic element-wise adds, each of which bumps the version. Thread-safe:
// adds are serialised, reads see a whole add or none of it.
#ifndef SHADOWSYNC_SYNCER_CENTRE_H_
#define SHADOWSYNC_SYNCER_CENTRE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace shadowsync::syncer {

class Centre {
 public:
  // Every `out` below is either empty (no copy wanted) or as long as the
  // centre; the callers write straight into a response's buffer.

  // Sets the centre to `values` if it has none yet (the first caller wins),
  // copies the current centre into `out` and returns the version.
  // InvalidArgument if `values` or `out` differ in length from the centre.
  absl::StatusOr<uint64_t> Init(std::span<const float> values, std::span<float> out);
  // Copies the centre into `out`; returns the version. FailedPrecondition
  // before Init.
  absl::StatusOr<uint64_t> Read(std::span<float> out) const;
  // centre += delta, version += 1; copies the centre after this add into
  // `out` and returns the new version. FailedPrecondition before Init;
  // InvalidArgument if `delta` differs in length from the centre.
  absl::StatusOr<uint64_t> Add(std::span<const float> delta, std::span<float> out);

  bool initialised() const;
  uint64_t version() const;

 private:
  mutable Mutex mu_;
  bool initialised_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<float> values_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_CENTRE_H_
