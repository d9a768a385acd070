// The parameter server over real gRPC on 127.0.0.1 (port 0): the PsClient
// against an in-process oracle, routing across servers, the wrong-owner
// redirect during a slot move, export/import checksums, every bad input, and
// the metrics and health endpoints.
#include "ps/ps_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/embedding_table.h"
#include "ps/client/ps_client.h"
#include "ps/client/resharder.h"
#include "ps/client/wrong_owner.h"
#include "ps/ps_server.h"
#include "ps/row_store.h"
#include "shadowsync/v1/packed_rows.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "tests/util/embedding_tables.h"
#include "tests/util/http_get.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kDim = 4;
constexpr int kTables = 3;
constexpr uint32_t kSlots = 64;
constexpr uint64_t kBuckets = 1000;

std::vector<model::EmbeddingTableConfig> Tables() {
  return testing::NumberedTables(kTables, kBuckets);
}

class PsServiceTest : public ::testing::Test {
 protected:
  struct Node {
    std::unique_ptr<ps::PsServer> server;
    std::unique_ptr<v1::ParameterServer::Stub> stub;
    std::string address;
  };

  ps::PsServerOptions Options(const std::string& name) {
    ps::PsServerOptions o;
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = "127.0.0.1:0";
    o.store.db_path = dir_.File(name);
    o.store.dim = kDim;
    o.store.tables = Tables();
    o.store.num_slots = kSlots;
    o.store.cache_bytes = 1 << 20;
    o.eviction_interval = absl::ZeroDuration();
    o.shutdown_grace = absl::Milliseconds(500);
    o.service.export_chunk_rows = 7;  // Several chunks per slot.
    return o;
  }

  Node Start(ps::PsServerOptions options) {
    Node node;
    auto server = ps::PsServer::Start(std::move(options));
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return node;
    node.server = *std::move(server);
    node.address = node.server->address();
    node.stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(node.address, grpc::InsecureChannelCredentials()));
    return node;
  }

  // n servers sharing Balanced(kSlots, n) at epoch 2.
  void StartCluster(int n) {
    for (int i = 0; i < n; ++i) nodes_.push_back(Start(Options("ps" + std::to_string(i))));
    std::vector<std::string> addresses;
    for (const Node& node : nodes_) addresses.push_back(node.address);
    map_ = ShardMap::Balanced(kSlots, addresses, /*epoch=*/2);
    for (int i = 0; i < n; ++i) ASSERT_TRUE(SetMap(i, *map_, i).ok());
  }

  // Adds server `name` in join mode: it owns nothing until a map names it.
  void AddJoiningServer(const std::string& name) {
    ps::PsServerOptions o = Options(name);
    o.join = true;
    nodes_.push_back(Start(std::move(o)));
  }

  grpc::Status SetMap(int node, const ShardMap& map, uint32_t self) {
    v1::SetShardMapRequest request;
    *request.mutable_map() = map.ToProto();
    request.set_self_index(self);
    return SetMapProto(node, request);
  }
  grpc::Status SetMapProto(int node, const v1::SetShardMapRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineFromNow(absl::Seconds(10)));
    v1::SetShardMapResponse response;
    return nodes_[node].stub->SetShardMap(&context, request, &response);
  }

  absl::StatusOr<v1::StatsResponse> Stats(int node) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineFromNow(absl::Seconds(10)));
    v1::StatsResponse response;
    SS_RETURN_IF_ERROR(FromGrpcStatus(nodes_[node].stub->Stats(&context, {}, &response)));
    return response;
  }

  // The addresses of the first n servers.
  std::vector<std::string> Addresses(int n) const {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(nodes_[i].address);
    return out;
  }
  // The rows server `node` holds, by value checksum.
  uint64_t ValueChecksumOf(int node) {
    auto stats = Stats(node);
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? stats->value_checksum() : 0;
  }

  std::unique_ptr<ps::PsClient> Client() {
    ps::PsClientOptions options;
    options.rpc_deadline = absl::Seconds(10);
    options.backoff_base = absl::Milliseconds(1);
    options.backoff_max = absl::Milliseconds(50);
    auto client = ps::PsClient::Create(*map_, kDim, kTables, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Unique random ids per table.
  std::vector<model::TableRows> RandomIds(int per_table, uint64_t range) {
    std::vector<model::TableRows> rows(kTables);
    for (auto& r : rows) {
      std::set<uint64_t> ids;
      while (static_cast<int>(ids.size()) < per_table) ids.insert(rng_() % range);
      r.ids.assign(ids.begin(), ids.end());
      std::shuffle(r.ids.begin(), r.ids.end(), rng_);
    }
    return rows;
  }
  std::vector<model::TableRows> RandomGrads(std::vector<model::TableRows> rows) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& r : rows) {
      r.values.resize(r.ids.size() * kDim);
      for (float& v : r.values) v = u(rng_);
    }
    return rows;
  }

  // Looks up `ids` through `store` and through the oracle; expects equality.
  void ExpectMatchesOracle(model::EmbeddingStore& store, std::vector<model::TableRows> ids) {
    std::vector<model::TableRows> expected = ids;
    ASSERT_TRUE(oracle_.Lookup(expected).ok());
    absl::Status s = store.Lookup(ids);
    ASSERT_TRUE(s.ok()) << s;
    for (int t = 0; t < kTables; ++t) {
      ASSERT_EQ(ids[t].values.size(), expected[t].values.size());
      for (size_t k = 0; k < ids[t].values.size(); ++k) {
        ASSERT_NEAR(ids[t].values[k], expected[t].values[k], 1e-6)
            << "table " << t << " id " << ids[t].ids[k / kDim] << " element " << k % kDim;
      }
    }
  }

  // Pushes through `client` and the oracle.
  void Push(ps::PsClient& client, const std::vector<model::TableRows>& grads) {
    absl::Status s = client.Push(grads);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(oracle_.Push(grads).ok());
  }

  // Every id pushed so far, for intactness checks.
  std::vector<model::TableRows> Touched() const {
    std::vector<model::TableRows> rows(kTables);
    for (const auto& [key, unused] : touched_) rows[key.first].ids.push_back(key.second);
    return rows;
  }
  void Remember(const std::vector<model::TableRows>& rows) {
    for (int t = 0; t < kTables; ++t) {
      for (uint64_t id : rows[t].ids) touched_[{t, id}] = true;
    }
  }

  // A fresh client still gets correct answers for everything stored.
  void ExpectServingAndIntact() {
    std::unique_ptr<ps::PsClient> fresh = Client();
    ASSERT_NE(fresh, nullptr);
    ExpectMatchesOracle(*fresh, Touched());
  }

  // Seeds every server with data through `client`: `pushes` pushes of
  // `per_table` random rows per table, remembered and mirrored in the oracle.
  void Load(ps::PsClient& client, int pushes, int per_table) {
    for (int i = 0; i < pushes; ++i) {
      auto grads = RandomGrads(RandomIds(per_table, kBuckets));
      Remember(grads);
      Push(client, grads);
    }
  }
  // The same through a fresh client.
  void Load(int pushes, int per_table) {
    std::unique_ptr<ps::PsClient> client = Client();
    ASSERT_NE(client, nullptr);
    Load(*client, pushes, per_table);
  }

  testing::ScratchDir dir_;
  std::mt19937_64 rng_{42};
  model::LocalEmbeddingStore oracle_{
      model::LocalStoreOptions{.dim = kDim, .tables = Tables(), .optimizer = {}, .seed = 1}};
  std::vector<Node> nodes_;
  std::optional<ShardMap> map_;
  std::map<std::pair<int, uint64_t>, bool> touched_;
};

// --- Round trips -------------------------------------------------------------

TEST_F(PsServiceTest, LookupAndPushMatchTheLocalOracle) {
  StartCluster(1);
  std::unique_ptr<ps::PsClient> client = Client();
  // Never-pushed rows read as their deterministic initial values.
  ExpectMatchesOracle(*client, RandomIds(50, kBuckets));
  for (int round = 0; round < 20; ++round) {
    auto grads = RandomGrads(RandomIds(40, 200));  // Rows repeat across rounds.
    Remember(grads);
    Push(*client, grads);
    ExpectMatchesOracle(*client, RandomIds(60, 200));
  }
  ExpectMatchesOracle(*client, Touched());
}

TEST_F(PsServiceTest, EmptyCallsSendNothing) {
  StartCluster(1);
  std::unique_ptr<ps::PsClient> client = Client();
  std::vector<model::TableRows> rows(kTables);
  EXPECT_TRUE(client->Lookup(rows).ok());
  EXPECT_TRUE(client->Push(rows).ok());
  EXPECT_EQ(client->counters().rpcs, 0);
}

TEST_F(PsServiceTest, ClientValidatesShapes) {
  StartCluster(1);
  std::unique_ptr<ps::PsClient> client = Client();
  std::vector<model::TableRows> rows(kTables + 1);
  EXPECT_THAT(client->Lookup(rows), StatusIs(absl::StatusCode::kInvalidArgument, "4 tables"));
  std::vector<model::TableRows> grads(kTables);
  grads[1].ids = {1, 2};
  grads[1].values.assign(5, 0.0f);
  EXPECT_THAT(client->Push(grads),
              StatusIs(absl::StatusCode::kInvalidArgument, "table 1: 5 gradient values for 2 ids"));
}

TEST_F(PsServiceTest, TwoServersEachStoreExactlyTheRowsTheyOwn) {
  StartCluster(2);
  std::unique_ptr<ps::PsClient> client = Client();
  Load(*client, 10, 100);
  ExpectMatchesOracle(*client, Touched());
  std::vector<int64_t> expected(2, 0);
  for (const auto& [key, unused] : touched_) ++expected[map_->OwnerOf(key.first, key.second)];
  for (int i = 0; i < 2; ++i) {
    auto stats = Stats(i);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->rows_stored(), static_cast<uint64_t>(expected[i])) << "server " << i;
    EXPECT_EQ(stats->slots_owned(), kSlots / 2);
    EXPECT_EQ(stats->epoch(), 2u);
  }
  EXPECT_GT(expected[0], 0);
  EXPECT_GT(expected[1], 0);
  EXPECT_EQ(client->counters().wrong_owner, 0);
}

