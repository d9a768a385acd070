// Private to data/: the synthetic generator's planted teacher and the
// random numbers it draws (data/synthetic.h). One file per concern:
//   synthetic_teacher.cc  the teacher model: its parameters from the seed,
//                         sampling rows, logits, calibration, description
//   synthetic.cc          GenerateSynthetic: blocks of examples in order,
//                         formatted (and gzipped), the teacher's report
// Teacher (and its AliasTables) are immutable once calibrated: SampleRow,
// Logit and IdValue are const and run on the worker threads at once. Rng is
// not thread-safe; one per block.
#ifndef SHADOWSYNC_DATA_SYNTHETIC_INTERNAL_H_
#define SHADOWSYNC_DATA_SYNTHETIC_INTERNAL_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "common/example.h"
#include "common/hash.h"
#include "nlohmann/json.hpp"

namespace shadowsync::synthetic_internal {

// Insertion-ordered, so the report reads top-down like the struct.
using Json = nlohmann::ordered_json;

// Bump whenever the bytes produced for a given set of options change.
inline constexpr int kGeneratorVersion = 1;
// Part of the output format: block b always holds examples
// [b * kBlockExamples, (b + 1) * kBlockExamples) from RNG stream b.
inline constexpr int64_t kBlockExamples = 4096;

// Keys of the independent random streams derived from the seed.
enum class Stream : uint64_t {
  kStructure = 1,    // Vocabularies, exponents, weights, pairs.
  kCalibration = 2,  // The calibration rows.
  kIdParams = 3,     // Per-id teacher parameters.
  kScramble = 4,     // Rank -> hex value scrambles.
  kBlocks = 5,       // Base of the per-block streams.
};

inline uint64_t StreamKey(uint64_t seed, Stream stream) {
  return Mix64(Mix64(seed) ^ Mix64(0x5e7d'0000'0000'0000ULL + static_cast<uint64_t>(stream)));
}

// xoshiro256** (Blackman & Vigna): fast, and its output is fully specified,
// unlike std:: distributions whose algorithms vary across standard libraries.
class Rng {
 public:
  explicit Rng(uint64_t key) {
    for (int i = 0; i < 4; ++i) s_[i] = Mix64(key + static_cast<uint64_t>(i));
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Standard normal (Box-Muller, caching the second value).
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = Uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    spare_ = radius * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return radius * std::cos(2.0 * M_PI * u2);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

// MurmurHash3's 32-bit finaliser: a bijection on 32 bits.
inline uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bU;
  h ^= h >> 13;
  h *= 0xc2b2ae35U;
  h ^= h >> 16;
  return h;
}

// Walker/Vose alias table: O(1) sampling from a fixed discrete distribution,
// one 64-bit random number per draw, integer-only so draws are exact.
class AliasTable {
 public:
  explicit AliasTable(const std::vector<double>& weights) {
    const size_t n = weights.size();
    threshold_.assign(n, 0xffffffffU);
    alias_.resize(n);
    std::iota(alias_.begin(), alias_.end(), 0u);
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    std::vector<double> scaled(n);
    std::vector<uint32_t> small, large;
    for (size_t i = 0; i < n; ++i) {
      scaled[i] = weights[i] * static_cast<double>(n) / total;
      (scaled[i] < 1.0 ? small : large).push_back(static_cast<uint32_t>(i));
    }
    while (!small.empty() && !large.empty()) {
      const uint32_t s = small.back();
      small.pop_back();
      const uint32_t l = large.back();
      threshold_[s] = static_cast<uint32_t>(scaled[s] * 0x1.0p32);
      alias_[s] = l;
      scaled[l] -= 1.0 - scaled[s];
      if (scaled[l] < 1.0) {
        large.pop_back();
        small.push_back(l);
      }
    }
    // Whatever is left has weight 1 up to rounding and keeps itself.
  }

  // Returns an index in [0, size()).
  uint32_t Sample(uint64_t random) const {
    const uint32_t column =
        static_cast<uint32_t>(((random >> 32) * static_cast<uint64_t>(threshold_.size())) >> 32);
    return static_cast<uint32_t>(random) < threshold_[column] ? column : alias_[column];
  }

 private:
  std::vector<uint32_t> threshold_;  // P(keep column) scaled to 2^32.
  std::vector<uint32_t> alias_;
};

// Most ids a multi-hot field holds (SyntheticOptions::max_ids_per_field).
inline constexpr int kMaxIdsPerField = 16;

// One generated example before formatting. rank[t] == 0 means missing. A
// multi-hot field's further ids, more[t] of them, follow in more_rank,
// column by column.
struct Row {
  std::array<int64_t, kCriteoDense> dense;
  std::array<bool, kCriteoDense> dense_missing;
  std::array<uint32_t, kCriteoSparse> rank;
  std::array<uint8_t, kCriteoSparse> more{};
  std::vector<uint32_t> more_rank;
};

// Which columns hold several ids (SyntheticOptions).
struct MultiHot {
  int columns = 0;  // The last `columns` of the 26.
  int max_ids = 1;
};

// The teacher's parameters of one id: m_t(r), c_t m_t(r) z_t(r) and
// m_t(r) y_t(r) (the last only for tables in a dense x id term).
struct IdParams {
  double strength = 1;
  double bias = 0;
  double dense_id = 0;
};

struct Table {
  int64_t vocabulary = 0;
  double exponent = 0;
  double bias_weight = 0;  // c_t.
  uint32_t scramble_key = 0;
  // Ranks up to full_rank have P(r) >= kFullEffectProb; m_t(r) decays as
  // (r / full_rank)^-decay_slope beyond.
  double full_rank = 0;
  double decay_slope = 0;
  uint64_t bias_key = 0;
  uint64_t dense_id_key = 0;
  bool has_dense_id = false;
  std::unique_ptr<AliasTable> sampler;  // Over ranks 1..vocabulary.
  std::vector<IdParams> cache;          // Ranks 0 (missing) .. kCachedRanks - 1.
};

struct Pair {
  int t, u;
  uint64_t key_t, key_u;
};
struct DenseIdTerm {
  int dense, table;
};

// The planted model and the input distributions, fixed by the seed.
class Teacher {
 public:
  explicit Teacher(uint64_t seed, MultiHot multi_hot = {});

  // Draws one row's features.
  void SampleRow(Rng* rng, Row* row) const;
  // The teacher's logit for `row`. REQUIRES: Calibrate() ran.
  double Logit(const Row& row) const;
  // Fits the standardisation, term scales and intercept on a sample.
  void Calibrate();
  // The scrambled 32-bit value written for `rank` of table t.
  uint32_t IdValue(int t, uint32_t rank) const { return Fmix32(rank ^ tables_[t].scramble_key); }

  Json Describe() const;

 private:
  struct Terms {
    double dense, id_bias, pairs, dense_id;
  };
  Terms ComputeTerms(const Row& row) const;
  // The id terms of a row with multi-hot fields, each field the mean of its ids.
  void AddPooledIdTerms(const Row& row, const std::array<double, kCriteoDense>& g,
                        Terms* terms) const;
  IdParams ComputeIdParams(int t, uint32_t rank) const;
  const IdParams& Params(int t, uint32_t rank, IdParams* scratch) const {
    const Table& table = tables_[t];
    if (rank < table.cache.size()) return table.cache[rank];
    *scratch = ComputeIdParams(t, rank);
    return *scratch;
  }

  uint64_t seed_;
  MultiHot multi_hot_;
  std::array<Table, kCriteoSparse> tables_;
  std::array<double, kCriteoDense> dense_mu_, dense_sigma_, dense_weight_;
  int product_a_ = 0, product_b_ = 0;  // The dense product term's columns.
  std::vector<Pair> pairs_;
  std::vector<DenseIdTerm> dense_id_terms_;
  // Set by Calibrate().
  std::array<double, kCriteoDense> dense_mean_{}, dense_inv_sd_{};
  Terms term_scale_{1, 1, 1, 1};
  double intercept_ = 0;
};

inline double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace shadowsync::synthetic_internal

#endif  // SHADOWSYNC_DATA_SYNTHETIC_INTERNAL_H_
