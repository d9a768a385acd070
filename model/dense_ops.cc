#include "model/dense_ops.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace shadowsync::model {

namespace {

// Seeds y with the bias so a GEMM with beta = 1 accumulates onto it.
void FillBias(const float* b, int batch, int out, float* y) {
  for (int i = 0; i < batch; ++i)
    std::memcpy(y + static_cast<long>(i) * out, b, out * sizeof(float));
}

void SumColumns(const float* dy, int batch, int out, float* db) {
  std::fill(db, db + out, 0.0f);
  for (int i = 0; i < batch; ++i) {
    const float* row = dy + static_cast<long>(i) * out;
    for (int j = 0; j < out; ++j) db[j] += row[j];
  }
}

}  // namespace

void LinearForward(const float* x, int batch, int in, int out, const float* w, const float* b,
                   float* y, GemmKernel kernel) {
  if (b != nullptr) FillBias(b, batch, out, y);
  Gemm(kernel, false, true, batch, out, in, 1.0f, x, in, w, in, b != nullptr ? 1.0f : 0.0f, y, out);
}

void LinearBackward(const float* x, const float* dy, int batch, int in, int out, const float* w,
                    float* dx, float* dw, float* db, GemmKernel kernel) {
  Gemm(kernel, true, false, out, in, batch, 1.0f, dy, out, x, in, 0.0f, dw, in);
  if (db != nullptr) SumColumns(dy, batch, out, db);
  if (dx != nullptr) Gemm(kernel, false, false, batch, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}

namespace {

Bf16 RoundToBf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<Bf16>((u >> 16) | 0x40);  // stays a quiet NaN
  return static_cast<Bf16>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// The CPU's own conversion (VCVTNE2PS2BF16): round to nearest even as above,
// 32 floats per instruction. Compiled for AVX512-BF16 whatever -march says, and
// called only where CpuHasNativeBf16().
__attribute__((target("avx512f,avx512bf16"))) void ToBf16Native(const float* x, long n, Bf16* y) {
  long i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(y + i, reinterpret_cast<__m512i>(v));
  }
  for (; i < n; ++i) y[i] = RoundToBf16(x[i]);
}

}  // namespace

void ToBf16(const float* x, long n, Bf16* y) {
  if (CpuHasNativeBf16()) return ToBf16Native(x, n, y);
  for (long i = 0; i < n; ++i) y[i] = RoundToBf16(x[i]);
}

float Bf16ToFloat(Bf16 x) { return std::bit_cast<float>(static_cast<uint32_t>(x) << 16); }

bool CpuHasNativeBf16() {
  // AVX512_BF16 is CPUID leaf 7, subleaf 1, EAX bit 5; avx512f also tells
  // that the OS saves the AVX-512 registers.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
           (eax & (1u << 5)) != 0;
  }();
  return has;
}

void LinearForwardBf16(const Bf16* x, int batch, int in, int out, const Bf16* w, const float* b,
                       float* y, Bf16Gemm& gemm) {
  if (b != nullptr) FillBias(b, batch, out, y);
  gemm.Run(false, true, batch, out, in, x, in, w, in, b != nullptr ? 1.0f : 0.0f, y, out);
}

void LinearBackwardBf16(const Bf16* x, const float* dy, Bf16* dy16, int batch, int in, int out,
                        const Bf16* w, float* dx, float* dw, float* db, Bf16Gemm& gemm) {
  ToBf16(dy, static_cast<long>(batch) * out, dy16);
  gemm.Run(true, false, out, in, batch, dy16, out, x, in, 0.0f, dw, in);
  if (db != nullptr) SumColumns(dy, batch, out, db);
  if (dx != nullptr) gemm.Run(false, false, batch, in, out, dy16, out, w, in, 0.0f, dx, in);
}

void ReluInPlace(float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = std::max(y[i], 0.0f);
}

