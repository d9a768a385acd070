// sync-switch: the online policy's straggler rule on its own, and the
// strategy with several in-process trainers against a real syncer.
#include "worker/sync/sync_switch.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "syncer/client/syncer_client.h"
#include "syncer/syncer_server.h"
#include "tests/util/test_util.h"
#include "tests/worker/strategy_test_util.h"
#include "worker/sync/factory.h"

namespace shadowsync::worker {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::FloatEq;
using ::testing::FloatNear;

// ---- The decision rule.

std::vector<double> Window(int steps, double seconds) {
  return std::vector<double>(steps, seconds);
}

TEST(SyncSwitchPolicyTest, WindowStepTimeIsTheMedianSoASingleSpikeDoesNotCount) {
  std::vector<double> samples = Window(19, 0.010);
  samples.push_back(1.0);  // one step 100 x slower (a GC pause, a page fault)
  EXPECT_DOUBLE_EQ(WindowStepSeconds(samples), 0.010);
  std::vector<double> none;
  EXPECT_EQ(WindowStepSeconds(none), 0);
}

TEST(SyncSwitchPolicyTest, TrainerAboveFactorTimesMedianForAWindowIsAStraggler) {
  std::vector<double> slow = Window(20, 0.041);
  std::vector<double> normal = Window(20, 0.010);
  const std::vector<float> times = {static_cast<float>(WindowStepSeconds(normal)), 0.011f,
                                    static_cast<float>(WindowStepSeconds(slow))};
  const StragglerVerdict v = FindStraggler(times, 2.0);
  EXPECT_EQ(v.straggler, 2);
  EXPECT_FLOAT_EQ(v.step_seconds, 0.041f);
  EXPECT_FLOAT_EQ(v.median_seconds, 0.011f);
}

TEST(SyncSwitchPolicyTest, ASingleSpikeInTheWindowIsNoStraggler) {
  std::vector<double> spiky = Window(19, 0.010);
  spiky.push_back(0.5);
  const std::vector<float> times = {0.010f, 0.010f, static_cast<float>(WindowStepSeconds(spiky))};
  EXPECT_EQ(FindStraggler(times, 2.0).straggler, -1);
}

TEST(SyncSwitchPolicyTest, RecoveryClearsTheVerdict) {
  EXPECT_EQ(FindStraggler(std::vector<float>{1, 1, 4}, 2.0).straggler, 2);
  // The next window: trainer 2 is back at speed, which returns to BSP.
  EXPECT_EQ(FindStraggler(std::vector<float>{1, 1, 1.5f}, 2.0).straggler, -1);
}

TEST(SyncSwitchPolicyTest, ThresholdIsStrictAndTheSlowestIsNamed) {
  EXPECT_EQ(FindStraggler(std::vector<float>{1, 1, 2}, 2.0).straggler, -1);  // exactly 2 x
  EXPECT_EQ(FindStraggler(std::vector<float>{1, 3, 1, 5}, 2.0).straggler, 3);
  // Two trainers: the lower median is the fast one.
  EXPECT_EQ(FindStraggler(std::vector<float>{1, 4}, 2.0).straggler, 1);
}

TEST(SyncSwitchPolicyTest, TrainersThatDidNotReportAreIgnored) {
  const StragglerVerdict v = FindStraggler(std::vector<float>{0, 1, 0, 1.5f}, 2.0);
  EXPECT_EQ(v.straggler, -1);
  EXPECT_FLOAT_EQ(v.median_seconds, 1.0f);
  EXPECT_EQ(FindStraggler(std::vector<float>{0, 0, 3}, 2.0).straggler, -1);  // alone
}

// ---- The strategy against a real syncer.

struct Trainer {
  std::vector<float> params, state;
  std::unique_ptr<syncer::SyncerClient> client;
  std::unique_ptr<SyncSwitchStrategy> strategy;
  std::unique_ptr<prometheus::Registry> registry = std::make_unique<prometheus::Registry>();
};

SyncConfig SwitchConfig(int trainers) {
  SyncConfig c;
  c.algorithm = SyncAlgorithm::kSyncSwitch;
  c.num_trainers = trainers;
  return c;
}

class SyncSwitchTest : public strategy_test::StrategyTest {
 protected:
  // Trainer `index` of `config.num_trainers`; `total_steps` > 0 is passed
  // to SetTotalSteps before Start. `restart`: a trainer restarted into the
  // running job, started at once.
  std::unique_ptr<Trainer> Make(int index, SyncConfig config, std::vector<float> init,
                                int threads = 1, int64_t total_steps = 0, float lr = 1.0f,
                                bool restart = false) {
    auto t = std::make_unique<Trainer>();
    t->params = std::move(init);
    t->state.assign(t->params.size(), 0.0f);
    t->client = Connect("trainer-" + std::to_string(index), static_cast<int64_t>(t->params.size()));
    config.trainer_index = index;
    auto strategy = SyncSwitchStrategy::Create(config, t->client.get(), t->registry.get());
    EXPECT_TRUE(strategy.ok()) << strategy.status();
    t->strategy = std::move(*strategy);
    if (total_steps > 0) t->strategy->SetTotalSteps(total_steps);
    // Start waits for every trainer to join: all but the last start in the
    // background, and the last one's Make returns once all have started.
    Trainer* raw = t.get();
    auto start = [raw, threads, lr] {
      SS_EXPECT_OK(raw->strategy->Start(
          DenseReplica{raw->params, raw->state, {model::OptimizerKind::kSgd, lr}, threads}));
    };
    if (index + 1 < config.num_trainers && !restart) {
      starting_.push_back(std::async(std::launch::async, start));
    } else {
      start();
      for (std::future<void>& f : starting_) f.get();
      starting_.clear();
    }
    return t;
  }

