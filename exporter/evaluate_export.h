// Scoring a saved model on held-out data: the one code path behind
// `shadowsync eval --model` and an export's manifest `eval` (ExportJob scores
// the rows it has just written, kept as it wrote them), so the two repeat the
// same arithmetic bit for bit.
//
//   SS_ASSIGN_OR_RETURN(ModelScore s, EvaluateExport("exports/model-000002", {"eval.tsv"}));
//   std::cout << EvalJson(s).dump(2);
//
// Thread-safe: the functions keep no state (each runs its own threads).
#ifndef SHADOWSYNC_EXPORTER_EVALUATE_EXPORT_H_
#define SHADOWSYNC_EXPORTER_EVALUATE_EXPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/eval_metrics.h"
#include "model/dlrm.h"
#include "model/export.h"
#include "model/gemm.h"
#include "model/model_io.h"
#include "nlohmann/json.hpp"

namespace shadowsync::exporter {

// `shadowsync eval`'s defaults, which an export's own score uses too.
struct ModelEvalOptions {
  int threads = 2;
  int batch_size = 1024;
  model::DensePrecision precision = model::DensePrecision::kFp32;
  // nullopt: for an export, the kernel its manifest's score ran (its
  // eval.gemm), so that the score repeats; else the fastest here.
  std::optional<model::GemmKernel> gemm;
};

struct ModelScore {
  QualityReport quality;
  model::GemmKernel gemm = model::GemmKernel::kOneDnn;  // The fp32 GEMMs'.
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
absl::StatusOr<ModelScore> EvaluateExport(const std::string& dir,
                                          const std::vector<std::string>& data,
                                          ModelEvalOptions options = {});

// A model already in memory (a model file of the format before exports,
// model::LoadModel) scored on `data`. Its store is only read.
absl::StatusOr<ModelScore> EvaluateModel(model::SavedModel& model,
                                         const std::vector<std::string>& data,
                                         const ModelEvalOptions& options = {});

// eval_examples, eval_ne, eval_auc, eval_logloss, eval_ctr, eval_calibration
// and gemm: the keys of a manifest's `eval` and of `shadowsync eval`'s output.
nlohmann::json EvalJson(const ModelScore& score);

}  // namespace shadowsync::exporter

#endif  // SHADOWSYNC_EXPORTER_EVALUATE_EXPORT_H_
