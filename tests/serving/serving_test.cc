// The online scorer and the dynamic batcher against `shadowsync eval`'s
// code path: a model trained here and exported scores each example as the
// evaluator does, alone or batched with concurrent requests; newer exports
// swapped in under load; the gRPC inference service.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/eval_metrics.h"
#include "common/file_util.h"
#include "common/grpc_security.h"
#include "common/hash.h"
#include "data/criteo_reader.h"
#include "data/synthetic.h"
#include "exporter/evaluate_export.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "model/export.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "serving/batcher.h"
#include "serving/inference_grpc.h"
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

// With --cache-bytes the rows live on disk behind a cache a fraction of
// their size: the scores are the same to the bit, the counts say where the
// rows came from, and a delta applies over the on-disk rows as over RAM.
TEST_F(ServingTest, RowsOnDiskBehindASmallCacheScoreAsRowsInMemory) {
  const ExampleBlock examples = EvalExamples();
  RowCounts in_ram, on_disk;
  // One GEMM kernel for both (two kernels' sums differ in the last bits).
  absl::StatusOr<std::unique_ptr<Scorer>> ram = Scorer::Load(
      dir_->File("export"), {.gemm = model::GemmKernel::kOpenBlas,
                             .on_rows = [&](const RowCounts& c) { in_ram.memory += c.memory; }});
  SS_ASSERT_OK(ram);
  absl::StatusOr<std::unique_ptr<Scorer>> disk =
      Scorer::Load(dir_->File("export"), {.gemm = model::GemmKernel::kOpenBlas,
                                          .cache_bytes = 512 << 10,
                                          .cache_dir = dir_->File("row-stores"),
                                          .on_rows = [&](const RowCounts& c) {
                                            on_disk.cache += c.cache;
                                            on_disk.disk += c.disk;
                                            on_disk.memory += c.memory;
                                          }});
  SS_ASSERT_OK(disk);
  EXPECT_EQ((*disk)->num_rows(), (*ram)->num_rows());
  EXPECT_LT((*disk)->rows_memory_bytes(), (*ram)->rows_memory_bytes());
  absl::StatusOr<std::vector<float>> want = (*ram)->Score(examples);
  SS_ASSERT_OK(want);
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_THAT((*disk)->Score(examples), IsOkAndHolds(*want));
  }
  EXPECT_GT(in_ram.memory, 0);
  EXPECT_EQ(on_disk.memory, 0);
  EXPECT_GT(on_disk.disk, 0);
  EXPECT_GT(on_disk.cache, 0);  // The second pass found some rows cached.
  EXPECT_EQ(on_disk.cache + on_disk.disk, 2 * in_ram.memory);
  disk->reset();
  EXPECT_TRUE(std::filesystem::is_empty(dir_->File("row-stores")));
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

// One GEMM kernel for every scorer the tests compare: left to choose, each
// would time both and pick the faster, which on a loaded machine can differ
// between two loads (and the scores in the 7th digit).
const ScorerOptions kPinned = {.gemm = model::GemmKernel::kOpenBlas};

