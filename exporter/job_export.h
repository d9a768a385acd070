// A distributed job's model export and warm start (docs/export.md): the
// export format of model/export.h, filled from and loaded into a
// running cluster of parameter servers, with the dense parameters chosen per
// sync strategy.
//
//   SS_ASSIGN_OR_RETURN(auto writer, model::ExportWriter::Create(dir, ExportInfoForJob(job)));
//   SS_RETURN_IF_ERROR(writer->WriteDense(dense.params, dense.state));
//   SS_ASSIGN_OR_RETURN(RowStreamStats rows, ExportServerRows("ps-0:7000", {}, writer.get()));
//   SS_RETURN_IF_ERROR(writer->Commit());
//
// Each server's rows come from one snapshot of it; docs/export.md,
// "Consistency", says what an export taken while training runs holds.
// Thread-safe: the functions keep no state, but two ExportJob calls must not
// share an exports_dir at once (both would number their export alike).
#ifndef SHADOWSYNC_EXPORTER_JOB_EXPORT_H_
#define SHADOWSYNC_EXPORTER_JOB_EXPORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "jobspec/job_spec.h"
#include "model/export.h"
#include "nlohmann/json.hpp"

namespace shadowsync::exporter {

// The export's description of a job's model: the DLRM shape, the tables,
// the servers' sparse optimizer and row seed, and the job's slot space.
model::ExportInfo ExportInfoForJob(const ShadowSyncJob& job);

// Which dense parameters stand for the job's model.
enum class DenseSource {
  // The syncers' centre variable: the EASGD centre (fg-easgd, and
  // shadow-easgd without finalAverage) or the shared global weights (asp,
  // ssp, ps-plus).
  kCentre,
  // The element-wise mean of the trainers' replicas (none, the ma and bmuf
  // families, bsp, ds-sync, sync-switch, and shadow-easgd with finalAverage,
  // which ends every replica at that mean, a better model than the centre
  // it pulls toward).
  kReplicaMean,
};
DenseSource DenseSourceFor(const SyncSpec& sync);
std::string_view DenseSourceName(DenseSource source);

struct DenseParams {
  std::vector<float> params;
  std::vector<float> state;  // Dense optimizer state: the mean of the trainers'.
  std::string source;        // As the manifest's dense.source says it.
  int64_t examples = 0;      // Trained into them: the sum of the trainers' counts.
};

// The job's dense parameters from its trainers' checkpoints (one per
// trainer, worker/checkpoint.h) and, for kCentre, its syncers.
absl::StatusOr<DenseParams> CollectDense(const ShadowSyncJob& job,
                                         const std::vector<std::string>& checkpoints,
                                         const std::vector<std::string>& syncer_addresses,
                                         const GrpcSecurity& security);

struct RowStreamOptions {
  GrpcSecurity security;
  // Delta exports (docs/export.md): the servers record which rows change
  // from this stream's snapshots on, and RowStreamStats::changes says where
  // each one's record stood (the manifest's `changes`).
  bool track_changes = false;
  // With it, only the rows changed since these cursors (the `changes` of the
  // export the delta goes over) are streamed, with tombstones for those
  // removed (evicted). FailedPrecondition if they do not name this cluster
  // (the shard map changed since) or a server no longer knows them (it
  // restarted): a full export is due.
  const nlohmann::json* changes_since = nullptr;
  absl::Duration rpc_deadline = absl::Hours(2);  // Of each server's whole stream.
  // Rows per ImportSlots stream: each is staged by the server and applied
  // atomically, so this bounds the server's staging memory.
  int64_t import_stream_rows = 100'000;
};

struct RowStreamStats {
  int64_t rows = 0;
  int64_t tombstones = 0;            // A delta's.
  nlohmann::json changes = nullptr;  // With track_changes.
  int64_t bytes = 0;                 // Row payload (keys, values, state).
  double seconds = 0;
  int servers = 0;
};

// Streams every stored row of every parameter server (the shard map read
// from `ps_address`) into `writer`, part by part: one ExportSlots stream per
// server, each from one snapshot, merged by slot. Each stream's row count
// and checksum are verified against its end marker. The servers' slot count
// must be the writer's.
absl::StatusOr<RowStreamStats> ExportServerRows(const std::string& ps_address,
                                                const RowStreamOptions& options,
                                                model::ExportWriter* writer);

// Warm start: every row of `reader` into the parameter servers of `job`,
// each to the owner of its slot under the cluster's shard map (any server
// count and slot count). Rows get zero optimizer state where the export
// carries none or another optimizer's. InvalidArgument naming the field if
// the export's shape is not the job's (CheckShape). Each stream is verified
// by the server's row count and checksum.
absl::StatusOr<RowStreamStats> ImportServerRows(const model::ExportReader& reader,
                                                const ShadowSyncJob& job,
                                                const std::string& ps_address,
                                                const RowStreamOptions& options);

// One export of a running (or just finished) job, as `shadowsync run` takes
// them: at completion, every spec.export.intervalSeconds, and on demand.
struct JobExportRequest {
  ShadowSyncJob job;
  std::string exports_dir;  // The export goes to <exports_dir>/model-NNNNNN.
  std::string ps_address;   // Any parameter server.
  std::vector<std::string> syncer_addresses;
  std::vector<std::string> trainer_checkpoints;  // One per trainer.
  GrpcSecurity security;
  // The export, once written and before it is committed, is scored on these
  // from its own files (EvaluateExport, as `shadowsync eval --model` does):
  // the result is the manifest's `eval`, the score of exactly the model
  // exported. Empty = no evaluation.
  std::vector<std::string> eval_data;
  // A delta export over the newest export (spec.export.deltaIntervalSeconds):
  // the rows changed since it and tombstones. A full export instead, and
  // the summary says why, when there is no newest export the servers know
  // (none yet, another shard map, a server restarted).
  bool delta = false;
};

// Writes the export, then keeps the newest spec.export.keep full exports in
// exports_dir with the deltas over them (deleting older model-*
// directories) and points <exports_dir>/LATEST at the new one. Returns a
// summary: path, rows, bytes, seconds, rows_per_second, dense_source,
// examples_trained, eval, and for a delta its base and tombstones (or, for
// a delta that had to be a full export, full_because).
absl::StatusOr<nlohmann::json> ExportJob(const JobExportRequest& request);

// ExportJob's summary as one log line: "exported PATH: N rows in S s (R
// rows/s), dense: SOURCE, E examples trained".
std::string DescribeExport(const nlohmann::json& summary);

}  // namespace shadowsync::exporter

#endif  // SHADOWSYNC_EXPORTER_JOB_EXPORT_H_
