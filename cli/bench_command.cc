// `shadowsync bench gemm`: the machine's single-core sgemm peak, measured now,
// by kernel: OpenBLAS under each core type this CPU can run, and oneDNN. The
// trainer benchmark takes its roofline against the best of them.
//
// OpenBLAS reads OPENBLAS_CORETYPE only when it loads, so each core type is
// measured in a child process of its own with the variable set; the parent's
// own OpenBLAS is "as installed".
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "common/subprocess.h"
#include "glog/logging.h"
#include "model/dense_ops.h"
#include "model/gemm.h"
#include "nlohmann/json.hpp"

namespace shadowsync::cli {
namespace {

// Best GFLOP/s over square-ish shapes large enough to reach the kernel's peak.
double MeasureSgemmPeak(model::GemmKernel kernel, double seconds_per_shape) {
  model::UseSingleThreadedBlas();
  double best = 0;
  for (int n : {256, 512, 768}) {
    const double seconds = model::TimeGemm(kernel, {false, true, n, n, n}, seconds_per_shape);
    best = std::max(best, 2.0 * n * n * n / seconds / 1e9);
  }
  return best;
}

nlohmann::json Measure(model::GemmKernel kernel, double seconds) {
  return {{"kernel", model::GemmKernelName(kernel)},
          {"detail", model::GemmKernelDetail(kernel)},
          {"gflops", MeasureSgemmPeak(kernel, seconds)}};
}

// OpenBLAS's x86-64 core types whose kernels this CPU can run, newest last.
std::vector<std::string> OpenBlasCoreTypes() {
  std::vector<std::string> cores;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return cores;
  cores.push_back("Haswell");
  if (__builtin_cpu_is("amd")) cores.push_back("Zen");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    cores.push_back("SkylakeX");
    if (model::CpuHasNativeBf16()) cores.push_back("Cooperlake");
  }
  return cores;
}

// This program's `bench gemm --kernel openblas` with OPENBLAS_CORETYPE=core.
absl::StatusOr<nlohmann::json> MeasureOpenBlasCore(const std::string& core, double seconds) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::UnavailableError("pipe failed");
  SpawnOptions options;
  options.env = {"OPENBLAS_CORETYPE=" + core};
  options.stdout_fd = fds[1];
  absl::StatusOr<pid_t> pid = Spawn({"/proc/self/exe", "bench", "gemm", "--kernel", "openblas",
                                     "--seconds", absl::StrCat(seconds)},
                                    options);
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; pid.ok() && (n = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fds[0]);
  if (!pid.ok()) return pid.status();
  int status = 0;
  waitpid(*pid, &status, 0);
  nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !j.is_object()) {
    return absl::InternalError(absl::StrCat("OPENBLAS_CORETYPE=", core, ": the child failed"));
  }
  j["core_type"] = core;
  return j;
}

}  // namespace

Action AddBenchCommand(CLI::App& app) {
  auto seconds = std::make_shared<double>(0.5);
  auto kernel = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("bench", "Machine measurements for the benchmarks.");
  CLI::App* gemm = cmd->add_subcommand(
      "gemm", "Peak single-core sgemm GFLOP/s of every kernel this CPU runs, as JSON.");
  gemm->add_option("--seconds", *seconds, "seconds per shape")->capture_default_str();
  gemm->add_option("--kernel", *kernel, "measure only this kernel (openblas or onednn)")
      ->check(CLI::IsMember({"openblas", "onednn"}));
  cmd->require_subcommand(1);
  return [seconds, kernel] {
    if (!kernel->empty()) {
      const auto k =
          *kernel == "onednn" ? model::GemmKernel::kOneDnn : model::GemmKernel::kOpenBlas;
      std::cout << Measure(k, *seconds).dump() << "\n";
      return 0;
    }
    nlohmann::json as_installed = Measure(model::GemmKernel::kOpenBlas, *seconds);
    nlohmann::json kernels = nlohmann::json::array({Measure(model::GemmKernel::kOneDnn, *seconds)});
    for (const std::string& core : OpenBlasCoreTypes()) {
      absl::StatusOr<nlohmann::json> j = MeasureOpenBlasCore(core, *seconds);
      if (!j.ok()) {
        LOG(WARNING) << j.status().message();
        continue;
      }
      kernels.push_back(*j);
    }
    nlohmann::json best = as_installed, best_openblas = as_installed;
    for (const nlohmann::json& k : kernels) {
      if (k["gflops"].get<double>() > best["gflops"].get<double>()) best = k;
      if (k["kernel"] == "openblas" &&
          k["gflops"].get<double>() > best_openblas["gflops"].get<double>()) {
        best_openblas = k;
      }
    }
    nlohmann::json out = {{"sgemm_gflops_1core", best["gflops"]},
                          {"best", best},
                          {"best_openblas", best_openblas},
                          {"as_installed", as_installed},
                          {"kernels", kernels}};
    std::cout << out.dump() << "\n";
    return 0;
  };
}

}  // namespace shadowsync::cli
