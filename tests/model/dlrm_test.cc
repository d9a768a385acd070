#include "model/dlrm.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/dense_ops.h"
#include "nlohmann/json.hpp"

namespace shadowsync::model {
namespace {

// A small model and a multi-hot batch (variable ids per example, a repeated
// row), so pooling and gradient accumulation over occurrences are exercised.
// Each test runs for both interactions, and with table 0 mean-pooled.
struct Variant {
  Interaction interaction;
  Pooling pooling;  // Table 0's; table 1 sums.
};

class DlrmTest : public ::testing::TestWithParam<Variant> {
 public:
  DlrmTest() : model_(Config(GetParam().interaction, GetParam().pooling)) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1, 1);
    params_.resize(model_.num_params());
    model_.InitParams(3, params_);
    dense_.resize(kBatch * Config().num_dense);
    for (auto& x : dense_) x = u(rng);
    labels_ = {1, 0, 0, 1};
    // Table 0: 3 unique rows; example 2 has no id, example 3 repeats row 1.
    rows_[0].resize(3 * kDim);
    index_[0] = {0, 1, 2, 1, 1};
    offsets_[0] = {0, 1, 3, 3, 5};
    // Table 1: 2 unique rows, one per example.
    rows_[1].resize(2 * kDim);
    index_[1] = {0, 1, 1, 0};
    offsets_[1] = {0, 1, 2, 3, 4};
    for (auto& r : rows_) {
      for (auto& x : r) x = u(rng) * 0.5f;
    }
  }

  static DlrmConfig Config(Interaction interaction = Interaction::kDot,
                           Pooling pooling = Pooling::kSum) {
    DlrmConfig c;
    c.num_dense = 3;
    c.embedding_dim = kDim;
    c.bottom_mlp = {5};
    c.top_mlp = {6};
    c.num_tables = 2;
    c.interaction = interaction;
    c.dcn_layers = 2;
    c.dcn_low_rank = 5;
    if (pooling == Pooling::kMean) c.pooling = {Pooling::kMean, Pooling::kSum};
    return c;
  }

  BatchView Batch() {
    for (int t = 0; t < 2; ++t) sparse_[t] = {rows_[t], index_[t], offsets_[t]};
    return BatchView{kBatch, dense_.data(), labels_.data(), sparse_};
  }

  double Loss() {
    auto ws = model_.NewWorkspace(kBatch);
    std::vector<float> probs(kBatch);
    return model_.Step(params_.data(), Batch(), ws.get(), probs.data(), nullptr);
  }

  static constexpr int kBatch = 4;
  static constexpr int kDim = 4;
  Dlrm model_;
  std::vector<float> params_, dense_, labels_;
  std::vector<float> rows_[2];
  std::vector<int32_t> index_[2], offsets_[2];
  SparseInput sparse_[2];
};

double NumericGrad(DlrmTest* t, std::vector<float>& v, size_t i, double (DlrmTest::*loss)()) {
  const float eps = 2e-3f;
  const float saved = v[i];
  v[i] = saved + eps;
  const double plus = (t->*loss)();
  v[i] = saved - eps;
  const double minus = (t->*loss)();
  v[i] = saved;
  return (plus - minus) / (2.0 * eps);
}

INSTANTIATE_TEST_SUITE_P(Models, DlrmTest,
                         ::testing::Values(Variant{Interaction::kDot, Pooling::kSum},
                                           Variant{Interaction::kDcn, Pooling::kSum},
                                           Variant{Interaction::kDot, Pooling::kMean}),
                         [](const auto& info) {
                           return absl::StrCat(std::string(InteractionName(info.param.interaction)),
                                               "_", std::string(PoolingName(info.param.pooling)));
                         });