TEST_F(PsServiceTest, ConcurrentClientsAgreeWithTheOracle) {
  StartCluster(2);
  // Each thread owns a disjoint id range, so the final values do not depend
  // on the interleaving.
  constexpr int kThreads = 4;
  std::unique_ptr<ps::PsClient> client = Client();
  std::vector<std::vector<std::vector<model::TableRows>>> pushes(kThreads);
  for (int th = 0; th < kThreads; ++th) {
    for (int i = 0; i < 15; ++i) {
      auto grads = RandomGrads(RandomIds(30, 100));
      for (auto& r : grads) {
        for (uint64_t& id : r.ids) id = id * kThreads + th;
      }
      pushes[th].push_back(grads);
    }
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (const auto& grads : pushes[th]) {
        if (!client->Push(grads).ok()) ++failures;
        std::vector<model::TableRows> ids = grads;
        if (!client->Lookup(ids).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (const auto& per_thread : pushes) {
    for (const auto& grads : per_thread) {
      Remember(grads);
      ASSERT_TRUE(oracle_.Push(grads).ok());
    }
  }
  ExpectMatchesOracle(*client, Touched());
}

// --- Resharding ----------------------------------------------------------------

struct Exported {
  std::vector<v1::SlotChunk> chunks;  // data chunks, then the done chunk
  grpc::Status status;
};

// `track_changes` and `since`: ExportSlotsRequest's track_changes and
// changes_since.
Exported Export(v1::ParameterServer::Stub& stub, const std::vector<uint32_t>& slots,
                bool weights_only = false, bool packed = false, bool track_changes = false,
                const v1::ChangeCursor* since = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineFromNow(absl::Seconds(30)));
  v1::ExportSlotsRequest request;
  request.mutable_slots()->Add(slots.begin(), slots.end());
  request.set_weights_only(weights_only);
  request.set_packed_rows(packed);
  request.set_track_changes(track_changes);
  if (since != nullptr) *request.mutable_changes_since() = *since;
  auto reader = stub.ExportSlots(&context, request);
  Exported out;
  v1::SlotChunk chunk;
  while (reader->Read(&chunk)) out.chunks.push_back(chunk);
  out.status = reader->Finish();
  return out;
}

grpc::Status Import(v1::ParameterServer::Stub& stub, const std::vector<v1::SlotChunk>& chunks,
                    v1::ImportSlotsResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineFromNow(absl::Seconds(30)));
  auto writer = stub.ImportSlots(&context, response);
  for (const v1::SlotChunk& c : chunks) {
    if (!writer->Write(c)) break;  // The server finished early; Finish says why.
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status Drop(v1::ParameterServer::Stub& stub, const std::vector<uint32_t>& slots,
                  int64_t* dropped = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineFromNow(absl::Seconds(30)));
  v1::DropSlotsRequest request;
  request.mutable_slots()->Add(slots.begin(), slots.end());
  v1::DropSlotsResponse response;
  grpc::Status s = stub.DropSlots(&context, request, &response);
  if (dropped != nullptr) *dropped = static_cast<int64_t>(response.rows_dropped());
  return s;
}

// Export streams run on threads at export_nice, below the threads serving
// lookups and pushes: the Executor sets each of its threads' nice value.
TEST(ExecutorTest, RunsItsThreadsAtTheGivenNiceValue) {
  const int base = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  std::atomic<int> seen{-100};
  {
    ps::Executor executor(1, 19);
    executor.Schedule([&] { seen = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())); });
  }  // drained and joined
  EXPECT_EQ(seen, 19);
  EXPECT_EQ(ps::PsServiceOptions().export_nice, 10);
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())), base);  // the caller's is kept
}

// An ExportSlots stream's packed records, checked against each chunk's CRC
// and the end marker: rows and tombstones by key.
struct PackedStream {
  std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> rows;
  std::set<std::pair<uint32_t, uint64_t>> tombstones;
  v1::SlotChunk done;
};
PackedStream ReadPacked(const Exported& exported, int row_floats) {
  PackedStream out;
  uint64_t records = 0, checksum = 0;
  for (const v1::SlotChunk& chunk : exported.chunks) {
    if (chunk.done()) {
      out.done = chunk;
      continue;
    }
    const uint32_t crc = v1::PackedChunkCrc(chunk.packed_rows(), chunk.packed_tombstones());
    EXPECT_EQ(crc, chunk.packed_crc32());
    checksum += crc;
    const size_t n = chunk.packed_rows().size() / v1::PackedRowBytes(row_floats);
    for (size_t i = 0; i < n; ++i) {
      const v1::PackedRow row = v1::PackedRowAt(chunk.packed_rows(), row_floats, i);
      EXPECT_EQ(SlotOf(row.table, row.id, kSlots), chunk.slot());
      out.rows[{row.table, row.id}].assign(row.values.begin(), row.values.end());
    }
    const size_t t = chunk.packed_tombstones().size() / v1::PackedRowBytes(0);
    for (size_t i = 0; i < t; ++i) {
      const v1::PackedRow key = v1::PackedRowAt(chunk.packed_tombstones(), 0, i);
      EXPECT_EQ(SlotOf(key.table, key.id, kSlots), chunk.slot());
      out.tombstones.insert({key.table, key.id});
    }
    records += n + t;
  }
  EXPECT_TRUE(out.done.done());
  EXPECT_EQ(out.done.total_rows(), records);
  EXPECT_EQ(out.done.checksum(), checksum);
  return out;
}

// A weights-only packed stream that tracks changes: a delta with `since`.
Exported ExportChanges(v1::ParameterServer::Stub& stub, const std::vector<uint32_t>& slots,
                       const v1::ChangeCursor* since) {
  return Export(stub, slots, /*weights_only=*/true, /*packed=*/true, /*track_changes=*/true, since);
}

// A delta stream: after a full export that tracks changes, exactly the rows
// pushed since (with the values a full export then has) and tombstones for
// the rows evicted since, which a full export no longer has.
TEST_F(PsServiceTest, DeltaExportStreamsTheRowsChangedSinceTheCursorAndTombstones) {
  ps::PsServerOptions o = Options("ps0");
  o.store.max_rows = 40;
  o.eviction_interval = absl::Milliseconds(20);
  nodes_.push_back(Start(std::move(o)));
  map_ = ShardMap::Balanced(kSlots, Addresses(1), /*epoch=*/2);
  ASSERT_TRUE(SetMap(0, *map_, 0).ok());
  std::vector<uint32_t> all(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) all[s] = s;
  const int row_floats = kDim;  // weights only

  Load(1, 10);  // 30 rows
  Exported base = ExportChanges(*nodes_[0].stub, all, nullptr);
  ASSERT_TRUE(base.status.ok()) << base.status.error_message();
  const PackedStream full = ReadPacked(base, row_floats);
  ASSERT_TRUE(full.done.has_cursor());
  const v1::ChangeCursor cursor = full.done.cursor();

  // 60 more rows: the eviction loop keeps 40, so old rows and new go.
  std::vector<model::TableRows> grads = RandomGrads(RandomIds(20, kBuckets));
  std::unique_ptr<ps::PsClient> client = Client();
  Push(*client, grads);
  for (int wait = 0; wait < 500 && Stats(0)->rows_stored() > 40; ++wait) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_LE(Stats(0)->rows_stored(), 40u);

  Exported delta = ExportChanges(*nodes_[0].stub, all, &cursor);
  ASSERT_TRUE(delta.status.ok()) << delta.status.error_message();
  const PackedStream changes = ReadPacked(delta, row_floats);
  const PackedStream now = ReadPacked(ExportChanges(*nodes_[0].stub, all, nullptr), row_floats);
  for (uint32_t t = 0; t < kTables; ++t) {
    for (uint64_t id : grads[t].ids) {
      EXPECT_TRUE(changes.rows.contains({t, id}) || changes.tombstones.contains({t, id}))
          << "pushed row (" << t << ", " << id << ") is in neither";
    }
  }
  EXPECT_FALSE(changes.tombstones.empty());
  for (const auto& key : changes.tombstones) EXPECT_FALSE(now.rows.contains(key));
  for (const auto& [key, values] : changes.rows) EXPECT_EQ(now.rows.at(key), values);
  // Every stored row not in the delta is as the base had it.
  for (const auto& [key, values] : now.rows) {
    if (!changes.rows.contains(key)) {
      EXPECT_EQ(full.rows.at(key), values);
    }
  }
  ASSERT_TRUE(changes.done.has_cursor());
  EXPECT_EQ(changes.done.cursor().incarnation(), cursor.incarnation());
  EXPECT_GT(changes.done.cursor().generation(), cursor.generation());

  // A cursor the server does not know, and a delta without packed rows.
  v1::ChangeCursor unknown = cursor;
  unknown.set_incarnation(cursor.incarnation() + 1);
  Exported refused = ExportChanges(*nodes_[0].stub, all, &unknown);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("restarted"));
  grpc::ClientContext context;
  v1::ExportSlotsRequest request;
  request.add_slots(0);
  *request.mutable_changes_since() = cursor;
  v1::SlotChunk chunk;
  auto reader = nodes_[0].stub->ExportSlots(&context, request);
  while (reader->Read(&chunk)) {
  }
  const grpc::Status unpacked = reader->Finish();
  EXPECT_EQ(unpacked.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unpacked.error_message(), HasSubstr("changes_since"));
}

TEST_F(PsServiceTest, ExportStreamsEveryRowOnceWithItsChecksum) {
  StartCluster(1);
  Load(5, 80);
  auto before = Stats(0);
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<uint32_t> all(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) all[s] = s;

  Exported exported = Export(*nodes_[0].stub, all);
  ASSERT_TRUE(exported.status.ok()) << exported.status.error_message();
  ASSERT_FALSE(exported.chunks.empty());
  const v1::SlotChunk& done = exported.chunks.back();
  ASSERT_TRUE(done.done());
  std::set<std::pair<uint32_t, uint64_t>> seen;
  uint64_t checksum = 0;
  for (size_t c = 0; c + 1 < exported.chunks.size(); ++c) {
    const v1::SlotChunk& chunk = exported.chunks[c];
    EXPECT_FALSE(chunk.done());
    EXPECT_LE(chunk.rows_size(), 7);
    for (const v1::SlotRow& row : chunk.rows()) {
      EXPECT_TRUE(seen.insert({row.table(), row.id()}).second) << "row sent twice";
      EXPECT_EQ(SlotOf(row.table(), row.id(), kSlots), chunk.slot());
      ASSERT_EQ(row.values_size(), 2 * kDim);  // Adagrad: values + accumulator.
      checksum += RowValueHash(row.table(), row.id(),
                               std::span<const float>(row.values().data(), row.values_size()));
    }
  }
  EXPECT_EQ(seen.size(), touched_.size());
  EXPECT_EQ(done.total_rows(), seen.size());
  EXPECT_EQ(done.checksum(), checksum);
  // The stream checksum uses the store's definition: it equals Stats'.
  EXPECT_EQ(done.checksum(), before->value_checksum());
  EXPECT_EQ(done.total_rows(), before->rows_stored());
}

// An export's write-back of the cached rows (seconds of RocksDB inserts on a
// big cache) runs on the export threads, below lookups and pushes; only the
// snapshot's last, locked write-back of rows pushed since runs at normal
// priority. Every pushed row still reaches the stream.
TEST_F(PsServiceTest, AnExportWritesCachedRowsBackAtTheExportPriority) {
  std::mutex mu;
  std::set<int> nice_values;
  ps::PsServerOptions o = Options("ps0");
  o.store.TEST_flush_hook = [&] {
    std::lock_guard<std::mutex> lock(mu);
    nice_values.insert(getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())));
  };
  nodes_.push_back(Start(std::move(o)));
  map_ = ShardMap::Balanced(kSlots, {nodes_[0].address}, /*epoch=*/2);
  ASSERT_TRUE(SetMap(0, *map_, 0).ok());
  Load(5, 80);  // Dirty rows in the cache, not yet in RocksDB.
  std::vector<uint32_t> all(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) all[s] = s;
  Exported exported = Export(*nodes_[0].stub, all);
  ASSERT_TRUE(exported.status.ok()) << exported.status.error_message();
  EXPECT_EQ(exported.chunks.back().total_rows(), touched_.size());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(nice_values, (std::set<int>{ps::PsServiceOptions().export_nice}));
}

