// WRONG_OWNER, the parameter server's answer to a request for rows of a slot
// it does not serve: FAILED_PRECONDITION carrying a typed v1::WrongOwner
// (ps.proto) with the slot, the server's shard-map epoch and the owner, so
// that a client learns how far behind its map is without parsing text. The
// detail rides in an absl::Status payload inside a process and in
// grpc::Status::error_details on the wire (ToGrpcStatus / FromGrpcStatus in
// common/grpc_util.h carry it across). Pure functions; thread-safe.
#ifndef SHADOWSYNC_PS_CLIENT_WRONG_OWNER_H_
#define SHADOWSYNC_PS_CLIENT_WRONG_OWNER_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace shadowsync::ps {

// The owner a server reports when it knows only that the slot is not its
// own (a RowStore knows which slots it owns, not who owns the others).
inline constexpr uint32_t kUnknownOwner = UINT32_MAX;

struct WrongOwner {
  uint32_t slot = 0;
  uint64_t epoch = 0;
  uint32_t owner = kUnknownOwner;
  bool operator==(const WrongOwner&) const = default;
};

// FailedPrecondition "WRONG_OWNER slot=<s> epoch=<e> owner=<o>" (the text is
// for people) with the typed detail.
absl::Status WrongOwnerError(uint32_t slot, uint64_t epoch, uint32_t owner);
// The detail of a WRONG_OWNER error; nullopt for any other status,
// including a FAILED_PRECONDITION whose message only looks like one.
std::optional<WrongOwner> GetWrongOwner(const absl::Status& status);
std::optional<WrongOwner> GetWrongOwner(const grpc::Status& status);

}  // namespace shadowsync::ps

#endif  // SHADOWSYNC_PS_CLIENT_WRONG_OWNER_H_
