#include "ps/client/wrong_owner.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "shadowsync/v1/ps.pb.h"

namespace shadowsync::ps {
namespace {

std::optional<WrongOwner> Parse(const std::string& details) {
  v1::ErrorDetails proto;
  if (!proto.ParseFromString(details) || !proto.has_wrong_owner()) return std::nullopt;
  const v1::WrongOwner& w = proto.wrong_owner();
  return WrongOwner{.slot = w.slot(), .epoch = w.epoch(), .owner = w.owner()};
}

}  // namespace

absl::Status WrongOwnerError(uint32_t slot, uint64_t epoch, uint32_t owner) {
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat("WRONG_OWNER slot=", slot, " epoch=", epoch, " owner=", owner));
  v1::ErrorDetails detail;
  detail.mutable_wrong_owner()->set_slot(slot);
  detail.mutable_wrong_owner()->set_epoch(epoch);
  detail.mutable_wrong_owner()->set_owner(owner);
  status.SetPayload(kGrpcErrorDetailsUrl, absl::Cord(detail.SerializeAsString()));
  return status;
}

std::optional<WrongOwner> GetWrongOwner(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return std::nullopt;
  const auto payload = status.GetPayload(kGrpcErrorDetailsUrl);
  if (!payload.has_value()) return std::nullopt;
  return Parse(std::string(*payload));
}

std::optional<WrongOwner> GetWrongOwner(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return std::nullopt;
  return Parse(status.error_details());
}

}  // namespace shadowsync::ps