  std::vector<std::future<void>> starting_;
};

// One step of `thread`: its update, then the after-step hook.
absl::Status Step(SyncStrategy& s, int thread, std::vector<float> grad) {
  SS_RETURN_IF_ERROR(s.ApplyGradient(thread, grad));
  return s.AfterStep(thread);
}

double CounterValue(prometheus::Registry& registry, const std::string& name,
                    const std::string& direction) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "direction" && label.value == direction) return metric.counter.value;
      }
    }
  }
  return -1;
}

// switchStep 4, SGD lr 1, ASP lr 1/2 (1 / trainers): four BSP rounds apply
// the mean gradient 2 (-8 on both), the fifth step is ASP: the centre is
// -8 - 0.5 * 1 - 0.5 * 3 = -10 whatever the order of the two pushes.
TEST_F(SyncSwitchTest, OfflineSwitchesEveryTrainerAtTheSwitchStepWithTheRescaledLearningRate) {
  SyncConfig c = SwitchConfig(2);
  c.sync_switch.switch_step = 4;
  c.sync_switch.asp_batch_size = 96;
  std::unique_ptr<Trainer> a = Make(0, c, {0});
  std::unique_ptr<Trainer> b = Make(1, c, {0});
  EXPECT_FLOAT_EQ(a->strategy->asp_learning_rate(), 0.5f);
  EXPECT_EQ(a->strategy->BatchSize(64), 64);  // BSP: the configured batch
  EXPECT_EQ(a->strategy->MaxBatchSize(64), 96);
  std::vector<float> before_switch(2);
  auto run = [&](Trainer* t, float g, int i) {
    for (int step = 0; step < 5; ++step) {
      if (step == 4) before_switch[i] = t->params[0];
      EXPECT_EQ(t->strategy->status().mode, SyncSwitchMode::kBsp);  // until the fifth step
      SS_EXPECT_OK(Step(*t->strategy, 0, {g}));
    }
  };
  std::thread ta(run, a.get(), 1.0f, 0), tb(run, b.get(), 3.0f, 1);
  ta.join();
  tb.join();
  EXPECT_THAT(before_switch, ElementsAre(-8.0f, -8.0f));
  std::vector<float> centre(1);
  SS_ASSERT_OK(a->client->PullCentre(centre));
  EXPECT_THAT(centre, ElementsAre(-10.0f));
  for (Trainer* t : {a.get(), b.get()}) {
    const SyncSwitchStatus s = t->strategy->status();
    EXPECT_EQ(s.mode, SyncSwitchMode::kAsp);
    EXPECT_TRUE(s.bsp_share_done);
    EXPECT_EQ(s.bsp_rounds, 4);
    EXPECT_EQ(s.switch_round, 4);
    EXPECT_EQ(s.bsp_to_asp, 1);
    EXPECT_EQ(s.asp_to_bsp, 0);
    EXPECT_EQ(s.last_straggler, -1);
    EXPECT_EQ(CounterValue(*t->registry, "shadowsync_trainer_sync_switches_total", "bsp_to_asp"),
              1);
    EXPECT_EQ(t->strategy->BatchSize(64), 96);  // ASP: aspBatchSize
  }
  // ASP from now on: a's update lands on the global weights at lr 1/2.
  SS_ASSERT_OK(Step(*a->strategy, 0, {2}));
  EXPECT_THAT(a->params, ElementsAre(-11.0f));
  // Rounds of both phases count as this strategy's: 4 BSP, the switch, 2 ASP.
  EXPECT_EQ(a->strategy->stats().rounds, 7);
  EXPECT_GT(a->strategy->stats().bytes_sent, 0);
  SS_EXPECT_OK(a->strategy->Finish());
  SS_EXPECT_OK(b->strategy->Finish());
}

