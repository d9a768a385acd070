// Dense kernels of the DLRM model, batched over examples and row-major:
// GEMM (OpenBLAS through CBLAS), linear layers, ReLU, the pairwise-dot feature
// interaction and binary cross-entropy. Pure functions over caller-owned
// buffers; safe to call from any number of threads on distinct outputs.
#ifndef SHADOWSYNC_COMMON_MODEL_DENSE_OPS_H_
#define SHADOWSYNC_COMMON_MODEL_DENSE_OPS_H_

namespace shadowsync::model {

// Parallelism comes from Hogwild threads, each running its own GEMMs, so BLAS
// itself must stay single-threaded. Call once at process start.
void UseSingleThreadedBlas();

// C = alpha * op(A) * op(B) + beta * C, all row-major; op(A) is m x k.
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);

// y (batch x out) = x (batch x in) * W^T + b, with W out x in.
void LinearForward(const float* x, int batch, int in, int out, const float* w, const float* b,
                   float* y);

// Given dy (batch x out): dw = dy^T x and db = column sums of dy (both
// overwritten), and dx = dy W when dx is not null.
void LinearBackward(const float* x, const float* dy, int batch, int in, int out, const float* w,
                    float* dx, float* dw, float* db);

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

#endif  // SHADOWSYNC_COMMON_MODEL_DENSE_OPS_H_
