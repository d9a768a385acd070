// Trainers of one job (RunWorker, as `shadowsync worker` runs it) against a
// real parameter server and syncer on loopback.
#include "worker/worker_process.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/synthetic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/ps_server.h"
#include "syncer/syncer_server.h"
#include "tests/util/http_get.h"
#include "tests/util/test_util.h"
#include "worker/checkpoint.h"

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
    StartServers("ps");
  }

  // A parameter server with an empty store under dir_/`db` and a syncer
  // that has seen no group, in place of those running.
  void StartServers(const std::string& db) {
    syncer_.reset();
    ps_.reset();
    ps::PsServerOptions po;
    po.metrics_address = "";
    po.store.db_path = dir_ + "/" + db;
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

  // Trainer 0 of spec_ alone (no sync: its replica changes only by its own
  // training), checkpointing to `checkpoint`.
  WorkerOptions Solo(const std::string& checkpoint) {
    spec_.sync.algorithm = SyncAlgorithm::kNone;
    WorkerOptions o;
    o.spec = spec_;
    o.index = 0;
    o.ps_address = ps_->address();
    o.metrics_address = "";
    o.data = {dir_ + "/train.tsv"};
    o.progress_interval_seconds = 0.01;
    o.checkpoint_path = checkpoint;
    return o;
  }

  testing::ScratchDir scratch_;
  std::string dir_;
  JobSpec spec_;
  std::unique_ptr<ps::PsServer> ps_;
  std::unique_ptr<syncer::SyncerServer> syncer_;
};

// Every example is trained by exactly one trainer, the replicas sync in the
// background without training ever waiting (no warm-up here), each trainer
// scores the whole held-out file, and the final round leaves one model.
TEST_F(WorkerProcessTest, ShadowMaTrainersShareTheDataAndSync) {
  spec_.sync.warmup_steps = 0;
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
  EXPECT_EQ(reports[0].eval->ne, reports[1].eval->ne);  // One model.
}

TEST_F(WorkerProcessTest, EveryAlgorithmTrainsToTheEnd) {
  for (SyncAlgorithm a : {SyncAlgorithm::kNone, SyncAlgorithm::kShadowEasgd,
                          SyncAlgorithm::kShadowBmuf, SyncAlgorithm::kFgEasgd, SyncAlgorithm::kFgMa,
                          SyncAlgorithm::kFgBmuf, SyncAlgorithm::kBsp, SyncAlgorithm::kAsp}) {
    SCOPED_TRACE(std::string(EnumName(a)));
    const std::vector<WorkerReport> reports = RunAll(a);
    ASSERT_EQ(reports.size(), 2u);
    EXPECT_EQ(reports[0].train.examples + reports[1].train.examples, kExamples);
    if (a != SyncAlgorithm::kNone) {
      EXPECT_GT(reports[0].sync.rounds, 0);
    }
  }
}

// DCN-v2's cross layers are dense parameters like the MLPs': every algorithm
// syncs them, and the rows still come from the parameter server.
TEST_F(WorkerProcessTest, DcnModelsTrainAndLearnUnderEveryAlgorithm) {
  spec_.model.interaction = ModelInteraction::kDcn;
  spec_.model.dcn = {.layers = 2, .low_rank = 16};
  spec_.trainer.lr_warmup_steps = 10;
  spec_.sync.sync_switch.switch_step =
      5;  // The launcher derives it from the data; no launcher here.
  for (size_t i = 0; i < EnumTraits<SyncAlgorithm>::kNames.size(); ++i) {
    const auto a = static_cast<SyncAlgorithm>(i);
    SCOPED_TRACE(std::string(EnumName(a)));
    // From scratch each time: rows trained by every earlier algorithm over
    // the same examples (which are also the eval set) make the model so sure
    // of itself that one replica's swing costs an NE above 1.
    StartServers("ps-" + std::string(EnumName(a)));
    const std::vector<WorkerReport> reports = RunAll(a);
    ASSERT_EQ(reports.size(), 2u);
    EXPECT_EQ(reports[0].train.examples + reports[1].train.examples, kExamples);
    for (const WorkerReport& r : reports) {
      ASSERT_TRUE(r.eval.has_value());
      // Better than the base rate (NE 1). From scratch, one epoch: 0.75-0.92
      // here alone; sync-switch reached 0.994 with both cores loaded.
      EXPECT_LT(r.eval->ne, 1.0);
      if (a != SyncAlgorithm::kNone) {
        EXPECT_GT(r.sync.rounds, 0);
      }
    }
  }
}

