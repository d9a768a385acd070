// DS-Sync (sync-algorithms.md §4): the schedule's properties, the butterfly's
// exact-mean property as a product of mixing matrices, and the strategy with
// several in-process trainers against a real syncer on loopback.
#include "worker/sync/ds_sync.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "syncer/client/syncer_client.h"
#include "syncer/syncer_server.h"
#include "tests/util/test_util.h"
#include "worker/sync/factory.h"

namespace shadowsync::worker {
namespace {

using Matrix = std::vector<std::vector<double>>;

struct Shape {
  int n, g;
};

// Admitted by the butterfly rule: powers of g and mixed radices.
const std::vector<Shape> kButterflyShapes = {{2, 2},  {4, 2},  {8, 2},  {16, 2}, {9, 3},
                                             {27, 3}, {16, 4}, {8, 4},  {6, 3},  {12, 3},
                                             {12, 4}, {18, 3}, {24, 4}, {10, 5}, {5, 5}};

// Every trainer in exactly one group, every group of g, weights positive
// summing to 1, members ascending.
void ExpectPartition(const DsSyncPartition& p, int n, int g) {
  std::vector<int> seen(n, 0);
  ASSERT_EQ(p.groups.size(), static_cast<size_t>(n / g));
  ASSERT_EQ(p.weights.size(), p.groups.size());
  for (size_t j = 0; j < p.groups.size(); ++j) {
    const std::vector<int>& group = p.groups[j];
    ASSERT_EQ(group.size(), static_cast<size_t>(g));
    ASSERT_EQ(p.weights[j].size(), group.size());
    EXPECT_TRUE(std::is_sorted(group.begin(), group.end()));
    double sum = 0;
    for (size_t k = 0; k < group.size(); ++k) {
      ASSERT_GE(group[k], 0);
      ASSERT_LT(group[k], n);
      ++seen[group[k]];
      EXPECT_GT(p.weights[j][k], 0);
      sum += p.weights[j][k];
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "trainer " << i;
}

// Row i: what trainer i holds after the round, as weights on what every
// trainer held before it.
Matrix MixingMatrix(const DsSyncPartition& p, int n) {
  Matrix m(n, std::vector<double>(n, 0.0));
  for (size_t j = 0; j < p.groups.size(); ++j) {
    for (int i : p.groups[j]) {
      for (size_t k = 0; k < p.groups[j].size(); ++k) m[i][p.groups[j][k]] = p.weights[j][k];
    }
  }
  return m;
}

Matrix Multiply(const Matrix& a, const Matrix& b) {
  const size_t n = a.size();
  Matrix c(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < n; ++k) {
      for (size_t j = 0; j < n; ++j) c[i][j] += a[i][k] * b[k][j];
    }
  }
  return c;
}

// The mixing of rounds [first, first + count).
Matrix Product(int n, int g, DsSyncSchedule schedule, uint64_t seed, int64_t first, int count) {
  Matrix total(n, std::vector<double>(n, 0.0));
  for (int i = 0; i < n; ++i) total[i][i] = 1;
  for (int64_t r = first; r < first + count; ++r) {
    auto p = DsSyncRoundPartition(n, g, schedule, seed, r);
    EXPECT_TRUE(p.ok()) << p.status();
    total = Multiply(MixingMatrix(*p, n), total);
  }
  return total;
}

double MaxDistanceFromUniform(const Matrix& m) {
  const double u = 1.0 / static_cast<double>(m.size());
  double worst = 0;
  for (const auto& row : m) {
    for (double x : row) worst = std::max(worst, std::abs(x - u));
  }
  return worst;
}

TEST(DsSyncScheduleTest, EveryRoundPartitionsTheTrainersIntoGroupsOfG) {
  for (const Shape& s : kButterflyShapes) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " g " << s.g);
    for (int64_t r = 0; r < 3 * DsSyncPeriod(s.n, s.g, DsSyncSchedule::kButterfly); ++r) {
      auto p = DsSyncRoundPartition(s.n, s.g, DsSyncSchedule::kButterfly, 1, r);
      SS_ASSERT_OK(p);
      ExpectPartition(*p, s.n, s.g);
    }
  }
  for (const Shape& s : std::vector<Shape>{{4, 2}, {6, 2}, {12, 3}, {20, 4}, {7, 7}, {64, 8}}) {
    SCOPED_TRACE(::testing::Message() << "random n " << s.n << " g " << s.g);
    for (int64_t r = 0; r < 40; ++r) {
      auto p = DsSyncRoundPartition(s.n, s.g, DsSyncSchedule::kRandom, 42, r);
      SS_ASSERT_OK(p);
      ExpectPartition(*p, s.n, s.g);
    }
  }
}

// Every trainer computes the schedule alone: the same inputs must give the
// same groups, whoever asks and whenever.
TEST(DsSyncScheduleTest, IsAPureFunctionOfRoundSeedNAndG) {
  for (DsSyncSchedule schedule : {DsSyncSchedule::kRandom, DsSyncSchedule::kButterfly}) {
    for (int64_t r = 0; r < 50; ++r) {
      EXPECT_EQ(DsSyncGroups(16, 4, schedule, 7, r), DsSyncGroups(16, 4, schedule, 7, r));
    }
  }
  // The random schedule moves with the seed and with the round, and repeats
  // after its period (which bounds the syncer's group names).
  int differ_by_seed = 0, differ_by_round = 0;
  for (int64_t r = 0; r < kDsSyncRandomPhases; ++r) {
    const auto groups = DsSyncGroups(16, 4, DsSyncSchedule::kRandom, 7, r);
    differ_by_seed += groups != DsSyncGroups(16, 4, DsSyncSchedule::kRandom, 8, r);
    differ_by_round += groups != DsSyncGroups(16, 4, DsSyncSchedule::kRandom, 7, r + 1);
    EXPECT_EQ(groups, DsSyncGroups(16, 4, DsSyncSchedule::kRandom, 7, r + kDsSyncRandomPhases));
  }
  EXPECT_GE(differ_by_seed, kDsSyncRandomPhases - 1);
  EXPECT_GE(differ_by_round, kDsSyncRandomPhases - 1);
  // Pinned: the generator is ours (SplitMix64), not the standard library's,
  // so trainers built against different libraries agree; a change here would
  // split a job whose trainers run different builds.
  using G = std::vector<std::vector<int>>;
  EXPECT_EQ(DsSyncGroups(8, 2, DsSyncSchedule::kRandom, 1, 0), (G{{1, 4}, {5, 7}, {0, 3}, {2, 6}}));
  EXPECT_EQ(DsSyncGroups(8, 2, DsSyncSchedule::kRandom, 1, 1), (G{{0, 2}, {3, 4}, {1, 6}, {5, 7}}));
}

// The official 4-worker code alternates {0,1},{2,3} with a partition that
// crosses it; ours crosses with {0,2},{1,3}.
TEST(DsSyncScheduleTest, ButterflyOfFourAlternatesTwoCrossingPartitions) {
  using G = std::vector<std::vector<int>>;
  EXPECT_EQ(DsSyncGroups(4, 2, DsSyncSchedule::kButterfly, 0, 0), (G{{0, 1}, {2, 3}}));
  EXPECT_EQ(DsSyncGroups(4, 2, DsSyncSchedule::kButterfly, 0, 1), (G{{0, 2}, {1, 3}}));
  EXPECT_EQ(DsSyncGroups(4, 2, DsSyncSchedule::kButterfly, 0, 2), (G{{0, 1}, {2, 3}}));
  // Mixed radix (6 = 3 * 2): blocks of 3, then dealt across the two blocks
  // with the single member from the other block weighted 1/2.
  auto p = DsSyncRoundPartition(6, 3, DsSyncSchedule::kButterfly, 0, 1);
  SS_ASSERT_OK(p);
  EXPECT_EQ(p->groups, (G{{0, 2, 4}, {1, 3, 5}}));
  EXPECT_THAT(p->weights[0], ::testing::ElementsAre(0.25, 0.25, 0.5));
  EXPECT_THAT(p->weights[1], ::testing::ElementsAre(0.5, 0.25, 0.25));
}

// The acceptance property: over each period of ceil(log_g n) rounds the
// product of the rounds' averaging matrices is the uniform matrix (1/n) 11^T.
TEST(DsSyncScheduleTest, ButterflyPeriodProductIsTheUniformMatrix) {
  for (const Shape& s : kButterflyShapes) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " g " << s.g);
    const int m = DsSyncPeriod(s.n, s.g, DsSyncSchedule::kButterfly);
    EXPECT_EQ(m, static_cast<int>(std::ceil(std::log(s.n) / std::log(s.g) - 1e-9)));
    for (int64_t period = 0; period < 3; ++period) {
      const Matrix p = Product(s.n, s.g, DsSyncSchedule::kButterfly, 0, period * m, m);
      EXPECT_LT(MaxDistanceFromUniform(p), 1e-12);
    }
    // One round short is not enough (n > g).
    if (m > 1) {
      EXPECT_GT(MaxDistanceFromUniform(Product(s.n, s.g, DsSyncSchedule::kButterfly, 0, 0, m - 1)),
                1e-3);
    }
  }
}

