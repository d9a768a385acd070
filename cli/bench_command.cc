// `shadowsync bench gemm`: the machine's single-core sgemm peak, measured now,
// as the denominator of the trainer benchmark's roofline fraction.
#include <chrono>
#include <iostream>
#include <vector>

#include "cli/commands.h"
#include "model/dense_ops.h"
#include "nlohmann/json.hpp"

namespace shadowsync::cli {
namespace {

// Best GFLOP/s over square-ish shapes large enough to reach the kernel's peak.
double MeasureSgemmPeak(double seconds_per_shape) {
  model::UseSingleThreadedBlas();
  double best = 0;
  for (int n : {256, 512, 768}) {
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
    model::Gemm(false, true, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);  // warm-up
    int reps = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (elapsed < seconds_per_shape) {
      model::Gemm(false, true, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);
      ++reps;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    best = std::max(best, 2.0 * n * n * n * reps / elapsed / 1e9);
  }
  return best;
}

}  // namespace

Action AddBenchCommand(CLI::App& app) {
  auto seconds = std::make_shared<double>(0.5);
  CLI::App* cmd = app.add_subcommand("bench", "Machine measurements for the benchmarks.");
  CLI::App* gemm = cmd->add_subcommand("gemm", "Peak single-core sgemm GFLOP/s, as JSON.");
  gemm->add_option("--seconds", *seconds, "seconds per shape")->capture_default_str();
  cmd->require_subcommand(1);
  return [seconds] {
    nlohmann::json out = {{"sgemm_gflops_1core", MeasureSgemmPeak(*seconds)}};
    std::cout << out.dump() << "\n";
    return 0;
  };
}

}  // namespace shadowsync::cli
