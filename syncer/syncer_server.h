// The syncer process around a SyncerService, in a GrpcServerProcess
// (common/grpc_server_process.h: gRPC, Prometheus metrics and /healthz on an
// HTTP port, an orderly shutdown). `shadowsync syncer` is a thin wrapper.
// Thread-safe: Shutdown() and Wait() may be called from any thread; destroy
// the server only once no other thread can still be inside Shutdown().
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

#include "absl/status/statusor.h"
#include "common/grpc_server_process.h"
#include "syncer/syncer_service.h"

namespace shadowsync::syncer {

// GrpcServerProcessOptions: the gRPC and HTTP addresses, security, limits and
// shutdown grace (waiting all-reduce calls are answered UNAVAILABLE at once).
struct SyncerServerOptions : GrpcServerProcessOptions {
  SyncerServiceOptions service;
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

  int grpc_port() const { return process_->grpc_port(); }
  // 0 when there is no HTTP endpoint.
  int metrics_port() const { return process_->metrics_port(); }
  // host:port clients on this machine can dial.
  const std::string& address() const { return address_; }

  // Reports unhealthy, answers waiting all-reduce calls UNAVAILABLE, stops
  // accepting RPCs, lets in-flight ones finish (cancelling them after
  // shutdown_grace), then stops the HTTP endpoint. Idempotent; concurrent
  // callers return once it is done.
  void Shutdown() { process_->Shutdown(); }
  // Blocks until Shutdown() has completed.
  void Wait() { process_->Wait(); }

 private:
  SyncerServer() = default;

  std::string address_;
  // Created in this order; the process's after_stop destroys the service and
  // its metrics.
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<SyncerMetrics> metrics_;
  std::unique_ptr<SyncerService> service_;
  std::unique_ptr<GrpcServerProcess> process_;
};

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_SYNCER_SERVER_H_
