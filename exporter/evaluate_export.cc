#include "exporter/evaluate_export.h"

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "common/status_macros.h"
#include "data/criteo_reader.h"
#include "worker/trainer.h"

namespace shadowsync::exporter {

absl::StatusOr<QualityReport> EvaluateModel(model::SavedModel& model,
                                            const std::vector<std::string>& data,
                                            const ModelEvalOptions& options) {
  worker::TrainerOptions o;
  o.threads = options.threads;
  o.batch_size = options.batch_size;
  o.precision = options.precision;
  o.optimizer = model.store_options.optimizer;
  worker::Trainer trainer(model.config, model.store_options.tables, o, model.store.get());
  trainer.params() = model.params;
  return trainer.Evaluate(data);
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

absl::StatusOr<QualityReport> EvaluateExport(const std::string& dir,
                                             const std::vector<std::string>& data,
                                             const ModelEvalOptions& options) {
  SS_ASSIGN_OR_RETURN(model::ExportReader reader, model::ExportReader::Open(dir));
  SS_ASSIGN_OR_RETURN(const model::RowFilter keep,
                      RowsLookedUpBy(reader.config(), reader.info().embeddings.tables, data));
  SS_ASSIGN_OR_RETURN(model::SavedModel model, model::LoadExport(dir, keep));
  return EvaluateModel(model, data, options);
}

nlohmann::json EvalJson(const QualityReport& q) {
  return {{"eval_examples", q.examples}, {"eval_ne", q.ne},   {"eval_auc", q.auc},
          {"eval_logloss", q.logloss},   {"eval_ctr", q.ctr}, {"eval_calibration", q.calibration}};
}

}  // namespace shadowsync::exporter
