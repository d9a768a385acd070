// PsService (ps/ps_service.h), the slot streams: ExportSlots (a snapshot
// read and sent at the export threads' priority) and ImportSlots (staged,
// verified, then applied in one batch), with the import staging budget.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "ps/client/wrong_owner.h"
#include "ps/ps_service.h"
#include "ps/row_store.h"
#include "shadowsync/v1/packed_rows.h"

namespace shadowsync::ps {

int64_t PsService::ChargeImportStaging(int64_t delta) {
  MutexLock lock(&import_mu_);  // So the gauge is set in the order of the updates.
  import_staged_bytes_ += delta;
  metrics_->SetImportStaged(import_staged_bytes_);
  return import_staged_bytes_;
}

RowBlock PsService::TakeImportBlock() {
  MutexLock lock(&import_mu_);
  ++import_streams_;
  if (import_blocks_.empty()) return RowBlock();
  RowBlock block = std::move(import_blocks_.back());
  import_blocks_.pop_back();
  return block;
}

void PsService::ReturnImportBlock(RowBlock block) {
  // As many as the streams that run at once, typically; more are freed.
  constexpr size_t kKeptBlocks = 4;
  block.Clear();
  std::vector<RowBlock> freed;  // outside the lock
  MutexLock lock(&import_mu_);
  if (--import_streams_ == 0) {
    freed.swap(import_blocks_);
  } else if (import_blocks_.size() < kKeptBlocks) {
    import_blocks_.push_back(std::move(block));
  }
}

// --- ExportSlots ----------------------------------------------------------------

// Takes one snapshot of the store on the executor, then, on the low-priority
// export executor, reads one slot at a time from it, writes its chunks one
// by one, then the next slot; a single operation is outstanding at any time.
// Every StartWrite (which serialises the chunk) runs on the export executor
// too, so the stream's whole cost on this server is low-priority CPU, not
// the CPU that lookups and pushes need. So is the write-back of the cached
// rows that the snapshot needs in RocksDB (up to a checkpoint interval's
// worth: seconds of memtable inserts), which pushes do not wait for. Only
// the snapshot itself is taken at normal priority: it holds the store's
// write lock while it writes back the rows pushed since.
// The stream is the store at one moment, however long the client takes to
// read it. Finish (or StartWriteAndFinish) is always the reactor's last
// touch of itself: OnDone may delete it on another thread right after.
class PsService::ExportReactor final : public grpc::ServerWriteReactor<v1::SlotChunk> {
 public:
  // `track`: the stream records changes from its snapshot on and ends with
  // the cursor; `since`, set only with `track`, makes it a delta.
  ExportReactor(PsService* service, std::vector<uint32_t> slots, bool weights_only, bool packed,
                bool track, std::optional<ChangeCursor> since)
      : service_(service),
        slots_(std::move(slots)),
        weights_only_(weights_only),
        packed_(packed),
        track_(track),
        since_(since) {}

  void Start() {
    service_->export_executor_.Schedule([this] {
      if (absl::Status written = service_->store_->WriteBackDirtyRows(); !written.ok()) {
        Done(written);
        return;
      }
      service_->executor_.Schedule([this] {
        absl::StatusOr<std::unique_ptr<RowStore::Snapshot>> snapshot =
            track_ ? service_->store_->TakeChangeSnapshot(since_ ? &*since_ : nullptr, &cursor_,
                                                          &changed_)
                   : service_->store_->TakeSnapshot();
        if (!snapshot.ok()) {
          Done(snapshot.status());
          return;
        }
        snapshot_ = *std::move(snapshot);
        service_->export_executor_.Schedule([this] { LoadNext(); });
      });
    });
  }

  // For a request that failed validation.
  void FinishNow(const absl::Status& status) { Done(status); }

