// The parameter server's gRPC service: adapts the ParameterServer RPCs of
// proto/shadowsync/v1/ps.proto to a RowStore, and records the shadowsync_ps_*
// metrics. Thread-safe; gRPC calls it from any number of threads.
//
// The data-path RPCs run inline in the gRPC callback; the admin RPCs and the
// slot streams on executors of the service's own (docs/ps-storage.md,
// "Concurrency").
//
// Errors (beyond the proto's contract, which every RPC follows):
//   - An empty batch (no ids in any table) is INVALID_ARGUMENT: a client never
//     needs to send one, so it is a bug worth surfacing.
//   - A table listed twice in one request is INVALID_ARGUMENT.
//   - More than `max_request_rows` ids in one request is RESOURCE_EXHAUSTED;
//     gRPC itself answers RESOURCE_EXHAUSTED for messages over the server's
//     max message size.
//   - A request carrying an older shard-map epoch than the server's is still
//     served for the rows the server owns (ownership, not the epoch, decides).
#ifndef SHADOWSYNC_PS_PS_SERVICE_H_
#define SHADOWSYNC_PS_PS_SERVICE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/shard_map.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "ps/row_store.h"
#include "shadowsync/v1/ps.grpc.pb.h"

namespace shadowsync::ps {

// The RPCs, for per-RPC metrics. Keep kRpcNames (ps_metrics.cc) in step.
enum class Rpc {
  kLookup,
  kPushGradients,
  kGetShardMap,
  kSetShardMap,
  kExportSlots,
  kImportSlots,
  kDropSlots,
  kCheckpoint,
  kStats,
};
inline constexpr int kNumRpcs = 9;
const char* RpcName(Rpc rpc);

// The shadowsync_ps_* metrics. Service-side metrics (latency per RPC, errors
// per RPC and code, bytes in and out) live in `registry` with their handles
// cached here; the row store's own counters and gauges (rows stored, cache
// hit ratio, lookup/push rows, admissions, evictions, slots owned, epoch) are
// read from RowStore::stats() at scrape time by StoreCollectable(). Every
// name is declared once, in the table in ps_metrics.cc. Thread-safe.
class PsMetrics {
 public:
  // Registers the service-side families on `registry`, which must outlive this.
  explicit PsMetrics(prometheus::Registry& registry);

  // One finished RPC: its latency, result and payload sizes.
  void RecordRpc(Rpc rpc, std::chrono::steady_clock::duration latency, absl::StatusCode code,
                 int64_t bytes_in, int64_t bytes_out);
  void AddBytesIn(int64_t bytes) { bytes_in_->Increment(static_cast<double>(bytes)); }
  void AddBytesOut(int64_t bytes) { bytes_out_->Increment(static_cast<double>(bytes)); }
  void SetImportStaged(int64_t bytes) { import_staged_->Set(static_cast<double>(bytes)); }

  // A collectable emitting the store's metrics from `store->stats()` when
  // scraped. `store` must outlive every Collect() call (stop the exposer, or
  // unregister it, before closing the store).
  static std::shared_ptr<prometheus::Collectable> StoreCollectable(const RowStore* store);

  // Every metric name this server exports, for tests and docs.
  static std::vector<std::string> MetricNames();

 private:
  prometheus::Counter& ErrorCounter(Rpc rpc, absl::StatusCode code);

