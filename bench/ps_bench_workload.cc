// ps_bench (bench/ps_bench_internal.h): the precomputed id stream, Zipf draws by
// rejection-inversion, de-duplicated per table as the trainer does.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/ps_bench_internal.h"
#include "common/hash.h"

namespace shadowsync::bench::internal {
namespace {

// Zipf(s) over ranks 1..n by rejection-inversion (Hörmann & Derflinger, "Rejection-inversion to
// generate variates from monotone discrete distributions", 1996; the form of Apache Commons
// RNG's RejectionInversionZipfSampler). O(1) per sample with no table, and the acceptance rate
// is above 90% for s = 1.1, so a few log/exp calls per sample: an alias table over 10M ranks
// would need 120 MB and be slower to build than the whole stream is to draw.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double s)
      : n_(static_cast<double>(n)),
        s_(s),
        h_integral_x1_(HIntegral(1.5) - 1.0),
        h_integral_n_(HIntegral(n_ + 0.5)),
        s_div_(2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0))) {}

  // A rank in [1, n] from a uniform in [0, 1) per attempt (`uniform` is called once per try).
  template <typename Uniform>
  int64_t Sample(Uniform&& uniform) const {
    while (true) {
      const double u = h_integral_n_ + uniform() * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      double k = std::floor(x + 0.5);
      k = std::clamp(k, 1.0, n_);
      if (k - x <= s_div_ || u >= HIntegral(k + 0.5) - H(k)) return static_cast<int64_t>(k);
    }
  }

 private:
  // (x^(1-s) - 1) / (1 - s), stable near s = 1.
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1.0 - s_) * log_x) * log_x;
  }
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;  // Rounding can push it past the domain.
    return std::exp(Helper1(t) * x);
  }
  // log1p(x) / x and expm1(x) / x, with their series near 0.
  static double Helper1(double x) {
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double Helper2(double x) {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x
                              : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }

  double n_, s_, h_integral_x1_, h_integral_n_, s_div_;
};

uint64_t RankToId(int64_t rank, int table, int64_t n) {
  // 7654321 is odd and not a multiple of 5, so coprime with 10^7 (and any n it does not divide).
  const unsigned __int128 a = 7654321, c = Mix64(0xbe7c4 + table) % static_cast<uint64_t>(n);
  return static_cast<uint64_t>((a * static_cast<uint64_t>(rank - 1) + c) %
                               static_cast<uint64_t>(n));
}

}  // namespace

Workload MakeWorkload(const Flags& f) {
  Workload w;
  w.tables = f.tables;
  w.batches = f.batches;
  const ZipfSampler zipf(f.ids, f.zipf);
  uint64_t counter = Mix64(f.seed);
  auto uniform = [&counter] {
    return static_cast<double>(Mix64(counter++) >> 11) * (1.0 / 9007199254740992.0);
  };
  // Sampling alone, timed on its own so its cost can be compared with a step's.
  const int64_t draws = f.batches * f.tables * f.batch;
  std::vector<int64_t> ranks(static_cast<size_t>(draws));
  const Clock::time_point start = Clock::now();
  for (int64_t& r : ranks) r = zipf.Sample(uniform);
  w.sample_seconds = Seconds(Clock::now() - start);
  w.draws = draws;
  w.rank1_fraction =
      static_cast<double>(std::count(ranks.begin(), ranks.end(), 1)) / static_cast<double>(draws);

  w.offsets.reserve(static_cast<size_t>(f.batches * f.tables + 1));
  w.offsets.push_back(0);
  w.batch_rows.assign(static_cast<size_t>(f.batches), 0);
  std::vector<uint64_t> buf(static_cast<size_t>(f.batch));
  size_t next = 0;
  for (int64_t b = 0; b < f.batches; ++b) {
    for (int t = 0; t < f.tables; ++t) {
      for (int i = 0; i < f.batch; ++i) buf[i] = RankToId(ranks[next++], t, f.ids);
      std::sort(buf.begin(), buf.end());
      const auto end = std::unique(buf.begin(), buf.end());
      w.ids.insert(w.ids.end(), buf.begin(), end);
      w.offsets.push_back(w.ids.size());
      w.batch_rows[b] += end - buf.begin();
    }
  }
  w.total_seconds = Seconds(Clock::now() - start);
  // Distinct rows over the whole stream: the working set both systems hold after warm-up.
  for (int t = 0; t < f.tables; ++t) {
    std::vector<uint64_t> all;
    for (int64_t b = 0; b < f.batches; ++b) {
      const auto s = w.Ids(b, t);
      all.insert(all.end(), s.begin(), s.end());
    }
    std::sort(all.begin(), all.end());
    w.distinct_rows += std::unique(all.begin(), all.end()) - all.begin();
  }
  return w;
}

double ZipfRank1Probability(int64_t n, double s) {
  double h = 0;
  for (int64_t k = n; k >= 1; --k) h += std::pow(static_cast<double>(k), -s);
  return 1.0 / h;
}

}  // namespace shadowsync::bench::internal
