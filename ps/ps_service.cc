#include "ps/ps_service.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "prometheus/metric_family.h"
#include "shadowsync/v1/packed_rows.h"

namespace shadowsync::ps {
namespace {

using google::protobuf::RepeatedPtrField;

// --- Metrics -----------------------------------------------------------------
//
// Every metric of the parameter server, declared once. To add one:
//   1. add a row here (name with the shadowsync_ps_ prefix, base units,
//      counters ending in _total);
//   2. store-sourced metrics: give the row a `from_stats` reader, nothing
//      else to do; service-side metrics: cache its handle in PsMetrics.
//   3. add the panel to deploy/ dashboards.
struct MetricDef {
  const char* name;
  const char* help;
  prometheus::MetricType type;
  // Reads the value from the store's stats; null for service-side metrics.
  double (*from_stats)(const RowStoreStats&);
};

constexpr int kLatencyMetric = 0;
constexpr int kErrorsMetric = 1;
constexpr int kBytesInMetric = 2;
constexpr int kBytesOutMetric = 3;
constexpr int kImportStagedMetric = 4;

constexpr MetricDef kMetrics[] = {
    // Service-side; indices above.
    {"shadowsync_ps_request_duration_seconds", "Latency of each RPC, by rpc.",
     prometheus::MetricType::Histogram, nullptr},
    {"shadowsync_ps_errors_total", "RPCs that failed, by rpc and gRPC status code.",
     prometheus::MetricType::Counter, nullptr},
    {"shadowsync_ps_bytes_in_total", "Request payload bytes received.",
     prometheus::MetricType::Counter, nullptr},
    {"shadowsync_ps_bytes_out_total", "Response payload bytes sent.",
     prometheus::MetricType::Counter, nullptr},
    {"shadowsync_ps_import_staged_bytes",
     "Row bytes the open ImportSlots streams hold staged (bounded by max_import_bytes).",
     prometheus::MetricType::Gauge, nullptr},
    // From RowStore::stats() at scrape time.
    {"shadowsync_ps_rows_stored", "Embedding rows stored.", prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) { return static_cast<double>(s.rows_stored); }},
    {"shadowsync_ps_cached_rows", "Rows held in the RAM cache.", prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) { return static_cast<double>(s.cached_rows); }},
    {"shadowsync_ps_cache_hit_ratio", "Cache hits / (hits + misses) since start.",
     prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) {
       const double total = static_cast<double>(s.cache_hits + s.cache_misses);
       return total == 0 ? 0.0 : static_cast<double>(s.cache_hits) / total;
     }},
    {"shadowsync_ps_cache_hits_total", "Row reads served by the RAM cache.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.cache_hits); }},
    {"shadowsync_ps_cache_misses_total", "Row reads that went to RocksDB.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.cache_misses); }},
    {"shadowsync_ps_lookup_rows_total", "Rows looked up.", prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.lookup_rows); }},
    {"shadowsync_ps_push_rows_total", "Rows updated by pushed gradients.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.push_rows); }},
    {"shadowsync_ps_admissions_total", "Rows admitted to storage.", prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.admissions); }},
    {"shadowsync_ps_admission_rejects_total", "Pushes to rows not (yet) admitted.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.admission_rejects); }},
    {"shadowsync_ps_evictions_total", "Rows evicted by TTL or the row cap.",
     prometheus::MetricType::Counter,
     [](const RowStoreStats& s) { return static_cast<double>(s.evictions); }},
    {"shadowsync_ps_slots_owned", "Hash slots this server owns.", prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) { return static_cast<double>(s.slots_owned); }},
    {"shadowsync_ps_shard_map_epoch", "Epoch of the shard map this server follows.",
     prometheus::MetricType::Gauge,
     [](const RowStoreStats& s) { return static_cast<double>(s.epoch); }},
};

// Keep in step with enum class Rpc.
constexpr const char* kRpcNames[kNumRpcs] = {
    "Lookup",      "PushGradients", "GetShardMap", "SetShardMap", "ExportSlots",
    "ImportSlots", "DropSlots",     "Checkpoint",  "Stats",
};

// 50us .. 10s, roughly 2.5x apart.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0};
  return *buckets;
}

