// The WRONG_OWNER codec: the typed detail survives absl -> gRPC -> absl, the
// way a server's answer reaches a client, and nothing else reads as one.
#include "ps/client/wrong_owner.h"

#include <optional>

#include "absl/strings/cord.h"
#include "common/grpc_util.h"
#include "gtest/gtest.h"

namespace shadowsync::ps {
namespace {

TEST(WrongOwnerTest, TheDetailCrossesTheWireBothWays) {
  for (const WrongOwner want :
       {WrongOwner{17, 42, 3}, WrongOwner{0, 0, 0}, WrongOwner{4095, UINT64_MAX, kUnknownOwner}}) {
    const absl::Status s = WrongOwnerError(want.slot, want.epoch, want.owner);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(GetWrongOwner(s), want);
    const grpc::Status wire = ToGrpcStatus(s);
    EXPECT_EQ(wire.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(wire.error_message(), s.message());
    EXPECT_EQ(GetWrongOwner(wire), want);
    EXPECT_EQ(GetWrongOwner(FromGrpcStatus(wire)), want);
    EXPECT_EQ(GetWrongOwner(FromGrpcStatus(wire, "Push", "ps-0:7000")), want);
  }
  EXPECT_EQ(WrongOwnerError(17, 42, 3).message(), "WRONG_OWNER slot=17 epoch=42 owner=3");
}

TEST(WrongOwnerTest, OnlyTheTypedDetailOfAFailedPreconditionCounts) {
  EXPECT_EQ(GetWrongOwner(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(GetWrongOwner(grpc::Status::OK), std::nullopt);
  // The text alone is not the protocol.
  EXPECT_EQ(GetWrongOwner(absl::FailedPreconditionError("WRONG_OWNER slot=1 epoch=2 owner=3")),
            std::nullopt);
  EXPECT_EQ(GetWrongOwner(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       "WRONG_OWNER slot=1 epoch=2 owner=3")),
            std::nullopt);
  // The detail under another code.
  const grpc::Status wire = ToGrpcStatus(WrongOwnerError(1, 2, 3));
  EXPECT_EQ(
      GetWrongOwner(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "x", wire.error_details())),
      std::nullopt);
  // Bytes that are not an ErrorDetails.
  EXPECT_EQ(GetWrongOwner(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "x", "\xff\xff")),
            std::nullopt);
  absl::Status garbage = absl::FailedPreconditionError("x");
  garbage.SetPayload(kGrpcErrorDetailsUrl, absl::Cord("\xff\xff"));
  EXPECT_EQ(GetWrongOwner(garbage), std::nullopt);
}

}  // namespace
}  // namespace shadowsync::ps