// A model export without optimizer state asks for the weights alone: each
// row is the first dim floats of the full row, and the end marker's checksum
// covers exactly what was sent.
TEST_F(PsServiceTest, WeightsOnlyExportSendsEachRowsEmbeddingWithoutItsState) {
  StartCluster(1);
  Load(5, 80);
  std::vector<uint32_t> all(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) all[s] = s;
  const Exported full = Export(*nodes_[0].stub, all);
  const Exported weights = Export(*nodes_[0].stub, all, /*weights_only=*/true);
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  ASSERT_TRUE(weights.status.ok()) << weights.status.error_message();
  std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> full_rows;
  for (const v1::SlotChunk& chunk : full.chunks) {
    for (const v1::SlotRow& row : chunk.rows()) {
      full_rows[{row.table(), row.id()}].assign(row.values().begin(), row.values().end());
    }
  }
  int64_t rows = 0;
  uint64_t checksum = 0;
  for (const v1::SlotChunk& chunk : weights.chunks) {
    for (const v1::SlotRow& row : chunk.rows()) {
      ASSERT_EQ(row.values_size(), kDim);
      const std::vector<float>& whole = full_rows.at({row.table(), row.id()});
      EXPECT_TRUE(std::equal(row.values().begin(), row.values().end(), whole.begin()));
      checksum += RowValueHash(row.table(), row.id(),
                               std::span<const float>(row.values().data(), row.values_size()));
      ++rows;
    }
  }
  EXPECT_EQ(rows, static_cast<int64_t>(full_rows.size()));
  EXPECT_EQ(weights.chunks.back().total_rows(), static_cast<uint64_t>(rows));
  EXPECT_EQ(weights.chunks.back().checksum(), checksum);
  EXPECT_NE(checksum, full.chunks.back().checksum());
}

// Packed rows are the same rows as row messages, with or without the
// optimizer state; each chunk carries its CRC, and the end marker their sum.
TEST_F(PsServiceTest, PackedExportCarriesTheSameRowsAsRowMessages) {
  StartCluster(1);
  Load(5, 80);
  std::vector<uint32_t> all(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) all[s] = s;
  for (bool weights_only : {false, true}) {
    SCOPED_TRACE(weights_only ? "weights only" : "whole rows");
    const size_t floats = weights_only ? kDim : 2 * kDim;
    using Rows = std::map<std::pair<uint32_t, uint64_t>, std::vector<float>>;
    Rows messages, packed;
    const Exported plain = Export(*nodes_[0].stub, all, weights_only);
    const Exported records = Export(*nodes_[0].stub, all, weights_only, /*packed=*/true);
    ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
    ASSERT_TRUE(records.status.ok()) << records.status.error_message();
    for (const v1::SlotChunk& chunk : plain.chunks) {
      EXPECT_TRUE(chunk.packed_rows().empty());
      for (const v1::SlotRow& row : chunk.rows()) {
        messages[{row.table(), row.id()}].assign(row.values().begin(), row.values().end());
      }
    }
    uint64_t crc_sum = 0;
    for (const v1::SlotChunk& chunk : records.chunks) {
      EXPECT_EQ(chunk.rows_size(), 0);
      EXPECT_EQ(chunk.packed_crc32(), v1::PackedRowsCrc(chunk.packed_rows()));
      crc_sum += chunk.packed_crc32();
      ASSERT_EQ(chunk.packed_rows().size() % v1::PackedRowBytes(floats), 0u);
      const size_t n = chunk.packed_rows().size() / v1::PackedRowBytes(floats);
      EXPECT_LE(n, 7u);  // export_chunk_rows
      for (size_t i = 0; i < n; ++i) {
        const v1::PackedRow row = v1::PackedRowAt(chunk.packed_rows(), floats, i);
        EXPECT_EQ(SlotOf(row.table, row.id, kSlots), chunk.slot());
        EXPECT_TRUE(packed
                        .emplace(std::pair{row.table, row.id},
                                 std::vector<float>(row.values.begin(), row.values.end()))
                        .second);
      }
    }
    EXPECT_EQ(packed.size(), touched_.size());
    EXPECT_TRUE(packed == messages);
    EXPECT_EQ(records.chunks.back().total_rows(), plain.chunks.back().total_rows());
    EXPECT_EQ(records.chunks.back().checksum(), crc_sum);
  }
}

// Rows exported from one server and imported into an empty one arrive whole,
// as row messages and as packed rows (a warm start's). A packed chunk whose
// CRC disagrees with its rows, that holds part of a record, or that also
// carries row messages is refused naming the chunk, and nothing of its
// stream is stored.
TEST_F(PsServiceTest, ExportImportRoundTripPreservesEveryRowAndChecksum) {
  StartCluster(1);
  Load(5, 80);
  auto source = Stats(0);
  ASSERT_TRUE(source.ok());
  std::vector<uint32_t> all(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) all[s] = s;

  for (const bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed rows" : "row messages");
    // Owns everything, empty.
    nodes_.push_back(Start(Options(packed ? "packed-target" : "target")));
    const int target = static_cast<int>(nodes_.size()) - 1;
    const Exported exported = Export(*nodes_[0].stub, all, /*weights_only=*/false, packed);
    ASSERT_TRUE(exported.status.ok()) << exported.status.error_message();
    enum Bad { kCrc, kPartialRecord, kBothForms };
    for (const Bad bad : {kCrc, kPartialRecord, kBothForms}) {
      if (!packed) break;
      std::vector<v1::SlotChunk> chunks = exported.chunks;
      if (bad == kCrc) chunks[0].set_packed_crc32(chunks[0].packed_crc32() ^ 1);
      if (bad == kPartialRecord) chunks[0].mutable_packed_rows()->pop_back();
      if (bad == kBothForms) chunks[0].add_rows()->set_table(0);
      v1::ImportSlotsResponse response;
      const grpc::Status s = Import(*nodes_[target].stub, chunks, &response);
      EXPECT_EQ(s.error_code(),
                bad == kCrc ? grpc::StatusCode::DATA_LOSS : grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(s.error_message(),
                  HasSubstr(bad == kCrc             ? "chunk 0.packed_crc32"
                            : bad == kPartialRecord ? "chunk 0.packed_rows"
                                                    : "both rows and packed_rows"));
      auto stored = Stats(target);
      ASSERT_TRUE(stored.ok());
      EXPECT_EQ(stored->rows_stored(), 0u);
    }

    v1::ImportSlotsResponse response;
    const grpc::Status s = Import(*nodes_[target].stub, exported.chunks, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.rows(), source->rows_stored());
    EXPECT_EQ(response.checksum(), exported.chunks.back().checksum());
    auto stored = Stats(target);
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(stored->rows_stored(), source->rows_stored());
    EXPECT_EQ(stored->key_checksum(), source->key_checksum());
    EXPECT_EQ(stored->value_checksum(), source->value_checksum());
  }
}

// A warm start from an export without optimizer state sends the weights
// alone (packed_weights_only): the server stores each row with zero Adagrad
// state. A weights-only chunk cut mid-record is refused naming the chunk and
// the record size it expected, and nothing is stored.
TEST_F(PsServiceTest, WeightsOnlyPackedRowsAreStoredWithZeroOptimizerState) {
  StartCluster(1);
  Load(5, 80);
  std::vector<uint32_t> all(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) all[s] = s;
  Exported exported = Export(*nodes_[0].stub, all, /*weights_only=*/true, /*packed=*/true);
  ASSERT_TRUE(exported.status.ok()) << exported.status.error_message();
  // What the target must hold: each row's weights, then kDim zeros.
  uint64_t want_values = 0;
  for (v1::SlotChunk& chunk : exported.chunks) {
    chunk.set_packed_weights_only(true);
    const size_t n = chunk.packed_rows().size() / v1::PackedRowBytes(kDim);
    for (size_t i = 0; i < n; ++i) {
      const v1::PackedRow row = v1::PackedRowAt(chunk.packed_rows(), kDim, i);
      std::vector<float> stored(row.values.begin(), row.values.end());
      stored.resize(2 * kDim, 0.0f);
      want_values += RowValueHash(row.table, row.id, stored);
    }
  }
  auto source = Stats(0);
  ASSERT_TRUE(source.ok());
  nodes_.push_back(Start(Options("target")));

  std::vector<v1::SlotChunk> cut = exported.chunks;
  cut[0].mutable_packed_rows()->resize(cut[0].packed_rows().size() - 4);
  cut[0].set_packed_crc32(v1::PackedRowsCrc(cut[0].packed_rows()));
  v1::ImportSlotsResponse response;
  grpc::Status s = Import(*nodes_[1].stub, cut, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr(absl::StrCat("chunk 0.packed_rows: ", cut[0].packed_rows().size(),
                                     " bytes, not whole records of ", v1::PackedRowBytes(kDim),
                                     " bytes (dim 4, weights only)")));
  auto stored = Stats(1);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->rows_stored(), 0u);

  s = Import(*nodes_[1].stub, exported.chunks, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.rows(), source->rows_stored());
  stored = Stats(1);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->rows_stored(), source->rows_stored());
  EXPECT_EQ(stored->key_checksum(), source->key_checksum());
  EXPECT_EQ(stored->value_checksum(), want_values);
  EXPECT_NE(stored->value_checksum(), source->value_checksum());  // the source's state is not 0
}

// The redirect: a client holding the epoch-2 map keeps working while half of
// server 0's slots move to server 1 (map epoch 3 on both, export, import,
// drop), recovering transparently through WRONG_OWNER and a map refresh.
TEST_F(PsServiceTest, ClientFollowsAMovedSlotThroughWrongOwner) {
  StartCluster(2);
  std::unique_ptr<ps::PsClient> client = Client();
  Load(*client, 8, 100);
  auto before0 = Stats(0);
  auto before1 = Stats(1);
  ASSERT_TRUE(before0.ok() && before1.ok());

  // Move every other slot of server 0 to server 1.
  std::vector<SlotMove> moves;
  std::vector<uint32_t> moved;
  for (uint32_t slot : map_->SlotsOwnedBy(0)) {
    if (slot % 2 == 0) {
      moves.push_back({.slot = slot, .from = 0, .to = 1});
      moved.push_back(slot);
    }
  }
  auto next = map_->WithMoves(moves, map_->addresses());
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ(next->epoch(), 3u);
  ASSERT_TRUE(SetMap(0, *next, 0).ok());
  ASSERT_TRUE(SetMap(1, *next, 1).ok());
  Exported exported = Export(*nodes_[0].stub, moved);
  ASSERT_TRUE(exported.status.ok()) << exported.status.error_message();
  v1::ImportSlotsResponse imported;
  grpc::Status s = Import(*nodes_[1].stub, exported.chunks, &imported);
  ASSERT_TRUE(s.ok()) << s.error_message();
  int64_t dropped = 0;
  s = Drop(*nodes_[0].stub, moved, &dropped);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(static_cast<uint64_t>(dropped), imported.rows());
  EXPECT_GT(dropped, 0);

  // Every row arrived exactly once: totals and checksums add up.
  auto after0 = Stats(0);
  auto after1 = Stats(1);
  ASSERT_TRUE(after0.ok() && after1.ok());
  EXPECT_EQ(after0->rows_stored() + after1->rows_stored(),
            before0->rows_stored() + before1->rows_stored());
  EXPECT_EQ(after0->key_checksum() + after1->key_checksum(),
            before0->key_checksum() + before1->key_checksum());
  EXPECT_EQ(after0->value_checksum() + after1->value_checksum(),
            before0->value_checksum() + before1->value_checksum());
  EXPECT_EQ(after1->slots_owned(), kSlots / 2 + moved.size());

  // The client still routes by epoch 2, and recovers.
  ASSERT_EQ(client->shard_map()->epoch(), 2u);
  ExpectMatchesOracle(*client, Touched());
  EXPECT_GT(client->counters().wrong_owner, 0);
  EXPECT_EQ(client->shard_map()->epoch(), 3u);
  EXPECT_EQ(client->counters().map_refreshes, 1);
  // Pushes route by the new map too, and stay correct.
  auto grads = RandomGrads(RandomIds(100, kBuckets));
  Remember(grads);
  Push(*client, grads);
  ExpectMatchesOracle(*client, Touched());

  // A second stale client recovers on a push as well (rejected before applying).
  map_ = ShardMap::Balanced(kSlots, map_->addresses(), 2);
  std::unique_ptr<ps::PsClient> stale = Client();
  grads = RandomGrads(RandomIds(100, kBuckets));
  Remember(grads);
  Push(*stale, grads);
  EXPECT_GT(stale->counters().wrong_owner, 0);
  map_ = *next;
  ExpectMatchesOracle(*client, Touched());
}

