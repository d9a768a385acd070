// The online scorer and the dynamic batcher against `shadowsync eval`'s
// code path: a model trained here and exported scores each example as the
// evaluator does, alone or batched with concurrent requests.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/eval_metrics.h"
#include "data/criteo_reader.h"
#include "data/synthetic.h"
#include "exporter/evaluate_export.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/export.h"
#include "serving/batcher.h"
#include "serving/scorer.h"
#include "tests/util/test_util.h"
#include "worker/trainer.h"

namespace shadowsync::serving {
namespace {

using ::shadowsync::testing::StatusIs;

class ServingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::ScratchDir();
    SyntheticOptions data;
    data.out_path = dir_->File("t.tsv");
    data.examples = 6000;
    data.eval_examples = 1500;
    data.eval_out_path = dir_->File("e.tsv");
    data.seed = 5;
    SS_ASSERT_OK(GenerateSynthetic(data).status());
    model::DlrmConfig config;
    config.embedding_dim = 8;
    config.bottom_mlp = {32, 8};
    config.top_mlp = {16};
    model::LocalStoreOptions store_options;
    store_options.dim = 8;
    for (int t = 0; t < config.num_tables; ++t) store_options.tables.push_back({"", 4000});
    model::LocalEmbeddingStore store(store_options);
    worker::TrainerOptions o;
    o.threads = 1;
    worker::Trainer trainer(config, store_options.tables, o, &store);
    SS_ASSERT_OK(trainer.Train({dir_->File("t.tsv")}).status());
    model::ExportInfo info;
    info.config = config;
    info.embeddings = store_options;
    info.examples_trained = 6000;
    std::vector<float> params, dense_state;
    trainer.SnapshotDense(&params, &dense_state);
    SS_ASSERT_OK(model::ExportLocalModel(dir_->File("export"), info, params, dense_state, store));
  }
  static void TearDownTestSuite() { delete dir_; }

  // The eval file's examples.
  static ExampleBlock EvalExamples() {
    ExampleBlock all, block;
    absl::StatusOr<std::unique_ptr<CriteoReader>> reader =
        CriteoReader::Open({dir_->File("e.tsv")}, {});
    EXPECT_TRUE(reader.ok());
    while (reader.ok()) {
      absl::StatusOr<bool> more = (*reader)->Next(&block);
      if (!more.ok() || !*more) break;
      all.Append(block);
    }
    return all;
  }

  static testing::ScratchDir* dir_;
};

testing::ScratchDir* ServingTest::dir_ = nullptr;

TEST_F(ServingTest, ScoresAreTheEvaluatorsOnTheSameExamples) {
  absl::StatusOr<std::unique_ptr<Scorer>> scorer = Scorer::Load(dir_->File("export"));
  SS_ASSERT_OK(scorer);
  EXPECT_EQ((*scorer)->info().examples_trained, 6000);
  const ExampleBlock examples = EvalExamples();
  ASSERT_EQ(examples.size(), 1500);
  absl::StatusOr<std::vector<float>> probs = (*scorer)->Score(examples);
  SS_ASSERT_OK(probs);
  const QualityReport served = Evaluate(*probs, examples.labels);
  absl::StatusOr<exporter::ModelScore> evaluated = exporter::EvaluateExport(
      dir_->File("export"), {dir_->File("e.tsv")}, {.gemm = (*scorer)->gemm()});
  SS_ASSERT_OK(evaluated);
  EXPECT_NEAR(served.logloss, evaluated->quality.logloss, 1e-9);
  EXPECT_NEAR(served.auc, evaluated->quality.auc, 1e-9);
  EXPECT_LT(served.ne, 0.99);  // It learned something: the scores carry signal.

  // A block of another layout is refused, not misread.
  ExampleBlock wrong;
  wrong.num_dense = 3;
  EXPECT_THAT((*scorer)->Score(wrong), StatusIs(absl::StatusCode::kInvalidArgument, "3 dense"));
}

// A request that finds every scoring thread idle is answered at once. (The
// first batcher queued it without waking them, and hung.)
TEST_F(ServingTest, ALoneRequestToAnIdleBatcherIsAnswered) {
  absl::StatusOr<std::unique_ptr<Scorer>> scorer = Scorer::Load(dir_->File("export"));
  SS_ASSERT_OK(scorer);
  ExampleBlock one = EvalExamples();
  one.Truncate(1);
  Batcher batcher(**scorer, {.threads = 2, .max_delay = absl::ZeroDuration()});
  for (int i = 0; i < 3; ++i) {
    absl::SleepFor(absl::Milliseconds(50));  // Both threads wait for work.
    auto answer = std::async(std::launch::async, [&] { return batcher.Score(one); });
    ASSERT_EQ(answer.wait_for(std::chrono::seconds(10)), std::future_status::ready) << i;
    absl::StatusOr<std::vector<float>> p = answer.get();
    SS_ASSERT_OK(p);
    EXPECT_EQ(p->size(), 1u);
  }
}

TEST_F(ServingTest, ConcurrentRequestsBatchedTogetherGetTheirOwnScores) {
  absl::StatusOr<std::unique_ptr<Scorer>> scorer =
      Scorer::Load(dir_->File("export"), {.max_batch = 64});
  SS_ASSERT_OK(scorer);
  const ExampleBlock examples = EvalExamples();
  absl::StatusOr<std::vector<float>> alone = (*scorer)->Score(examples);
  SS_ASSERT_OK(alone);
  std::atomic<int64_t> batches{0}, batched_examples{0}, largest{0};
  {
    Batcher batcher(**scorer, {.threads = 2,
                               .max_batch_examples = 48,
                               .max_delay = absl::Milliseconds(5),
                               .on_batch = [&](int64_t n) {
                                 ++batches;
                                 batched_examples += n;
                                 int64_t seen = largest.load();
                                 while (n > seen && !largest.compare_exchange_weak(seen, n)) {
                                 }
                               }});
    // 12 clients, each sending requests of 1 to 3 examples in turn.
    constexpr int kClients = 12;
    std::vector<std::thread> clients;
    std::atomic<int> mismatches{0}, failures{0};
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        const int per = 1 + c % 3;
        for (int64_t begin = c * 3; begin + per <= examples.size(); begin += kClients * 3) {
          ExampleBlock request = examples;
          // Examples [begin, begin + per) of the eval file.
          ExampleBlock part;
          part.Append(request);
          part.labels.erase(part.labels.begin(), part.labels.begin() + begin);
          part.dense.erase(part.dense.begin(), part.dense.begin() + begin * part.num_dense);
          part.sparse.erase(part.sparse.begin(), part.sparse.begin() + begin * part.num_sparse);
          part.Truncate(per);
          absl::StatusOr<std::vector<float>> p = batcher.Score(std::move(part));
          if (!p.ok() || static_cast<int>(p->size()) != per) {
            ++failures;
            continue;
          }
          for (int i = 0; i < per; ++i) {
            if (std::abs((*p)[i] - (*alone)[begin + i]) > 1e-6) ++mismatches;
          }
        }
      });
    }
    for (std::thread& t : clients) t.join();
    EXPECT_EQ(failures, 0);
    EXPECT_EQ(mismatches, 0);
  }
  // Requests were merged (more examples than passes), never past the cap.
  EXPECT_GT(batched_examples.load(), batches.load());
  EXPECT_LE(largest.load(), 48);
}

}  // namespace
}  // namespace shadowsync::serving
