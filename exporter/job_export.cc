#include "exporter/job_export.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "ps/client/ps_client.h"
#include "shadowsync/v1/packed_rows.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "syncer/client/syncer_client.h"
#include "worker/checkpoint.h"
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

// One server's ExportSlots stream, read ahead on a thread of its own: every
// server sends while the merge writes another server's rows, instead of
// stalling on its flow-control window until the merge comes back to it.
class ServerStream {
 public:
  ServerStream(std::string address, const RowStreamOptions& options,
               const std::vector<uint32_t>& slots, bool weights_only)
      : address_(std::move(address)), stub_(Connect(address_, options.security)) {
    context_.set_deadline(DeadlineFromNow(options.rpc_deadline));
    v1::ExportSlotsRequest request;
    request.mutable_slots()->Add(slots.begin(), slots.end());
    request.set_weights_only(weights_only);
    request.set_packed_rows(true);
    reader_ = stub_->ExportSlots(&context_, request);
    thread_ = std::thread([this] { ReadAhead(); });
  }
  ~ServerStream() { (void)Finish(/*abandon=*/true); }

  // The chunk at the head, or nullptr once the stream ended (check Finish).
  const v1::SlotChunk* head() {
    if (head_ == nullptr) {
      MutexLock lock(&mu_);
      mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !ready_.empty() || ended_; });
      if (!ready_.empty()) {
        head_ = std::move(ready_.front());
        ready_.pop_front();
      }
    }
    return head_.get();
  }
  void Pop() {
    MutexLock lock(&mu_);
    free_.push_back(std::move(head_));
  }
  const std::string& address() const { return address_; }

  // What the end marker must match: rows, and the sum of chunk CRCs.
  void Count(int64_t rows, uint32_t crc) {
    rows_ += rows;
    checksum_ += crc;
  }

  // `abandon`: the merge failed; the stream is cancelled, not drained.
  absl::Status Finish(bool abandon) {
    if (!thread_.joinable()) return absl::OkStatus();  // finished before
    if (abandon) {
      context_.TryCancel();
      {
        MutexLock lock(&mu_);
        stop_ = true;
      }
      thread_.join();
      (void)reader_->Finish();
      return absl::OkStatus();
    }
    if (head() != nullptr) {  // more rows than the merge took: a slot out of range
      const uint32_t slot = head()->slot();
      (void)Finish(/*abandon=*/true);
      return absl::DataLossError(absl::StrCat("ExportSlots on ", address_, ": rows of slot ", slot,
                                              " after every slot of the export"));
    }
    thread_.join();
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
  // Chunks read ahead of the merge per server: a few MB.
  static constexpr size_t kReadAhead = 16;

  void ReadAhead() {
    while (true) {
      std::unique_ptr<v1::SlotChunk> chunk;
      {
        MutexLock lock(&mu_);
        mu_.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || ready_.size() < kReadAhead;
        });
        if (stop_) break;
        if (!free_.empty()) {
          chunk = std::move(free_.back());
          free_.pop_back();
        }
      }
      if (chunk == nullptr) chunk = std::make_unique<v1::SlotChunk>();
      if (!reader_->Read(chunk.get())) break;
      if (chunk->done()) {
        done_ = *chunk;  // read by Finish after the join
        break;
      }
      MutexLock lock(&mu_);
      ready_.push_back(std::move(chunk));
    }
    MutexLock lock(&mu_);
    ended_ = true;
  }

  const std::string address_;
  std::unique_ptr<Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::SlotChunk>> reader_;
  std::thread thread_;
  Mutex mu_;
  std::deque<std::unique_ptr<v1::SlotChunk>> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<v1::SlotChunk>> free_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  v1::SlotChunk done_;  // written by the read-ahead thread before it ends
  // The merge's: the chunk it is on, and what it counted.
  std::unique_ptr<v1::SlotChunk> head_;
  int64_t rows_ = 0;
  uint64_t checksum_ = 0;
};

