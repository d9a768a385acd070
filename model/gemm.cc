#include "model/gemm.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/mutex.h"
#include "nlohmann/json.hpp"
#include "oneapi/dnnl/dnnl.hpp"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename();

namespace shadowsync::model {
namespace {

// oneDNN parallelises each call with OpenMP over all cores unless told
// otherwise, per calling thread; Hogwild threads are the parallelism here. Looked
// up at run time: the symbol is libgomp's, loaded by libdnnl, not ours to link.
void UseOneOpenMpThreadHere() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(1);
}

using dt = dnnl::memory::data_type;

// C = alpha op(A) op(B) + beta C with oneDNN's matmul, A and B of `type`
// and C fp32, all row-major (a transposed operand is the same logical
// matrix read with swapped strides).
dnnl::matmul::primitive_desc MatmulDesc(const dnnl::engine& engine, dt type, bool trans_a,
                                        bool trans_b, int m, int n, int k, int lda, int ldb,
                                        int ldc, float alpha, float beta) {
  using dims = dnnl::memory::dims;
  const dnnl::memory::desc a_md({m, k}, type, trans_a ? dims{1, lda} : dims{lda, 1});
  const dnnl::memory::desc b_md({k, n}, type, trans_b ? dims{1, ldb} : dims{ldb, 1});
  const dnnl::memory::desc c_md({m, n}, dt::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1) attr.set_output_scales(0, {alpha});
  if (beta != 0) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
}

// Serialises the building of primitives across threads. oneDNN's primitive
// cache synchronises concurrent builders with its own atomics, which a
// thread sanitizer cannot see; each thread builds one primitive per shape,
// once, so the lock costs nothing after the first steps.
Mutex& BuildMutex() {
  static auto* mu = new Mutex();  // Never destroyed: used by any thread, any time.
  return *mu;
}

// oneDNN matmul primitives by call, built once each with their memory
// objects. Not thread-safe: one per thread.
class MatmulCache {
 public:
  void Run(dt type, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a,
           int lda, const void* b, int ldb, float beta, float* c, int ldc) {
    UseOneOpenMpThreadHere();
    const Key key{type, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta};
    auto it = calls_.find(key);
    if (it == calls_.end()) {
      MutexLock lock(&BuildMutex());
      const auto pd =
          MatmulDesc(engine_, type, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta);
      Call call{dnnl::matmul(pd), dnnl::memory(pd.src_desc(), engine_, nullptr),
                dnnl::memory(pd.weights_desc(), engine_, nullptr),
                dnnl::memory(pd.dst_desc(), engine_, nullptr)};
      it = calls_.emplace(key, std::move(call)).first;
    }
    Call& call = it->second;
    // oneDNN takes non-const handles for inputs too; it only reads them.
    call.a.set_data_handle(const_cast<void*>(a));
    call.b.set_data_handle(const_cast<void*>(b));
    call.c.set_data_handle(c);
    call.matmul.execute(
        stream_, {{DNNL_ARG_SRC, call.a}, {DNNL_ARG_WEIGHTS, call.b}, {DNNL_ARG_DST, call.c}});
    stream_.wait();
  }

 private:
  using Key = std::tuple<dt, bool, bool, int, int, int, int, int, int, float, float>;
  struct Call {
    dnnl::matmul matmul;
    dnnl::memory a, b, c;
  };
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<Key, Call> calls_;
};

MatmulCache& ThreadMatmuls() {
  thread_local MatmulCache cache;
  return cache;
}

double Flops(const GemmShape& s) { return 2.0 * s.m * s.n * s.k; }

// Packed leading dimensions of `s`'s operands, row-major.
int Lda(const GemmShape& s) { return s.trans_a ? s.m : s.k; }
int Ldb(const GemmShape& s) { return s.trans_b ? s.k : s.n; }

}  // namespace

const char* GemmKernelName(GemmKernel kernel) {
  return kernel == GemmKernel::kOneDnn ? "onednn" : "openblas";
}

