#include "serving/scorer.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <span>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/sparse_batch.h"
#include "serving/disk_rows.h"
#include "serving/row_table.h"

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
  SS_ASSIGN_OR_RETURN(std::vector<model::ExportReader> chain, model::OpenExportChain(dir));
  const model::ExportReader& reader = chain.back();
  std::optional<model::GemmKernel> requested = options.gemm;
  if (!requested.has_value()) {
    SS_ASSIGN_OR_RETURN(requested, model::ScoredGemmKernel(reader));
  }
  // The chain applied in order, as LoadExport applies it, but into a
  // RowSource: values only, where a LocalEmbeddingStore would also hold the
  // optimizer state and take a lock per lookup.
  std::shared_ptr<RowSource> rows;
  if (options.cache_bytes > 0) {
    std::error_code ec;
    const std::string parent = !options.cache_dir.empty()
                                   ? options.cache_dir
                                   : std::filesystem::temp_directory_path(ec).string();
    SS_ASSIGN_OR_RETURN(
        rows, DiskRows::Create(chain.front().info().embeddings, parent.empty() ? "/tmp" : parent,
                               options.cache_bytes));
  } else {
    rows = std::make_shared<RowTable>(chain.front().info().embeddings);
  }
  std::vector<float> params, dense_state;
  for (const model::ExportReader& r : chain) {
    SS_RETURN_IF_ERROR(r.ReadDense(&params, &dense_state));
    SS_RETURN_IF_ERROR(
        r.ForEachRow([&](uint32_t table, uint64_t id, std::span<const float> values,
                         std::span<const float>) { return rows->Put(table, id, values); }));
    SS_RETURN_IF_ERROR(
        r.ForEachTombstone([&](uint32_t table, uint64_t id) { return rows->Erase(table, id); }));
  }
  SS_RETURN_IF_ERROR(rows->Seal());
  const model::DlrmConfig& config = reader.config();
  const model::GemmChoice gemm =
      model::ResolveGemmKernel(model::Dlrm(config).GemmShapes(options.max_batch), requested);
  const int64_t num_rows = rows->num_rows();
  LOG(INFO) << "serving " << dir << ": " << num_rows << " rows, "
            << rows->memory_bytes() / (1 << 20) << " MiB in RAM"
            << (options.cache_bytes > 0 ? " (on disk behind a cache)" : "") << ", "
            << reader.info().examples_trained << " examples trained; fp32 GEMM " << gemm.Summary();
  return std::unique_ptr<Scorer>(new Scorer(dir, reader.info(), config, std::move(params),
                                            std::move(rows), {}, num_rows, options, gemm.kernel));
}

absl::StatusOr<std::unique_ptr<Scorer>> Scorer::WithDeltas(
    const std::vector<std::string>& deltas) const {
  std::vector<std::shared_ptr<const DeltaRows>> layers = deltas_;
  std::vector<float> params = params_;
  int64_t rows = num_rows_;
  std::optional<model::ExportReader> last;
  const int dim = model_.config().embedding_dim;
  // Whether a row is stored in the layers so far (a delta's row may be new
  // or replace one; a tombstone may remove one or none).
  auto stored = [&](uint32_t table, uint64_t id) -> absl::StatusOr<bool> {
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      if (auto found = (*it)->index.find({table, id}); found != (*it)->index.end()) {
        return found->second >= 0;
      }
    }
    return store_->Contains(table, id);
  };
  for (const std::string& dir : deltas) {
    SS_ASSIGN_OR_RETURN(model::ExportReader reader, model::ExportReader::Open(dir));
    if (!reader.is_delta() ||
        model::DlrmConfigToJson(reader.config()) != model::DlrmConfigToJson(model_.config()) ||
        reader.info().embeddings.tables.size() != info_.embeddings.tables.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, ": not a delta export of the served model's shape"));
    }
    std::vector<float> state;
    SS_RETURN_IF_ERROR(reader.ReadDense(&params, &state));
    auto delta = std::make_shared<DeltaRows>();
    SS_RETURN_IF_ERROR(
        reader.ForEachRow([&](uint32_t table, uint64_t id, std::span<const float> values,
                              std::span<const float>) -> absl::Status {
          SS_ASSIGN_OR_RETURN(const bool was_stored, stored(table, id));
          rows += was_stored ? 0 : 1;
          delta->index[{table, id}] = static_cast<int64_t>(delta->values.size() / dim);
          delta->values.insert(delta->values.end(), values.begin(), values.end());
          return absl::OkStatus();
        }));
    SS_RETURN_IF_ERROR(reader.ForEachTombstone([&](uint32_t table, uint64_t id) {
      SS_ASSIGN_OR_RETURN(const bool was_stored, stored(table, id));
      rows -= was_stored ? 1 : 0;
      delta->index[{table, id}] = -1;
      return absl::OkStatus();
    }));
    layers.push_back(std::move(delta));
    last.emplace(std::move(reader));
  }
  if (!last.has_value()) return absl::InvalidArgumentError("WithDeltas: no delta");
  LOG(INFO) << "serving " << last->dir() << ": " << deltas.size() << " delta(s) over " << dir_
            << ", " << rows << " rows, " << last->info().examples_trained << " examples trained";
  return std::unique_ptr<Scorer>(new Scorer(last->dir(), last->info(), model_.config(),
                                            std::move(params), store_, std::move(layers), rows,
                                            options_, gemm_));
}