  prometheus::Family<prometheus::Histogram>* latency_family_;
  prometheus::Family<prometheus::Counter>* errors_family_;
  std::array<prometheus::Histogram*, kNumRpcs> latency_{};
  prometheus::Counter* bytes_in_;
  prometheus::Counter* bytes_out_;
  prometheus::Gauge* import_staged_;
  // Created on the first error of each (rpc, code), then cached.
  static constexpr int kNumCodes = 17;
  std::array<std::array<std::atomic<prometheus::Counter*>, kNumCodes>, kNumRpcs> errors_{};
};

// Bytes an ImportSlots stream stages per row (its key and `row_floats`
// values), as charged against PsServiceOptions::max_import_bytes.
constexpr int64_t ImportStagedBytesPerRow(int row_floats) {
  return static_cast<int64_t>(sizeof(uint32_t) + sizeof(uint64_t) + row_floats * sizeof(float));
}

struct PsServiceOptions {
  // Ids per Lookup or PushGradients request, summed over its tables; more is
  // RESOURCE_EXHAUSTED. Default: 1Mi.
  int64_t max_request_rows = int64_t{1} << 20;
  // Rows per SlotChunk of an ExportSlots stream. Default: 1024.
  int export_chunk_rows = 1024;
  // Bytes of rows all open ImportSlots streams together may stage before
  // they are applied (ImportStagedBytesPerRow each); a stream whose chunk
  // would pass it is RESOURCE_EXHAUSTED
  // and stores nothing (import fewer slots per stream, or fewer streams at
  // once). Default: 1 GiB.
  int64_t max_import_bytes = int64_t{1} << 30;
  // Where every accepted shard map (with self_index) is persisted, so a
  // restarted server answers GetShardMap; empty = not persisted.
  std::string shard_map_path;
  // The only directory Checkpoint writes into: a request names a checkpoint
  // under it (a relative path without ".."), never a path of its own choice.
  // Empty = Checkpoint is refused.
  std::string checkpoint_dir;
  // Whether SetShardMap, ImportSlots, DropSlots and Checkpoint, which change
  // or copy out what the server stores, are refused PERMISSION_DENIED
  // unless the call carries the admin token (IsAdminCall,
  // common/grpc_security.h): the operator's or the launcher's credential,
  // which trainers do not hold. PsServer sets it when it has an admin token.
  // Default: false.
  bool require_admin_call = false;
  // Threads running the admin RPCs and ImportSlots streams. Default: 2.
  int admin_threads = 2;
  // Threads reading and sending ExportSlots streams, and their nice value:
  // an export taken while training runs (a model export, a live reshard)
  // yields to lookups and pushes. Default: 2 threads at nice 10, the
  // exporting client's (0: the server's priority). At nice 19 an export
  // got only the CPU that training left idle: on 2 busy cores, 340 k rows/s
  // with training at 0.97 of its speed; at 10, about 500 k at 0.84.
  int export_threads = 2;
  int export_nice = 10;
};

// A shard map as persisted at PsServiceOptions::shard_map_path.
struct PersistedShardMap {
  ShardMap map;
  uint32_t self_index = 0;
};
// Reads `path`; nullopt if it does not exist, an error if it is unreadable or
// malformed.
absl::StatusOr<std::optional<PersistedShardMap>> LoadShardMapFile(const std::string& path);

// A fixed pool of threads running queued closures in FIFO order, at the
// given nice value (0: the process's). Schedule is thread-safe.
class Executor {
 public:
  explicit Executor(int threads, int nice = 0);
  // Runs everything queued, then joins.
  ~Executor();
  void Schedule(std::function<void()> fn);

 private:
  void Loop();
  Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

class PsService final : public v1::ParameterServer::CallbackService {
 public:
  // `store` and `metrics` must outlive the service. Before the first
  // InstallShardMap the store's persisted ownership alone decides routing,
  // and GetShardMap answers FAILED_PRECONDITION.
  PsService(RowStore* store, PsMetrics* metrics, PsServiceOptions options);
  // Runs queued admin work to completion. REQUIRES: the gRPC server is shut
  // down (no reactor of this service is still running).
  ~PsService() override;

  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  // Makes `map` the routing truth with this server at `self_index`: persists
  // it (if configured), then hands the owned slots to RowStore::SetOwnership.
  // InvalidArgument if the map's num_slots differs from the store's or
  // self_index is out of range; FailedPrecondition if map's epoch is older
  // than the current one, or equal with a different map. Installing the
  // current map again is OK.
  absl::Status InstallShardMap(const ShardMap& map, uint32_t self_index);
  // The installed map, or null before the first InstallShardMap.
  std::shared_ptr<const ShardMap> shard_map() const;

