// ExportJob (exporter/job_export.h): one export of a running job, its
// description and dense parameters; the server helpers export_rows.cc and
// import_rows.cc share (exporter/job_export_internal.h).
#include "exporter/job_export.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "exporter/evaluate_export.h"
#include "exporter/job_export_internal.h"
#include "grpcpp/grpcpp.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "syncer/client/syncer_client.h"
#include "worker/checkpoint.h"
#include "worker/model_config.h"

namespace shadowsync::exporter {
namespace internal {

std::unique_ptr<Stub> Connect(const std::string& address, const GrpcSecurity& security) {
  return v1::ParameterServer::NewStub(CreateChannel(address, security, BulkStreamChannelArgs()));
}

absl::StatusOr<ShardMap> GetMap(const std::string& address, const RowStreamOptions& options) {
  std::unique_ptr<Stub> stub = Connect(address, options.security);
  grpc::ClientContext context;
  context.set_deadline(DeadlineFromNow(absl::Seconds(30)));
  v1::ShardMap proto;
  SS_RETURN_IF_ERROR(
      FromGrpcStatus(stub->GetShardMap(&context, {}, &proto), "GetShardMap", address));
  return ShardMap::FromProto(proto);
}

}  // namespace internal

namespace {

namespace fs = std::filesystem;
using internal::Clock;
using internal::Since;

model::OptimizerKind KindOf(Optimizer optimizer) {
  return *model::ParseOptimizerKind(EnumName(optimizer));
}

}  // namespace

model::ExportInfo ExportInfoForJob(const ShadowSyncJob& job) {
  const JobSpec& spec = job.spec;
  model::ExportInfo info;
  info.config = worker::DlrmConfigFor(spec.model);
  info.embeddings.dim = spec.model.embedding_dim;
  for (const TableSpec& t : spec.model.tables) {
    info.embeddings.tables.push_back({t.name, static_cast<uint64_t>(t.hash_buckets)});
  }
  info.embeddings.optimizer = {KindOf(spec.parameter_server.optimizer),
                               static_cast<float>(EffectivePsLearningRate(spec))};
  info.embeddings.seed = kEmbeddingInitSeed;
  info.num_slots = static_cast<uint32_t>(spec.parameter_server.slots);
  info.with_optimizer_state = spec.export_.with_optimizer_state;
  info.job = JobToJson(job);
  return info;
}

DenseSource DenseSourceFor(const SyncSpec& sync) {
  switch (sync.algorithm) {
    case SyncAlgorithm::kShadowEasgd:
      return sync.final_average ? DenseSource::kReplicaMean : DenseSource::kCentre;
    case SyncAlgorithm::kFgEasgd:
    case SyncAlgorithm::kAsp:
    case SyncAlgorithm::kSsp:
    case SyncAlgorithm::kPsPlus:
      return DenseSource::kCentre;
    default:
      return DenseSource::kReplicaMean;
  }
}

std::string_view DenseSourceName(DenseSource source) {
  return source == DenseSource::kCentre ? "syncer centre" : "mean of the trainers' replicas";
}

absl::StatusOr<DenseParams> CollectDense(const ShadowSyncJob& job,
                                         const std::vector<std::string>& checkpoints,
                                         const std::vector<std::string>& syncer_addresses,
                                         const GrpcSecurity& security) {
  if (checkpoints.empty()) return absl::InvalidArgumentError("export: no trainer checkpoints");
  const size_t num_params =
      static_cast<size_t>(model::Dlrm(ExportInfoForJob(job).config).num_params());
  DenseParams dense;
  // Summed in double: the mean of N replicas rounds once.
  std::vector<double> params(num_params), state;
  for (size_t k = 0; k < checkpoints.size(); ++k) {
    SS_ASSIGN_OR_RETURN(worker::DenseCheckpoint c, worker::LoadDenseCheckpoint(checkpoints[k]));
    if (k == 0) state.resize(c.dense_state.size());
    if (c.params.size() != num_params || c.dense_state.size() != state.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          checkpoints[k], ": ", c.params.size(), " dense parameters and ", c.dense_state.size(),
          " state floats, want ", num_params, " and ", state.size()));
    }
    for (size_t i = 0; i < num_params; ++i) params[i] += c.params[i];
    for (size_t i = 0; i < state.size(); ++i) state[i] += c.dense_state[i];
    dense.examples += c.examples;
  }
  const double n = static_cast<double>(checkpoints.size());
  for (double v : params) dense.params.push_back(static_cast<float>(v / n));
  for (double v : state) dense.state.push_back(static_cast<float>(v / n));
  const DenseSource source = DenseSourceFor(job.spec.sync);
  dense.source = std::string(DenseSourceName(source));
  if (source == DenseSource::kCentre) {
    syncer::SyncerClientOptions options;
    options.addresses = syncer_addresses;
    options.member = "exporter";
    options.security = security;
    SS_ASSIGN_OR_RETURN(auto client, syncer::SyncerClient::Connect(options, num_params));
    SS_RETURN_IF_ERROR(client->PullCentre(dense.params));
  }
  return dense;
}

