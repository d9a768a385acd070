#include "exporter/job_export.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "syncer/syncer_client.h"
#include "worker/checkpoint.h"
#include "worker/ps_client.h"
#include "worker/trainer.h"

namespace shadowsync::exporter {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Stub = v1::ParameterServer::Stub;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

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

model::OptimizerKind KindOf(Optimizer optimizer) {
  return *model::ParseOptimizerKind(EnumName(optimizer));
}

// One server's ExportSlots stream, read a chunk ahead so that the merge can
// see which slot comes next.
class ServerStream {
 public:
  ServerStream(std::string address, const RowStreamOptions& options,
               const std::vector<uint32_t>& slots)
      : address_(std::move(address)), stub_(Connect(address_, options.security)) {
    context_.set_deadline(DeadlineFromNow(options.rpc_deadline));
    v1::ExportSlotsRequest request;
    request.mutable_slots()->Add(slots.begin(), slots.end());
    reader_ = stub_->ExportSlots(&context_, request);
  }

  // The chunk at the head, or nullptr once the stream ended (check Finish).
  const v1::SlotChunk* head() {
    if (!loaded_ && !ended_) {
      if (reader_->Read(&chunk_) && !chunk_.done()) {
        loaded_ = true;
      } else {
        if (chunk_.done()) done_ = chunk_;
        ended_ = true;
      }
    }
    return loaded_ ? &chunk_ : nullptr;
  }
  void Pop() { loaded_ = false; }

  void Count(uint32_t table, uint64_t id, std::span<const float> values) {
    ++rows_;
    checksum_ += RowValueHash(table, id, values);
  }

  // `abandon`: the merge failed; the stream is cancelled, not drained.
  absl::Status Finish(bool abandon) {
    if (abandon) {
      context_.TryCancel();
      (void)reader_->Finish();
      return absl::OkStatus();
    }
    SS_RETURN_IF_ERROR(FromGrpcStatus(reader_->Finish(), "ExportSlots", address_));
    if (!done_.done() || done_.total_rows() != static_cast<uint64_t>(rows_) ||
        done_.checksum() != checksum_) {
      return absl::DataLossError(absl::StrFormat(
          "ExportSlots on %s: the rows received (%d, checksum %#x) disagree with the stream's "
          "end marker (%d, checksum %#x)",
          address_, rows_, checksum_, done_.total_rows(), done_.checksum()));
    }
    return absl::OkStatus();
  }

 private:
  const std::string address_;
  std::unique_ptr<Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::SlotChunk>> reader_;
  v1::SlotChunk chunk_, done_;
  bool loaded_ = false, ended_ = false;
  int64_t rows_ = 0;
  uint64_t checksum_ = 0;
};

// ImportSlots streams to one server: rows go out in chunks of one slot, and
// a stream is closed (staged rows applied, count and checksum verified)
// every `import_stream_rows` rows. The caller fills chunks; a thread of the
// sink's own sends them and waits for each stream's apply, so the servers
// apply while the caller reads on.
class ServerSink {
 public:
  ServerSink(std::string address, const RowStreamOptions& options)
      : address_(std::move(address)),
        options_(options),
        stub_(Connect(address_, options.security)),
        sender_([this] { Send(); }) {}
  // Without Close (the import failed elsewhere): the open stream is
  // abandoned, so the server stores nothing of it.
  ~ServerSink() {
    if (!sender_.joinable()) return;
    {
      MutexLock lock(&mu_);
      closing_ = true;
      if (status_.ok()) status_ = absl::CancelledError("import abandoned");
    }
    sender_.join();
  }

  absl::Status Add(uint32_t slot, uint32_t table, uint64_t id, std::span<const float> values) {
    if (chunk_.rows_size() > 0 && (chunk_.slot() != slot || chunk_.rows_size() >= 1024)) {
      SS_RETURN_IF_ERROR(Push(std::move(chunk_)));
      chunk_.Clear();
    }
    chunk_.set_slot(slot);
    v1::SlotRow* row = chunk_.add_rows();
    row->set_table(table);
    row->set_id(id);
    row->mutable_values()->Add(values.begin(), values.end());
    ++stream_rows_;
    checksum_ += RowValueHash(table, id, values);
    if (stream_rows_ >= options_.import_stream_rows) return EndStream();
    return absl::OkStatus();
  }

