#include "common/grpc_util.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace shadowsync {

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto details = status.GetPayload(kGrpcErrorDetailsUrl);
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      details.has_value() ? std::string(*details) : std::string());
}

namespace {

absl::Status WithDetails(absl::Status status, const grpc::Status& from) {
  if (!from.error_details().empty()) {
    status.SetPayload(kGrpcErrorDetailsUrl, absl::Cord(from.error_details()));
  }
  return status;
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return WithDetails(
      absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()),
      status);
}

absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& call,
                            const std::string& address) {
  if (status.ok()) return absl::OkStatus();
  return WithDetails(
      absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                   absl::StrCat(call, " on ", address, ": ", status.error_message())),
      status);
}

grpc::ChannelArguments BulkStreamChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  return args;
}

std::chrono::system_clock::time_point DeadlineFromNow(absl::Duration timeout) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             absl::ToChronoNanoseconds(timeout));
}

absl::Status ValidateServerLimits(const GrpcServerLimits& limits) {
  if (limits.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes: must be positive, got ", limits.max_message_bytes));
  }
  if (limits.max_concurrent_streams <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_concurrent_streams: must be positive, got ",
                                                   limits.max_concurrent_streams));
  }
  if (limits.memory_bytes < 2 * int64_t{limits.max_message_bytes}) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_bytes: must hold at least two messages of max_message_bytes (",
                     limits.max_message_bytes, " bytes), got ", limits.memory_bytes));
  }
  return absl::OkStatus();
}

void ApplyServerLimits(const GrpcServerLimits& limits, grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(limits.max_message_bytes);
  builder.SetMaxSendMessageSize(limits.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  grpc::ResourceQuota quota("shadowsync-server");
  quota.Resize(static_cast<size_t>(limits.memory_bytes));
  builder.SetResourceQuota(quota);
}

std::string WithPort(const std::string& address, int port) {
  const size_t colon = address.rfind(':');
  const size_t bracket = address.rfind(']');
  const bool has_port =
      colon != std::string::npos && (bracket == std::string::npos || colon > bracket);
  const std::string host = has_port ? address.substr(0, colon) : address;
  return absl::StrCat(host, ":", port);
}

bool IsWildcardAddress(const std::string& address) {
  const std::string with_port = WithPort(address, 0);
  for (const char* wildcard : {"0.0.0.0:", "[::]:", "[::0]:"}) {
    if (absl::StartsWith(with_port, wildcard)) return true;
  }
  return false;
}

std::string DialableAddress(const std::string& bind_address, int port) {
  return IsWildcardAddress(bind_address) ? absl::StrCat("127.0.0.1:", port)
                                         : WithPort(bind_address, port);
}

}  // namespace shadowsync