std::string GemmKernelDetail(GemmKernel kernel) {
  if (kernel == GemmKernel::kOpenBlas) return openblas_get_corename();
  // The implementation oneDNN picks for a DLRM-sized layer.
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return MatmulDesc(engine, dt::f32, false, true, 512, 256, 512, 512, 512, 256, 1, 0)
      .impl_info_str();
}

void UseSingleThreadedBlas() { openblas_set_num_threads(1); }

absl::StatusOr<std::optional<GemmKernel>> ParseGemmKernel(std::string_view name,
                                                          std::string_view what) {
  if (name == "auto") return std::nullopt;
  for (GemmKernel kernel : {GemmKernel::kOpenBlas, GemmKernel::kOneDnn}) {
    if (name == GemmKernelName(kernel)) return kernel;
  }
  return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": '", std::string(name),
                                                 "' is not one of auto, openblas, onednn"));
}

void Gemm(GemmKernel kernel, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (kernel == GemmKernel::kOneDnn) {
    ThreadMatmuls().Run(dt::f32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

std::string CheckGemm(GemmKernel kernel, const GemmShape& s) {
  const int lda = Lda(s), ldb = Ldb(s), ldc = s.n;
  std::mt19937 rng(static_cast<uint32_t>(s.m * 131 + s.n * 17 + s.k));
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n),
      c(static_cast<size_t>(s.m) * s.n);
  for (float& x : a) x = uniform(rng);
  for (float& x : b) x = uniform(rng);
  for (float& x : c) x = uniform(rng);
  const std::vector<float> c0 = c;
  const float alpha = 0.75f, beta = -0.5f;
  Gemm(kernel, s.trans_a, s.trans_b, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta,
       c.data(), ldc);
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < s.n; ++j) {
      double sum = 0, magnitude = 0;
      for (int p = 0; p < s.k; ++p) {
        const double x = s.trans_a ? a[p * lda + i] : a[i * lda + p];
        const double y = s.trans_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += x * y;
        magnitude += std::abs(x * y);
      }
      const double want = alpha * sum + beta * c0[i * ldc + j];
      // fp32 accumulation of k products errs by at most about k ulps of
      // the terms' magnitude; a wrong kernel errs by whole terms.
      const double tolerance =
          (s.k + 2) * std::ldexp(1.0, -23) * (alpha * magnitude + std::abs(beta * c0[i * ldc + j]));
      if (!(std::abs(c[i * ldc + j] - want) <= tolerance)) {
        return absl::StrFormat("%s %s%s %dx%dx%d: C[%d][%d] = %.9g, the reference gives %.9g",
                               GemmKernelName(kernel), s.trans_a ? "T" : "N", s.trans_b ? "T" : "N",
                               s.m, s.n, s.k, i, j, c[i * ldc + j], want);
      }
    }
  }
  return "";
}