class StoreCollectableImpl final : public prometheus::Collectable {
 public:
  explicit StoreCollectableImpl(const RowStore* store) : store_(store) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const RowStoreStats stats = store_->stats();
    std::vector<prometheus::MetricFamily> families;
    for (const MetricDef& def : kMetrics) {
      if (def.from_stats == nullptr) continue;
      prometheus::MetricFamily family;
      family.name = def.name;
      family.help = def.help;
      family.type = def.type;
      prometheus::ClientMetric metric;
      const double value = def.from_stats(stats);
      if (def.type == prometheus::MetricType::Counter) {
        metric.counter.value = value;
      } else {
        metric.gauge.value = value;
      }
      family.metric.push_back(std::move(metric));
      families.push_back(std::move(family));
    }
    return families;
  }

 private:
  const RowStore* const store_;
};

// --- Shard map persistence ---------------------------------------------------

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Writes atomically: temp file, fsync, rename, fsync of the directory.
absl::Status WriteFileDurably(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return ErrnoError("cannot write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return ErrnoError("cannot fsync", tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("cannot rename to", path);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

int64_t TotalIds(const RepeatedPtrField<v1::TableRows>& tables) {
  int64_t n = 0;
  for (const v1::TableRows& t : tables) n += t.ids_size();
  return n;
}

}  // namespace

const char* RpcName(Rpc rpc) { return kRpcNames[static_cast<int>(rpc)]; }

// --- PsMetrics ----------------------------------------------------------------

PsMetrics::PsMetrics(prometheus::Registry& registry) {
  latency_family_ = &prometheus::BuildHistogram()
                         .Name(kMetrics[kLatencyMetric].name)
                         .Help(kMetrics[kLatencyMetric].help)
                         .Register(registry);
  errors_family_ = &prometheus::BuildCounter()
                        .Name(kMetrics[kErrorsMetric].name)
                        .Help(kMetrics[kErrorsMetric].help)
                        .Register(registry);
  bytes_in_ = &prometheus::BuildCounter()
                   .Name(kMetrics[kBytesInMetric].name)
                   .Help(kMetrics[kBytesInMetric].help)
                   .Register(registry)
                   .Add({});
  bytes_out_ = &prometheus::BuildCounter()
                    .Name(kMetrics[kBytesOutMetric].name)
                    .Help(kMetrics[kBytesOutMetric].help)
                    .Register(registry)
                    .Add({});
  import_staged_ = &prometheus::BuildGauge()
                        .Name(kMetrics[kImportStagedMetric].name)
                        .Help(kMetrics[kImportStagedMetric].help)
                        .Register(registry)
                        .Add({});
  for (int r = 0; r < kNumRpcs; ++r) {
    latency_[r] = &latency_family_->Add({{"rpc", kRpcNames[r]}}, LatencyBuckets());
    for (auto& counter : errors_[r]) counter.store(nullptr, std::memory_order_relaxed);
  }
}

prometheus::Counter& PsMetrics::ErrorCounter(Rpc rpc, absl::StatusCode code) {
  const int c = static_cast<int>(code);
  const int index = c >= 0 && c < kNumCodes ? c : static_cast<int>(absl::StatusCode::kUnknown);
  std::atomic<prometheus::Counter*>& slot = errors_[static_cast<int>(rpc)][index];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add returns the existing counter for the same labels, so racing
    // first errors agree on one handle.
    counter = &errors_family_->Add(
        {{"rpc", RpcName(rpc)},
         {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(index))}});
    slot.store(counter, std::memory_order_release);
  }
  return *counter;
}

void PsMetrics::RecordRpc(Rpc rpc, std::chrono::steady_clock::duration latency,
                          absl::StatusCode code, int64_t bytes_in, int64_t bytes_out) {
  latency_[static_cast<int>(rpc)]->Observe(std::chrono::duration<double>(latency).count());
  if (code != absl::StatusCode::kOk) ErrorCounter(rpc, code).Increment();
  if (bytes_in > 0) AddBytesIn(bytes_in);
  if (bytes_out > 0) AddBytesOut(bytes_out);
}

std::shared_ptr<prometheus::Collectable> PsMetrics::StoreCollectable(const RowStore* store) {
  return std::make_shared<StoreCollectableImpl>(store);
}