TEST_F(WorkerProcessTest, BadIndexMissingSyncerAndStragglerSettingsAreNamed) {
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
  o.spec.sync.algorithm = SyncAlgorithm::kNone;
  o.slowdown = 0.5;
  EXPECT_THAT(RunWorker(o).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "slowdown 0.5"));
  o.slowdown = 1;
  o.step_delay = absl::Milliseconds(-1);
  EXPECT_THAT(RunWorker(o).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "delay -1ms"));
}

TEST_F(WorkerProcessTest, CheckpointFileRoundTripsAndChecksItsFormat) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // The CRC-32C check value.
  const std::string path = dir_ + "/c.ckpt";
  EXPECT_THAT(LoadDenseCheckpoint(path), testing::StatusIs(absl::StatusCode::kNotFound, path));
  const std::vector<float> params = {1.5f, -2, 3e-7f}, state = {0.25f, 4, 8};
  SS_ASSERT_OK(SaveDenseCheckpoint(path, {42, params, state}));
  auto loaded = LoadDenseCheckpoint(path);
  SS_ASSERT_OK(loaded);
  EXPECT_EQ(loaded->examples, 42);
  EXPECT_EQ(loaded->params, params);
  EXPECT_EQ(loaded->dense_state, state);
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }

  // A future version, with a valid checksum: refused, not misread.
  std::string bytes = testing::ReadFile(path);
  bytes[8] = 2;
  const uint32_t crc = Crc32c(std::string_view(bytes).substr(0, bytes.size() - 4));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  testing::WriteFile(path, bytes);
  EXPECT_THAT(LoadDenseCheckpoint(path),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, path + ": checkpoint format "
                                                                           "version 2"));
  testing::WriteFile(path, "SSMODEL1 and then some more bytes than a header");
  EXPECT_THAT(LoadDenseCheckpoint(path),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "not a ShadowSync dense"));
  testing::WriteFile(path, "SSCKPT01");
  EXPECT_THAT(LoadDenseCheckpoint(path),
              testing::StatusIs(absl::StatusCode::kDataLoss, path + ": truncated"));

  // An unwritable place fails naming the file and leaves nothing behind.
  const std::string nowhere = dir_ + "/missing-dir/c.ckpt";
  EXPECT_THAT(SaveDenseCheckpoint(nowhere, {1, params, state}),
              testing::StatusIs(absl::StatusCode::kUnavailable, nowhere));
}