void ReluBackwardInPlace(const float* y, float* dy, long n) {
  for (long i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// The interaction works on tiles of kLanes examples transposed to
// [vector][dim][lane], so every dot product is a run of vertical multiply-adds
// across examples instead of a horizontal reduction inside one.
namespace {
constexpr int kLanes = 16;

// Copies examples [e0, e0 + n) of z (row-major, f x d each) into tile[f][d][kLanes],
// zero-filling unused lanes.
void LoadTile(const float* z, int e0, int n, int f, int d, float* tile) {
  const long fd = static_cast<long>(f) * d;
  for (int l = 0; l < kLanes; ++l) {
    const float* src = l < n ? z + (e0 + l) * fd : nullptr;
    for (long v = 0; v < fd; ++v) tile[v * kLanes + l] = src ? src[v] : 0.0f;
  }
}
}  // namespace

void InteractionForward(const float* z, int batch, int f, int d, float* out) {
  const int width = InteractionWidth(f, d);
  const int pairs = f * (f - 1) / 2;
  std::vector<float> tile(static_cast<size_t>(f) * d * kLanes);
  std::vector<float> dots(static_cast<size_t>(pairs) * kLanes);
  for (int e0 = 0; e0 < batch; e0 += kLanes) {
    const int n = std::min(kLanes, batch - e0);
    LoadTile(z, e0, n, f, d, tile.data());
    float* dot = dots.data();
    for (int i = 1; i < f; ++i) {
      const float* zi = tile.data() + static_cast<long>(i) * d * kLanes;
      for (int j = 0; j < i; ++j, dot += kLanes) {
        const float* zj = tile.data() + static_cast<long>(j) * d * kLanes;
        float acc[kLanes] = {};
        for (int k = 0; k < d; ++k) {
          for (int l = 0; l < kLanes; ++l) acc[l] += zi[k * kLanes + l] * zj[k * kLanes + l];
        }
        std::memcpy(dot, acc, sizeof(acc));
      }
    }
    for (int l = 0; l < n; ++l) {
      float* oe = out + static_cast<long>(e0 + l) * width;
      std::memcpy(oe, z + static_cast<long>(e0 + l) * f * d, d * sizeof(float));
      for (int p = 0; p < pairs; ++p) oe[d + p] = dots[p * kLanes + l];
    }
  }
}

void InteractionBackward(const float* z, const float* dout, int batch, int f, int d, float* dz) {
  const int width = InteractionWidth(f, d);
  const int pairs = f * (f - 1) / 2;
  const long fd = static_cast<long>(f) * d;
  std::vector<float> tile(fd * kLanes), dtile(fd * kLanes);
  std::vector<float> grads(static_cast<size_t>(pairs) * kLanes);
  for (int e0 = 0; e0 < batch; e0 += kLanes) {
    const int n = std::min(kLanes, batch - e0);
    LoadTile(z, e0, n, f, d, tile.data());
    for (int l = 0; l < kLanes; ++l) {
      const float* ge = l < n ? dout + static_cast<long>(e0 + l) * width + d : nullptr;
      for (int p = 0; p < pairs; ++p) grads[p * kLanes + l] = ge ? ge[p] : 0.0f;
    }
    std::fill(dtile.begin(), dtile.end(), 0.0f);
    const float* g = grads.data();
    for (int i = 1; i < f; ++i) {
      const float* zi = tile.data() + static_cast<long>(i) * d * kLanes;
      float* dzi = dtile.data() + static_cast<long>(i) * d * kLanes;
      for (int j = 0; j < i; ++j, g += kLanes) {
        const float* zj = tile.data() + static_cast<long>(j) * d * kLanes;
        float* dzj = dtile.data() + static_cast<long>(j) * d * kLanes;
        for (int k = 0; k < d; ++k) {
          for (int l = 0; l < kLanes; ++l) {
            dzi[k * kLanes + l] += g[l] * zj[k * kLanes + l];
            dzj[k * kLanes + l] += g[l] * zi[k * kLanes + l];
          }
        }
      }
    }
    for (int l = 0; l < n; ++l) {
      float* dze = dz + (e0 + l) * fd;
      for (long v = 0; v < fd; ++v) dze[v] = dtile[v * kLanes + l];
      // The first vector is also passed through to the output unchanged.
      const float* pass = dout + static_cast<long>(e0 + l) * width;
      for (int k = 0; k < d; ++k) dze[k] += pass[k];
    }
  }
}

double SigmoidCrossEntropy(const float* logits, const float* labels, int batch, float* probs,
                           float* dlogits) {
  double loss = 0;
  for (int i = 0; i < batch; ++i) {
    const double x = logits[i];
    const double y = labels[i];
    // Stable form: log(1 + e^x) - y x, with log1p(e^-|x|) + max(x, 0).
    loss += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)));
    const double p = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
    probs[i] = static_cast<float>(p);
    if (dlogits != nullptr) dlogits[i] = static_cast<float>((p - y) / batch);
  }
  return loss / batch;
}

}  // namespace shadowsync::model