  void OnWriteDone(bool ok) override {
    // Pairs with the lock around StartWrite: whatever gRPC read of the chunk
    // inside StartWrite happens before we touch the chunks again.
    { std::lock_guard<std::recursive_mutex> handoff(handoff_); }
    if (!ok) {
      Done(absl::CancelledError("ExportSlots: the client stopped reading"));
      return;
    }
    const v1::SlotChunk* next = nullptr;
    {
      MutexLock lock(&mu_);
      // Serialising the chunk in StartWrite computed its size.
      bytes_out_ += static_cast<int64_t>(chunks_[next_chunk_]->GetCachedSize());
      if (++next_chunk_ < loaded_) next = chunks_[next_chunk_].get();
    }
    if (next != nullptr) {
      service_->export_executor_.Schedule([this, next] { Write(next); });
    } else {
      service_->export_executor_.Schedule([this] { LoadNext(); });
    }
  }

  void OnCancel() override {
    MutexLock lock(&mu_);
    cancelled_ = true;
  }

  void OnDone() override { delete this; }

 private:
  // Export executor thread; no write is outstanding, so the chunks are ours.
  void LoadNext() {
    const int chunk_rows = std::max(1, service_->options_.export_chunk_rows);
    const int row_floats = weights_only_ ? service_->dim_ : service_->row_floats_;
    const size_t row_bytes = static_cast<size_t>(row_floats) * sizeof(float);
    const size_t packed_row_bytes = v1::PackedRowBytes(row_floats);
    while (true) {
      uint32_t slot;
      {
        MutexLock lock(&mu_);
        if (cancelled_) break;
        if (next_slot_ == slots_.size()) break;
        slot = slots_[next_slot_++];
      }
      // Chunk objects are reused from slot to slot (Clear keeps the rows'
      // storage), so a row costs a copy, not allocations.
      size_t loaded = 0;
      int64_t rows = 0;
      uint64_t checksum = 0;
      v1::SlotChunk* chunk = nullptr;
      int in_chunk = 0;
      // The chunk the next row or tombstone goes to.
      auto next_record = [&] {
        if (chunk == nullptr || in_chunk >= chunk_rows) {
          if (loaded == chunks_.size()) chunks_.push_back(std::make_unique<v1::SlotChunk>());
          chunk = chunks_[loaded++].get();
          chunk->Clear();
          chunk->set_slot(slot);
          if (packed_) chunk->mutable_packed_rows()->reserve(chunk_rows * packed_row_bytes);
          in_chunk = 0;
        }
        ++in_chunk;
        ++rows;
      };
      const absl::Status status = ExportSlot(
          slot,
          [&](uint32_t table, uint64_t id, std::string_view values) -> absl::Status {
            next_record();
            if (packed_) {  // checked by a CRC per chunk, below
              v1::AppendPackedRow(chunk->mutable_packed_rows(), table, id,
                                  values.substr(0, row_bytes));
              return absl::OkStatus();
            }
            v1::SlotRow* out = chunk->add_rows();
            out->set_table(table);
            out->set_id(id);
            google::protobuf::RepeatedField<float>* floats = out->mutable_values();
            floats->Reserve(row_floats);
            std::memcpy(floats->AddNAlreadyReserved(row_floats), values.data(), row_bytes);
            checksum += RowValueHash(table, id, std::span<const float>(floats->data(), row_floats));
            return absl::OkStatus();
          },
          [&](uint32_t table, uint64_t id) {
            next_record();
            v1::AppendPackedRow(chunk->mutable_packed_tombstones(), table, id, {});
          });
      if (!status.ok()) {
        Done(status);
        return;
      }
      if (loaded == 0) continue;
      if (packed_) {
        for (size_t c = 0; c < loaded; ++c) {
          chunks_[c]->set_packed_crc32(
              v1::PackedChunkCrc(chunks_[c]->packed_rows(), chunks_[c]->packed_tombstones()));
          checksum += chunks_[c]->packed_crc32();
        }
      }
      {
        MutexLock lock(&mu_);
        total_rows_ += rows;
        checksum_ += checksum;
        loaded_ = loaded;
        next_chunk_ = 0;
      }
      Write(chunks_[0].get());
      return;
    }
    bool cancelled;
    {
      MutexLock lock(&mu_);
      cancelled = cancelled_;
      done_chunk_.set_done(true);
      done_chunk_.set_total_rows(static_cast<uint64_t>(total_rows_));
      done_chunk_.set_checksum(checksum_);
      if (track_) {
        done_chunk_.mutable_cursor()->set_incarnation(cursor_.incarnation);
        done_chunk_.mutable_cursor()->set_generation(cursor_.generation);
      }
    }
    if (cancelled) {
      Done(absl::CancelledError("ExportSlots: cancelled by the client"));
      return;
    }
    int64_t bytes_out;
    {
      MutexLock lock(&mu_);
      bytes_out_ += static_cast<int64_t>(done_chunk_.ByteSizeLong());
      bytes_out = bytes_out_;
    }
    service_->metrics_->RecordRpc(Rpc::kExportSlots, Clock::now() - start_, absl::StatusCode::kOk,
                                  0, bytes_out);
    StartWriteAndFinish(&done_chunk_, grpc::WriteOptions(), grpc::Status::OK);
  }

