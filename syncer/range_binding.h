// The range one syncer serves, learnt from its first request.
#ifndef SHADOWSYNC_SYNCER_RANGE_BINDING_H_
#define SHADOWSYNC_SYNCER_RANGE_BINDING_H_

#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "syncer/client/dense_range.h"

namespace shadowsync::syncer {

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

#endif  // SHADOWSYNC_SYNCER_RANGE_BINDING_H_