  // Ends the open stream, waits for every stream to be applied, and stops
  // the sender. The first error of any stream.
  absl::Status Close() {
    absl::Status status = EndStream();
    {
      MutexLock lock(&mu_);
      closing_ = true;
    }
    sender_.join();
    MutexLock lock(&mu_);
    return status.ok() ? status_ : status;
  }

 private:
  // The open stream's rest, then its end marker with the count and checksum.
  absl::Status EndStream() {
    if (stream_rows_ == 0) return absl::OkStatus();
    if (chunk_.rows_size() > 0) {
      SS_RETURN_IF_ERROR(Push(std::move(chunk_)));
      chunk_.Clear();
    }
    chunk_.set_done(true);
    chunk_.set_total_rows(static_cast<uint64_t>(stream_rows_));
    chunk_.set_checksum(checksum_);
    SS_RETURN_IF_ERROR(Push(std::move(chunk_)));
    chunk_.Clear();
    stream_rows_ = 0;
    checksum_ = 0;
    return absl::OkStatus();
  }

  // Queues a chunk for the sender, waiting while 64 are queued; the
  // sender's error once it has one.
  absl::Status Push(v1::SlotChunk chunk) {
    MutexLock lock(&mu_);
    mu_.Await(
        [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.size() < 64 || !status_.ok(); });
    SS_RETURN_IF_ERROR(status_);
    queue_.push_back(std::move(chunk));
    return absl::OkStatus();
  }

  // The sender thread: one stream at a time, opened by its first chunk and
  // finished by its done chunk.
  void Send() {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientWriter<v1::SlotChunk>> writer;
    v1::ImportSlotsResponse response;
    while (true) {
      v1::SlotChunk chunk;
      {
        MutexLock lock(&mu_);
        mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closing_; });
        if (queue_.empty()) break;
        chunk = std::move(queue_.front());
        queue_.pop_front();
        if (!status_.ok()) continue;  // Drained unsent after an error.
      }
      absl::Status status;
      if (writer == nullptr) {
        context = std::make_unique<grpc::ClientContext>();
        context->set_deadline(DeadlineFromNow(options_.rpc_deadline));
        writer = stub_->ImportSlots(context.get(), &response);
      }
      const bool done = chunk.done();
      if (!writer->Write(chunk) || done) {
        // The server ended the stream early (Finish says why), or it is done.
        writer->WritesDone();
        status = FromGrpcStatus(writer->Finish(), "ImportSlots", address_);
        writer.reset();
        if (status.ok() && !done) {
          status = absl::UnavailableError(
              absl::StrCat("ImportSlots on ", address_, ": the server closed the stream"));
        }
        if (status.ok() &&
            (response.rows() != chunk.total_rows() || response.checksum() != chunk.checksum())) {
          status = absl::DataLossError(absl::StrFormat(
              "ImportSlots on %s stored %d rows (checksum %#x) of the %d sent (checksum %#x)",
              address_, response.rows(), response.checksum(), chunk.total_rows(),
              chunk.checksum()));
        }
      }
      if (!status.ok()) {
        MutexLock lock(&mu_);
        if (status_.ok()) status_ = status;
      }
    }
    if (writer != nullptr) {
      // Closed without its done chunk (an error upstream): abandon it, so
      // that the server stores nothing of it.
      context->TryCancel();
      (void)writer->Finish();
    }
  }

  const std::string address_;
  const RowStreamOptions& options_;
  std::unique_ptr<Stub> stub_;
  // The caller's side.
  v1::SlotChunk chunk_;
  int64_t stream_rows_ = 0;
  uint64_t checksum_ = 0;
  Mutex mu_;
  std::deque<v1::SlotChunk> queue_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread sender_;  // Last: starts once everything above exists.
};

}  // namespace