// With n = g^m all weights are 1/g: every round is doubly stochastic and any
// m consecutive rounds average exactly, whichever phase they start at.
TEST(DsSyncScheduleTest, PowerOfGButterflyAveragesFromAnyPhase) {
  for (const Shape& s : std::vector<Shape>{{8, 2}, {27, 3}, {16, 4}}) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " g " << s.g);
    const int m = DsSyncPeriod(s.n, s.g, DsSyncSchedule::kButterfly);
    for (int first = 1; first < m; ++first) {
      EXPECT_LT(MaxDistanceFromUniform(Product(s.n, s.g, DsSyncSchedule::kButterfly, 0, first, m)),
                1e-12);
    }
  }
}

// The random schedule is not exact, but it mixes: equal weights keep the
// replicas' sum, and one period reaches every trainer from every trainer.
TEST(DsSyncScheduleTest, RandomScheduleIsDoublyStochasticAndMixesWithinAPeriod) {
  const int n = 8, g = 2;
  const Matrix p = Product(n, g, DsSyncSchedule::kRandom, 3, 0, kDsSyncRandomPhases);
  for (int j = 0; j < n; ++j) {
    double column = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_GT(p[i][j], 0) << i << " <- " << j;
      column += p[i][j];
    }
    EXPECT_NEAR(column, 1.0, 1e-12);
  }
}