// A mean-pooled table sees each example's rows averaged: with two ids per
// example, exactly a sum-pooled table whose rows are halved.
TEST(DlrmPoolingTest, MeanPoolingIsTheSumOverTheCount) {
  DlrmConfig mean_config = DlrmTest::Config(Interaction::kDot, Pooling::kMean);
  DlrmConfig sum_config = DlrmTest::Config();
  Dlrm mean(mean_config), sum(sum_config);
  std::vector<float> params(mean.num_params());
  mean.InitParams(2, params);
  std::vector<float> dense = {0.5f, -1, 2, 1, 0, -0.5f};
  std::vector<float> rows0 = {0.3f, -0.2f, 0.9f, 0.1f, -0.7f, 0.4f, 0.2f, 0.8f};
  std::vector<float> halved = rows0;
  for (float& x : halved) x /= 2;
  std::vector<float> rows1 = {0.5f, 0.1f, -0.3f, 0.6f};
  const std::vector<int32_t> index0 = {0, 1, 1, 0}, offsets0 = {0, 2, 4};
  const std::vector<int32_t> index1 = {0, 0}, offsets1 = {0, 1, 2};
  auto probs = [&](const Dlrm& model, const std::vector<float>& table0) {
    const SparseInput sparse[2] = {{table0, index0, offsets0}, {rows1, index1, offsets1}};
    auto ws = model.NewWorkspace(2);
    std::vector<float> p(2);
    model.Step(params.data(), BatchView{2, dense.data(), nullptr, sparse}, ws.get(), p.data(),
               nullptr);
    return p;
  };
  const std::vector<float> want = probs(sum, halved), got = probs(mean, rows0);
  EXPECT_NEAR(got[0], want[0], 1e-6);
  EXPECT_NEAR(got[1], want[1], 1e-6);
  EXPECT_GT(std::abs(probs(sum, rows0)[0] - got[0]), 1e-4) << "pooling made no difference";
}

TEST(DlrmLayoutTest, DotParameterLayoutIsContiguous) {
  Dlrm model(DlrmTest::Config(Interaction::kDot));
  // bottom 3->5->4, top (4 + 3) -> 6 -> 1
  EXPECT_EQ(model.interaction_width(), 4 + 3);
  EXPECT_EQ(model.num_params(), (3 * 5 + 5) + (5 * 4 + 4) + (7 * 6 + 6) + (6 * 1 + 1));
  EXPECT_FALSE(model.top_layers().back().relu);
  EXPECT_TRUE(model.bottom_layers().back().relu);
  EXPECT_TRUE(model.cross_layers().empty());
}

// Bottom, then per cross layer V (r x n) and U (n x r) with b (n), then top;
// the top MLP reads the n = (1 + tables) * dim wide cross output.
TEST(DlrmLayoutTest, DcnParameterLayoutPutsCrossLayersBetweenTheMlps) {
  Dlrm model(DlrmTest::Config(Interaction::kDcn));
  const int n = 3 * 4, r = 5;
  EXPECT_EQ(model.interaction_width(), n);
  const int64_t bottom = (3 * 5 + 5) + (5 * 4 + 4), cross = r * n + n * r + n;
  EXPECT_EQ(model.num_params(), bottom + 2 * cross + (n * 6 + 6) + (6 * 1 + 1));
  ASSERT_EQ(model.cross_layers().size(), 2u);
  const CrossLayerShape& second = model.cross_layers()[1];
  EXPECT_EQ(second.down.w_offset, bottom + cross);
  EXPECT_FALSE(second.down.bias);
  EXPECT_EQ(second.up.w_offset, bottom + cross + r * n);
  EXPECT_EQ(second.up.b_offset, bottom + cross + 2 * r * n);
  EXPECT_EQ(model.top_layers().front().w_offset, bottom + 2 * cross);
  EXPECT_EQ(model.top_layers().front().in, n);
}

// TorchRec's LowRankCrossNet initialisation: U and V Xavier normal, b zero.
TEST(DlrmLayoutTest, CrossLayersStartWithZeroBiasAndXavierWeights) {
  DlrmConfig c;  // DLRM-small's shape: n = 27 * 16 = 432, r = 512
  c.interaction = Interaction::kDcn;
  Dlrm model(c);
  std::vector<float> params(model.num_params());
  model.InitParams(5, params);
  for (const CrossLayerShape& layer : model.cross_layers()) {
    for (int i = 0; i < layer.up.out; ++i) EXPECT_EQ(params[layer.up.b_offset + i], 0.0f);
    double sum2 = 0;
    const int64_t count = int64_t{layer.down.in} * layer.down.out;
    for (int64_t i = 0; i < count; ++i)
      sum2 += params[layer.down.w_offset + i] * params[layer.down.w_offset + i];
    EXPECT_NEAR(std::sqrt(sum2 / count), std::sqrt(2.0 / (432 + 512)), 0.002);
  }
}

