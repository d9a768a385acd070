// The embedding tables of a finished local job, checked (bench/chaos.py): opens
// every parameter server's RocksDB directory of a `shadowsync run` directory
// (the servers must be stopped), reads every stored row and its persisted
// shard map, and reports
//   keys        distinct (table, id) keys over all servers,
//   duplicates  keys stored on more than one server,
//   misplaced   keys stored on a server that does not own their slot,
//   key_hash    an order-independent hash of the key set (equal key sets,
//               equal hashes: compares a run with an undisturbed one).
//
//   chaos_check --run-dir DIR
//
// Last line: RESULT name=chaos_check keys=.. duplicates=.. misplaced=.. key_hash=..
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "jobspec/job_spec.h"
#include "nlohmann/json.hpp"
#include "ps/ps_service.h"
#include "ps/row_store.h"

namespace shadowsync::bench {
namespace {

namespace fs = std::filesystem;

struct Result {
  int64_t keys = 0, duplicates = 0, misplaced = 0;
  uint64_t key_hash = 0;
};

absl::StatusOr<Result> Check(const std::string& run_dir) {
  std::ifstream in(run_dir + "/job.json");
  if (!in) return absl::NotFoundError(absl::StrCat(run_dir, "/job.json: cannot read"));
  const nlohmann::json job_json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  SS_ASSIGN_OR_RETURN(const ShadowSyncJob job, JobFromJson(job_json));
  const JobSpec& spec = job.spec;

  // Server index by key; a key seen twice counts as a duplicate.
  std::unordered_map<uint64_t, int> seen;  // HashId(table, id) -> server
  Result r;
  for (int server = 0;; ++server) {
    const std::string db = absl::StrCat(run_dir, "/ps-", server);
    if (!fs::exists(db)) break;
    SS_ASSIGN_OR_RETURN(std::optional<ps::PersistedShardMap> map,
                        ps::LoadShardMapFile(db + "/SHADOWSYNC_SHARD_MAP"));
    ps::RowStoreOptions o;
    o.db_path = db;
    o.dim = spec.model.embedding_dim;
    for (const auto& t : spec.model.tables) {
      o.tables.push_back({.name = t.name, .hash_buckets = static_cast<uint64_t>(t.hash_buckets)});
    }
    o.optimizer.kind = spec.parameter_server.optimizer == Optimizer::kAdagrad
                           ? model::OptimizerKind::kAdagrad
                           : model::OptimizerKind::kSgd;
    o.num_slots = spec.parameter_server.slots;
    o.cache_bytes = 0;
    SS_ASSIGN_OR_RETURN(std::unique_ptr<ps::RowStore> store, ps::RowStore::Open(o));
    std::vector<uint32_t> slots(o.num_slots);
    for (uint32_t s = 0; s < o.num_slots; ++s) slots[s] = s;
    SS_RETURN_IF_ERROR(store->ExportSlots(slots, [&](uint32_t slot, const ps::StoredRow& row) {
      const uint64_t key = HashId(row.table, row.id);  // 64 bits: collisions negligible.
      const bool inserted = seen.try_emplace(key, server).second;
      if (inserted) {
        ++r.keys;
        r.key_hash += Mix64(key);
      } else {
        ++r.duplicates;
      }
      if (map.has_value() && map->map.owner_of_slot(slot) != map->self_index) ++r.misplaced;
      return absl::OkStatus();
    }));
    std::printf("ps-%d: %s, %zu keys so far\n", server, map ? "shard map read" : "no shard map",
                seen.size());
  }
  if (seen.empty()) return absl::NotFoundError(absl::StrCat(run_dir, ": no ps-N directory"));
  return r;
}

}  // namespace
}  // namespace shadowsync::bench

int main(int argc, char** argv) {
  shadowsync::InitLogging(argv[0]);
  std::string run_dir;
  CLI::App app("Check the embedding rows of a finished `shadowsync run` directory.");
  app.add_option("--run-dir", run_dir, "the job's run directory (servers stopped)")->required();
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<shadowsync::bench::Result> r = shadowsync::bench::Check(run_dir);
  if (!r.ok()) {
    LOG(ERROR) << "chaos_check: " << r.status();
    return 2;
  }
  std::printf("RESULT name=chaos_check keys=%lld duplicates=%lld misplaced=%lld key_hash=%016llx\n",
              static_cast<long long>(r->keys), static_cast<long long>(r->duplicates),
              static_cast<long long>(r->misplaced), static_cast<unsigned long long>(r->key_hash));
  return 0;
}
