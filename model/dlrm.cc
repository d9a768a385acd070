#include "model/dlrm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "model/dense_ops.h"
#include "nlohmann/json.hpp"

namespace shadowsync::model {

absl::Status DlrmConfig::Validate() const {
  auto positive = [](const char* field, int v) -> absl::Status {
    if (v >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, ": must be >= 1, got ", v));
  };
  if (auto s = positive("model.denseFeatures", num_dense); !s.ok()) return s;
  if (auto s = positive("model.embeddingDim", embedding_dim); !s.ok()) return s;
  if (auto s = positive("model.tables (count)", num_tables); !s.ok()) return s;
  for (size_t i = 0; i < bottom_mlp.size(); ++i) {
    if (bottom_mlp[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.bottomMlp[", i, "]: must be >= 1, got ", bottom_mlp[i]));
    }
  }
  for (size_t i = 0; i < top_mlp.size(); ++i) {
    if (top_mlp[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.topMlp[", i, "]: must be >= 1, got ", top_mlp[i]));
    }
  }
  return absl::OkStatus();
}

nlohmann::json DlrmConfigToJson(const DlrmConfig& c) {
  return {{"denseFeatures", c.num_dense},
          {"embeddingDim", c.embedding_dim},
          {"bottomMlp", c.bottom_mlp},
          {"topMlp", c.top_mlp},
          {"numTables", c.num_tables}};
}

absl::Status DlrmConfigFromJson(const nlohmann::json& json, DlrmConfig* config) {
  try {
    DlrmConfig c;
    c.num_dense = json.at("denseFeatures").get<int>();
    c.embedding_dim = json.at("embeddingDim").get<int>();
    c.bottom_mlp = json.at("bottomMlp").get<std::vector<int>>();
    c.top_mlp = json.at("topMlp").get<std::vector<int>>();
    c.num_tables = json.at("numTables").get<int>();
    if (auto s = c.Validate(); !s.ok()) return s;
    *config = std::move(c);
    return absl::OkStatus();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("model config: ", e.what()));
  }
}

absl::StatusOr<DensePrecision> ParseDensePrecision(std::string_view name, std::string_view field) {
  if (name == "fp32") return DensePrecision::kFp32;
  if (name == "bf16") return DensePrecision::kBf16;
  if (name == "auto") return CpuHasNativeBf16() ? DensePrecision::kBf16 : DensePrecision::kFp32;
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": '", std::string(name),
                                                 "' is not one of auto, fp32, bf16"));
}

std::string_view DensePrecisionName(DensePrecision precision) {
  return precision == DensePrecision::kBf16 ? "bf16" : "fp32";
}

namespace {

std::vector<LayerShape> BuildLayers(int in, const std::vector<int>& hidden, int last_width,
                                    bool relu_last, int64_t* offset) {
  std::vector<LayerShape> layers;
  std::vector<int> widths = hidden;
  widths.push_back(last_width);
  for (size_t i = 0; i < widths.size(); ++i) {
    LayerShape l;
    l.in = in;
    l.out = widths[i];
    l.w_offset = *offset;
    l.b_offset = *offset + static_cast<int64_t>(l.in) * l.out;
    l.relu = i + 1 < widths.size() || relu_last;
    *offset = l.b_offset + l.out;
    layers.push_back(l);
    in = l.out;
  }
  return layers;
}

int NumFeatureVectors(const DlrmConfig& c) { return c.num_tables + 1; }

int MaxWidth(const std::vector<LayerShape>& layers) {
  int w = 0;
  for (const auto& l : layers) w = std::max({w, l.in, l.out});
  return w;
}

}  // namespace

Dlrm::Dlrm(DlrmConfig config) : config_(std::move(config)) {
  int64_t offset = 0;
  bottom_ = BuildLayers(config_.num_dense, config_.bottom_mlp, config_.embedding_dim,
                        /*relu_last=*/true, &offset);
  top_ = BuildLayers(interaction_width(), config_.top_mlp, 1, /*relu_last=*/false, &offset);
  num_params_ = offset;
}

Dlrm::~Dlrm() = default;

int Dlrm::interaction_width() const {
  return InteractionWidth(NumFeatureVectors(config_), config_.embedding_dim);
}