  // Every stored row of `slot` or, in a delta, its changed rows: those
  // stored to `row`, the others to `tombstone`.
  absl::Status ExportSlot(uint32_t slot, const RowStore::Snapshot::RowBytesVisitor& row,
                          const std::function<void(uint32_t table, uint64_t id)>& tombstone) {
    if (!since_.has_value()) return snapshot_->ExportSlotBytes(slot, row);
    auto it = std::lower_bound(changed_.begin(), changed_.end(), slot,
                               [](const ChangedRow& c, uint32_t s) { return c.slot < s; });
    const auto end =
        std::find_if(it, changed_.end(), [slot](const ChangedRow& c) { return c.slot != slot; });
    if (end - it < kScanAtChangedRows) {
      for (; it != end; ++it) {
        SS_ASSIGN_OR_RETURN(const bool stored, snapshot_->ReadRowBytes(it->table, it->id, row));
        if (!stored) tombstone(it->table, it->id);
      }
      return absl::OkStatus();
    }
    // Many changed rows: one sequential scan of the slot, merged with them
    // (both in (table, id) order), costs less than a lookup each.
    SS_RETURN_IF_ERROR(snapshot_->ExportSlotBytes(
        slot, [&](uint32_t table, uint64_t id, std::string_view values) -> absl::Status {
          for (; it != end && std::tie(it->table, it->id) < std::tie(table, id); ++it) {
            tombstone(it->table, it->id);
          }
          if (it == end || it->table != table || it->id != id) return absl::OkStatus();
          ++it;
          return row(table, id, values);
        }));
    for (; it != end; ++it) tombstone(it->table, it->id);
    return absl::OkStatus();
  }

  // A delta scans a slot instead of looking its changed rows up one by one
  // from this many on (a slot holds rows / slots, typically hundreds).
  static constexpr std::ptrdiff_t kScanAtChangedRows = 32;

  // StartWrite under handoff_. gRPC serialises the chunk inside StartWrite,
  // possibly on our executor thread, and signals completion through its own
  // (for ThreadSanitizer uninstrumented) internals; the lock makes that
  // ordering explicit. Recursive in case gRPC runs OnWriteDone inline.
  void Write(const v1::SlotChunk* chunk) {
    std::lock_guard<std::recursive_mutex> handoff(handoff_);
    StartWrite(chunk);
  }

  void Done(const absl::Status& status) {
    int64_t bytes_out;
    {
      MutexLock lock(&mu_);
      bytes_out = bytes_out_;
    }
    service_->metrics_->RecordRpc(Rpc::kExportSlots, Clock::now() - start_, status.code(), 0,
                                  bytes_out);
    Finish(ToGrpcStatus(status));
  }

