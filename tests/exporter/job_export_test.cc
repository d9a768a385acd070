// The distributed export and warm start against real parameter servers on
// loopback: rows streamed from 3 servers into an export, and from the export
// into 2 (and into another slot count), compared by the servers' own row
// counts and value checksums; and a job's export scored from its own files.
#include "exporter/job_export.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "data/synthetic.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/dlrm.h"
#include "model/export.h"
#include "model/gemm.h"
#include "ps/client/ps_client.h"
#include "ps/ps_server.h"
#include "shadowsync/v1/packed_rows.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "tests/util/test_util.h"
#include "worker/checkpoint.h"
#include "worker/trainer.h"

namespace shadowsync::exporter {
namespace {

namespace fs = std::filesystem;
using ::shadowsync::testing::StatusIs;
using ::testing::HasSubstr;

ShadowSyncJob Job(int slots, int embedding_dim = 4, bool with_state = true,
                  const std::string& optimizer = "adagrad") {
  absl::StatusOr<ShadowSyncJob> job =
      ParseJobYaml(absl::StrCat(R"(
apiVersion: shadowsync.io/v1alpha1
kind: ShadowSyncJob
metadata: {name: export-test}
spec:
  model: {embeddingDim: )",
                                embedding_dim, R"(, bottomMlp: [8], topMlp: [8],
          criteoTables: {hashBuckets: 1000}}
  parameterServer: {slots: )",
                                slots, ", optimizer: ", optimizer, R"(}
  export: {withOptimizerState: )",
                                with_state ? "true" : "false", "}\n"));
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

// The servers of a job, sharing a balanced shard map.
class Cluster {
 public:
  // `max_rows`: each server evicts its least recently used rows beyond it.
  Cluster(const ShadowSyncJob& job, int n, const ::shadowsync::testing::ScratchDir& dir,
          const std::string& name, int64_t max_rows = 0) {
    std::vector<std::string> addresses;
    for (int i = 0; i < n; ++i) {
      ps::PsServerOptions o;
      o.grpc_address = "127.0.0.1:0";
      o.metrics_address = "";
      o.store.db_path = dir.File(absl::StrCat(name, "-", i));
      o.store.dim = job.spec.model.embedding_dim;
      o.store.tables = ExportInfoForJob(job).embeddings.tables;
      o.store.num_slots = static_cast<uint32_t>(job.spec.parameter_server.slots);
      o.store.seed = kEmbeddingInitSeed;
      o.store.optimizer = ExportInfoForJob(job).embeddings.optimizer;
      o.store.cache_bytes = 1 << 20;
      o.store.max_rows = max_rows;
      o.eviction_interval = max_rows > 0 ? absl::Milliseconds(10) : absl::ZeroDuration();
      o.shutdown_grace = absl::Milliseconds(200);
      o.service.export_chunk_rows = 5;  // Several chunks per slot.
      absl::StatusOr<std::unique_ptr<ps::PsServer>> server = ps::PsServer::Start(std::move(o));
      EXPECT_TRUE(server.ok()) << server.status();
      addresses.push_back((*server)->address());
      servers_.push_back(*std::move(server));
    }
    map_ = ShardMap::Balanced(static_cast<uint32_t>(job.spec.parameter_server.slots), addresses,
                              /*epoch=*/2);
    for (int i = 0; i < n; ++i) {
      auto stub = Stub(i);
      grpc::ClientContext context;
      v1::SetShardMapRequest request;
      *request.mutable_map() = map_->ToProto();
      request.set_self_index(i);
      v1::SetShardMapResponse response;
      EXPECT_TRUE(stub->SetShardMap(&context, request, &response).ok());
    }
  }

  std::string address() const { return servers_.front()->address(); }

  // Rows stored and the sum of the value checksums, over every server.
  std::pair<int64_t, uint64_t> Totals() {
    int64_t rows = 0;
    uint64_t values = 0;
    for (size_t i = 0; i < servers_.size(); ++i) {
      grpc::ClientContext context;
      v1::StatsResponse stats;
      EXPECT_TRUE(Stub(i)->Stats(&context, {}, &stats).ok());
      rows += static_cast<int64_t>(stats.rows_stored());
      values += stats.value_checksum();
    }
    return {rows, values};
  }