// --- Live resharding (ps/client/resharder.h) --------------------------------------------

TEST_F(PsServiceTest, JoinedServerOwnsNothingUntilAMapArrives) {
  AddJoiningServer("joined");
  grpc::ClientContext context;
  v1::LookupRequest request;
  v1::TableRows* t = request.add_tables();
  t->set_table(0);
  t->add_ids(7);
  v1::LookupResponse response;
  grpc::Status s = nodes_[0].stub->Lookup(&context, request, &response);
  EXPECT_TRUE(ps::GetWrongOwner(s).has_value()) << s.error_message();
  auto stats = Stats(0);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->slots_owned(), 0u);
}

// With nothing training, a reshard keeps every row exactly: the cluster's row
// count, key checksum and value checksum are equal before and after, 2 -> 3 -> 2.
TEST_F(PsServiceTest, ReshardWithTrainingPausedKeepsEveryRowAndValue) {
  StartCluster(2);
  Load(6, 60);
  AddJoiningServer("ps2");
  ps::ReshardOptions options{.slots_per_step = 8};

  auto out = ps::Reshard(Addresses(2), Addresses(3), options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->slots_moved, kSlots / 3);  // 64 -> 22/21/21: the new one gets 21.
  EXPECT_EQ(out->steps, 3);
  EXPECT_GT(out->moved_before.rows, 0);
  EXPECT_EQ(out->moved_before, out->moved_after);
  EXPECT_EQ(out->cluster_before, out->cluster_after);
  EXPECT_EQ(out->cluster_before.rows, static_cast<int64_t>(touched_.size()));
  EXPECT_EQ(out->epoch_after, out->epoch_before + 1 + 3);
  uint32_t owned = 0;
  for (int i = 0; i < 3; ++i) {
    auto stats = Stats(i);
    ASSERT_TRUE(stats.ok());
    EXPECT_GE(stats->slots_owned(), 21u);
    owned += stats->slots_owned();
    EXPECT_EQ(stats->epoch(), out->epoch_after);
  }
  EXPECT_EQ(owned, kSlots);

  auto in = ps::Reshard(Addresses(3), Addresses(2), options);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->slots_moved, kSlots / 3);
  EXPECT_EQ(in->cluster_before, in->cluster_after);
  EXPECT_EQ(in->cluster_after, out->cluster_before);
  auto drained = Stats(2);
  ASSERT_TRUE(drained.ok());
  EXPECT_EQ(drained->rows_stored(), 0u);
  EXPECT_EQ(drained->slots_owned(), 0u);

  grpc::ClientContext context;
  v1::ShardMap got;
  ASSERT_TRUE(nodes_[0].stub->GetShardMap(&context, {}, &got).ok());
  auto final_map = ShardMap::FromProto(got);
  ASSERT_TRUE(final_map.ok());
  EXPECT_EQ(final_map->num_servers(), 2);
  map_ = *final_map;
  ExpectServingAndIntact();
}

// A reshard asked to stop (the operator stopping) ends between steps: every
// server on the same map, nothing frozen; a second Reshard from that map's
// servers moves the rest, every row kept.
TEST_F(PsServiceTest, AStoppedReshardEndsBetweenStepsAndAnotherFinishesIt) {
  StartCluster(2);
  Load(6, 60);
  AddJoiningServer("ps2");
  std::atomic<int> steps{0};  // Read by Reshard's stop watcher too.
  ps::ReshardOptions options{.slots_per_step = 8};
  options.progress = [&](int64_t, int64_t, uint64_t) { ++steps; };
  options.stop_requested = [&] { return steps == 1; };
  auto stopped = ps::Reshard(Addresses(2), Addresses(3), options);
  EXPECT_THAT(stopped, StatusIs(absl::StatusCode::kCancelled, "with 8 of 21 slots moved"));
  std::optional<ShardMap> agreed;
  for (int i = 0; i < 3; ++i) {
    auto map = ps::FetchShardMap(nodes_[i].address);
    ASSERT_TRUE(map.ok()) << map.status();
    if (agreed.has_value()) {
      EXPECT_EQ(map->epoch(), agreed->epoch()) << "server " << i;
    }
    agreed = *map;
  }
  EXPECT_EQ(agreed->num_servers(), 3);  // The scale-out's map, one step done.
  EXPECT_EQ(agreed->SlotsOwnedBy(2).size(), 8u);

  options.stop_requested = nullptr;
  auto rest = ps::Reshard(agreed->addresses(), Addresses(3), options);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->slots_moved, kSlots / 3 - 8);
  auto total = ps::ClusterChecksum(Addresses(3));
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(total->rows, static_cast<int64_t>(touched_.size()));
  auto final_map = ps::FetchShardMap(nodes_[0].address);
  ASSERT_TRUE(final_map.ok()) << final_map.status();
  map_ = *final_map;
  ExpectServingAndIntact();
}

// The live case: a client pushes without pause while slots move 2 -> 3 -> 2.
// Every update lands exactly once (the rows equal the oracle's, which saw the
// same pushes in the same order), and the client never sees an error.
TEST_F(PsServiceTest, ReshardWhileTrainingLosesNoUpdate) {
  StartCluster(2);
  Load(3, 60);
  AddJoiningServer("ps2");

  std::unique_ptr<ps::PsClient> client = Client();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> pushes{0};
  absl::Status pusher_status;  // Read after the join.
  std::atomic<bool> pusher_failed{false};
  std::thread pusher([&] {
    while (!stop.load()) {
      auto grads = RandomGrads(RandomIds(20, kBuckets));
      std::vector<model::TableRows> ids = grads;
      absl::Status s = client->Lookup(ids);
      if (s.ok()) s = client->Push(grads);
      if (!s.ok()) {
        pusher_status = s;
        pusher_failed = true;
        return;
      }
      Remember(grads);
      (void)oracle_.Push(grads);
      pushes.fetch_add(1);
    }
  });
  auto wait_for_pushes = [&](int64_t n) {
    const int64_t target = pushes.load() + n;
    while (pushes.load() < target && !pusher_failed.load()) absl::SleepFor(absl::Milliseconds(1));
  };
  wait_for_pushes(20);
  ps::ReshardOptions options{.slots_per_step = 4};
  const int64_t before_out = pushes.load();
  auto out = ps::Reshard(Addresses(2), Addresses(3), options);
  const int64_t during_out = pushes.load() - before_out;
  wait_for_pushes(20);
  const int64_t before_in = pushes.load();
  auto in = ps::Reshard(Addresses(3), Addresses(2), options);
  const int64_t during_in = pushes.load() - before_in;
  wait_for_pushes(20);
  stop = true;
  pusher.join();
  ASSERT_TRUE(pusher_status.ok()) << pusher_status;
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(out->moved_before, out->moved_after);
  EXPECT_EQ(in->moved_before, in->moved_after);
  EXPECT_EQ(out->steps, 6);
  // Training really ran across both reshards, through the redirects.
  EXPECT_GT(during_out + during_in, 0);
  EXPECT_GT(client->counters().wrong_owner, 0);

  auto drained = Stats(2);
  ASSERT_TRUE(drained.ok());
  EXPECT_EQ(drained->rows_stored(), 0u);
  // The drained server goes away; the client keeps working without it.
  nodes_[2].server->Shutdown();
  Load(*client, 3, 20);
  ExpectMatchesOracle(*client, Touched());
  map_ = ShardMap::Balanced(kSlots, Addresses(2), 1);  // Stale: a fresh client follows redirects.
  ExpectServingAndIntact();
  auto total = ps::ClusterChecksum(Addresses(2));
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(total->rows, static_cast<int64_t>(touched_.size()));
}

// A client idle through a scale-in still routes to the drained server, which
// is gone: it refreshes its map from the others instead of failing.
TEST_F(PsServiceTest, ClientIdleThroughAScaleInFindsTheNewMap) {
  StartCluster(2);
  Load(3, 40);
  AddJoiningServer("ps2");
  ASSERT_TRUE(ps::Reshard(Addresses(2), Addresses(3), {}).ok());
  auto three = ps::FetchShardMap(nodes_[0].address);
  ASSERT_TRUE(three.ok());
  ps::PsClientOptions options;
  options.rpc_deadline = absl::Seconds(1);
  options.backoff_base = absl::Milliseconds(1);
  auto client = ps::PsClient::Create(*three, kDim, kTables, options);
  ASSERT_TRUE(client.ok());
  ExpectMatchesOracle(**client, Touched());  // Routes by the 3-server map.

  ASSERT_TRUE(ps::Reshard(Addresses(3), Addresses(2), {}).ok());
  nodes_[2].server->Shutdown();
  auto grads = RandomGrads(RandomIds(30, kBuckets));
  Remember(grads);
  Push(**client, grads);
  ExpectMatchesOracle(**client, Touched());
  EXPECT_EQ((*client)->shard_map()->num_servers(), 2);
  EXPECT_GE((*client)->counters().map_refreshes, 1);
}

// A move that never completes (the target never gets the map) is waited for
// up to reshard_wait, not forever, and not just max_retries quick attempts.
TEST_F(PsServiceTest, ClientWaitsForAStuckMoveOnlyUpToReshardWait) {
  StartCluster(2);
  Load(2, 30);
  std::vector<SlotMove> moves;
  for (uint32_t slot : map_->SlotsOwnedBy(0)) moves.push_back({.slot = slot, .from = 0, .to = 1});
  auto next = map_->WithMoves(moves, map_->addresses());
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(SetMap(0, *next, 0).ok());  // Server 0 lets go; server 1 never takes over.
  ps::PsClientOptions options;
  options.max_retries = 2;
  options.backoff_base = absl::Milliseconds(5);
  options.backoff_max = absl::Milliseconds(20);
  options.reshard_wait = absl::Milliseconds(600);
  auto client = ps::PsClient::Create(*map_, kDim, kTables, options);
  ASSERT_TRUE(client.ok());
  const absl::Time start = absl::Now();
  std::vector<model::TableRows> rows = Touched();
  const absl::Status s = (*client)->Lookup(rows);
  const absl::Duration waited = absl::Now() - start;
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition, "still redirected after"));
  EXPECT_GE(waited, absl::Milliseconds(600));  // More than 2 retries' worth.
  EXPECT_LT(waited, absl::Seconds(5));
}

