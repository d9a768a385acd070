// ExportServerRows (exporter/job_export.h): every parameter server's rows
// into an export, one ExportSlots stream per server merged by slot.

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
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

// One server's ExportSlots stream, read ahead on a thread of its own: every
// server sends while the merge writes another server's rows, instead of
// stalling on its flow-control window until the merge comes back to it.
class ServerStream {
 public:
  // `since`: a delta's, of this server.
  ServerStream(std::string address, const RowStreamOptions& options,
               const std::vector<uint32_t>& slots, bool weights_only, const v1::ChangeCursor* since)
      : address_(std::move(address)), stub_(internal::Connect(address_, options.security)) {
    context_.set_deadline(DeadlineFromNow(options.rpc_deadline));
    v1::ExportSlotsRequest request;
    request.mutable_slots()->Add(slots.begin(), slots.end());
    request.set_weights_only(weights_only);
    request.set_packed_rows(true);
    request.set_track_changes(options.track_changes);
    if (since != nullptr) *request.mutable_changes_since() = *since;
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
  // Where the server's change log stood at its snapshot (after Finish).
  const v1::ChangeCursor& cursor() const { return done_.cursor(); }

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
  std::unique_ptr<internal::Stub> stub_;
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

// The servers' cursors as an export's manifest keeps them.
nlohmann::json ChangesJson(uint64_t epoch,
                           const std::vector<std::unique_ptr<ServerStream>>& streams) {
  nlohmann::json servers = nlohmann::json::array();
  for (const auto& stream : streams) {
    servers.push_back({{"address", stream->address()},
                       {"incarnation", stream->cursor().incarnation()},
                       {"generation", stream->cursor().generation()}});
  }
  return {{"epoch", epoch}, {"servers", servers}};
}

// Each streaming server's cursor in `since`, in the order of `addresses`;
// FailedPrecondition unless `since` names exactly this cluster.
absl::StatusOr<std::vector<v1::ChangeCursor>> CursorsFor(
    const nlohmann::json& since, uint64_t epoch, const std::vector<std::string>& addresses) {
  std::vector<v1::ChangeCursor> out;
  try {
    const uint64_t since_epoch = since.at("epoch").get<uint64_t>();
    const nlohmann::json& servers = since.at("servers");
    if (since_epoch != epoch || servers.size() != addresses.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the shard map changed since the base export (epoch ", since_epoch, ", ",
                       servers.size(), " servers; now epoch ", epoch, ", ", addresses.size(), ")"));
    }
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (servers[i].at("address").get<std::string>() != addresses[i]) {
        return absl::FailedPreconditionError(
            absl::StrCat("server ", i, " is ", addresses[i], ", at the base export it was ",
                         servers[i].at("address").get<std::string>()));
      }
      v1::ChangeCursor cursor;
      cursor.set_incarnation(servers[i].at("incarnation").get<uint64_t>());
      cursor.set_generation(servers[i].at("generation").get<uint64_t>());
      out.push_back(cursor);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("the base export's changes are malformed: ", e.what()));
  }
  return out;
}

}  // namespace

absl::StatusOr<RowStreamStats> ExportServerRows(const std::string& ps_address,
                                                const RowStreamOptions& options,
                                                model::ExportWriter* writer) {
  const auto start = internal::Clock::now();
  SS_ASSIGN_OR_RETURN(const ShardMap map, internal::GetMap(ps_address, options));
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
  std::vector<std::vector<uint32_t>> owned;
  std::vector<std::string> addresses;
  for (int s = 0; s < map.num_servers(); ++s) {
    std::vector<uint32_t> slots = map.SlotsOwnedBy(static_cast<uint32_t>(s));
    if (slots.empty()) continue;
    std::sort(slots.begin(), slots.end());
    owned.push_back(std::move(slots));
    addresses.push_back(map.addresses()[s]);
  }
  std::vector<v1::ChangeCursor> since;
  if (options.changes_since != nullptr) {
    SS_ASSIGN_OR_RETURN(since, CursorsFor(*options.changes_since, map.epoch(), addresses));
  }
  std::vector<std::unique_ptr<ServerStream>> streams;
  for (size_t s = 0; s < owned.size(); ++s) {
    streams.push_back(std::make_unique<ServerStream>(addresses[s], options, owned[s],
                                                     !info.with_optimizer_state,
                                                     since.empty() ? nullptr : &since[s]));
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
        const std::string& tombstones = chunk->packed_tombstones();
        if (chunk->rows_size() > 0 || packed.size() % record_bytes != 0 ||
            tombstones.size() % v1::PackedRowBytes(0) != 0) {
          status = absl::DataLossError(absl::StrCat(
              "export: ExportSlots on ", stream->address(), " sent slot ", chunk->slot(), " as ",
              chunk->rows_size(), " unpacked rows and ", packed.size(),
              " bytes of packed rows and ", tombstones.size(), " of tombstones; want records of ",
              record_bytes, " bytes (", dim, " + ", state_floats,
              " optimizer state floats) and of ", v1::PackedRowBytes(0)));
          break;
        }
        const uint32_t crc = v1::PackedRowsCrc(packed);
        const uint32_t chunk_crc =
            tombstones.empty() ? crc : v1::PackedChunkCrc(packed, tombstones);
        if (chunk_crc != chunk->packed_crc32()) {
          status = absl::DataLossError(absl::StrFormat(
              "export: ExportSlots on %s sent slot %d with CRC %#x over rows whose CRC is %#x",
              stream->address(), chunk->slot(), chunk->packed_crc32(), chunk_crc));
          break;
        }
        const int64_t rows = static_cast<int64_t>(packed.size() / record_bytes);
        const int64_t removed = static_cast<int64_t>(tombstones.size() / v1::PackedRowBytes(0));
        stream->Count(rows + removed, chunk_crc);
        status = writer->AddRecords(packed, crc);
        if (status.ok() && removed > 0) status = writer->AddTombstones(tombstones);
        stats.rows += rows;
        stats.tombstones += removed;
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
  if (options.track_changes || options.changes_since != nullptr) {
    stats.changes = ChangesJson(map.epoch(), streams);
  }
  stats.seconds = internal::Since(start);
  return stats;
}

}  // namespace shadowsync::exporter