// ImportSlots streams to one server: rows go out in chunks of one slot, and
// a stream is closed (staged rows applied, count and checksum verified)
// every `import_stream_rows` rows. The caller fills a stream's chunks; the
// sink's sender threads send whole streams, kSendersPerServer at once, so a
// server stages the next stream while it applies one, and the caller reads
// on meanwhile. A stream's chunk objects are reused for later streams, so
// building a chunk allocates nothing once the first few streams are sent.
class ServerSink {
 public:
  // `weights_only`: rows carry dim floats, the server zero-fills their
  // optimizer state (SlotChunk.packed_weights_only).
  ServerSink(std::string address, const RowStreamOptions& options, bool weights_only)
      : address_(std::move(address)),
        options_(options),
        weights_only_(weights_only),
        stub_(Connect(address_, options.security)) {
    for (int i = 0; i < kSendersPerServer; ++i) senders_.emplace_back([this] { Send(); });
  }
  // Without Close (the import failed elsewhere): the open streams are
  // abandoned, so the server stores nothing of them.
  ~ServerSink() {
    if (senders_.empty()) return;
    {
      MutexLock lock(&mu_);
      closing_ = true;
      if (status_.ok()) status_ = absl::CancelledError("import abandoned");
    }
    for (std::thread& t : senders_) t.join();
  }

  absl::Status Add(uint32_t slot, uint32_t table, uint64_t id, std::span<const float> values) {
    OpenChunk(slot);
    v1::AppendPackedRow(
        chunk_->mutable_packed_rows(), table, id,
        std::string_view(reinterpret_cast<const char*>(values.data()), values.size_bytes()));
    return Added(1);
  }

  // Packed records (`record_bytes` each) of one slot, appended as they are.
  absl::Status AddRecords(uint32_t slot, std::string_view records, size_t record_bytes) {
    while (!records.empty()) {
      OpenChunk(slot);
      const size_t n = std::min<size_t>(records.size() / record_bytes, kChunkRows - chunk_rows_);
      chunk_->mutable_packed_rows()->append(records.data(), n * record_bytes);
      records.remove_prefix(n * record_bytes);
      SS_RETURN_IF_ERROR(Added(static_cast<int>(n)));
    }
    return absl::OkStatus();
  }

  // Ends the open stream, waits for every stream to be applied, and stops
  // the senders. The first error of any stream.
  absl::Status Close() {
    absl::Status status = EndStream();
    {
      MutexLock lock(&mu_);
      closing_ = true;
    }
    for (std::thread& t : senders_) t.join();
    senders_.clear();
    MutexLock lock(&mu_);
    return status.ok() ? status_ : status;
  }

 private:
  static constexpr int kSendersPerServer = 2;
  static constexpr int kChunkRows = 1024;
  // Chunks of one stream; `used` of them hold this stream's rows, the rest
  // are spare objects kept for reuse.
  struct Stream {
    std::vector<std::unique_ptr<v1::SlotChunk>> chunks;
    size_t used = 0;
  };

  // The chunk to append `slot`'s next rows to.
  void OpenChunk(uint32_t slot) {
    if (chunk_ != nullptr && chunk_->slot() == slot && chunk_rows_ < kChunkRows) return;
    chunk_ = NextChunk();
    chunk_->set_slot(slot);
    chunk_->set_packed_weights_only(weights_only_);
    chunk_rows_ = 0;
  }

  absl::Status Added(int rows) {
    chunk_rows_ += rows;
    stream_rows_ += rows;
    if (stream_rows_ >= options_.import_stream_rows) return EndStream();
    return absl::OkStatus();
  }

  v1::SlotChunk* NextChunk() {
    if (stream_.used == stream_.chunks.size()) {
      stream_.chunks.push_back(std::make_unique<v1::SlotChunk>());
    }
    v1::SlotChunk* chunk = stream_.chunks[stream_.used++].get();
    chunk->Clear();  // keeps its packed rows' storage for reuse
    return chunk;
  }

  // Hands the open stream, ended by a done chunk with its count, to the
  // senders; waits while one is queued already.
  absl::Status EndStream() {
    if (stream_rows_ == 0) return absl::OkStatus();
    v1::SlotChunk* done = NextChunk();
    done->set_done(true);
    done->set_total_rows(static_cast<uint64_t>(stream_rows_));
    chunk_ = nullptr;
    stream_rows_ = 0;
    MutexLock lock(&mu_);
    mu_.Await(
        [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queued_.has_value() || !status_.ok(); });
    SS_RETURN_IF_ERROR(status_);
    queued_ = std::move(stream_);
    if (!spare_.empty()) {
      stream_ = std::move(spare_.back());
      spare_.pop_back();
    } else {
      stream_ = Stream();
    }
    stream_.used = 0;
    return absl::OkStatus();
  }