std::vector<std::string> PsMetrics::MetricNames() {
  std::vector<std::string> names;
  for (const MetricDef& def : kMetrics) names.emplace_back(def.name);
  return names;
}

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
  if (!options_.shard_map_path.empty()) {
    v1::SetShardMapRequest persisted;
    *persisted.mutable_map() = map.ToProto();
    persisted.set_self_index(self_index);
    SS_RETURN_IF_ERROR(WriteFileDurably(options_.shard_map_path, persisted.SerializeAsString()));
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
  std::cerr << absl::StrFormat(
      "ps shard map installed epoch=%d self=%d servers=%d slots_owned=%d\n", map.epoch(),
      self_index, map.num_servers(), owned_count);
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

int64_t PsService::ChargeImportStaging(int64_t delta) {
  MutexLock lock(&import_mu_);  // So the gauge is set in the order of the updates.
  import_staged_bytes_ += delta;
  metrics_->SetImportStaged(import_staged_bytes_);
  return import_staged_bytes_;
}

RowBlock PsService::TakeImportBlock() {
  MutexLock lock(&import_mu_);
  ++import_streams_;
  if (import_blocks_.empty()) return RowBlock();
  RowBlock block = std::move(import_blocks_.back());
  import_blocks_.pop_back();
  return block;
}

void PsService::ReturnImportBlock(RowBlock block) {
  // As many as the streams that run at once, typically; more are freed.
  constexpr size_t kKeptBlocks = 4;
  block.Clear();
  std::vector<RowBlock> freed;  // outside the lock
  MutexLock lock(&import_mu_);
  if (--import_streams_ == 0) {
    freed.swap(import_blocks_);
  } else if (import_blocks_.size() < kKeptBlocks) {
    import_blocks_.push_back(std::move(block));
  }
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
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    Finish(context, reactor, Rpc::kLookup, start, auth, 0, 0);
    return reactor;
  }
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
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    Finish(context, reactor, Rpc::kPushGradients, start, auth, 0, 0);
    return reactor;
  }
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
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    Finish(context, reactor, Rpc::kGetShardMap, start, auth, 0, 0);
    return reactor;
  }
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