TEST_P(DlrmTest, FullModelGradientsMatchFiniteDifferences) {
  auto ws = model_.NewWorkspace(kBatch);
  std::vector<float> probs(kBatch), dense_grad(model_.num_params());
  std::vector<float> row_grads[2] = {std::vector<float>(rows_[0].size()),
                                     std::vector<float>(rows_[1].size())};
  Gradients grads{dense_grad, {row_grads[0], row_grads[1]}};
  model_.Step(params_.data(), Batch(), ws.get(), probs.data(), &grads);

  int checked = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const double numeric = NumericGrad(this, params_, i, &DlrmTest::Loss);
    EXPECT_NEAR(numeric, dense_grad[i], 1e-3 + 2e-2 * std::abs(dense_grad[i])) << "param " << i;
    ++checked;
  }
  for (int t = 0; t < 2; ++t) {
    for (size_t i = 0; i < rows_[t].size(); ++i) {
      const double numeric = NumericGrad(this, rows_[t], i, &DlrmTest::Loss);
      EXPECT_NEAR(numeric, row_grads[t][i], 1e-3 + 2e-2 * std::abs(row_grads[t][i]))
          << "table " << t << " value " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, model_.num_params() + 5 * kDim);
}

// bf16 GEMMs change only rounding: the same batch gives nearly the same loss,
// probabilities and gradients as fp32, and evaluation works without labels.
TEST_P(DlrmTest, Bf16StepMatchesFp32WithinRounding) {
  std::vector<float> probs32(kBatch), probs16(kBatch), grad32(model_.num_params()),
      grad16(model_.num_params());
  std::vector<float> rows32[2] = {std::vector<float>(rows_[0].size()),
                                  std::vector<float>(rows_[1].size())};
  std::vector<float> rows16[2] = {rows32[0], rows32[1]};
  Gradients g32{grad32, {rows32[0], rows32[1]}}, g16{grad16, {rows16[0], rows16[1]}};
  auto ws32 = model_.NewWorkspace(kBatch, DensePrecision::kFp32);
  auto ws16 = model_.NewWorkspace(kBatch, DensePrecision::kBf16);
  const double loss32 = model_.Step(params_.data(), Batch(), ws32.get(), probs32.data(), &g32);
  const double loss16 = model_.Step(params_.data(), Batch(), ws16.get(), probs16.data(), &g16);
  EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
  for (int i = 0; i < kBatch; ++i) EXPECT_NEAR(probs16[i], probs32[i], 1e-2);
  auto rel_err = [](const std::vector<float>& want, const std::vector<float>& got) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += (want[i] - got[i]) * (want[i] - got[i]);
      norm += want[i] * want[i];
    }
    return std::sqrt(err / norm);
  };
  EXPECT_LT(rel_err(grad32, grad16), 3e-2);
  EXPECT_GT(rel_err(grad32, grad16), 0) << "bf16 rounding left no trace: not used";
  for (int t = 0; t < 2; ++t) EXPECT_LT(rel_err(rows32[t], rows16[t]), 3e-2) << "table " << t;

  BatchView unlabeled = Batch();
  unlabeled.labels = nullptr;
  std::vector<float> probs_eval(kBatch);
  model_.Step(params_.data(), unlabeled, ws16.get(), probs_eval.data(), nullptr);
  for (int i = 0; i < kBatch; ++i) EXPECT_FLOAT_EQ(probs_eval[i], probs16[i]);
}

TEST(DensePrecisionTest, ParsesNamesAndRejectsOthersNamingTheField) {
  EXPECT_EQ(*ParseDensePrecision("fp32", "f"), DensePrecision::kFp32);
  EXPECT_EQ(*ParseDensePrecision("bf16", "f"), DensePrecision::kBf16);
  EXPECT_EQ(*ParseDensePrecision("auto", "f"),
            CpuHasNativeBf16() ? DensePrecision::kBf16 : DensePrecision::kFp32);
  auto bad = ParseDensePrecision("fp16", "spec.trainer.densePrecision");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("spec.trainer.densePrecision"), std::string::npos);
  EXPECT_NE(bad.status().message().find("fp16"), std::string::npos);
}

