// Dense kernels of the DLRM model, batched over examples and row-major:
// linear layers (their GEMMs in model/gemm.h), ReLU, the pairwise-dot
// feature interaction and binary cross-entropy. Functions over caller-owned
// buffers; safe to call from any number of threads on distinct outputs.
#ifndef SHADOWSYNC_MODEL_DENSE_OPS_H_
#define SHADOWSYNC_MODEL_DENSE_OPS_H_

#include <cstdint>

#include "model/gemm.h"

namespace shadowsync::model {

// y (batch x out) = x (batch x in) * W^T + b, with W out x in; no bias when b
// is null. The GEMMs run through `kernel`.
void LinearForward(const float* x, int batch, int in, int out, const float* w, const float* b,
                   float* y, GemmKernel kernel);

// Given dy (batch x out): dw = dy^T x and db = column sums of dy (both
// overwritten; db only when not null), and dx = dy W when dx is not null.
void LinearBackward(const float* x, const float* dy, int batch, int in, int out, const float* w,
                    float* dx, float* dw, float* db, GemmKernel kernel);

// y[i] = x[i] rounded to the nearest bf16, ties to even.
void ToBf16(const float* x, long n, Bf16* y);
float Bf16ToFloat(Bf16 x);

// Whether this CPU has bf16 dot-product instructions (AVX512-BF16). Without
// them oneDNN emulates bf16: still correct, but slower than fp32.
bool CpuHasNativeBf16();

// LinearForward and LinearBackward through a Bf16Gemm: x and w come rounded
// to bf16 (the forward pass rounds them once for both passes); dy is rounded
// into the caller's dy16 (batch x out). db stays an fp32 sum of dy.
void LinearForwardBf16(const Bf16* x, int batch, int in, int out, const Bf16* w, const float* b,
                       float* y, Bf16Gemm& gemm);
void LinearBackwardBf16(const Bf16* x, const float* dy, Bf16* dy16, int batch, int in, int out,
                        const Bf16* w, float* dx, float* dw, float* db, Bf16Gemm& gemm);

void ReluInPlace(float* y, long n);
// dy *= (y > 0), where y is the ReLU's output.
void ReluBackwardInPlace(const float* y, float* dy, long n);

// Feature interaction. z holds, per example, f vectors of dimension d
// (batch x f x d). out (batch x InteractionWidth(f, d)) gets z's first vector
// followed by the dots z_i . z_j for all i > j, in the order (1,0), (2,0),
// (2,1), (3,0), ...
constexpr int InteractionWidth(int f, int d) { return d + f * (f - 1) / 2; }
void InteractionForward(const float* z, int batch, int f, int d, float* out);
// dz (overwritten) from dout, the gradient of out.
void InteractionBackward(const float* z, const float* dout, int batch, int f, int d, float* dz);

// probs = sigmoid(logits); returns the mean binary cross-entropy and, when
// dlogits is not null, writes d(mean loss)/d(logit) = (p - y) / batch.
double SigmoidCrossEntropy(const float* logits, const float* labels, int batch, float* probs,
                           float* dlogits);

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_MODEL_DENSE_OPS_H_
