#include "syncer/syncer_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/metrics_http.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/registry.h"

namespace shadowsync::syncer {

absl::StatusOr<std::unique_ptr<SyncerServer>> SyncerServer::Start(SyncerServerOptions options) {
  std::unique_ptr<SyncerServer> server(new SyncerServer());
  SyncerServer& s = *server;
  options.service.auth_token = options.security.auth_token;
  s.options_ = std::move(options);
  const SyncerServerOptions& opts = s.options_;

  if (absl::Status limits = ValidateServerLimits(opts.limits); !limits.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("syncer: limits.", limits.message()));
  }
  if (opts.service.max_waiting_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("syncer: service.max_waiting_bytes: must be positive, got ",
                     opts.service.max_waiting_bytes));
  }
  s.registry_ = std::make_shared<prometheus::Registry>();
  s.metrics_ = std::make_unique<SyncerMetrics>(*s.registry_);
  s.service_ = std::make_unique<SyncerService>(s.metrics_.get(), opts.service);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(opts.grpc_address, ServerCredentials(opts.security), &s.grpc_port_);
  builder.RegisterService(s.service_.get());
  ApplyServerLimits(opts.limits, builder);
  s.server_ = builder.BuildAndStart();
  // On any error below, ~SyncerServer tears down whatever was started.
  if (s.server_ == nullptr || s.grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("syncer: cannot bind the gRPC address ", opts.grpc_address));
  }
  s.address_ = DialableAddress(opts.grpc_address, s.grpc_port_);

  if (!opts.metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
        MetricsHttpServer::Start(opts.metrics_address);
    if (!http.ok()) {
      return absl::Status(http.status().code(), absl::StrCat("syncer: ", http.status().message()));
    }
    s.http_ = *std::move(http);
    s.metrics_port_ = s.http_->port();
    s.http_->RegisterCollectable(s.registry_);
    s.http_->set_serving(true);
  }
  LOG(INFO) << "syncer listening grpc=" << WithPort(opts.grpc_address, s.grpc_port_) << " metrics="
            << (opts.metrics_address.empty() ? std::string("off")
                                             : WithPort(opts.metrics_address, s.metrics_port_))
            << " member_timeout=" << absl::FormatDuration(opts.service.member_timeout) << " "
            << opts.security.Describe();
  return server;
}

SyncerServer::~SyncerServer() { Shutdown(); }

void SyncerServer::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (stopping_) {
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; });
      return;
    }
    stopping_ = true;
  }
  const bool started = server_ != nullptr;
  if (started) LOG(INFO) << "syncer shutting down: draining RPCs";
  if (http_ != nullptr) http_->set_serving(false);
  // 1. Answer the waiting all-reduce calls: the server's Shutdown waits for
  //    every open reactor, and a round may never complete now.
  if (service_ != nullptr) service_->Close();
  // 2. Stop accepting, let in-flight RPCs finish, cancel stragglers.
  if (server_ != nullptr) {
    server_->Shutdown(DeadlineFromNow(options_.shutdown_grace));
    server_->Wait();
  }
  // 3. The HTTP endpoint, then the service and its metrics.
  http_.reset();
  server_.reset();
  service_.reset();
  metrics_.reset();
  if (started) LOG(INFO) << "syncer stopped";
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
}

void SyncerServer::Wait() {
  MutexLock lock(&mu_);
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; });
}

}  // namespace shadowsync::syncer
