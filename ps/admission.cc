#include "ps/admission.h"

#include <algorithm>
#include <cstdint>

#include "common/hash.h"

namespace shadowsync::ps::internal {

uint32_t CountMinSketch::Add(uint64_t hash) {
  uint32_t estimate = UINT32_MAX;
  for (int r = 0; r < kRows; ++r) {
    uint16_t& c = counters_[r * kWidth + (Mix64(hash + r) & (kWidth - 1))];
    if (c < UINT16_MAX) ++c;
    estimate = std::min<uint32_t>(estimate, c);
  }
  if (++additions_ >= kDecayEvery) {
    for (size_t i = 0; i < kRows * kWidth; ++i) counters_[i] /= 2;
    additions_ = 0;
  }
  return estimate;
}

}  // namespace shadowsync::ps::internal