TEST(DsSyncScheduleTest, RejectsShapesWithoutASchedule) {
  using ::shadowsync::testing::StatusIs;
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(ValidateDsSync(6, 4, DsSyncSchedule::kRandom),
              StatusIs(kInvalid, "sync.dsSync.groupSize: must divide the number of trainers (6)"));
  EXPECT_THAT(ValidateDsSync(4, 1, DsSyncSchedule::kRandom),
              StatusIs(kInvalid, "sync.dsSync.groupSize: must be >= 2, got 1"));
  EXPECT_THAT(ValidateDsSync(2, 4, DsSyncSchedule::kButterfly),
              StatusIs(kInvalid, "sync.dsSync.groupSize: must be <= the number of trainers (2)"));
  for (const Shape& s : std::vector<Shape>{{6, 2}, {12, 2}, {10, 2}, {20, 4}, {14, 2}}) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " g " << s.g);
    EXPECT_THAT(ValidateDsSync(s.n, s.g, DsSyncSchedule::kButterfly),
                StatusIs(kInvalid, "sync.dsSync.schedule: butterfly cannot give"));
    SS_EXPECT_OK(ValidateDsSync(s.n, s.g, DsSyncSchedule::kRandom));
    EXPECT_TRUE(DsSyncGroups(s.n, s.g, DsSyncSchedule::kButterfly, 0, 0).empty());
  }
  EXPECT_THAT(DsSyncRoundPartition(4, 2, DsSyncSchedule::kRandom, 0, -1).status(),
              StatusIs(kInvalid, "round must be >= 0"));
}

