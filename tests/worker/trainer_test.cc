#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "data/synthetic.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec.h"
#include "tests/util/test_util.h"
#include "worker/sync/strategy.h"

namespace shadowsync::worker {
namespace {

// A small model on synthetic teacher data, trained by several Hogwild threads.
class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::ScratchDir();
    SyntheticOptions gen;
    gen.out_path = dir_->File("train.tsv");
    gen.examples = 24000;
    gen.eval_out_path = dir_->File("eval.tsv");  // Held out, from the same teacher.
    gen.eval_examples = 4000;
    gen.seed = 3;
    ASSERT_TRUE(GenerateSynthetic(gen).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static model::DlrmConfig SmallModel() {
    model::DlrmConfig c;
    c.embedding_dim = 8;
    c.bottom_mlp = {32};
    c.top_mlp = {32};
    return c;
  }

  model::LocalStoreOptions StoreOptions() {
    model::LocalStoreOptions o;
    o.dim = 8;
    for (int t = 0; t < 26; ++t) o.tables.push_back({"C" + std::to_string(t + 1), 10000});
    o.optimizer = {model::OptimizerKind::kAdagrad, 0.01f};
    return o;
  }

  // Options training on `threads` threads in batches of `batch_size` with
  // `store`'s optimizer.
  static TrainerOptions Options(const model::LocalEmbeddingStore& store, int threads,
                                int batch_size) {
    TrainerOptions options;
    options.threads = threads;
    options.batch_size = batch_size;
    options.optimizer = store.options().optimizer;
    return options;
  }

  static testing::ScratchDir* dir_;
};
testing::ScratchDir* TrainerTest::dir_ = nullptr;

TEST_F(TrainerTest, HogwildThreadsLearnBetterThanTheBaseRate) {
  model::LocalEmbeddingStore store(StoreOptions());
  TrainerOptions options = Options(store, 3, 64);
  Trainer trainer(SmallModel(), store.options().tables, options, &store);
  auto report = trainer.Train({dir_->File("train.tsv")});
  SS_ASSERT_OK(report);
  EXPECT_EQ(report->examples, 24000);
  EXPECT_EQ(report->malformed_lines, 0);
  EXPECT_LT(report->train_ne, 1.0);
  EXPECT_GT(store.num_rows(), 0);
  auto eval = trainer.Evaluate({dir_->File("eval.tsv")});
  SS_ASSERT_OK(eval);
  EXPECT_EQ(eval->examples, 4000);
  EXPECT_LT(eval->ne, 0.97) << "eval NE must beat the base-rate predictor (1.0)";
  EXPECT_GT(eval->auc, 0.6);
}

// Mixed precision learns as well as fp32 here: within 1% eval NE.
TEST_F(TrainerTest, Bf16GemmsLearnAsWellAsFp32) {
  double ne[2];
  for (auto precision : {model::DensePrecision::kFp32, model::DensePrecision::kBf16}) {
    model::LocalEmbeddingStore store(StoreOptions());
    // One thread: the two runs differ only in precision.
    TrainerOptions options = Options(store, 1, 64);
    options.precision = precision;
    Trainer trainer(SmallModel(), store.options().tables, options, &store);
    SS_ASSERT_OK(trainer.Train({dir_->File("train.tsv")}));
    auto eval = trainer.Evaluate({dir_->File("eval.tsv")});
    SS_ASSERT_OK(eval);
    ne[precision == model::DensePrecision::kBf16] = eval->ne;
  }
  EXPECT_LT(ne[1], 0.97) << "bf16 must beat the base-rate predictor";
  EXPECT_NEAR(ne[1], ne[0], 0.01 * ne[0]);
  EXPECT_NE(ne[1], ne[0]) << "identical NE: bf16 was not used";
}

// Checkpoints and curve evaluations copy the replica from the driving
// thread while a lone training thread updates it with plain stores: the
// copies wait for step boundaries (ThreadSanitizer, in the tsan preset,
// reports any overlap), see training's progress, and training loses nothing.
TEST_F(TrainerTest, SnapshotsDuringALoneThreadsTrainingWaitForItsSteps) {
  model::LocalEmbeddingStore store(StoreOptions());
  TrainerOptions options = Options(store, 1, 64);
  options.progress_interval_seconds = 0.02;
  Trainer* trainer_ptr = nullptr;
  std::vector<float> params, state;
  int snapshots = 0;
  options.on_progress = [&](const Progress&) {
    trainer_ptr->SnapshotDense(&params, &state);
    ++snapshots;
  };
  Trainer trainer(SmallModel(), store.options().tables, options, &store);
  trainer_ptr = &trainer;
  const std::vector<float> initial = trainer.params();
  auto report = trainer.Train({dir_->File("train.tsv")});
  SS_ASSERT_OK(report);
  EXPECT_EQ(report->examples, 24000);
  ASSERT_GT(snapshots, 1);
  EXPECT_NE(params, initial) << "the last snapshot during training saw no step";
  auto eval = trainer.Evaluate({dir_->File("eval.tsv")});
  SS_ASSERT_OK(eval);
  EXPECT_LT(eval->ne, 0.97);
}

TEST_F(TrainerTest, PreloadAndStreamingSeeTheSameExamples) {
  for (bool preload : {false, true}) {
    model::LocalEmbeddingStore store(StoreOptions());
    TrainerOptions options;
    options.threads = 2;
    options.batch_size = 100;
    options.preload = preload;
    options.max_examples = 5000;
    options.reader.chunk_bytes = 64 << 10;  // many blocks when streaming
    Trainer trainer(SmallModel(), store.options().tables, options, &store);
    auto report = trainer.Train({dir_->File("train.tsv")});
    SS_ASSERT_OK(report);
    EXPECT_EQ(report->examples, 5000) << "preload=" << preload;
  }
}

// Straggler injection: a fixed delay costs at least steps x delay, and a
// slowdown factor of 4 makes the same run several times as slow as without.
TEST_F(TrainerTest, StragglerSettingsSlowEveryStep) {
  // Enough steps that the slowed part (each step's wall time) outweighs what
  // a slowdown does not stretch: starting and joining the worker, which on a
  // loaded machine waits for the scheduler. With 30 steps, two busy loops on
  // the 2-core VM left a ratio of 1.14.
  auto run = [&](absl::Duration delay, double slowdown, int64_t examples) {
    model::LocalEmbeddingStore store(StoreOptions());
    TrainerOptions options;
    options.threads = 1;
    options.batch_size = 100;
    options.preload = true;
    options.max_examples = examples;
    options.step_delay = delay;
    options.slowdown = slowdown;
    Trainer trainer(SmallModel(), store.options().tables, options, &store);
    auto report = trainer.Train({dir_->File("train.tsv")});
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? report->seconds : 0.0;
  };
  EXPECT_GE(run(absl::Milliseconds(10), 1, 3000), 30 * 0.010);  // 30 steps
  // Pairs run back to back see the same load; the machine is shared, so the
  // best pair's ratio counts.
  double best = 0;
  for (int i = 0; i < 3 && best <= 2.5; ++i) {
    const double plain = run(absl::ZeroDuration(), 1, 24000);  // 240 steps
    const double slowed = run(absl::ZeroDuration(), 4, 24000);
    best = std::max(best, slowed / plain);
  }
  EXPECT_GT(best, 2.5) << "slowdown 4 made the run only " << best << " times as long";
}

// A strategy whose every update waits `wait` on "the network", as asp's
// blocking pull does.
class SlowNetworkStrategy : public SyncStrategy {
 public:
  explicit SlowNetworkStrategy(absl::Duration wait)
      : SyncStrategy(SyncConfig{}, nullptr), wait_(wait) {}
  absl::Status ApplyGradient(int thread, std::span<const float> grad) override {
    absl::SleepFor(wait_);
    RecordBlocked(wait_);
    return absl::OkStatus();
  }

