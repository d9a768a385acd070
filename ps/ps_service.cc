// PsService (ps/ps_service.h), core: construction, the shard map (install,
// persist, load), request validation, the Executor, and the RPCs that run
// inline on gRPC's threads (Lookup, PushGradients, GetShardMap). The admin
// RPCs are in ps_service_admin.cc, the slot streams in ps_service_streams.cc,
// the metrics in ps_metrics.cc.
#include "ps/ps_service.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shadowsync::ps {
namespace {

using google::protobuf::RepeatedPtrField;

// How far past a server's epoch a SetShardMap may go.
constexpr uint64_t kMaxEpochStep = uint64_t{1} << 20;

// --- Shard map persistence ---------------------------------------------------

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

int64_t TotalIds(const RepeatedPtrField<v1::TableRows>& tables) {
  int64_t n = 0;
  for (const v1::TableRows& t : tables) n += t.ids_size();
  return n;
}

}  // namespace

// --- Executor -----------------------------------------------------------------

Executor::Executor(int threads, int nice) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this, nice] {
      // Linux nice values are per thread. Lowering a thread's priority needs
      // no privilege; failing to only leaves it at the server's.
      if (nice != 0) (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
      Loop();
    });
  }
}

Executor::~Executor() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void Executor::Schedule(std::function<void()> fn) {
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(std::move(fn));
      return;
    }
  }
  fn();  // Draining at destruction: run on the caller rather than drop it.
}

void Executor::Loop() {
  while (true) {
    std::function<void()> fn;
    {
      MutexLock lock(&mu_);
      mu_.Await([this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping_ and drained.
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

// --- Shard map file -----------------------------------------------------------

absl::StatusOr<std::optional<PersistedShardMap>> LoadShardMapFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  std::string data;
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return ErrnoError("cannot read", path);
    }
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  v1::SetShardMapRequest proto;
  if (!proto.ParseFromString(data)) {
    return absl::DataLossError(absl::StrCat("shard map file ", path, " does not parse"));
  }
  auto map = ShardMap::FromProto(proto.map());
  if (!map.ok()) {
    return absl::DataLossError(absl::StrCat("shard map file ", path, ": ", map.status().message()));
  }
  if (proto.self_index() >= static_cast<uint32_t>(map->num_servers())) {
    return absl::DataLossError(absl::StrCat("shard map file ", path, ": self_index ",
                                            proto.self_index(), " out of range"));
  }
  return PersistedShardMap{*std::move(map), proto.self_index()};
}

// --- PsService ----------------------------------------------------------------

PsService::PsService(RowStore* store, PsMetrics* metrics, PsServiceOptions options)
    : store_(store),
      metrics_(metrics),
      options_(std::move(options)),
      num_tables_(static_cast<uint32_t>(store->options().tables.size())),
      dim_(store->options().dim),
      row_floats_(store->options().dim *
                  (1 + model::StateFloatsPerParam(store->options().optimizer.kind))),
      num_slots_(store->options().num_slots),
      export_executor_(options_.export_threads, options_.export_nice),
      executor_(options_.admin_threads) {}

PsService::~PsService() = default;

std::shared_ptr<const ShardMap> PsService::shard_map() const {
  ReaderMutexLock lock(&map_mu_);
  return map_;
}

absl::Status PsService::InstallShardMap(const ShardMap& map, uint32_t self_index) {
  MutexLock install(&install_mu_);
  if (map.num_slots() != num_slots_) {
    return absl::InvalidArgumentError(absl::StrCat("map.num_slots = ", map.num_slots(),
                                                   " but this server has ", num_slots_, " slots"));
  }
  if (self_index >= static_cast<uint32_t>(map.num_servers())) {
    return absl::InvalidArgumentError(absl::StrCat("self_index = ", self_index, " but map has ",
                                                   map.num_servers(), " addresses"));
  }
  std::shared_ptr<const ShardMap> current;
  uint32_t current_self = 0;
  {
    ReaderMutexLock lock(&map_mu_);
    current = map_;
    current_self = self_index_;
  }
  if (current != nullptr && map.epoch() == current->epoch()) {
    if (map == *current && self_index == current_self) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "map.epoch = ", map.epoch(),
        " equals this server's epoch but the map differs; a changed map needs a new epoch"));
  }
  const uint64_t current_epoch = std::max(current ? current->epoch() : 0, store_->epoch());
  if (map.epoch() < current_epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "map.epoch = ", map.epoch(), " is older than this server's epoch ", current_epoch));
  }
  // Every step of a reshard or repair adds one: a far jump is a mistake (or
  // worse) that would leave later maps nowhere to go. A server without a map
  // yet takes the cluster's epoch, whatever it is.
  if (current != nullptr && map.epoch() - current_epoch > kMaxEpochStep) {
    return absl::InvalidArgumentError(absl::StrCat("map.epoch = ", map.epoch(), " is more than ",
                                                   kMaxEpochStep, " past this server's epoch ",
                                                   current_epoch));
  }
  if (!options_.shard_map_path.empty()) {
    v1::SetShardMapRequest persisted;
    *persisted.mutable_map() = map.ToProto();
    persisted.set_self_index(self_index);
    SS_RETURN_IF_ERROR(WriteFileAtomically(options_.shard_map_path, persisted.SerializeAsString()));
  }
  std::vector<bool> owned(num_slots_);
  int owned_count = 0;
  for (uint32_t s = 0; s < num_slots_; ++s) {
    owned[s] = map.owner_of_slot(s) == self_index;
    owned_count += owned[s];
  }
  SS_RETURN_IF_ERROR(store_->SetOwnership(map.epoch(), std::move(owned)));
  {
    MutexLock lock(&map_mu_);
    map_ = std::make_shared<const ShardMap>(map);
    self_index_ = self_index;
  }
  LOG(INFO) << "ps shard map installed epoch=" << map.epoch() << " self=" << self_index
            << " servers=" << map.num_servers() << " slots_owned=" << owned_count;
  return absl::OkStatus();
}