double Dlrm::FlopsPerExample() const {
  double flops = 0;
  bool first = true;
  for (const auto* layers : {&bottom_, &top_}) {
    for (const auto& l : *layers) {
      const double macs = static_cast<double>(l.in) * l.out;
      // Forward, weight gradient, and input gradient (skipped for the first
      // layer, whose input is data).
      flops += 2 * macs * (first ? 2 : 3);
      first = false;
    }
  }
  const int f = NumFeatureVectors(config_);
  const double dot_macs = f * (f - 1) / 2.0 * config_.embedding_dim;
  return flops + 2 * dot_macs * 3;  // one forward dot, two backward products
}

void Dlrm::InitParams(uint64_t seed, std::span<float> params) const {
  uint64_t key = Mix64(seed ^ 0xd1e5'0000'0000'0001ULL);
  // Box-Muller over the counter-based uniform: portable across standard libraries.
  auto normal = [&key](double stddev) {
    double u1 = std::max(static_cast<double>(UniformFromKey(key++)), 1e-12);
    double u2 = UniformFromKey(key++);
    return static_cast<float>(stddev * std::sqrt(-2 * std::log(u1)) *
                              std::cos(2 * std::numbers::pi * u2));
  };
  for (const auto* layers : {&bottom_, &top_}) {
    for (const auto& l : *layers) {
      const double w_std = std::sqrt(2.0 / (l.in + l.out));
      for (int64_t i = 0; i < static_cast<int64_t>(l.in) * l.out; ++i) {
        params[l.w_offset + i] = normal(w_std);
      }
      const double b_std = std::sqrt(1.0 / l.out);
      for (int i = 0; i < l.out; ++i) params[l.b_offset + i] = normal(b_std);
    }
  }
}

std::unique_ptr<Dlrm::Workspace> Dlrm::NewWorkspace(int max_batch, DensePrecision precision) const {
  auto ws = std::make_unique<Workspace>();
  ws->max_batch = max_batch;
  ws->precision = precision;
  const size_t b = static_cast<size_t>(max_batch);
  for (const auto& l : bottom_) ws->bottom_out.emplace_back(b * l.out);
  for (const auto& l : top_) ws->top_out.emplace_back(b * l.out);
  ws->z.resize(b * NumFeatureVectors(config_) * config_.embedding_dim);
  ws->dz.resize(ws->z.size());
  ws->interaction.resize(b * interaction_width());
  const int width = std::max({MaxWidth(bottom_), MaxWidth(top_), interaction_width()});
  ws->delta_a.resize(b * width);
  ws->delta_b.resize(b * width);
  if (precision == DensePrecision::kBf16) {
    for (const auto& l : bottom_) {
      ws->bottom_in16.emplace_back(b * l.in);
      ws->bottom_w16.emplace_back(static_cast<size_t>(l.in) * l.out);
    }
    for (const auto& l : top_) {
      ws->top_in16.emplace_back(b * l.in);
      ws->top_w16.emplace_back(static_cast<size_t>(l.in) * l.out);
    }
    ws->delta16.resize(b * width);
    ws->gemm16 = std::make_unique<Bf16Gemm>();
  }
  return ws;
}

namespace {

// One layer's forward pass (and ReLU) in the workspace's precision; for bf16,
// in16 and w16 keep the rounded input and weights for the backward pass.
void ForwardLayer(const LayerShape& s, const float* params, const float* x, int B, float* y,
                  Dlrm::Workspace* ws, std::vector<Bf16>* in16, std::vector<Bf16>* w16) {
  if (ws->precision == DensePrecision::kBf16) {
    ToBf16(x, static_cast<long>(B) * s.in, in16->data());
    ToBf16(params + s.w_offset, static_cast<long>(s.in) * s.out, w16->data());
    LinearForwardBf16(in16->data(), B, s.in, s.out, w16->data(), params + s.b_offset, y,
                      *ws->gemm16);
  } else {
    LinearForward(x, B, s.in, s.out, params + s.w_offset, params + s.b_offset, y);
  }
  if (s.relu) ReluInPlace(y, static_cast<long>(B) * s.out);
}

}  // namespace

double Dlrm::Step(const float* params, const BatchView& batch, Workspace* ws, float* probs,
                  Gradients* grads) const {
  const int B = batch.size;
  const int D = config_.embedding_dim;
  const int F = NumFeatureVectors(config_);

  // Bottom MLP.
  const bool bf16 = ws->precision == DensePrecision::kBf16;
  const float* x = batch.dense;
  for (size_t l = 0; l < bottom_.size(); ++l) {
    float* y = ws->bottom_out[l].data();
    ForwardLayer(bottom_[l], params, x, B, y, ws, bf16 ? &ws->bottom_in16[l] : nullptr,
                 bf16 ? &ws->bottom_w16[l] : nullptr);
    x = y;
  }

  // Z = [bottom output, pooled embedding of each table], per example.
  float* z = ws->z.data();
  for (int b = 0; b < B; ++b)
    std::memcpy(z + static_cast<long>(b) * F * D, x + b * D, D * sizeof(float));
  for (int t = 0; t < config_.num_tables; ++t) {
    const SparseInput& in = batch.sparse[t];
    for (int b = 0; b < B; ++b) {
      float* dst = z + (static_cast<long>(b) * F + 1 + t) * D;
      std::fill(dst, dst + D, 0.0f);
      for (int k = in.offsets[b]; k < in.offsets[b + 1]; ++k) {
        const float* row = in.rows.data() + static_cast<long>(in.row_index[k]) * D;
        for (int d = 0; d < D; ++d) dst[d] += row[d];
      }
    }
  }
  InteractionForward(z, B, F, D, ws->interaction.data());

  // Top MLP.
  x = ws->interaction.data();
  for (size_t l = 0; l < top_.size(); ++l) {
    float* y = ws->top_out[l].data();
    ForwardLayer(top_[l], params, x, B, y, ws, bf16 ? &ws->top_in16[l] : nullptr,
                 bf16 ? &ws->top_w16[l] : nullptr);
    x = y;
  }
  const float* logits = x;

  if (batch.labels == nullptr) {
    for (int b = 0; b < B; ++b) {
      probs[b] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[b]))));
    }
    return 0;
  }
  float* delta = ws->delta_a.data();
  float* delta_in = ws->delta_b.data();
  const double loss = SigmoidCrossEntropy(logits, batch.labels, B, probs, grads ? delta : nullptr);
  if (grads == nullptr) return loss;

  // Backward through a stack of layers: `delta` holds d(loss)/d(output of the
  // top layer of the stack); on return it holds d(loss)/d(stack input).
  float* dense_grad = grads->dense.data();
  auto backward = [&](const std::vector<LayerShape>& layers,
                      const std::vector<std::vector<float>>& outputs, const float* stack_input,
                      const std::vector<std::vector<Bf16>>& in16,
                      const std::vector<std::vector<Bf16>>& w16, bool need_input_grad) {
    for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
      const LayerShape& s = layers[l];
      if (s.relu) ReluBackwardInPlace(outputs[l].data(), delta, static_cast<long>(B) * s.out);
      float* dx = l > 0 || need_input_grad ? delta_in : nullptr;
      if (bf16) {
        LinearBackwardBf16(in16[l].data(), delta, ws->delta16.data(), B, s.in, s.out, w16[l].data(),
                           dx, dense_grad + s.w_offset, dense_grad + s.b_offset, *ws->gemm16);
      } else {
        const float* input = l > 0 ? outputs[l - 1].data() : stack_input;
        LinearBackward(input, delta, B, s.in, s.out, params + s.w_offset, dx,
                       dense_grad + s.w_offset, dense_grad + s.b_offset);
      }
      std::swap(delta, delta_in);
    }
  };
  backward(top_, ws->top_out, ws->interaction.data(), ws->top_in16, ws->top_w16,
           /*need_input_grad=*/true);

  float* dz = ws->dz.data();
  InteractionBackward(z, delta, B, F, D, dz);

  // Embedding row gradients: each occurrence adds its example's dz slice.
  for (int t = 0; t < config_.num_tables; ++t) {
    const SparseInput& in = batch.sparse[t];
    std::span<float> g = grads->rows[t];
    std::fill(g.begin(), g.end(), 0.0f);
    for (int b = 0; b < B; ++b) {
      const float* src = dz + (static_cast<long>(b) * F + 1 + t) * D;
      for (int k = in.offsets[b]; k < in.offsets[b + 1]; ++k) {
        float* dst = g.data() + static_cast<long>(in.row_index[k]) * D;
        for (int d = 0; d < D; ++d) dst[d] += src[d];
      }
    }
  }

  // d(bottom output) is each example's first dz vector.
  for (int b = 0; b < B; ++b)
    std::memcpy(delta + b * D, dz + static_cast<long>(b) * F * D, D * sizeof(float));
  backward(bottom_, ws->bottom_out, batch.dense, ws->bottom_in16, ws->bottom_w16,
           /*need_input_grad=*/false);
  return loss;
}

}  // namespace shadowsync::model