  // Pushes random gradients of `rows_per_table` random ids in each table.
  void Train(int rows_per_table, int tables, int dim, uint64_t seed) {
    ps::PsClientOptions options;
    auto client = ps::PsClient::Create(*map_, dim, tables, options);
    ASSERT_TRUE(client.ok()) << client.status();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int round = 0; round < 3; ++round) {
      std::vector<model::TableRows> grads(tables);
      for (auto& r : grads) {
        std::set<uint64_t> ids;
        while (static_cast<int>(ids.size()) < rows_per_table) ids.insert(rng() % 100'000);
        r.ids.assign(ids.begin(), ids.end());
        r.values.resize(r.ids.size() * dim);
        for (float& v : r.values) v = u(rng);
      }
      SS_ASSERT_OK((*client)->Push(grads));
    }
  }

 private:
  std::unique_ptr<v1::ParameterServer::Stub> Stub(size_t i) {
    return v1::ParameterServer::NewStub(
        grpc::CreateChannel(servers_[i]->address(), grpc::InsecureChannelCredentials()));
  }

  std::vector<std::unique_ptr<ps::PsServer>> servers_;
  std::optional<ShardMap> map_;
};

// How the servers store an exported row, given its values and the state the
// export carries.
using StoredRow =
    std::function<std::vector<float>(std::span<const float> values, std::span<const float> state)>;

std::vector<float> ValuesThenState(std::span<const float> values, std::span<const float> state) {
  std::vector<float> row(values.begin(), values.end());
  row.insert(row.end(), state.begin(), state.end());
  return row;
}

// The row count and the sum of RowValueHash over the export's rows, each as
// `stored` says the servers hold it.
std::pair<int64_t, uint64_t> ExportTotals(const model::ExportReader& reader,
                                          const StoredRow& stored = ValuesThenState) {
  int64_t rows = 0;
  uint64_t values = 0;
  const absl::Status read = reader.ForEachRow(
      [&](uint32_t table, uint64_t id, std::span<const float> v, std::span<const float> state) {
        ++rows;
        values += RowValueHash(table, id, stored(v, state));
        return absl::OkStatus();
      });
  EXPECT_TRUE(read.ok()) << read;
  return {rows, values};
}

absl::Status WriteExport(const ShadowSyncJob& job, const std::string& address,
                         const std::string& dir, RowStreamStats* stats) {
  const model::ExportInfo info = ExportInfoForJob(job);
  SS_ASSIGN_OR_RETURN(auto writer, model::ExportWriter::Create(dir, info));
  const size_t n = static_cast<size_t>(model::Dlrm(info.config).num_params());
  SS_RETURN_IF_ERROR(writer->WriteDense(std::vector<float>(n, 0.5f), std::vector<float>(n, 0.25f)));
  SS_ASSIGN_OR_RETURN(*stats, ExportServerRows(address, {}, writer.get()));
  return writer->Commit();
}

class JobExportTest : public ::testing::Test {
 protected:
  // Writes the cluster's export to <dir>/model and opens it.
  std::optional<model::ExportReader> ExportOf(const ShadowSyncJob& job, const Cluster& cluster) {
    RowStreamStats stats;
    if (absl::Status s = WriteExport(job, cluster.address(), dir_.File("model"), &stats); !s.ok()) {
      ADD_FAILURE() << s;
      return std::nullopt;
    }
    absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(dir_.File("model"));
    if (!reader.ok()) {
      ADD_FAILURE() << reader.status();
      return std::nullopt;
    }
    return *std::move(reader);
  }