// One trainer of a strategy test: a replica, its strategy and client.
struct Trainer {
  std::vector<float> params, state;
  std::unique_ptr<syncer::SyncerClient> client;
  std::unique_ptr<SyncStrategy> strategy;
};

class DsSyncStrategyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    syncer::SyncerServerOptions o;
    o.metrics_address = "";
    o.service.member_timeout = absl::Seconds(30);  // Longer than any test.
    auto server = syncer::SyncerServer::Start(o);
    SS_ASSERT_OK(server);
    server_ = std::move(*server);
  }

  static SyncConfig Config(int n, int g, DsSyncSchedule schedule) {
    SyncConfig c;
    c.algorithm = SyncAlgorithm::kDsSync;
    c.interval = 1;  // A round after every step.
    c.num_trainers = n;
    c.ds_sync.group_size = g;
    c.ds_sync.schedule = schedule;
    c.ds_sync.seed = 5;
    return c;
  }

  // n trainers, each with a distinct starting replica of `dim` floats,
  // created through MakeSyncStrategy and started.
  std::vector<Trainer> MakeTrainers(SyncConfig config, int dim, int threads = 1) {
    std::vector<Trainer> trainers(config.num_trainers);
    for (int i = 0; i < config.num_trainers; ++i) {
      Trainer& t = trainers[i];
      for (int k = 0; k < dim; ++k) t.params.push_back(static_cast<float>((i * 7 + k * 3) % 11));
      t.state.assign(dim, 0.0f);
      syncer::SyncerClientOptions co;
      co.addresses = {server_->address()};
      co.member = "trainer-" + std::to_string(i);
      auto client = syncer::SyncerClient::Connect(co, dim);
      EXPECT_TRUE(client.ok()) << client.status();
      t.client = std::move(*client);
      config.trainer_index = i;
      auto strategy = MakeSyncStrategy(config, t.client.get(), nullptr);
      EXPECT_TRUE(strategy.ok()) << strategy.status();
      t.strategy = std::move(*strategy);
    }
    // Every member joins its groups before anybody's first round.
    for (Trainer& t : trainers) {
      SS_EXPECT_OK(t.strategy->Start(
          DenseReplica{t.params, t.state, {model::OptimizerKind::kSgd, 1.0f}, threads}));
    }
    return trainers;
  }

  std::unique_ptr<syncer::SyncerServer> server_;
};

// One sync point of every trainer at once, training paused (no gradient).
void RoundOfAll(std::vector<Trainer>& trainers) {
  std::vector<std::thread> threads;
  for (Trainer& t : trainers) {
    threads.emplace_back([&t] { EXPECT_TRUE(t.strategy->AfterStep(0).ok()); });
  }
  for (auto& th : threads) th.join();
}

// The acceptance test: ceil(log_g n) rounds with training paused give every
// replica the global mean of the starting replicas.
TEST_F(DsSyncStrategyTest, ButterflyReachesTheExactGlobalMean) {
  for (const Shape& s : std::vector<Shape>{{4, 2}, {8, 2}, {9, 3}, {6, 3}, {12, 3}}) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " g " << s.g);
    const int dim = 5;
    std::vector<Trainer> trainers = MakeTrainers(Config(s.n, s.g, DsSyncSchedule::kButterfly), dim);
    std::vector<double> mean(dim, 0.0);
    for (const Trainer& t : trainers) {
      for (int k = 0; k < dim; ++k) mean[k] += t.params[k] / s.n;
    }
    const int m = DsSyncButterflyRounds(s.n, s.g);
    for (int r = 0; r < m; ++r) RoundOfAll(trainers);
    for (size_t i = 0; i < trainers.size(); ++i) {
      for (int k = 0; k < dim; ++k) {
        EXPECT_NEAR(trainers[i].params[k], mean[k], 1e-5) << "trainer " << i << " [" << k << "]";
      }
      EXPECT_EQ(trainers[i].strategy->stats().rounds, m);
      EXPECT_GT(trainers[i].strategy->stats().bytes_sent, 0);
    }
    for (Trainer& t : trainers) SS_EXPECT_OK(t.strategy->Finish());
  }
}

