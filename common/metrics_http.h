// The HTTP endpoint of every server process: Prometheus /metrics from the
// registered collectables, /healthz (200 "ok" while serving, 503 before
// and while stopping) and /readyz (also 503 while not ready), on civetweb
// through prometheus-cpp's Exposer.
// Thread-safe.
//
//   SS_ASSIGN_OR_RETURN(auto http, MetricsHttpServer::Start("0.0.0.0:7001"));
//   http->RegisterCollectable(registry);
//   http->set_serving(true);  // once the gRPC server is up
//   http.reset();             // stops within ~20ms
#ifndef SHADOWSYNC_COMMON_METRICS_HTTP_H_
#define SHADOWSYNC_COMMON_METRICS_HTTP_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace shadowsync {

class MetricsHttpServer {
 public:
  // Binds `address` (host:port; port 0 picks a free port, see port()).
  // Unavailable if it cannot be bound. /healthz answers 503 until
  // set_serving(true).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address);
  // Stops serving promptly (civetweb's listener otherwise notices the stop
  // only between 2-second polls).
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  void RegisterCollectable(const std::weak_ptr<prometheus::Collectable>& collectable);
  void RemoveCollectable(const std::weak_ptr<prometheus::Collectable>& collectable);
  void set_serving(bool serving) { serving_->store(serving, std::memory_order_release); }
  // /readyz: serving and ready. Default ready (then /readyz is /healthz).
  void set_ready(bool ready) { ready_->store(ready, std::memory_order_release); }

 private:
  MetricsHttpServer() = default;

  std::string address_;
  int port_ = 0;
  std::unique_ptr<prometheus::Exposer> exposer_;
  // Read by the /healthz handler on civetweb's threads.
  std::shared_ptr<std::atomic<bool>> serving_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> ready_ = std::make_shared<std::atomic<bool>>(true);
};

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_METRICS_HTTP_H_