double TimeGemm(GemmKernel kernel, const GemmShape& s, double seconds) {
  const int lda = Lda(s), ldb = Ldb(s);
  std::vector<float> a(static_cast<size_t>(s.m) * s.k, 0.5f),
      b(static_cast<size_t>(s.k) * s.n, 0.25f), c(static_cast<size_t>(s.m) * s.n);
  auto run = [&] {
    Gemm(kernel, s.trans_a, s.trans_b, s.m, s.n, s.k, 1, a.data(), lda, b.data(), ldb, 0, c.data(),
         s.n);
  };
  run();  // Builds oneDNN's primitive; warms the caches.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  int reps = 0;
  double elapsed = 0;
  while (reps < 2 || elapsed < seconds) {
    run();
    ++reps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return elapsed / reps;
}

std::string GemmChoice::Summary() const {
  std::vector<std::string> parts;
  for (const GemmCandidate& c : candidates) {
    std::string part = absl::StrCat(GemmKernelName(c.kernel), " (", c.detail, ") ");
    if (c.error.empty()) {
      absl::StrAppend(&part, absl::StrFormat("%.1f GFLOP/s", c.gflops));
    } else {
      absl::StrAppend(&part, "not eligible: ", c.error);
    }
    parts.push_back(std::move(part));
  }
  std::string why;
  if (requested.has_value()) {
    why = *requested == kernel
              ? " (requested)"
              : absl::StrCat(" (", GemmKernelName(*requested), " was requested, not eligible)");
  }
  return absl::StrCat(GemmKernelName(kernel), why, "; measured: ", absl::StrJoin(parts, "; "));
}

const GemmChoice& ChooseGemmKernel(std::span<const GemmShape> shapes) {
  static GemmChoice* const choice = [&] {
    UseSingleThreadedBlas();
    auto* out = new GemmChoice();  // Never destroyed: read by any thread, any time.
    // Odd sizes and every transposition, then the caller's shapes.
    std::vector<GemmShape> checks;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) checks.push_back({ta, tb, 37, 29, 53});
    }
    for (GemmKernel kernel : {GemmKernel::kOneDnn, GemmKernel::kOpenBlas}) {
      GemmCandidate c{kernel, GemmKernelDetail(kernel)};
      for (const GemmShape& s : checks) {
        if (c.error = CheckGemm(kernel, s); !c.error.empty()) break;
      }
      out->candidates.push_back(std::move(c));
    }
    // Shape by shape, the kernels in turn: drift on a shared machine hits
    // both alike.
    std::vector<double> seconds(out->candidates.size(), 0);
    double flops = 0;
    for (const GemmShape& s : shapes) {
      flops += Flops(s);
      for (size_t i = 0; i < out->candidates.size(); ++i) {
        if (out->candidates[i].error.empty()) {
          seconds[i] += TimeGemm(out->candidates[i].kernel, s, 0.002);
        }
      }
    }
    for (size_t i = 0; i < out->candidates.size(); ++i) {
      if (out->candidates[i].error.empty() && seconds[i] > 0) {
        out->candidates[i].gflops = flops / seconds[i] / 1e9;
      }
    }
    const GemmCandidate& onednn = out->candidates[0];
    const GemmCandidate& openblas = out->candidates[1];
    const bool use_onednn =
        onednn.error.empty() &&
        (!openblas.error.empty() || openblas.gflops <= onednn.gflops * kKeepOneDnnMargin);
    out->kernel = use_onednn ? GemmKernel::kOneDnn : GemmKernel::kOpenBlas;
    return out;
  }();
  return *choice;
}

GemmChoice ResolveGemmKernel(std::span<const GemmShape> shapes,
                             std::optional<GemmKernel> requested) {
  GemmChoice choice = ChooseGemmKernel(shapes);
  choice.requested = requested;
  for (const GemmCandidate& c : choice.candidates) {
    if (requested == c.kernel && c.error.empty()) choice.kernel = c.kernel;
  }
  return choice;
}

nlohmann::json GemmChoiceToJson(const GemmChoice& choice) {
  nlohmann::json candidates = nlohmann::json::array();
  std::string detail;
  for (const GemmCandidate& c : choice.candidates) {
    nlohmann::json j = {
        {"kernel", GemmKernelName(c.kernel)}, {"detail", c.detail}, {"gflops", c.gflops}};
    if (!c.error.empty()) j["error"] = c.error;
    if (c.kernel == choice.kernel) detail = c.detail;
    candidates.push_back(std::move(j));
  }
  nlohmann::json out = {
      {"kernel", GemmKernelName(choice.kernel)}, {"detail", detail}, {"candidates", candidates}};
  if (choice.requested.has_value()) out["requested"] = GemmKernelName(*choice.requested);
  return out;
}

struct Bf16Gemm::Impl {
  MatmulCache matmuls;
};

Bf16Gemm::Bf16Gemm() : impl_(std::make_unique<Impl>()) {}
Bf16Gemm::~Bf16Gemm() = default;

void Bf16Gemm::Run(bool trans_a, bool trans_b, int m, int n, int k, const Bf16* a, int lda,
                   const Bf16* b, int ldb, float beta, float* c, int ldc) {
  impl_->matmuls.Run(dt::bf16, trans_a, trans_b, m, n, k, 1, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace shadowsync::model
