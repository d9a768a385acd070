#include "ps/ps_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "prometheus/registry.h"

namespace shadowsync::ps {

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(PsServerOptions options) {
  std::unique_ptr<PsServer> server(new PsServer());
  PsServer& s = *server;
  if (options.service.shard_map_path.empty()) {
    options.service.shard_map_path = options.store.db_path + "/SHADOWSYNC_SHARD_MAP";
  }
  if (options.service.checkpoint_dir.empty()) {
    options.service.checkpoint_dir = options.store.db_path + "/checkpoints";
  }
  // The admin token is what tells the operator's and launcher's calls apart.
  if (options.security.has_admin_token()) options.service.require_admin_call = true;
  s.options_ = std::move(options);
  const PsServerOptions& opts = s.options_;

  SS_RETURN_IF_ERROR(GrpcServerProcess::ValidateOptions("ps", opts));
  if (opts.service.max_import_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps: service.max_import_bytes: must be positive, got ", opts.service.max_import_bytes));
  }
  LOG(INFO) << absl::StrFormat("ps opening store db=%s dim=%d tables=%d slots=%d",
                               opts.store.db_path, opts.store.dim, opts.store.tables.size(),
                               opts.store.num_slots);
  SS_ASSIGN_OR_RETURN(s.store_, RowStore::Open(opts.store));
  SS_ASSIGN_OR_RETURN(std::optional<PersistedShardMap> persisted,
                      LoadShardMapFile(opts.service.shard_map_path));

  s.registry_ = std::make_shared<prometheus::Registry>();
  s.metrics_ = std::make_unique<PsMetrics>(*s.registry_);
  s.store_collectable_ = PsMetrics::StoreCollectable(s.store_.get());
  s.service_ = std::make_unique<PsService>(s.store_.get(), s.metrics_.get(), opts.service);

  SS_ASSIGN_OR_RETURN(
      s.process_,
      GrpcServerProcess::Start("ps", opts, s.service_.get(), {s.registry_, s.store_collectable_},
                               {.health = [&s] { return s.store_->health(); },
                                .before_drain = [&s] { s.StopEviction(); },
                                .after_stop = [&s] { s.Close(); }}));
  // On any error below, ~PsServer tears down whatever was started.
  s.advertise_address_ =
      opts.advertise_address.empty() ? s.process_->local_address() : opts.advertise_address;

  // The shard map: the persisted one, else the initial one for a store that
  // has none or an older one. The persisted map's own address is refreshed,
  // since a restart may bind a new port, unless this server binds every
  // interface and advertises nothing: then the persisted entry (a pod's DNS
  // name, say) is what others dial, and 127.0.0.1 would send them to themselves.
  absl::Status installed;
  if (persisted.has_value() && persisted->map.epoch() >= s.store_->epoch()) {
    v1::ShardMap proto = persisted->map.ToProto();
    if (!opts.advertise_address.empty() || !IsWildcardAddress(opts.grpc_address)) {
      proto.set_addresses(static_cast<int>(persisted->self_index), s.advertise_address_);
    }
    SS_ASSIGN_OR_RETURN(ShardMap map, ShardMap::FromProto(proto));
    LOG(INFO) << "ps using the persisted shard map epoch=" << map.epoch()
              << " self=" << persisted->self_index;
    installed = s.service_->InstallShardMap(map, persisted->self_index);
  } else if (opts.join) {
    LOG(INFO) << "ps joining: owns no slot until a SetShardMap assigns some";
    installed =
        s.store_->SetOwnership(s.store_->epoch(), std::vector<bool>(opts.store.num_slots, false));
  } else {
    std::vector<std::string> peers = opts.peers;
    if (peers.empty()) peers.push_back(s.advertise_address_);
    const ShardMap initial = ShardMap::Balanced(opts.store.num_slots, peers, /*epoch=*/1);
    if (initial.epoch() >= s.store_->epoch()) {
      installed = s.service_->InstallShardMap(initial, opts.self_index);
    } else {
      LOG(INFO) << "ps serving the stored ownership of epoch " << s.store_->epoch()
                << " without a shard map until SetShardMap";
    }
  }
  SS_RETURN_IF_ERROR(installed);

  if (opts.eviction_interval > absl::ZeroDuration()) {
    s.eviction_thread_ = std::thread([&s] { s.EvictionLoop(); });
  }
  s.process_->ReportServing(absl::StrCat("advertise=", s.advertise_address_));
  return server;
}

PsServer::~PsServer() {
  if (process_ != nullptr) process_->Shutdown();
}

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
      LOG(WARNING) << "ps eviction failed: " << evicted.status();
    } else if (*evicted > 0) {
      VLOG(1) << "ps evicted rows=" << *evicted;
    }
  }
}

void PsServer::StopEviction() {
  MutexLock lock(&mu_);
  stopping_ = true;
}

void PsServer::Close() {
  StopEviction();
  if (eviction_thread_.joinable()) eviction_thread_.join();
  // The service drains its executors, which use the store.
  service_.reset();
  store_.reset();
  LOG(INFO) << "ps stopped: store closed";
}

}  // namespace shadowsync::ps
