// The range partition of a dense vector over the syncer replicas, and the
// range a syncer serves, learnt from its first request.
//
// Replica i of S holds [i*n/S, (i+1)*n/S) of the n floats (integer division
// on int64), so ranges differ in length by at most one.
#ifndef SHADOWSYNC_SYNCER_DENSE_RANGE_H_
#define SHADOWSYNC_SYNCER_DENSE_RANGE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace shadowsync::syncer {

// A slice [offset, offset + length) of a vector of `total` floats.
struct DenseRange {
  int64_t offset = 0;
  int64_t length = 0;
  int64_t total = 0;

  int64_t end() const { return offset + length; }
  bool operator==(const DenseRange&) const = default;
  // "[0, 250000) of 500000"
  std::string ToString() const;
};

// The range replica `replica` of `replicas` holds of `total` floats.
// REQUIRES: 0 <= replica < replicas, total >= 0.
DenseRange ReplicaRange(int replica, int replicas, int64_t total);

// The range one syncer serves: unset until the first well-formed request
// binds it, fixed afterwards. Thread-safe.
class RangeBinding {
 public:
  // OK if `request` is this syncer's range, binding it if none is bound yet.
  // INVALID_ARGUMENT naming the field otherwise ("offset: 1000, but this
  // syncer holds [0, 250000) of 500000"); `length_field` names the request
  // field carrying the length ("values", "delta", "length"). A malformed
  // request (zero total or length, beyond total) never binds, nor does one
  // with `bind` false (a request without data, whose length is only claimed:
  // it is checked against the bound range, if any).
  absl::Status Check(const DenseRange& request, const char* length_field, bool bind = true);
  // The bound range, or nullopt.
  std::optional<DenseRange> range() const;

 private:
  mutable Mutex mu_;
  std::optional<DenseRange> range_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_DENSE_RANGE_H_