// The random schedule's rounds are plain means: the replicas' mean is kept
// and their spread shrinks.
TEST_F(DsSyncStrategyTest, RandomScheduleKeepsTheMeanAndShrinksTheSpread) {
  const int n = 4, dim = 3;
  std::vector<Trainer> trainers = MakeTrainers(Config(n, 2, DsSyncSchedule::kRandom), dim);
  auto spread = [&] {
    double worst = 0;
    for (int k = 0; k < dim; ++k) {
      for (const Trainer& a : trainers) {
        for (const Trainer& b : trainers) {
          worst = std::max(worst, double(std::abs(a.params[k] - b.params[k])));
        }
      }
    }
    return worst;
  };
  auto mean = [&](int k) {
    double sum = 0;
    for (const Trainer& t : trainers) sum += t.params[k];
    return sum / n;
  };
  std::vector<double> before_mean;
  for (int k = 0; k < dim; ++k) before_mean.push_back(mean(k));
  const double before_spread = spread();
  for (int r = 0; r < 8; ++r) RoundOfAll(trainers);
  for (int k = 0; k < dim; ++k) EXPECT_NEAR(mean(k), before_mean[k], 1e-5);
  EXPECT_LT(spread(), before_spread / 4);
  for (Trainer& t : trainers) SS_EXPECT_OK(t.strategy->Finish());
}

// Groups are separate all-reduce groups: while trainer 3 stalls, its group
// {2,3} waits, and the group {0,1} completes its round regardless.
TEST_F(DsSyncStrategyTest, StalledGroupDoesNotBlockAnotherGroup) {
  std::vector<Trainer> trainers = MakeTrainers(Config(4, 2, DsSyncSchedule::kButterfly), 2);
  std::atomic<bool> two_done{false};
  std::thread t0([&] { EXPECT_TRUE(trainers[0].strategy->AfterStep(0).ok()); });
  std::thread t1([&] { EXPECT_TRUE(trainers[1].strategy->AfterStep(0).ok()); });
  std::thread t2([&] {
    EXPECT_TRUE(trainers[2].strategy->AfterStep(0).ok());
    two_done = true;
  });
  t0.join();
  t1.join();
  // {0,1} is done: both hold their mean, and 2 still waits for 3 (the
  // syncer's member timeout is 30 s, so only 3's contribution releases it).
  EXPECT_EQ(trainers[0].params, trainers[1].params);
  EXPECT_EQ(trainers[0].strategy->stats().rounds, 1);
  EXPECT_FALSE(two_done.load());
  EXPECT_EQ(trainers[2].strategy->stats().rounds, 0);
  SS_ASSERT_OK(trainers[3].strategy->AfterStep(0));
  t2.join();
  EXPECT_EQ(trainers[2].params, trainers[3].params);
  EXPECT_EQ(trainers[2].strategy->stats().rounds, 1);
  for (Trainer& t : trainers) SS_EXPECT_OK(t.strategy->Finish());
}

