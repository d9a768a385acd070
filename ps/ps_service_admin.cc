// PsService (ps/ps_service.h), the admin RPCs: SetShardMap, DropSlots,
// Checkpoint and Stats, whose store work runs on the service's executor.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/mutex.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "ps/ps_service.h"
#include "ps/row_store.h"

namespace shadowsync::ps {
namespace {

// `name` under `dir`, or InvalidArgument naming the request's path: the
// caller picks a checkpoint's name, never where the server writes.
absl::StatusOr<std::string> ConfinedPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) {
    return absl::FailedPreconditionError("this server takes no checkpoints (no checkpoint_dir)");
  }
  const std::filesystem::path relative(name);
  if (name.empty() || relative.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "path = \"", name, "\": must name a checkpoint under the server's checkpoint directory"));
  }
  for (const std::filesystem::path& part : relative) {
    if (part == ".." || part == ".") {
      return absl::InvalidArgumentError(
          absl::StrCat("path = \"", name, "\": must not contain '.' or '..'"));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("create ", dir, ": ", ec.message()));
  }
  return (std::filesystem::path(dir) / relative).string();
}

}  // namespace

absl::Status PsService::CheckAdminCall(const grpc::CallbackServerContext& context, Rpc rpc) const {
  if (!options_.require_admin_call || IsAdminCall(context)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(RpcName(rpc),
                   " is an admin RPC: the call must carry the admin token (the operator's or the "
                   "launcher's, --admin-token-file), not the job's auth token"));
}

absl::StatusOr<std::string> PsService::CheckpointPath(const std::string& name) const {
  return ConfinedPath(options_.checkpoint_dir, name);
}

grpc::ServerUnaryReactor* PsService::SetShardMap(grpc::CallbackServerContext* context,
                                                 const v1::SetShardMapRequest* request,
                                                 v1::SetShardMapResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status refused = CheckAdminCall(*context, Rpc::kSetShardMap); !refused.ok()) {
    Finish(context, reactor, Rpc::kSetShardMap, start, refused, 0, 0);
    return reactor;
  }
  // Persisting the map fsyncs: off the gRPC thread.
  executor_.Schedule([this, context, reactor, request, start] {
    absl::Status status;
    if (!request->has_map()) {
      status = absl::InvalidArgumentError("map: missing");
    } else if (auto map = ShardMap::FromProto(request->map()); !map.ok()) {
      status = map.status();
    } else {
      status = InstallShardMap(*map, request->self_index());
    }
    Finish(context, reactor, Rpc::kSetShardMap, start, status,
           static_cast<int64_t>(request->ByteSizeLong()), 0);
  });
  return reactor;
}

grpc::ServerUnaryReactor* PsService::DropSlots(grpc::CallbackServerContext* context,
                                               const v1::DropSlotsRequest* request,
                                               v1::DropSlotsResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status refused = CheckAdminCall(*context, Rpc::kDropSlots); !refused.ok()) {
    Finish(context, reactor, Rpc::kDropSlots, start, refused, 0, 0);
    return reactor;
  }
  executor_.Schedule([this, context, reactor, request, response, start] {
    const absl::Status status = [&]() -> absl::Status {
      if (request->slots().empty()) return absl::InvalidArgumentError("slots: empty");
      const std::shared_ptr<const ShardMap> map = shard_map();
      uint32_t self = 0;
      {
        ReaderMutexLock lock(&map_mu_);
        self = self_index_;
      }
      std::vector<uint32_t> slots;
      for (int i = 0; i < request->slots_size(); ++i) {
        const uint32_t slot = request->slots(i);
        if (slot >= num_slots_) {
          return absl::InvalidArgumentError(absl::StrCat(
              "slots[", i, "] = ", slot, " but this server has ", num_slots_, " slots"));
        }
        if (map != nullptr && map->owner_of_slot(slot) == self) {
          return absl::FailedPreconditionError(
              absl::StrCat("slots[", i, "] = ", slot, " is owned by this server at epoch ",
                           map->epoch(), "; move it away before dropping it"));
        }
        slots.push_back(slot);
      }
      SS_ASSIGN_OR_RETURN(const int64_t dropped, store_->DropSlots(slots));
      response->set_rows_dropped(static_cast<uint64_t>(dropped));
      return absl::OkStatus();
    }();
    Finish(context, reactor, Rpc::kDropSlots, start, status,
           static_cast<int64_t>(request->ByteSizeLong()), 0);
  });
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Checkpoint(grpc::CallbackServerContext* context,
                                                const v1::CheckpointRequest* request,
                                                v1::CheckpointResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status refused = CheckAdminCall(*context, Rpc::kCheckpoint); !refused.ok()) {
    Finish(context, reactor, Rpc::kCheckpoint, start, refused, 0, 0);
    return reactor;
  }
  executor_.Schedule([this, context, reactor, request, response, start] {
    const absl::Status status = [&]() -> absl::Status {
      SS_ASSIGN_OR_RETURN(const std::string path, CheckpointPath(request->path()));
      SS_ASSIGN_OR_RETURN(const int64_t rows, store_->Checkpoint(path));
      response->set_rows(static_cast<uint64_t>(rows));
      response->set_path(path);
      LOG(INFO) << "ps checkpoint path=" << path << " rows=" << rows;
      return absl::OkStatus();
    }();
    Finish(context, reactor, Rpc::kCheckpoint, start, status, 0, 0);
  });
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Stats(grpc::CallbackServerContext* context,
                                           const v1::StatsRequest* request,
                                           v1::StatsResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The checksums scan every row: off the gRPC thread.
  executor_.Schedule([this, context, reactor, response, start] {
    const absl::Status status = [&]() -> absl::Status {
      SS_ASSIGN_OR_RETURN(const RowStore::Checksums sums, store_->ComputeChecksums());
      const RowStoreStats stats = store_->stats();
      const int64_t reads = stats.cache_hits + stats.cache_misses;
      response->set_rows_stored(static_cast<uint64_t>(sums.rows));
      response->set_cached_rows(static_cast<uint64_t>(stats.cached_rows));
      response->set_cache_hit_ratio(
          reads == 0 ? 0.0 : static_cast<double>(stats.cache_hits) / static_cast<double>(reads));
      response->set_slots_owned(stats.slots_owned);
      response->set_epoch(stats.epoch);
      response->set_lookup_rows_total(static_cast<uint64_t>(stats.lookup_rows));
      response->set_push_rows_total(static_cast<uint64_t>(stats.push_rows));
      response->set_admissions_total(static_cast<uint64_t>(stats.admissions));
      response->set_evictions_total(static_cast<uint64_t>(stats.evictions));
      response->set_key_checksum(sums.keys);
      response->set_value_checksum(sums.values);
      return absl::OkStatus();
    }();
    Finish(context, reactor, Rpc::kStats, start, status, 0,
           status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0);
  });
  return reactor;
}

}  // namespace shadowsync::ps