Scorer::Scorer(std::string dir, model::ExportInfo info, model::DlrmConfig config,
               std::vector<float> params, std::shared_ptr<const RowSource> store,
               std::vector<std::shared_ptr<const DeltaRows>> deltas, int64_t num_rows,
               ScorerOptions options, model::GemmKernel gemm)
    : dir_(std::move(dir)),
      info_(std::move(info)),
      model_(config),
      params_(std::move(params)),
      store_(std::move(store)),
      deltas_(std::move(deltas)),
      num_rows_(num_rows),
      options_(options),
      gemm_(gemm) {}

Scorer::~Scorer() = default;

int64_t Scorer::num_rows() const { return num_rows_; }

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

void Scorer::ApplyDeltas(std::span<model::TableRows> rows) const {
  if (deltas_.empty()) return;
  const size_t dim = static_cast<size_t>(model_.config().embedding_dim);
  for (uint32_t t = 0; t < rows.size(); ++t) {
    model::TableRows& r = rows[t];
    for (size_t i = 0; i < r.ids.size(); ++i) {
      // The newest delta that has the row decides it.
      for (auto it = deltas_.rbegin(); it != deltas_.rend(); ++it) {
        const auto found = (*it)->index.find({t, r.ids[i]});
        if (found == (*it)->index.end()) continue;
        const std::span<float> out(r.values.data() + i * dim, dim);
        if (found->second < 0) {
          model::InitEmbeddingRow(info_.embeddings.seed, t, r.ids[i],
                                  info_.embeddings.tables[t].hash_buckets, out);
        } else {
          std::copy_n((*it)->values.data() + found->second * dim, dim, out.data());
        }
        break;
      }
    }
  }
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
  RowCounts counts;
  absl::Status status;
  for (int64_t begin = 0; begin < block.size() && status.ok(); begin += options_.max_batch) {
    const int64_t end = std::min<int64_t>(block.size(), begin + options_.max_batch);
    context->batch.Collect(block, begin, end, info_.embeddings.tables);
    std::span<model::TableRows> rows = context->batch.rows();
    status = store_->Lookup(rows, &counts);
    if (!status.ok()) break;
    ApplyDeltas(rows);
    context->batch.Bind(context->inputs);
    const model::BatchView view{static_cast<int>(end - begin),
                                block.dense.data() + begin * block.num_dense, nullptr,
                                context->inputs};
    model_.Step(params_.data(), view, context->ws.get(), probs.data() + begin, nullptr);
  }
  Release(std::move(context));
  if (options_.on_rows) options_.on_rows(counts);
  SS_RETURN_IF_ERROR(status);
  return probs;
}

}  // namespace shadowsync::serving
