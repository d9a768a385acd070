#include "exporter/evaluate_export.h"

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/criteo_reader.h"
#include "worker/trainer.h"

namespace shadowsync::exporter {

absl::StatusOr<ModelScore> EvaluateModel(model::SavedModel& model,
                                         const std::vector<std::string>& data,
                                         const ModelEvalOptions& options) {
  worker::TrainerOptions o;
  o.threads = options.threads;
  o.batch_size = options.batch_size;
  o.precision = options.precision;
  o.optimizer = model.store_options.optimizer;
  o.gemm = options.gemm;
  worker::Trainer trainer(model.config, model.store_options.tables, o, model.store.get());
  trainer.params() = model.params;
  SS_ASSIGN_OR_RETURN(QualityReport quality, trainer.Evaluate(data));
  return ModelScore{.quality = quality, .gemm = trainer.gemm().kernel};
}

absl::StatusOr<model::RowFilter> RowsLookedUpBy(
    const model::DlrmConfig& config, const std::vector<model::EmbeddingTableConfig>& tables,
    const std::vector<std::string>& data) {
  auto wanted = std::make_shared<std::vector<absl::flat_hash_set<uint64_t>>>(tables.size());
  SS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> input,
                      CriteoReader::Open(data, worker::TrainerOptions().reader));
  ExampleBlock block;
  while (true) {
    SS_ASSIGN_OR_RETURN(const bool more, input->Next(&block));
    if (!more) break;
    for (int64_t e = 0; e < block.size(); ++e) {
      for (int t = 0; t < config.num_tables; ++t) {
        for (const uint64_t id : block.ids(e, t)) {
          (*wanted)[t].insert(model::BucketOf(t, id, tables[t].hash_buckets));
        }
      }
    }
  }
  return [wanted](uint32_t table, uint64_t id) {
    return table < wanted->size() && (*wanted)[table].contains(id);
  };
}

absl::StatusOr<ModelScore> EvaluateExport(const std::string& dir,
                                          const std::vector<std::string>& data,
                                          ModelEvalOptions options) {
  SS_ASSIGN_OR_RETURN(model::ExportReader reader, model::ExportReader::Open(dir));
  if (!options.gemm.has_value()) {
    SS_ASSIGN_OR_RETURN(options.gemm, model::ScoredGemmKernel(reader));
  }
  SS_ASSIGN_OR_RETURN(const model::RowFilter keep,
                      RowsLookedUpBy(reader.config(), reader.info().embeddings.tables, data));
  SS_ASSIGN_OR_RETURN(model::SavedModel model, model::LoadExport(dir, keep));
  return EvaluateModel(model, data, options);
}

nlohmann::json EvalJson(const ModelScore& score) {
  const QualityReport& q = score.quality;
  return {{"eval_examples", q.examples},
          {"eval_ne", q.ne},
          {"eval_auc", q.auc},
          {"eval_logloss", q.logloss},
          {"eval_ctr", q.ctr},
          {"eval_calibration", q.calibration},
          {"gemm", model::GemmKernelName(score.gemm)}};
}

}  // namespace shadowsync::exporter
