#include "common/metrics_http.h"

#include <dlfcn.h>
#include <link.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "CivetServer.h"
#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "civetweb.h"
#include "common/grpc_util.h"
#include "common/mutex.h"
#include "common/version.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace shadowsync {
namespace {

// civetweb starts its threads with a stack size fixed when it was built (100 KB
// in Debian's package; it has no setting for it), and glibc carves each new
// thread's static thread-local storage (that of every library loaded at
// start) out of the stack it is given. In `shadowsync` that is over 90 KB,
// OpenBLAS's 60 KB and glog's 30 KB (its per-thread message buffer), which
// left civetweb's threads too little stack: they overflowed as they started.
// While this is set, on the thread constructing civetweb's server (which
// starts every civetweb thread there), pthread_attr_setstacksize below gives
// each the storage on top of the stack civetweb asks for.
thread_local bool t_starting_civetweb = false;

// The static thread-local storage of a new thread: the TLS segments of the
// loaded objects.
size_t StaticTlsBytes() {
  size_t bytes = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = info->dlpi_phdr[i];
          if (segment.p_type != PT_TLS) continue;
          const size_t align = std::max<size_t>(segment.p_align, 1);
          *static_cast<size_t*>(data) += (segment.p_memsz + align - 1) / align * align;
        }
        return 0;
      },
      &bytes);
  return bytes;
}

}  // namespace
}  // namespace shadowsync

// The dynamic linker binds civetweb's call to this definition in the
// executable before libc's. Outside MetricsHttpServer::Start's construction
// of the server, it is libc's.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn libc = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (shadowsync::t_starting_civetweb) size += shadowsync::StaticTlsBytes();
  return libc(attr, size);
}

namespace shadowsync {

struct MetricsHttpServer::HealthState {
  std::atomic<bool> serving{false};
  std::atomic<bool> ready{true};
  Mutex mu;
  std::function<absl::Status()> check ABSL_GUARDED_BY(mu);
  // What /metrics exposes.
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables ABSL_GUARDED_BY(mu);

  // The text exposition of every live collectable.
  std::string Metrics() ABSL_LOCKS_EXCLUDED(mu) {
    std::vector<std::shared_ptr<prometheus::Collectable>> live;
    {
      MutexLock lock(&mu);
      for (const auto& weak : collectables) {
        if (auto c = weak.lock()) live.push_back(std::move(c));
      }
    }
    std::vector<prometheus::MetricFamily> families;
    for (const auto& c : live) {
      std::vector<prometheus::MetricFamily> f = c->Collect();
      families.insert(families.end(), std::make_move_iterator(f.begin()),
                      std::make_move_iterator(f.end()));
    }
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    return std::move(out).str();
  }

  absl::Status Check() ABSL_LOCKS_EXCLUDED(mu) {
    std::function<absl::Status()> copy;
    {
      MutexLock lock(&mu);
      copy = check;
    }
    return copy ? copy() : absl::OkStatus();
  }
};

namespace {

using HealthState = MetricsHttpServer::HealthState;

// The health of every endpoint in the process, keyed by HTTP port: civetweb's
// begin_request callback is a plain function without a user pointer, so it
// finds its server's state by the port the request arrived on.
class HealthRegistry {
 public:
  static HealthRegistry& Get() {
    static auto* registry = new HealthRegistry();  // Never destroyed: used by HTTP threads.
    return *registry;
  }
  void Register(int port, std::shared_ptr<HealthState> state) {
    MutexLock lock(&mu_);
    by_port_[port] = std::move(state);
  }
  void Unregister(int port) {
    MutexLock lock(&mu_);
    by_port_.erase(port);
  }
  // Null for an unknown port.
  std::shared_ptr<HealthState> Find(int port) {
    ReaderMutexLock lock(&mu_);
    auto it = by_port_.find(port);
    return it == by_port_.end() ? nullptr : it->second;
  }

