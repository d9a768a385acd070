// Synthetic Criteo-layout data with labels from a planted teacher.
//
// Inputs. Each example has 13 integer counts x_j and 26 categorical ids. The
// id of table t is a Zipf(s_t) rank r in 1..V_t (s_t in [1.05, 1.40], V_t from
// 3 to ~240k, both derived from the seed), written as the 8-hex-digit value of
// a per-table bijective scramble of r, so frequent ids are not small numbers.
// Missing fields (empty in the TSV) follow the Criteo sample's rates and come
// in the same correlated groups (e.g. C19, C20, C25, C26 are missing together
// for ~44% of rows). Missing categorical fields are rank 0 below.
//
// Teacher. With f_j = log(1 + max(x_j, 0)) (0 when missing, exactly what the
// reader hands the model) and g_j = (f_j - mean_j) / sd_j:
//
//   logit = b + a_D * (sum_j w_j g_j + 0.5 g_p g_q)          dense
//             + a_B * sum_t c_t m_t(r_t) z_t(r_t)             per-id biases
//             + a_P * sum_{(t,u) in P} <v_t(r_t), v_u(r_u)>   id x id
//             + a_X * sum_{(j,t) in X} g_j m_t(r_t) y_t(r_t)  dense x id
//   label ~ Bernoulli(sigmoid(logit))
//
// z, y ~ N(0, 1) and v (kLatentDim components, uniform with unit variance,
// each side scaled by m / sqrt(kLatentDim)) are pure functions of (seed,
// table, rank) through Mix64, so no per-id storage is needed. P holds
// kNumPairs disjoint table pairs, X kNumDenseIdTerms (dense, table) pairs,
// both among the tables of at most kMaxInteractionVocabulary ids; w ~ N(0, 1),
// c_t ~ U[0.25, 1], p != q. Every term lies in the student DLRM's
// family: linear and product terms of the log-features go through the bottom
// MLP, a per-id scalar is the dot product of the embedding with a constant
// direction of the bottom output, id x id terms are embedding dot products,
// dense x id terms are dot products of the bottom output with an embedding.
// A missing categorical field is its own id, as it is for the student.
//
// Learnability. m_t(r) = min(1, P_t(r) / kFullEffectProb)^kTailDecay: only
// ids seen in more than kFullEffectProb of the rows get full effects, and
// rarer ones get effects that shrink with their frequency, so the long tail,
// which no student can estimate from ~1M examples, carries almost none of the
// signal. For a Bayes-optimal student that knows this form, the expected
// excess logloss is ~0.3% of the teacher's at 1M training examples; a DLRM
// trained by one pass of `shadowsync train` (seed 1, 200k held out) ends
// further off: NE 2.8% above the teacher's after 1M examples and 1.8% after
// 2M with bottom 64-32, top 128-64 and 2^18 rows per table; 4.0% and 2.8%
// with the default DLRM-small. Moving signal from the dense terms to the id
// terms or giving rarer ids full effects (a smaller kFullEffectProb) widens
// the gap.
//
// Calibration. On kCalibrationExamples rows from their own RNG stream the
// generator measures mean_j, sd_j and each term's standard deviation, sets
// a_D, a_B, a_P, a_X so the terms have the kTargetStd* spreads, and solves b
// by bisection so the mean probability is kTargetCtr. This keeps the CTR at
// ~0.25 and the teacher's NE at ~0.78 for every seed.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "common/example.h"
#include "common/hash.h"
#include "data/synthetic_internal.h"