TEST_F(PsServiceTest, ReshardRefusesWhatWouldLoseOrMixData) {
  StartCluster(2);
  Load(2, 30);
  // A new server that already holds rows.
  nodes_.push_back(Start(Options("full")));
  {
    auto client =
        ps::PsClient::Create(ShardMap::Balanced(kSlots, {nodes_[2].address}, 1), kDim, kTables, {});
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->Push(RandomGrads(RandomIds(5, kBuckets))).ok());
  }
  EXPECT_THAT(ps::Reshard(Addresses(2), Addresses(3), {}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "already stores"));
  // A list that neither extends nor prefixes the current one.
  EXPECT_THAT(ps::Reshard(Addresses(2), {nodes_[1].address, nodes_[0].address}, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "must extend"));
  // Servers at different epochs: an interrupted reshard; nothing moves.
  auto newer = map_->WithMoves({}, map_->addresses());
  ASSERT_TRUE(newer.ok());
  ASSERT_TRUE(SetMap(0, *newer, 0).ok());
  const uint64_t checksum = ValueChecksumOf(0);
  EXPECT_THAT(ps::Reshard(Addresses(2), {nodes_[0].address}, {}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "disagree"));
  EXPECT_EQ(ValueChecksumOf(0), checksum);
}

// An operator that died in the middle of a scale-out step left the step's
// sources frozen at the new epoch, the others at the old one, and part of
// the rows copied to the new server. RepairShardMaps gives the slots back to
// their sources, removes the partial copy, and a new Reshard completes: every
// row ends up on exactly one server, unchanged.
TEST_F(PsServiceTest, RepairAfterAnInterruptedStepThenReshardKeepsEveryRowOnce) {
  StartCluster(2);
  Load(6, 60);
  AddJoiningServer("ps2");
  auto before = ps::ClusterChecksum(Addresses(3));
  ASSERT_TRUE(before.ok()) << before.status();

  // The interrupted Reshard: the servers learn the new one, then the first
  // step freezes its sources and copies half of its slots.
  auto wide = map_->WithMoves({}, Addresses(3));
  ASSERT_TRUE(wide.ok());
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(SetMap(i, *wide, i).ok());
  std::vector<SlotMove> moves = wide->PlanRebalance(3);
  ASSERT_GE(moves.size(), 8u);
  moves.resize(8);
  auto next = wide->WithMoves(moves, wide->addresses());
  ASSERT_TRUE(next.ok());
  for (const auto& m : moves) ASSERT_TRUE(SetMap(m.from, *next, m.from).ok());
  int64_t copied = 0;
  for (size_t k = 0; k < moves.size() / 2; ++k) {
    grpc::ClientContext export_context, import_context;
    v1::ExportSlotsRequest request;
    request.add_slots(moves[k].slot);
    auto reader = nodes_[moves[k].from].stub->ExportSlots(&export_context, request);
    v1::ImportSlotsResponse imported;
    auto writer = nodes_[2].stub->ImportSlots(&import_context, &imported);
    v1::SlotChunk chunk;
    while (reader->Read(&chunk)) {
      chunk.set_incoming(true);
      copied += chunk.rows_size();
      ASSERT_TRUE(writer->Write(chunk));
    }
    ASSERT_TRUE(reader->Finish().ok());
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
  }
  ASSERT_GT(copied, 0);
  EXPECT_THAT(ps::Reshard(Addresses(3), Addresses(3), {}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "disagree"));

  auto repair = ps::RepairShardMaps(Addresses(3));
  ASSERT_TRUE(repair.ok()) << repair.status();
  EXPECT_TRUE(repair->repaired);
  EXPECT_EQ(repair->slots_returned, 8);
  EXPECT_EQ(repair->rows_dropped, copied);
  EXPECT_EQ(repair->map.epoch(), next->epoch() + 1);
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    EXPECT_EQ(repair->map.owner_of_slot(slot), wide->owner_of_slot(slot)) << slot;
  }
  auto after_repair = ps::ClusterChecksum(Addresses(3));
  ASSERT_TRUE(after_repair.ok());
  EXPECT_EQ(*after_repair, *before);
  map_ = repair->map;
  ExpectServingAndIntact();

  // Agreeing servers: nothing to repair.
  auto again = ps::RepairShardMaps(Addresses(3));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->repaired);
  EXPECT_EQ(again->rows_dropped, 0);

  int64_t last_moved = 0;
  ps::ReshardOptions options{.slots_per_step = 8};
  options.progress = [&](int64_t moved, int64_t total, uint64_t) {
    EXPECT_GT(moved, last_moved);
    EXPECT_LE(moved, total);
    last_moved = moved;
  };
  auto done = ps::Reshard(Addresses(3), Addresses(3), options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(last_moved, done->slots_moved);
  EXPECT_GT(done->slots_moved, 0);
  EXPECT_EQ(done->cluster_after, *before);
  auto stats = Stats(2);
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->slots_owned(), kSlots / 3);
}

// A stop asked for while a server hangs: the calls in flight are cancelled
// stop_grace after the ask, instead of holding the reshard (and a stopping
// operator, whose pod has 30 s of grace) until their 60 s deadline.
TEST_F(PsServiceTest, AStopCancelsTheCallsToAHungServerAfterTheGrace) {
  StartCluster(1);
  // A "server" whose listen queue takes connections that no one answers.
  const int hung = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(hung, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(hung, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(hung, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(hung, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string hung_address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));

  ps::ReshardOptions options;
  options.rpc_deadline = absl::Seconds(60);
  options.stop_grace = absl::Milliseconds(200);
  std::atomic<bool> stop{false};
  options.stop_requested = [&] { return stop.load(); };
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    stop = true;
  });
  const absl::Time begin = absl::Now();
  auto stopped = ps::Reshard({nodes_[0].address, hung_address}, {nodes_[0].address}, options);
  const absl::Duration took = absl::Now() - begin;
  stopper.join();
  close(hung);
  EXPECT_THAT(stopped.status(),
              StatusIs(absl::StatusCode::kCancelled, "its calls in flight were cancelled 200ms"));
  EXPECT_GE(took, absl::Milliseconds(500));
  EXPECT_LT(took, absl::Seconds(10));
  ExpectServingAndIntact();
}

// Issue 30, finding 1: a source that went down during its step's copy cannot
// take the rollback. Before, the other servers took it anyway, the source
// came back one epoch behind them, and RepairShardMaps, taking the rollback
// for the step, moved the slots to the target and dropped the source's only
// copy. Now the rollback stops at that source, and the repair gives the
// slots back to it.
TEST_F(PsServiceTest, ASourceDownDuringTheCopyGetsItsSlotsBackFromTheRepair) {
  StartCluster(2);
  Load(6, 60);
  AddJoiningServer("ps2");
  auto before = ps::ClusterChecksum(Addresses(2));
  ASSERT_TRUE(before.ok()) << before.status();

  ps::ReshardOptions options{.slots_per_step = 8};
  int down = -1;
  int down_port = 0;
  options.kill_point = [&](std::string_view point, int server) {
    if (point == "copy" && down < 0) {
      down = server;
      down_port = nodes_[server].server->grpc_port();
      nodes_[server].server->Shutdown();
    }
    return absl::OkStatus();
  };
  auto failed = ps::Reshard(Addresses(2), Addresses(3), options);
  ASSERT_GE(down, 0);
  EXPECT_THAT(failed.status(), StatusIs(absl::StatusCode::kUnavailable, "rollback stopped"));

  ps::PsServerOptions restarted = Options(absl::StrCat("ps", down));
  restarted.grpc_address = absl::StrCat("127.0.0.1:", down_port);
  nodes_[down] = Start(std::move(restarted));
  ASSERT_NE(nodes_[down].server, nullptr);
  auto repair = ps::RepairShardMaps(Addresses(3));
  ASSERT_TRUE(repair.ok()) << repair.status();
  EXPECT_TRUE(repair->repaired);
  EXPECT_FALSE(repair->rolled_forward);
  EXPECT_EQ(repair->slots_returned, 8);
  EXPECT_TRUE(repair->map.SlotsOwnedBy(2).empty());
  auto after = ps::ClusterChecksum(Addresses(3));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, *before);
  map_ = repair->map;
  ExpectServingAndIntact();

  options.kill_point = nullptr;
  auto done = ps::Reshard(Addresses(3), Addresses(3), options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->cluster_after, *before);
}

// Issue 30, finding 2: once a step's first target serves the step's map, it
// takes pushes; a repair that rolled the step back dropped them. The
// resharder dies between two targets of a scale-in step, a client pushes to
// the rows the first target serves, and the repair completes the step.
TEST_F(PsServiceTest, RepairAfterATargetServedCompletesTheStepAndKeepsItsPushes) {
  StartCluster(3);
  Load(6, 60);
  ps::ReshardOptions options{.slots_per_step = 8};
  int adopted = 0;
  options.kill_point = [&](std::string_view point, int) {
    if (point == "adopt" && ++adopted == 2) return absl::AbortedError("killed");
    return absl::OkStatus();
  };
  EXPECT_THAT(ps::Reshard(Addresses(3), Addresses(2), options).status(),
              StatusIs(absl::StatusCode::kAborted, "killed"));
  auto step = ps::FetchShardMap(nodes_[0].address);  // Server 0 took the step's map.
  auto previous = ps::FetchShardMap(nodes_[1].address);
  ASSERT_TRUE(step.ok() && previous.ok());
  ASSERT_GT(step->epoch(), previous->epoch());
  std::set<uint32_t> served;  // Moved from server 2 to server 0, served by 0.
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    if (step->owner_of_slot(slot) == 0 && previous->owner_of_slot(slot) == 2) served.insert(slot);
  }
  ASSERT_FALSE(served.empty());

  map_ = *step;
  std::unique_ptr<ps::PsClient> client = Client();
  ASSERT_NE(client, nullptr);
  for (int push = 0; push < 5; ++push) {
    std::vector<model::TableRows> rows(kTables);
    for (int t = 0; t < kTables; ++t) {
      while (rows[t].ids.size() < 10) {
        const uint64_t id = rng_() % kBuckets;
        if (served.contains(SlotOf(t, id, kSlots)) &&
            std::find(rows[t].ids.begin(), rows[t].ids.end(), id) == rows[t].ids.end()) {
          rows[t].ids.push_back(id);
        }
      }
    }
    auto grads = RandomGrads(std::move(rows));
    Remember(grads);
    Push(*client, grads);  // Acknowledged by server 0.
  }

  auto repair = ps::RepairShardMaps(Addresses(3));
  ASSERT_TRUE(repair.ok()) << repair.status();
  EXPECT_TRUE(repair->repaired);
  EXPECT_TRUE(repair->rolled_forward);
  EXPECT_EQ(repair->slots_returned, 0);
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    EXPECT_EQ(repair->map.owner_of_slot(slot), step->owner_of_slot(slot)) << slot;
  }
  map_ = repair->map;
  ExpectServingAndIntact();
  auto total = ps::ClusterChecksum(Addresses(3));
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(total->rows, static_cast<int64_t>(touched_.size()));

  options.kill_point = nullptr;
  auto rest = ps::Reshard(Addresses(3), Addresses(2), options);
  ASSERT_TRUE(rest.ok()) << rest.status();
  map_ = ShardMap::Balanced(kSlots, Addresses(2), 1);  // Any map: the client follows WRONG_OWNER.
  auto final_map = ps::FetchShardMap(nodes_[0].address);
  ASSERT_TRUE(final_map.ok());
  map_ = *final_map;
  ExpectServingAndIntact();
}