// `examples` scored by the export `dir` alone.
std::vector<float> ScoresOf(const std::string& dir, const ExampleBlock& examples) {
  absl::StatusOr<std::unique_ptr<Scorer>> scorer = Scorer::Load(dir, kPinned);
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
      ModelSource::Open(root, {.scorer = kPinned, .poll = absl::ZeroDuration()});
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

// Writes a delta export over `base` (a name beside `dir`): `rows` replace
// or add rows, `removed` are tombstones, dense parameters `params`.
void WriteDelta(const std::string& dir, const std::string& base, const model::SavedModel& model,
                const std::map<std::pair<uint32_t, uint64_t>, std::vector<float>>& rows,
                const std::set<std::pair<uint32_t, uint64_t>>& removed,
                const std::vector<float>& params) {
  model::ExportInfo info;
  info.config = model.config;
  info.embeddings = model.store_options;
  info.delta_base = base;
  info.examples_trained = 12000;
  auto writer = model::ExportWriter::Create(dir, info);
  SS_ASSERT_OK(writer);
  SS_ASSERT_OK((*writer)->WriteDense(params, model.dense_state));
  const std::vector<float> state(model.store_options.dim, 0.0f);
  for (int part = 0; part < info.num_parts; ++part) {
    SS_ASSERT_OK((*writer)->BeginPart(part));
    const uint32_t begin = (*writer)->PartBegin(part), end = (*writer)->PartBegin(part + 1);
    auto here = [&](const std::pair<uint32_t, uint64_t>& key) {
      const uint32_t slot = SlotOf(key.first, key.second, info.num_slots);
      return slot >= begin && slot < end;
    };
    for (const auto& [key, values] : rows) {
      if (here(key)) {
        SS_ASSERT_OK((*writer)->AddRow(key.first, key.second, values, state));
      }
    }
    std::string tombstones;
    for (const auto& key : removed) {
      if (!here(key)) continue;
      tombstones.append(reinterpret_cast<const char*>(&key.first), sizeof(key.first));
      tombstones.append(reinterpret_cast<const char*>(&key.second), sizeof(key.second));
    }
    SS_ASSERT_OK((*writer)->AddTombstones(tombstones));
    SS_ASSERT_OK((*writer)->EndPart());
  }
  SS_ASSERT_OK((*writer)->Commit());
}

// A delta export LATEST names is applied over the served model, sharing its
// rows: the result scores as the delta's whole chain loaded from disk does
// (what `shadowsync eval --model DELTA` scores), changed rows, removed rows
// (back to their initial values) and new dense parameters included.
TEST_F(ServingTest, ModelSourceAppliesDeltaExportsOverTheServedModel) {
  const std::string root = dir_->File("delta-exports");
  std::filesystem::create_directories(root);
  std::filesystem::copy(dir_->File("export"), root + "/model-000001",
                        std::filesystem::copy_options::recursive);
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000001\n"));
  absl::StatusOr<model::SavedModel> model = model::LoadExport(root + "/model-000001");
  SS_ASSERT_OK(model);
  std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> changed, restored;
  std::set<std::pair<uint32_t, uint64_t>> removed;
  model->store->ForEachRow(
      [&](uint32_t table, uint64_t id, std::span<const float> values, std::span<const float>) {
        std::vector<float> row(values.begin(), values.end());
        if (table < 3) {
          for (float& v : row) v *= 1.5f;
          changed[{table, id}] = row;
        } else if (table == 3) {
          removed.insert({table, id});
          restored[{table, id}] = row;
        }
      });
  ASSERT_FALSE(removed.empty());
  std::vector<float> params = model->params;
  for (float& p : params) p *= 0.9f;
  WriteDelta(root + "/model-000002", "model-000001", *model, changed, removed, params);
  // The second puts table 3 back.
  WriteDelta(root + "/model-000003", "model-000002", *model, restored, {}, params);

  absl::StatusOr<std::unique_ptr<ModelSource>> source =
      ModelSource::Open(root, {.scorer = kPinned, .poll = absl::ZeroDuration()});
  SS_ASSERT_OK(source);
  const int64_t full_rows = (*source)->Current()->num_rows();
  ExampleBlock examples = EvalExamples();
  examples.Truncate(300);
  const std::vector<float> before = ScoresOf(root + "/model-000001", examples);
  for (const std::string name : {"model-000002", "model-000003"}) {
    SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", name + "\n"));
    EXPECT_THAT((*source)->Refresh(), IsOkAndHolds(true)) << name;
    const std::shared_ptr<const Scorer> served = (*source)->Current();
    EXPECT_EQ(served->dir(), root + "/" + name);
    EXPECT_EQ(served->num_deltas(), name == "model-000002" ? 1 : 2);
    EXPECT_EQ(served->info().examples_trained, 12000);
    absl::StatusOr<std::unique_ptr<Scorer>> whole = Scorer::Load(root + "/" + name, kPinned);
    SS_ASSERT_OK(whole);
    EXPECT_EQ(served->num_rows(), (*whole)->num_rows()) << name;
    EXPECT_EQ(served->num_rows(), name == "model-000002"
                                      ? full_rows - static_cast<int64_t>(removed.size())
                                      : full_rows);
    absl::StatusOr<std::vector<float>> p = served->Score(examples);
    SS_ASSERT_OK(p);
    EXPECT_EQ(*p, ScoresOf(root + "/" + name, examples)) << name;
    EXPECT_NE(*p, before) << name;
  }
}

TEST_F(ServingTest, ModelSourceKeepsServingWhenTheNewerExportCannotBeLoaded) {
  const std::string root = dir_->File("broken-exports");
  std::filesystem::copy(dir_->File("exports"), root, std::filesystem::copy_options::recursive);
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000001\n"));
  absl::StatusOr<std::unique_ptr<ModelSource>> source =
      ModelSource::Open(root, {.scorer = kPinned, .poll = absl::ZeroDuration()});
  SS_ASSERT_OK(source);

  // LATEST names an export that is not there.
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "model-000009\n"));
  EXPECT_THAT((*source)->Refresh(), StatusIs(absl::StatusCode::kNotFound, "model-000009"));
  EXPECT_EQ((*source)->Current()->info().examples_trained, 6000);

  // LATEST naming something outside the directory.
  SS_ASSERT_OK(WriteFileAtomically(root + "/LATEST", "../model-000002\n"));
  EXPECT_THAT((*source)->Refresh(),
              StatusIs(absl::StatusCode::kInvalidArgument, "is not the name of an export"));
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
      ModelSource::Open(dir, {.scorer = kPinned, .poll = absl::ZeroDuration()});
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
  absl::StatusOr<std::unique_ptr<ModelSource>> source =
      ModelSource::Open(root, {.scorer = kPinned,
                               .poll = absl::Milliseconds(10),
                               .on_load = [&](const Scorer&, absl::Time) { ++loads; }});
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
    // Requests answered after the swap, before the next one (waited for, not
    // slept for: under a sanitizer a request takes tens of milliseconds).
    const int before = requests;
    while (requests < before + 5 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_GE(requests, before + 5) << "swap " << swap;
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(loads, 11);  // The first and ten swaps.
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(mismatches, 0);
}

