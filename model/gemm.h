// The GEMMs behind the model's layers: fp32 with the choice of its kernel,
// and bf16 through oneDNN.
//
// OpenBLAS picks its kernels when it loads, by the CPU or by
// OPENBLAS_CORETYPE; a pin to an older core (Haswell on an AVX-512 CPU) halves
// its peak, and the process cannot undo it. oneDNN's matmul picks its JIT
// kernels by cpuid and reads no such variable. ChooseGemmKernel checks both
// against a reference and times them on the model's own shapes at start-up
// (docs/decisions.md). The kernel is the caller's to pass, not the process's:
// the two round differently, and a model's score must repeat bit for bit
// wherever it is recomputed (an export records the kernel that scored it).
// Every function here is thread-safe.
#ifndef SHADOWSYNC_MODEL_GEMM_H_
#define SHADOWSYNC_MODEL_GEMM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace shadowsync::model {

enum class GemmKernel { kOpenBlas, kOneDnn };

// "openblas" or "onednn".
const char* GemmKernelName(GemmKernel kernel);
// "openblas", "onednn", or "auto" (nullopt: the fastest on this host); an
// error names `what` (a flag or a field path) otherwise.
absl::StatusOr<std::optional<GemmKernel>> ParseGemmKernel(std::string_view name,
                                                          std::string_view what);
// What the kernel runs on this host: OpenBLAS's core type as loaded
// ("Haswell"), oneDNN's implementation ("brg:avx512_core").
std::string GemmKernelDetail(GemmKernel kernel);

// Parallelism comes from Hogwild threads, each running its own GEMMs, so BLAS
// itself must stay single-threaded. Call once at process start.
void UseSingleThreadedBlas();

// C = alpha * op(A) * op(B) + beta * C through `kernel`, all row-major;
// op(A) is m x k.
void Gemm(GemmKernel kernel, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);

// bfloat16: the top 16 bits of an fp32 (8 significant bits, fp32's range).
using Bf16 = uint16_t;

// C = op(A) * op(B) + beta * C, row-major, with bf16 A and B and fp32 C.
// Every product and sum is fp32, so only the inputs' rounding differs from
// Gemm. oneDNN's matmul, one primitive built per distinct call shape and
// cached. Single-threaded; not thread-safe: one instance per thread.
class Bf16Gemm {
 public:
  Bf16Gemm();
  ~Bf16Gemm();
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  void Run(bool trans_a, bool trans_b, int m, int n, int k, const Bf16* a, int lda, const Bf16* b,
           int ldb, float beta, float* c, int ldc);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One GEMM call shape (packed operands: lda, ldb and ldc follow from it).
struct GemmShape {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0;
  int n = 0;
  int k = 0;
};

struct GemmCandidate {
  GemmKernel kernel = GemmKernel::kOpenBlas;
  std::string detail;  // GemmKernelDetail
  // Over the shapes: total FLOPs / total seconds; 0 when not timed.
  double gflops = 0;
  // Why the kernel was not eligible (its results differ from the
  // reference's); empty when it was.
  std::string error;
};

struct GemmChoice {
  GemmKernel kernel = GemmKernel::kOpenBlas;
  // The caller asked for this kernel (ResolveGemmKernel), rather than the
  // fastest.
  std::optional<GemmKernel> requested;
  std::vector<GemmCandidate> candidates;
  // "onednn[ (requested)]; measured: onednn (brg:avx512_core) 181.2 GFLOP/s;
  // openblas (Haswell) 93.0 GFLOP/s".
  std::string Summary() const;
};

// Checks every kernel's results against a double-precision reference,
// times the eligible ones on `shapes`, and picks the fastest. OpenBLAS wins
// only when faster by kKeepOneDnnMargin, so that a near tie rarely flips the
// pick between runs; timings on a loaded machine still can, which is why a
// score that must repeat names its kernel. Measured once per process: later
// calls return the first call's choice. A few tens of milliseconds for
// DLRM-small at batch 512.
inline constexpr double kKeepOneDnnMargin = 1.10;
const GemmChoice& ChooseGemmKernel(std::span<const GemmShape> shapes);

// ChooseGemmKernel's measurements with `requested` as the kernel when it
// is eligible on this host; the fastest when it is not, or when nullopt.
GemmChoice ResolveGemmKernel(std::span<const GemmShape> shapes,
                             std::optional<GemmKernel> requested);

// {"kernel": "onednn", "detail": ..., ["requested": "onednn",]
// "candidates": [{"kernel", "detail", "gflops"[, "error"]}, ...]}, for
// reports.
nlohmann::json GemmChoiceToJson(const GemmChoice& choice);

// Seconds per call of `shape` through `kernel`, timed for about `seconds`.
double TimeGemm(GemmKernel kernel, const GemmShape& shape, double seconds);

// Empty when `kernel` computes `shape` within fp32 rounding of a
// double-precision reference (random operands, alpha and beta not 0 or 1);
// else what differs.
std::string CheckGemm(GemmKernel kernel, const GemmShape& shape);

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_MODEL_GEMM_H_