absl::Status PsService::ParseTables(const RepeatedPtrField<v1::TableRows>& tables, bool with_values,
                                    std::vector<model::TableRows>& rows) const {
  // Cheap checks first, so an invalid request costs no copying.
  const int64_t total = TotalIds(tables);
  if (total == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tables: empty batch (", tables.size(), " tables, no ids)"));
  }
  if (total > options_.max_request_rows) {
    return absl::ResourceExhaustedError(absl::StrCat("tables: ", total,
                                                     " ids exceed this server's limit of ",
                                                     options_.max_request_rows, " per request"));
  }
  std::vector<int> first_at(num_tables_, -1);
  for (int i = 0; i < tables.size(); ++i) {
    const v1::TableRows& t = tables[i];
    if (t.table() >= num_tables_) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", i, "].table: unknown table ",
                                                     t.table(), "; this server has ", num_tables_,
                                                     " tables"));
    }
    if (first_at[t.table()] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", i, "].table: table ", t.table(),
                                                     " repeats tables[", first_at[t.table()], "]"));
    }
    first_at[t.table()] = i;
    if (with_values) {
      if (t.values_size() != static_cast<int64_t>(t.ids_size()) * dim_) {
        return absl::InvalidArgumentError(absl::StrCat("tables[", i, "].values: ", t.values_size(),
                                                       " floats for ", t.ids_size(), " ids of dim ",
                                                       dim_));
      }
    } else if (t.values_size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tables[", i, "].values: ", t.values_size(),
                                                     " floats in a lookup request; send ids only"));
    }
  }
  SS_RETURN_IF_ERROR(CheckOwned(tables));
  rows.resize(num_tables_);
  for (const v1::TableRows& t : tables) {
    model::TableRows& r = rows[t.table()];
    r.ids.assign(t.ids().begin(), t.ids().end());
    if (with_values) r.values.assign(t.values().begin(), t.values().end());
  }
  return absl::OkStatus();
}

absl::Status PsService::CheckOwned(const RepeatedPtrField<v1::TableRows>& tables) const {
  std::shared_ptr<const ShardMap> map;
  uint32_t self = 0;
  {
    ReaderMutexLock lock(&map_mu_);
    map = map_;
    self = self_index_;
  }
  if (map == nullptr) return absl::OkStatus();  // The store's ownership decides.
  for (const v1::TableRows& t : tables) {
    for (const uint64_t id : t.ids()) {
      const uint32_t slot = SlotOf(t.table(), id, num_slots_);
      const uint32_t owner = map->owner_of_slot(slot);
      if (owner != self) return WrongOwnerError(slot, map->epoch(), owner);
    }
  }
  return absl::OkStatus();
}

void PsService::Finish(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                       Rpc rpc, Clock::time_point start, const absl::Status& status,
                       int64_t bytes_in, int64_t bytes_out) {
  metrics_->RecordRpc(rpc, Clock::now() - start, status.code(), bytes_in, bytes_out);
  reactor->Finish(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* PsService::Lookup(grpc::CallbackServerContext* context,
                                            const v1::LookupRequest* request,
                                            v1::LookupResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = [&]() -> absl::Status {
    std::vector<model::TableRows> rows;
    SS_RETURN_IF_ERROR(ParseTables(request->tables(), /*with_values=*/false, rows));
    SS_RETURN_IF_ERROR(store_->Lookup(rows));
    response->mutable_tables()->Reserve(request->tables_size());
    for (const v1::TableRows& t : request->tables()) {
      v1::TableRows* out = response->add_tables();
      out->set_table(t.table());
      const std::vector<float>& values = rows[t.table()].values;
      out->mutable_values()->Add(values.begin(), values.end());
    }
    return absl::OkStatus();
  }();
  Finish(context, reactor, Rpc::kLookup, start, status,
         static_cast<int64_t>(request->ByteSizeLong()),
         status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0);
  return reactor;
}

grpc::ServerUnaryReactor* PsService::PushGradients(grpc::CallbackServerContext* context,
                                                   const v1::PushGradientsRequest* request,
                                                   v1::PushGradientsResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = [&]() -> absl::Status {
    std::vector<model::TableRows> rows;
    SS_RETURN_IF_ERROR(ParseTables(request->tables(), /*with_values=*/true, rows));
    SS_RETURN_IF_ERROR(store_->Push(rows));
    response->set_rows_updated(static_cast<uint64_t>(TotalIds(request->tables())));
    return absl::OkStatus();
  }();
  Finish(context, reactor, Rpc::kPushGradients, start, status,
         static_cast<int64_t>(request->ByteSizeLong()),
         status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0);
  return reactor;
}

grpc::ServerUnaryReactor* PsService::GetShardMap(grpc::CallbackServerContext* context,
                                                 const v1::GetShardMapRequest* request,
                                                 v1::ShardMap* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status;
  if (std::shared_ptr<const ShardMap> map = shard_map(); map != nullptr) {
    *response = map->ToProto();
  } else {
    status = absl::FailedPreconditionError("no shard map installed on this server yet");
  }
  Finish(context, reactor, Rpc::kGetShardMap, start, status, 0,
         status.ok() ? static_cast<int64_t>(response->ByteSizeLong()) : 0);
  return reactor;
}

}  // namespace shadowsync::ps
