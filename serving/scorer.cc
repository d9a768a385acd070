#include "serving/scorer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/sparse_batch.h"

namespace shadowsync::serving {

struct Scorer::Context {
  Context(const model::Dlrm& model, int max_batch, model::GemmKernel gemm)
      : ws(model.NewWorkspace(max_batch, model::DensePrecision::kFp32, gemm)),
        batch(model.config().num_tables),
        inputs(model.config().num_tables) {}

  std::unique_ptr<model::Dlrm::Workspace> ws;
  model::SparseBatch batch;
  std::vector<model::SparseInput> inputs;
};

absl::StatusOr<std::unique_ptr<Scorer>> Scorer::Load(const std::string& dir,
                                                     ScorerOptions options) {
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch must be at least 1, got ", options.max_batch));
  }
  SS_ASSIGN_OR_RETURN(model::ExportReader reader, model::ExportReader::Open(dir));
  std::optional<model::GemmKernel> requested = options.gemm;
  if (!requested.has_value()) {
    SS_ASSIGN_OR_RETURN(requested, model::ScoredGemmKernel(reader));
  }
  SS_ASSIGN_OR_RETURN(model::SavedModel saved, model::LoadExport(dir));
  const model::GemmChoice gemm =
      model::ResolveGemmKernel(model::Dlrm(saved.config).GemmShapes(options.max_batch), requested);
  LOG(INFO) << "serving " << dir << ": " << saved.store->num_rows() << " rows, "
            << reader.info().examples_trained << " examples trained; fp32 GEMM " << gemm.Summary();
  return std::unique_ptr<Scorer>(
      new Scorer(dir, reader.info(), std::move(saved), options, gemm.kernel));
}

Scorer::Scorer(std::string dir, model::ExportInfo info, model::SavedModel saved,
               ScorerOptions options, model::GemmKernel gemm)
    : dir_(std::move(dir)),
      info_(std::move(info)),
      model_(saved.config),
      params_(std::move(saved.params)),
      store_(std::move(saved.store)),
      options_(options),
      gemm_(gemm) {}

Scorer::~Scorer() = default;

int64_t Scorer::num_rows() const { return store_->num_rows(); }

std::unique_ptr<Scorer::Context> Scorer::Acquire() const {
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Context> context = std::move(idle_.back());
      idle_.pop_back();
      return context;
    }
  }
  return std::make_unique<Context>(model_, options_.max_batch, gemm_);
}

void Scorer::Release(std::unique_ptr<Context> context) const {
  MutexLock lock(&mu_);
  idle_.push_back(std::move(context));
}

absl::StatusOr<std::vector<float>> Scorer::Score(const ExampleBlock& block) const {
  const model::DlrmConfig& config = model_.config();
  if (block.num_dense != config.num_dense || block.num_sparse != config.num_tables) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the examples have ", block.num_dense, " dense and ", block.num_sparse,
        " categorical features; the model reads ", config.num_dense, " and ", config.num_tables));
  }
  std::vector<float> probs(block.size());
  std::unique_ptr<Context> context = Acquire();
  absl::Status status;
  for (int64_t begin = 0; begin < block.size() && status.ok(); begin += options_.max_batch) {
    const int64_t end = std::min<int64_t>(block.size(), begin + options_.max_batch);
    context->batch.Collect(block, begin, end, info_.embeddings.tables);
    status = store_->Lookup(context->batch.rows());
    if (!status.ok()) break;
    context->batch.Bind(context->inputs);
    const model::BatchView view{static_cast<int>(end - begin),
                                block.dense.data() + begin * block.num_dense, nullptr,
                                context->inputs};
    model_.Step(params_.data(), view, context->ws.get(), probs.data() + begin, nullptr);
  }
  Release(std::move(context));
  SS_RETURN_IF_ERROR(status);
  return probs;
}

}  // namespace shadowsync::serving
