// `shadowsync ps`: one embedding parameter server process (ps/ps_server.h)
// until SIGTERM or SIGINT, which shut it down cleanly (drain RPCs, close the
// store).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "glog/logging.h"
#include "model/optimizer.h"
#include "ps/ps_server.h"

namespace shadowsync::cli {
namespace {

struct PsFlags {
  ServerFlags server{.listen = "0.0.0.0:7000", .metrics_listen = "0.0.0.0:7001"};
  std::string advertise;
  std::string peers;
  uint32_t self_index = 0;
  bool join = false;
  std::string db;
  int dim = 16;
  int tables = 26;
  uint64_t hash_buckets = 1'000'000;
  std::string optimizer = "adagrad";
  double lr = 0.02;  // The job spec's default learning rate.
  uint64_t seed = 1;
  uint32_t slots = 4096;
  int64_t cache_bytes = int64_t{256} << 20;
  int64_t admission_min_count = 1;
  double admission_probability = 1.0;
  double ttl_seconds = 0;
  int64_t max_rows = 0;
  int64_t max_request_rows = int64_t{1} << 20;
  int64_t max_import_bytes = ps::PsServiceOptions().max_import_bytes;
  double eviction_interval_seconds = 10;
  bool sync_writes = false;
};

int RunPs(const PsFlags& f) {
  auto kind = model::ParseOptimizerKind(f.optimizer);
  if (!kind.ok()) {
    LOG(ERROR) << "ps: --optimizer: " << kind.status().message();
    return 2;
  }
  ps::PsServerOptions o;
  o.advertise_address = f.advertise;
  for (absl::string_view peer : absl::StrSplit(f.peers, ',', absl::SkipWhitespace())) {
    o.peers.emplace_back(peer);
  }
  o.self_index = f.self_index;
  o.join = f.join;
  o.store.db_path = f.db;
  o.store.dim = f.dim;
  for (int t = 0; t < f.tables; ++t) {
    o.store.tables.push_back({.name = absl::StrCat("table", t), .hash_buckets = f.hash_buckets});
  }
  o.store.optimizer.kind = *kind;
  o.store.optimizer.learning_rate = static_cast<float>(f.lr);
  o.store.seed = f.seed;
  o.store.num_slots = f.slots;
  o.store.cache_bytes = f.cache_bytes;
  o.store.admission_min_count = f.admission_min_count;
  o.store.admission_probability = f.admission_probability;
  o.store.ttl = absl::Seconds(f.ttl_seconds);
  o.store.max_rows = f.max_rows;
  o.store.sync_writes = f.sync_writes;
  o.service.max_request_rows = f.max_request_rows;
  o.service.max_import_bytes = f.max_import_bytes;
  o.eviction_interval = absl::Seconds(f.eviction_interval_seconds);
  return ServeUntilSignal("ps", f.server, std::move(o), ps::PsServer::Start);
}

}  // namespace

Action AddPsCommand(CLI::App& app) {
  auto f = std::make_shared<PsFlags>();
  CLI::App* cmd = app.add_subcommand(
      "ps", "Run an embedding parameter server until SIGTERM/SIGINT (drains, then exits 0).");
  AddServerFlags(*cmd, f->server);
  cmd->add_option("--advertise", f->advertise,
                  "this server's address in its initial shard map (default: --listen, bound port)");
  cmd->add_option("--peers", f->peers,
                  "comma-separated addresses of all servers for the initial shard map "
                  "(default: this server alone)");
  cmd->add_option("--self-index", f->self_index, "this server's index in --peers")
      ->capture_default_str();
  cmd->add_flag("--join", f->join,
                "start owning no slot until a reshard assigns some (a server added by scale-out)");
  cmd->add_option("--db", f->db, "RocksDB directory (created if missing)")->required();
  cmd->add_option("--dim", f->dim, "embedding dimension")->capture_default_str();
  cmd->add_option("--tables", f->tables, "number of embedding tables")->capture_default_str();
  cmd->add_option("--hash-buckets", f->hash_buckets, "rows per table (sets the init scale)")
      ->capture_default_str();
  cmd->add_option("--optimizer", f->optimizer, "sparse optimizer: sgd or adagrad")
      ->capture_default_str();
  cmd->add_option("--lr", f->lr, "sparse learning rate")->capture_default_str();
  cmd->add_option("--seed", f->seed, "row initialisation seed")->capture_default_str();
  cmd->add_option("--slots", f->slots, "hash slots S (fixed per job)")->capture_default_str();
  cmd->add_option("--cache-bytes", f->cache_bytes, "RAM cache budget (0: no cache)")
      ->capture_default_str();
  cmd->add_option("--admission-min-count", f->admission_min_count,
                  "pushes before a new row gets storage")
      ->capture_default_str();
  cmd->add_option("--admission-probability", f->admission_probability,
                  "probability a qualifying new row is admitted")
      ->capture_default_str();
  cmd->add_option("--ttl-seconds", f->ttl_seconds, "evict rows idle this long (0: never)")
      ->capture_default_str();
  cmd->add_option("--max-rows", f->max_rows, "stored-row cap, LRU beyond it (0: none)")
      ->capture_default_str();
  cmd->add_option("--max-request-rows", f->max_request_rows, "ids per request")
      ->capture_default_str();
  cmd->add_option("--max-import-bytes", f->max_import_bytes,
                  "row bytes all open ImportSlots streams may stage together (> 0)")
      ->capture_default_str();
  cmd->add_option("--eviction-interval-seconds", f->eviction_interval_seconds,
                  "period of the eviction pass (0: off)")
      ->capture_default_str();
  cmd->add_flag("--sync-writes", f->sync_writes,
                "fsync the WAL before acknowledging a push (see docs/durability.md)");
  return [f] { return RunPs(*f); };
}

}  // namespace shadowsync::cli