 private:
  const absl::Duration wait_;
};

// The slowdown stretches the straggler's own work, not its waits on sync:
// 10 steps that each wait 300 ms take about 3 s longer than the same steps
// without the waits, not the 10 x 4 x 300 ms = 12 s a slowdown of the waits
// would add. The steps are small so that the work, whose time varies with
// the load and is slower under a sanitizer, stays well below the waits.
TEST_F(TrainerTest, SlowdownStretchesTheWorkNotTheWaitsOnSync) {
  auto run = [&](absl::Duration wait) {
    model::LocalEmbeddingStore store(StoreOptions());
    SlowNetworkStrategy strategy(wait);
    TrainerOptions options;
    options.threads = 1;
    options.batch_size = 10;
    options.preload = true;
    options.max_examples = 100;  // 10 steps
    options.slowdown = 4;
    options.sync = &strategy;
    options.optimizer = store.options().optimizer;
    Trainer trainer(SmallModel(), store.options().tables, options, &store);
    auto report = trainer.Train({dir_->File("train.tsv")});
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? report->seconds : 0.0;
  };
  const double waiting = run(absl::Milliseconds(300));
  const double not_waiting = run(absl::ZeroDuration());
  EXPECT_GE(waiting, 10 * 0.300);
  EXPECT_LT(waiting - not_waiting, 7.5) << waiting << " s against " << not_waiting << " s";
}

// A strategy that switches the batch size after its first 10 steps, as
// sync-switch does at its switch to ASP.
class BatchSwitchingStrategy : public SyncStrategy {
 public:
  BatchSwitchingStrategy() : SyncStrategy(SyncConfig{}, nullptr) {}
  int BatchSize(int configured) const override { return steps() < 10 ? configured : 150; }
  int MaxBatchSize(int configured) const override { return 150; }
  int64_t total_steps() const { return steps(); }
};

TEST_F(TrainerTest, StrategyBatchSizeAppliesFromTheNextStep) {
  model::LocalEmbeddingStore store(StoreOptions());
  BatchSwitchingStrategy strategy;
  TrainerOptions options;
  options.threads = 1;
  options.batch_size = 100;
  options.preload = true;  // one block: batches are never cut short by a block end
  options.max_examples = 3000;
  options.sync = &strategy;
  options.optimizer = store.options().optimizer;
  Trainer trainer(SmallModel(), store.options().tables, options, &store);
  auto report = trainer.Train({dir_->File("train.tsv")});
  SS_ASSERT_OK(report);
  EXPECT_EQ(report->examples, 3000);
  // 10 steps of 100 (11 if the prefetch took the next batch before the 10th
  // step ended), then the rest in steps of 150: 10 + 14 = 11 + 13 steps.
  EXPECT_EQ(strategy.total_steps(), 10 + 14);
}

TEST_F(TrainerTest, MissingInputIsAnErrorNamingThePath) {
  model::LocalEmbeddingStore store(StoreOptions());
  Trainer trainer(SmallModel(), store.options().tables, TrainerOptions{}, &store);
  EXPECT_THAT(trainer.Train({dir_->File("nope.tsv")}),
              testing::StatusIs(absl::StatusCode::kNotFound, "nope.tsv"));
}

TEST_F(TrainerTest, MalformedLinesAreCountedAndSkipped) {
  const std::string path = dir_->File("mixed.tsv");
  std::string good = testing::ReadFile(dir_->File("eval.tsv"));
  good = good.substr(0, good.find('\n', good.size() / 4) + 1);  // some whole lines
  testing::WriteFile(path, "garbage line\n" + good + "1\t2\n");
  model::LocalEmbeddingStore store(StoreOptions());
  Trainer trainer(SmallModel(), store.options().tables, TrainerOptions{}, &store);
  auto report = trainer.Train({path});
  SS_ASSERT_OK(report);
  EXPECT_EQ(report->malformed_lines, 2);
  ASSERT_FALSE(report->first_errors.empty());
  EXPECT_NE(report->first_errors[0].find("mixed.tsv:1"), std::string::npos)
      << report->first_errors[0];
}

// The warm-up multiplies the first dense steps' learning rate by (k + 1) / W:
// with SGD, one step at W = 4 moves every dense parameter a quarter as far
// as the same step without warm-up.
TEST_F(TrainerTest, WarmupScalesTheFirstDenseSteps) {
  std::vector<float> initial, moved[2];
  for (const int64_t warmup : {0, 4}) {
    model::LocalStoreOptions so = StoreOptions();
    so.optimizer = {model::OptimizerKind::kSgd, 0.1f};
    model::LocalEmbeddingStore store(so);
    TrainerOptions options = Options(store, 1, 64);
    options.max_examples = 64;  // One step.
    options.lr_warmup_steps = warmup;
    Trainer trainer(SmallModel(), store.options().tables, options, &store);
    initial = trainer.params();
    SS_ASSERT_OK(trainer.Train({dir_->File("train.tsv")}));
    moved[warmup > 0] = trainer.params();
  }
  int changed = 0;
  for (size_t i = 0; i < initial.size(); ++i) {
    const float full = moved[0][i] - initial[i];
    changed += full != 0;
    EXPECT_NEAR(moved[1][i] - initial[i], full / 4, 1e-6 + 1e-3 * std::abs(full)) << i;
  }
  EXPECT_GT(changed, static_cast<int>(initial.size()) / 2);
}

// A trainer that starts from saved Adagrad state (a resume, a warm start)
// skips the warm-up: the accumulators already bound its steps.
TEST_F(TrainerTest, WarmupIsSkippedWhenTheDenseStateIsNotEmpty) {
  std::vector<float> after[2];
  for (const int64_t warmup : {0, 100}) {
    model::LocalEmbeddingStore store(StoreOptions());
    TrainerOptions options = Options(store, 1, 64);
    options.max_examples = 640;
    options.lr_warmup_steps = warmup;
    Trainer trainer(SmallModel(), store.options().tables, options, &store);
    std::fill(trainer.dense_state().begin(), trainer.dense_state().end(), 1e-4f);
    SS_ASSERT_OK(trainer.Train({dir_->File("train.tsv")}));
    after[warmup > 0] = trainer.params();
  }
  EXPECT_EQ(after[0], after[1]);
}

// Not TrainerTest: too slow for the sanitizer presets, which run that suite.
// The default DLRM with Adagrad at lr 0.02, one thread, batch 512: without a
// warm-up, seed 4's first steps leave the bottom MLP's output layer dead and
// the run stalls near the base rate (docs/decisions.md); the default warm-up
// learns as every other seed does.
TEST(TrainingRecipeTest, TheDefaultWarmupKeepsASeedThatCollapsedLearning) {
  testing::ScratchDir dir;
  SyntheticOptions gen;
  gen.out_path = dir.File("train.tsv");
  gen.examples = 60'000;
  gen.eval_out_path = dir.File("eval.tsv");
  gen.eval_examples = 20'000;
  gen.seed = 7;
  SS_ASSERT_OK(GenerateSynthetic(gen).status());
  double auc[2];
  for (const int64_t warmup : {int64_t{0}, JobSpec{}.trainer.lr_warmup_steps}) {
    model::LocalStoreOptions so;
    so.dim = 16;
    for (int t = 0; t < 26; ++t) so.tables.push_back({"C" + std::to_string(t + 1), 1'000'000});
    so.optimizer = {model::OptimizerKind::kAdagrad, 0.02f};
    so.seed = 4;
    model::LocalEmbeddingStore store(so);
    TrainerOptions options;
    options.threads = 1;
    options.batch_size = 512;
    options.optimizer = so.optimizer;
    options.seed = 4;
    options.lr_warmup_steps = warmup;
    Trainer trainer(model::DlrmConfig{}, so.tables, options, &store);
    SS_ASSERT_OK(trainer.Train({gen.out_path}));
    auto eval = trainer.Evaluate({gen.eval_out_path});
    SS_ASSERT_OK(eval);
    auc[warmup > 0] = eval->auc;
  }
  EXPECT_LT(auc[0], 0.70) << "seed 4 no longer collapses without a warm-up: pick another seed";
  EXPECT_GT(auc[1], 0.74) << "the default warm-up did not keep seed 4 learning";
}

}  // namespace
}  // namespace shadowsync::worker