  ::shadowsync::testing::ScratchDir dir_;
};

TEST_F(JobExportTest, EveryRowOfThreeServersLandsOnTwoWithItsOptimizerState) {
  const ShadowSyncJob job = Job(64);
  Cluster three(job, 3, dir_, "three");
  three.Train(200, 26, 4, 1);
  const auto [rows, values] = three.Totals();
  ASSERT_GT(rows, 3000);

  RowStreamStats exported;
  SS_ASSERT_OK(WriteExport(job, three.address(), dir_.File("model"), &exported));
  EXPECT_EQ(exported.rows, rows);
  EXPECT_EQ(exported.servers, 3);
  absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(dir_.File("model"));
  SS_ASSERT_OK(reader.status());
  EXPECT_EQ(reader->num_rows(), rows);
  EXPECT_EQ(ExportTotals(*reader), std::pair(rows, values));

  Cluster two(job, 2, dir_, "two");
  absl::StatusOr<RowStreamStats> imported =
      ImportServerRows(*reader, job, two.address(), {.import_stream_rows = 500});
  SS_ASSERT_OK(imported.status());
  EXPECT_EQ(imported->rows, rows);
  EXPECT_EQ(two.Totals(), std::pair(rows, values));
}

TEST_F(JobExportTest, AnExportLoadsOntoAnotherSlotCount) {
  Cluster source(Job(64), 2, dir_, "source");
  source.Train(100, 26, 4, 2);
  std::optional<model::ExportReader> reader = ExportOf(Job(64), source);
  ASSERT_TRUE(reader.has_value());

  const ShadowSyncJob wider = Job(256);
  Cluster target(wider, 3, dir_, "target");
  SS_ASSERT_OK(ImportServerRows(*reader, wider, target.address(), {}).status());
  EXPECT_EQ(target.Totals(), source.Totals());
}

TEST_F(JobExportTest, WithoutOptimizerStateRowsStartWithZeroState) {
  const ShadowSyncJob job = Job(64, 4, /*with_state=*/false);
  Cluster source(job, 2, dir_, "source");
  source.Train(50, 26, 4, 3);
  std::optional<model::ExportReader> reader = ExportOf(job, source);
  ASSERT_TRUE(reader.has_value());
  EXPECT_FALSE(reader->info().with_optimizer_state);

  Cluster target(job, 1, dir_, "target");
  SS_ASSERT_OK(ImportServerRows(*reader, job, target.address(), {}).status());
  // What the servers hold: the exported values and 4 zeros of Adagrad state.
  EXPECT_EQ(target.Totals(),
            ExportTotals(*reader, [](std::span<const float> v, std::span<const float> state) {
              EXPECT_TRUE(state.empty());
              std::vector<float> row(v.begin(), v.end());
              row.resize(8, 0.0f);
              return row;
            }));
}

// The servers' optimizer is not the export's: its state is dropped and the
// weights alone sent (here SGD, which keeps no state).
TEST_F(JobExportTest, AnotherOptimizersStateIsLeftBehind) {
  Cluster source(Job(64), 2, dir_, "source");
  source.Train(50, 26, 4, 6);
  std::optional<model::ExportReader> reader = ExportOf(Job(64), source);
  ASSERT_TRUE(reader.has_value());
  ASSERT_TRUE(reader->info().with_optimizer_state);

  const ShadowSyncJob sgd = Job(64, 4, /*with_state=*/true, "sgd");
  Cluster target(sgd, 2, dir_, "target");
  SS_ASSERT_OK(ImportServerRows(*reader, sgd, target.address(), {}).status());
  // What the servers hold: the exported values alone.
  EXPECT_EQ(target.Totals(),
            ExportTotals(*reader, [](std::span<const float> v, std::span<const float> state) {
              EXPECT_EQ(state.size(), 4u);
              return std::vector<float>(v.begin(), v.end());
            }));
}

// A single-process model's parts hold their rows in no particular order
// (the in-memory store's); a warm start from one still sends each row to
// its owner and stores every one.
TEST_F(JobExportTest, ASingleProcessModelWarmStartsServers) {
  const ShadowSyncJob job = Job(64);
  const model::ExportInfo info = ExportInfoForJob(job);
  model::LocalEmbeddingStore store(info.embeddings);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < 5000; ++i) {
    const std::vector<float> values = {u(rng), u(rng), u(rng), u(rng)};
    const std::vector<float> state = {u(rng), u(rng), u(rng), u(rng)};
    store.PutRow(static_cast<uint32_t>(rng() % 26), rng() % 1000, values, state);
  }
  const size_t n = static_cast<size_t>(model::Dlrm(info.config).num_params());
  SS_ASSERT_OK(model::ExportLocalModel(dir_.File("model"), info, std::vector<float>(n, 0.5f),
                                       std::vector<float>(n, 0.25f), store));
  absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(dir_.File("model"));
  SS_ASSERT_OK(reader.status());
  // The case at hand: some part has a slot's rows apart, not in one run.
  bool scattered = false;
  SS_ASSERT_OK(reader->ForEachPart([&](int, std::string_view records) {
    std::set<uint32_t> seen;
    uint32_t last = UINT32_MAX;
    for (size_t at = 0; at < records.size(); at += reader->RecordBytes()) {
      const v1::PackedRow row = v1::PackedRowAt(records.substr(at), 8, 0);
      const uint32_t slot = SlotOf(row.table, row.id, 64);
      if (slot != last && !seen.insert(slot).second) scattered = true;
      last = slot;
    }
    return absl::OkStatus();
  }));
  EXPECT_TRUE(scattered);

