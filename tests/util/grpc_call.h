// One unary RPC straight through a generated stub, for tests that send what
// the product's clients never would.
#ifndef SHADOWSYNC_TESTS_UTIL_GRPC_CALL_H_
#define SHADOWSYNC_TESTS_UTIL_GRPC_CALL_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "grpcpp/grpcpp.h"

namespace shadowsync::testing {

// Calls `rpc` (e.g. &v1::Syncer::Stub::Join) on `stub` with a 30 s deadline;
// the answer goes to `response` when given.
template <typename Stub, typename Request, typename Response>
absl::Status CallRpc(Stub& stub,
                     grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
                     const Request& request, Response* response = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineFromNow(absl::Seconds(30)));
  Response local;
  return FromGrpcStatus((stub.*rpc)(&context, request, response ? response : &local));
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_GRPC_CALL_H_