// A trainer stopped part-way resumes from its own checkpoint: it skips what
// the checkpoint covers and starts from the saved weights, not fresh ones.
TEST_F(WorkerProcessTest, CheckpointResumesTheRemainderFromTheSavedWeights) {
  const std::string ckpt = dir_ + "/trainer-0.ckpt";
  const int64_t share = kExamples / 2;  // Trainer 0 of 2 reads the even lines.
  WorkerOptions o = Solo(ckpt);
  o.max_examples = 1000;
  auto first = RunWorker(o);
  SS_ASSERT_OK(first);
  EXPECT_EQ(first->train.examples, 1000);
  EXPECT_EQ(first->resumed_from_examples, 0);
  EXPECT_EQ(first->skipped_examples, 0);
  EXPECT_GE(first->checkpoints_written, 1);
  auto saved = LoadDenseCheckpoint(ckpt);
  SS_ASSERT_OK(saved);
  EXPECT_EQ(saved->examples, 1000);
  EXPECT_EQ(static_cast<int64_t>(saved->params.size()), first->dense_params);
  EXPECT_EQ(static_cast<int64_t>(saved->dense_state.size()), first->dense_params);  // Adagrad.

  // The weights a fresh trainer starts from (it skips its whole share, so
  // its final checkpoint holds the initialisation): not the trained ones.
  WorkerOptions fresh_options = Solo(dir_ + "/fresh.ckpt");
  fresh_options.skip_examples = share;
  auto fresh_run = RunWorker(fresh_options);
  SS_ASSERT_OK(fresh_run);
  EXPECT_EQ(fresh_run->train.examples, 0);
  auto fresh = LoadDenseCheckpoint(fresh_options.checkpoint_path);
  SS_ASSERT_OK(fresh);
  EXPECT_NE(fresh->params, saved->params);

  // Nothing left below max_examples: the resumed trainer trains nothing and
  // saves again exactly the weights it loaded.
  auto idle = RunWorker(o);
  SS_ASSERT_OK(idle);
  EXPECT_EQ(idle->train.examples, 0);
  EXPECT_EQ(idle->resumed_from_examples, 1000);
  auto resaved = LoadDenseCheckpoint(ckpt);
  SS_ASSERT_OK(resaved);
  EXPECT_EQ(resaved->examples, 1000);
  EXPECT_EQ(resaved->params, saved->params);
  EXPECT_EQ(resaved->dense_state, saved->dense_state);

  // The whole share: only the remainder is trained.
  o.max_examples = -1;
  auto rest = RunWorker(o);
  SS_ASSERT_OK(rest);
  EXPECT_EQ(rest->resumed_from_examples, first->train.examples);
  EXPECT_EQ(rest->skipped_examples, first->train.examples);
  EXPECT_EQ(rest->train.examples, share - first->train.examples);
  auto last = LoadDenseCheckpoint(ckpt);
  SS_ASSERT_OK(last);
  EXPECT_EQ(last->examples, share);
  const nlohmann::json j = WorkerReportToJson(o, *rest);
  EXPECT_EQ(j["resumed_from_examples"], 1000);
  EXPECT_EQ(j["skipped_examples"], 1000);
  EXPECT_EQ(j["examples"], share - 1000);
  EXPECT_EQ(j["checkpoints_written"], rest->checkpoints_written);
}

// The value of the sample `series` (name and labels, as exposed) in a
// Prometheus text exposition; nullopt when absent.
std::optional<double> Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

// /metrics while training: the dashboards' progress (examples_total over
// examples_target) and loss panels read these.
TEST_F(WorkerProcessTest, MetricsExposeLossAndTheRunsExampleTarget) {
  WorkerOptions o = Solo("");
  o.metrics_address = "127.0.0.1:0";
  o.job_examples = kExamples;  // Trainer 0 of 2: a share of 3000 ...
  o.max_examples = 1000;       // ... capped at 1000 ...
  o.skip_examples = 200;       // ... of which 200 were trained before.
  o.progress_interval_seconds = 0.005;
  o.step_delay = absl::Milliseconds(5);  // Several progress reports before the end.
  int port = 0;
  o.on_ready = [&](int p) { port = p; };
  std::string text;
  double logloss = 0;
  o.on_progress = [&](const Progress& p) {
    // The gauges are set before on_progress runs.
    if (p.examples == 0 || !text.empty()) return;
    ASSERT_EQ(testing::HttpGet(port, "/metrics", &text), 200);
    logloss = p.train_logloss;
  };
  auto report = RunWorker(o);
  SS_ASSERT_OK(report);
  EXPECT_EQ(report->train.examples, 800);
  ASSERT_FALSE(text.empty()) << "no progress report with examples";
  EXPECT_EQ(Sample(text, R"(shadowsync_trainer_examples_target{trainer="0"})"), 800) << text;
  // What the operator adds to examples_total for the share done so far.
  EXPECT_EQ(Sample(text, R"(shadowsync_trainer_examples_resumed{trainer="0"})"), 200) << text;
  const std::optional<double> exposed =
      Sample(text, R"(shadowsync_trainer_train_logloss{trainer="0"})");
  ASSERT_TRUE(exposed.has_value()) << text;
  EXPECT_GT(*exposed, 0.1);  // A log loss near ln 2 for a fresh model.
  EXPECT_LT(*exposed, 2.0);
  EXPECT_NEAR(*exposed, logloss, 1e-6 * logloss);
  EXPECT_TRUE(Sample(text, R"(shadowsync_trainer_train_ne{trainer="0"})").has_value()) << text;
}

