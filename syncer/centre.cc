#include "syncer/centre.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace shadowsync::syncer {
namespace {

absl::Status NotInitialised() {
  return absl::FailedPreconditionError("centre not initialised: call InitCentre first");
}

absl::Status CheckLength(const char* what, size_t got, size_t want) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", got, " floats, but the centre has ", want));
}

}  // namespace

absl::StatusOr<uint64_t> Centre::Init(std::span<const float> values, std::span<float> out) {
  MutexLock lock(&mu_);
  if (!initialised_) {
    values_.assign(values.begin(), values.end());
    initialised_ = true;
  }
  if (absl::Status s = CheckLength("values", values.size(), values_.size()); !s.ok()) return s;
  if (!out.empty()) {
    if (absl::Status s = CheckLength("out", out.size(), values_.size()); !s.ok()) return s;
    std::copy(values_.begin(), values_.end(), out.begin());
  }
  return version_;
}

absl::StatusOr<uint64_t> Centre::Read(std::span<float> out) const {
  ReaderMutexLock lock(&mu_);
  if (!initialised_) return NotInitialised();
  if (!out.empty()) {
    if (absl::Status s = CheckLength("out", out.size(), values_.size()); !s.ok()) return s;
    std::copy(values_.begin(), values_.end(), out.begin());
  }
  return version_;
}

absl::StatusOr<uint64_t> Centre::Add(std::span<const float> delta, std::span<float> out) {
  MutexLock lock(&mu_);
  if (!initialised_) return NotInitialised();
  if (absl::Status s = CheckLength("delta", delta.size(), values_.size()); !s.ok()) return s;
  if (!out.empty()) {
    if (absl::Status s = CheckLength("out", out.size(), values_.size()); !s.ok()) return s;
  }
  float* c = values_.data();
  const float* d = delta.data();
  for (size_t i = 0; i < values_.size(); ++i) c[i] += d[i];
  ++version_;
  if (!out.empty()) std::copy(values_.begin(), values_.end(), out.begin());
  return version_;
}

bool Centre::initialised() const {
  ReaderMutexLock lock(&mu_);
  return initialised_;
}

uint64_t Centre::version() const {
  ReaderMutexLock lock(&mu_);
  return version_;
}

}  // namespace shadowsync::syncer
