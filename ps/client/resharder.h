// Live resharding of the parameter servers (docs/resharding.md): the one code path
// both `shadowsync scale` (through the local launcher) and the operator drive.
// Scale-out appends servers started empty (`shadowsync ps --join`); scale-in
// drains the highest-index servers, which the caller stops afterwards. Slots
// move in steps of one shard-map epoch each (freeze, copy and read back,
// switch, drop: docs/resharding.md); a checksum mismatch rolls its step back.
// Training continues throughout; a slot is frozen only during its own step.
//
//   SS_ASSIGN_OR_RETURN(ReshardReport r,
//                       Reshard({"ps-0:7000", "ps-1:7000"},
//                               {"ps-0:7000", "ps-1:7000", "ps-2:7000"}, {}));
//
// Thread-safe: the functions keep no state, but a cluster takes one Reshard
// or RepairShardMaps at a time (the launcher and the controller run one).
#ifndef SHADOWSYNC_PS_CLIENT_RESHARDER_H_
#define SHADOWSYNC_PS_CLIENT_RESHARDER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "common/shard_map.h"
#include "nlohmann/json.hpp"

namespace shadowsync::ps {

// Rows, and the order-independent key and value checksums
// (RowKeyHash/RowValueHash summed mod 2^64) of a set of rows.
struct RowSetChecksum {
  int64_t rows = 0;
  uint64_t keys = 0;
  uint64_t values = 0;
  bool operator==(const RowSetChecksum&) const = default;
  RowSetChecksum& operator+=(const RowSetChecksum& o) {
    rows += o.rows;
    keys += o.keys;
    values += o.values;
    return *this;
  }
};

struct ReshardOptions {
  // Slots per step. Smaller steps freeze less at a time; each costs an epoch.
  int slots_per_step = 256;
  // Deadline of each RPC (an export of a step's rows is one RPC).
  absl::Duration rpc_deadline = absl::Seconds(120);
  // After each step: slots moved so far, of `total`, and the epoch reached
  // (the operator's Resharding condition). Default: none.
  std::function<void(int64_t moved, int64_t total, uint64_t epoch)> progress;
  // Asked before each step, and every 50 ms from another thread (so it must
  // be thread-safe); true stops the reshard with Cancelled. Between steps:
  // every server on the last step's map, nothing frozen, so that a later
  // Reshard from that map's servers continues it (the operator stopping).
  // Default: never.
  std::function<bool()> stop_requested;
  // Once stop_requested says so mid-step, how long the step may still run
  // before its calls are cancelled (a hung server cannot hold a stopping
  // operator past its grace period). The step is then left as if Reshard
  // had died: RepairShardMaps completes or undoes it. Default: 10s.
  absl::Duration stop_grace = absl::Seconds(10);
  // Mutual TLS and the bearer token of the calls to the servers.
  GrpcSecurity security;
  // Fault injection (tests, bench/run.sh reshard-chaos): called before each
  // call of a step to server `server`, at the named points "freeze" (a
  // source stops serving the step's slots), "copy" (a source's slots are
  // copied to a target), "rollback" (a failed step gives a source its slots
  // back), "adopt" (a non-source installs the step's map) and "drop" (a source
  // drops the moved rows). A non-OK status ends Reshard there at once, as if
  // its process had died: nothing is rolled back. Default: none.
  std::function<absl::Status(std::string_view point, int server)> kill_point;
};

struct ReshardReport {
  int servers_before = 0;
  int servers_after = 0;
  uint64_t epoch_before = 0;
  uint64_t epoch_after = 0;
  int steps = 0;
  int64_t slots_moved = 0;
  // The moved slots' rows as the frozen sources exported them, and as read
  // back from the targets before they served: equal, or Reshard failed.
  RowSetChecksum moved_before;
  RowSetChecksum moved_after;
  // Every stored row of the cluster at the start and at the end. Equal when
  // nothing trained meanwhile; live training creates and updates rows.
  RowSetChecksum cluster_before;
  RowSetChecksum cluster_after;
  double seconds = 0;
};

nlohmann::json ReshardReportToJson(const ReshardReport& report);

// Sums Stats' row counts and checksums over `addresses`.
// `security` (here and below): mutual TLS and the bearer token of the calls.
absl::StatusOr<RowSetChecksum> ClusterChecksum(const std::vector<std::string>& addresses,
                                               absl::Duration rpc_deadline = absl::Seconds(120),
                                               const GrpcSecurity& security = {});

// Moves slots so that `after` (which extends `before`, or is a prefix of it)
// owns them all, balanced. Every server of both lists must be serving; the
// servers only in `after` must own nothing (started with --join). Fails
// without moving anything if the servers disagree on the shard map (an
// earlier reshard was interrupted: the message says which server is where).
absl::StatusOr<ReshardReport> Reshard(const std::vector<std::string>& before,
                                      const std::vector<std::string>& after,
                                      const ReshardOptions& options);

// What RepairShardMaps found and did.
struct RepairReport {
  ShardMap map;                 // the one map every server now has
  bool repaired = false;        // the servers disagreed; `map` is a new epoch
  bool rolled_forward = false;  // the interrupted step was completed, not undone
  int64_t slots_returned = 0;   // slots of the interrupted step, back at their sources
  int64_t rows_dropped = 0;     // rows of slots their server does not own (partial copies)
};

// After a Reshard whose caller died mid-step (an operator restart), or whose
// rollback did not reach every source, the servers at `addresses` (every one
// that may be involved, in index order) may disagree on the shard map. The
// newest and the oldest map differ in the step's slots, which the oldest
// map's owners (the step's sources) still hold: a source drops nothing before
// every server serves the step's map, and a rollback reaches the sources
// before anyone else. Two cases:
//  - Only sources hold the newest map (the step froze them, or the copy was
//    cut short, or its rollback reached only some of them): the slots go back
//    to their sources.
//  - Another server holds it: the copy was complete and verified, and the
//    targets may have accepted pushes since, so the step goes forward.
// Either way a new epoch is installed everywhere. Then every server drops the
// rows of slots it does not own, left by a copy or a drop that did not
// finish. Agreeing servers keep their map (only that clean-up runs). A
// server without any map yet (`ps --join`) gets it if the map lists it, and
// is skipped otherwise.
// "its step completed, 3 stray rows dropped, epoch 9" or "8 slots back at
// their sources, ...", for logs.
std::string DescribeRepair(const RepairReport& repair);

absl::StatusOr<RepairReport> RepairShardMaps(const std::vector<std::string>& addresses,
                                             absl::Duration rpc_deadline = absl::Seconds(120),
                                             const GrpcSecurity& security = {});

// The shard map of the server at `address`.
absl::StatusOr<ShardMap> FetchShardMap(const std::string& address,
                                       absl::Duration rpc_deadline = absl::Seconds(30),
                                       const GrpcSecurity& security = {});

// Installs the servers' newest shard map with `addresses` as the server
// list (same ownership, next epoch) on every one of them: servers that came
// back on new ports (a resumed job) learn each other's addresses.
absl::StatusOr<ShardMap> Readdress(const std::vector<std::string>& addresses,
                                   absl::Duration rpc_deadline = absl::Seconds(30),
                                   const GrpcSecurity& security = {});

}  // namespace shadowsync::ps

#endif  // SHADOWSYNC_PS_CLIENT_RESHARDER_H_