// A resumed job's servers come back on new ports: Readdress teaches every
// server everyone's address, and clients route by it.
TEST_F(PsServiceTest, ReaddressInstallsTheNewAddressesEverywhere) {
  StartCluster(2);
  Load(3, 40);
  nodes_[1].server->Shutdown();
  nodes_[1] = Start(Options("ps1"));
  auto map = ps::Readdress(Addresses(2));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->epoch(), map_->epoch() + 1);
  EXPECT_EQ(map->addresses(), Addresses(2));
  for (int i = 0; i < 2; ++i) {
    auto stats = Stats(i);
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->epoch(), map->epoch());
  }
  map_ = *map;
  ExpectServingAndIntact();
  // Again with nothing changed: a no-op.
  auto same = ps::Readdress(Addresses(2));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->epoch(), map->epoch());
}

TEST_F(PsServiceTest, ShardMapSurvivesRestartWithTheNewPort) {
  StartCluster(2);
  const std::string db = dir_.File("ps1");
  nodes_[1].server->Shutdown();
  nodes_[1] = Start(Options("ps1"));
  grpc::ClientContext context;
  v1::ShardMap got;
  ASSERT_TRUE(nodes_[1].stub->GetShardMap(&context, {}, &got).ok());
  EXPECT_EQ(got.epoch(), 2u);
  EXPECT_EQ(got.addresses(0), map_->addresses()[0]);
  EXPECT_EQ(got.addresses(1), nodes_[1].address);  // The restarted server's new port.
}

// A server bound to every interface (a pod's 0.0.0.0:7000) restarts under
// the name its peers dial it by, not as 127.0.0.1, which would send every
// client to itself; an explicit advertise address still replaces the name.
TEST_F(PsServiceTest, RestartOnAWildcardAddressKeepsItsNameInTheShardMap) {
  StartCluster(2);
  const int port = nodes_[1].server->grpc_port();
  const std::string name = absl::StrCat("ps-1.ps.default.svc:", port);
  const ShardMap named = ShardMap::Balanced(kSlots, {map_->addresses()[0], name}, /*epoch=*/3);
  ASSERT_TRUE(SetMap(0, named, 0).ok());
  ASSERT_TRUE(SetMap(1, named, 1).ok());
  // Server 1's own entry in the map server 1 serves ("" if it answers none).
  auto own_address = [&] {
    grpc::ClientContext context;
    v1::ShardMap got;
    const grpc::Status s = nodes_[1].stub->GetShardMap(&context, {}, &got);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(got.epoch(), 3u);
    return got.addresses_size() > 1 ? got.addresses(1) : "";
  };

  nodes_[1].server->Shutdown();
  ps::PsServerOptions wildcard = Options("ps1");
  wildcard.grpc_address = absl::StrCat("0.0.0.0:", port);
  nodes_[1] = Start(wildcard);
  ASSERT_NE(nodes_[1].server, nullptr);
  EXPECT_EQ(own_address(), name);

  nodes_[1].server->Shutdown();
  wildcard.advertise_address = absl::StrCat("127.0.0.1:", port);
  nodes_[1] = Start(wildcard);
  ASSERT_NE(nodes_[1].server, nullptr);
  EXPECT_EQ(own_address(), wildcard.advertise_address);
}

TEST_F(PsServiceTest, CheckpointRestoresTheSameRows) {
  StartCluster(1);
  Load(3, 50);
  auto stats = Stats(0);
  ASSERT_TRUE(stats.ok());
  grpc::ClientContext context;
  v1::CheckpointRequest request;
  request.set_path("daily/1");
  v1::CheckpointResponse response;
  grpc::Status s = nodes_[0].stub->Checkpoint(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.rows(), stats->rows_stored());
  const std::string path = dir_.File("ps0") + "/checkpoints/daily/1";
  EXPECT_EQ(response.path(), path);

  // The server writes under its own checkpoint directory only.
  for (const std::string& bad : {std::string(""), dir_.File("elsewhere"),
                                 std::string("../../elsewhere"), std::string("a/../../b")}) {
    grpc::ClientContext refused_context;
    v1::CheckpointRequest refused;
    refused.set_path(bad);
    const grpc::Status r = nodes_[0].stub->Checkpoint(&refused_context, refused, &response);
    EXPECT_EQ(r.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(r.error_message(), HasSubstr("path = \"" + bad + "\"")) << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.File("elsewhere")));

  ps::RowStoreOptions o = Options("restored").store;
  auto restored = ps::RowStore::RestoreCheckpoint(path, o);
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto sums = (*restored)->ComputeChecksums();
  ASSERT_TRUE(sums.ok());
  EXPECT_EQ(static_cast<uint64_t>(sums->rows), stats->rows_stored());
  EXPECT_EQ(sums->values, stats->value_checksum());

  grpc::ClientContext again;
  EXPECT_EQ(nodes_[0].stub->Checkpoint(&again, request, &response).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  ExpectServingAndIntact();
}

// --- Bad input: precise status, nothing stored, still serving ------------------

class PsServiceBadInputTest : public PsServiceTest {
 protected:
  void SetUp() override {
    StartCluster(2);
    Load(4, 60);
  }

  // `rpc` on server `node`, in `context` when given; the response is dropped.
  template <typename Request, typename Response>
  grpc::Status Unary(int node,
                     grpc::Status (v1::ParameterServer::Stub::*rpc)(grpc::ClientContext*,
                                                                    const Request&, Response*),
                     const Request& request, grpc::ClientContext* context) {
    grpc::ClientContext local;
    Response response;
    return (*nodes_[node].stub.*rpc)(context ? context : &local, request, &response);
  }
  grpc::Status Lookup(int node, const v1::LookupRequest& request,
                      grpc::ClientContext* context = nullptr) {
    return Unary(node, &v1::ParameterServer::Stub::Lookup, request, context);
  }
  grpc::Status Push(int node, const v1::PushGradientsRequest& request,
                    grpc::ClientContext* context = nullptr) {
    return Unary(node, &v1::ParameterServer::Stub::PushGradients, request, context);
  }
  // An id of `table` owned by `server`.
  uint64_t IdOwnedBy(uint32_t table, uint32_t server) {
    for (uint64_t id = 0;; ++id) {
      if (map_->OwnerOf(table, id) == server) return id;
    }
  }
  // A valid push of `n` ids of table 0 owned by `server`.
  v1::PushGradientsRequest ValidPush(uint32_t server, int n) {
    v1::PushGradientsRequest request;
    v1::TableRows* t = request.add_tables();
    t->set_table(0);
    for (uint64_t id = 0; t->ids_size() < n; ++id) {
      if (map_->OwnerOf(0, id) == server) t->add_ids(id);
    }
    for (int k = 0; k < n * kDim; ++k) t->add_values(0.5f);
    return request;
  }
};

#define EXPECT_GRPC_ERROR(status, code, substr)                               \
  do {                                                                        \
    const grpc::Status s_ = (status);                                         \
    EXPECT_EQ(s_.error_code(), grpc::StatusCode::code) << s_.error_message(); \
    EXPECT_THAT(s_.error_message(), HasSubstr(substr));                       \
  } while (0)

TEST_F(PsServiceBadInputTest, UnknownTable) {
  const uint64_t before = ValueChecksumOf(0);
  v1::PushGradientsRequest request = ValidPush(0, 3);
  request.mutable_tables(0)->set_table(9);
  EXPECT_GRPC_ERROR(Push(0, request), INVALID_ARGUMENT,
                    "tables[0].table: unknown table 9; this server has 3 tables");
  v1::LookupRequest lookup;
  lookup.add_tables()->set_table(kTables);
  lookup.mutable_tables(0)->add_ids(1);
  EXPECT_GRPC_ERROR(Lookup(0, lookup), INVALID_ARGUMENT, "tables[0].table: unknown table 3");
  EXPECT_EQ(ValueChecksumOf(0), before);
  ExpectServingAndIntact();
}

TEST_F(PsServiceBadInputTest, WrongDimension) {
  const uint64_t before = ValueChecksumOf(0);
  v1::PushGradientsRequest request = ValidPush(0, 2);
  request.mutable_tables(0)->mutable_values()->RemoveLast();
  EXPECT_GRPC_ERROR(Push(0, request), INVALID_ARGUMENT,
                    "tables[0].values: 7 floats for 2 ids of dim 4");
  v1::LookupRequest lookup;
  lookup.add_tables()->add_ids(IdOwnedBy(0, 0));
  lookup.mutable_tables(0)->add_values(1.0f);
  EXPECT_GRPC_ERROR(Lookup(0, lookup), INVALID_ARGUMENT,
                    "tables[0].values: 1 floats in a lookup request");
  EXPECT_EQ(ValueChecksumOf(0), before);
  ExpectServingAndIntact();
}

TEST_F(PsServiceBadInputTest, RepeatedTable) {
  const uint64_t before = ValueChecksumOf(0);
  v1::PushGradientsRequest request = ValidPush(0, 2);
  *request.add_tables() = request.tables(0);
  EXPECT_GRPC_ERROR(Push(0, request), INVALID_ARGUMENT,
                    "tables[1].table: table 0 repeats tables[0]");
  EXPECT_EQ(ValueChecksumOf(0), before);
  ExpectServingAndIntact();
}

TEST_F(PsServiceBadInputTest, EmptyBatch) {
  EXPECT_GRPC_ERROR(Lookup(0, v1::LookupRequest()), INVALID_ARGUMENT, "tables: empty batch");
  v1::PushGradientsRequest request;
  request.add_tables()->set_table(1);
  EXPECT_GRPC_ERROR(Push(0, request), INVALID_ARGUMENT, "tables: empty batch (1 tables, no ids)");
  ExpectServingAndIntact();
}

TEST_F(PsServiceBadInputTest, OversizedBatch) {
  // Over the row limit of a dedicated server.
  ps::PsServerOptions o = Options("limited");
  o.service.max_request_rows = 100;
  o.limits.max_message_bytes = 64 << 10;
  nodes_.push_back(Start(o));
  const int limited = static_cast<int>(nodes_.size()) - 1;
  v1::LookupRequest lookup;
  v1::TableRows* t = lookup.add_tables();
  for (int i = 0; i < 101; ++i) t->add_ids(i);
  EXPECT_GRPC_ERROR(Lookup(limited, lookup), RESOURCE_EXHAUSTED,
                    "tables: 101 ids exceed this server's limit of 100 per request");
  // Over the message size limit (gRPC's own check).
  v1::PushGradientsRequest push;
  v1::TableRows* p = push.add_tables();
  for (int i = 0; i < 100; ++i) p->add_ids(i);
  for (int i = 0; i < 100 * kDim * 50; ++i) p->add_values(0.0f);  // ~80 KB
  const grpc::Status s = Push(limited, push);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  // The limited server still serves a valid request.
  v1::LookupRequest ok;
  ok.add_tables()->add_ids(5);
  EXPECT_TRUE(Lookup(limited, ok).ok());
  ExpectServingAndIntact();
}

// Limits: one connection carries at most max_concurrent_streams calls; a
// further call waits in the client (here until its deadline) while another
// connection is served, and goes through once a stream ends.
TEST_F(PsServiceBadInputTest, StreamsPerConnectionAreBounded) {
  ps::PsServerOptions o = Options("streams");
  o.limits.max_concurrent_streams = 2;
  nodes_.push_back(Start(o));
  const std::string address = nodes_.back().address;
  // A channel of its own: gRPC would otherwise share one connection between
  // channels to the same address.
  auto connect = [&] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return v1::ParameterServer::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  };
  auto held = connect(), other = connect();
  auto lookup = [](v1::ParameterServer::Stub& stub, absl::Duration timeout) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineFromNow(timeout));
    v1::LookupRequest request;
    request.add_tables()->add_ids(5);
    v1::LookupResponse response;
    return stub.Lookup(&context, request, &response);
  };
  ASSERT_TRUE(lookup(*held, absl::Seconds(10)).ok());  // Connected; the server's SETTINGS are in.

  std::unique_ptr<grpc::ClientContext> contexts[2];
  v1::ImportSlotsResponse responses[2];
  std::unique_ptr<grpc::ClientWriter<v1::SlotChunk>> writers[2];
  for (int i = 0; i < 2; ++i) {
    contexts[i] = std::make_unique<grpc::ClientContext>();
    contexts[i]->set_deadline(DeadlineFromNow(absl::Seconds(60)));
    writers[i] = held->ImportSlots(contexts[i].get(), &responses[i]);
  }
  EXPECT_EQ(lookup(*held, absl::Seconds(1)).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(lookup(*other, absl::Seconds(10)).ok());
  contexts[0]->TryCancel();
  EXPECT_EQ(writers[0]->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const grpc::Status after = lookup(*held, absl::Seconds(10));
  EXPECT_TRUE(after.ok()) << after.error_message();
  contexts[1]->TryCancel();
  EXPECT_EQ(writers[1]->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ExpectServingAndIntact();
}

// Limits that cannot work are refused at start, naming the field.
TEST_F(PsServiceBadInputTest, UnworkableLimitsAreRefusedAtStart) {
  ps::PsServerOptions o = Options("unworkable");
  o.limits.max_message_bytes = 0;
  EXPECT_THAT(ps::PsServer::Start(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                               "ps: limits.max_message_bytes: must be positive"));
  o = Options("unworkable");
  o.limits.memory_bytes = o.limits.max_message_bytes;
  EXPECT_THAT(ps::PsServer::Start(o),
              StatusIs(absl::StatusCode::kInvalidArgument, "ps: limits.memory_bytes"));
  o = Options("unworkable");
  o.service.max_import_bytes = 0;
  EXPECT_THAT(ps::PsServer::Start(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "ps: service.max_import_bytes: must be positive, got 0"));
}

TEST_F(PsServiceBadInputTest, UnownedSlotIsWrongOwnerAndStoresNothing) {
  const uint64_t before0 = ValueChecksumOf(0);
  const uint64_t before1 = ValueChecksumOf(1);
  // A push of ids server 0 owns, plus one it does not: nothing is applied.
  v1::PushGradientsRequest request = ValidPush(0, 5);
  const uint64_t foreign = IdOwnedBy(0, 1);
  request.mutable_tables(0)->add_ids(foreign);
  for (int k = 0; k < kDim; ++k) request.mutable_tables(0)->add_values(1.0f);
  grpc::ClientContext context;
  const grpc::Status s = Push(0, request, &context);
  const uint32_t slot = SlotOf(0, foreign, kSlots);
  EXPECT_GRPC_ERROR(s, FAILED_PRECONDITION,
                    "WRONG_OWNER slot=" + std::to_string(slot) + " epoch=2 owner=1");
  EXPECT_EQ(ps::GetWrongOwner(s), (ps::WrongOwner{slot, 2, 1}));
  // Lookups too.
  v1::LookupRequest lookup;
  lookup.add_tables()->add_ids(foreign);
  grpc::ClientContext lookup_context;
  const grpc::Status lookup_status = Lookup(0, lookup, &lookup_context);
  EXPECT_GRPC_ERROR(lookup_status, FAILED_PRECONDITION, "WRONG_OWNER");
  EXPECT_EQ(ps::GetWrongOwner(lookup_status), (ps::WrongOwner{slot, 2, 1}));
  EXPECT_EQ(ValueChecksumOf(0), before0);
  EXPECT_EQ(ValueChecksumOf(1), before1);
  ExpectServingAndIntact();
}

TEST_F(PsServiceBadInputTest, MalformedShardMaps) {
  v1::SetShardMapRequest request;
  *request.mutable_map() = ShardMap::Balanced(kSlots, map_->addresses(), 5).ToProto();
  request.set_self_index(0);

  v1::SetShardMapRequest bad = request;
  bad.mutable_map()->mutable_owner()->RemoveLast();
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), INVALID_ARGUMENT,
                    "owner has 63 entries but num_slots = 64");
  bad = request;
  bad.mutable_map()->set_owner(10, 2);
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), INVALID_ARGUMENT, "owner[10] = 2 but only 2 servers");
  bad = request;
  bad.mutable_map()->clear_addresses();
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), INVALID_ARGUMENT, "addresses is empty");
  bad = request;
  *bad.mutable_map() = ShardMap::Balanced(32, map_->addresses(), 5).ToProto();
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), INVALID_ARGUMENT,
                    "map.num_slots = 32 but this server has 64 slots");
  bad = request;
  bad.set_self_index(2);
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), INVALID_ARGUMENT,
                    "self_index = 2 but map has 2 addresses");
  bad = request;
  bad.clear_map();
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), INVALID_ARGUMENT, "map: missing");
  // Stale epoch, and a different map under the current epoch.
  bad = request;
  bad.mutable_map()->set_epoch(1);
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), FAILED_PRECONDITION,
                    "map.epoch = 1 is older than this server's epoch 2");
  bad = request;
  bad.mutable_map()->set_epoch(2);
  bad.mutable_map()->set_owner(0, 1);
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), FAILED_PRECONDITION,
                    "map.epoch = 2 equals this server's epoch but the map differs");
  // Epochs at their extremes: past 2^53, and further past the server's than
  // any reshard goes (2^20), which would leave later maps nowhere to go.
  for (const uint64_t epoch : {UINT64_MAX, ShardMap::kMaxEpoch + 1}) {
    bad = request;
    bad.mutable_map()->set_epoch(epoch);
    EXPECT_GRPC_ERROR(SetMapProto(0, bad), INVALID_ARGUMENT,
                      absl::StrCat("shard map: epoch = ", epoch, ", must be <= 2^53"));
  }
  bad = request;
  bad.mutable_map()->set_epoch(2 + (uint64_t{1} << 20) + 1);
  EXPECT_GRPC_ERROR(SetMapProto(0, bad), INVALID_ARGUMENT,
                    "map.epoch = 1048579 is more than 1048576 past this server's epoch 2");
  // The current map again is fine (a retried call).
  EXPECT_TRUE(SetMap(0, *map_, 0).ok());

  grpc::ClientContext context;
  v1::ShardMap got;
  ASSERT_TRUE(nodes_[0].stub->GetShardMap(&context, {}, &got).ok());
  EXPECT_EQ(got.epoch(), 2u);
  ExpectServingAndIntact();
}