  // A sender thread: one stream at a time, opened by its first chunk and
  // finished by its done chunk, whose count and checksum the server's
  // answer must match.
  void Send() {
    while (true) {
      Stream stream;
      {
        MutexLock lock(&mu_);
        mu_.Await(
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queued_.has_value() || closing_; });
        if (!queued_.has_value()) break;
        stream = std::move(*queued_);
        queued_.reset();
        if (!status_.ok()) continue;  // Dropped unsent after an error.
      }
      const absl::Status status = SendStream(stream);
      MutexLock lock(&mu_);
      if (!status.ok() && status_.ok()) status_ = status;
      spare_.push_back(std::move(stream));
    }
  }

  absl::Status SendStream(Stream& stream) {
    // The chunks' CRCs and their sum, here rather than in Add: the senders
    // run beside the thread that regroups the rows.
    v1::SlotChunk& done = *stream.chunks[stream.used - 1];
    uint64_t checksum = 0;
    for (size_t i = 0; i + 1 < stream.used; ++i) {
      v1::SlotChunk& chunk = *stream.chunks[i];
      chunk.set_packed_crc32(v1::PackedRowsCrc(chunk.packed_rows()));
      checksum += chunk.packed_crc32();
    }
    done.set_checksum(checksum);
    grpc::ClientContext context;
    context.set_deadline(DeadlineFromNow(options_.rpc_deadline));
    v1::ImportSlotsResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::SlotChunk>> writer =
        stub_->ImportSlots(&context, &response);
    for (size_t i = 0; i < stream.used; ++i) {
      {
        // Abandoned (an error elsewhere): the server stores nothing of a
        // cancelled stream.
        MutexLock lock(&mu_);
        if (!status_.ok()) {
          context.TryCancel();
          (void)writer->Finish();
          return absl::OkStatus();
        }
      }
      if (!writer->Write(*stream.chunks[i])) break;  // The server ended it; Finish says why.
    }
    writer->WritesDone();
    SS_RETURN_IF_ERROR(FromGrpcStatus(writer->Finish(), "ImportSlots", address_));
    if (response.rows() != done.total_rows() || response.checksum() != done.checksum()) {
      return absl::DataLossError(absl::StrFormat(
          "ImportSlots on %s stored %d rows (checksum %#x) of the %d sent (checksum %#x)", address_,
          response.rows(), response.checksum(), done.total_rows(), done.checksum()));
    }
    return absl::OkStatus();
  }

  const std::string address_;
  const RowStreamOptions& options_;
  const bool weights_only_;
  std::unique_ptr<Stub> stub_;
  // The caller's side: the stream being filled.
  Stream stream_;
  v1::SlotChunk* chunk_ = nullptr;  // Its open chunk, in stream_.
  int chunk_rows_ = 0;              // Rows in chunk_.
  int64_t stream_rows_ = 0;
  Mutex mu_;
  std::optional<Stream> queued_ ABSL_GUARDED_BY(mu_);  // Filled, not yet taken by a sender.
  std::vector<Stream> spare_ ABSL_GUARDED_BY(mu_);     // Sent; their chunks are reused.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> senders_;  // Last: start once everything above exists.
};

// A warm start's part of the export, its rows regrouped by the slot they go
// to as they are read (an ImportSlots chunk holds one slot's rows, and a
// part's rows come in any order): each slot's rows lie together, so sending
// them in order reads memory in order. Buffers keep their capacity when the
// part is recycled.
struct PartRows {
  struct Key {
    uint32_t table;
    uint64_t id;
    auto operator<=>(const Key&) const = default;
  };
  struct Slot {
    std::vector<Key> keys;
    std::vector<float> floats;  // row_floats per key
  };
  explicit PartRows(uint32_t num_slots) : slots(num_slots) {}
  void Clear() {
    for (uint32_t slot : used) {
      slots[slot].keys.clear();
      slots[slot].floats.clear();
    }
    used.clear();
  }
  std::vector<Slot> slots;     // by the job's slot
  std::vector<uint32_t> used;  // slots with rows
};