  // RPCs (proto/shadowsync/v1/ps.proto).
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const v1::LookupRequest* request,
                                   v1::LookupResponse* response) override;
  grpc::ServerUnaryReactor* PushGradients(grpc::CallbackServerContext* context,
                                          const v1::PushGradientsRequest* request,
                                          v1::PushGradientsResponse* response) override;
  grpc::ServerUnaryReactor* GetShardMap(grpc::CallbackServerContext* context,
                                        const v1::GetShardMapRequest* request,
                                        v1::ShardMap* response) override;
  grpc::ServerUnaryReactor* SetShardMap(grpc::CallbackServerContext* context,
                                        const v1::SetShardMapRequest* request,
                                        v1::SetShardMapResponse* response) override;
  // Streams every stored row of the requested slots, one slot at a time (all
  // read from one consistent snapshot, taken as the stream starts), at the
  // export threads' priority (PsServiceOptions::export_nice), in chunks of at most
  // export_chunk_rows rows of one slot, then a done chunk with the row count
  // and checksum. Checksums (here and in ImportSlotsResponse) are the sum mod
  // 2^64 of RowValueHash (ps/row_store.h) over the rows, so an export's
  // checksum adds up with the Stats value_checksum of the exported rows.
  grpc::ServerWriteReactor<v1::SlotChunk>* ExportSlots(
      grpc::CallbackServerContext* context, const v1::ExportSlotsRequest* request) override;
  // Stages every row of the stream and applies them in one atomic batch only
  // once a done chunk arrives whose total_rows and checksum match what was
  // received. A stream that ends without a done chunk (ABORTED), a count or
  // checksum mismatch (DATA_LOSS), a malformed row or a key sent twice
  // (INVALID_ARGUMENT), a row of
  // a slot this server does not own (WRONG_OWNER) or the staging limit
  // (RESOURCE_EXHAUSTED) stores nothing.
  grpc::ServerReadReactor<v1::SlotChunk>* ImportSlots(grpc::CallbackServerContext* context,
                                                      v1::ImportSlotsResponse* response) override;
  // Deletes every row of slots this server does not own (it refuses, with
  // FAILED_PRECONDITION, to drop a slot it owns: move it away first).
  grpc::ServerUnaryReactor* DropSlots(grpc::CallbackServerContext* context,
                                      const v1::DropSlotsRequest* request,
                                      v1::DropSlotsResponse* response) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context,
                                       const v1::CheckpointRequest* request,
                                       v1::CheckpointResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;

 private:
  class ExportReactor;
  class ImportReactor;
  using Clock = std::chrono::steady_clock;

  // Validates the tables of a Lookup (`with_values` false) or PushGradients
  // request and copies them into `rows`, indexed by table.
  absl::Status ParseTables(const google::protobuf::RepeatedPtrField<v1::TableRows>& tables,
                           bool with_values, std::vector<model::TableRows>& rows) const;
  // PERMISSION_DENIED naming `rpc` if options_.require_admin_call and the
  // call does not carry the admin token. Call on the gRPC thread.
  absl::Status CheckAdminCall(const grpc::CallbackServerContext& context, Rpc rpc) const;
  // Where a Checkpoint named `name` goes: under options_.checkpoint_dir.
  absl::StatusOr<std::string> CheckpointPath(const std::string& name) const;
  // WRONG_OWNER for the first id of `tables` in a slot this server does not
  // own by the installed map; OK if all are owned or no map is installed.
  absl::Status CheckOwned(const google::protobuf::RepeatedPtrField<v1::TableRows>& tables) const;
  // Finishes a unary call: converts the status, adds the shard-epoch trailer
  // to WRONG_OWNER errors and records metrics.
  void Finish(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor, Rpc rpc,
              Clock::time_point start, const absl::Status& status, int64_t bytes_in,
              int64_t bytes_out);

  // Constant after construction.
  RowStore* const store_;
  PsMetrics* const metrics_;
  const PsServiceOptions options_;
  const uint32_t num_tables_;
  const int dim_;
  const int row_floats_;  // dim + optimizer state floats, as exported.
  const uint32_t num_slots_;

  // Serialises InstallShardMap (file write + store ownership + swap).
  Mutex install_mu_;
  mutable Mutex map_mu_;
  std::shared_ptr<const ShardMap> map_ ABSL_GUARDED_BY(map_mu_);
  uint32_t self_index_ ABSL_GUARDED_BY(map_mu_) = 0;

  // Adds `delta` to the bytes all import streams hold staged; returns the new
  // total.
  int64_t ChargeImportStaging(int64_t delta) ABSL_LOCKS_EXCLUDED(import_mu_);
  // Staging buffers of finished import streams, kept for the next ones while
  // any import stream runs (a fresh block per stream cost a warm start more
  // in page faults and zero-filling than the staging itself) and freed when
  // the last one ends, so a server holds no import memory between imports.
  // Every ImportReactor takes one block when it starts and returns it once.
  RowBlock TakeImportBlock() ABSL_LOCKS_EXCLUDED(import_mu_);
  void ReturnImportBlock(RowBlock block) ABSL_LOCKS_EXCLUDED(import_mu_);
  Mutex import_mu_;
  int64_t import_staged_bytes_ ABSL_GUARDED_BY(import_mu_) = 0;
  int import_streams_ ABSL_GUARDED_BY(import_mu_) = 0;
  std::vector<RowBlock> import_blocks_ ABSL_GUARDED_BY(import_mu_);

  // Destroyed after executor_, whose tasks schedule onto it.
  Executor export_executor_;
  // Last member: destroyed (drained and joined) first.
  Executor executor_;
};

}  // namespace shadowsync::ps

#endif  // SHADOWSYNC_PS_PS_SERVICE_H_