TEST_P(DlrmTest, ForwardWithoutLabelsGivesSameProbabilities) {
  auto ws = model_.NewWorkspace(kBatch);
  std::vector<float> with_labels(kBatch), without(kBatch);
  model_.Step(params_.data(), Batch(), ws.get(), with_labels.data(), nullptr);
  BatchView b = Batch();
  b.labels = nullptr;
  model_.Step(params_.data(), b, ws.get(), without.data(), nullptr);
  for (int i = 0; i < kBatch; ++i) EXPECT_NEAR(with_labels[i], without[i], 1e-6);
}

TEST_P(DlrmTest, InitIsDeterministicAndSeedDependent) {
  std::vector<float> a(model_.num_params()), b(a.size()), c(a.size());
  model_.InitParams(7, a);
  model_.InitParams(7, b);
  model_.InitParams(8, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(DlrmShapeTest, DlrmSmallHasAboutTwoPointNineMegaflopsPerExample) {
  Dlrm model{DlrmConfig{}};
  EXPECT_EQ(model.interaction_width(), 16 + 27 * 26 / 2);
  EXPECT_NEAR(model.FlopsPerExample(), 2.85e6, 0.05e6);
}

// Three cross layers of 432 x 512 twice, forward and both backward GEMMs:
// 3 * 2 * (2 * 432 * 512 * 3) = 8.0 MFLOP, and the top MLP reads 432 wide.
TEST(DlrmShapeTest, DcnAddsItsCrossLayersFlops) {
  DlrmConfig c;
  c.interaction = Interaction::kDcn;
  Dlrm dcn(c);
  Dlrm dot{DlrmConfig{}};
  const double top_growth = 2.0 * (432 - 367) * 512 * 3;
  const double dots = 2.0 * (27 * 26 / 2) * 16 * 3;
  EXPECT_NEAR(dcn.FlopsPerExample() - dot.FlopsPerExample(),
              3 * 2 * (2.0 * 432 * 512 * 3) + top_growth - dots + 3 * 4 * 432, 1);
}

TEST(DlrmConfigTest, JsonRoundTripAndValidation) {
  DlrmConfig c;
  c.top_mlp = {7, 3};
  DlrmConfig back;
  ASSERT_TRUE(DlrmConfigFromJson(DlrmConfigToJson(c), &back).ok());
  EXPECT_EQ(back, c);
  c.interaction = Interaction::kDcn;
  c.dcn_layers = 2;
  c.dcn_low_rank = 64;
  EXPECT_EQ(DlrmConfigToJson(c)["dcn"], nlohmann::json({{"layers", 2}, {"lowRank", 64}}));
  ASSERT_TRUE(DlrmConfigFromJson(DlrmConfigToJson(c), &back).ok());
  EXPECT_EQ(back, c);
  c.pooling.assign(26, Pooling::kSum);
  c.pooling[3] = Pooling::kMean;
  EXPECT_EQ(DlrmConfigToJson(c)["pooling"][3], "mean");
  ASSERT_TRUE(DlrmConfigFromJson(DlrmConfigToJson(c), &back).ok());
  EXPECT_EQ(back, c);
  c.pooling.pop_back();
  EXPECT_EQ(c.Validate().message(), "model.tables: 25 poolings for 26 tables");
  c.pooling.clear();
  c.dcn_low_rank = 0;
  EXPECT_EQ(c.Validate().message(), "model.dcn.lowRank: must be >= 1, got 0");
  c.bottom_mlp = {4, 0};
  EXPECT_EQ(c.Validate().message(), "model.bottomMlp[1]: must be >= 1, got 0");
}

// Models saved before DCN-v2 carry no "interaction": they load as dot models.
TEST(DlrmConfigTest, JsonWithoutInteractionIsADotModel) {
  nlohmann::json old = DlrmConfigToJson(DlrmConfig{});
  old.erase("interaction");
  DlrmConfig back;
  back.interaction = Interaction::kDcn;
  ASSERT_TRUE(DlrmConfigFromJson(old, &back).ok());
  EXPECT_EQ(back, DlrmConfig{});
  old["interaction"] = "cross";
  EXPECT_EQ(DlrmConfigFromJson(old, &back).message(),
            "model config: interaction: 'cross' is not one of dot, dcn");
}

}  // namespace
}  // namespace shadowsync::model
