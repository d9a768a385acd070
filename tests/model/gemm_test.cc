#include "model/gemm.h"

#include <random>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace shadowsync::model {
namespace {

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

constexpr GemmKernel kKernels[] = {GemmKernel::kOpenBlas, GemmKernel::kOneDnn};

// C = 2 op(A) op(B) + 0.5 C against a naive product, with leading
// dimensions wider than the matrices (a layer's slice of a larger buffer).
void ExpectMatchesNaive(GemmKernel kernel, bool ta, bool tb, int m, int n, int k) {
  const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
  auto a = RandomVector(static_cast<size_t>(ta ? k : m) * lda, 1);
  auto b = RandomVector(static_cast<size_t>(tb ? n : k) * ldb, 2);
  auto c = RandomVector(static_cast<size_t>(m) * ldc, 3);
  const std::vector<float> c0 = c;
  Gemm(kernel, ta, tb, m, n, k, 2.0f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), ldc);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      if (j >= n) {
        EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "wrote outside C";
        continue;
      }
      double s = 0;
      for (int p = 0; p < k; ++p) {
        s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) *
             (tb ? b[j * ldb + p] : b[p * ldb + j]);
      }
      ASSERT_NEAR(c[i * ldc + j], 2 * s + 0.5 * c0[i * ldc + j], 1e-4)
          << GemmKernelName(kernel) << " " << ta << tb << " " << m << "x" << n << "x" << k << " at "
          << i << "," << j;
    }
  }
}

TEST(GemmTest, EveryKernelMatchesANaiveProductForEveryTransposition) {
  for (GemmKernel kernel : kKernels) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        ExpectMatchesNaive(kernel, ta, tb, 3, 4, 5);
        ExpectMatchesNaive(kernel, ta, tb, 67, 33, 129);
      }
    }
  }
}

TEST(GemmTest, CheckGemmAcceptsBothKernels) {
  for (GemmKernel kernel : kKernels) {
    EXPECT_EQ(CheckGemm(kernel, {false, true, 64, 48, 40}), "");
    EXPECT_EQ(CheckGemm(kernel, {true, false, 17, 9, 130}), "");
  }
}

// oneDNN's primitives are cached per thread: Hogwild threads calling Gemm
// with the same shapes at once each get their own.
TEST(GemmTest, OneDnnFromManyThreadsAtOnce) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 20; ++i) ExpectMatchesNaive(GemmKernel::kOneDnn, false, true, 31, 20, 45);
    });
  }
  for (auto& t : threads) t.join();
}

// The choice is made once, from measurements of both kernels; OpenBLAS must
// beat oneDNN by the margin.
TEST(GemmTest, ChooseGemmKernelTimesBothAndKeepsItsChoice) {
  const std::vector<GemmShape> shapes = {{false, true, 256, 128, 96}, {true, false, 128, 96, 256}};
  const GemmChoice& choice = ChooseGemmKernel(shapes);
  ASSERT_EQ(choice.candidates.size(), 2u);
  double onednn = 0, openblas = 0;
  for (const GemmCandidate& c : choice.candidates) {
    EXPECT_EQ(c.error, "") << GemmKernelName(c.kernel);
    EXPECT_GT(c.gflops, 0) << GemmKernelName(c.kernel);
    EXPECT_FALSE(c.detail.empty());
    (c.kernel == GemmKernel::kOneDnn ? onednn : openblas) = c.gflops;
  }
  EXPECT_EQ(choice.kernel,
            openblas > onednn * kKeepOneDnnMargin ? GemmKernel::kOpenBlas : GemmKernel::kOneDnn);
  EXPECT_FALSE(choice.requested.has_value());
  EXPECT_EQ(&ChooseGemmKernel({}), &choice);
  const nlohmann::json j = GemmChoiceToJson(choice);
  EXPECT_EQ(j["kernel"], GemmKernelName(choice.kernel));
  EXPECT_FALSE(j.contains("requested"));
  EXPECT_EQ(j["candidates"].size(), 2u);
  EXPECT_THAT(choice.Summary(), testing::StartsWith(GemmKernelName(choice.kernel)));
}

// A requested kernel is used whatever the timings say, and the report says
// it was asked for; without a request, the fastest.
TEST(GemmTest, ResolveGemmKernelHonoursARequest) {
  const std::vector<GemmShape> shapes = {{false, true, 64, 32, 48}};
  for (GemmKernel kernel : kKernels) {
    const GemmChoice choice = ResolveGemmKernel(shapes, kernel);
    EXPECT_EQ(choice.kernel, kernel);
    EXPECT_EQ(choice.requested, kernel);
    EXPECT_EQ(GemmChoiceToJson(choice)["requested"], GemmKernelName(kernel));
  }
  EXPECT_EQ(ResolveGemmKernel(shapes, std::nullopt).kernel, ChooseGemmKernel(shapes).kernel);
}

TEST(GemmTest, ParseGemmKernelNamesTheField) {
  EXPECT_EQ(*ParseGemmKernel("openblas", "--gemm"), GemmKernel::kOpenBlas);
  EXPECT_EQ(*ParseGemmKernel("onednn", "--gemm"), GemmKernel::kOneDnn);
  EXPECT_EQ(*ParseGemmKernel("auto", "--gemm"), std::nullopt);
  const absl::StatusOr<std::optional<GemmKernel>> bad = ParseGemmKernel("mkl", "--gemm");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--gemm: 'mkl' is not one of auto, openblas, onednn");
}

}  // namespace
}  // namespace shadowsync::model
