// The HTTP endpoint of every server process: Prometheus /metrics from the
// registered collectables, /healthz (200 "ok" while serving, 503 before
// and while stopping), /readyz (also 503 while not ready) and /livez (503
// only while the health check fails: a liveness probe must not kill a
// process that is starting or draining), on civetweb through prometheus-cpp's
// Exposer, one request per connection. Every /metrics also carries
// shadowsync_build_info{version} 1, so a dashboard or alert can tell which
// release each process runs. Thread-safe.
//
//   SS_ASSIGN_OR_RETURN(auto http, MetricsHttpServer::Start("0.0.0.0:7001"));
//   http->RegisterCollectable(registry);
//   http->set_serving(true);  // once the gRPC server is up
//   http.reset();             // stops within ~20ms
#ifndef SHADOWSYNC_COMMON_METRICS_HTTP_H_
#define SHADOWSYNC_COMMON_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace prometheus {
class Collectable;
class Exposer;
class Registry;
}  // namespace prometheus
struct mg_connection;

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
  void set_serving(bool serving);
  // /readyz: serving and ready. Default ready (then /readyz is /healthz).
  void set_ready(bool ready);
  // Run by every /healthz, /readyz and /livez request, on civetweb's threads,
  // so it must be quick and thread-safe. While it fails, all three answer 503
  // with its message: a failure only a restart mends (the parameter server's
  // failed store). Replaces an earlier check; empty = none.
  void SetHealthCheck(std::function<absl::Status()> check);

  // Shared with civetweb's threads, which may still read it after the server.
  struct HealthState;

 private:
  MetricsHttpServer() = default;

  std::string address_;
  int port_ = 0;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<HealthState> health_;
  std::shared_ptr<prometheus::Registry> build_info_;
};

// For another civetweb server in the process (the inference endpoint):
// runs `start`, which constructs the server and so starts its threads,
// giving each room on its stack for the process's thread-local storage,
// which civetweb's fixed stack size does not allow for.
void StartCivetweb(const std::function<void()>& start);
// Runs `stop`, which destroys a civetweb server listening at `address`,
// promptly: its listener notices a stop only between 2-second polls, so
// connections to `address` wake it meanwhile.
void StopCivetweb(const std::function<void()>& stop, const std::string& address);

// Answers a civetweb request with `body` (none for HEAD) in one write: a head
// and a body written apart wait out the client's delayed ACK (40 ms on Linux)
// where Nagle is on. `close` adds "Connection: close"; `extra_headers` are
// further header lines, each ending in "\r\n".
void WriteHttpResponse(mg_connection* conn, int code, std::string_view reason,
                       std::string_view content_type, std::string_view body, bool close,
                       std::string_view extra_headers = {});

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_METRICS_HTTP_H_
