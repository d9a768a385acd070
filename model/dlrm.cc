#include "model/dlrm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"
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
  if (!pooling.empty() && static_cast<int>(pooling.size()) != num_tables) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.tables: ", pooling.size(), " poolings for ", num_tables, " tables"));
  }
  if (interaction == Interaction::kDcn) {
    if (auto s = positive("model.dcn.layers", dcn_layers); !s.ok()) return s;
    if (auto s = positive("model.dcn.lowRank", dcn_low_rank); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<Pooling> ParsePooling(std::string_view name, std::string_view field) {
  if (name == "sum") return Pooling::kSum;
  if (name == "mean") return Pooling::kMean;
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(field), ": '", std::string(name), "' is not one of sum, mean"));
}

std::string_view PoolingName(Pooling pooling) { return pooling == Pooling::kMean ? "mean" : "sum"; }

absl::StatusOr<Interaction> ParseInteraction(std::string_view name, std::string_view field) {
  if (name == "dot") return Interaction::kDot;
  if (name == "dcn") return Interaction::kDcn;
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(field), ": '", std::string(name), "' is not one of dot, dcn"));
}

std::string_view InteractionName(Interaction interaction) {
  return interaction == Interaction::kDcn ? "dcn" : "dot";
}

nlohmann::json DlrmConfigToJson(const DlrmConfig& c) {
  nlohmann::json json = {
      {"denseFeatures", c.num_dense}, {"embeddingDim", c.embedding_dim},
      {"bottomMlp", c.bottom_mlp},    {"topMlp", c.top_mlp},
      {"numTables", c.num_tables},    {"interaction", InteractionName(c.interaction)}};
  if (c.interaction == Interaction::kDcn) {
    json["dcn"] = {{"layers", c.dcn_layers}, {"lowRank", c.dcn_low_rank}};
  }
  // Only when some table averages: a sum-only model's JSON is as before.
  if (std::find(c.pooling.begin(), c.pooling.end(), Pooling::kMean) != c.pooling.end()) {
    for (Pooling p : c.pooling) json["pooling"].push_back(PoolingName(p));
  }
  return json;
}