// Passes parts from the thread reading the export to the one sending them,
// so reading one part (file I/O, checksum) overlaps sending the one before.
// Two parts' buffers go back and forth: at most two parts are held.
class PartHandoff {
 public:
  explicit PartHandoff(uint32_t num_slots) : num_slots_(num_slots) {}
  // Reader: a part to fill, once one of the two is free; nullopt once the
  // sender stopped.
  std::optional<PartRows> TakeEmpty() {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !recycled_.empty() || created_ < 2 || stopped_;
    });
    if (stopped_) return std::nullopt;
    if (recycled_.empty()) {
      ++created_;
      return PartRows(num_slots_);
    }
    PartRows part = std::move(recycled_.back());
    recycled_.pop_back();
    part.Clear();
    return part;
  }
  // Reader: hands a filled part over (the sender has taken the one before,
  // since both buffers are out). False once the sender stopped.
  bool PutFull(PartRows part) {
    MutexLock lock(&mu_);
    mu_.Await([this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !full_.has_value() || stopped_; });
    if (stopped_) return false;
    full_ = std::move(part);
    return true;
  }
  // Reader: no more parts.
  void EndOfParts() {
    MutexLock lock(&mu_);
    ended_ = true;
  }
  // Sender: the next part, or nullopt after the last or once stopped.
  std::optional<PartRows> TakeFull() {
    MutexLock lock(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return full_.has_value() || ended_ || stopped_;
    });
    if (stopped_) return std::nullopt;
    std::optional<PartRows> part = std::move(full_);
    full_.reset();
    return part;
  }
  void Recycle(PartRows part) {
    MutexLock lock(&mu_);
    recycled_.push_back(std::move(part));
  }
  // Either side failed: the other stops at its next part.
  void Stop() {
    MutexLock lock(&mu_);
    stopped_ = true;
  }

 private:
  const uint32_t num_slots_;
  Mutex mu_;
  std::optional<PartRows> full_ ABSL_GUARDED_BY(mu_);
  std::vector<PartRows> recycled_ ABSL_GUARDED_BY(mu_);
  int created_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// Sends a part's rows to their servers, each server's in its key order
// (slot, table, id), which the server would otherwise sort into.
absl::Status SendPart(PartRows& part, size_t row_floats, const ShardMap& map,
                      std::vector<std::unique_ptr<ServerSink>>& sinks) {
  std::sort(part.used.begin(), part.used.end(), [&map](uint32_t a, uint32_t b) {
    return std::pair(map.owner_of_slot(a), a) < std::pair(map.owner_of_slot(b), b);
  });
  std::vector<uint32_t> order;
  for (const uint32_t slot : part.used) {
    const PartRows::Slot& rows = part.slots[slot];
    const size_t n = rows.keys.size();
    order.resize(n);
    for (uint32_t i = 0; i < n; ++i) order[i] = i;
    // A server's export has each slot's rows in key order already.
    if (!std::is_sorted(rows.keys.begin(), rows.keys.end())) {
      std::sort(order.begin(), order.end(),
                [&rows](uint32_t a, uint32_t b) { return rows.keys[a] < rows.keys[b]; });
    }
    ServerSink& sink = *sinks[map.owner_of_slot(slot)];
    for (const uint32_t i : order) {
      SS_RETURN_IF_ERROR(
          sink.Add(slot, rows.keys[i].table, rows.keys[i].id,
                   std::span<const float>(rows.floats.data() + i * row_floats, row_floats)));
    }
  }
  return absl::OkStatus();
}

