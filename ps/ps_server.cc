#include "ps/ps_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <iostream>
#include <utility>

#include "CivetServer.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "civetweb.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace shadowsync::ps {
namespace {

// /healthz of every PsServer in the process, keyed by HTTP port: civetweb's
// begin_request callback is a plain function without a user pointer, so it
// finds its server's flag by the port the request arrived on.
class HealthRegistry {
 public:
  static HealthRegistry& Get() {
    static auto* registry = new HealthRegistry();  // Never destroyed: used by HTTP threads.
    return *registry;
  }
  void Register(int port, std::shared_ptr<std::atomic<bool>> serving) {
    MutexLock lock(&mu_);
    by_port_[port] = std::move(serving);
  }
  void Unregister(int port) {
    MutexLock lock(&mu_);
    by_port_.erase(port);
  }
  // Serving, not yet serving / stopping, or unknown port (also not serving).
  bool Serving(int port) {
    ReaderMutexLock lock(&mu_);
    auto it = by_port_.find(port);
    return it != by_port_.end() && it->second->load(std::memory_order_acquire);
  }

 private:
  Mutex mu_;
  absl::flat_hash_map<int, std::shared_ptr<std::atomic<bool>>> by_port_ ABSL_GUARDED_BY(mu_);
};

// Answers /healthz itself (200 "ok" while serving, 503 otherwise) and leaves
// every other URI (/metrics) to the exposer.
int HandleHealthz(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr ||
      std::strcmp(info->local_uri, "/healthz") != 0) {
    return 0;
  }
  const bool serving = HealthRegistry::Get().Serving(info->server_port);
  const char* body = serving ? "ok\n" : "not serving\n";
  const int code = serving ? 200 : 503;
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n%s",
            code, serving ? "OK" : "Service Unavailable", std::strlen(body), body);
  return code;
}

// "0.0.0.0:7000" -> "127.0.0.1:7000": a wildcard bind is dialled on loopback.
std::string DialableAddress(const std::string& bind_address, int port) {
  std::string address = WithPort(bind_address, port);
  for (const char* wildcard : {"0.0.0.0:", "[::]:", "[::0]:"}) {
    if (absl::StartsWith(address, wildcard)) {
      return absl::StrCat("127.0.0.1:", port);
    }
  }
  return address;
}

void Log(const std::string& line) { std::cerr << line << "\n" << std::flush; }