  Cluster target(job, 2, dir_, "target");
  absl::StatusOr<RowStreamStats> imported = ImportServerRows(*reader, job, target.address(), {});
  SS_ASSERT_OK(imported.status());
  EXPECT_EQ(imported->rows, reader->num_rows());
  EXPECT_EQ(target.Totals(), ExportTotals(*reader));
}

TEST_F(JobExportTest, AnExportOfAnotherShapeIsRefusedAndNothingIsImported) {
  Cluster source(Job(64), 1, dir_, "source");
  source.Train(20, 26, 4, 4);
  std::optional<model::ExportReader> reader = ExportOf(Job(64), source);
  ASSERT_TRUE(reader.has_value());

  const ShadowSyncJob wider = Job(64, /*embedding_dim=*/8);
  Cluster target(wider, 1, dir_, "target");
  EXPECT_THAT(ImportServerRows(*reader, wider, target.address(), {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "embeddingDim"));
  EXPECT_EQ(target.Totals().first, 0);
}

TEST_F(JobExportTest, AnExportTakenWhilePushesGoOnIsWholeAndVerified) {
  const ShadowSyncJob job = Job(64);
  Cluster cluster(job, 2, dir_, "live");
  cluster.Train(100, 26, 4, 5);
  const int64_t rows_before = cluster.Totals().first;
  std::atomic<bool> stop = false;
  std::thread trainer([&] {
    for (uint64_t seed = 100; !stop.load(); ++seed) cluster.Train(20, 26, 4, seed);
  });
  RowStreamStats exported;
  const absl::Status status = WriteExport(job, cluster.address(), dir_.File("model"), &exported);
  stop = true;
  trainer.join();
  SS_ASSERT_OK(status);
  absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(dir_.File("model"));
  SS_ASSERT_OK(reader.status());
  SS_ASSERT_OK(reader->Verify());
  // Each server was read from one snapshot: at least the rows before, at most those after.
  EXPECT_GE(reader->num_rows(), rows_before);
  EXPECT_LE(reader->num_rows(), cluster.Totals().first);
}

// The manifest's eval is the score of exactly the model exported, the one
// `shadowsync eval --model` computes from its files, even when the servers'
// rows change while the export is taken (here a trainer pushing to every
// row the eval data looks up, throughout). Scoring the live servers before
// streaming their rows gave the eval of another model.
TEST_F(JobExportTest, TheManifestsEvalIsTheScoreOfTheExportedRows) {
  ShadowSyncJob job = Job(64);
  job.spec.sync.algorithm = SyncAlgorithm::kNone;  // Dense: the trainers' mean, no syncer.
  ASSERT_TRUE(GenerateSynthetic(
                  {.out_path = dir_.File("eval.tsv"), .examples = 3000, .seed = 9, .threads = 1})
                  .ok());
  const model::ExportInfo info = ExportInfoForJob(job);
  {
    model::LocalEmbeddingStore unused(info.embeddings);
    worker::Trainer fresh(info.config, info.embeddings.tables, {}, &unused);
    SS_ASSERT_OK(worker::SaveDenseCheckpoint(dir_.File("trainer-0.ckpt"),
                                             {0, fresh.params(), fresh.dense_state()}));
  }
  Cluster cluster(job, 2, dir_, "live");
  cluster.Train(200, 26, 4, 11);
  std::atomic<bool> stop = false;
  std::atomic<int> pushes = 0;
  std::thread trainer([&] {
    auto client = ps::PsClient::Connect(cluster.address(), 4, 26);
    ASSERT_TRUE(client.ok()) << client.status();
    std::mt19937_64 rng(12);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    while (!stop.load()) {
      std::vector<model::TableRows> grads(26);
      for (auto& r : grads) {
        for (uint64_t id = 0; id < 1000; id += 1 + rng() % 8) r.ids.push_back(id);
        r.values.resize(r.ids.size() * 4);
        for (float& v : r.values) v = u(rng);
      }
      SS_ASSERT_OK((*client)->Push(grads));
      ++pushes;
    }
  });
  const absl::StatusOr<nlohmann::json> summary =
      ExportJob({.job = job,
                 .exports_dir = dir_.File("exports"),
                 .ps_address = cluster.address(),
                 .trainer_checkpoints = {dir_.File("trainer-0.ckpt")},
                 .eval_data = {dir_.File("eval.tsv")}});
  stop = true;
  trainer.join();
  SS_ASSERT_OK(summary.status());
  EXPECT_GT(pushes.load(), 1);

  // What `shadowsync eval --model` does with its defaults: every row of the
  // export in memory, 2 threads, batches of 1024, the GEMM kernel the
  // manifest names.
  const std::string path = (*summary)["path"];
  absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(path);
  SS_ASSERT_OK(reader.status());
  const nlohmann::json& eval = reader->info().eval;
  absl::StatusOr<model::SavedModel> saved = model::LoadExport(path);
  SS_ASSERT_OK(saved.status());
  worker::TrainerOptions options;
  options.threads = 2;
  options.batch_size = 1024;
  absl::StatusOr<std::optional<model::GemmKernel>> gemm =
      model::ParseGemmKernel(eval.value("gemm", ""), "eval.gemm");
  SS_ASSERT_OK(gemm.status());
  ASSERT_TRUE(gemm->has_value()) << eval;
  options.gemm = *gemm;
  worker::Trainer scorer(saved->config, saved->store_options.tables, options, saved->store.get());
  scorer.params() = saved->params;
  absl::StatusOr<QualityReport> q = scorer.Evaluate({dir_.File("eval.tsv")});
  SS_ASSERT_OK(q.status());
  EXPECT_EQ(eval, (*summary)["eval"]);
  EXPECT_EQ(eval.value("eval_examples", int64_t{0}), 3000);
  // Bit for bit: the same rows, dense parameters and arithmetic.
  EXPECT_EQ(eval.value("eval_logloss", 0.0), q->logloss) << eval;
  EXPECT_EQ(eval.value("eval_ne", 0.0), q->ne) << eval;
  EXPECT_EQ(eval.value("eval_auc", 0.0), q->auc) << eval;
}

// Every row of an export as the model holds it, by key.
std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> RowsOf(const std::string& dir) {
  std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> rows;
  absl::StatusOr<model::SavedModel> saved = model::LoadExport(dir);
  EXPECT_TRUE(saved.ok()) << saved.status();
  if (!saved.ok()) return rows;
  saved->store->ForEachRow([&](uint32_t table, uint64_t id, std::span<const float> values,
                               std::span<const float> state) {
    std::vector<float>& row = rows[{table, id}];
    row.assign(values.begin(), values.end());
    row.insert(row.end(), state.begin(), state.end());
  });
  return rows;
}

// Deltas over a full export, with rows pushed and evicted in between, load
// as exactly the model a full export then holds; `keep` counts full exports
// and keeps the deltas over them.
TEST_F(JobExportTest, DeltaExportsOverAFullOneLoadAsTheFullExportWould) {
  ShadowSyncJob job = Job(64);
  job.spec.sync.algorithm = SyncAlgorithm::kNone;
  job.spec.export_.delta_interval_seconds = 60;
  job.spec.export_.keep = 1;
  {
    const model::ExportInfo info = ExportInfoForJob(job);
    model::LocalEmbeddingStore unused(info.embeddings);
    worker::Trainer fresh(info.config, info.embeddings.tables, {}, &unused);
    SS_ASSERT_OK(worker::SaveDenseCheckpoint(dir_.File("trainer-0.ckpt"),
                                             {0, fresh.params(), fresh.dense_state()}));
  }
  constexpr int64_t kMaxRows = 2000;  // per server: training evicts
  Cluster cluster(job, 2, dir_, "live", kMaxRows);
  auto settle = [&] {  // until the eviction loops are done
    for (int i = 0; i < 500 && cluster.Totals().first > 2 * kMaxRows; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_LE(cluster.Totals().first, 2 * kMaxRows);
  };
  JobExportRequest request{.job = job,
                           .exports_dir = dir_.File("exports"),
                           .ps_address = cluster.address(),
                           .trainer_checkpoints = {dir_.File("trainer-0.ckpt")},
                           .delta = true};
  cluster.Train(60, 26, 4, 1);
  settle();
  // No export yet to go over: a full one, saying why.
  absl::StatusOr<nlohmann::json> first = ExportJob(request);
  SS_ASSERT_OK(first.status());
  EXPECT_FALSE(first->contains("delta"));
  EXPECT_THAT((*first)["full_because"].get<std::string>(), HasSubstr("no export yet"));

  int64_t tombstones = 0;
  for (uint64_t seed = 2; seed <= 3; ++seed) {
    cluster.Train(40, 26, 4, seed);
    settle();
    absl::StatusOr<nlohmann::json> delta = ExportJob(request);
    SS_ASSERT_OK(delta.status());
    ASSERT_TRUE(delta->contains("delta")) << *delta;
    EXPECT_EQ((*delta)["delta"]["base"], absl::StrCat("model-00000", seed - 1));
    EXPECT_LT((*delta)["rows"].get<int64_t>(), cluster.Totals().first);
    tombstones += (*delta)["delta"]["tombstones"].get<int64_t>();
  }
  EXPECT_GT(tombstones, 0) << "nothing was evicted between exports";
  const std::string latest = dir_.File("exports/model-000003");
  absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(latest);
  SS_ASSERT_OK(reader.status());
  EXPECT_TRUE(reader->is_delta());
  EXPECT_THAT(reader->CheckShape(reader->config(), reader->info().embeddings.tables),
              StatusIs(absl::StatusCode::kFailedPrecondition, "a warm start needs a full export"));
  // The same moment as a full export (nothing changes in between).
  absl::StatusOr<nlohmann::json> full =
      ExportJob({.job = job,
                 .exports_dir = dir_.File("full"),
                 .ps_address = cluster.address(),
                 .trainer_checkpoints = {dir_.File("trainer-0.ckpt")}});
  SS_ASSERT_OK(full.status());
  const auto want = RowsOf((*full)["path"].get<std::string>());
  EXPECT_EQ(static_cast<int64_t>(want.size()), cluster.Totals().first);
  EXPECT_TRUE(RowsOf(latest) == want) << "the deltas' chain is not the servers' rows";

  // Every export so far is one full export and its deltas: all kept. A new
  // full export (keep: 1) retires them.
  for (int n = 1; n <= 3; ++n) {
    EXPECT_TRUE(fs::exists(dir_.File(absl::StrCat("exports/model-00000", n)))) << n;
  }
  request.delta = false;
  SS_ASSERT_OK(ExportJob(request).status());
  for (int n = 1; n <= 3; ++n) {
    EXPECT_FALSE(fs::exists(dir_.File(absl::StrCat("exports/model-00000", n)))) << n;
  }
  EXPECT_TRUE(fs::exists(dir_.File("exports/model-000004")));
}

}  // namespace
}  // namespace shadowsync::exporter
