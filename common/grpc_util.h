// Helpers at the gRPC edge, shared by every service and client: the one
// conversion per direction between absl::Status and grpc::Status (the codes
// are numerically identical, and typed error details travel along),
// deadlines from absl durations, and the bounds every server applies.
// Thread-safe: no shared state (DisableMutexDeadlockDetection is called once,
// first thing in main).
#ifndef SHADOWSYNC_COMMON_GRPC_UTIL_H_
#define SHADOWSYNC_COMMON_GRPC_UTIL_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace shadowsync {

// Turns off absl::Mutex's deadlock detector for this process, as absl does by
// default in NDEBUG builds. Debian builds libabsl without NDEBUG, so the
// detector runs on every lock gRPC takes: it updates a process-wide graph
// under a global lock, measured at 5x the cost of a nested lock pair. Our own
// code locks shadowsync::Mutex, which TSan checks instead. The shadowsync
// command and ps_bench (whose clients stand in for trainers) call this first.
void DisableMutexDeadlockDetection();

// The absl::Status payload that travels as grpc::Status::error_details (the
// grpc-status-details-bin trailer): a serialized ErrorDetails (ps.proto),
// such as ps/client/wrong_owner.h's.
inline constexpr char kGrpcErrorDetailsUrl[] = "type.googleapis.com/shadowsync.v1.ErrorDetails";

// absl -> gRPC, for servers finishing an RPC.
grpc::Status ToGrpcStatus(const absl::Status& status);
// gRPC -> absl, for clients receiving one.
absl::Status FromGrpcStatus(const grpc::Status& status);
// The same, naming the call and the server: "ExportSlots on ps-0:7000: ...".
absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& call,
                            const std::string& address);

// Channel arguments of the bulk row streams (resharding, model export and
// import): messages up to 256 MiB either way.
grpc::ChannelArguments BulkStreamChannelArgs();

// The absolute deadline `timeout` from now, as gRPC wants it.
std::chrono::system_clock::time_point DeadlineFromNow(absl::Duration timeout);

// The bounds a gRPC server puts on what clients can make it hold
// (docs/reliability.md, "Limits"). Each makes the server answer
// RESOURCE_EXHAUSTED, or a client wait, instead of growing without bound.
// The services use gRPC's callback API, so a waiting call holds no thread;
// what such calls hold in memory each service bounds itself
// (PsServiceOptions::max_import_bytes, SyncerServiceOptions::max_waiting_bytes).
struct GrpcServerLimits {
  // Largest message received or sent; gRPC refuses a larger one with
  // RESOURCE_EXHAUSTED before any handler runs. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
  // Streams one client connection may have open at once (HTTP/2
  // SETTINGS_MAX_CONCURRENT_STREAMS); the client queues any beyond.
  // Default: 256.
  int max_concurrent_streams = 256;
  // gRPC's memory quota for connection buffers and call state, enforced by
  // gRPC itself. Default: 4 GiB.
  int64_t memory_bytes = int64_t{4} << 30;
};

// InvalidArgument naming the field if a bound is not positive, or the quota
// cannot hold two maximal messages.
absl::Status ValidateServerLimits(const GrpcServerLimits& limits);

// Applies `limits` to a server about to be built.
void ApplyServerLimits(const GrpcServerLimits& limits, grpc::ServerBuilder& builder);

// "host:port" with `port` replacing the port of `address` ("0.0.0.0:0", 7001
// -> "0.0.0.0:7001"; "[::]:0" -> "[::]:7001"). Addresses without a port get one.
std::string WithPort(const std::string& address, int port);

// True when `address` ("host:port") binds every interface (0.0.0.0, [::]):
// it says nothing about the name other machines reach the server by.
bool IsWildcardAddress(const std::string& address);

// WithPort, with a wildcard host (0.0.0.0, [::]) replaced by 127.0.0.1: the
// address a client on this machine dials for a server bound to `bind_address`.
std::string DialableAddress(const std::string& bind_address, int port);

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_GRPC_UTIL_H_
