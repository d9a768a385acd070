// Min-count admission (RowStoreOptions::admission_min_count): how often each
// row not yet stored has been pushed, counted in bounded memory. Internal to
// the row store. Not thread-safe: the store calls it under its writer lock
// (RowStoreImpl::write_mu_).
#ifndef SHADOWSYNC_PS_ADMISSION_H_
#define SHADOWSYNC_PS_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shadowsync::ps::internal {

// Counts occurrences in bounded memory for min-count admission: a count-min
// sketch of 16-bit counters, all halved periodically so stale counts age out
// (TinyLFU's reset). May over-count through collisions, never under-count
// within a period.
class CountMinSketch {
 public:
  CountMinSketch() : counters_(new uint16_t[kRows * kWidth]()) {}

  // Adds one occurrence of `hash` and returns its estimated count.
  uint32_t Add(uint64_t hash);

 private:
  static constexpr int kRows = 4;
  static constexpr size_t kWidth = size_t{1} << 18;
  static constexpr int64_t kDecayEvery = int64_t{1} << 21;
  std::unique_ptr<uint16_t[]> counters_;
  int64_t additions_ = 0;
};

}  // namespace shadowsync::ps::internal

#endif  // SHADOWSYNC_PS_ADMISSION_H_