namespace {

// Whether the export at `dir` is a delta, as its manifest says. An
// unreadable manifest counts as a full export (pruning then keeps it).
bool IsDelta(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return manifest.is_object() && manifest.contains("delta");
}

// The newest export's name and its change cursors, for a delta over it; an
// error says why there is none to go over.
absl::StatusOr<std::pair<std::string, nlohmann::json>> DeltaBase(const std::string& exports_dir) {
  std::ifstream latest(exports_dir + "/LATEST");
  std::string name;
  if (!std::getline(latest, name)) return absl::FailedPreconditionError("no export yet to go over");
  name = std::string(absl::StripAsciiWhitespace(name));
  SS_ASSIGN_OR_RETURN(model::ExportReader base,
                      model::ExportReader::Open(exports_dir + "/" + name));
  if (base.info().changes.is_null()) {
    return absl::FailedPreconditionError(absl::StrCat(name, " was taken without change tracking"));
  }
  return std::pair(std::move(name), base.info().changes);
}

}  // namespace

absl::StatusOr<nlohmann::json> ExportJob(const JobExportRequest& request) {
  const Clock::time_point start = Clock::now();
  std::error_code ec;
  fs::create_directories(request.exports_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("export: cannot create ", request.exports_dir, ": ", ec.message()));
  }
  // Numbered after the newest, so names sort by age.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(request.exports_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 12 && name.starts_with("model-") &&
        fs::exists(entry.path() / "manifest.json")) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  int next = 1;
  if (!names.empty()) next = std::stoi(names.back().substr(6)) + 1;
  const std::string name = absl::StrFormat("model-%06d", next);
  const std::string dir = (fs::path(request.exports_dir) / name).string();

  SS_ASSIGN_OR_RETURN(DenseParams dense, CollectDense(request.job, request.trainer_checkpoints,
                                                      request.syncer_addresses, request.security));
  const bool track = request.job.spec.export_.delta_interval_seconds > 0;
  std::optional<std::pair<std::string, nlohmann::json>> base;
  std::string full_because;
  if (request.delta) {
    absl::StatusOr<std::pair<std::string, nlohmann::json>> found = DeltaBase(request.exports_dir);
    if (found.ok()) {
      base = *std::move(found);
    } else {
      full_because = std::string(found.status().message());
    }
  }
  nlohmann::json eval = nlohmann::json::object();
  RowStreamStats rows;
  std::string source;
  // One attempt: a delta over `base`, or a full export. A delta the servers
  // cannot give (FailedPrecondition) leaves nothing behind but the reason.
  auto write = [&](bool delta) -> absl::Status {
    model::ExportInfo info = ExportInfoForJob(request.job);
    info.dense_source = dense.source;
    info.examples_trained = dense.examples;
    if (delta) info.delta_base = base->first;
    model::ExportWriter::Scorer score;
    model::RowFilter eval_rows;
    if (!request.eval_data.empty() && !delta) {
      // The export as written, not the live servers: anything that changed
      // their rows between a score of them and the stream made the manifest
      // describe another model. The writer keeps the rows the eval looks up
      // as it writes them; scored with `shadowsync eval --model`'s code and
      // defaults, so that it repeats this score exactly.
      SS_ASSIGN_OR_RETURN(eval_rows,
                          RowsLookedUpBy(info.config, info.embeddings.tables, request.eval_data));
      score = [&](model::SavedModel& written) -> absl::StatusOr<nlohmann::json> {
        SS_ASSIGN_OR_RETURN(ModelScore score, EvaluateModel(written, request.eval_data));
        eval = EvalJson(score);
        return eval;
      };
    }
    source = info.dense_source;
    SS_ASSIGN_OR_RETURN(auto writer, model::ExportWriter::Create(dir, std::move(info)));
    if (eval_rows != nullptr) SS_RETURN_IF_ERROR(writer->KeepRows(std::move(eval_rows)));
    SS_RETURN_IF_ERROR(writer->WriteDense(dense.params, dense.state));
    RowStreamOptions options{.security = request.security, .track_changes = track};
    if (delta) options.changes_since = &base->second;
    SS_ASSIGN_OR_RETURN(rows, ExportServerRows(request.ps_address, options, writer.get()));
    writer->set_changes(rows.changes);
    return writer->Commit(score);
  };
  bool delta = base.has_value();
  if (delta) {
    if (absl::Status written = write(true); absl::IsFailedPrecondition(written)) {
      full_because = std::string(written.message());
      delta = false;
    } else {
      SS_RETURN_IF_ERROR(written);
    }
  }
  if (!delta) SS_RETURN_IF_ERROR(write(false));

  // LATEST atomically: a reader sees the old name or the new one.
  SS_RETURN_IF_ERROR(WriteFileAtomically(request.exports_dir + "/LATEST", name + "\n"));
  names.push_back(name);
  // The newest `keep` full exports and the deltas over them; a delta older
  // than the oldest of those has lost its base.
  const size_t keep = static_cast<size_t>(std::max(1, request.job.spec.export_.keep));
  size_t full_seen = 0, cut = 0;
  for (size_t i = names.size(); i-- > 0;) {
    if (!IsDelta(fs::path(request.exports_dir) / names[i]) && ++full_seen == keep) {
      cut = i;
      break;
    }
  }
  for (size_t i = 0; i < cut; ++i) fs::remove_all(fs::path(request.exports_dir) / names[i], ec);
  const double seconds = Since(start);
  nlohmann::json summary{{"path", dir},
                         {"rows", rows.rows},
                         {"bytes", rows.bytes},
                         {"seconds", seconds},
                         {"rows_per_second", rows.rows / std::max(rows.seconds, 1e-9)},
                         {"dense_source", source},
                         {"examples_trained", dense.examples},
                         {"eval", eval}};
  if (delta) {
    summary["delta"] = {{"base", base->first}, {"tombstones", rows.tombstones}};
  } else if (request.delta) {
    summary["full_because"] = full_because;
  }
  return summary;
}

std::string DescribeExport(const nlohmann::json& summary) {
  std::string kind;
  if (summary.contains("delta")) {
    kind = absl::StrFormat(" (a delta over %s, %d tombstones)",
                           summary["delta"]["base"].get<std::string>(),
                           summary["delta"]["tombstones"].get<int64_t>());
  } else if (summary.contains("full_because")) {
    kind = absl::StrCat(" (full, not a delta: ", summary["full_because"].get<std::string>(), ")");
  }
  return absl::StrFormat(
      "exported %s%s: %d rows in %.1f s (%.0f rows/s), dense: %s, %d examples "
      "trained",
      summary["path"].get<std::string>(), kind, summary["rows"].get<int64_t>(),
      summary["seconds"].get<double>(), summary["rows_per_second"].get<double>(),
      summary["dense_source"].get<std::string>(), summary["examples_trained"].get<int64_t>());
}

}  // namespace shadowsync::exporter
