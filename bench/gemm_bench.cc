// The measurement behind the GEMM library choice (docs/decisions.md): OpenBLAS
// as loaded and oneDNN's matmul (through Gemm, as the model calls them)
// against Eigen 3.4 on the DLRM-small layer shapes, one core, in one run.
// Last line:
//   RESULT name=gemm openblas_gflops=... eigen_gflops=... ratio=... onednn_gflops=...
//          onednn_ratio=...
// (geometric means over the shapes; ratio = OpenBLAS / Eigen, onednn_ratio =
// oneDNN / OpenBLAS).
#include <Eigen/Dense>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "model/gemm.h"

namespace {

// {M, N, K} of C = A * B^T: the large forward GEMMs of DLRM-small at batch 512
// (bottom 13->512, 512->256, 256->64; top 367->512).
void Shapes(benchmark::internal::Benchmark* b) {
  for (const auto& shape : std::vector<std::vector<int64_t>>{
           {512, 512, 13}, {512, 256, 512}, {512, 64, 256}, {512, 512, 367}}) {
    b->Args(shape);
  }
}

void SetFlops(benchmark::State& state) {
  const double flops = 2.0 * state.range(0) * state.range(1) * state.range(2);
  state.counters["GFLOPs"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void RunKernel(benchmark::State& state, shadowsync::model::GemmKernel kernel) {
  const int m = state.range(0), n = state.range(1), k = state.range(2);
  std::vector<float> a(m * k, 0.5f), b(n * k, 0.25f), c(m * n);
  for (auto _ : state) {
    shadowsync::model::Gemm(kernel, false, true, m, n, k, 1, a.data(), k, b.data(), k, 0, c.data(),
                            n);
    benchmark::DoNotOptimize(c.data());
  }
  SetFlops(state);
}

void BM_OpenBlas(benchmark::State& state) {
  RunKernel(state, shadowsync::model::GemmKernel::kOpenBlas);
}

void BM_OneDnn(benchmark::State& state) {
  RunKernel(state, shadowsync::model::GemmKernel::kOneDnn);
}

void BM_Eigen(benchmark::State& state) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int m = state.range(0), n = state.range(1), k = state.range(2);
  RowMajor a = RowMajor::Constant(m, k, 0.5f), b = RowMajor::Constant(n, k, 0.25f), c(m, n);
  for (auto _ : state) {
    c.noalias() = a * b.transpose();
    benchmark::DoNotOptimize(c.data());
  }
  SetFlops(state);
}

BENCHMARK(BM_OpenBlas)->Apply(Shapes);
BENCHMARK(BM_OneDnn)->Apply(Shapes);
BENCHMARK(BM_Eigen)->Apply(Shapes);

// Collects each run's GFLOP/s by library while printing the usual table.
class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const std::string name = r.benchmark_name();
      const double gflops = r.counters.at("GFLOPs");
      if (name.rfind("BM_OpenBlas", 0) == 0) {
        openblas.push_back(gflops);
      } else if (name.rfind("BM_OneDnn", 0) == 0) {
        onednn.push_back(gflops);
      } else {
        eigen.push_back(gflops);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::vector<double> openblas, eigen, onednn;
};

double GeoMean(const std::vector<double>& v) {
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x);
  return v.empty() ? 0 : std::exp(log_sum / v.size());
}

}  // namespace

int main(int argc, char** argv) {
  shadowsync::model::UseSingleThreadedBlas();
  Eigen::setNbThreads(1);
  benchmark::Initialize(&argc, argv);
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  const double ob = GeoMean(collector.openblas), ei = GeoMean(collector.eigen),
               dn = GeoMean(collector.onednn);
  std::printf(
      "RESULT name=gemm openblas_gflops=%.1f eigen_gflops=%.1f ratio=%.3f onednn_gflops=%.1f "
      "onednn_ratio=%.3f\n",
      ob, ei, ei > 0 ? ob / ei : 0, dn, ob > 0 ? dn / ob : 0);
  return 0;
}