// switchFraction 0.25 of 16 steps per thread = round 4, on three trainers
// of two threads each. All gradients 1: BSP takes the weights to -4; then 18
// ASP steps at lr 0.5 (aspLearningRateScale) take the centre to -13.
TEST_F(SyncSwitchTest, OfflineSwitchPointFromTotalStepsWithThreeTrainersOfTwoThreads) {
  SyncConfig c = SwitchConfig(3);
  c.sync_switch.switch_fraction = 0.25;
  c.sync_switch.asp_learning_rate_scale = 0.5;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int i = 0; i < 3; ++i) trainers.push_back(Make(i, c, {0, 0, 0}, 2, 16));
  std::vector<std::thread> threads;
  for (auto& t : trainers) {
    for (int thread = 0; thread < 2; ++thread) {
      threads.emplace_back([&t, thread] {
        for (int step = 0; step < 7; ++step) SS_EXPECT_OK(Step(*t->strategy, thread, {1, 1, 1}));
        t->strategy->ThreadDone(thread);
      });
    }
  }
  for (auto& th : threads) th.join();
  std::vector<float> centre(3);
  SS_ASSERT_OK(trainers[0]->client->PullCentre(centre));
  EXPECT_THAT(centre, Each(FloatEq(-13.0f)));
  for (auto& t : trainers) {
    const SyncSwitchStatus s = t->strategy->status();
    EXPECT_EQ(s.switch_round, 4);
    EXPECT_EQ(s.bsp_rounds, 4);
    EXPECT_EQ(s.mode, SyncSwitchMode::kAsp);
    EXPECT_EQ(s.switches(), 1);
    // Each replica holds the global weights of its last push.
    EXPECT_THAT(t->params, Each(FloatNear(-8.5f, 4.5f)));
    SS_EXPECT_OK(t->strategy->Finish());
  }
}

