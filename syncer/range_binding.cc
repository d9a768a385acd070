#include "syncer/range_binding.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace shadowsync::syncer {

absl::Status RangeBinding::Check(const DenseRange& request, const char* length_field, bool bind) {
  // Well-formedness first, so a malformed first request binds nothing.
  if (request.total <= 0) return absl::InvalidArgumentError("total: must be positive");
  if (request.length <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(length_field, ": empty"));
  }
  if (request.offset < 0 || request.offset >= request.total) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset: ", request.offset, " is outside a total of ", request.total));
  }
  if (request.length > request.total - request.offset) {
    return absl::InvalidArgumentError(absl::StrCat(length_field, ": ", request.length,
                                                   " floats from offset ", request.offset,
                                                   " run past the total of ", request.total));
  }
  MutexLock lock(&mu_);
  if (!range_.has_value()) {
    if (bind) range_ = request;
    return absl::OkStatus();
  }
  const DenseRange& held = *range_;
  const std::string holds = absl::StrCat(", but this syncer holds ", held.ToString());
  if (request.total != held.total) {
    return absl::InvalidArgumentError(absl::StrCat("total: ", request.total, holds));
  }
  if (request.offset != held.offset) {
    return absl::InvalidArgumentError(absl::StrCat("offset: ", request.offset, holds));
  }
  if (request.length != held.length) {
    return absl::InvalidArgumentError(
        absl::StrCat(length_field, ": ", request.length, " floats", holds));
  }
  return absl::OkStatus();
}

std::optional<DenseRange> RangeBinding::range() const {
  MutexLock lock(&mu_);
  return range_;
}

}  // namespace shadowsync::syncer