// inference.GRPCInferenceService on a real gRPC server over loopback.
class GrpcInferenceTest : public ServingTest {
 protected:
  void Start(GrpcSecurity security = {}) {
    absl::StatusOr<std::unique_ptr<ModelSource>> source =
        ModelSource::Open(dir_->File("export"), {.scorer = kPinned, .poll = absl::ZeroDuration()});
    SS_ASSERT_OK(source);
    source_ = *std::move(source);
    batcher_ = std::make_unique<Batcher>(BatcherOptions{.threads = 2});
    absl::StatusOr<std::unique_ptr<InferenceGrpcServer>> server = InferenceGrpcServer::Start(
        "ctr", *source_, *batcher_,
        {.listen = "127.0.0.1:0", .max_request_examples = 100, .security = security}, registry_);
    SS_ASSERT_OK(server);
    server_ = *std::move(server);
    stub_ = inference::GRPCInferenceService::NewStub(
        CreateChannel(absl::StrCat("127.0.0.1:", server_->port()), security));
  }

  // Examples [0, n) of the eval file as dense FP32 and sparse INT64 tensors
  // (the raw integer counts and ids a client holds), and their scores.
  static inference::ModelInferRequest Request(int n) {
    inference::ModelInferRequest request;
    request.set_model_name("ctr");
    request.set_id("r7");
    auto* dense = request.add_inputs();
    dense->set_name("dense");
    dense->set_datatype("FP32");
    dense->add_shape(n);
    dense->add_shape(13);
    auto* sparse = request.add_inputs();
    sparse->set_name("sparse");
    sparse->set_datatype("INT64");
    sparse->add_shape(n);
    sparse->add_shape(26);
    std::ifstream in(dir_->File("e.tsv"));
    std::string line;
    for (int e = 0; e < n && std::getline(in, line); ++e) {
      std::vector<std::string> f = absl::StrSplit(line, '\t');
      for (int i = 1; i <= 13; ++i) {
        dense->mutable_contents()->add_fp32_contents(f[i].empty() ? 0 : std::stof(f[i]));
      }
      for (int i = 14; i < 40; ++i) {
        sparse->mutable_contents()->add_int64_contents(
            f[i].empty() ? -1 : static_cast<int64_t>(std::stoull(f[i], nullptr, 16)));
      }
    }
    return request;
  }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response) {
    grpc::ClientContext context;
    return stub_->ModelInfer(&context, request, response);
  }

  prometheus::Registry registry_;
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<InferenceGrpcServer> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(GrpcInferenceTest, ScoresAsTheScorerWithContentsOrRawTensors) {
  Start();
  ExampleBlock examples = EvalExamples();
  examples.Truncate(20);
  const std::vector<float> expected = ScoresOf(dir_->File("export"), examples);

  inference::ModelInferResponse response;
  const inference::ModelInferRequest request = Request(20);
  ASSERT_TRUE(Infer(request, &response).ok());
  EXPECT_EQ(response.model_name(), "ctr");
  EXPECT_EQ(response.model_version(), "6000");
  EXPECT_EQ(response.id(), "r7");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "probability");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_THAT(response.outputs(0).shape(), ::testing::ElementsAre(20, 1));
  const auto& probs = response.outputs(0).contents().fp32_contents();
  ASSERT_EQ(probs.size(), 20);
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(probs[i], expected[i], 1e-6) << i;

  // The same tensors as raw little-endian bytes: a raw answer.
  inference::ModelInferRequest raw = request;
  for (int t = 0; t < 2; ++t) {
    const auto& c = request.inputs(t).contents();
    raw.add_raw_input_contents(
        t == 0 ? std::string(reinterpret_cast<const char*>(c.fp32_contents().data()),
                             c.fp32_contents().size() * sizeof(float))
               : std::string(reinterpret_cast<const char*>(c.int64_contents().data()),
                             c.int64_contents().size() * sizeof(int64_t)));
    raw.mutable_inputs(t)->clear_contents();
  }
  inference::ModelInferResponse raw_response;
  ASSERT_TRUE(Infer(raw, &raw_response).ok());
  ASSERT_EQ(raw_response.raw_output_contents_size(), 1);
  ASSERT_EQ(raw_response.raw_output_contents(0).size(), 20 * sizeof(float));
  std::vector<float> raw_probs(20);
  std::memcpy(raw_probs.data(), raw_response.raw_output_contents(0).data(), 20 * sizeof(float));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(raw_probs[i], probs[i]) << i;

  // Criteo lines as BYTES.
  inference::ModelInferRequest lines;
  lines.set_model_name("ctr");
  auto* input = lines.add_inputs();
  input->set_name("lines");
  input->set_datatype("BYTES");
  input->add_shape(3);
  std::ifstream in(dir_->File("e.tsv"));
  for (std::string line; input->contents().bytes_contents_size() < 3 && std::getline(in, line);) {
    input->mutable_contents()->add_bytes_contents(line);
  }
  inference::ModelInferResponse lines_response;
  ASSERT_TRUE(Infer(lines, &lines_response).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(lines_response.outputs(0).contents().fp32_contents(i), expected[i], 1e-6);
  }
}

