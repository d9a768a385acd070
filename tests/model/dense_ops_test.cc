#include "model/dense_ops.h"

#include <cmath>
#include <functional>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace shadowsync::model {
namespace {

std::vector<float> RandomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Central finite difference of f with respect to v[i].
double NumericGrad(const std::function<double()>& f, std::vector<float>& v, size_t i,
                   float eps = 1e-2f) {
  const float saved = v[i];
  v[i] = saved + eps;
  const double plus = f();
  v[i] = saved - eps;
  const double minus = f();
  v[i] = saved;
  return (plus - minus) / (2.0 * eps);
}

void ExpectGradNear(double numeric, double analytic, const std::string& what) {
  EXPECT_NEAR(numeric, analytic, 2e-3 + 1e-2 * std::abs(analytic)) << what;
}

TEST(Bf16Test, ConversionRoundsToNearestEven) {
  // bf16 keeps 7 stored mantissa bits: around 1.0 its step is 2^-7.
  const float step = std::ldexp(1.0f, -7), half = step / 2;
  // 40 values: the first 32 take the vector path where the CPU has one.
  std::vector<float> x(40);
  std::vector<Bf16> want(40);
  for (int i = 0; i < 40; i += 8) {
    x[i + 0] = 1.0f, want[i + 0] = 0x3f80;
    x[i + 1] = 1.0f + half, want[i + 1] = 0x3f80;      // tie: down to even
    x[i + 2] = 1.0f + 3 * half, want[i + 2] = 0x3f82;  // tie: up to even
    x[i + 3] = 1.0f + 0.6f * step, want[i + 3] = 0x3f81;
    x[i + 4] = -2.0f, want[i + 4] = 0xc000;
    x[i + 5] = INFINITY, want[i + 5] = 0x7f80;
    x[i + 6] = 0.0f, want[i + 6] = 0x0000;
    x[i + 7] = 3.0e38f, want[i + 7] = 0x7f62;  // large but finite stays finite
  }
  std::vector<Bf16> y(40);
  ToBf16(x.data(), 40, y.data());
  for (int i = 0; i < 40; ++i) EXPECT_EQ(y[i], want[i]) << "x = " << x[i] << " at " << i;
  EXPECT_EQ(Bf16ToFloat(0x3f82), 1.0f + 2 * step);

  float nan = std::nanf("");
  Bf16 out;
  ToBf16(&nan, 1, &out);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(out)));
}

// Small integers are exact in bf16 and their products and sums exact in fp32,
// so the bf16 GEMM must equal the fp32 one bit for bit, whatever the layout.
TEST(Bf16Test, GemmEqualsFp32GemmOnValuesBf16HoldsExactly) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-8, 8);
  Bf16Gemm gemm;
  for (auto [m, n, k] : {std::tuple{3, 4, 5}, std::tuple{17, 33, 13}, std::tuple{64, 1, 40}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 1.0f}) {
          // Leading dimensions wider than the matrices: strides must be honoured.
          const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
          std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb);
          for (auto& v : a) v = small(rng);
          for (auto& v : b) v = small(rng);
          std::vector<float> c32(m * ldc);
          for (auto& v : c32) v = small(rng);
          std::vector<float> c16 = c32;
          std::vector<Bf16> a16(a.size()), b16(b.size());
          ToBf16(a.data(), a.size(), a16.data());
          ToBf16(b.data(), b.size(), b16.data());
          Gemm(GemmKernel::kOpenBlas, ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, beta,
               c32.data(), ldc);
          gemm.Run(ta, tb, m, n, k, a16.data(), lda, b16.data(), ldb, beta, c16.data(), ldc);
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              ASSERT_EQ(c16[i * ldc + j], c32[i * ldc + j])
                  << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb << " beta " << beta
                  << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