// Labels drawn at random: nothing to learn. The learning check says so in
// the report and in /metrics while training; with `fail` the trainer stops
// there instead of training its whole share.
TEST_F(WorkerProcessTest, ARunThatIsNotLearningSaysSoAndStopsWhenAskedTo) {
  // Each run draws its own labels: the parameter server keeps the rows the
  // first run fitted to its labels, which say nothing about the second's.
  auto random_labels = [&](unsigned seed) {
    const std::string path = absl::StrCat(dir_, "/random", seed, ".tsv");
    std::ifstream in(dir_ + "/train.tsv");
    std::ofstream out(path);
    std::mt19937 gen(seed);
    std::bernoulli_distribution click(0.25);
    for (std::string line; std::getline(in, line);) {
      line[0] = click(gen) ? '1' : '0';
      out << line << '\n';
    }
    return path;
  };
  spec_.trainer.lr_warmup_steps = 0;
  spec_.trainer.learning_check.after_examples = 1000;
  int64_t examples[2] = {0, 0};
  for (const bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "fail" : "warn");
    spec_.trainer.learning_check.fail = fail;
    WorkerOptions o = Solo("");
    o.data = {random_labels(fail ? 2 : 1)};
    o.metrics_address = "127.0.0.1:0";
    int port = 0;
    o.on_ready = [&](int p) { port = p; };
    std::string text;
    o.on_progress = [&](const Progress& p) {
      if (p.learning_problem.empty() || !text.empty()) return;
      ASSERT_EQ(testing::HttpGet(port, "/metrics", &text), 200);
    };
    auto report = RunWorker(o);
    SS_ASSERT_OK(report);
    EXPECT_THAT(report->train.learning_problem, ::testing::HasSubstr("not learning: train NE"));
    if (!fail) {  // A stopped run may end before its next progress report.
      EXPECT_EQ(Sample(text, R"(shadowsync_trainer_not_learning{trainer="0"})"), 1) << text;
    }
    examples[fail] = report->train.examples;
  }
  EXPECT_LT(examples[true], examples[false]) << "the failing run trained its whole share";
}

// /metrics after each evaluation on the held-out data: NE, AUC and
// calibration of the latest one, absent (not 0) before the first.
TEST_F(WorkerProcessTest, MetricsExposeTheLatestEvaluation) {
  WorkerOptions o = Solo("");
  o.metrics_address = "127.0.0.1:0";
  o.max_examples = 1200;
  o.eval_data = {dir_ + "/train.tsv"};
  o.eval_every = 300;
  o.eval_curve_examples = 200;
  o.progress_interval_seconds = 0.005;
  o.step_delay = absl::Milliseconds(5);  // Progress reports between the evaluations.
  int port = 0;
  o.on_ready = [&](int p) { port = p; };
  std::vector<std::string> texts;
  o.on_progress = [&](const Progress&) {
    std::string text;
    ASSERT_EQ(testing::HttpGet(port, "/metrics", &text), 200);
    texts.push_back(text);
  };
  auto report = RunWorker(o);
  SS_ASSERT_OK(report);
  ASSERT_GE(report->curve.size(), 2u);
  ASSERT_FALSE(texts.empty());
  EXPECT_FALSE(Sample(texts.front(), R"(shadowsync_trainer_eval_ne{trainer="0"})").has_value())
      << texts.front();
  // Every exposed evaluation is one of the curve's.
  int seen = 0;
  for (const std::string& text : texts) {
    const std::optional<double> ne = Sample(text, R"(shadowsync_trainer_eval_ne{trainer="0"})");
    if (!ne.has_value()) continue;
    ++seen;
    const std::optional<double> auc = Sample(text, R"(shadowsync_trainer_eval_auc{trainer="0"})");
    ASSERT_TRUE(auc.has_value()) << text;
    EXPECT_TRUE(std::any_of(report->curve.begin(), report->curve.end(), [&](const auto& c) {
      return std::abs(c.eval_ne - *ne) < 1e-9 && std::abs(c.eval_auc - *auc) < 1e-9;
    })) << text;
    const std::optional<double> calibration =
        Sample(text, R"(shadowsync_trainer_eval_calibration{trainer="0"})");
    ASSERT_TRUE(calibration.has_value()) << text;
    EXPECT_GT(*calibration, 0);
  }
  EXPECT_GT(seen, 0) << "no progress report after an evaluation";
}

