#include "ps/client/resharder.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "shadowsync/v1/ps.grpc.pb.h"

namespace shadowsync::ps {
namespace {

using Stub = v1::ParameterServer::Stub;

std::unique_ptr<Stub> Connect(const std::string& address, const GrpcSecurity& security) {
  return v1::ParameterServer::NewStub(CreateChannel(address, security, BulkStreamChannelArgs()));
}

class Cluster;

// One call's context, with the cluster's deadline, cancellable through
// Cluster::CancelAll while it lives.
class Call {
 public:
  explicit Call(Cluster& cluster);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  grpc::ClientContext* context() { return &context_; }

 private:
  Cluster& cluster_;
  grpc::ClientContext context_;
};

class Cluster {
 public:
  Cluster(std::vector<std::string> addresses, absl::Duration deadline, const GrpcSecurity& security)
      : addresses_(std::move(addresses)), deadline_(deadline) {
    for (const std::string& a : addresses_) stubs_.push_back(Connect(a, security));
  }

  int size() const { return static_cast<int>(addresses_.size()); }

  // Cancels every call in flight, and every later one as it starts: a
  // stopping Reshard need not wait out their deadlines. Thread-safe.
  void CancelAll() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    cancelled_ = true;
    for (grpc::ClientContext* context : in_flight_) context->TryCancel();
  }
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return cancelled_;
  }
  const std::string& address(int i) const { return addresses_[i]; }

  absl::StatusOr<ShardMap> GetMap(int i) {
    Call call(*this);
    v1::ShardMap proto;
    SS_RETURN_IF_ERROR(FromGrpcStatus(stubs_[i]->GetShardMap(call.context(), {}, &proto),
                                      "GetShardMap", addresses_[i]));
    return ShardMap::FromProto(proto);
  }

  absl::Status SetMap(int i, const ShardMap& map) {
    Call call(*this);
    v1::SetShardMapRequest request;
    *request.mutable_map() = map.ToProto();
    request.set_self_index(static_cast<uint32_t>(i));
    v1::SetShardMapResponse response;
    return FromGrpcStatus(stubs_[i]->SetShardMap(call.context(), request, &response),
                          absl::StrCat("SetShardMap(epoch ", map.epoch(), ")"), addresses_[i]);
  }

  absl::StatusOr<RowSetChecksum> Stats(int i) {
    Call call(*this);
    v1::StatsResponse response;
    SS_RETURN_IF_ERROR(
        FromGrpcStatus(stubs_[i]->Stats(call.context(), {}, &response), "Stats", addresses_[i]));
    return RowSetChecksum{static_cast<int64_t>(response.rows_stored()), response.key_checksum(),
                          response.value_checksum()};
  }

  absl::StatusOr<int64_t> Drop(int i, const std::vector<uint32_t>& slots) {
    Call call(*this);
    v1::DropSlotsRequest request;
    request.mutable_slots()->Add(slots.begin(), slots.end());
    v1::DropSlotsResponse response;
    SS_RETURN_IF_ERROR(FromGrpcStatus(stubs_[i]->DropSlots(call.context(), request, &response),
                                      "DropSlots", addresses_[i]));
    return static_cast<int64_t>(response.rows_dropped());
  }