model::ExportInfo ExportInfoForJob(const ShadowSyncJob& job) {
  const JobSpec& spec = job.spec;
  model::ExportInfo info;
  info.config.num_dense = spec.model.dense_features;
  info.config.embedding_dim = spec.model.embedding_dim;
  info.config.bottom_mlp = spec.model.bottom_mlp;
  info.config.top_mlp = spec.model.top_mlp;
  info.config.num_tables = static_cast<int>(spec.model.tables.size());
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

absl::StatusOr<RowStreamStats> ExportServerRows(const std::string& ps_address,
                                                const RowStreamOptions& options,
                                                model::ExportWriter* writer) {
  const Clock::time_point start = Clock::now();
  SS_ASSIGN_OR_RETURN(const ShardMap map, GetMap(ps_address, options));
  const model::ExportInfo& info = writer->info();
  if (map.num_slots() != info.num_slots) {
    return absl::FailedPreconditionError(absl::StrCat("export: the servers have ", map.num_slots(),
                                                      " slots, the export ", info.num_slots));
  }
  const int dim = info.embeddings.dim;
  const size_t state_floats =
      static_cast<size_t>(dim * model::StateFloatsPerParam(info.embeddings.optimizer.kind));
  std::vector<std::unique_ptr<ServerStream>> streams;
  for (int s = 0; s < map.num_servers(); ++s) {
    std::vector<uint32_t> slots = map.SlotsOwnedBy(static_cast<uint32_t>(s));
    if (slots.empty()) continue;
    std::sort(slots.begin(), slots.end());
    streams.push_back(std::make_unique<ServerStream>(map.addresses()[s], options, slots));
  }
  RowStreamStats stats;
  stats.servers = map.num_servers();
  absl::Status status;
  for (int part = 0; part < info.num_parts && status.ok(); ++part) {
    status = writer->BeginPart(part);
    const uint32_t end = writer->PartBegin(part + 1);
    for (auto& stream : streams) {
      for (const v1::SlotChunk* chunk = stream->head();
           status.ok() && chunk != nullptr && chunk->slot() < end; chunk = stream->head()) {
        for (const v1::SlotRow& row : chunk->rows()) {
          const std::span<const float> values(row.values().data(), row.values_size());
          if (values.size() != static_cast<size_t>(dim) + state_floats) {
            status = absl::DataLossError(absl::StrCat(
                "export: a server sent (table ", row.table(), ", id ", row.id(), ") with ",
                values.size(), " floats, want ", dim, " + ", state_floats, " optimizer state"));
            break;
          }
          stream->Count(row.table(), row.id(), values);
          status = writer->AddRow(
              row.table(), row.id(), values.first(dim),
              info.with_optimizer_state ? values.subspan(dim) : std::span<const float>());
          if (!status.ok()) break;
          ++stats.rows;
          stats.bytes += static_cast<int64_t>(
              sizeof(uint32_t) + sizeof(uint64_t) +
              (info.with_optimizer_state ? values.size_bytes() : dim * sizeof(float)));
        }
        stream->Pop();
      }
    }
    if (status.ok()) status = writer->EndPart();
  }
  for (auto& stream : streams) {
    // A stream that ended early explains the merge's failure; one that was
    // cut off says nothing more.
    const absl::Status finished =
        stream->Finish(/*abandon=*/!status.ok() && stream->head() != nullptr);
    SS_RETURN_IF_ERROR(finished);
  }
  SS_RETURN_IF_ERROR(status);
  stats.seconds = Since(start);
  return stats;
}

absl::StatusOr<RowStreamStats> ImportServerRows(const model::ExportReader& reader,
                                                const ShadowSyncJob& job,
                                                const std::string& ps_address,
                                                const RowStreamOptions& options) {
  const Clock::time_point start = Clock::now();
  const model::ExportInfo want = ExportInfoForJob(job);
  SS_RETURN_IF_ERROR(reader.CheckShape(want.config, want.embeddings.tables));
  SS_ASSIGN_OR_RETURN(const ShardMap map, GetMap(ps_address, options));
  std::vector<std::unique_ptr<ServerSink>> sinks;
  for (const std::string& address : map.addresses()) {
    sinks.push_back(std::make_unique<ServerSink>(address, options));
  }
  // The servers' rows: dim values, then their optimizer's state, which the
  // export's rows carry only if taken with state and the same optimizer.
  const size_t dim = static_cast<size_t>(want.embeddings.dim);
  const size_t state_floats = dim * model::StateFloatsPerParam(want.embeddings.optimizer.kind);
  const bool same_optimizer =
      reader.info().embeddings.optimizer.kind == want.embeddings.optimizer.kind;
  RowStreamStats stats;
  stats.servers = map.num_servers();
  // A part's rows, regrouped by server and new slot before they are sent:
  // an ImportSlots chunk holds one slot's rows, and a part's rows come in
  // any order. One part (1/16 of the export) is held at a time.
  struct Pending {
    uint32_t server, slot, table;
    uint64_t id;
    size_t offset;  // Into `floats`.
  };
  std::vector<Pending> pending;
  std::vector<float> floats;
  const size_t row_floats = dim + state_floats;
  auto flush = [&]() -> absl::Status {
    std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
      return a.server != b.server ? a.server < b.server : a.slot < b.slot;
    });
    for (const Pending& p : pending) {
      SS_RETURN_IF_ERROR(sinks[p.server]->Add(
          p.slot, p.table, p.id, std::span<const float>(floats.data() + p.offset, row_floats)));
    }
    pending.clear();
    floats.clear();
    return absl::OkStatus();
  };
  const uint32_t export_slots = reader.info().num_slots;
  const uint64_t export_parts = static_cast<uint64_t>(reader.info().num_parts);
  uint64_t part = UINT64_MAX;
  SS_RETURN_IF_ERROR(
      reader.ForEachRow([&](uint32_t table, uint64_t id, std::span<const float> values,
                            std::span<const float> state) -> absl::Status {
        // The part holding the row: the last p with p * S / P <= slot.
        const uint64_t old_slot = SlotOf(table, id, export_slots);
        uint64_t row_part = old_slot * export_parts / export_slots;
        if ((row_part + 1) * export_slots / export_parts <= old_slot) ++row_part;
        if (row_part != part) {
          SS_RETURN_IF_ERROR(flush());
          part = row_part;
        }
        const uint32_t slot = SlotOf(table, id, map.num_slots());
        pending.push_back({map.owner_of_slot(slot), slot, table, id, floats.size()});
        floats.insert(floats.end(), values.begin(), values.end());
        if (same_optimizer && state.size() == state_floats) {
          floats.insert(floats.end(), state.begin(), state.end());
        } else {
          floats.resize(floats.size() + state_floats, 0.0f);
        }
        ++stats.rows;
        stats.bytes += static_cast<int64_t>(sizeof(uint32_t) + sizeof(uint64_t) + row_floats * 4);
        return absl::OkStatus();
      }));
  SS_RETURN_IF_ERROR(flush());
  for (auto& sink : sinks) SS_RETURN_IF_ERROR(sink->Close());
  stats.seconds = Since(start);
  return stats;
}

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
  model::ExportInfo info = ExportInfoForJob(request.job);
  info.dense_source = dense.source;
  info.examples_trained = dense.examples;
  if (!request.eval_data.empty()) {
    // `shadowsync eval`'s defaults, so that eval --model on the export
    // repeats the same arithmetic.
    worker::PsClientOptions client_options;
    client_options.security = request.security;
    SS_ASSIGN_OR_RETURN(auto store,
                        worker::PsClient::Connect(request.ps_address, info.config.embedding_dim,
                                                  info.config.num_tables, client_options));
    worker::TrainerOptions options;
    options.threads = 2;
    options.batch_size = 1024;
    options.optimizer = info.embeddings.optimizer;
    worker::Trainer trainer(info.config, info.embeddings.tables, options, store.get());
    std::copy(dense.params.begin(), dense.params.end(), trainer.params().begin());
    SS_ASSIGN_OR_RETURN(QualityReport q, trainer.Evaluate(request.eval_data));
    info.eval = {{"eval_examples", q.examples}, {"eval_ne", q.ne},
                 {"eval_auc", q.auc},           {"eval_logloss", q.logloss},
                 {"eval_ctr", q.ctr},           {"eval_calibration", q.calibration}};
  }
  const nlohmann::json eval = info.eval;
  const std::string source = info.dense_source;
  SS_ASSIGN_OR_RETURN(auto writer, model::ExportWriter::Create(dir, std::move(info)));
  SS_RETURN_IF_ERROR(writer->WriteDense(dense.params, dense.state));
  SS_ASSIGN_OR_RETURN(
      RowStreamStats rows,
      ExportServerRows(request.ps_address, {.security = request.security}, writer.get()));
  SS_RETURN_IF_ERROR(writer->Commit());

  // LATEST through a rename: a reader sees the old name or the new one.
  const std::string latest = request.exports_dir + "/LATEST";
  std::ofstream(latest + ".tmp") << name << "\n";
  fs::rename(latest + ".tmp", latest, ec);
  names.push_back(name);
  const int keep = std::max(1, request.job.spec.export_.keep);
  for (size_t i = 0; i + keep < names.size(); ++i) {
    fs::remove_all(fs::path(request.exports_dir) / names[i], ec);
  }
  const double seconds = Since(start);
  return nlohmann::json{{"path", dir},
                        {"rows", rows.rows},
                        {"bytes", rows.bytes},
                        {"seconds", seconds},
                        {"rows_per_second", rows.rows / std::max(rows.seconds, 1e-9)},
                        {"dense_source", source},
                        {"examples_trained", dense.examples},
                        {"eval", eval}};
}

}  // namespace shadowsync::exporter