// The target is set before training starts; without the job's size or a
// cap it is unknown: 0.
TEST_F(WorkerProcessTest, ExampleTargetIsZeroWhenUnknown) {
  WorkerOptions o = Solo("");
  o.metrics_address = "127.0.0.1:0";
  o.max_examples = 300;
  std::string text;
  o.on_ready = [&](int port) { ASSERT_EQ(testing::HttpGet(port, "/metrics", &text), 200); };
  SS_ASSERT_OK(RunWorker(o));
  EXPECT_EQ(Sample(text, R"(shadowsync_trainer_examples_target{trainer="0"})"), 300) << text;

  o.max_examples = -1;
  o.skip_examples = kExamples / 2 - 10;  // Keep the run short.
  text.clear();
  SS_ASSERT_OK(RunWorker(o));
  EXPECT_EQ(Sample(text, R"(shadowsync_trainer_examples_target{trainer="0"})"), 0) << text;
}

TEST_F(WorkerProcessTest, CorruptOrMismatchedCheckpointFailsNamingTheFile) {
  const std::string ckpt = dir_ + "/trainer-0.ckpt";
  WorkerOptions o = Solo(ckpt);
  o.max_examples = 200;
  auto first = RunWorker(o);
  SS_ASSERT_OK(first);
  const std::string good = testing::ReadFile(ckpt);

  // One flipped bit in the weights.
  std::string bad = good;
  bad[bad.size() / 2] ^= 0x10;
  testing::WriteFile(ckpt, bad);
  EXPECT_THAT(RunWorker(o), testing::StatusIs(absl::StatusCode::kDataLoss, ckpt + ": checkpoint "
                                                                                  "checksum"));
  EXPECT_EQ(testing::ReadFile(ckpt), bad);  // Refused, not overwritten.

  // Cut short.
  testing::WriteFile(ckpt, good.substr(0, good.size() - 100));
  EXPECT_THAT(RunWorker(o), testing::StatusIs(absl::StatusCode::kDataLoss, ckpt));

  // Another model's parameter count.
  const std::vector<float> small(7, 0.5f);
  SS_ASSERT_OK(SaveDenseCheckpoint(ckpt, {100, small, small}));
  EXPECT_THAT(RunWorker(o), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                              absl::StrCat(ckpt, ": 7 dense params, the model has ",
                                                           first->dense_params)));

  // The right parameter count, but SGD's (empty) optimizer state.
  const std::vector<float> params(first->dense_params, 0.5f);
  SS_ASSERT_OK(SaveDenseCheckpoint(ckpt, {100, params, {}}));
  EXPECT_THAT(RunWorker(o),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                absl::StrCat(ckpt, ": 0 dense optimizer state floats")));
}

// Periodic saves go through a temporary file and a rename: every version a
// reader sees mid-run is complete, and no .tmp is left behind.
TEST_F(WorkerProcessTest, CheckpointsAreWrittenAtomicallyWhileTraining) {
  const std::string ckpt = dir_ + "/trainer-0.ckpt";
  WorkerOptions o = Solo(ckpt);
  o.checkpoint_interval_seconds = 0;  // At every progress report.
  int seen = 0;
  absl::Status mid_run_status;
  o.on_progress = [&](const Progress& p) {
    if (!std::filesystem::exists(ckpt)) return;
    auto c = LoadDenseCheckpoint(ckpt);
    if (!c.ok()) {
      mid_run_status = c.status();
      return;
    }
    EXPECT_LE(c->examples, p.examples);
    ++seen;
  };
  auto report = RunWorker(o);
  SS_ASSERT_OK(report);
  SS_EXPECT_OK(mid_run_status);
  EXPECT_EQ(report->train.examples, kExamples / 2);
  EXPECT_GE(report->checkpoints_written, 2);  // Periodic ones, then the final one.
  EXPECT_GE(seen, 1);
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    if (entry.path().extension() == ".ckpt" || entry.path().extension() == ".tmp") {
      files.push_back(entry.path().filename().string());
    }
  }
  EXPECT_THAT(files, ::testing::ElementsAre("trainer-0.ckpt"));
  auto last = LoadDenseCheckpoint(ckpt);
  SS_ASSERT_OK(last);
  EXPECT_EQ(last->examples, kExamples / 2);
}

}  // namespace
}  // namespace shadowsync::worker