// Online: trainer 2 is slow (a sleep in its step loop) from the start; the
// first window detects it and every trainer goes to ASP. It stays slow for
// three more windows (ASP must hold), then recovers, and every trainer
// returns to BSP at the same checkpoint: the one BSP round they then run
// leaves all replicas equal.
TEST_F(SyncSwitchTest, OnlineSwitchesToAspWhileATrainerStragglesAndBackWhenItRecovers) {
  constexpr int kTrainers = 3;
  constexpr int kWindow = 4;
  SyncConfig c = SwitchConfig(kTrainers);
  c.sync_switch.policy = SyncSwitchPolicy::kOnline;
  c.sync_switch.switch_fraction = 1;  // No BSP share: only stragglers switch.
  c.sync_switch.window_steps = kWindow;
  c.sync_switch.straggler_factor = 2;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int i = 0; i < kTrainers; ++i) {
    trainers.push_back(Make(i, c, std::vector<float>(8, 1.0f), 1, 0, 0.01f));
  }
  std::atomic<int64_t> asp_to_bsp_while_slow{-1};
  std::vector<int> steps(kTrainers, 0);
  auto loop = [&](int i) {
    Trainer& t = *trainers[i];
    int asp_steps = 0;
    for (int step = 0; step < 3000; ++step) {
      const SyncSwitchStatus s = t.strategy->status();
      if (s.asp_to_bsp > 0) break;  // Back in BSP: done.
      if (s.mode == SyncSwitchMode::kAsp) ++asp_steps;
      const bool slow = i == 2 && asp_steps < 3 * kWindow;
      if (i == 2 && !slow && asp_to_bsp_while_slow < 0) asp_to_bsp_while_slow = s.asp_to_bsp;
      // The step's compute: 20 ms on the straggler, 2 ms elsewhere.
      std::this_thread::sleep_for(std::chrono::milliseconds(slow ? 20 : 2));
      SS_EXPECT_OK(Step(*t.strategy, 0, std::vector<float>(8, 0.1f * (i + 1))));
      ++steps[i];
    }
    t.strategy->ThreadDone(0);
    SS_EXPECT_OK(t.strategy->Finish());
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kTrainers; ++i) threads.emplace_back(loop, i);
  for (auto& th : threads) th.join();
  EXPECT_EQ(asp_to_bsp_while_slow, 0);  // ASP held while trainer 2 was slow.
  for (int i = 0; i < kTrainers; ++i) {
    const SyncSwitchStatus s = trainers[i]->strategy->status();
    EXPECT_GE(s.bsp_to_asp, 1) << "trainer " << i;
    EXPECT_EQ(s.asp_to_bsp, 1) << "trainer " << i;
    EXPECT_EQ(s.mode, SyncSwitchMode::kBsp) << "trainer " << i;
    EXPECT_EQ(s.last_straggler, 2) << "trainer " << i;
    EXPECT_EQ(CounterValue(*trainers[i]->registry, "shadowsync_trainer_sync_switches_total",
                           "asp_to_bsp"),
              1);
    EXPECT_LT(steps[i], 3000) << "trainer " << i;
    // Everyone adopted the global weights, then ran one BSP round.
    EXPECT_EQ(trainers[i]->params, trainers[0]->params) << "trainer " << i;
  }
  // The fast trainers ran ahead of the straggler under ASP.
  EXPECT_GT(steps[0], steps[2]);
}