// A round that completes without a group-mate (here: the mate has left) is
// not a step of the schedule: the trainer stays on its group and, once the
// mate is back, the two average together (were trainer 0 on round 1's group
// {0,2}, it would wait for trainer 2 instead).
TEST_F(DsSyncStrategyTest, PartialRoundIsRetriedInTheSameGroup) {
  SyncConfig c = Config(4, 2, DsSyncSchedule::kButterfly);
  std::vector<Trainer> trainers = MakeTrainers(c, 1);
  const float p0 = trainers[0].params[0], p1 = trainers[1].params[0];
  SS_ASSERT_OK(trainers[1].strategy->Finish());
  SS_ASSERT_OK(trainers[0].strategy->AfterStep(0));  // Alone: a no-op mean.
  EXPECT_EQ(trainers[0].params[0], p0);
  EXPECT_EQ(trainers[0].strategy->stats().rounds, 1);
  // Trainer 1 comes back (a fresh strategy joins its groups again).
  c.trainer_index = 1;
  auto strategy = MakeSyncStrategy(c, trainers[1].client.get(), nullptr);
  SS_ASSERT_OK(strategy);
  trainers[1].strategy = std::move(*strategy);
  SS_ASSERT_OK(trainers[1].strategy->Start(
      DenseReplica{trainers[1].params, trainers[1].state, {model::OptimizerKind::kSgd, 1.0f}, 1}));
  std::thread t0([&] { EXPECT_TRUE(trainers[0].strategy->AfterStep(0).ok()); });
  std::thread t1([&] { EXPECT_TRUE(trainers[1].strategy->AfterStep(0).ok()); });
  t0.join();
  t1.join();
  EXPECT_FLOAT_EQ(trainers[0].params[0], (p0 + p1) / 2);
  EXPECT_FLOAT_EQ(trainers[1].params[0], (p0 + p1) / 2);
  for (Trainer& t : trainers) SS_EXPECT_OK(t.strategy->Finish());
}

// Two threads per trainer, k = 2: a round runs once both threads have made
// two steps, and only then.
TEST_F(DsSyncStrategyTest, RoundsRunEveryIntervalStepsOfEachThread) {
  SyncConfig c = Config(2, 2, DsSyncSchedule::kButterfly);
  c.interval = 2;
  std::vector<Trainer> trainers = MakeTrainers(c, 1, /*threads=*/2);
  const float mean = (trainers[0].params[0] + trainers[1].params[0]) / 2;
  for (Trainer& t : trainers) {
    SS_ASSERT_OK(t.strategy->AfterStep(0));
    SS_ASSERT_OK(t.strategy->AfterStep(1));
  }
  EXPECT_EQ(trainers[0].strategy->stats().rounds, 0);
  std::vector<std::thread> threads;
  for (Trainer& t : trainers) {
    for (int th = 0; th < 2; ++th) {
      threads.emplace_back([&t, th] { EXPECT_TRUE(t.strategy->AfterStep(th).ok()); });
    }
  }
  for (auto& th : threads) th.join();
  for (Trainer& t : trainers) {
    EXPECT_FLOAT_EQ(t.params[0], mean);
    EXPECT_EQ(t.strategy->stats().rounds, 1);
    EXPECT_GT(t.strategy->stats().blocked_seconds, 0);
  }
  for (Trainer& t : trainers) SS_EXPECT_OK(t.strategy->Finish());
}

TEST_F(DsSyncStrategyTest, MakeSyncStrategyRejectsShapesWithoutASchedule) {
  using ::shadowsync::testing::StatusIs;
  syncer::SyncerClientOptions co;
  co.addresses = {server_->address()};
  co.member = "trainer-0";
  auto client = syncer::SyncerClient::Connect(co, 2);
  SS_ASSERT_OK(client);
  EXPECT_THAT(
      MakeSyncStrategy(Config(6, 2, DsSyncSchedule::kButterfly), client->get(), nullptr).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, "sync.dsSync.schedule"));
  EXPECT_THAT(
      MakeSyncStrategy(Config(6, 4, DsSyncSchedule::kRandom), client->get(), nullptr).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, "sync.dsSync.groupSize"));
  SyncConfig c = Config(4, 2, DsSyncSchedule::kRandom);
  c.trainer_index = 4;
  EXPECT_THAT(MakeSyncStrategy(c, client->get(), nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "trainer index"));
}

}  // namespace
}  // namespace shadowsync::worker
