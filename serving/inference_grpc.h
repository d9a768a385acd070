// The KServe / Open Inference Protocol v2 over gRPC, as `shadowsync serve`
// speaks it: inference.GRPCInferenceService (ServerLive, ServerReady,
// ModelReady, ServerMetadata, ModelMetadata, ModelInfer). The same inputs,
// output, checks and messages as the HTTP endpoint (serving/v2_protocol.h),
// with tensor values in `contents` or `raw_input_contents`. A bad request is
// answered INVALID_ARGUMENT naming the tensor or value; an unknown model or
// version NOT_FOUND. The port takes the same mutual TLS and bearer token as
// every ShadowSync gRPC server (common/grpc_security.h). Thread-safe.
#ifndef SHADOWSYNC_SERVING_INFERENCE_GRPC_H_
#define SHADOWSYNC_SERVING_INFERENCE_GRPC_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "serving/batcher.h"
#include "serving/model_source.h"

namespace grpc {
class Server;
}  // namespace grpc
namespace prometheus {
class Registry;
}  // namespace prometheus

namespace shadowsync::serving {

struct InferenceGrpcOptions {
  std::string listen = "0.0.0.0:8001";  // host:port; port 0 picks a free one.
  int64_t max_request_examples = 4096;
  GrpcServerLimits limits = {.max_message_bytes = 64 << 20};
  GrpcSecurity security;  // Default: plaintext, no token.
};

class InferenceGrpcServer {
 public:
  // Serves `source`'s model as `name`. `source` and `batcher` must outlive
  // the server. Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<InferenceGrpcServer>> Start(std::string name,
                                                                    const ModelSource& source,
                                                                    Batcher& batcher,
                                                                    InferenceGrpcOptions options,
                                                                    prometheus::Registry& registry);
  // Stops accepting, and returns once the calls in flight are answered (or
  // after 5 s, cancelled).
  ~InferenceGrpcServer();

  int port() const { return port_; }

  class Service;  // The generated service's implementation.

 private:
  InferenceGrpcServer() = default;

  int port_ = 0;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_INFERENCE_GRPC_H_
