#include "model/embedding_table.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "model/model_io.h"
#include "tests/util/test_util.h"

namespace shadowsync::model {
namespace {

LocalStoreOptions Options(OptimizerKind kind) {
  LocalStoreOptions o;
  o.dim = 2;
  o.tables = {{"a", 100}, {"b", 400}};
  o.optimizer = {kind, 0.5f};
  o.seed = 9;
  return o;
}

std::vector<TableRows> Request(std::vector<uint64_t> a, std::vector<uint64_t> b) {
  std::vector<TableRows> r(2);
  r[0].ids = std::move(a);
  r[1].ids = std::move(b);
  return r;
}

TEST(EmbeddingStoreTest, UnseenRowsReadAsDeterministicInitWithoutBeingStored) {
  LocalEmbeddingStore store(Options(OptimizerKind::kSgd));
  auto req = Request({7}, {7});
  SS_ASSERT_OK(store.Lookup(req));
  EXPECT_EQ(store.num_rows(), 0);
  std::vector<float> expect(2);
  InitEmbeddingRow(9, 0, 7, 100, expect);
  EXPECT_EQ(req[0].values, expect);
  EXPECT_NE(req[0].values, req[1].values);  // tables differ
  // Scale is sqrt(1 / buckets).
  for (float v : req[1].values) EXPECT_LE(std::abs(v), std::sqrt(1.0f / 400));
}

TEST(EmbeddingStoreTest, SgdPushSubtractsLearningRateTimesGradient) {
  LocalEmbeddingStore store(Options(OptimizerKind::kSgd));
  auto before = Request({3}, {});
  SS_ASSERT_OK(store.Lookup(before));
  auto grads = Request({3}, {});
  grads[0].values = {1.0f, -2.0f};
  SS_ASSERT_OK(store.Push(grads));
  auto after = Request({3}, {});
  SS_ASSERT_OK(store.Lookup(after));
  EXPECT_FLOAT_EQ(after[0].values[0], before[0].values[0] - 0.5f);
  EXPECT_FLOAT_EQ(after[0].values[1], before[0].values[1] + 1.0f);
  EXPECT_EQ(store.num_rows(), 1);
}

TEST(EmbeddingStoreTest, AdagradMatchesHandComputedSteps) {
  LocalEmbeddingStore store(Options(OptimizerKind::kAdagrad));
  auto start = Request({5}, {});
  SS_ASSERT_OK(store.Lookup(start));
  const float w0 = start[0].values[0];
  auto grads = Request({5}, {});
  // Step 1: g = 2, acc = 4, w -= 0.5 * 2 / 2 = 0.5. Step 2: g = 1, acc = 5, w -= 0.5 / sqrt(5).
  grads[0].values = {2.0f, 0.0f};
  SS_ASSERT_OK(store.Push(grads));
  grads[0].values = {1.0f, 0.0f};
  SS_ASSERT_OK(store.Push(grads));
  auto after = Request({5}, {});
  SS_ASSERT_OK(store.Lookup(after));
  EXPECT_NEAR(after[0].values[0], w0 - 0.5f - 0.5f / std::sqrt(5.0f), 1e-6);
  EXPECT_FLOAT_EQ(after[0].values[1], start[0].values[1]);  // zero gradient: unchanged
}

TEST(EmbeddingStoreTest, RejectsWrongTableCountAndGradientSize) {
  LocalEmbeddingStore store(Options(OptimizerKind::kSgd));
  std::vector<TableRows> one(1);
  EXPECT_EQ(store.Lookup(one).code(), absl::StatusCode::kInvalidArgument);
  auto grads = Request({1, 2}, {});
  grads[0].values = {1.0f};
  EXPECT_THAT(store.Push(grads), testing::StatusIs(absl::StatusCode::kInvalidArgument, "table 0"));
}

TEST(EmbeddingStoreTest, ConcurrentPushesCreateEachRowOnce) {
  LocalEmbeddingStore store(Options(OptimizerKind::kSgd));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (uint64_t id = 0; id < 500; ++id) {
        auto g = Request({id}, {id});
        g[0].values = {0.0f, 0.0f};
        g[1].values = {0.0f, 0.0f};
        ASSERT_TRUE(store.Push(g).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.num_rows(), 1000);
}

// Resident memory of this process, from /proc/self/statm.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// A store's rows cost memory where they are, not a whole arena chunk per
// shard: a few rows in every shard of 26 tables stay far below the 852 MiB
// of chunks that zeroing them up front made resident.
TEST(EmbeddingStoreTest, RowsCostMemoryOnlyWhereTheyAre) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer allocators keep their own shadow of every allocation";
#endif
  LocalStoreOptions o;
  o.dim = 16;
  for (int t = 0; t < 26; ++t) o.tables.push_back({"C" + std::to_string(t + 1), 1'000'000});
  o.optimizer = {OptimizerKind::kAdagrad, 0.1f};  // 32 floats per row with its accumulator
  LocalEmbeddingStore store(o);
  std::vector<TableRows> grads(26);
  for (auto& g : grads) {
    for (uint64_t id = 0; id < 2000; ++id) g.ids.push_back(id * 7919);
    g.values.assign(g.ids.size() * 16, 0.0f);
  }
  const int64_t before = ResidentBytes();
  SS_ASSERT_OK(store.Push(grads));
  ASSERT_EQ(store.num_rows(), 26 * 2000);
  const int64_t grown = ResidentBytes() - before;
  // 52,000 rows of 128 bytes, plus the shards' maps: a few MiB.
  EXPECT_LT(grown, 64 << 20) << "resident memory grew by " << (grown >> 20) << " MiB";
}

TEST(OptimizerTest, ExclusiveAndRelaxedUpdatesAgreeBitForBit) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad}) {
    const OptimizerConfig config{kind, 0.1f};
    std::vector<float> p1 = {1, -2, 3, 0.5f}, s1 = {0, 1, 2, 3}, g = {0.5f, -1, 2, 0};
    std::vector<float> p2 = p1, s2 = s1;
    ApplyUpdateRelaxed(config, p1.data(), s1.data(), g.data(), 4);
    ApplyUpdateExclusive(config, p2.data(), s2.data(), g.data(), 4);
    EXPECT_EQ(p1, p2);
    EXPECT_EQ(s1, s2);
    EXPECT_FLOAT_EQ(p1[0], kind == OptimizerKind::kSgd ? 1 - 0.1f * 0.5f : 1 - 0.1f * 0.5f / 0.5f);
  }
}

