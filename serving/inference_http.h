// The KServe / Open Inference Protocol v2 HTTP endpoint of `shadowsync
// serve`, on civetweb: /v2, /v2/health/{live,ready}, /v2/models/{name}
// (optionally /versions/{version}), .../ready and POST .../infer. Bad
// requests are answered 400 with {"error": ...} naming the field, and the
// server goes on serving. Requests are parsed on civetweb's threads, each
// against the model the source serves when it arrives, and scored by the
// Batcher with that model. Its Prometheus metrics go into the registry given.
// With TLS material the port speaks HTTPS only, with mutual TLS as the gRPC
// port: a client must present a certificate that chains to the CA.
// Thread-safe.
#ifndef SHADOWSYNC_SERVING_INFERENCE_HTTP_H_
#define SHADOWSYNC_SERVING_INFERENCE_HTTP_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grpc_security.h"
#include "serving/batcher.h"
#include "serving/civetweb_tls.h"
#include "serving/model_source.h"
#include "serving/v2_protocol.h"

class CivetServer;
namespace prometheus {
class Registry;
}  // namespace prometheus

namespace shadowsync::serving {

struct InferenceHttpOptions {
  std::string listen = "0.0.0.0:8000";  // host:port; port 0 picks a free one.
  int threads = 64;                     // Connections served at once (keep-alive holds one each).
  int64_t max_body_bytes = 64 << 20;
  int64_t max_request_examples = 4096;
  // The process's TLS and token material (--tls-*, --auth-token-file), as
  // the gRPC port takes it. tls(): HTTPS, and a client certificate signed by
  // ca_pem is required. has_token(): every endpoint but
  // /v2/health/{live,ready} answers 401 unless the request carries
  // "Authorization: Bearer <token>".
  GrpcSecurity security;
};

class InferenceHttpServer {
 public:
  // Serves `source`'s model as `name`. `source` and `batcher` must outlive
  // the server. Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<InferenceHttpServer>> Start(std::string name,
                                                                    const ModelSource& source,
                                                                    Batcher& batcher,
                                                                    InferenceHttpOptions options,
                                                                    prometheus::Registry& registry);
  // Stops accepting, and returns once the requests in flight are answered.
  ~InferenceHttpServer();

  int port() const { return port_; }

  struct Handler;  // civetweb's; public for inference_http.cc.

 private:
  InferenceHttpServer() = default;

  std::string address_;
  int port_ = 0;
  std::unique_ptr<Handler> handler_;
  // OpenSSL's SSL_CTX of the HTTPS port (null: plain HTTP); civetweb uses it
  // without owning it, so it outlives server_.
  SslCtx tls_;
  std::unique_ptr<CivetServer> server_;
};

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_INFERENCE_HTTP_H_
