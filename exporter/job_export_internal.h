// Private to exporter/: what the parts of exporter/job_export.h share. One
// file per concern:
//   job_export.cc    ExportJob, the job's export description and its dense
//                    parameters, and the helpers below
//   export_rows.cc   ExportServerRows: every server's rows into an export
//   import_rows.cc   ImportServerRows: a warm start, an export's rows into
//                    the servers
// Free functions; thread-safe.
#ifndef SHADOWSYNC_EXPORTER_JOB_EXPORT_INTERNAL_H_
#define SHADOWSYNC_EXPORTER_JOB_EXPORT_INTERNAL_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grpc_security.h"
#include "common/shard_map.h"
#include "exporter/job_export.h"
#include "shadowsync/v1/ps.grpc.pb.h"

namespace shadowsync::exporter::internal {

using Clock = std::chrono::steady_clock;
using Stub = v1::ParameterServer::Stub;

inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::unique_ptr<Stub> Connect(const std::string& address, const GrpcSecurity& security);

absl::StatusOr<ShardMap> GetMap(const std::string& address, const RowStreamOptions& options);

}  // namespace shadowsync::exporter::internal

#endif  // SHADOWSYNC_EXPORTER_JOB_EXPORT_INTERNAL_H_