// On general values the only difference is the inputs' rounding: relative
// error about 2^-9 per input, averaging out over the sums.
TEST(Bf16Test, LinearLayerMatchesFp32WithinBf16Rounding) {
  const int batch = 32, in = 48, out = 24;
  auto x = RandomVector(batch * in, 1), w = RandomVector(out * in, 2, 0.3f);
  auto b = RandomVector(out, 3), dy = RandomVector(batch * out, 4);
  std::vector<float> y32(batch * out), y16(batch * out), dx32(batch * in), dx16(batch * in),
      dw32(out * in), dw16(out * in), db32(out), db16(out);
  LinearForward(x.data(), batch, in, out, w.data(), b.data(), y32.data(), GemmKernel::kOneDnn);
  LinearBackward(x.data(), dy.data(), batch, in, out, w.data(), dx32.data(), dw32.data(),
                 db32.data(), GemmKernel::kOneDnn);
  std::vector<Bf16> x16(x.size()), w16(w.size()), dy16(dy.size());
  ToBf16(x.data(), x.size(), x16.data());
  ToBf16(w.data(), w.size(), w16.data());
  Bf16Gemm gemm;
  LinearForwardBf16(x16.data(), batch, in, out, w16.data(), b.data(), y16.data(), gemm);
  LinearBackwardBf16(x16.data(), dy.data(), dy16.data(), batch, in, out, w16.data(), dx16.data(),
                     dw16.data(), db16.data(), gemm);
  auto expect_close = [](const std::vector<float>& want, const std::vector<float>& got,
                         const char* what) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += (want[i] - got[i]) * (want[i] - got[i]);
      norm += want[i] * want[i];
    }
    const double rel = std::sqrt(err / norm);
    EXPECT_LT(rel, 8e-3) << what;
    EXPECT_GT(rel, 0) << what << ": identical to fp32, so bf16 was not used";
  };
  expect_close(y32, y16, "y");
  expect_close(dx32, dx16, "dx");
  expect_close(dw32, dw16, "dw");
  EXPECT_EQ(db32, db16) << "the bias gradient is an fp32 sum of dy in both";
}

// Both GEMM kernels compute the layer.
class LinearTest : public testing::TestWithParam<GemmKernel> {};

INSTANTIATE_TEST_SUITE_P(Kernels, LinearTest,
                         testing::Values(GemmKernel::kOpenBlas, GemmKernel::kOneDnn),
                         [](const auto& info) { return GemmKernelName(info.param); });

TEST_P(LinearTest, ForwardIsXWTransposePlusBias) {
  // x = [1 2], W = [[1 0], [0 1], [1 1]], b = [0.5 -1 0]: y = [1.5 1 3].
  std::vector<float> x = {1, 2}, w = {1, 0, 0, 1, 1, 1}, b = {0.5f, -1, 0}, y(3);
  LinearForward(x.data(), 1, 2, 3, w.data(), b.data(), y.data(), GetParam());
  EXPECT_EQ(y, (std::vector<float>{1.5f, 1, 3}));
}

TEST_P(LinearTest, BackwardMatchesFiniteDifferences) {
  const GemmKernel kernel = GetParam();
  const int batch = 3, in = 4, out = 5;
  auto x = RandomVector(batch * in, 3), w = RandomVector(out * in, 4), b = RandomVector(out, 5);
  auto c = RandomVector(batch * out, 6);  // loss = sum(c * y)
  auto loss = [&] {
    std::vector<float> y(batch * out);
    LinearForward(x.data(), batch, in, out, w.data(), b.data(), y.data(), kernel);
    double s = 0;
    for (int i = 0; i < batch * out; ++i) s += c[i] * y[i];
    return s;
  };
  std::vector<float> dx(batch * in), dw(out * in), db(out);
  LinearBackward(x.data(), c.data(), batch, in, out, w.data(), dx.data(), dw.data(), db.data(),
                 kernel);
  for (size_t i = 0; i < x.size(); ++i) ExpectGradNear(NumericGrad(loss, x, i), dx[i], "dx");
  for (size_t i = 0; i < w.size(); ++i) ExpectGradNear(NumericGrad(loss, w, i), dw[i], "dw");
  for (size_t i = 0; i < b.size(); ++i) ExpectGradNear(NumericGrad(loss, b, i), db[i], "db");
}

TEST(ReluTest, ForwardClampsAndBackwardMasks) {
  std::vector<float> y = {-1, 0, 2};
  ReluInPlace(y.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{0, 0, 2}));
  std::vector<float> dy = {5, 6, 7};
  ReluBackwardInPlace(y.data(), dy.data(), 3);
  EXPECT_EQ(dy, (std::vector<float>{0, 0, 7}));
}

