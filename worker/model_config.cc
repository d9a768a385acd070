#include "worker/model_config.h"

#include <algorithm>

namespace shadowsync::worker {

model::DlrmConfig DlrmConfigFor(const ModelSpec& spec) {
  model::DlrmConfig config;
  config.num_dense = spec.dense_features;
  config.embedding_dim = spec.embedding_dim;
  config.bottom_mlp = spec.bottom_mlp;
  config.top_mlp = spec.top_mlp;
  config.num_tables = static_cast<int>(spec.tables.size());
  config.interaction = spec.interaction == ModelInteraction::kDcn ? model::Interaction::kDcn
                                                                  : model::Interaction::kDot;
  config.dcn_layers = spec.dcn.layers;
  config.dcn_low_rank = spec.dcn.low_rank;
  // Empty while every table sums, as DlrmConfig has it.
  if (std::any_of(spec.tables.begin(), spec.tables.end(),
                  [](const TableSpec& t) { return t.pooling == TablePooling::kMean; })) {
    for (const TableSpec& t : spec.tables) {
      config.pooling.push_back(t.pooling == TablePooling::kMean ? model::Pooling::kMean
                                                                : model::Pooling::kSum);
    }
  }
  return config;
}

}  // namespace shadowsync::worker
