// The syncer process around a SyncerService: the gRPC server, Prometheus
// metrics and /healthz on an HTTP port, and an orderly shutdown. `shadowsync
// syncer` is a thin wrapper. Thread-safe: Shutdown() and Wait() may be called
// from any thread; destroy the server only once no other thread can still be
// inside Shutdown().
//
//   SyncerServerOptions options;
//   options.service.member_timeout = absl::Seconds(10);
//   SS_ASSIGN_OR_RETURN(auto server, SyncerServer::Start(options));
//   // ... "syncer listening grpc=127.0.0.1:PORT metrics=127.0.0.1:PORT" is logged.
//   server->Shutdown();  // e.g. from a signal thread; Wait() returns after.
#ifndef SHADOWSYNC_SYNCER_SYNCER_SERVER_H_
#define SHADOWSYNC_SYNCER_SYNCER_SERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/mutex.h"
#include "syncer/syncer_service.h"

namespace grpc {
class Server;
}  // namespace grpc
namespace shadowsync {
class MetricsHttpServer;
}  // namespace shadowsync

namespace shadowsync::syncer {

struct SyncerServerOptions {
  // host:port the gRPC server binds; port 0 picks a free port (grpc_port()).
  // Default: 127.0.0.1:0.
  std::string grpc_address = "127.0.0.1:0";
  // host:port of the HTTP server for /metrics and /healthz; port 0 picks a
  // free port (metrics_port()); empty = no HTTP server. Default: 127.0.0.1:0.
  std::string metrics_address = "127.0.0.1:0";
  SyncerServiceOptions service;
  // Mutual TLS, and the bearer token every call must carry: a call without it
  // is answered UNAUTHENTICATED before any handler runs (ServerCredentials).
  // Default: plaintext, no token.
  GrpcSecurity security;
  // Message size, streams per connection, handler threads and gRPC memory.
  GrpcServerLimits limits;
  // How long Shutdown() lets in-flight RPCs finish before cancelling them;
  // waiting all-reduce calls are answered UNAVAILABLE at once. Default: 5s.
  absl::Duration shutdown_grace = absl::Seconds(5);
};

class SyncerServer {
 public:
  // Starts gRPC and the HTTP endpoint, then reports healthy. Unavailable if
  // an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<SyncerServer>> Start(SyncerServerOptions options);
  // Shutdown(), then returns.
  ~SyncerServer();

  SyncerServer(const SyncerServer&) = delete;
  SyncerServer& operator=(const SyncerServer&) = delete;

  int grpc_port() const { return grpc_port_; }
  // 0 when there is no HTTP endpoint.
  int metrics_port() const { return metrics_port_; }
  // host:port clients on this machine can dial.
  const std::string& address() const { return address_; }

  // Reports unhealthy, answers waiting all-reduce calls UNAVAILABLE, stops
  // accepting RPCs, lets in-flight ones finish (cancelling them after
  // shutdown_grace), then stops the HTTP endpoint. Idempotent; concurrent
  // callers return once it is done.
  void Shutdown();
  // Blocks until Shutdown() has completed.
  void Wait();

 private:
  SyncerServer() = default;

  SyncerServerOptions options_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::string address_;

  // Destroyed in Shutdown(), in reverse order of creation.
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<SyncerMetrics> metrics_;
  std::unique_ptr<SyncerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> http_;

  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_SYNCER_SERVER_H_
