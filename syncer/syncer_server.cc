#include "syncer/syncer_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "prometheus/registry.h"

namespace shadowsync::syncer {

absl::StatusOr<std::unique_ptr<SyncerServer>> SyncerServer::Start(SyncerServerOptions options) {
  SS_RETURN_IF_ERROR(GrpcServerProcess::ValidateOptions("syncer", options));
  if (options.service.max_waiting_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("syncer: service.max_waiting_bytes: must be positive, got ",
                     options.service.max_waiting_bytes));
  }
  std::unique_ptr<SyncerServer> server(new SyncerServer());
  SyncerServer& s = *server;
  s.registry_ = std::make_shared<prometheus::Registry>();
  s.metrics_ = std::make_unique<SyncerMetrics>(*s.registry_);
  s.service_ = std::make_unique<SyncerService>(s.metrics_.get(), options.service);
  // The server's Shutdown waits for every open reactor, and a waiting
  // all-reduce round may never complete now: answer them first.
  GrpcServerProcess::Hooks hooks{.before_drain = [&s] { s.service_->Close(); },
                                 .after_stop =
                                     [&s] {
                                       s.service_.reset();
                                       s.metrics_.reset();
                                       LOG(INFO) << "syncer stopped";
                                     }};
  SS_ASSIGN_OR_RETURN(s.process_, GrpcServerProcess::Start("syncer", options, s.service_.get(),
                                                           {s.registry_}, std::move(hooks)));
  s.address_ = s.process_->local_address();
  s.process_->ReportServing(
      absl::StrCat("member_timeout=", absl::FormatDuration(options.service.member_timeout)));
  return server;
}

SyncerServer::~SyncerServer() {
  if (process_ != nullptr) process_->Shutdown();
}

}  // namespace shadowsync::syncer