  PsService* const service_;
  const std::vector<uint32_t> slots_;
  const bool weights_only_;
  const bool packed_;
  const bool track_;
  const std::optional<ChangeCursor> since_;
  const Clock::time_point start_ = Clock::now();
  // Set by Start's executor task before any LoadNext; then only the export
  // executor touches them, one LoadNext at a time.
  std::unique_ptr<RowStore::Snapshot> snapshot_;
  ChangeCursor cursor_;
  std::vector<ChangedRow> changed_;  // A delta's rows, in key order.
  // The loaded slot's chunks are chunks_[0, loaded_); written one at a time
  // while LoadNext is not running, refilled by LoadNext while no write is.
  std::vector<std::unique_ptr<v1::SlotChunk>> chunks_;
  std::recursive_mutex handoff_;
  Mutex mu_;
  size_t next_slot_ ABSL_GUARDED_BY(mu_) = 0;
  size_t loaded_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_chunk_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  v1::SlotChunk done_chunk_ ABSL_GUARDED_BY(mu_);
  int64_t total_rows_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t checksum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_out_ ABSL_GUARDED_BY(mu_) = 0;
};

grpc::ServerWriteReactor<v1::SlotChunk>* PsService::ExportSlots(
    grpc::CallbackServerContext* /*context*/, const v1::ExportSlotsRequest* request) {
  absl::Status status;
  std::vector<uint32_t> slots;
  std::vector<int> first_at(num_slots_, -1);
  if (request->slots().empty()) status = absl::InvalidArgumentError("slots: empty");
  for (int i = 0; i < request->slots_size() && status.ok(); ++i) {
    const uint32_t slot = request->slots(i);
    if (slot >= num_slots_) {
      status = absl::InvalidArgumentError(
          absl::StrCat("slots[", i, "] = ", slot, " but this server has ", num_slots_, " slots"));
    } else if (first_at[slot] >= 0) {
      status = absl::InvalidArgumentError(
          absl::StrCat("slots[", i, "] = ", slot, " repeats slots[", first_at[slot], "]"));
    } else {
      first_at[slot] = i;
      slots.push_back(slot);
    }
  }
  std::optional<ChangeCursor> since;
  if (request->has_changes_since()) {
    since =
        ChangeCursor{request->changes_since().incarnation(), request->changes_since().generation()};
    if (status.ok() && !request->packed_rows()) {
      status = absl::InvalidArgumentError("changes_since: a delta needs packed_rows");
    }
  }
  auto* reactor =
      new ExportReactor(this, std::move(slots), request->weights_only(), request->packed_rows(),
                        request->track_changes() || since.has_value(), since);
  if (status.ok()) {
    reactor->Start();
  } else {
    reactor->FinishNow(status);
  }
  return reactor;
}

// --- ImportSlots ----------------------------------------------------------------

// Stages rows as they arrive (validated, deduplicated, checksummed) and applies
// them on the executor only after a matching done chunk. Finish is always the
// reactor's last touch of itself.
class PsService::ImportReactor final : public grpc::ServerReadReactor<v1::SlotChunk> {
 public:
  ImportReactor(PsService* service, v1::ImportSlotsResponse* response)
      : service_(service), response_(response), rows_(service->TakeImportBlock()) {}

  void Start() { StartRead(&chunk_); }
  // Ends the call with `status` before reading anything.
  void Refuse(const absl::Status& status) { Done(status); }

  void OnReadDone(bool ok) override {
    absl::Status error;
    bool apply = false;
    {
      MutexLock lock(&mu_);
      if (!ok) {
        error = absl::AbortedError(absl::StrCat("ImportSlots: stream ended after ", chunks_,
                                                " chunks and ", rows_.size(),
                                                " rows without a done=true chunk; nothing stored"));
      } else {
        bytes_in_ += static_cast<int64_t>(chunk_.ByteSizeLong());
        error = StageLocked();
        ++chunks_;
        if (error.ok() && chunk_.done()) {
          total_rows_ = chunk_.total_rows();
          done_checksum_ = chunk_.checksum();
          apply = true;
        }
      }
    }
    if (!error.ok()) {
      Done(error);
    } else if (apply) {
      service_->executor_.Schedule([this] { Apply(); });
    } else {
      StartRead(&chunk_);
    }
  }