absl::Status DlrmConfigFromJson(const nlohmann::json& json, DlrmConfig* config) {
  try {
    DlrmConfig c;
    c.num_dense = json.at("denseFeatures").get<int>();
    c.embedding_dim = json.at("embeddingDim").get<int>();
    c.bottom_mlp = json.at("bottomMlp").get<std::vector<int>>();
    c.top_mlp = json.at("topMlp").get<std::vector<int>>();
    c.num_tables = json.at("numTables").get<int>();
    // Files written before DCN-v2 have no "interaction": they are dot models.
    SS_ASSIGN_OR_RETURN(c.interaction, ParseInteraction(json.value("interaction", "dot"),
                                                        "model config: interaction"));
    if (c.interaction == Interaction::kDcn) {
      c.dcn_layers = json.at("dcn").at("layers").get<int>();
      c.dcn_low_rank = json.at("dcn").at("lowRank").get<int>();
    }
    if (json.contains("pooling")) {
      for (const auto& name : json.at("pooling")) {
        SS_ASSIGN_OR_RETURN(Pooling p,
                            ParsePooling(name.get<std::string>(), "model config: pooling"));
        c.pooling.push_back(p);
      }
    }
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

// The layout is bottom, cross (kDcn only), top: a dot model's is what it
// was before cross layers existed.
Dlrm::Dlrm(DlrmConfig config) : config_(std::move(config)) {
  int64_t offset = 0;
  bottom_ = BuildLayers(config_.num_dense, config_.bottom_mlp, config_.embedding_dim,
                        /*relu_last=*/true, &offset);
  if (config_.interaction == Interaction::kDcn) {
    const int n = interaction_width(), r = config_.dcn_low_rank;
    for (int l = 0; l < config_.dcn_layers; ++l) {
      CrossLayerShape c;
      c.down = {.in = n, .out = r, .w_offset = offset, .relu = false, .bias = false};
      offset += static_cast<int64_t>(n) * r;
      c.up = {.in = r,
              .out = n,
              .w_offset = offset,
              .b_offset = offset + int64_t{r} * n,
              .relu = false};
      offset = c.up.b_offset + n;
      cross_.push_back(c);
    }
  }
  top_ = BuildLayers(interaction_width(), config_.top_mlp, 1, /*relu_last=*/false, &offset);
  num_params_ = offset;
}

Dlrm::~Dlrm() = default;

int Dlrm::interaction_width() const {
  const int f = NumFeatureVectors(config_), d = config_.embedding_dim;
  return config_.interaction == Interaction::kDcn ? f * d : InteractionWidth(f, d);
}

double Dlrm::FlopsPerExample() const {
  // The layers' GEMMs for one example: forward, weight gradient, and input
  // gradient (none for the first layer, whose input is data).
  double flops = 0;
  for (const GemmShape& s : GemmShapes(1)) flops += 2.0 * s.m * s.n * s.k;
  // Cross layers: x0 * v + x forward; x0 * g and v * g backward.
  for (const auto& c : cross_) flops += 2.0 * c.up.out * 2;
  if (config_.interaction == Interaction::kDcn) return flops;
  const int f = NumFeatureVectors(config_);
  const double dot_macs = f * (f - 1) / 2.0 * config_.embedding_dim;
  return flops + 2 * dot_macs * 3;  // one forward dot, two backward products
}

std::vector<GemmShape> Dlrm::GemmShapes(int batch) const {
  std::vector<GemmShape> shapes;
  bool first = true;
  // As LinearForward and LinearBackward call Gemm.
  auto add = [&](const LayerShape& l) {
    shapes.push_back({false, true, batch, l.out, l.in});
    shapes.push_back({true, false, l.out, l.in, batch});
    if (!first) shapes.push_back({false, false, batch, l.in, l.out});
    first = false;
  };
  for (const auto& l : bottom_) add(l);
  for (const auto& c : cross_) {
    add(c.down);
    add(c.up);
  }
  for (const auto& l : top_) add(l);
  return shapes;
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
  auto init = [&](const LayerShape& l, bool zero_bias) {
    const double w_std = std::sqrt(2.0 / (l.in + l.out));
    for (int64_t i = 0; i < static_cast<int64_t>(l.in) * l.out; ++i) {
      params[l.w_offset + i] = normal(w_std);
    }
    if (!l.bias) return;
    const double b_std = std::sqrt(1.0 / l.out);
    for (int i = 0; i < l.out; ++i) params[l.b_offset + i] = zero_bias ? 0.0f : normal(b_std);
  };
  for (const auto& l : bottom_) init(l, false);
  for (const auto& c : cross_) {
    init(c.down, true);
    init(c.up, true);
  }
  for (const auto& l : top_) init(l, false);
}

std::unique_ptr<Dlrm::Workspace> Dlrm::NewWorkspace(int max_batch, DensePrecision precision,
                                                    GemmKernel gemm) const {
  auto ws = std::make_unique<Workspace>();
  ws->max_batch = max_batch;
  ws->precision = precision;
  ws->gemm = gemm;
  const size_t b = static_cast<size_t>(max_batch);
  for (const auto& l : bottom_) ws->bottom_out.emplace_back(b * l.out);
  for (const auto& l : top_) ws->top_out.emplace_back(b * l.out);
  ws->z.resize(b * NumFeatureVectors(config_) * config_.embedding_dim);
  ws->dz.resize(ws->z.size());
  int width = std::max({MaxWidth(bottom_), MaxWidth(top_), interaction_width()});
  if (cross_.empty()) ws->interaction.resize(b * interaction_width());
  for (const auto& c : cross_) {
    ws->cross_u.emplace_back(b * c.down.out);
    ws->cross_v.emplace_back(b * c.up.out);
    ws->cross_out.emplace_back(b * c.up.out);
    width = std::max(width, c.down.out);
  }
  if (!cross_.empty()) ws->cross_g.resize(b * interaction_width());
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
    for (const auto& c : cross_) {
      for (const LayerShape* l : {&c.down, &c.up}) {
        ws->cross_in16.emplace_back(b * l->in);
        ws->cross_w16.emplace_back(static_cast<size_t>(l->in) * l->out);
      }
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
  const float* bias = s.bias ? params + s.b_offset : nullptr;
  if (ws->precision == DensePrecision::kBf16) {
    ToBf16(x, static_cast<long>(B) * s.in, in16->data());
    ToBf16(params + s.w_offset, static_cast<long>(s.in) * s.out, w16->data());
    LinearForwardBf16(in16->data(), B, s.in, s.out, w16->data(), bias, y, *ws->gemm16);
  } else {
    LinearForward(x, B, s.in, s.out, params + s.w_offset, bias, y, ws->gemm);
  }
  if (s.relu) ReluInPlace(y, static_cast<long>(B) * s.out);
}

// One layer's backward pass, after its ReLU's (if any): `dy` is d(loss)/d(output);
// writes the weight and bias gradients into dense_grad and, when dx is not
// null, d(loss)/d(input).
void BackwardLayer(const LayerShape& s, const float* params, const float* x, const Bf16* in16,
                   const Bf16* w16, const float* dy, int B, float* dx, float* dense_grad,
                   Dlrm::Workspace* ws) {
  float* db = s.bias ? dense_grad + s.b_offset : nullptr;
  if (ws->precision == DensePrecision::kBf16) {
    LinearBackwardBf16(in16, dy, ws->delta16.data(), B, s.in, s.out, w16, dx,
                       dense_grad + s.w_offset, db, *ws->gemm16);
  } else {
    LinearBackward(x, dy, B, s.in, s.out, params + s.w_offset, dx, dense_grad + s.w_offset, db,
                   ws->gemm);
  }
}

// The cross layers' forward pass from x0 (B x n); returns the last output.
const float* CrossForward(const std::vector<CrossLayerShape>& layers, const float* params,
                          const float* x0, int B, Dlrm::Workspace* ws) {
  const bool bf16 = ws->precision == DensePrecision::kBf16;
  const float* x = x0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const CrossLayerShape& c = layers[l];
    float* u = ws->cross_u[l].data();
    float* v = ws->cross_v[l].data();
    float* out = ws->cross_out[l].data();
    ForwardLayer(c.down, params, x, B, u, ws, bf16 ? &ws->cross_in16[2 * l] : nullptr,
                 bf16 ? &ws->cross_w16[2 * l] : nullptr);
    ForwardLayer(c.up, params, u, B, v, ws, bf16 ? &ws->cross_in16[2 * l + 1] : nullptr,
                 bf16 ? &ws->cross_w16[2 * l + 1] : nullptr);
    const long size = static_cast<long>(B) * c.up.out;
    for (long i = 0; i < size; ++i) out[i] = x0[i] * v[i] + x[i];
    x = out;
  }
  return x;
}

// The cross layers' backward pass: from d(loss)/d(last output) (B x n) to
// d(loss)/d(x0), written to dx0. x0 feeds every layer twice (the product and,
// through the residual chain, the first input), so its gradient sums both.
void CrossBackward(const std::vector<CrossLayerShape>& layers, const float* params, const float* x0,
                   int B, const float* d_last, float* dx0, float* dense_grad, Dlrm::Workspace* ws) {
  const bool bf16 = ws->precision == DensePrecision::kBf16;
  const long size = static_cast<long>(B) * layers.front().up.out;
  float* g = ws->cross_g.data();  // d(loss)/d(x_{l+1}), then d(loss)/d(x_l)
  std::copy(d_last, d_last + size, g);
  std::fill(dx0, dx0 + size, 0.0f);
  float* dv = ws->delta_a.data();
  float* du = ws->delta_b.data();
  float* dx = ws->delta_a.data();  // dv is spent by the time dx is written
  for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
    const CrossLayerShape& c = layers[l];
    const float* x = l > 0 ? ws->cross_out[l - 1].data() : x0;
    const float* v = ws->cross_v[l].data();
    for (long i = 0; i < size; ++i) {
      dv[i] = g[i] * x0[i];
      dx0[i] += g[i] * v[i];
    }
    BackwardLayer(c.up, params, ws->cross_u[l].data(),
                  bf16 ? ws->cross_in16[2 * l + 1].data() : nullptr,
                  bf16 ? ws->cross_w16[2 * l + 1].data() : nullptr, dv, B, du, dense_grad, ws);
    BackwardLayer(c.down, params, x, bf16 ? ws->cross_in16[2 * l].data() : nullptr,
                  bf16 ? ws->cross_w16[2 * l].data() : nullptr, du, B, dx, dense_grad, ws);
    for (long i = 0; i < size; ++i) g[i] += dx[i];
  }
  for (long i = 0; i < size; ++i) dx0[i] += g[i];
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
    const bool mean = MeanPooled(t);
    for (int b = 0; b < B; ++b) {
      float* dst = z + (static_cast<long>(b) * F + 1 + t) * D;
      std::fill(dst, dst + D, 0.0f);
      for (int k = in.offsets[b]; k < in.offsets[b + 1]; ++k) {
        const float* row = in.rows.data() + static_cast<long>(in.row_index[k]) * D;
        for (int d = 0; d < D; ++d) dst[d] += row[d];
      }
      const int n = in.offsets[b + 1] - in.offsets[b];
      if (mean && n > 1) {
        for (int d = 0; d < D; ++d) dst[d] /= static_cast<float>(n);
      }
    }
  }
  const float* top_input;
  if (cross_.empty()) {
    InteractionForward(z, B, F, D, ws->interaction.data());
    top_input = ws->interaction.data();
  } else {
    top_input = CrossForward(cross_, params, z, B, ws);
  }

  // Top MLP.
  x = top_input;
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
      BackwardLayer(s, params, l > 0 ? outputs[l - 1].data() : stack_input,
                    bf16 ? in16[l].data() : nullptr, bf16 ? w16[l].data() : nullptr, delta, B, dx,
                    dense_grad, ws);
      std::swap(delta, delta_in);
    }
  };
  backward(top_, ws->top_out, top_input, ws->top_in16, ws->top_w16, /*need_input_grad=*/true);

  float* dz = ws->dz.data();
  if (cross_.empty()) {
    InteractionBackward(z, delta, B, F, D, dz);
  } else {
    CrossBackward(cross_, params, z, B, delta, dz, dense_grad, ws);
  }

  // Embedding row gradients: each occurrence adds its example's dz slice
  // (over the count, for a mean).
  for (int t = 0; t < config_.num_tables; ++t) {
    const SparseInput& in = batch.sparse[t];
    const bool mean = MeanPooled(t);
    std::span<float> g = grads->rows[t];
    std::fill(g.begin(), g.end(), 0.0f);
    for (int b = 0; b < B; ++b) {
      const float* src = dz + (static_cast<long>(b) * F + 1 + t) * D;
      const int n = in.offsets[b + 1] - in.offsets[b];
      const float scale = mean && n > 1 ? 1.0f / static_cast<float>(n) : 1.0f;
      for (int k = in.offsets[b]; k < in.offsets[b + 1]; ++k) {
        float* dst = g.data() + static_cast<long>(in.row_index[k]) * D;
        for (int d = 0; d < D; ++d) dst[d] += scale * src[d];
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