class PsServiceImportTest : public PsServiceBadInputTest {
 protected:
  // chunks_: a valid export of every row server 0 holds; fresh_: an empty
  // server owning every slot, the import target.
  void SetUp() override {
    PsServiceBadInputTest::SetUp();
    std::vector<uint32_t> slots = map_->SlotsOwnedBy(0);
    Exported exported = Export(*nodes_[0].stub, slots);
    ASSERT_TRUE(exported.status.ok());
    chunks_ = exported.chunks;
    ASSERT_GT(chunks_.size(), 2u);
    nodes_.push_back(Start(Options("fresh")));
    fresh_ = static_cast<int>(nodes_.size()) - 1;
    empty_ = ValueChecksumOf(fresh_);
    auto stats = Stats(fresh_);
    ASSERT_TRUE(stats.ok());
    ASSERT_EQ(stats->rows_stored(), 0u);
  }
  void ExpectFreshStillEmpty() {
    auto stats = Stats(fresh_);
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->rows_stored(), 0u);
    EXPECT_EQ(stats->value_checksum(), empty_);
    // ... and it still imports a good stream.
    v1::ImportSlotsResponse response;
    const grpc::Status s = Import(*nodes_[fresh_].stub, chunks_, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.checksum(), chunks_.back().checksum());
  }
  std::vector<v1::SlotChunk> chunks_;
  int fresh_ = 0;
  uint64_t empty_ = 0;
};

// A stream's rows may come in any order (the server sorts them into key
// order before it writes them).
TEST_F(PsServiceImportTest, RowsInAnyOrderAreImported) {
  std::vector<v1::SlotChunk> chunks(chunks_.rbegin() + 1, chunks_.rend());  // slots descending
  for (v1::SlotChunk& c : chunks) {
    std::reverse(c.mutable_rows()->begin(), c.mutable_rows()->end());
  }
  chunks.push_back(chunks_.back());  // the done chunk last
  v1::ImportSlotsResponse response;
  const grpc::Status s = Import(*nodes_[fresh_].stub, chunks, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.rows(), chunks_.back().total_rows());
  EXPECT_EQ(response.checksum(), chunks_.back().checksum());
  auto stats = Stats(fresh_);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->rows_stored(), chunks_.back().total_rows());
  EXPECT_EQ(stats->value_checksum(), empty_ + chunks_.back().checksum());
}

TEST_F(PsServiceImportTest, TruncatedStreamStoresNothing) {
  std::vector<v1::SlotChunk> truncated(chunks_.begin(), chunks_.end() - 1);  // No done chunk.
  v1::ImportSlotsResponse response;
  EXPECT_GRPC_ERROR(Import(*nodes_[fresh_].stub, truncated, &response), ABORTED,
                    "without a done=true chunk; nothing stored");
  ExpectFreshStillEmpty();
  ExpectServingAndIntact();
}

TEST_F(PsServiceImportTest, CountMismatchStoresNothing) {
  std::vector<v1::SlotChunk> chunks = chunks_;
  chunks.erase(chunks.begin());  // A data chunk lost, done still claims all rows.
  v1::ImportSlotsResponse response;
  EXPECT_GRPC_ERROR(Import(*nodes_[fresh_].stub, chunks, &response), DATA_LOSS,
                    "done.total_rows = ");
  ExpectFreshStillEmpty();
}

TEST_F(PsServiceImportTest, ChecksumMismatchStoresNothing) {
  std::vector<v1::SlotChunk> chunks = chunks_;
  chunks[0].mutable_rows(0)->set_values(0, chunks[0].rows(0).values(0) + 1.0f);
  v1::ImportSlotsResponse response;
  EXPECT_GRPC_ERROR(Import(*nodes_[fresh_].stub, chunks, &response), DATA_LOSS, "done.checksum = ");
  ExpectFreshStillEmpty();
}