// Trainer 0 dies during BSP (no Finish: its member stays live) while
// trainer 1 waits in a round for it. The restarted trainer 0 releases that
// round at once, not after the 30 s member timeout, and trains under ASP on
// the global weights; trainer 1 carries on in BSP alone. SGD lr 1, ASP lr 1/2.
TEST_F(SyncSwitchTest, RestartedTrainerTrainsAspAndReleasesTheOthersLockstep) {
  SyncConfig c = SwitchConfig(2);
  c.sync_switch.switch_step = 1000;
  std::unique_ptr<Trainer> a = Make(0, c, {0});
  std::unique_ptr<Trainer> b = Make(1, c, {0});
  auto three_steps = [](Trainer* t, float g) {
    for (int k = 0; k < 3; ++k) SS_EXPECT_OK(Step(*t->strategy, 0, {g}));
  };
  std::thread ta(three_steps, a.get(), 1.0f), tb(three_steps, b.get(), 3.0f);
  ta.join();
  tb.join();
  EXPECT_THAT(b->params, ElementsAre(-6.0f));  // 3 rounds of the mean gradient 2.
  a.reset();                                   // Killed: never left its groups.

  const auto start = std::chrono::steady_clock::now();
  std::thread waiting([&] { SS_EXPECT_OK(Step(*b->strategy, 0, {3})); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // From its checkpoint: the weights before the fourth round.
  std::unique_ptr<Trainer> restarted = Make(0, c, {-6}, 1, 0, 1.0f, /*restart=*/true);
  waiting.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_THAT(b->params, ElementsAre(-9.0f));  // Round 4: b alone.

  SyncSwitchStatus s = restarted->strategy->status();
  EXPECT_TRUE(s.restarted);
  EXPECT_EQ(s.mode, SyncSwitchMode::kAsp);
  EXPECT_EQ(restarted->strategy->Details()["restarted"], true);
  // No ASP phase yet: its weights seed the global ones; its update lands there.
  SS_ASSERT_OK(Step(*restarted->strategy, 0, {2}));
  EXPECT_THAT(restarted->params, ElementsAre(-7.0f));
  std::vector<float> centre(1);
  SS_ASSERT_OK(restarted->client->PullCentre(centre));
  EXPECT_THAT(centre, ElementsAre(-7.0f));
  // b keeps its BSP lockstep without waiting for anyone.
  SS_ASSERT_OK(Step(*b->strategy, 0, {1}));
  EXPECT_THAT(b->params, ElementsAre(-10.0f));
  s = b->strategy->status();
  EXPECT_FALSE(s.restarted);
  EXPECT_EQ(s.mode, SyncSwitchMode::kBsp);
  EXPECT_EQ(s.bsp_rounds, 5);
  restarted->strategy->ThreadDone(0);
  SS_EXPECT_OK(restarted->strategy->Finish());
  b->strategy->ThreadDone(0);
  SS_EXPECT_OK(b->strategy->Finish());
}

TEST_F(SyncSwitchTest, RejectsBadSettingsAndAnUnknownSwitchPoint) {
  auto client =
      syncer::SyncerClient::Connect({.addresses = {server_->address()}, .member = "t"}, 4);
  SS_ASSERT_OK(client);
  SyncConfig c = SwitchConfig(2);
  c.sync_switch.straggler_factor = 1;
  EXPECT_THAT(SyncSwitchStrategy::Create(c, client->get(), nullptr).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "stragglerFactor"));
  c = SwitchConfig(2);
  c.sync_switch.asp_batch_size = 0;
  EXPECT_THAT(SyncSwitchStrategy::Create(c, client->get(), nullptr).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "aspBatchSize"));
  c = SwitchConfig(2);
  c.trainer_index = 2;
  EXPECT_THAT(SyncSwitchStrategy::Create(c, client->get(), nullptr).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "trainer index 2"));
  // The default switchFraction needs the run's length.
  c = SwitchConfig(2);
  auto s = MakeSyncStrategy(c, client->get(), nullptr);
  SS_ASSERT_OK(s);
  ASSERT_NE(dynamic_cast<SyncSwitchStrategy*>(s->get()), nullptr);
  std::vector<float> params(4), state(4);
  EXPECT_THAT((*s)->Start(DenseReplica{params, state, {}, 1}),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "SetTotalSteps"));
  c.sync_switch.asp_batch_size = 32;
  auto t = SyncSwitchStrategy::Create(c, client->get(), nullptr);
  SS_ASSERT_OK(t);
  EXPECT_EQ((*t)->asp_batch_size(), 32);
}

}  // namespace
}  // namespace shadowsync::worker
