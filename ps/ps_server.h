// The parameter-server process around a RowStore: PsService in a
// GrpcServerProcess (common/grpc_server_process.h: gRPC, Prometheus metrics
// and /healthz on an HTTP port, an orderly shutdown), the shard map it starts
// with, and the periodic eviction loop. `shadowsync ps` is a thin wrapper.
// Thread-safe: Shutdown() and Wait() may be called from any thread; destroy
// the server only once no other thread can still be inside Shutdown() (join
// the thread that called it).
//
//   PsServerOptions options;
//   options.store.db_path = "/data/ps";
//   SS_ASSIGN_OR_RETURN(auto server, PsServer::Start(options));
//   // ... "ps listening grpc=127.0.0.1:PORT metrics=127.0.0.1:PORT" is logged.
//   server->Shutdown();  // e.g. from a signal thread; Wait() returns after.
#ifndef SHADOWSYNC_PS_PS_SERVER_H_
#define SHADOWSYNC_PS_PS_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_server_process.h"
#include "common/mutex.h"
#include "ps/ps_service.h"
#include "ps/row_store.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace shadowsync::ps {

// GrpcServerProcessOptions: the gRPC and HTTP addresses, security, limits and
// shutdown grace.
struct PsServerOptions : GrpcServerProcessOptions {
  // This server's address in the shard map it starts with, and in a
  // persisted map it restarts with. Default (empty): the gRPC address with the
  // bound port; with a wildcard host (0.0.0.0, [::]), 127.0.0.1 for a new map
  // and the persisted map's own entry on a restart.
  std::string advertise_address;
  // The initial shard map: Balanced(store.num_slots, peers, epoch 1) with this
  // server at peers[self_index]. Empty = a single-server map of this server.
  // Used only when no map is persisted in the database directory.
  std::vector<std::string> peers;
  uint32_t self_index = 0;
  // Start owning no slot, without a shard map, until SetShardMap gives it
  // one: a server added by scale-out (ps/client/resharder.h). Ignored when a map is
  // persisted. Default: false.
  bool join = false;

  RowStoreOptions store;
  // Limits and executor size. service.shard_map_path defaults to
  // <store.db_path>/SHADOWSYNC_SHARD_MAP, service.checkpoint_dir to
  // <store.db_path>/checkpoints.
  PsServiceOptions service;

  // Period of RowStore::EvictNow(); 0 disables the loop. Default: 10s.
  absl::Duration eviction_interval = absl::Seconds(10);
};

class PsServer {
 public:
  // Opens the store, installs the shard map (the persisted one, else the
  // initial one from `options`), starts gRPC and the HTTP endpoint, then
  // reports healthy. Unavailable if an address cannot be bound; store errors
  // as RowStore::Open returns them.
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(PsServerOptions options);
  // Shutdown(), then returns.
  ~PsServer();

  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  int grpc_port() const { return process_->grpc_port(); }
  // 0 when there is no HTTP endpoint.
  int metrics_port() const { return process_->metrics_port(); }
  // host:port clients can dial (the advertised address).
  const std::string& address() const { return advertise_address_; }

  // Stops accepting RPCs, lets in-flight ones finish (cancelling them after
  // shutdown_grace), stops the eviction loop and the HTTP endpoint, then closes
  // the store. Idempotent; concurrent callers return once it is done.
  void Shutdown() { process_->Shutdown(); }
  // Blocks until Shutdown() has completed.
  void Wait() { process_->Wait(); }

 private:
  PsServer() = default;
  void EvictionLoop();
  // The process's hooks: the eviction loop ends at the start of a shutdown;
  // once no RPC is left, Close() joins it and closes the store.
  void StopEviction();
  void Close();

  PsServerOptions options_;
  std::string advertise_address_;

  // Created in this order; Close() destroys them in reverse.
  std::unique_ptr<RowStore> store_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<PsMetrics> metrics_;
  std::shared_ptr<prometheus::Collectable> store_collectable_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<GrpcServerProcess> process_;
  std::thread eviction_thread_;

  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Ends the eviction loop.
};

}  // namespace shadowsync::ps

#endif  // SHADOWSYNC_PS_PS_SERVER_H_