  // Streams `slots` of server `from` into server `to` (to == -1: nowhere, a
  // read-back), checksumming every row that passes.
  absl::StatusOr<RowSetChecksum> Move(int from, int to, const std::vector<uint32_t>& slots) {
    Call export_call(*this);
    v1::ExportSlotsRequest request;
    request.mutable_slots()->Add(slots.begin(), slots.end());
    std::unique_ptr<grpc::ClientReader<v1::SlotChunk>> reader =
        stubs_[from]->ExportSlots(export_call.context(), request);
    Call import_call(*this);
    v1::ImportSlotsResponse imported;
    std::unique_ptr<grpc::ClientWriter<v1::SlotChunk>> writer;
    if (to >= 0) writer = stubs_[to]->ImportSlots(import_call.context(), &imported);

    RowSetChecksum sum;
    v1::SlotChunk chunk, done;
    bool writer_ok = true;
    while (reader->Read(&chunk)) {
      for (const v1::SlotRow& row : chunk.rows()) {
        ++sum.rows;
        sum.keys += RowKeyHash(row.table(), row.id());
        sum.values += RowValueHash(row.table(), row.id(),
                                   std::span<const float>(row.values().data(), row.values_size()));
      }
      if (chunk.done()) done = chunk;
      chunk.set_incoming(true);
      if (writer != nullptr && writer_ok) writer_ok = writer->Write(chunk);
    }
    const grpc::Status exported = reader->Finish();
    if (writer != nullptr) {
      writer->WritesDone();
      const grpc::Status status = writer->Finish();
      // An export failure explains an aborted import better than the import.
      SS_RETURN_IF_ERROR(FromGrpcStatus(exported, "ExportSlots", addresses_[from]));
      SS_RETURN_IF_ERROR(FromGrpcStatus(status, "ImportSlots", addresses_[to]));
      if (imported.rows() != static_cast<uint64_t>(sum.rows) || imported.checksum() != sum.values) {
        return absl::DataLossError(absl::StrFormat(
            "ImportSlots on %s stored %d rows (checksum %#x) of the %d sent (checksum %#x)",
            addresses_[to], imported.rows(), imported.checksum(), sum.rows, sum.values));
      }
    }
    SS_RETURN_IF_ERROR(FromGrpcStatus(exported, "ExportSlots", addresses_[from]));
    if (!done.done() || done.total_rows() != static_cast<uint64_t>(sum.rows) ||
        done.checksum() != sum.values) {
      return absl::DataLossError(absl::StrFormat(
          "ExportSlots on %s: the stream's rows (%d, checksum %#x) disagree with its end marker "
          "(%d, checksum %#x)",
          addresses_[from], sum.rows, sum.values, done.total_rows(), done.checksum()));
    }
    return sum;
  }

 private:
  std::vector<std::string> addresses_;
  friend class Call;
  absl::Duration deadline_;
  std::vector<std::unique_ptr<Stub>> stubs_;
  mutable Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
};

Call::Call(Cluster& cluster) : cluster_(cluster) {
  context_.set_deadline(DeadlineFromNow(cluster.deadline_));
  MutexLock lock(&cluster.mu_);
  if (cluster.cancelled_) context_.TryCancel();  // Cancelled as soon as it starts.
  cluster.in_flight_.insert(&context_);
}

Call::~Call() {
  MutexLock lock(&cluster_.mu_);
  cluster_.in_flight_.erase(&context_);
}

// The servers' common shard map; an error naming who is where if they differ.
absl::StatusOr<ShardMap> AgreedMap(Cluster& cluster, int n) {
  std::optional<ShardMap> agreed;
  for (int i = 0; i < n; ++i) {
    SS_ASSIGN_OR_RETURN(ShardMap map, cluster.GetMap(i));
    if (!agreed.has_value()) {
      agreed = std::move(map);
    } else if (map.epoch() != agreed->epoch()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the parameter servers disagree on the shard map: ", cluster.address(0),
                       " is at epoch ", agreed->epoch(), ", ", cluster.address(i), " at epoch ",
                       map.epoch(), " (an earlier reshard was interrupted); nothing was moved"));
    }
  }
  return *std::move(agreed);
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) absl::StrAppend(&out, out.empty() ? "" : ",", s);
  return out;
}

}  // namespace

nlohmann::json ReshardReportToJson(const ReshardReport& r) {
  auto sums = [](const RowSetChecksum& c) {
    return nlohmann::json{{"rows", c.rows},
                          {"key_checksum", absl::StrFormat("%016x", c.keys)},
                          {"value_checksum", absl::StrFormat("%016x", c.values)}};
  };
  return {{"servers_before", r.servers_before},
          {"servers_after", r.servers_after},
          {"epoch_before", r.epoch_before},
          {"epoch_after", r.epoch_after},
          {"steps", r.steps},
          {"slots_moved", r.slots_moved},
          {"moved_before", sums(r.moved_before)},
          {"moved_after", sums(r.moved_after)},
          {"moved_equal", r.moved_before == r.moved_after},
          {"cluster_before", sums(r.cluster_before)},
          {"cluster_after", sums(r.cluster_after)},
          {"cluster_keys_equal", r.cluster_before.rows == r.cluster_after.rows &&
                                     r.cluster_before.keys == r.cluster_after.keys},
          {"cluster_values_equal", r.cluster_before == r.cluster_after},
          {"seconds", r.seconds}};
}