// The relaxed update works through a private buffer chunk by chunk; every
// value, the last of a partial chunk included, must get the scalar formula.
TEST(OptimizerTest, RelaxedUpdateMatchesTheFormulaAcrossChunkBoundaries) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1, 1);
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad}) {
    const OptimizerConfig config{kind, 0.05f};
    for (long n : {1L, 255L, 256L, 257L, 1000L}) {
      std::vector<float> params(n), state(n), grad(n);
      for (long i = 0; i < n; ++i) {
        params[i] = value(rng);
        state[i] = std::abs(value(rng));
        grad[i] = value(rng);
      }
      std::vector<float> p = params, s = state;
      ApplyUpdateRelaxed(config, p.data(), s.data(), grad.data(), n);
      for (long i = 0; i < n; ++i) {
        float want_s = state[i], want_p = params[i];
        if (kind == OptimizerKind::kSgd) {
          want_p -= config.learning_rate * grad[i];
        } else {
          want_s += grad[i] * grad[i];
          want_p -= config.learning_rate * grad[i] / (std::sqrt(want_s) + config.epsilon);
        }
        ASSERT_EQ(p[i], want_p) << OptimizerName(kind) << " n=" << n << " i=" << i;
        ASSERT_EQ(s[i], want_s) << OptimizerName(kind) << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ModelIoTest, SaveLoadSaveIsBitIdentical) {
  testing::ScratchDir dir;
  LocalEmbeddingStore store(Options(OptimizerKind::kAdagrad));
  auto g = Request({1, 9}, {4});
  g[0].values = {0.1f, 0.2f, 0.3f, 0.4f};
  g[1].values = {-1.0f, 1.0f};
  SS_ASSERT_OK(store.Push(g));
  const DlrmConfig config{
      .num_dense = 3, .embedding_dim = 2, .bottom_mlp = {4}, .top_mlp = {3}, .num_tables = 2};
  Dlrm model(config);
  std::vector<float> params(model.num_params()), state(model.num_params(), 0.25f);
  model.InitParams(1, params);
  SS_ASSERT_OK(SaveModel(dir.File("a.model"), config, params, state, store));
  auto loaded = LoadModel(dir.File("a.model"));
  SS_ASSERT_OK(loaded);
  EXPECT_EQ(loaded->config, config);
  EXPECT_EQ(loaded->params, params);
  EXPECT_EQ(loaded->dense_state, state);
  EXPECT_EQ(loaded->store->num_rows(), 3);
  SS_ASSERT_OK(SaveModel(dir.File("b.model"), loaded->config, loaded->params, loaded->dense_state,
                         *loaded->store));
  EXPECT_EQ(testing::ReadFile(dir.File("a.model")), testing::ReadFile(dir.File("b.model")));
}

TEST(ModelIoTest, CorruptAndForeignFilesAreRejected) {
  testing::ScratchDir dir;
  testing::WriteFile(dir.File("x"), "hello, not a model at all");
  EXPECT_EQ(LoadModel(dir.File("x")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadModel(dir.File("missing")).status().code(), absl::StatusCode::kNotFound);

  LocalEmbeddingStore store(Options(OptimizerKind::kSgd));
  DlrmConfig config;
  config.num_tables = 2;
  config.embedding_dim = 2;
  std::vector<float> params(Dlrm(config).num_params(), 1.0f);
  SS_ASSERT_OK(SaveModel(dir.File("m"), config, params, {}, store));
  std::string bytes = testing::ReadFile(dir.File("m"));
  bytes[bytes.size() / 2] ^= 0x40;
  testing::WriteFile(dir.File("m"), bytes);
  EXPECT_THAT(LoadModel(dir.File("m")), testing::StatusIs(absl::StatusCode::kDataLoss, "checksum"));
}

}  // namespace
}  // namespace shadowsync::model