TEST(InteractionTest, ForwardEmitsFirstVectorThenLowerTriangleDots) {
  // f = 3 vectors of d = 2: a = (1, 2), b = (3, 4), c = (5, 6).
  std::vector<float> z = {1, 2, 3, 4, 5, 6};
  std::vector<float> out(InteractionWidth(3, 2));
  ASSERT_EQ(out.size(), 5u);
  InteractionForward(z.data(), 1, 3, 2, out.data());
  // (b.a, c.a, c.b) = (11, 17, 39).
  EXPECT_EQ(out, (std::vector<float>{1, 2, 11, 17, 39}));
}

TEST(InteractionTest, TiledBatchesWithRemainderMatchNaiveDots) {
  // 37 examples: two full 16-lane tiles and a partial one.
  const int batch = 37, f = 5, d = 3, width = InteractionWidth(f, d);
  auto z = RandomVector(batch * f * d, 9);
  std::vector<float> out(batch * width);
  InteractionForward(z.data(), batch, f, d, out.data());
  for (int e = 0; e < batch; ++e) {
    const float* ze = z.data() + e * f * d;
    int p = d;
    for (int i = 1; i < f; ++i) {
      for (int j = 0; j < i; ++j, ++p) {
        float dot = 0;
        for (int k = 0; k < d; ++k) dot += ze[i * d + k] * ze[j * d + k];
        EXPECT_NEAR(out[e * width + p], dot, 1e-5) << e << " " << i << " " << j;
      }
    }
    for (int k = 0; k < d; ++k) EXPECT_EQ(out[e * width + k], ze[k]);
  }
  // Backward on the same batch against finite differences of sum(c * out).
  auto c = RandomVector(out.size(), 10);
  std::vector<float> dz(z.size());
  InteractionBackward(z.data(), c.data(), batch, f, d, dz.data());
  auto loss = [&] {
    std::vector<float> o(out.size());
    InteractionForward(z.data(), batch, f, d, o.data());
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += c[i] * o[i];
    return s;
  };
  for (size_t i = 0; i < z.size(); i += 7) ExpectGradNear(NumericGrad(loss, z, i), dz[i], "dz");
}

TEST(InteractionTest, BackwardMatchesFiniteDifferences) {
  const int batch = 2, f = 4, d = 3;
  auto z = RandomVector(batch * f * d, 7);
  auto c = RandomVector(batch * InteractionWidth(f, d), 8);
  auto loss = [&] {
    std::vector<float> out(c.size());
    InteractionForward(z.data(), batch, f, d, out.data());
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += c[i] * out[i];
    return s;
  };
  std::vector<float> dz(z.size());
  InteractionBackward(z.data(), c.data(), batch, f, d, dz.data());
  for (size_t i = 0; i < z.size(); ++i) ExpectGradNear(NumericGrad(loss, z, i), dz[i], "dz");
}

TEST(SigmoidCrossEntropyTest, MatchesHandComputedValues) {
  // logit 0, label 1: p = 0.5, loss = ln 2. logit ln 3, label 0: p = 0.75, loss = ln 4.
  std::vector<float> logits = {0.0f, static_cast<float>(std::log(3.0))}, labels = {1, 0};
  std::vector<float> probs(2), dlogits(2);
  const double loss =
      SigmoidCrossEntropy(logits.data(), labels.data(), 2, probs.data(), dlogits.data());
  EXPECT_NEAR(loss, (std::log(2.0) + std::log(4.0)) / 2, 1e-6);
  EXPECT_NEAR(probs[0], 0.5, 1e-6);
  EXPECT_NEAR(probs[1], 0.75, 1e-6);
  EXPECT_NEAR(dlogits[0], (0.5 - 1) / 2, 1e-6);
  EXPECT_NEAR(dlogits[1], (0.75 - 0) / 2, 1e-6);
}

TEST(SigmoidCrossEntropyTest, StableForExtremeLogits) {
  std::vector<float> logits = {100.0f, -100.0f}, labels = {0, 1}, probs(2);
  const double loss = SigmoidCrossEntropy(logits.data(), labels.data(), 2, probs.data(), nullptr);
  EXPECT_NEAR(loss, 100.0, 1e-4);
  EXPECT_TRUE(std::isfinite(loss));
}

}  // namespace
}  // namespace shadowsync::model