absl::StatusOr<RowSetChecksum> ClusterChecksum(const std::vector<std::string>& addresses,
                                               absl::Duration rpc_deadline,
                                               const GrpcSecurity& security) {
  Cluster cluster(addresses, rpc_deadline, security);
  RowSetChecksum total;
  for (int i = 0; i < cluster.size(); ++i) {
    SS_ASSIGN_OR_RETURN(RowSetChecksum c, cluster.Stats(i));
    total += c;
  }
  return total;
}

namespace {

// Reshard's work once its arguments are checked; `start` for the report.
absl::StatusOr<ReshardReport> RunReshard(Cluster& cluster, const std::vector<std::string>& before,
                                         const std::vector<std::string>& after,
                                         const ReshardOptions& options,
                                         std::chrono::steady_clock::time_point start) {
  const int n_before = static_cast<int>(before.size());
  const int n_after = static_cast<int>(after.size());
  ReshardReport report{.servers_before = n_before, .servers_after = n_after};

  SS_ASSIGN_OR_RETURN(ShardMap map, AgreedMap(cluster, n_before));
  if (map.addresses() != before) {
    return absl::FailedPreconditionError(
        absl::StrCat("the shard map's servers (", Join(map.addresses()),
                     ") are not the current ones given (", Join(before), ")"));
  }
  report.epoch_before = map.epoch();
  for (int i = n_before; i < n_after; ++i) {
    SS_ASSIGN_OR_RETURN(RowSetChecksum joining, cluster.Stats(i));
    if (joining.rows != 0) {
      return absl::FailedPreconditionError(absl::StrCat("the new server ", after[i],
                                                        " already stores ", joining.rows,
                                                        " rows; start it with an empty directory"));
    }
  }
  for (int i = 0; i < n_before; ++i) {
    SS_ASSIGN_OR_RETURN(RowSetChecksum c, cluster.Stats(i));
    report.cluster_before += c;
  }

  // Scale-out: every server learns the new addresses before any slot moves.
  if (n_after > n_before) {
    SS_ASSIGN_OR_RETURN(map, map.WithMoves({}, after));
    for (int i = 0; i < n_after; ++i) SS_RETURN_IF_ERROR(cluster.SetMap(i, map));
    LOG(INFO) << "reshard: epoch " << map.epoch() << " adds " << n_after - n_before << " server(s)";
  }
  const int n_map = map.num_servers();  // max(n_before, n_after) while moving
  const std::vector<SlotMove> moves = map.PlanRebalance(n_after);
  report.slots_moved = static_cast<int64_t>(moves.size());
  // options.kill_point: once it fails, Reshard returns without another call.
  bool killed = false;
  auto point = [&](std::string_view name, int server) -> absl::Status {
    if (!options.kill_point) return absl::OkStatus();
    absl::Status status = options.kill_point(name, server);
    killed = !status.ok();
    return status;
  };

  for (size_t first = 0; first < moves.size(); first += options.slots_per_step) {
    if (options.stop_requested && options.stop_requested()) {
      return absl::CancelledError(absl::StrCat("reshard stopped at epoch ", map.epoch(), " with ",
                                               first, " of ", moves.size(), " slots moved"));
    }
    const std::vector<SlotMove> step(
        moves.begin() + static_cast<int64_t>(first),
        moves.begin() +
            static_cast<int64_t>(std::min(moves.size(), first + options.slots_per_step)));
    SS_ASSIGN_OR_RETURN(ShardMap next, map.WithMoves(step, map.addresses()));
    std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> pairs;  // (from, to) -> slots
    std::vector<bool> is_source(n_map);
    for (const SlotMove& m : step) {
      pairs[{m.from, m.to}].push_back(m.slot);
      is_source[m.from] = true;
    }
    // 1. Freeze: the sources stop serving the moving slots.
    for (int i = 0; i < n_map; ++i) {
      if (!is_source[i]) continue;
      SS_RETURN_IF_ERROR(point("freeze", i));
      SS_RETURN_IF_ERROR(cluster.SetMap(i, next));
    }
    // 2. Copy and verify; on a failure, give the slots back to the sources.
    RowSetChecksum step_before, step_after;
    absl::Status copied = [&]() -> absl::Status {
      for (const auto& [pair, slots] : pairs) {
        const int from = static_cast<int>(pair.first), to = static_cast<int>(pair.second);
        SS_RETURN_IF_ERROR(point("copy", from));
        SS_RETURN_IF_ERROR(cluster.Drop(to, slots).status());
        SS_ASSIGN_OR_RETURN(RowSetChecksum sent, cluster.Move(from, to, slots));
        SS_ASSIGN_OR_RETURN(RowSetChecksum stored, cluster.Move(to, -1, slots));
        if (!(stored == sent)) {
          return absl::DataLossError(absl::StrFormat(
              "%s holds %d rows (keys %#x, values %#x) of the %d moved from %s (keys %#x, values "
              "%#x)",
              cluster.address(to), stored.rows, stored.keys, stored.values, sent.rows,
              cluster.address(from), sent.keys, sent.values));
        }
        step_before += sent;
        step_after += stored;
      }
      return absl::OkStatus();
    }();
    if (killed) return copied;
    if (!copied.ok()) {
      // The sources first, and no one else unless every source has it: the
      // others never left the previous map. A target holding the rollback
      // while a source stayed frozen (it crashed) would make RepairShardMaps
      // take the rollback for the step and drop the source's rows.
      absl::Status rolled_back = [&]() -> absl::Status {
        std::vector<SlotMove> back;
        for (const SlotMove& m : step) back.push_back({.slot = m.slot, .from = m.to, .to = m.from});
        SS_ASSIGN_OR_RETURN(ShardMap restored, next.WithMoves(back, next.addresses()));
        for (int i = 0; i < n_map; ++i) {
          if (!is_source[i]) continue;
          SS_RETURN_IF_ERROR(point("rollback", i));
          SS_RETURN_IF_ERROR(cluster.SetMap(i, restored));
        }
        for (int i = 0; i < n_map; ++i) {
          if (!is_source[i]) SS_RETURN_IF_ERROR(cluster.SetMap(i, restored));
        }
        return absl::OkStatus();
      }();
      if (killed) return rolled_back;
      if (!rolled_back.ok()) {
        return absl::Status(
            copied.code(),
            absl::StrCat("reshard step at epoch ", next.epoch(), " failed: ", copied.message(),
                         "; and its rollback stopped (RepairShardMaps gives the ", step.size(),
                         " slots back to their sources): ", rolled_back.message()));
      }
      return absl::Status(
          copied.code(),
          absl::StrCat("reshard step at epoch ", next.epoch(), " rolled back (", step.size(),
                       " slots stay where they were): ", copied.message()));
    }
    // 3. The targets (and everyone else) adopt the map and serve.
    for (int i = 0; i < n_map; ++i) {
      if (is_source[i]) continue;
      SS_RETURN_IF_ERROR(point("adopt", i));
      SS_RETURN_IF_ERROR(cluster.SetMap(i, next));
    }
    // 4. The sources let go of the rows, all of which were frozen since 1.
    int64_t dropped = 0;
    for (const auto& [pair, slots] : pairs) {
      SS_RETURN_IF_ERROR(point("drop", static_cast<int>(pair.first)));
      SS_ASSIGN_OR_RETURN(const int64_t d, cluster.Drop(static_cast<int>(pair.first), slots));
      dropped += d;
    }
    if (dropped != step_before.rows) {
      return absl::DataLossError(absl::StrCat("the sources dropped ", dropped,
                                              " rows of moved slots but exported ",
                                              step_before.rows, " at epoch ", next.epoch()));
    }
    report.moved_before += step_before;
    report.moved_after += step_after;
    ++report.steps;
    map = std::move(next);
    LOG(INFO) << "reshard: epoch " << map.epoch() << " moved " << step.size() << " slots, "
              << step_after.rows << " rows";
    if (options.progress) {
      options.progress(static_cast<int64_t>(first + step.size()), report.slots_moved, map.epoch());
    }
  }

  // Scale-in: the drained servers leave the map.
  if (n_after < n_before) {
    for (int i = n_after; i < n_before; ++i) {
      SS_ASSIGN_OR_RETURN(RowSetChecksum left, cluster.Stats(i));
      if (left.rows != 0) {
        return absl::DataLossError(
            absl::StrCat("the drained server ", before[i], " still stores ", left.rows, " rows"));
      }
    }
    SS_ASSIGN_OR_RETURN(map, map.WithMoves({}, after));
    for (int i = 0; i < n_after; ++i) SS_RETURN_IF_ERROR(cluster.SetMap(i, map));
    LOG(INFO) << "reshard: epoch " << map.epoch() << " removes " << n_before - n_after
              << " server(s)";
  }
  report.epoch_after = map.epoch();
  for (int i = 0; i < n_after; ++i) {
    SS_ASSIGN_OR_RETURN(RowSetChecksum c, cluster.Stats(i));
    report.cluster_after += c;
  }
  if (!(report.moved_before == report.moved_after)) {
    return absl::DataLossError("the moved rows' checksums differ before and after");
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace

absl::StatusOr<ReshardReport> Reshard(const std::vector<std::string>& before,
                                      const std::vector<std::string>& after,
                                      const ReshardOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (after.empty()) return absl::InvalidArgumentError("the new server list is empty");
  const std::vector<std::string>& longer = after.size() >= before.size() ? after : before;
  const std::vector<std::string>& shorter = after.size() >= before.size() ? before : after;
  if (!std::equal(shorter.begin(), shorter.end(), longer.begin())) {
    return absl::InvalidArgumentError(absl::StrCat("the new server list (", Join(after),
                                                   ") must extend the current one (", Join(before),
                                                   ") or be a prefix of it"));
  }
  if (options.slots_per_step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots_per_step = ", options.slots_per_step, ", must be >= 1"));
  }
  Cluster cluster(longer, options.rpc_deadline, options.security);
  // A stop asked for mid-step gives the step stop_grace to end, then cancels
  // its calls instead of waiting out their deadlines (a hung server): the
  // step is left as if Reshard had died, for RepairShardMaps.
  Mutex mu;
  bool finished = false;  // Guarded by mu.
  std::thread watcher;
  if (options.stop_requested) {
    watcher = std::thread([&] {
      std::optional<absl::Time> asked;
      MutexLock lock(&mu);
      while (!mu.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return finished; },
                                  absl::Milliseconds(50))) {
        if (!asked.has_value() && options.stop_requested()) asked = absl::Now();
        if (asked.has_value() && absl::Now() - *asked >= options.stop_grace) {
          cluster.CancelAll();
          return;
        }
      }
    });
  }
  absl::StatusOr<ReshardReport> report = RunReshard(cluster, before, after, options, start);
  if (watcher.joinable()) {
    {
      MutexLock lock(&mu);
      finished = true;
    }
    watcher.join();
  }
  if (!report.ok() && cluster.cancelled()) {
    return absl::CancelledError(absl::StrCat(
        "reshard stopped: its calls in flight were cancelled ",
        absl::FormatDuration(options.stop_grace),
        " after the stop was asked (RepairShardMaps completes or undoes a step cut short): ",
        report.status().message()));
  }
  return report;
}

std::string DescribeRepair(const RepairReport& repair) {
  return absl::StrCat(repair.rolled_forward
                          ? std::string("its step completed")
                          : absl::StrCat(repair.slots_returned, " slots back at their sources"),
                      ", ", repair.rows_dropped, " stray rows dropped, epoch ", repair.map.epoch());
}

absl::StatusOr<RepairReport> RepairShardMaps(const std::vector<std::string>& addresses,
                                             absl::Duration rpc_deadline,
                                             const GrpcSecurity& security) {
  if (addresses.empty()) return absl::InvalidArgumentError("addresses: empty");
  Cluster cluster(addresses, rpc_deadline, security);
  std::vector<std::optional<ShardMap>> maps(addresses.size());
  std::optional<ShardMap> newest, oldest;
  for (int i = 0; i < cluster.size(); ++i) {
    absl::StatusOr<ShardMap> map = cluster.GetMap(i);
    // A joined server that never got a map owns nothing and stores nothing.
    if (absl::IsFailedPrecondition(map.status())) continue;
    if (!map.ok()) return map.status();
    if (!newest.has_value() || map->epoch() > newest->epoch()) newest = *map;
    if (!oldest.has_value() || map->epoch() < oldest->epoch()) oldest = *map;
    maps[i] = *std::move(map);
  }
  if (!newest.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no server of ", Join(addresses), " has a shard map"));
  }
  if (newest->num_slots() != oldest->num_slots()) {
    return absl::DataLossError(absl::StrCat("the servers' shard maps have ", oldest->num_slots(),
                                            " and ", newest->num_slots(), " slots"));
  }
  RepairReport report{.map = *newest};
  if (newest->epoch() != oldest->epoch()) {
    // The step's slots are those whose owner differs; their owners in the
    // oldest map are the step's sources.
    std::vector<SlotMove> back;
    std::vector<bool> is_source(addresses.size());
    for (uint32_t slot = 0; slot < newest->num_slots(); ++slot) {
      const uint32_t now = newest->owner_of_slot(slot), before = oldest->owner_of_slot(slot);
      if (now == before) continue;
      back.push_back({.slot = slot, .from = now, .to = before});
      if (before < is_source.size()) is_source[before] = true;
    }
    // Another server serving the newest map: the step had copied and
    // verified every slot, and its targets may have taken pushes since.
    for (size_t i = 0; i < maps.size(); ++i) {
      if (!is_source[i] && maps[i].has_value() && maps[i]->epoch() == newest->epoch()) {
        report.rolled_forward = !back.empty();
      }
    }
    if (report.rolled_forward) back.clear();
    // The longer list: a step of a scale-out already knows the new servers,
    // and a drained one is still in both until the last epoch.
    const std::vector<std::string>& servers =
        newest->num_servers() >= oldest->num_servers() ? newest->addresses() : oldest->addresses();
    SS_ASSIGN_OR_RETURN(report.map, newest->WithMoves(back, servers));
    report.repaired = true;
    report.slots_returned = static_cast<int64_t>(back.size());
  }
  for (int i = 0; i < cluster.size(); ++i) {
    // A server without a map that the map lists: a scale-out's new server
    // that the step adding it to every map did not reach.
    const bool listed = i < static_cast<int>(report.map.num_servers());
    if (!maps[i].has_value() && !listed) continue;
    if (report.repaired || !maps[i].has_value()) {
      SS_RETURN_IF_ERROR(cluster.SetMap(i, report.map));
    }
    std::vector<uint32_t> foreign;
    for (uint32_t slot = 0; slot < report.map.num_slots(); ++slot) {
      if (report.map.owner_of_slot(slot) != static_cast<uint32_t>(i)) foreign.push_back(slot);
    }
    if (foreign.empty()) continue;
    SS_ASSIGN_OR_RETURN(const int64_t dropped, cluster.Drop(i, foreign));
    report.rows_dropped += dropped;
  }
  return report;
}

absl::StatusOr<ShardMap> FetchShardMap(const std::string& address, absl::Duration rpc_deadline,
                                       const GrpcSecurity& security) {
  Cluster cluster({address}, rpc_deadline, security);
  return cluster.GetMap(0);
}

absl::StatusOr<ShardMap> Readdress(const std::vector<std::string>& addresses,
                                   absl::Duration rpc_deadline, const GrpcSecurity& security) {
  Cluster cluster(addresses, rpc_deadline, security);
  SS_ASSIGN_OR_RETURN(ShardMap map, AgreedMap(cluster, cluster.size()));
  if (map.num_servers() != cluster.size()) {
    return absl::FailedPreconditionError(absl::StrCat("the shard map has ", map.num_servers(),
                                                      " servers, not the ", cluster.size(),
                                                      " given (", Join(addresses), ")"));
  }
  if (map.addresses() == addresses) return map;
  SS_ASSIGN_OR_RETURN(map, map.WithMoves({}, addresses));
  for (int i = 0; i < cluster.size(); ++i) SS_RETURN_IF_ERROR(cluster.SetMap(i, map));
  return map;
}

}  // namespace shadowsync::ps
