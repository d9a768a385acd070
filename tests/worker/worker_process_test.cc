// Trainers of one job (RunWorker, as `shadowsync worker` runs it) against a
// real parameter server and syncer on loopback.
#include "worker/worker_process.h"

#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "common/synthetic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/ps_server.h"
#include "syncer/syncer_server.h"
#include "tests/util/test_util.h"

namespace shadowsync::worker {
namespace {

constexpr int64_t kExamples = 6000;

class WorkerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_.path().string();
    SyntheticOptions gen;
    gen.out_path = dir_ + "/train.tsv";
    gen.examples = kExamples;
    gen.seed = 3;
    SS_ASSERT_OK(GenerateSynthetic(gen).status());

    spec_.model.bottom_mlp = {32};
    spec_.model.top_mlp = {32};
    spec_.model.tables = CriteoTables(1000);
    spec_.trainer.replicas = 2;
    spec_.trainer.threads = 2;
    spec_.trainer.batch_size = 64;

    ps::PsServerOptions po;
    po.metrics_address = "";
    po.store.db_path = dir_ + "/ps";
    po.store.dim = spec_.model.embedding_dim;
    for (const TableSpec& t : spec_.model.tables) {
      po.store.tables.push_back({t.name, static_cast<uint64_t>(t.hash_buckets)});
    }
    auto ps = ps::PsServer::Start(po);
    SS_ASSERT_OK(ps);
    ps_ = std::move(*ps);
    syncer::SyncerServerOptions so;
    so.metrics_address = "";
    auto syncer = syncer::SyncerServer::Start(so);
    SS_ASSERT_OK(syncer);
    syncer_ = std::move(*syncer);
  }

  // Runs every trainer of spec_ at once; returns their reports.
  std::vector<WorkerReport> RunAll(SyncAlgorithm algorithm) {
    spec_.sync.algorithm = algorithm;
    spec_.sync.duty_cycle = 1;
    const int n = spec_.trainer.replicas;
    std::vector<absl::StatusOr<WorkerReport>> results(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        WorkerOptions o;
        o.spec = spec_;
        o.index = i;
        o.ps_address = ps_->address();
        o.syncer_addresses = {syncer_->address()};
        o.data = {dir_ + "/train.tsv"};
        o.eval_data = {dir_ + "/train.tsv"};
        o.eval_every = 1000;
        o.eval_curve_examples = 500;
        o.progress_interval_seconds = 0.01;
        results[i] = RunWorker(o);
      });
    }
    for (auto& t : threads) t.join();
    std::vector<WorkerReport> reports;
    for (auto& r : results) {
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) reports.push_back(*r);
    }
    return reports;
  }

  testing::ScratchDir scratch_;
  std::string dir_;
  JobSpec spec_;
  std::unique_ptr<ps::PsServer> ps_;
  std::unique_ptr<syncer::SyncerServer> syncer_;
};

// Every example is trained by exactly one trainer, the replicas sync in the
// background, and each trainer scores the whole held-out file.
TEST_F(WorkerProcessTest, ShadowMaTrainersShareTheDataAndSync) {
  const std::vector<WorkerReport> reports = RunAll(SyncAlgorithm::kShadowMa);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].train.examples + reports[1].train.examples, kExamples);
  for (const WorkerReport& r : reports) {
    EXPECT_GT(r.sync.rounds, 0);
    EXPECT_GT(r.sync.bytes_sent, 0);
    EXPECT_EQ(r.sync.blocked_seconds, 0);
    ASSERT_TRUE(r.eval.has_value());
    EXPECT_EQ(r.eval->examples, kExamples);
    EXPECT_LT(r.eval->ne, 1.0);  // It learned something.
    EXPECT_GE(r.curve.size(), 2u);
  }
}

TEST_F(WorkerProcessTest, EveryAlgorithmTrainsToTheEnd) {
  for (SyncAlgorithm a : {SyncAlgorithm::kNone, SyncAlgorithm::kShadowEasgd,
                          SyncAlgorithm::kShadowBmuf, SyncAlgorithm::kFgEasgd, SyncAlgorithm::kFgMa,
                          SyncAlgorithm::kFgBmuf, SyncAlgorithm::kBsp, SyncAlgorithm::kAsp}) {
    SCOPED_TRACE(std::string(EnumName(a)));
    const std::vector<WorkerReport> reports = RunAll(a);
    ASSERT_EQ(reports.size(), 2u);
    EXPECT_EQ(reports[0].train.examples + reports[1].train.examples, kExamples);
    if (a != SyncAlgorithm::kNone) EXPECT_GT(reports[0].sync.rounds, 0);
  }
}

TEST_F(WorkerProcessTest, BadIndexAndMissingSyncerAreNamed) {
  WorkerOptions o;
  o.spec = spec_;
  o.index = 2;
  o.ps_address = ps_->address();
  o.data = {dir_ + "/train.tsv"};
  EXPECT_THAT(RunWorker(o).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "--index: 2"));
  o.index = 0;
  o.spec.sync.algorithm = SyncAlgorithm::kShadowMa;
  EXPECT_THAT(RunWorker(o).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "--syncer"));
}

}  // namespace
}  // namespace shadowsync::worker
