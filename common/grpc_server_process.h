// The process around one gRPC service, shared by the parameter server
// (ps/ps_server.h) and the syncer (syncer/syncer_server.h): the gRPC server
// with the job's security (mutual TLS, the bearer token) and limits, the HTTP
// endpoint for Prometheus /metrics and /healthz, the bound ports, and an
// orderly, idempotent shutdown. The owning server adds what is its own through
// two hooks. Thread-safe: Shutdown() and Wait() may be called from any thread;
// destroy the process only once no other thread can still be inside Shutdown().
//
//   SS_ASSIGN_OR_RETURN(auto process,
//                       GrpcServerProcess::Start("syncer", options, service.get(),
//                                                {registry}, hooks));
//   process->ReportServing("member_timeout=10s");  // /healthz 200, logs "listening"
//   process->Shutdown();  // e.g. from a signal thread; Wait() returns after.
#ifndef SHADOWSYNC_COMMON_GRPC_SERVER_PROCESS_H_
#define SHADOWSYNC_COMMON_GRPC_SERVER_PROCESS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/mutex.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc
namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace shadowsync {

class MetricsHttpServer;

// What every server process is given: its addresses, security, limits and
// how long it drains. PsServerOptions and SyncerServerOptions extend it.
struct GrpcServerProcessOptions {
  // host:port the gRPC server binds; port 0 picks a free port (grpc_port()).
  // Default: 127.0.0.1:0.
  std::string grpc_address = "127.0.0.1:0";
  // host:port of the HTTP server for /metrics and /healthz; port 0 picks a
  // free port (metrics_port()); empty = no HTTP server. Default: 127.0.0.1:0.
  std::string metrics_address = "127.0.0.1:0";
  // Mutual TLS, and the bearer token every call must carry: a call without it
  // is answered UNAUTHENTICATED before any handler runs (ServerCredentials).
  // Default: plaintext, no token.
  GrpcSecurity security;
  // Message size, streams per connection and gRPC memory.
  GrpcServerLimits limits;
  // How long Shutdown() lets in-flight RPCs finish before cancelling them.
  // Default: 5s.
  absl::Duration shutdown_grace = absl::Seconds(5);
};

class GrpcServerProcess {
 public:
  // What the owning server adds to its health and to Shutdown(). Any may be
  // empty.
  struct Hooks {
    // The HTTP endpoint's health check (MetricsHttpServer::SetHealthCheck): a
    // failure only a restart mends turns /healthz, /readyz and /livez to 503.
    std::function<absl::Status()> health;
    // Runs before gRPC stops accepting calls: answer the calls that would
    // otherwise keep the drain waiting (the syncer's open all-reduce rounds).
    std::function<void()> before_drain;
    // Runs once no RPC is in flight and the gRPC server and the HTTP endpoint
    // are gone: stop background work, free the service and what it reads.
    std::function<void()> after_stop;
  };

  // InvalidArgument "<name>: limits.<field>: ..." for limits a server cannot
  // run with. Start() checks this too; an owner with costly work to do before
  // Start() (opening a store) checks first.
  static absl::Status ValidateOptions(const std::string& name,
                                      const GrpcServerProcessOptions& options);

  // Binds options.grpc_address and serves `service` there, then starts the
  // HTTP endpoint exporting `collectables` (unless options.metrics_address is
  // empty). /healthz answers 503 until ReportServing(). Unavailable if an
  // address cannot be bound. `service`, the collectables and whatever the
  // hooks touch must outlive Shutdown().
  static absl::StatusOr<std::unique_ptr<GrpcServerProcess>> Start(
      std::string name, GrpcServerProcessOptions options, grpc::Service* service,
      const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables, Hooks hooks);
  // Shutdown(), then returns.
  ~GrpcServerProcess();

  GrpcServerProcess(const GrpcServerProcess&) = delete;
  GrpcServerProcess& operator=(const GrpcServerProcess&) = delete;

  int grpc_port() const { return grpc_port_; }
  // 0 when there is no HTTP endpoint.
  int metrics_port() const { return metrics_port_; }
  // host:port clients on this machine can dial (DialableAddress).
  std::string local_address() const;

  // Reports healthy (/healthz 200) and logs "<name> listening grpc=HOST:PORT
  // metrics=HOST:PORT|off <details> <security>".
  void ReportServing(const std::string& details);

  // Reports unhealthy, runs before_drain, stops accepting RPCs, lets in-flight
  // ones finish (cancelling them after shutdown_grace), stops the HTTP
  // endpoint, then runs after_stop. Idempotent; concurrent callers return
  // once it is done.
  void Shutdown();
  // Blocks until Shutdown() has completed.
  void Wait();

 private:
  GrpcServerProcess() = default;

  std::string name_;
  GrpcServerProcessOptions options_;
  Hooks hooks_;  // Empty until Start() has succeeded.
  bool started_ = false;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  // Destroyed in Shutdown().
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> http_;

  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_GRPC_SERVER_PROCESS_H_