TEST_F(GrpcInferenceTest, BadRequestsAreRefusedNamingWhatIsWrongAndServingGoesOn) {
  Start();
  const inference::ModelInferRequest good = Request(2);
  std::vector<std::tuple<std::string, inference::ModelInferRequest, grpc::StatusCode, std::string>>
      bad;
  auto add = [&](std::string what, grpc::StatusCode code, std::string message, auto edit) {
    inference::ModelInferRequest r = good;
    edit(r);
    bad.emplace_back(std::move(what), std::move(r), code, std::move(message));
  };
  add("unknown tensor", grpc::StatusCode::INVALID_ARGUMENT,
      "inputs[1].name: 'ids' is not an input of this model",
      [](auto& r) { r.mutable_inputs(1)->set_name("ids"); });
  add("wrong shape", grpc::StatusCode::INVALID_ARGUMENT, "inputs[0].shape: [2,12]",
      [](auto& r) { r.mutable_inputs(0)->set_shape(1, 12); });
  add("wrong datatype", grpc::StatusCode::INVALID_ARGUMENT,
      "inputs[1].datatype: 'FP32' is not one of INT64, INT32",
      [](auto& r) { r.mutable_inputs(1)->set_datatype("FP32"); });
  add("non-finite dense value", grpc::StatusCode::INVALID_ARGUMENT,
      "inputs[0].data[3]: not a finite number",
      [](auto& r) { r.mutable_inputs(0)->mutable_contents()->set_fp32_contents(3, NAN); });
  add("contents short of the shape", grpc::StatusCode::INVALID_ARGUMENT,
      "inputs[1].contents: shape [2,26] holds 52 values; contents has 51", [](auto& r) {
        r.mutable_inputs(1)->mutable_contents()->mutable_int64_contents()->RemoveLast();
      });
  add("too many examples", grpc::StatusCode::INVALID_ARGUMENT,
      "inputs[0].shape: 101 examples; a request may hold at most 100",
      [](auto& r) { r.mutable_inputs(0)->set_shape(0, 101); });
  add("unknown model", grpc::StatusCode::NOT_FOUND, "model 'cvr' is not served here; 'ctr' is",
      [](auto& r) { r.set_model_name("cvr"); });
  add("unknown version", grpc::StatusCode::NOT_FOUND, "version '5' of model 'ctr'",
      [](auto& r) { r.set_model_version("5"); });
  add("unknown output", grpc::StatusCode::INVALID_ARGUMENT, "outputs[0].name: 'logit'",
      [](auto& r) { r.add_outputs()->set_name("logit"); });
  // Raw tensors: one entry per input, whole values, and no contents beside them.
  auto raw = [](auto& r, size_t cut) {
    for (int t = 0; t < 2; ++t) {
      const auto& c = r.inputs(t).contents();
      std::string bytes =
          t == 0 ? std::string(reinterpret_cast<const char*>(c.fp32_contents().data()),
                               c.fp32_contents().size() * sizeof(float))
                 : std::string(reinterpret_cast<const char*>(c.int64_contents().data()),
                               c.int64_contents().size() * sizeof(int64_t));
      r.add_raw_input_contents(bytes.substr(0, bytes.size() - (t == 0 ? cut : 0)));
      r.mutable_inputs(t)->clear_contents();
    }
  };
  add("raw entries short of the inputs", grpc::StatusCode::INVALID_ARGUMENT,
      "raw_input_contents: 1 entries for 2 inputs",
      [](auto& r) { r.add_raw_input_contents("abcd"); });
  add("raw bytes that are not whole values", grpc::StatusCode::INVALID_ARGUMENT,
      "inputs[0]: raw contents of 103 bytes are not whole FP32 values",
      [&](auto& r) { raw(r, 1); });
  add("contents beside raw bytes", grpc::StatusCode::INVALID_ARGUMENT,
      "inputs[0].contents: given with raw_input_contents", [&](auto& r) {
        raw(r, 0);
        r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
      });
  for (const auto& [what, request, code, message] : bad) {
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_EQ(status.error_code(), code) << what << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), ::testing::HasSubstr(message)) << what;
    ASSERT_TRUE(Infer(good, &response).ok()) << "after " << what;
  }
  const std::string text = prometheus::TextSerializer().Serialize(registry_.Collect());
  EXPECT_THAT(
      text, ::testing::HasSubstr(
                "shadowsync_serve_requests_total{code=\"INVALID_ARGUMENT\",protocol=\"grpc\"} 10"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "shadowsync_serve_requests_total{code=\"OK\",protocol=\"grpc\"} 12"));
}

