#include "common/model/dense_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

extern "C" void openblas_set_num_threads(int num_threads);

namespace shadowsync::model {

void UseSingleThreadedBlas() { openblas_set_num_threads(1); }

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void LinearForward(const float* x, int batch, int in, int out, const float* w, const float* b,
                   float* y) {
  // Seed y with the bias so the GEMM accumulates onto it (beta = 1).
  for (int i = 0; i < batch; ++i)
    std::memcpy(y + static_cast<long>(i) * out, b, out * sizeof(float));
  Gemm(false, true, batch, out, in, 1.0f, x, in, w, in, 1.0f, y, out);
}

void LinearBackward(const float* x, const float* dy, int batch, int in, int out, const float* w,
                    float* dx, float* dw, float* db) {
  Gemm(true, false, out, in, batch, 1.0f, dy, out, x, in, 0.0f, dw, in);
  std::fill(db, db + out, 0.0f);
  for (int i = 0; i < batch; ++i) {
    const float* row = dy + static_cast<long>(i) * out;
    for (int j = 0; j < out; ++j) db[j] += row[j];
  }
  if (dx != nullptr) Gemm(false, false, batch, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}

void ReluInPlace(float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = std::max(y[i], 0.0f);
}

void ReluBackwardInPlace(const float* y, float* dy, long n) {
  for (long i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void InteractionForward(const float* z, int batch, int f, int d, float* out) {
  const int width = InteractionWidth(f, d);
  for (int e = 0; e < batch; ++e) {
    const float* ze = z + static_cast<long>(e) * f * d;
    float* oe = out + static_cast<long>(e) * width;
    std::memcpy(oe, ze, d * sizeof(float));
    float* dots = oe + d;
    for (int i = 1; i < f; ++i) {
      const float* zi = ze + i * d;
      for (int j = 0; j < i; ++j) {
        const float* zj = ze + j * d;
        float s = 0;
        for (int k = 0; k < d; ++k) s += zi[k] * zj[k];
        *dots++ = s;
      }
    }
  }
}

void InteractionBackward(const float* z, const float* dout, int batch, int f, int d, float* dz) {
  const int width = InteractionWidth(f, d);
  for (int e = 0; e < batch; ++e) {
    const float* ze = z + static_cast<long>(e) * f * d;
    const float* ge = dout + static_cast<long>(e) * width;
    float* dze = dz + static_cast<long>(e) * f * d;
    std::memcpy(dze, ge, d * sizeof(float));
    std::fill(dze + d, dze + f * d, 0.0f);
    const float* g = ge + d;
    for (int i = 1; i < f; ++i) {
      const float* zi = ze + i * d;
      float* dzi = dze + i * d;
      for (int j = 0; j < i; ++j) {
        const float gij = *g++;
        const float* zj = ze + j * d;
        float* dzj = dze + j * d;
        for (int k = 0; k < d; ++k) {
          dzi[k] += gij * zj[k];
          dzj[k] += gij * zi[k];
        }
      }
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
