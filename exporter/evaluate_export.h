// Scoring a saved model on held-out data: the one code path behind
// `shadowsync eval --model` and an export's manifest `eval` (ExportJob scores
// the rows it has just written, kept as it wrote them), so the two repeat the
// same arithmetic bit for bit.
//
//   SS_ASSIGN_OR_RETURN(QualityReport q, EvaluateExport("exports/model-000002", {"eval.tsv"}));
//   std::cout << EvalJson(q).dump(2);
//
// Thread-safe: the functions keep no state (each runs its own threads).
#ifndef SHADOWSYNC_EXPORTER_EVALUATE_EXPORT_H_
#define SHADOWSYNC_EXPORTER_EVALUATE_EXPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/eval_metrics.h"
#include "model/dlrm.h"
#include "model/export.h"
#include "model/model_io.h"
#include "nlohmann/json.hpp"

namespace shadowsync::exporter {

// `shadowsync eval`'s defaults, which an export's own score uses too.
struct ModelEvalOptions {
  int threads = 2;
  int batch_size = 1024;
  model::DensePrecision precision = model::DensePrecision::kFp32;
};

// The rows a model of `config` and `tables` looks up to score `data`,
// found as the trainer finds them (Trainer::CollectRows): a row left out
// would read as its initial value. What an export's score holds in memory.
absl::StatusOr<model::RowFilter> RowsLookedUpBy(
    const model::DlrmConfig& config, const std::vector<model::EmbeddingTableConfig>& tables,
    const std::vector<std::string>& data);

// The export at `dir` scored on `data` (Criteo TSV files). Only the rows the
// data looks up are held in memory (every part is still read and its
// checksum verified): an export may be far larger than RAM allows, its eval
// data's rows are not. Errors as model::LoadExport and the reader give them.
absl::StatusOr<QualityReport> EvaluateExport(const std::string& dir,
                                             const std::vector<std::string>& data,
                                             const ModelEvalOptions& options = {});

// A model already in memory (a model file of the format before exports,
// model::LoadModel) scored on `data`. Its store is only read.
absl::StatusOr<QualityReport> EvaluateModel(model::SavedModel& model,
                                            const std::vector<std::string>& data,
                                            const ModelEvalOptions& options = {});

// eval_examples, eval_ne, eval_auc, eval_logloss, eval_ctr, eval_calibration:
// the keys of a manifest's `eval` and of `shadowsync eval`'s output.
nlohmann::json EvalJson(const QualityReport& q);

}  // namespace shadowsync::exporter

#endif  // SHADOWSYNC_EXPORTER_EVALUATE_EXPORT_H_