TEST_F(GrpcInferenceTest, HealthAndMetadataDescribeTheServedModel) {
  Start();
  grpc::ClientContext c1, c2, c3, c4, c5;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&c1, {}, &live).ok());
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerReady(&c2, {}, &ready).ok());
  EXPECT_TRUE(ready.ready());
  inference::ModelReadyRequest model_ready;
  model_ready.set_name("ctr");
  model_ready.set_version("6000");
  inference::ModelReadyResponse model_ready_response;
  ASSERT_TRUE(stub_->ModelReady(&c3, model_ready, &model_ready_response).ok());
  EXPECT_TRUE(model_ready_response.ready());
  model_ready.set_version("1");
  EXPECT_EQ(stub_->ModelReady(&c4, model_ready, &model_ready_response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("ctr");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(stub_->ModelMetadata(&c5, metadata_request, &metadata).ok());
  EXPECT_THAT(metadata.versions(), ::testing::ElementsAre("6000"));
  ASSERT_EQ(metadata.inputs_size(), 3);
  EXPECT_EQ(metadata.inputs(1).name(), "sparse");
  EXPECT_EQ(metadata.inputs(1).datatype(), "INT64");
  EXPECT_THAT(metadata.inputs(1).shape(), ::testing::ElementsAre(-1, 26));
  ASSERT_EQ(metadata.outputs_size(), 1);
  EXPECT_EQ(metadata.outputs(0).name(), "probability");
}

// The port takes the bearer token every ShadowSync gRPC server takes.
TEST_F(GrpcInferenceTest, WithATokenACallWithoutItIsRefused) {
  Start({.auth_token = "serve-token"});
  inference::ModelInferResponse response;
  EXPECT_TRUE(Infer(Request(1), &response).ok());
  auto anonymous = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  EXPECT_EQ(anonymous->ModelInfer(&context, Request(1), &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace shadowsync::serving
