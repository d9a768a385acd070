// The DLRM-style CTR model (docs/architecture.md): dense features -> bottom MLP; one
// pooled embedding per table; an interaction of the bottom output and the
// embeddings (pairwise dots, or DCN-v2's cross layers); top MLP -> logit;
// binary cross-entropy.
//
// All dense parameters live in one flat float vector (layer by layer: W then
// b), so trainers can snapshot, average and range-partition them as one
// array. A Dlrm is immutable after construction and safe to share; each
// thread brings its own Workspace.
//
//   Dlrm model(DlrmConfig{});
//   std::vector<float> params(model.num_params());
//   model.InitParams(/*seed=*/1, params);
//   auto ws = model.NewWorkspace(/*max_batch=*/256);
//   double loss = model.Step(params.data(), batch, ws.get(), probs, &grads);
#ifndef SHADOWSYNC_MODEL_DLRM_H_
#define SHADOWSYNC_MODEL_DLRM_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/dense_ops.h"
#include "model/gemm.h"
#include "nlohmann/json_fwd.hpp"

namespace shadowsync::model {

// How the bottom MLP's output and the pooled embeddings meet before the top MLP.
enum class Interaction {
  // DLRM: the bottom output followed by every pairwise dot product.
  kDot,
  // DCN-v2, the interaction of DLRMv2 (MLPerf) and TorchRec's DLRM_DCN: over
  // x0, the concatenated bottom output and embeddings (width n), low-rank
  // cross layers x_{l+1} = x0 * (U_l (V_l x_l) + b_l) + x_l, with V_l r x n
  // and U_l n x r; the top MLP reads the last x.
  kDcn,
};

// How a table's rows for one example's ids become its one embedding: their
// sum, or their mean (a multi-hot field's; a single id is the same either way).
enum class Pooling { kSum, kMean };
absl::StatusOr<Pooling> ParsePooling(std::string_view name, std::string_view field);
std::string_view PoolingName(Pooling pooling);

// "dot" or "dcn"; InvalidArgument naming `field` otherwise.
absl::StatusOr<Interaction> ParseInteraction(std::string_view name, std::string_view field);
std::string_view InteractionName(Interaction interaction);

struct DlrmConfig {
  int num_dense = 13;      // Dense input features.
  int embedding_dim = 16;  // Width of every embedding and of the bottom output.
  std::vector<int> bottom_mlp = {512, 256,
                                 64};     // Hidden widths; a final layer of embedding_dim follows.
  std::vector<int> top_mlp = {512, 256};  // Hidden widths; a final layer of width 1 follows.
  int num_tables = 26;                    // Sparse features, one embedding table each.
  Interaction interaction = Interaction::kDot;
  int dcn_layers = 3;      // kDcn: cross layers.
  int dcn_low_rank = 512;  // kDcn: r, the inner width of each layer's U V factorisation.
  // Per table, or empty: every table sums.
  std::vector<Pooling> pooling;

  // InvalidArgument naming the field for a shape that cannot be built.
  absl::Status Validate() const;
  friend bool operator==(const DlrmConfig&, const DlrmConfig&) = default;
};

nlohmann::json DlrmConfigToJson(const DlrmConfig& config);
absl::Status DlrmConfigFromJson(const nlohmann::json& json, DlrmConfig* config);

// The arithmetic of the MLP layers' GEMMs. Parameters, activations, gradients
// and the optimizer stay fp32 either way; kBf16 rounds each GEMM's inputs to
// bf16 (mixed precision), which about doubles GEMM throughput on CPUs with
// AVX512-BF16 (docs/decisions.md).
enum class DensePrecision { kFp32, kBf16 };

// "fp32", "bf16", or "auto": bf16 where the CPU has native bf16 dot products
// (CpuHasNativeBf16), else fp32. InvalidArgument naming `field` otherwise.
absl::StatusOr<DensePrecision> ParseDensePrecision(std::string_view name, std::string_view field);
std::string_view DensePrecisionName(DensePrecision precision);

// Where one linear layer's weights sit in the flat parameter vector.
struct LayerShape {
  int in = 0;
  int out = 0;
  int64_t w_offset = 0;  // out x in, row-major.
  int64_t b_offset = 0;  // out.
  bool relu = true;      // ReLU after this layer.
  bool bias = true;      // Whether b is there (b_offset unused when not).
};

// One DCN-v2 cross layer as two linear layers: `down` (V, n -> r, no bias)
// and `up` (U and b, r -> n).
struct CrossLayerShape {
  LayerShape down;
  LayerShape up;
};

// One table's sparse input for a batch of B examples: example b pools (sums,
// or averages: DlrmConfig::pooling) rows[row_index[k]] for k in [offsets[b],
// offsets[b + 1]). `rows` holds the batch's unique rows of that table, as
// looked up from the EmbeddingStore.
struct SparseInput {
  std::span<const float> rows;         // unique_rows x dim
  std::span<const int32_t> row_index;  // one entry per id occurrence
  std::span<const int32_t> offsets;    // B + 1 entries
};

struct BatchView {
  int size = 0;                         // B
  const float* dense = nullptr;         // B x num_dense
  const float* labels = nullptr;        // B (may be null for Forward)
  std::span<const SparseInput> sparse;  // num_tables entries
};

// Gradients of the mean loss over the batch.
struct Gradients {
  std::span<float> dense;              // num_params()
  std::vector<std::span<float>> rows;  // per table: unique_rows x dim, summed over occurrences
};

class Dlrm {
 public:
  // REQUIRES: config.Validate().ok().
  explicit Dlrm(DlrmConfig config);
  ~Dlrm();