namespace shadowsync::synthetic_internal {
namespace {

constexpr double kTargetCtr = 0.25;
constexpr int kLatentDim = 4;
constexpr int kNumPairs = 6;
constexpr int kNumDenseIdTerms = 4;
// Only tables with at most this many ids (before jitter) take part in pairs
// and dense x id terms; 18 of the 26 qualify.
constexpr int64_t kMaxInteractionVocabulary = 20000;
constexpr double kFullEffectProb = 5e-3;
constexpr double kTailDecay = 1.0;
// Spreads of the four teacher terms' logits; together they put the teacher's
// NE near 0.78 at a CTR of 0.25, like good models on real Criteo data. The
// dense term is the easiest for a DLRM to learn, the interactions the hardest.
constexpr double kTargetStdDense = 1.2;
constexpr double kTargetStdIdBias = 0.7;
constexpr double kTargetStdPairs = 0.35;
constexpr double kTargetStdDenseId = 0.2;
constexpr int64_t kCalibrationExamples = 10000;
// Per-id parameters of ranks below this are precomputed: Zipf puts most
// draws there, and each costs a log and a cos otherwise.
constexpr uint32_t kCachedRanks = 1024;

// A standard normal that is a pure function of `key`.
double NormalFromKey(uint64_t key) {
  const uint64_t h = Mix64(key);
  const double u1 = (static_cast<double>(h >> 32) + 0.5) * 0x1.0p-32;
  const double u2 = static_cast<double>(h & 0xffffffffULL) * 0x1.0p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// The marginals of one integer column, fitted to the Criteo sample: x =
// min(floor(exp(mu + sigma * z)), max) with exp(mu) = median + 0.5 and the
// 90th percentile at q90, so small medians give Criteo's many zeros; the cap
// (a few times the sample's maximum) cuts the log-normal's extreme tail.
struct DenseColumnSpec {
  double median;
  double q90;
  double max;
  double missing;     // Probability the field is empty.
  int missing_group;  // Columns of one group are missing together; -1: alone.
  double minus_one;   // Probability of Criteo's -1 value (only I2 has them).
};
constexpr std::array<DenseColumnSpec, kCriteoDense> kDenseColumns = {{
    {1, 9, 2000, 0.45, 0, 0},              // I1
    {3, 182, 50000, 0, -1, 0.10},          // I2
    {6, 43, 65535, 0.21, 1, 0},            // I3
    {4, 18, 1000, 0.21, 1, 0},             // I4
    {2790, 34457, 5000000, 0.026, -1, 0},  // I5
    {32, 276, 250000, 0.22, -1, 0},        // I6
    {3, 34, 20000, 0.04, 2, 0},            // I7
    {7, 34, 5000, 0.001, -1, 0},           // I8
    {38, 260, 30000, 0.04, 2, 0},          // I9
    {0.6, 2, 10, 0.45, 0, 0},              // I10
    {1, 6, 500, 0.04, 2, 0},               // I11
    {0, 1, 1000, 0.77, -1, 0},             // I12
    {4, 20, 5000, 0.21, 1, 0},             // I13
}};
constexpr int kDenseMissingGroups = 3;
// Counts of one row share a log-normal "activity" factor with this loading,
// as Criteo's counts are correlated.
constexpr double kDenseActivityLoading = 0.5;

// One categorical column. Vocabularies follow Criteo's cardinalities with
// the big ones capped so the tables stay small.
struct SparseColumnSpec {
  int64_t vocabulary;
  double missing;
  int missing_group;
};
constexpr std::array<SparseColumnSpec, kCriteoSparse> kSparseColumns = {{
    {1460, 0, -1},       // C1
    {583, 0, -1},        // C2
    {200000, 0.035, 0},  // C3
    {120000, 0.035, 0},  // C4
    {305, 0, -1},        // C5
    {24, 0.12, -1},      // C6
    {12517, 0, -1},      // C7
    {633, 0, -1},        // C8
    {3, 0, -1},          // C9
    {90000, 0, -1},      // C10
    {5683, 0, -1},       // C11
    {180000, 0.035, 0},  // C12
    {3194, 0, -1},       // C13
    {27, 0, -1},         // C14
    {14992, 0, -1},      // C15
    {150000, 0.035, 0},  // C16
    {10, 0, -1},         // C17
    {5652, 0, -1},       // C18
    {2173, 0.44, 1},     // C19
    {4, 0.44, 1},        // C20
    {160000, 0.035, 0},  // C21
    {18, 0.40, -1},      // C22
    {15, 0, -1},         // C23
    {100000, 0.035, 0},  // C24
    {105, 0.44, 1},      // C25
    {80000, 0.44, 1},    // C26
}};
constexpr int kSparseMissingGroups = 2;
// Vocabularies at least this big are jittered by the seed.
constexpr int64_t kMinJitteredVocabulary = 100;

}  // namespace

Teacher::Teacher(uint64_t seed, MultiHot multi_hot) : seed_(seed), multi_hot_(multi_hot) {
  Rng rng(StreamKey(seed, Stream::kStructure));
  const uint64_t id_key = StreamKey(seed, Stream::kIdParams);
  const uint64_t scramble_key = StreamKey(seed, Stream::kScramble);
  for (int t = 0; t < kCriteoSparse; ++t) {
    Table& table = tables_[t];
    const SparseColumnSpec& spec = kSparseColumns[t];
    table.vocabulary = spec.vocabulary;
    const double jitter = rng.Uniform();  // Drawn always, to keep streams aligned.
    if (spec.vocabulary >= kMinJitteredVocabulary) {
      table.vocabulary = std::llround(spec.vocabulary * std::exp(0.4 * jitter - 0.2));
    }
    table.exponent = 1.05 + 0.35 * rng.Uniform();
    table.bias_weight = 0.25 + 0.75 * rng.Uniform();
    table.scramble_key = static_cast<uint32_t>(Mix64(scramble_key + t));
    table.bias_key = Mix64(id_key + 2 * t);
    table.dense_id_key = Mix64(id_key + 2 * t + 1);

    std::vector<double> weights(table.vocabulary);
    for (int64_t r = 1; r <= table.vocabulary; ++r) {
      weights[r - 1] = std::pow(static_cast<double>(r), -table.exponent);
    }
    const double norm = std::accumulate(weights.begin(), weights.end(), 0.0);
    // P(r) = r^-s / norm = kFullEffectProb at r = full_rank.
    table.full_rank = std::pow(kFullEffectProb * norm, -1.0 / table.exponent);
    table.decay_slope = table.exponent * kTailDecay;
    table.sampler = std::make_unique<AliasTable>(weights);
  }
  for (int j = 0; j < kCriteoDense; ++j) {
    const DenseColumnSpec& spec = kDenseColumns[j];
    dense_mu_[j] = std::log(spec.median + 0.5);
    dense_sigma_[j] = (std::log(spec.q90 + 0.5) - dense_mu_[j]) / 1.2815515655446004;
    dense_weight_[j] = rng.Normal();
  }
  product_a_ = static_cast<int>(rng.Next() % kCriteoDense);
  product_b_ = static_cast<int>((product_a_ + 1 + rng.Next() % (kCriteoDense - 1)) % kCriteoDense);

  // Interactions use only the smaller tables, whose ids recur often enough
  // for a student to learn a latent vector per id. Pairs are disjoint, so
  // each embedding needs at most one latent subspace for them; a seeded
  // Fisher-Yates shuffle picks the tables.
  std::vector<int> order;
  for (int t = 0; t < kCriteoSparse; ++t) {
    if (kSparseColumns[t].vocabulary <= kMaxInteractionVocabulary) order.push_back(t);
  }
  static_assert(kNumPairs * 2 <= kCriteoSparse);
  for (size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[rng.Next() % (i + 1)]);
  }
  for (int p = 0; p < kNumPairs; ++p) {
    pairs_.push_back({order[2 * p], order[2 * p + 1], Mix64(id_key + 1000 + 2 * p),
                      Mix64(id_key + 1001 + 2 * p)});
  }
  for (int k = 0; k < kNumDenseIdTerms; ++k) {
    dense_id_terms_.push_back(
        {static_cast<int>(rng.Next() % kCriteoDense), order[rng.Next() % order.size()]});
    tables_[dense_id_terms_.back().table].has_dense_id = true;
  }
  for (int t = 0; t < kCriteoSparse; ++t) {
    const uint32_t cached =
        static_cast<uint32_t>(std::min<int64_t>(tables_[t].vocabulary + 1, kCachedRanks));
    for (uint32_t r = 0; r < cached; ++r) tables_[t].cache.push_back(ComputeIdParams(t, r));
  }
}

void Teacher::SampleRow(Rng* rng, Row* row) const {
  std::array<double, kDenseMissingGroups> dense_group;
  for (double& u : dense_group) u = rng->Uniform();
  const double activity = rng->Normal();
  const double own_loading = std::sqrt(1 - kDenseActivityLoading * kDenseActivityLoading);
  for (int j = 0; j < kCriteoDense; ++j) {
    const DenseColumnSpec& spec = kDenseColumns[j];
    const double u = spec.missing_group >= 0 ? dense_group[spec.missing_group] : rng->Uniform();
    row->dense_missing[j] = u < spec.missing;
    row->dense[j] = 0;
    if (row->dense_missing[j]) continue;
    if (spec.minus_one > 0 && rng->Uniform() < spec.minus_one) {
      row->dense[j] = -1;
      continue;
    }
    const double z = kDenseActivityLoading * activity + own_loading * rng->Normal();
    const double x = std::exp(dense_mu_[j] + dense_sigma_[j] * z);
    row->dense[j] = static_cast<int64_t>(std::min(x, spec.max));
  }
  std::array<double, kSparseMissingGroups> sparse_group;
  for (double& u : sparse_group) u = rng->Uniform();
  for (int t = 0; t < kCriteoSparse; ++t) {
    const SparseColumnSpec& spec = kSparseColumns[t];
    double u = 1.0;
    if (spec.missing_group >= 0) {
      u = sparse_group[spec.missing_group];
    } else if (spec.missing > 0) {
      u = rng->Uniform();
    }
    row->rank[t] = u < spec.missing ? 0 : tables_[t].sampler->Sample(rng->Next()) + 1;
  }
  // Drawn after everything else, so rows without multi-hot columns draw what
  // they always did.
  row->more.fill(0);
  row->more_rank.clear();
  for (int t = kCriteoSparse - multi_hot_.columns; t < kCriteoSparse; ++t) {
    if (row->rank[t] == 0) continue;  // A missing field stays missing.
    const auto more = static_cast<int>(rng->Next() % static_cast<uint64_t>(multi_hot_.max_ids));
    for (int k = 0; k < more; ++k) {
      row->more_rank.push_back(tables_[t].sampler->Sample(rng->Next()) + 1);
    }
    row->more[t] = static_cast<uint8_t>(more);
  }
}

namespace {

// Component k of a pair-latent vector hashed to h: uniform with unit
// variance, 16 bits each.
double LatentComponent(uint64_t h, int k) {
  return (static_cast<double>((h >> (16 * k)) & 0xffff) + 0.5) / 65536 - 0.5;
}

}  // namespace

IdParams Teacher::ComputeIdParams(int t, uint32_t rank) const {
  const Table& table = tables_[t];
  IdParams params;
  if (rank != 0 && rank > table.full_rank) {
    params.strength = std::exp(-table.decay_slope * std::log(rank / table.full_rank));
  }
  params.bias = table.bias_weight * params.strength * NormalFromKey(table.bias_key + rank);
  if (table.has_dense_id) {
    params.dense_id = params.strength * NormalFromKey(table.dense_id_key + rank);
  }
  return params;
}

Teacher::Terms Teacher::ComputeTerms(const Row& row) const {
  std::array<double, kCriteoDense> g;
  for (int j = 0; j < kCriteoDense; ++j) {
    const double f = std::log1p(static_cast<double>(std::max<int64_t>(row.dense[j], 0)));
    g[j] = (f - dense_mean_[j]) * dense_inv_sd_[j];
  }
  Terms terms{0, 0, 0, 0};
  for (int j = 0; j < kCriteoDense; ++j) terms.dense += dense_weight_[j] * g[j];
  terms.dense += 0.5 * g[product_a_] * g[product_b_];
  if (!row.more_rank.empty()) {
    AddPooledIdTerms(row, g, &terms);
    return terms;
  }

  std::array<IdParams, kCriteoSparse> scratch;
  std::array<const IdParams*, kCriteoSparse> params;
  for (int t = 0; t < kCriteoSparse; ++t) {
    params[t] = &Params(t, row.rank[t], &scratch[t]);
    terms.id_bias += params[t]->bias;
  }
  for (const Pair& p : pairs_) {
    const uint64_t ht = Mix64(p.key_t + row.rank[p.t]);
    const uint64_t hu = Mix64(p.key_u + row.rank[p.u]);
    double dot = 0;
    for (int k = 0; k < kLatentDim; ++k) {
      dot += 12.0 * LatentComponent(ht, k) * LatentComponent(hu, k);
    }
    terms.pairs += params[p.t]->strength * params[p.u]->strength * dot / kLatentDim;
  }
  for (const DenseIdTerm& x : dense_id_terms_) {
    terms.dense_id += g[x.dense] * params[x.table]->dense_id;
  }
  return terms;
}

void Teacher::AddPooledIdTerms(const Row& row, const std::array<double, kCriteoDense>& g,
                               Terms* terms) const {
  // Field t's ranks: rank[t], then more_rank[first[t], first[t + 1]).
  std::array<int, kCriteoSparse + 1> first;
  first[0] = 0;
  for (int t = 0; t < kCriteoSparse; ++t) first[t + 1] = first[t] + row.more[t];
  auto for_each_rank = [&](int t, auto&& visit) {
    visit(row.rank[t]);
    for (int k = first[t]; k < first[t + 1]; ++k) visit(row.more_rank[k]);
  };
  // A single id's terms are exactly the single-hot ones: bias, strength x
  // latent vector and dense x id weight, each now averaged over the field.
  std::array<double, kCriteoSparse> dense_id{};
  IdParams scratch;
  for (int t = 0; t < kCriteoSparse; ++t) {
    const double n = 1 + row.more[t];
    for_each_rank(t, [&](uint32_t rank) {
      const IdParams& p = Params(t, rank, &scratch);
      terms->id_bias += p.bias / n;
      dense_id[t] += p.dense_id / n;
    });
  }
  auto latent = [&](int t, uint64_t key, std::array<double, kLatentDim>& v) {
    v.fill(0);
    const double n = 1 + row.more[t];
    for_each_rank(t, [&](uint32_t rank) {
      const double strength = Params(t, rank, &scratch).strength;
      const uint64_t h = Mix64(key + rank);
      for (int k = 0; k < kLatentDim; ++k) v[k] += strength * LatentComponent(h, k) / n;
    });
  };
  std::array<double, kLatentDim> vt, vu;
  for (const Pair& p : pairs_) {
    latent(p.t, p.key_t, vt);
    latent(p.u, p.key_u, vu);
    double dot = 0;
    for (int k = 0; k < kLatentDim; ++k) dot += 12.0 * vt[k] * vu[k];
    terms->pairs += dot / kLatentDim;
  }
  for (const DenseIdTerm& x : dense_id_terms_) terms->dense_id += g[x.dense] * dense_id[x.table];
}

double Teacher::Logit(const Row& row) const {
  const Terms terms = ComputeTerms(row);
  return intercept_ + term_scale_.dense * terms.dense + term_scale_.id_bias * terms.id_bias +
         term_scale_.pairs * terms.pairs + term_scale_.dense_id * terms.dense_id;
}

void Teacher::Calibrate() {
  Rng rng(StreamKey(seed_, Stream::kCalibration));
  std::vector<Row> rows(kCalibrationExamples);
  for (Row& row : rows) SampleRow(&rng, &row);

  for (int j = 0; j < kCriteoDense; ++j) {
    double sum = 0, sum_sq = 0;
    for (const Row& row : rows) {
      const double f = std::log1p(static_cast<double>(std::max<int64_t>(row.dense[j], 0)));
      sum += f;
      sum_sq += f * f;
    }
    const double mean = sum / rows.size();
    const double var = sum_sq / rows.size() - mean * mean;
    dense_mean_[j] = mean;
    dense_inv_sd_[j] = var > 1e-12 ? 1.0 / std::sqrt(var) : 1.0;
  }

  std::vector<Terms> terms(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) terms[i] = ComputeTerms(rows[i]);
  auto stddev = [&](double Terms::*field) {
    double sum = 0, sum_sq = 0;
    for (const Terms& t : terms) {
      sum += t.*field;
      sum_sq += (t.*field) * (t.*field);
    }
    const double mean = sum / terms.size();
    return std::sqrt(std::max(sum_sq / terms.size() - mean * mean, 0.0));
  };
  auto scale = [](double target, double sd) { return sd > 1e-12 ? target / sd : 0.0; };
  const Terms term_std = {stddev(&Terms::dense), stddev(&Terms::id_bias), stddev(&Terms::pairs),
                          stddev(&Terms::dense_id)};
  term_scale_ = {scale(kTargetStdDense, term_std.dense), scale(kTargetStdIdBias, term_std.id_bias),
                 scale(kTargetStdPairs, term_std.pairs),
                 scale(kTargetStdDenseId, term_std.dense_id)};

  std::vector<double> logits(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    logits[i] = term_scale_.dense * terms[i].dense + term_scale_.id_bias * terms[i].id_bias +
                term_scale_.pairs * terms[i].pairs + term_scale_.dense_id * terms[i].dense_id;
  }
  // The mean probability is increasing in b.
  double lo = -30, hi = 30;
  for (int iter = 0; iter < 50; ++iter) {
    const double mid = 0.5 * (lo + hi);
    double mean = 0;
    for (double l : logits) mean += Sigmoid(mid + l);
    mean /= logits.size();
    (mean < kTargetCtr ? lo : hi) = mid;
  }
  intercept_ = 0.5 * (lo + hi);
}

Json Teacher::Describe() const {
  Json vocabularies = Json::array(), exponents = Json::array(), bias_weights = Json::array(),
       sparse_missing = Json::array(), dense_missing = Json::array(), pairs = Json::array(),
       dense_id = Json::array();
  for (int t = 0; t < kCriteoSparse; ++t) {
    vocabularies.push_back(tables_[t].vocabulary);
    exponents.push_back(tables_[t].exponent);
    bias_weights.push_back(tables_[t].bias_weight);
    sparse_missing.push_back(kSparseColumns[t].missing);
  }
  for (const DenseColumnSpec& spec : kDenseColumns) dense_missing.push_back(spec.missing);
  for (const Pair& p : pairs_) pairs.push_back({p.t, p.u});
  for (const DenseIdTerm& x : dense_id_terms_) dense_id.push_back({x.dense, x.table});
  Json description = {
      {"version", kGeneratorVersion},
      {"block_examples", kBlockExamples},
      {"target_ctr", kTargetCtr},
      {"vocabularies", vocabularies},
      {"zipf_exponents", exponents},
      {"sparse_missing_rates", sparse_missing},
      {"dense_missing_rates", dense_missing},
      {"id_bias_weights", bias_weights},
      {"dense_weights", dense_weight_},
      {"dense_product", {product_a_, product_b_}},
      {"latent_dim", kLatentDim},
      {"pairs", pairs},              // 0-based table indices (C1 is 0).
      {"dense_id_terms", dense_id},  // [dense column (I1 is 0), table].
      {"full_effect_probability", kFullEffectProb},
      {"tail_decay", kTailDecay},
      {"intercept", intercept_},
      {"term_std_target",
       {{"dense", kTargetStdDense},
        {"id_bias", kTargetStdIdBias},
        {"pairs", kTargetStdPairs},
        {"dense_id", kTargetStdDenseId}}},
      {"term_scale",
       {{"dense", term_scale_.dense},
        {"id_bias", term_scale_.id_bias},
        {"pairs", term_scale_.pairs},
        {"dense_id", term_scale_.dense_id}}},
  };
  if (multi_hot_.columns > 0) {
    description["multi_hot"] = {{"columns", multi_hot_.columns},
                                {"max_ids_per_field", multi_hot_.max_ids}};
  }
  return description;
}

}  // namespace shadowsync::synthetic_internal