// Destroys `exposer`. civetweb's listener notices the stop flag only between
// 2-second polls, so connections to `address` wake it meanwhile.
void StopExposer(std::unique_ptr<prometheus::Exposer> exposer, const std::string& address) {
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    const size_t colon = address.rfind(':');
    std::string host = address.substr(0, colon);
    if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
    const std::string port = address.substr(colon + 1);
    addrinfo hints = {};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* info = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &info) != 0) return;
    while (!stopped.load(std::memory_order_acquire)) {
      const int fd = socket(info->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        connect(fd, info->ai_addr, info->ai_addrlen);
        close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    freeaddrinfo(info);
  });
  exposer.reset();
  stopped.store(true, std::memory_order_release);
  waker.join();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(PsServerOptions options) {
  std::unique_ptr<PsServer> server(new PsServer());
  PsServer& s = *server;
  if (options.service.shard_map_path.empty()) {
    options.service.shard_map_path = options.store.db_path + "/SHADOWSYNC_SHARD_MAP";
  }
  s.options_ = std::move(options);
  const PsServerOptions& opts = s.options_;

  Log(absl::StrFormat("ps opening store db=%s dim=%d tables=%d slots=%d", opts.store.db_path,
                      opts.store.dim, opts.store.tables.size(), opts.store.num_slots));
  SS_ASSIGN_OR_RETURN(s.store_, RowStore::Open(opts.store));
  SS_ASSIGN_OR_RETURN(std::optional<PersistedShardMap> persisted,
                      LoadShardMapFile(opts.service.shard_map_path));

  s.registry_ = std::make_shared<prometheus::Registry>();
  s.metrics_ = std::make_unique<PsMetrics>(*s.registry_);
  s.store_collectable_ = PsMetrics::StoreCollectable(s.store_.get());
  s.service_ = std::make_unique<PsService>(s.store_.get(), s.metrics_.get(), opts.service);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(opts.grpc_address, grpc::InsecureServerCredentials(), &s.grpc_port_);
  builder.RegisterService(s.service_.get());
  builder.SetMaxReceiveMessageSize(opts.max_message_bytes);
  builder.SetMaxSendMessageSize(opts.max_message_bytes);
  s.server_ = builder.BuildAndStart();
  // On any error below, ~PsServer tears down whatever was started.
  if (s.server_ == nullptr || s.grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("ps: cannot bind the gRPC address ", opts.grpc_address));
  }
  s.advertise_address_ = opts.advertise_address.empty()
                             ? DialableAddress(opts.grpc_address, s.grpc_port_)
                             : opts.advertise_address;

  // The shard map: the persisted one (this server's own address refreshed,
  // since a restart may bind a new port), else the initial one for a store
  // that has none or an older one.
  absl::Status installed;
  if (persisted.has_value() && persisted->map.epoch() >= s.store_->epoch()) {
    v1::ShardMap proto = persisted->map.ToProto();
    proto.set_addresses(static_cast<int>(persisted->self_index), s.advertise_address_);
    SS_ASSIGN_OR_RETURN(ShardMap map, ShardMap::FromProto(proto));
    Log(absl::StrFormat("ps using the persisted shard map epoch=%d self=%d", map.epoch(),
                        persisted->self_index));
    installed = s.service_->InstallShardMap(map, persisted->self_index);
  } else {
    std::vector<std::string> peers = opts.peers;
    if (peers.empty()) peers.push_back(s.advertise_address_);
    const ShardMap initial = ShardMap::Balanced(opts.store.num_slots, peers, /*epoch=*/1);
    if (initial.epoch() >= s.store_->epoch()) {
      installed = s.service_->InstallShardMap(initial, opts.self_index);
    } else {
      Log(absl::StrFormat(
          "ps serving the stored ownership of epoch %d without a shard map until SetShardMap",
          s.store_->epoch()));
    }
  }
  SS_RETURN_IF_ERROR(installed);

  if (!opts.metrics_address.empty()) {
    CivetCallbacks callbacks;
    callbacks.begin_request = &HandleHealthz;
    try {
      s.exposer_ = std::make_unique<prometheus::Exposer>(opts.metrics_address, 2, &callbacks);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("ps: cannot bind the metrics address ",
                                                 opts.metrics_address, ": ", e.what()));
    }
    const std::vector<int> ports = s.exposer_->GetListeningPorts();
    s.metrics_port_ = ports.empty() ? 0 : ports.front();
    s.exposer_->RegisterCollectable(s.registry_);
    s.exposer_->RegisterCollectable(s.store_collectable_);
    HealthRegistry::Get().Register(s.metrics_port_, s.serving_);
  }

  if (opts.eviction_interval > absl::ZeroDuration()) {
    s.eviction_thread_ = std::thread([&s] { s.EvictionLoop(); });
  }
  s.serving_->store(true, std::memory_order_release);
  Log(absl::StrCat("ps listening grpc=", WithPort(opts.grpc_address, s.grpc_port_), " metrics=",
                   opts.metrics_address.empty() ? std::string("off")
                                                : WithPort(opts.metrics_address, s.metrics_port_),
                   " advertise=", s.advertise_address_));
  return server;
}

PsServer::~PsServer() { Shutdown(); }

void PsServer::EvictionLoop() {
  while (true) {
    {
      MutexLock lock(&mu_);
      mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; },
                           options_.eviction_interval);
      if (stopping_) return;
    }
    absl::StatusOr<int64_t> evicted = store_->EvictNow();
    if (!evicted.ok()) {
      Log(absl::StrCat("ps eviction failed: ", evicted.status().ToString()));
    } else if (*evicted > 0) {
      Log(absl::StrCat("ps evicted rows=", *evicted));
    }
  }
}

void PsServer::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (stopping_) {
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; });
      return;
    }
    stopping_ = true;
  }
  Log("ps shutting down: draining RPCs");
  serving_->store(false, std::memory_order_release);
  // 1. Stop accepting, let in-flight RPCs finish, cancel stragglers at the
  //    deadline. The service's executor keeps running meanwhile, so streams
  //    and admin RPCs can complete.
  if (server_ != nullptr) {
    server_->Shutdown(DeadlineFromNow(options_.shutdown_grace));
    server_->Wait();
  }
  // 2. Background work and the HTTP endpoint, which read the store.
  if (eviction_thread_.joinable()) eviction_thread_.join();
  if (exposer_ != nullptr) {
    HealthRegistry::Get().Unregister(metrics_port_);
    exposer_->RemoveCollectable(store_collectable_);
    StopExposer(std::move(exposer_), DialableAddress(options_.metrics_address, metrics_port_));
  }
  // 3. The service (drains its executor), then the store.
  server_.reset();
  service_.reset();
  const bool had_store = store_ != nullptr;
  store_.reset();
  if (had_store) Log("ps stopped: store closed");
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
}

void PsServer::Wait() {
  MutexLock lock(&mu_);
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; });
}

}  // namespace shadowsync::ps