 private:
  Mutex mu_;
  absl::flat_hash_map<int, std::shared_ptr<HealthState>> by_port_ ABSL_GUARDED_BY(mu_);
};

// The answer to /healthz, /readyz or /livez from `state` (null: the server
// is gone), as a code and a body.
std::pair<int, std::string> Probe(std::string_view uri, HealthState* state) {
  if (state == nullptr) return {503, "not serving\n"};
  if (absl::Status health = state->Check(); !health.ok()) {
    return {503, absl::StrCat("failed: ", health.message(), "\n")};
  }
  const bool up =
      uri == "/livez" || (state->serving.load(std::memory_order_acquire) &&
                          (uri == "/healthz" || state->ready.load(std::memory_order_acquire)));
  return up ? std::pair<int, std::string>{200, "ok\n"}
            : std::pair<int, std::string>{503, "not serving\n"};
}

// Answers /metrics, /healthz, /readyz and /livez itself, each response
// saying "Connection: close": civetweb closes every connection after one
// response (keep-alive is off, so that an idle client cannot hold one of its
// two threads), and prometheus-cpp's own /metrics handler does not say so,
// which makes a client that reuses connections fail its next request on
// the closed socket.
int HandleRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr) return 0;
  const std::string_view uri = info->local_uri;
  const bool metrics = uri == "/metrics";
  if (!metrics && uri != "/healthz" && uri != "/readyz" && uri != "/livez") return 0;
  const std::shared_ptr<HealthState> state = HealthRegistry::Get().Find(info->server_port);
  auto [code, body] = metrics ? std::pair<int, std::string>{200, state ? state->Metrics() : ""}
                              : Probe(uri, state.get());
  const char* type = metrics ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain";
  WriteHttpResponse(conn, code, code == 200 ? "OK" : "Service Unavailable", type, body,
                    /*close=*/true);
  return code;
}

}  // namespace

void WriteHttpResponse(mg_connection* conn, int code, std::string_view reason,
                       std::string_view content_type, std::string_view body, bool close,
                       std::string_view extra_headers) {
  std::string response = absl::StrCat("HTTP/1.1 ", code, " ");
  response.append(reason).append("\r\nContent-Type: ").append(content_type);
  absl::StrAppend(&response, "\r\nContent-Length: ", body.size(), "\r\nCache-Control: no-store\r\n",
                  close ? "Connection: close\r\n" : "");
  response.append(extra_headers).append("\r\n");
  if (std::string_view(mg_get_request_info(conn)->request_method) != "HEAD") response += body;
  mg_write(conn, response.data(), response.size());
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address) {
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->address_ = address;
  server->health_ = std::make_shared<HealthState>();
  CivetCallbacks callbacks;
  callbacks.begin_request = &HandleRequest;
  try {
    StartCivetweb(
        [&] { server->exposer_ = std::make_unique<prometheus::Exposer>(address, 2, &callbacks); });
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the metrics address ", address, ": ", e.what()));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  server->build_info_ = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("shadowsync_build_info")
      .Help("1, labelled with the ShadowSync release this process runs.")
      .Register(*server->build_info_)
      .Add({{"version", std::string(kReleaseVersion)}})
      .Set(1);
  server->RegisterCollectable(server->build_info_);
  HealthRegistry::Get().Register(server->port_, server->health_);
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (exposer_ == nullptr) return;
  set_serving(false);
  HealthRegistry::Get().Unregister(port_);
  StopCivetweb([this] { exposer_.reset(); }, DialableAddress(address_, port_));
}

void MetricsHttpServer::set_serving(bool serving) {
  health_->serving.store(serving, std::memory_order_release);
}

void MetricsHttpServer::set_ready(bool ready) {
  health_->ready.store(ready, std::memory_order_release);
}

void MetricsHttpServer::SetHealthCheck(std::function<absl::Status()> check) {
  MutexLock lock(&health_->mu);
  health_->check = std::move(check);
}

void MetricsHttpServer::RegisterCollectable(
    const std::weak_ptr<prometheus::Collectable>& collectable) {
  MutexLock lock(&health_->mu);
  health_->collectables.push_back(collectable);
}

void MetricsHttpServer::RemoveCollectable(
    const std::weak_ptr<prometheus::Collectable>& collectable) {
  MutexLock lock(&health_->mu);
  auto& list = health_->collectables;
  // Equal owners: the same object, even once it is gone.
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const std::weak_ptr<prometheus::Collectable>& c) {
                              return !c.owner_before(collectable) && !collectable.owner_before(c);
                            }),
             list.end());
}

void StartCivetweb(const std::function<void()>& start) {
  t_starting_civetweb = true;
  absl::Cleanup started = [] { t_starting_civetweb = false; };
  start();
}

void StopCivetweb(const std::function<void()>& stop, const std::string& address) {
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
  stop();
  stopped.store(true, std::memory_order_release);
  waker.join();
}

}  // namespace shadowsync
