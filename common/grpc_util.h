// Helpers at the gRPC edge, shared by every service and client: the one
// conversion per direction between absl::Status and grpc::Status (the codes
// are numerically identical), deadlines from absl durations, and the
// parameter server's wrong-owner protocol (proto/shadowsync/v1/ps.proto).
#ifndef SHADOWSYNC_COMMON_GRPC_UTIL_H_
#define SHADOWSYNC_COMMON_GRPC_UTIL_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace shadowsync {

// absl -> gRPC, for servers finishing an RPC.
grpc::Status ToGrpcStatus(const absl::Status& status);
// gRPC -> absl, for clients receiving one.
absl::Status FromGrpcStatus(const grpc::Status& status);

// The absolute deadline `timeout` from now, as gRPC wants it.
std::chrono::system_clock::time_point DeadlineFromNow(absl::Duration timeout);

// Trailing metadata key of a WRONG_OWNER error: the server's shard-map epoch.
inline constexpr char kShardEpochMetadataKey[] = "shadowsync-shard-epoch";
// Message prefix of a WRONG_OWNER error (code FAILED_PRECONDITION).
inline constexpr char kWrongOwnerPrefix[] = "WRONG_OWNER ";

// True for the parameter server's "slot not owned here" error.
bool IsWrongOwner(const grpc::Status& status);
// The server's epoch from a finished call's trailing metadata; nullopt if absent.
std::optional<uint64_t> ShardEpochFromTrailers(const grpc::ClientContext& context);

// "host:port" with `port` replacing the port of `address` ("0.0.0.0:0", 7001
// -> "0.0.0.0:7001"; "[::]:0" -> "[::]:7001"). Addresses without a port get one.
std::string WithPort(const std::string& address, int port);

// WithPort, with a wildcard host (0.0.0.0, [::]) replaced by 127.0.0.1: the
// address a client on this machine dials for a server bound to `bind_address`.
std::string DialableAddress(const std::string& bind_address, int port);

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_GRPC_UTIL_H_
