#include "common/grpc_server_process.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metrics_http.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"

namespace shadowsync {

absl::Status GrpcServerProcess::ValidateOptions(const std::string& name,
                                                const GrpcServerProcessOptions& options) {
  if (absl::Status limits = ValidateServerLimits(options.limits); !limits.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": limits.", limits.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GrpcServerProcess>> GrpcServerProcess::Start(
    std::string name, GrpcServerProcessOptions options, grpc::Service* service,
    const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables, Hooks hooks) {
  if (absl::Status valid = ValidateOptions(name, options); !valid.ok()) return valid;
  std::unique_ptr<GrpcServerProcess> process(new GrpcServerProcess());
  GrpcServerProcess& p = *process;
  p.name_ = std::move(name);
  p.options_ = std::move(options);
  const GrpcServerProcessOptions& opts = p.options_;

  grpc::ServerBuilder builder;
  builder.AddListeningPort(opts.grpc_address, ServerCredentials(opts.security), &p.grpc_port_);
  builder.RegisterService(service);
  ApplyServerLimits(opts.limits, builder);
  p.server_ = builder.BuildAndStart();
  // On any error below, the destructor tears down whatever was started; the
  // hooks run only for a process that started fully.
  if (p.server_ == nullptr || p.grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat(p.name_, ": cannot bind the gRPC address ", opts.grpc_address));
  }
  if (!opts.metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
        MetricsHttpServer::Start(opts.metrics_address);
    if (!http.ok()) {
      return absl::Status(http.status().code(),
                          absl::StrCat(p.name_, ": ", http.status().message()));
    }
    p.http_ = *std::move(http);
    p.metrics_port_ = p.http_->port();
    for (const std::weak_ptr<prometheus::Collectable>& c : collectables) {
      p.http_->RegisterCollectable(c);
    }
    if (hooks.health) p.http_->SetHealthCheck(hooks.health);
  }
  p.hooks_ = std::move(hooks);
  p.started_ = true;
  return process;
}

GrpcServerProcess::~GrpcServerProcess() { Shutdown(); }

std::string GrpcServerProcess::local_address() const {
  return DialableAddress(options_.grpc_address, grpc_port_);
}

void GrpcServerProcess::ReportServing(const std::string& details) {
  if (http_ != nullptr) http_->set_serving(true);
  LOG(INFO) << name_ << " listening grpc=" << WithPort(options_.grpc_address, grpc_port_)
            << " metrics="
            << (options_.metrics_address.empty()
                    ? std::string("off")
                    : WithPort(options_.metrics_address, metrics_port_))
            << (details.empty() ? "" : " ") << details << " " << options_.security.Describe();
}

void GrpcServerProcess::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (stopping_) {
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; });
      return;
    }
    stopping_ = true;
  }
  if (started_) LOG(INFO) << name_ << " shutting down: draining RPCs";
  if (http_ != nullptr) http_->set_serving(false);
  if (hooks_.before_drain) hooks_.before_drain();
  // Stop accepting, let in-flight RPCs finish, cancel stragglers at the
  // deadline. The service keeps running meanwhile, so that they can.
  if (server_ != nullptr) {
    server_->Shutdown(DeadlineFromNow(options_.shutdown_grace));
    server_->Wait();
  }
  // The HTTP endpoint reads the owner's metrics and state: gone before they are.
  http_.reset();
  server_.reset();
  if (hooks_.after_stop) hooks_.after_stop();
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
}

void GrpcServerProcess::Wait() {
  MutexLock lock(&mu_);
  mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; });
}

}  // namespace shadowsync