  const DlrmConfig& config() const { return config_; }
  const std::vector<LayerShape>& bottom_layers() const { return bottom_; }
  const std::vector<LayerShape>& top_layers() const { return top_; }
  // Empty unless config().interaction is kDcn.
  const std::vector<CrossLayerShape>& cross_layers() const { return cross_; }
  int64_t num_params() const { return num_params_; }
  // The width of the interaction's output, which the top MLP reads.
  int interaction_width() const;
  // Floating-point operations of one example's forward and backward pass, as computed.
  double FlopsPerExample() const;
  // The shapes of the fp32 GEMMs of one training step on `batch` examples
  // (for ChooseGemmKernel).
  std::vector<GemmShape> GemmShapes(int batch) const;

  // The DLRM reference initialisation: W ~ N(0, sqrt(2 / (in + out))),
  // b ~ N(0, sqrt(1 / out)); cross layers as TorchRec's: U and V the same
  // (Xavier normal), b = 0. Deterministic for a seed.
  void InitParams(uint64_t seed, std::span<float> params) const;

  // Scratch buffers for batches of up to max_batch examples: one per thread.
  struct Workspace {
    int max_batch = 0;
    DensePrecision precision = DensePrecision::kFp32;
    GemmKernel gemm = GemmKernel::kOneDnn;                // kFp32's
    std::vector<std::vector<float>> bottom_out, top_out;  // post-activation outputs
    std::vector<float> z, dz, interaction, delta_a, delta_b;
    // kDcn: per cross layer, V x (u), U u + b (v) and the layer's output; the
    // gradient flowing down the stack (cross_g).
    std::vector<std::vector<float>> cross_u, cross_v, cross_out;
    std::vector<float> cross_g;
    // kBf16 only: each layer's input and weights as rounded in the forward
    // pass (the backward pass reuses them), the output gradient, and the GEMM.
    // Cross layers keep two entries each: down, then up.
    std::vector<std::vector<Bf16>> bottom_in16, top_in16, bottom_w16, top_w16, cross_in16,
        cross_w16;
    std::vector<Bf16> delta16;
    std::unique_ptr<Bf16Gemm> gemm16;
  };
  std::unique_ptr<Workspace> NewWorkspace(int max_batch,
                                          DensePrecision precision = DensePrecision::kFp32,
                                          GemmKernel gemm = GemmKernel::kOneDnn) const;

  // Forward pass: writes B probabilities. When grads is not null, also runs
  // the backward pass (labels required) and overwrites *grads. Returns the
  // mean binary cross-entropy (0 when labels are null).
  // REQUIRES: batch.size <= the workspace's max_batch; grads->rows[t] sized to
  // batch.sparse[t].rows.
  double Step(const float* params, const BatchView& batch, Workspace* ws, float* probs,
              Gradients* grads) const;

 private:
  DlrmConfig config_;
  std::vector<LayerShape> bottom_;
  std::vector<LayerShape> top_;
  bool MeanPooled(int table) const {
    return !config_.pooling.empty() && config_.pooling[table] == Pooling::kMean;
  }

  std::vector<CrossLayerShape> cross_;
  int64_t num_params_ = 0;
};

}  // namespace shadowsync::model

#endif  // SHADOWSYNC_MODEL_DLRM_H_