  void OnDone() override { delete this; }

 private:
  absl::Status StageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int row_floats = service_->row_floats_;
    const std::string& packed = chunk_.packed_rows();
    // Weights-only records get zero optimizer state below.
    const int sent_floats =
        !packed.empty() && chunk_.packed_weights_only() ? service_->dim_ : row_floats;
    const size_t record_bytes = v1::PackedRowBytes(sent_floats);
    if (!packed.empty()) {
      if (chunk_.rows_size() > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunks_, " carries both rows and packed_rows; send one or the other"));
      }
      if (packed.size() % record_bytes != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunks_, ".packed_rows: ", packed.size(), " bytes, not whole records of ",
            record_bytes, " bytes (dim ", service_->dim_,
            chunk_.packed_weights_only() ? ", weights only)" : " plus optimizer state)"));
      }
      if (const uint32_t crc = v1::PackedRowsCrc(packed); crc != chunk_.packed_crc32()) {
        return absl::DataLossError(absl::StrFormat(
            "chunk %d.packed_crc32 = %#x but its packed_rows have CRC %#x; nothing stored", chunks_,
            chunk_.packed_crc32(), crc));
      }
    }
    const int n =
        packed.empty() ? chunk_.rows_size() : static_cast<int>(packed.size() / record_bytes);
    if (n == 0) return absl::OkStatus();
    // Row i of either form.
    auto row_at = [&](int i) {
      if (!packed.empty()) return v1::PackedRowAt(packed, sent_floats, i);
      const v1::SlotRow& row = chunk_.rows(i);
      return v1::PackedRow{row.table(), row.id(),
                           std::span<const float>(row.values().data(), row.values_size())};
    };
    const std::shared_ptr<const ShardMap> map = service_->shard_map();
    uint32_t self = 0;
    {
      ReaderMutexLock lock(&service_->map_mu_);
      self = service_->self_index_;
    }
    const uint32_t num_slots = service_->num_slots_;
    const uint32_t slot = chunk_.slot();
    if (slot >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", chunks_, ".slot = ", slot,
                                                     " but this server has ", num_slots, " slots"));
    }
    // A chunk holds one slot's rows: ownership is checked once.
    if (chunk_.incoming()) {
      if (map != nullptr && map->owner_of_slot(slot) == self) {
        return absl::FailedPreconditionError(
            absl::StrCat("chunk ", chunks_, " is incoming but slot ", slot,
                         " is already owned and served by this server at epoch ", map->epoch()));
      }
    } else if (map != nullptr && map->owner_of_slot(slot) != self) {
      return WrongOwnerError(slot, map->epoch(), map->owner_of_slot(slot));
    }
    for (int i = 0; i < n; ++i) {
      const v1::PackedRow row = row_at(i);
      if (row.table >= service_->num_tables_) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", chunks_, " rows[", i, "].table: unknown table ", row.table,
                         "; this server has ", service_->num_tables_, " tables"));
      }
      if (row.values.size() != static_cast<size_t>(sent_floats)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunks_, " rows[", i, "].values: ", row.values.size(), " floats, want ",
            row_floats, " (dim ", service_->dim_, " plus optimizer state)"));
      }
      const uint32_t row_slot = SlotOf(row.table, row.id, num_slots);
      if (row_slot != slot) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", chunks_, " rows[", i, "]: (table ",
                                                       row.table, ", id ", row.id, ") is in slot ",
                                                       row_slot, ", chunk says slot ", slot));
      }
    }
    // Charged a chunk at a time: the budget is shared with the server's
    // other streams.
    const int64_t bytes = n * ImportStagedBytesPerRow(row_floats);
    staged_bytes_ += bytes;
    const int64_t server_staged = service_->ChargeImportStaging(bytes);
    if (server_staged > service_->options_.max_import_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "ImportSlots: the server's import streams would stage ", server_staged,
          " bytes (this one ", staged_bytes_, ") at chunk ", chunks_,
          ", over its staging limit of ", service_->options_.max_import_bytes,
          " bytes; nothing stored; import fewer slots per stream or fewer streams at once"));
    }
    // Appended, not resized and then overwritten: no zero-filling.
    for (int i = 0; i < n; ++i) {
      const v1::PackedRow row = row_at(i);
      rows_.tables.push_back(row.table);
      rows_.ids.push_back(row.id);
      rows_.values.insert(rows_.values.end(), row.values.begin(), row.values.end());
      rows_.values.resize(rows_.values.size() + (row_floats - sent_floats), 0.0f);
      if (packed.empty()) checksum_ += RowValueHash(row.table, row.id, row.values);
    }
    if (!packed.empty()) checksum_ += chunk_.packed_crc32();
    return absl::OkStatus();
  }

  // The staged rows against the done chunk's count and checksum, after a
  // check that no key came twice (which would also throw the count off).
  absl::Status VerifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status sorted = SortRowBlock(service_->num_slots_, &rows_); !sorted.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ImportSlots: ", sorted.message(), " in the stream; nothing stored"));
    }
    if (total_rows_ != rows_.size()) {
      return absl::DataLossError(absl::StrCat("ImportSlots: done.total_rows = ", total_rows_,
                                              " but ", rows_.size(),
                                              " rows arrived; nothing stored"));
    }
    if (done_checksum_ != checksum_) {
      return absl::DataLossError(absl::StrFormat(
          "ImportSlots: done.checksum = %#x but the %d rows received hash to %#x; nothing stored",
          done_checksum_, rows_.size(), checksum_));
    }
    return absl::OkStatus();
  }

  // Executor thread; no read is outstanding. Sorting and verifying happen
  // here too, off gRPC's threads.
  void Apply() {
    absl::Status status;
    {
      MutexLock lock(&mu_);
      status = VerifyLocked();
      if (status.ok()) status = service_->store_->ImportRowBlock(rows_);
      if (status.ok()) {
        response_->set_rows(rows_.size());
        response_->set_checksum(checksum_);
      }
    }
    Done(status);
  }

  void Done(const absl::Status& status) {
    int64_t bytes_in;
    {
      MutexLock lock(&mu_);
      bytes_in = bytes_in_;
      service_->ReturnImportBlock(std::move(rows_));
      rows_ = RowBlock();
      service_->ChargeImportStaging(-staged_bytes_);
      staged_bytes_ = 0;
    }
    service_->metrics_->RecordRpc(Rpc::kImportSlots, Clock::now() - start_, status.code(), bytes_in,
                                  0);
    Finish(ToGrpcStatus(status));
  }

  PsService* const service_;
  v1::ImportSlotsResponse* const response_;
  const Clock::time_point start_ = Clock::now();
  v1::SlotChunk chunk_;  // Filled by gRPC; read only in OnReadDone.
  Mutex mu_;
  int64_t chunks_ ABSL_GUARDED_BY(mu_) = 0;
  RowBlock rows_ ABSL_GUARDED_BY(mu_);
  uint64_t checksum_ ABSL_GUARDED_BY(mu_) = 0;
  // From the done chunk.
  uint64_t total_rows_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_checksum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_in_ ABSL_GUARDED_BY(mu_) = 0;
};

grpc::ServerReadReactor<v1::SlotChunk>* PsService::ImportSlots(grpc::CallbackServerContext* context,
                                                               v1::ImportSlotsResponse* response) {
  auto* reactor = new ImportReactor(this, response);
  if (absl::Status refused = CheckAdminCall(*context, Rpc::kImportSlots); !refused.ok()) {
    reactor->Refuse(refused);
  } else {
    reactor->Start();
  }
  return reactor;
}

}  // namespace shadowsync::ps