// A warm start whose export's records are not what the servers take as
// they are (another slot count, or another optimizer's state): each part's
// rows regrouped by the job's slot, `sent_floats` of each row sent. This
// thread reads a part (its checksum verified before its rows are used) and
// regroups it while another sorts and sends the part before: at most two
// parts (1/16 of the export each) are held.
absl::Status RegroupAndSend(const model::ExportReader& reader, const ShardMap& map,
                            std::span<const int> part_order, size_t sent_floats,
                            std::vector<std::unique_ptr<ServerSink>>& sinks,
                            RowStreamStats* stats) {
  const uint32_t export_slots = reader.info().num_slots;
  const uint64_t export_parts = static_cast<uint64_t>(reader.info().num_parts);
  PartHandoff handoff(map.num_slots());
  absl::Status send_status;
  std::thread sender([&] {
    while (std::optional<PartRows> part = handoff.TakeFull()) {
      send_status = SendPart(*part, sent_floats, map, sinks);
      if (!send_status.ok()) {
        handoff.Stop();
        return;
      }
      handoff.Recycle(*std::move(part));
    }
  });
  uint64_t part = UINT64_MAX;
  std::optional<PartRows> filling = handoff.TakeEmpty();
  absl::Status read_status = reader.ForEachRow(
      [&](uint32_t table, uint64_t id, std::span<const float> values,
          std::span<const float> state) -> absl::Status {
        // The part holding the row: the last p with p * S / P <= slot.
        const uint64_t old_slot = SlotOf(table, id, export_slots);
        uint64_t row_part = old_slot * export_parts / export_slots;
        if ((row_part + 1) * export_slots / export_parts <= old_slot) ++row_part;
        if (row_part != part) {
          if (!filling->used.empty()) {
            if (!handoff.PutFull(*std::move(filling))) {
              return absl::CancelledError("import: sending failed");
            }
            filling = handoff.TakeEmpty();
            if (!filling.has_value()) return absl::CancelledError("import: sending failed");
          }
          part = row_part;
        }
        const uint32_t slot = SlotOf(table, id, map.num_slots());
        PartRows::Slot& rows = filling->slots[slot];
        if (rows.keys.empty()) filling->used.push_back(slot);
        rows.keys.push_back({table, id});
        std::vector<float>& floats = rows.floats;
        floats.insert(floats.end(), values.begin(), values.end());
        if (sent_floats > values.size()) floats.insert(floats.end(), state.begin(), state.end());
        ++stats->rows;
        stats->bytes += static_cast<int64_t>(v1::PackedRowBytes(sent_floats));
        return absl::OkStatus();
      },
      part_order);
  if (read_status.ok() && !filling->used.empty() && !handoff.PutFull(*std::move(filling))) {
    read_status = absl::CancelledError("import: sending failed");
  }
  if (read_status.ok()) {
    handoff.EndOfParts();
  } else {
    handoff.Stop();
  }
  sender.join();
  // A failed send stopped the reading; it says why.
  SS_RETURN_IF_ERROR(send_status);
  return read_status;
}

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
  // Without optimizer state in the export, the servers send none.
  const size_t state_floats =
      info.with_optimizer_state
          ? static_cast<size_t>(dim * model::StateFloatsPerParam(info.embeddings.optimizer.kind))
          : 0;
  std::vector<std::unique_ptr<ServerStream>> streams;
  for (int s = 0; s < map.num_servers(); ++s) {
    std::vector<uint32_t> slots = map.SlotsOwnedBy(static_cast<uint32_t>(s));
    if (slots.empty()) continue;
    std::sort(slots.begin(), slots.end());
    streams.push_back(std::make_unique<ServerStream>(map.addresses()[s], options, slots,
                                                     !info.with_optimizer_state));
  }
  RowStreamStats stats;
  stats.servers = map.num_servers();
  // The servers send rows laid out as the part file's records.
  const size_t record_bytes = writer->RecordBytes();
  absl::Status status;
  for (int part = 0; part < info.num_parts && status.ok(); ++part) {
    status = writer->BeginPart(part);
    const uint32_t end = writer->PartBegin(part + 1);
    for (auto& stream : streams) {
      for (const v1::SlotChunk* chunk = stream->head();
           status.ok() && chunk != nullptr && chunk->slot() < end; chunk = stream->head()) {
        const std::string& packed = chunk->packed_rows();
        if (chunk->rows_size() > 0 || packed.size() % record_bytes != 0) {
          status = absl::DataLossError(
              absl::StrCat("export: ExportSlots on ", stream->address(), " sent slot ",
                           chunk->slot(), " as ", chunk->rows_size(), " unpacked rows and ",
                           packed.size(), " bytes of packed rows; want records of ", record_bytes,
                           " bytes (", dim, " + ", state_floats, " optimizer state floats)"));
          break;
        }
        const uint32_t crc = v1::PackedRowsCrc(packed);
        if (crc != chunk->packed_crc32()) {
          status = absl::DataLossError(absl::StrFormat(
              "export: ExportSlots on %s sent slot %d with CRC %#x over rows whose CRC is %#x",
              stream->address(), chunk->slot(), chunk->packed_crc32(), crc));
          break;
        }
        const int64_t rows = static_cast<int64_t>(packed.size() / record_bytes);
        stream->Count(rows, crc);
        status = writer->AddRecords(packed, crc);
        stats.rows += rows;
        stats.bytes += static_cast<int64_t>(packed.size());
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
  // The servers' rows: dim values, then their optimizer's state. The
  // export's state is sent if it has the servers' optimizer's; otherwise
  // the weights only, and the servers start the state at zero.
  const size_t dim = static_cast<size_t>(want.embeddings.dim);
  const size_t state_floats = dim * model::StateFloatsPerParam(want.embeddings.optimizer.kind);
  const bool weights_only =
      !reader.info().with_optimizer_state ||
      reader.info().embeddings.optimizer.kind != want.embeddings.optimizer.kind;
  const size_t sent_floats = weights_only ? dim : dim + state_floats;
  std::vector<std::unique_ptr<ServerSink>> sinks;
  for (const std::string& address : map.addresses()) {
    sinks.push_back(std::make_unique<ServerSink>(address, options, weights_only));
  }
  RowStreamStats stats;
  stats.servers = map.num_servers();
  const uint32_t export_slots = reader.info().num_slots;
  const uint64_t export_parts = static_cast<uint64_t>(reader.info().num_parts);
  // Parts bound for different servers in turn: with as many slots as the
  // export's, a part's rows all go to the owner of its slots, and a map's
  // servers own runs of slots, so reading in order would keep one server
  // busy at a time.
  std::vector<int> part_order(export_parts);
  std::vector<std::pair<int, uint32_t>> turn(export_parts);  // (turn at its owner, owner)
  std::vector<int> parts_of(map.num_servers());
  for (uint64_t p = 0; p < export_parts; ++p) {
    const uint32_t owner = export_slots == map.num_slots()
                               ? map.owner_of_slot(model::PartSlotBegin(reader.info(), p))
                               : 0;
    turn[p] = {parts_of[owner]++, owner};
    part_order[p] = static_cast<int>(p);
  }
  std::stable_sort(part_order.begin(), part_order.end(),
                   [&turn](int a, int b) { return turn[a] < turn[b]; });

  absl::Status read_status;
  const size_t record_bytes = reader.RecordBytes();
  if (export_slots == map.num_slots() && record_bytes == v1::PackedRowBytes(sent_floats)) {
    // The export's records are what the servers take: each part's go out
    // as they lie in the file, grouped by slot (a stable counting sort of
    // their indices), a run of one slot's consecutive records at a time. A
    // cluster's export holds each slot's rows together, so that is one run
    // per slot.
    std::vector<uint32_t> slot_of, order;
    std::vector<size_t> first(map.num_slots() + 1);
    read_status = reader.ForEachPart(
        [&](int, std::string_view records) -> absl::Status {
          const size_t n = records.size() / record_bytes;
          slot_of.resize(n);
          order.resize(n);
          std::fill(first.begin(), first.end(), 0);
          for (size_t i = 0; i < n; ++i) {
            const v1::PackedRow row = v1::PackedRowAt(records, sent_floats, i);
            slot_of[i] = SlotOf(row.table, row.id, map.num_slots());
            ++first[slot_of[i] + 1];
          }
          for (size_t k = 1; k < first.size(); ++k) first[k] += first[k - 1];
          for (size_t i = 0; i < n; ++i) order[first[slot_of[i]]++] = static_cast<uint32_t>(i);
          for (size_t begin = 0, end = 0; begin < n; begin = end) {
            const uint32_t slot = slot_of[order[begin]];
            for (end = begin + 1;
                 end < n && order[end] == order[end - 1] + 1 && slot_of[order[end]] == slot;
                 ++end) {
            }
            SS_RETURN_IF_ERROR(sinks[map.owner_of_slot(slot)]->AddRecords(
                slot, records.substr(order[begin] * record_bytes, (end - begin) * record_bytes),
                record_bytes));
          }
          stats.rows += static_cast<int64_t>(n);
          stats.bytes += static_cast<int64_t>(records.size());
          return absl::OkStatus();
        },
        part_order);
  } else {
    read_status = RegroupAndSend(reader, map, part_order, sent_floats, sinks, &stats);
  }
  SS_RETURN_IF_ERROR(read_status);
  // Sinks not closed (an error) abandon their open streams.
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
    ps::PsClientOptions client_options;
    client_options.security = request.security;
    SS_ASSIGN_OR_RETURN(auto store,
                        ps::PsClient::Connect(request.ps_address, info.config.embedding_dim,
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

  // LATEST atomically: a reader sees the old name or the new one.
  SS_RETURN_IF_ERROR(WriteFileAtomically(request.exports_dir + "/LATEST", name + "\n"));
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

std::string DescribeExport(const nlohmann::json& summary) {
  return absl::StrFormat(
      "exported %s: %d rows in %.1f s (%.0f rows/s), dense: %s, %d examples "
      "trained",
      summary["path"].get<std::string>(), summary["rows"].get<int64_t>(),
      summary["seconds"].get<double>(), summary["rows_per_second"].get<double>(),
      summary["dense_source"].get<std::string>(), summary["examples_trained"].get<int64_t>());
}

}  // namespace shadowsync::exporter
