// The online scorer and the dynamic batcher against `shadowsync eval`'s
// code path: a model trained here and exported scores each example as the
// evaluator does, alone or batched with concurrent requests.
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/eval_metrics.h"
#include "common/file_util.h"
#include "data/criteo_reader.h"
#include "data/synthetic.h"
#include "exporter/evaluate_export.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/export.h"
#include "serving/batcher.h"
#include "serving/model_source.h"
#include "serving/scorer.h"
#include "tests/util/test_util.h"
#include "worker/trainer.h"

namespace shadowsync::serving {
namespace {

using ::shadowsync::testing::IsOkAndHolds;
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
    // A directory of exports (as a job writes them), the second to swap in:
    // other dense parameters, more examples.
    std::filesystem::create_directories(dir_->File("exports"));
    SS_ASSERT_OK(model::ExportLocalModel(dir_->File("exports/model-000001"), info, params,
                                         dense_state, store));
    for (float& p : params) p *= 0.5f;
    info.examples_trained = 9000;
    SS_ASSERT_OK(model::ExportLocalModel(dir_->File("exports/model-000002"), info, params,
                                         dense_state, store));
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
  const std::shared_ptr<const Scorer> shared = *std::move(scorer);
  Batcher batcher({.threads = 2, .max_delay = absl::ZeroDuration()});
  for (int i = 0; i < 3; ++i) {
    absl::SleepFor(absl::Milliseconds(50));  // Both threads wait for work.
    auto answer = std::async(std::launch::async, [&] { return batcher.Score(shared, one); });
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
  const std::shared_ptr<const Scorer> shared = *std::move(scorer);
  std::atomic<int64_t> batches{0}, batched_examples{0}, largest{0};
  {
    Batcher batcher({.threads = 2,
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
          absl::StatusOr<std::vector<float>> p = batcher.Score(shared, std::move(part));
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

// `examples` scored by the export `dir` alone.
std::vector<float> ScoresOf(const std::string& dir, const ExampleBlock& examples) {
  absl::StatusOr<std::unique_ptr<Scorer>> scorer = Scorer::Load(dir);
  EXPECT_TRUE(scorer.ok()) << scorer.status();
  if (!scorer.ok()) return {};
  absl::StatusOr<std::vector<float>> p = (*scorer)->Score(examples);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : std::vector<float>();
}

TEST_F(ServingTest, ModelSourceSwapsInTheExportLatestNames) {
  const std::string root = dir_->File("exports");
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000001\n"));
  absl::StatusOr<std::unique_ptr<ModelSource>> source =
      ModelSource::Open(root, {.poll = absl::ZeroDuration()});
  SS_ASSERT_OK(source);
  const std::shared_ptr<const Scorer> first = (*source)->Current();
  EXPECT_EQ(first->info().examples_trained, 6000);
  EXPECT_THAT((*source)->Refresh(), IsOkAndHolds(false));  // Nothing changed.
  EXPECT_EQ((*source)->Current(), first);

  ExampleBlock examples = EvalExamples();
  examples.Truncate(200);
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000002\n"));
  EXPECT_THAT((*source)->Refresh(), IsOkAndHolds(true));
  const std::shared_ptr<const Scorer> second = (*source)->Current();
  EXPECT_EQ(second->info().examples_trained, 9000);
  EXPECT_EQ(second->dir(), root + "/model-000002");
  absl::StatusOr<std::vector<float>> p = second->Score(examples);
  SS_ASSERT_OK(p);
  EXPECT_EQ(*p, ScoresOf(root + "/model-000002", examples));
  EXPECT_NE(*p, ScoresOf(root + "/model-000001", examples));
  // A request still holding the old model is scored by it.
  p = first->Score(examples);
  SS_ASSERT_OK(p);
  EXPECT_EQ(*p, ScoresOf(root + "/model-000001", examples));
}

TEST_F(ServingTest, ModelSourceKeepsServingWhenTheNewerExportCannotBeLoaded) {
  const std::string root = dir_->File("broken-exports");
  std::filesystem::copy(dir_->File("exports"), root, std::filesystem::copy_options::recursive);
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000001\n"));
  absl::StatusOr<std::unique_ptr<ModelSource>> source =
      ModelSource::Open(root, {.poll = absl::ZeroDuration()});
  SS_ASSERT_OK(source);

  // LATEST names an export that is not there.
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000009\n"));
  EXPECT_THAT((*source)->Refresh(), StatusIs(absl::StatusCode::kNotFound, "model-000009"));
  EXPECT_EQ((*source)->Current()->info().examples_trained, 6000);

  // A corrupt one: a part cut short fails its checksum, and is not retried
  // until it changes.
  const std::string part = root + "/model-000002/embeddings/part-00000.bin";
  std::filesystem::resize_file(part, std::filesystem::file_size(part) / 2);
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000002\n"));
  EXPECT_THAT((*source)->Refresh(), StatusIs(absl::StatusCode::kDataLoss, "part-00000.bin"));
  EXPECT_THAT((*source)->Refresh(), IsOkAndHolds(false));
  EXPECT_EQ((*source)->Current()->info().examples_trained, 6000);

  // Rewritten whole, it is swapped in.
  std::filesystem::remove_all(root + "/model-000002");
  std::filesystem::copy(dir_->File("exports/model-000002"), root + "/model-000002",
                        std::filesystem::copy_options::recursive);
  EXPECT_THAT((*source)->Refresh(), IsOkAndHolds(true));
  EXPECT_EQ((*source)->Current()->info().examples_trained, 9000);
}

// `train --save-model DIR` over a served DIR exchanges it for the new export.
TEST_F(ServingTest, ModelSourceReloadsAnExportReplacedInPlace) {
  const std::string dir = dir_->File("in-place");
  std::filesystem::copy(dir_->File("exports/model-000001"), dir,
                        std::filesystem::copy_options::recursive);
  absl::StatusOr<std::unique_ptr<ModelSource>> source =
      ModelSource::Open(dir, {.poll = absl::ZeroDuration()});
  SS_ASSERT_OK(source);
  EXPECT_EQ((*source)->Current()->info().examples_trained, 6000);
  absl::StatusOr<model::ExportReader> newer =
      model::ExportReader::Open(dir_->File("exports/model-000002"));
  SS_ASSERT_OK(newer);
  absl::StatusOr<model::SavedModel> saved = model::LoadExport(newer->dir());
  SS_ASSERT_OK(saved);
  SS_ASSERT_OK(model::ExportLocalModel(dir, newer->info(), saved->params, saved->dense_state,
                                       *saved->store));
  EXPECT_THAT((*source)->Refresh(), IsOkAndHolds(true));
  EXPECT_EQ((*source)->Current()->info().examples_trained, 9000);
}

// Requests keep coming while the polling source swaps the model ten times:
// none fails, and each is scored exactly by the model it was given.
TEST_F(ServingTest, NoRequestFailsWhileModelsAreSwappedUnderLoad) {
  const std::string root = dir_->File("swapped-exports");
  std::filesystem::copy(dir_->File("exports"), root, std::filesystem::copy_options::recursive);
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000001\n"));
  std::atomic<int> loads{0};
  absl::StatusOr<std::unique_ptr<ModelSource>> source = ModelSource::Open(
      root,
      {.poll = absl::Milliseconds(10), .on_load = [&](const Scorer&, absl::Time) { ++loads; }});
  SS_ASSERT_OK(source);
  ExampleBlock examples = EvalExamples();
  examples.Truncate(64);
  const std::vector<float> scores_a = ScoresOf(root + "/model-000001", examples);
  const std::vector<float> scores_b = ScoresOf(root + "/model-000002", examples);
  ASSERT_NE(scores_a, scores_b);

  Batcher batcher({.threads = 2, .max_batch_examples = 64, .max_delay = absl::Milliseconds(1)});
  std::atomic<bool> stop{false};
  std::atomic<int> requests{0}, failures{0}, mismatches{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([&, c] {
      for (int64_t i = c; !stop; i = (i + 6) % examples.size()) {
        ExampleBlock one;
        one.Append(examples);
        one.labels.erase(one.labels.begin(), one.labels.begin() + i);
        one.dense.erase(one.dense.begin(), one.dense.begin() + i * one.num_dense);
        one.sparse.erase(one.sparse.begin(), one.sparse.begin() + i * one.num_sparse);
        one.Truncate(1);
        std::shared_ptr<const Scorer> scorer = (*source)->Current();
        const std::vector<float>& expected =
            scorer->info().examples_trained == 6000 ? scores_a : scores_b;
        absl::StatusOr<std::vector<float>> p = batcher.Score(std::move(scorer), std::move(one));
        ++requests;
        if (!p.ok() || p->size() != 1) {
          ++failures;
        } else if (std::abs((*p)[0] - expected[i]) > 1e-6) {
          ++mismatches;
        }
      }
    });
  }
  for (int swap = 0; swap < 10; ++swap) {
    const int64_t want = swap % 2 == 0 ? 9000 : 6000;
    SS_ASSERT_OK(
        WriteFileAtomically(root + "/LATEST", swap % 2 == 0 ? "model-000002\n" : "model-000001\n"));
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while ((*source)->Current()->info().examples_trained != want && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ((*source)->Current()->info().examples_trained, want) << "swap " << swap;
    absl::SleepFor(absl::Milliseconds(30));  // Requests on the new model.
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(loads, 11);  // The first and ten swaps.
  EXPECT_GT(requests, 100);
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace shadowsync::serving
