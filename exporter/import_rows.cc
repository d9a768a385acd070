// ImportServerRows (exporter/job_export.h): a warm start, an export's rows
// into the parameter servers, each to the owner of its slot.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "exporter/job_export.h"
#include "exporter/job_export_internal.h"
#include "grpcpp/grpcpp.h"
#include "shadowsync/v1/packed_rows.h"
#include "shadowsync/v1/ps.grpc.pb.h"

namespace shadowsync::exporter {
namespace {

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
        stub_(internal::Connect(address_, options.security)) {
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
  std::unique_ptr<internal::Stub> stub_;
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

absl::StatusOr<RowStreamStats> ImportServerRows(const model::ExportReader& reader,
                                                const ShadowSyncJob& job,
                                                const std::string& ps_address,
                                                const RowStreamOptions& options) {
  const auto start = internal::Clock::now();
  const model::ExportInfo want = ExportInfoForJob(job);
  SS_RETURN_IF_ERROR(reader.CheckShape(want.config, want.embeddings.tables));
  SS_ASSIGN_OR_RETURN(const ShardMap map, internal::GetMap(ps_address, options));
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
  stats.seconds = internal::Since(start);
  return stats;
}

}  // namespace shadowsync::exporter