grpc::ServerUnaryReactor* PsService::SetShardMap(grpc::CallbackServerContext* context,
                                                 const v1::SetShardMapRequest* request,
                                                 v1::SetShardMapResponse* response) {
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    Finish(context, reactor, Rpc::kSetShardMap, start, auth, 0, 0);
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
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    Finish(context, reactor, Rpc::kDropSlots, start, auth, 0, 0);
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
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    Finish(context, reactor, Rpc::kCheckpoint, start, auth, 0, 0);
    return reactor;
  }
  executor_.Schedule([this, context, reactor, request, response, start] {
    const absl::Status status = [&]() -> absl::Status {
      if (request->path().empty()) return absl::InvalidArgumentError("path: empty");
      SS_ASSIGN_OR_RETURN(const int64_t rows, store_->Checkpoint(request->path()));
      response->set_rows(static_cast<uint64_t>(rows));
      std::cerr << absl::StrFormat("ps checkpoint path=%s rows=%d\n", request->path(), rows);
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
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    Finish(context, reactor, Rpc::kStats, start, auth, 0, 0);
    return reactor;
  }
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

// --- ExportSlots ----------------------------------------------------------------

// Takes one snapshot of the store on the executor, then, on the low-priority
// export executor, reads one slot at a time from it, writes its chunks one
// by one, then the next slot; a single operation is outstanding at any time.
// Every StartWrite (which serialises the chunk) runs on the export executor
// too, so the stream's whole cost on this server is low-priority CPU, not
// the CPU that lookups and pushes need. The snapshot is taken at normal
// priority: it holds the store's write lock while it flushes cached rows.
// The stream is the store at one moment, however long the client takes to
// read it. Finish (or StartWriteAndFinish) is always the reactor's last
// touch of itself: OnDone may delete it on another thread right after.
class PsService::ExportReactor final : public grpc::ServerWriteReactor<v1::SlotChunk> {
 public:
  ExportReactor(PsService* service, std::vector<uint32_t> slots, bool weights_only, bool packed)
      : service_(service), slots_(std::move(slots)), weights_only_(weights_only), packed_(packed) {}

  void Start() {
    service_->executor_.Schedule([this] {
      absl::StatusOr<std::unique_ptr<RowStore::Snapshot>> snapshot =
          service_->store_->TakeSnapshot();
      if (!snapshot.ok()) {
        Done(snapshot.status());
        return;
      }
      snapshot_ = *std::move(snapshot);
      service_->export_executor_.Schedule([this] { LoadNext(); });
    });
  }

  // For a request that failed validation.
  void FinishNow(const absl::Status& status) { Done(status); }

  void OnWriteDone(bool ok) override {
    // Pairs with the lock around StartWrite: whatever gRPC read of the chunk
    // inside StartWrite happens before we touch the chunks again.
    { std::lock_guard<std::recursive_mutex> handoff(handoff_); }
    if (!ok) {
      Done(absl::CancelledError("ExportSlots: the client stopped reading"));
      return;
    }
    const v1::SlotChunk* next = nullptr;
    {
      MutexLock lock(&mu_);
      // Serialising the chunk in StartWrite computed its size.
      bytes_out_ += static_cast<int64_t>(chunks_[next_chunk_]->GetCachedSize());
      if (++next_chunk_ < loaded_) next = chunks_[next_chunk_].get();
    }
    if (next != nullptr) {
      service_->export_executor_.Schedule([this, next] { Write(next); });
    } else {
      service_->export_executor_.Schedule([this] { LoadNext(); });
    }
  }

  void OnCancel() override {
    MutexLock lock(&mu_);
    cancelled_ = true;
  }

  void OnDone() override { delete this; }

 private:
  // Export executor thread; no write is outstanding, so the chunks are ours.
  void LoadNext() {
    const int chunk_rows = std::max(1, service_->options_.export_chunk_rows);
    const int row_floats = weights_only_ ? service_->dim_ : service_->row_floats_;
    const size_t row_bytes = static_cast<size_t>(row_floats) * sizeof(float);
    const size_t packed_row_bytes = v1::PackedRowBytes(row_floats);
    while (true) {
      uint32_t slot;
      {
        MutexLock lock(&mu_);
        if (cancelled_) break;
        if (next_slot_ == slots_.size()) break;
        slot = slots_[next_slot_++];
      }
      // Chunk objects are reused from slot to slot (Clear keeps the rows'
      // storage), so a row costs a copy, not allocations.
      size_t loaded = 0;
      int64_t rows = 0;
      uint64_t checksum = 0;
      v1::SlotChunk* chunk = nullptr;
      int in_chunk = 0;
      const absl::Status status = snapshot_->ExportSlotBytes(
          slot, [&](uint32_t table, uint64_t id, std::string_view values) -> absl::Status {
            if (chunk == nullptr || in_chunk >= chunk_rows) {
              if (loaded == chunks_.size()) chunks_.push_back(std::make_unique<v1::SlotChunk>());
              chunk = chunks_[loaded++].get();
              chunk->Clear();
              chunk->set_slot(slot);
              if (packed_) chunk->mutable_packed_rows()->reserve(chunk_rows * packed_row_bytes);
              in_chunk = 0;
            }
            ++in_chunk;
            ++rows;
            if (packed_) {  // checked by a CRC per chunk, below
              v1::AppendPackedRow(chunk->mutable_packed_rows(), table, id,
                                  values.substr(0, row_bytes));
              return absl::OkStatus();
            }
            v1::SlotRow* out = chunk->add_rows();
            out->set_table(table);
            out->set_id(id);
            google::protobuf::RepeatedField<float>* floats = out->mutable_values();
            floats->Reserve(row_floats);
            std::memcpy(floats->AddNAlreadyReserved(row_floats), values.data(), row_bytes);
            checksum += RowValueHash(table, id, std::span<const float>(floats->data(), row_floats));
            return absl::OkStatus();
          });
      if (!status.ok()) {
        Done(status);
        return;
      }
      if (loaded == 0) continue;
      if (packed_) {
        for (size_t c = 0; c < loaded; ++c) {
          chunks_[c]->set_packed_crc32(v1::PackedRowsCrc(chunks_[c]->packed_rows()));
          checksum += chunks_[c]->packed_crc32();
        }
      }
      {
        MutexLock lock(&mu_);
        total_rows_ += rows;
        checksum_ += checksum;
        loaded_ = loaded;
        next_chunk_ = 0;
      }
      Write(chunks_[0].get());
      return;
    }
    bool cancelled;
    {
      MutexLock lock(&mu_);
      cancelled = cancelled_;
      done_chunk_.set_done(true);
      done_chunk_.set_total_rows(static_cast<uint64_t>(total_rows_));
      done_chunk_.set_checksum(checksum_);
    }
    if (cancelled) {
      Done(absl::CancelledError("ExportSlots: cancelled by the client"));
      return;
    }
    int64_t bytes_out;
    {
      MutexLock lock(&mu_);
      bytes_out_ += static_cast<int64_t>(done_chunk_.ByteSizeLong());
      bytes_out = bytes_out_;
    }
    service_->metrics_->RecordRpc(Rpc::kExportSlots, Clock::now() - start_, absl::StatusCode::kOk,
                                  0, bytes_out);
    StartWriteAndFinish(&done_chunk_, grpc::WriteOptions(), grpc::Status::OK);
  }

  // StartWrite under handoff_. gRPC serialises the chunk inside StartWrite,
  // possibly on our executor thread, and signals completion through its own
  // (for ThreadSanitizer uninstrumented) internals; the lock makes that
  // ordering explicit. Recursive in case gRPC runs OnWriteDone inline.
  void Write(const v1::SlotChunk* chunk) {
    std::lock_guard<std::recursive_mutex> handoff(handoff_);
    StartWrite(chunk);
  }

  void Done(const absl::Status& status) {
    int64_t bytes_out;
    {
      MutexLock lock(&mu_);
      bytes_out = bytes_out_;
    }
    service_->metrics_->RecordRpc(Rpc::kExportSlots, Clock::now() - start_, status.code(), 0,
                                  bytes_out);
    Finish(ToGrpcStatus(status));
  }

  PsService* const service_;
  const std::vector<uint32_t> slots_;
  const bool weights_only_;
  const bool packed_;
  const Clock::time_point start_ = Clock::now();
  // Set by Start's executor task before any LoadNext; then only the export
  // executor touches it, one LoadNext at a time.
  std::unique_ptr<RowStore::Snapshot> snapshot_;
  // The loaded slot's chunks are chunks_[0, loaded_); written one at a time
  // while LoadNext is not running, refilled by LoadNext while no write is.
  std::vector<std::unique_ptr<v1::SlotChunk>> chunks_;
  std::recursive_mutex handoff_;
  Mutex mu_;
  size_t next_slot_ ABSL_GUARDED_BY(mu_) = 0;
  size_t loaded_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_chunk_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  v1::SlotChunk done_chunk_ ABSL_GUARDED_BY(mu_);
  int64_t total_rows_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t checksum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_out_ ABSL_GUARDED_BY(mu_) = 0;
};

grpc::ServerWriteReactor<v1::SlotChunk>* PsService::ExportSlots(
    grpc::CallbackServerContext* context, const v1::ExportSlotsRequest* request) {
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    return RefuseStream<grpc::ServerWriteReactor<v1::SlotChunk>>(ToGrpcStatus(auth));
  }
  absl::Status status;
  std::vector<uint32_t> slots;
  std::vector<int> first_at(num_slots_, -1);
  if (request->slots().empty()) status = absl::InvalidArgumentError("slots: empty");
  for (int i = 0; i < request->slots_size() && status.ok(); ++i) {
    const uint32_t slot = request->slots(i);
    if (slot >= num_slots_) {
      status = absl::InvalidArgumentError(
          absl::StrCat("slots[", i, "] = ", slot, " but this server has ", num_slots_, " slots"));
    } else if (first_at[slot] >= 0) {
      status = absl::InvalidArgumentError(
          absl::StrCat("slots[", i, "] = ", slot, " repeats slots[", first_at[slot], "]"));
    } else {
      first_at[slot] = i;
      slots.push_back(slot);
    }
  }
  auto* reactor =
      new ExportReactor(this, std::move(slots), request->weights_only(), request->packed_rows());
  if (status.ok()) {
    reactor->Start();
  } else {
    reactor->FinishNow(status);
  }
  return reactor;
}

// --- ImportSlots ----------------------------------------------------------------

// Stages rows as they arrive (validated, deduplicated, checksummed) and applies
// them on the executor only after a matching done chunk. Finish is always the
// reactor's last touch of itself.
class PsService::ImportReactor final : public grpc::ServerReadReactor<v1::SlotChunk> {
 public:
  ImportReactor(PsService* service, v1::ImportSlotsResponse* response)
      : service_(service), response_(response), rows_(service->TakeImportBlock()) {}

  void Start() { StartRead(&chunk_); }

  void OnReadDone(bool ok) override {
    absl::Status error;
    bool apply = false;
    {
      MutexLock lock(&mu_);
      if (!ok) {
        error = absl::AbortedError(absl::StrCat("ImportSlots: stream ended after ", chunks_,
                                                " chunks and ", rows_.size(),
                                                " rows without a done=true chunk; nothing stored"));
      } else {
        bytes_in_ += static_cast<int64_t>(chunk_.ByteSizeLong());
        error = StageLocked();
        ++chunks_;
        if (error.ok() && chunk_.done()) {
          total_rows_ = chunk_.total_rows();
          done_checksum_ = chunk_.checksum();
          apply = true;
        }
      }
    }
    if (!error.ok()) {
      Done(error);
    } else if (apply) {
      service_->executor_.Schedule([this] { Apply(); });
    } else {
      StartRead(&chunk_);
    }
  }

  void OnDone() override { delete this; }

 private:
  absl::Status StageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int row_floats = service_->row_floats_;
    const std::string& packed = chunk_.packed_rows();
    // Weights-only records get zero optimizer state below.
    const int sent_floats =
        !packed.empty() && chunk_.packed_weights_only() ? service_->dim_ : row_floats;
    const size_t record_bytes = v1::PackedRowBytes(sent_floats);
    if (!packed.empty()) {
      if (chunk_.rows_size() > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunks_, " carries both rows and packed_rows; send one or the other"));
      }
      if (packed.size() % record_bytes != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunks_, ".packed_rows: ", packed.size(), " bytes, not whole records of ",
            record_bytes, " bytes (dim ", service_->dim_,
            chunk_.packed_weights_only() ? ", weights only)" : " plus optimizer state)"));
      }
      if (const uint32_t crc = v1::PackedRowsCrc(packed); crc != chunk_.packed_crc32()) {
        return absl::DataLossError(absl::StrFormat(
            "chunk %d.packed_crc32 = %#x but its packed_rows have CRC %#x; nothing stored", chunks_,
            chunk_.packed_crc32(), crc));
      }
    }
    const int n =
        packed.empty() ? chunk_.rows_size() : static_cast<int>(packed.size() / record_bytes);
    if (n == 0) return absl::OkStatus();
    // Row i of either form.
    auto row_at = [&](int i) {
      if (!packed.empty()) return v1::PackedRowAt(packed, sent_floats, i);
      const v1::SlotRow& row = chunk_.rows(i);
      return v1::PackedRow{row.table(), row.id(),
                           std::span<const float>(row.values().data(), row.values_size())};
    };
    const std::shared_ptr<const ShardMap> map = service_->shard_map();
    uint32_t self = 0;
    {
      ReaderMutexLock lock(&service_->map_mu_);
      self = service_->self_index_;
    }
    const uint32_t num_slots = service_->num_slots_;
    const uint32_t slot = chunk_.slot();
    if (slot >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", chunks_, ".slot = ", slot,
                                                     " but this server has ", num_slots, " slots"));
    }
    // A chunk holds one slot's rows: ownership is checked once.
    if (chunk_.incoming()) {
      if (map != nullptr && map->owner_of_slot(slot) == self) {
        return absl::FailedPreconditionError(
            absl::StrCat("chunk ", chunks_, " is incoming but slot ", slot,
                         " is already owned and served by this server at epoch ", map->epoch()));
      }
    } else if (map != nullptr && map->owner_of_slot(slot) != self) {
      return WrongOwnerError(slot, map->epoch(), map->owner_of_slot(slot));
    }
    for (int i = 0; i < n; ++i) {
      const v1::PackedRow row = row_at(i);
      if (row.table >= service_->num_tables_) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", chunks_, " rows[", i, "].table: unknown table ", row.table,
                         "; this server has ", service_->num_tables_, " tables"));
      }
      if (row.values.size() != static_cast<size_t>(sent_floats)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunks_, " rows[", i, "].values: ", row.values.size(), " floats, want ",
            row_floats, " (dim ", service_->dim_, " plus optimizer state)"));
      }
      const uint32_t row_slot = SlotOf(row.table, row.id, num_slots);
      if (row_slot != slot) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", chunks_, " rows[", i, "]: (table ",
                                                       row.table, ", id ", row.id, ") is in slot ",
                                                       row_slot, ", chunk says slot ", slot));
      }
    }
    // Charged a chunk at a time: the budget is shared with the server's
    // other streams.
    const int64_t bytes = n * ImportStagedBytesPerRow(row_floats);
    staged_bytes_ += bytes;
    const int64_t server_staged = service_->ChargeImportStaging(bytes);
    if (server_staged > service_->options_.max_import_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "ImportSlots: the server's import streams would stage ", server_staged,
          " bytes (this one ", staged_bytes_, ") at chunk ", chunks_,
          ", over its staging limit of ", service_->options_.max_import_bytes,
          " bytes; nothing stored; import fewer slots per stream or fewer streams at once"));
    }
    // Appended, not resized and then overwritten: no zero-filling.
    for (int i = 0; i < n; ++i) {
      const v1::PackedRow row = row_at(i);
      rows_.tables.push_back(row.table);
      rows_.ids.push_back(row.id);
      rows_.values.insert(rows_.values.end(), row.values.begin(), row.values.end());
      rows_.values.resize(rows_.values.size() + (row_floats - sent_floats), 0.0f);
      if (packed.empty()) checksum_ += RowValueHash(row.table, row.id, row.values);
    }
    if (!packed.empty()) checksum_ += chunk_.packed_crc32();
    return absl::OkStatus();
  }

  // The staged rows against the done chunk's count and checksum, after a
  // check that no key came twice (which would also throw the count off).
  absl::Status VerifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (absl::Status sorted = SortRowBlock(service_->num_slots_, &rows_); !sorted.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ImportSlots: ", sorted.message(), " in the stream; nothing stored"));
    }
    if (total_rows_ != rows_.size()) {
      return absl::DataLossError(absl::StrCat("ImportSlots: done.total_rows = ", total_rows_,
                                              " but ", rows_.size(),
                                              " rows arrived; nothing stored"));
    }
    if (done_checksum_ != checksum_) {
      return absl::DataLossError(absl::StrFormat(
          "ImportSlots: done.checksum = %#x but the %d rows received hash to %#x; nothing stored",
          done_checksum_, rows_.size(), checksum_));
    }
    return absl::OkStatus();
  }

  // Executor thread; no read is outstanding. Sorting and verifying happen
  // here too, off gRPC's threads.
  void Apply() {
    absl::Status status;
    {
      MutexLock lock(&mu_);
      status = VerifyLocked();
      if (status.ok()) status = service_->store_->ImportRowBlock(rows_);
      if (status.ok()) {
        response_->set_rows(rows_.size());
        response_->set_checksum(checksum_);
      }
    }
    Done(status);
  }

  void Done(const absl::Status& status) {
    int64_t bytes_in;
    {
      MutexLock lock(&mu_);
      bytes_in = bytes_in_;
      service_->ReturnImportBlock(std::move(rows_));
      rows_ = RowBlock();
      service_->ChargeImportStaging(-staged_bytes_);
      staged_bytes_ = 0;
    }
    service_->metrics_->RecordRpc(Rpc::kImportSlots, Clock::now() - start_, status.code(), bytes_in,
                                  0);
    Finish(ToGrpcStatus(status));
  }

  PsService* const service_;
  v1::ImportSlotsResponse* const response_;
  const Clock::time_point start_ = Clock::now();
  v1::SlotChunk chunk_;  // Filled by gRPC; read only in OnReadDone.
  Mutex mu_;
  int64_t chunks_ ABSL_GUARDED_BY(mu_) = 0;
  RowBlock rows_ ABSL_GUARDED_BY(mu_);
  uint64_t checksum_ ABSL_GUARDED_BY(mu_) = 0;
  // From the done chunk.
  uint64_t total_rows_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_checksum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_in_ ABSL_GUARDED_BY(mu_) = 0;
};

grpc::ServerReadReactor<v1::SlotChunk>* PsService::ImportSlots(grpc::CallbackServerContext* context,
                                                               v1::ImportSlotsResponse* response) {
  if (absl::Status auth = CheckBearerToken(*context, options_.auth_token); !auth.ok()) {
    return RefuseStream<grpc::ServerReadReactor<v1::SlotChunk>>(ToGrpcStatus(auth));
  }
  auto* reactor = new ImportReactor(this, response);
  reactor->Start();
  return reactor;
}

}  // namespace shadowsync::ps