TEST_F(PsServiceImportTest, MalformedRowsStoreNothing) {
  v1::ImportSlotsResponse response;
  std::vector<v1::SlotChunk> chunks = chunks_;
  chunks[1].mutable_rows(0)->mutable_values()->RemoveLast();
  EXPECT_GRPC_ERROR(Import(*nodes_[fresh_].stub, chunks, &response), INVALID_ARGUMENT,
                    "chunk 1 rows[0].values: 7 floats, want 8");
  chunks = chunks_;
  chunks[1].mutable_rows(0)->set_table(7);
  EXPECT_GRPC_ERROR(Import(*nodes_[fresh_].stub, chunks, &response), INVALID_ARGUMENT,
                    "chunk 1 rows[0].table: unknown table 7");
  chunks = chunks_;
  chunks[1].set_slot((chunks[1].slot() + 1) % kSlots);
  EXPECT_GRPC_ERROR(Import(*nodes_[fresh_].stub, chunks, &response), INVALID_ARGUMENT,
                    "chunk says slot");
  chunks = chunks_;
  *chunks[1].add_rows() = chunks[1].rows(0);
  EXPECT_GRPC_ERROR(Import(*nodes_[fresh_].stub, chunks, &response), INVALID_ARGUMENT,
                    absl::StrCat("(table ", chunks[1].rows(0).table(), ", id ",
                                 chunks[1].rows(0).id(), ") appears twice in the stream"));
  ExpectFreshStillEmpty();
}

TEST_F(PsServiceImportTest, RowsOfUnownedSlotsAreWrongOwner) {
  // Server 1 does not own server 0's slots.
  const uint64_t before = ValueChecksumOf(1);
  v1::ImportSlotsResponse response;
  EXPECT_GRPC_ERROR(Import(*nodes_[1].stub, chunks_, &response), FAILED_PRECONDITION,
                    "WRONG_OWNER slot=");
  EXPECT_EQ(ValueChecksumOf(1), before);
  ExpectServingAndIntact();
}

// A resharder's stream (incoming) never overwrites a slot the server serves.
TEST_F(PsServiceImportTest, IncomingRowsOfOwnedSlotsAreRefused) {
  std::vector<v1::SlotChunk> chunks = chunks_;
  for (v1::SlotChunk& c : chunks) c.set_incoming(true);
  v1::ImportSlotsResponse response;
  EXPECT_GRPC_ERROR(Import(*nodes_[fresh_].stub, chunks, &response), FAILED_PRECONDITION,
                    "already owned and served by this server");
  ExpectFreshStillEmpty();
}

// The staging limit is one budget for all of a server's import streams: with
// one stream's rows staged, a second that would take the total over it is
// refused and stores nothing; the first still completes, and releases its
// bytes when it ends.
TEST_F(PsServiceImportTest, StagingLimitIsSharedByConcurrentStreams) {
  const int64_t row_bytes = ps::ImportStagedBytesPerRow(chunks_[0].rows(0).values_size());
  int64_t stream_bytes = 0, held_bytes = 0;  // Every chunk; every chunk but the done one.
  for (size_t i = 0; i < chunks_.size(); ++i) {
    stream_bytes += chunks_[i].rows_size() * row_bytes;
    if (i + 1 < chunks_.size()) held_bytes += chunks_[i].rows_size() * row_bytes;
  }
  ASSERT_GT(held_bytes, 0);
  ps::PsServerOptions o = Options("shared");
  o.service.max_import_bytes = held_bytes + stream_bytes - 1;  // Each fits, not both.
  nodes_.push_back(Start(o));
  const int shared = static_cast<int>(nodes_.size()) - 1;
  auto await_staged = [&](int64_t want) {
    const std::string line = absl::StrCat("\nshadowsync_ps_import_staged_bytes ", want, "\n");
    std::string body;
    for (const absl::Time end = absl::Now() + absl::Seconds(20); absl::Now() < end;) {
      testing::HttpGet(nodes_[shared].server->metrics_port(), "/metrics", &body);
      if (absl::StrContains(body, line)) return;
      absl::SleepFor(absl::Milliseconds(5));  // Polling the server's staging.
    }
    ADD_FAILURE() << "import_staged_bytes never became " << want << ":\n" << body;
  };

  // Stream 1 stages every chunk but the done one, and holds.
  grpc::ClientContext held_context;
  held_context.set_deadline(DeadlineFromNow(absl::Seconds(60)));
  v1::ImportSlotsResponse held_response;
  auto held = nodes_[shared].stub->ImportSlots(&held_context, &held_response);
  for (size_t i = 0; i + 1 < chunks_.size(); ++i) ASSERT_TRUE(held->Write(chunks_[i]));
  await_staged(held_bytes);

  v1::ImportSlotsResponse response;
  EXPECT_GRPC_ERROR(Import(*nodes_[shared].stub, chunks_, &response), RESOURCE_EXHAUSTED,
                    absl::StrCat("over its staging limit of ", held_bytes + stream_bytes - 1));
  await_staged(held_bytes);  // The refused stream's rows are released.

  ASSERT_TRUE(held->Write(chunks_.back()));
  held->WritesDone();
  const grpc::Status done = held->Finish();
  ASSERT_TRUE(done.ok()) << done.error_message();
  EXPECT_EQ(held_response.checksum(), chunks_.back().checksum());
  await_staged(0);
  auto stats = Stats(shared);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->rows_stored(), held_response.rows());
}

TEST_F(PsServiceImportTest, StagingLimitIsResourceExhausted) {
  ps::PsServerOptions o = Options("small");
  o.service.max_import_bytes = 1000;
  nodes_.push_back(Start(o));
  const int small = static_cast<int>(nodes_.size()) - 1;
  v1::ImportSlotsResponse response;
  EXPECT_GRPC_ERROR(Import(*nodes_[small].stub, chunks_, &response), RESOURCE_EXHAUSTED,
                    "over its staging limit of 1000 bytes");
  auto stats = Stats(small);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->rows_stored(), 0u);
}

TEST_F(PsServiceBadInputTest, BadSlotListsAndDroppingOwnedSlots) {
  Exported out = Export(*nodes_[0].stub, {});
  EXPECT_GRPC_ERROR(out.status, INVALID_ARGUMENT, "slots: empty");
  out = Export(*nodes_[0].stub, {3, kSlots});
  EXPECT_GRPC_ERROR(out.status, INVALID_ARGUMENT, "slots[1] = 64 but this server has 64 slots");
  out = Export(*nodes_[0].stub, {3, 5, 3});
  EXPECT_GRPC_ERROR(out.status, INVALID_ARGUMENT, "slots[2] = 3 repeats slots[0]");
  const uint64_t before = ValueChecksumOf(0);
  EXPECT_GRPC_ERROR(Drop(*nodes_[0].stub, {map_->SlotsOwnedBy(0)[0]}), FAILED_PRECONDITION,
                    "is owned by this server at epoch 2");
  EXPECT_GRPC_ERROR(Drop(*nodes_[0].stub, {kSlots + 1}), INVALID_ARGUMENT,
                    "slots[0] = 65 but this server has 64 slots");
  EXPECT_EQ(ValueChecksumOf(0), before);
  grpc::ClientContext context;
  v1::CheckpointResponse response;
  EXPECT_GRPC_ERROR(nodes_[0].stub->Checkpoint(&context, {}, &response), INVALID_ARGUMENT,
                    "path = \"\": must name a checkpoint under the server's checkpoint directory");
  ExpectServingAndIntact();
}

// --- Metrics and health ----------------------------------------------------------

TEST_F(PsServiceTest, MetricsAndHealthzOverHttp) {
  StartCluster(1);
  Load(2, 20);
  // One failing call, so an errors_total series exists.
  {
    grpc::ClientContext context;
    v1::LookupResponse response;
    ASSERT_FALSE(nodes_[0].stub->Lookup(&context, v1::LookupRequest(), &response).ok());
  }
  const int port = nodes_[0].server->metrics_port();
  ASSERT_GT(port, 0);
  std::string body;
  ASSERT_EQ(testing::HttpGet(port, "/healthz", &body), 200);
  EXPECT_EQ(body, "ok\n");
  ASSERT_EQ(testing::HttpGet(port, "/metrics", &body), 200);
  for (const std::string& name : ps::PsMetrics::MetricNames()) {
    EXPECT_THAT(body, HasSubstr(name)) << name;
  }
  EXPECT_THAT(body,
              HasSubstr("shadowsync_ps_request_duration_seconds_bucket{rpc=\"PushGradients\""));
  EXPECT_THAT(body,
              HasSubstr("shadowsync_ps_errors_total{code=\"INVALID_ARGUMENT\",rpc=\"Lookup\"} 1"));
  EXPECT_THAT(body, HasSubstr("shadowsync_ps_slots_owned 64"));
  EXPECT_THAT(body, HasSubstr("shadowsync_ps_shard_map_epoch 2"));
  EXPECT_THAT(body, HasSubstr("shadowsync_ps_rows_stored " + std::to_string(touched_.size())));
  nodes_[0].server->Shutdown();
  EXPECT_NE(testing::HttpGet(port, "/healthz", &body), 200);
}

// A store that has failed refuses every push until a restart, so its health
// endpoints must say so: a liveness probe on /livez restarts the pod instead
// of trainers crash-looping on refused pushes behind a /healthz that says ok.
// The failure is real: a file-size limit (as a full disk would) makes
// RocksDB's WAL refuse the checkpoint's flush.
TEST_F(PsServiceTest, AFailedStoreTurnsHealthzReadyzAndLivezTo503) {
  // Every push stores new rows (cold at the next checkpoint, which flushes
  // them into RocksDB), and the redo log rotates every 64 KB: RocksDB's
  // WAL, not the redo log, reaches the limit below.
  constexpr uint64_t kManyRows = uint64_t{1} << 40;
  ps::PsServerOptions o = Options("ps0");
  o.store.tables = testing::NumberedTables(kTables, kManyRows);
  o.store.checkpoint_log_bytes = 64 << 10;
  o.store.checkpoint_interval = absl::Milliseconds(50);
  nodes_.push_back(Start(std::move(o)));
  ASSERT_NE(nodes_[0].server, nullptr);
  map_ = ShardMap::Balanced(kSlots, {nodes_[0].address}, /*epoch=*/2);
  ASSERT_TRUE(SetMap(0, *map_, 0).ok());
  const int port = nodes_[0].server->metrics_port();
  std::string body;
  ASSERT_EQ(testing::HttpGet(port, "/livez", &body), 200);
  ASSERT_EQ(testing::HttpGet(port, "/healthz", &body), 200);

  std::unique_ptr<ps::PsClient> client = Client();
  ASSERT_NE(client, nullptr);
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto sigxfsz = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a core dump.
  rlimit limit = saved;
  limit.rlim_cur = 512 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  absl::Status push;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    push = client->Push(RandomGrads(RandomIds(200, kManyRows)));
    if (absl::StrContains(push.message(), "row store failed")) break;
    absl::SleepFor(absl::Milliseconds(5));  // Lets checkpoints keep the redo logs small.
  }
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, sigxfsz);
  ASSERT_THAT(push, StatusIs(absl::StatusCode::kUnavailable, "row store failed"));

  // The limit is gone, yet the store stays failed: only a restart recovers.
  EXPECT_THAT(client->Push(RandomGrads(RandomIds(5, kManyRows))),
              StatusIs(absl::StatusCode::kUnavailable, "row store failed"));
  for (const char* path : {"/livez", "/healthz", "/readyz"}) {
    EXPECT_EQ(testing::HttpGet(port, path, &body), 503) << path;
    EXPECT_THAT(body, HasSubstr("row store failed")) << path;
  }
  std::vector<model::TableRows> ids = RandomIds(5, kManyRows);
  EXPECT_TRUE(client->Lookup(ids).ok()) << "reads go on from the cache and RocksDB";
}

}  // namespace
}  // namespace shadowsync
