// The dense-sync update rules against hand-computed vectors (the formulas of
// worker/sync/sync_math.h), and each strategy against a
// real syncer on loopback.
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "syncer/client/syncer_client.h"
#include "syncer/syncer_server.h"
#include "tests/util/test_util.h"
#include "tests/worker/strategy_test_util.h"
#include "worker/sync/factory.h"
#include "worker/sync/strategy.h"
#include "worker/sync/sync_math.h"

namespace shadowsync::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatEq;

TEST(SyncMathTest, EasgdElasticIsAlphaTimesDistanceToCentre) {
  std::vector<float> elastic(2);
  EasgdElastic(0.5f, std::vector<float>{1, 2}, std::vector<float>{0, 4}, elastic);
  EXPECT_THAT(elastic, ElementsAre(0.5f, -1.0f));
}

TEST(SyncMathTest, BmufNesterovStepsByHand) {
  BmufParams p{0.5f, 1.0f, true};
  std::vector<float> global = {0, 0}, momentum = {0, 0}, target(2);
  // G = (1, 2) - 0; v = 0.5 * 0 + G; w_g = v; target = w_g + 0.5 v.
  BmufStep(p, std::vector<float>{1, 2}, global, momentum, target);
  EXPECT_THAT(momentum, ElementsAre(1.0f, 2.0f));
  EXPECT_THAT(global, ElementsAre(1.0f, 2.0f));
  EXPECT_THAT(target, ElementsAre(1.5f, 3.0f));
  // The replicas started the next block at the target and made no
  // progress: G = 0 (measured from that start), v halves, w_g moves on.
  BmufStep(p, std::vector<float>{1.5f, 3}, global, momentum, target);
  EXPECT_THAT(momentum, ElementsAre(0.5f, 1.0f));
  EXPECT_THAT(global, ElementsAre(1.5f, 3.0f));
  EXPECT_THAT(target, ElementsAre(1.75f, 3.5f));
}

// Replicas that make no more progress bring the Nesterov momentum to rest:
// the look-ahead each block starts from is not progress. (Measured from w_g
// instead, v = 2 bm v = v here and the model drifted forever.)
TEST(SyncMathTest, BmufNesterovMomentumDecaysWithoutProgress) {
  BmufParams p{0.5f, 1.0f, true};
  std::vector<float> global = {0}, momentum = {0}, target = {0};
  BmufStep(p, std::vector<float>{1}, global, momentum, target);  // one block of progress 1
  for (int block = 0; block < 40; ++block) {
    const std::vector<float> mean = target;  // the replicas sit at their start
    BmufStep(p, mean, global, momentum, target);
  }
  EXPECT_NEAR(momentum[0], 0.0f, 1e-6);
  // w_g = 1 + 0.5 + 0.25 + ... = 2: the first block's update, carried by momentum.
  EXPECT_NEAR(global[0], 2.0f, 1e-5);
  EXPECT_NEAR(target[0], 2.0f, 1e-5);
}

TEST(SyncMathTest, BmufWithoutNesterovTargetsTheGlobalModel) {
  BmufParams p{0.25f, 2.0f, false};
  std::vector<float> global = {1}, momentum = {0.5f}, target(1);
  // v = 0.25 * 0.5 + 2 * (3 - 1) = 4.125; w_g = 5.125.
  BmufStep(p, std::vector<float>{3}, global, momentum, target);
  EXPECT_THAT(target, ElementsAre(5.125f));
  EXPECT_THAT(global, ElementsAre(5.125f));
}

TEST(SyncMathTest, BmufWithoutMomentumIsModelAveraging) {
  BmufParams p{0.0f, 1.0f, true};
  std::vector<float> global = {7, -3}, momentum = {0, 0}, target(2);
  BmufStep(p, std::vector<float>{2, 5}, global, momentum, target);
  EXPECT_THAT(target, ElementsAre(2.0f, 5.0f));
}

// sync-algorithms.md §1.3: for a constant block update G the momentum
// settles at zeta * G / (1 - bm).
TEST(SyncMathTest, BmufSteadyStateMomentumIsZetaGOverOneMinusBm) {
  BmufParams p{0.75f, 1.5f, false};
  std::vector<float> global = {0}, momentum = {0}, target(1);
  const float g = 0.1f;
  for (int i = 0; i < 200; ++i) {
    const std::vector<float> mean = {global[0] + g};
    BmufStep(p, mean, global, momentum, target);
  }
  EXPECT_NEAR(momentum[0], 1.5 * 0.1 / (1 - 0.75), 1e-5);
  // Nesterov: the same, with the progress measured from each block's start.
  p.nesterov = true;
  global = {0}, momentum = {0}, target = {0};
  for (int i = 0; i < 200; ++i) {
    const std::vector<float> mean = {target[0] + g};
    BmufStep(p, mean, global, momentum, target);
  }
  EXPECT_NEAR(momentum[0], 1.5 * 0.1 / (1 - 0.75), 1e-5);
}

TEST(SyncMathTest, OptimizerDeltaMatchesTheOptimizer) {
  std::vector<float> state, delta(2);
  OptimizerDelta({model::OptimizerKind::kSgd, 0.1f}, state, std::vector<float>{1, -2}, delta);
  EXPECT_THAT(delta, ElementsAre(FloatEq(-0.1f), FloatEq(0.2f)));
  state = {0, 3};
  OptimizerDelta({model::OptimizerKind::kAdagrad, 0.1f, 0.0f}, state, std::vector<float>{1, 1},
                 delta);
  EXPECT_THAT(state, ElementsAre(1.0f, 4.0f));
  EXPECT_THAT(delta, ElementsAre(FloatEq(-0.1f), FloatEq(-0.05f)));
}

TEST(SyncMathTest, AddAndStoreRelaxed) {
  std::vector<float> replica = {1, 2};
  AddRelaxed(replica, std::vector<float>{0.5f, -1});
  EXPECT_THAT(replica, ElementsAre(1.5f, 1.0f));
  StoreRelaxed(replica, std::vector<float>{3, 4});
  EXPECT_THAT(replica, ElementsAre(3.0f, 4.0f));
}

using strategy_test::Member;
using SyncStrategyTest = strategy_test::StrategyTest;

SyncConfig Config(SyncAlgorithm algorithm) {
  SyncConfig c;
  c.algorithm = algorithm;
  c.interval = 1;
  c.duty_cycle = 1;  // Shadow rounds back to back.
  // The shadow loop alone; the tests of warm-up and final round set them.
  c.warmup_steps = 0;
  c.final_average = false;
  return c;
}

// Hand computation (SGD, lr 1, alpha 0.5): A moves 2 -> 4, its round pulls
// c = 2, d = 1: A = 3, c = 3. Then B moves 2 -> 0: d = 0.5 (0 - 3) = -1.5,
// B = 1.5, c = 1.5.
TEST_F(SyncStrategyTest, ForegroundEasgdByHand) {
  SyncConfig c = Config(SyncAlgorithm::kFgEasgd);
  c.easgd_alpha = 0.5f;
  Member a = Make("a", c, {2});
  Member b = Make("b", c, {2});
  SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{-2}));
  SS_ASSERT_OK(a.strategy->AfterStep(0));
  EXPECT_THAT(a.params, ElementsAre(3.0f));
  SS_ASSERT_OK(b.strategy->ApplyGradient(0, std::vector<float>{2}));
  SS_ASSERT_OK(b.strategy->AfterStep(0));
  EXPECT_THAT(b.params, ElementsAre(1.5f));
  std::vector<float> centre(1);
  SS_ASSERT_OK(a.client->PullCentre(centre));
  EXPECT_THAT(centre, ElementsAre(1.5f));
  EXPECT_EQ(a.strategy->stats().rounds, 1);
}

// Runs `step(member)` for every member in its own thread (the all-reduce
// needs them all at once).
template <typename F>
void InParallel(std::vector<Member*> members, F step) {
  std::vector<std::thread> threads;
  for (Member* m : members) threads.emplace_back([m, &step] { step(*m); });
  for (auto& t : threads) t.join();
}

// bm 0.5, zeta 1, Nesterov; replicas at 2 and 4 -> mean 3, v = 3, w_g = 3,
// target = 3 + 0.5 * 3 = 4.5 on both.
TEST_F(SyncStrategyTest, ForegroundBmufByHand) {
  SyncConfig c = Config(SyncAlgorithm::kFgBmuf);
  c.bmuf = {0.5f, 1.0f, true};
  Member a = Make("a", c, {0});
  Member b = Make("b", c, {0});
  SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{-2}));
  SS_ASSERT_OK(b.strategy->ApplyGradient(0, std::vector<float>{-4}));
  InParallel({&a, &b}, [](Member& m) { EXPECT_TRUE(m.strategy->AfterStep(0).ok()); });
  EXPECT_THAT(a.params, ElementsAre(4.5f));
  EXPECT_THAT(b.params, ElementsAre(4.5f));
}

TEST_F(SyncStrategyTest, ForegroundMaEveryKStepsOfEachThread) {
  SyncConfig c = Config(SyncAlgorithm::kFgMa);
  c.interval = 3;
  Member a = Make("a", c, {0, 0});
  Member b = Make("b", c, {0, 0});
  // a descends by 1 per step, b by 3: after 3 steps -3 and -9, mean -6.
  for (int step = 0; step < 2; ++step) {
    SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{1, 1}));
    SS_ASSERT_OK(a.strategy->AfterStep(0));
    SS_ASSERT_OK(b.strategy->ApplyGradient(0, std::vector<float>{3, 3}));
    SS_ASSERT_OK(b.strategy->AfterStep(0));
  }
  EXPECT_EQ(a.strategy->stats().rounds, 0);  // k = 3: no round yet.
  EXPECT_THAT(a.params, ElementsAre(-2.0f, -2.0f));
  SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{1, 1}));
  SS_ASSERT_OK(b.strategy->ApplyGradient(0, std::vector<float>{3, 3}));
  InParallel({&a, &b}, [](Member& m) { EXPECT_TRUE(m.strategy->AfterStep(0).ok()); });
  EXPECT_THAT(a.params, ElementsAre(-6.0f, -6.0f));
  EXPECT_THAT(b.params, ElementsAre(-6.0f, -6.0f));
  EXPECT_EQ(a.strategy->stats().rounds, 1);
  EXPECT_EQ(a.strategy->stats().gap_steps, 3);
  EXPECT_GT(a.strategy->stats().bytes_sent, 0);
}

// Two trainers of two threads each; every thread's gradient counts once in
// the single SGD update: 10 - mean(1, 3, 5, 7) = 6 on both replicas.
TEST_F(SyncStrategyTest, BspAppliesTheMeanOfEveryThreadsGradientOnce) {
  SyncConfig c = Config(SyncAlgorithm::kBsp);
  Member a = Make("a", c, {10}, {model::OptimizerKind::kSgd, 1.0f}, 2);
  Member b = Make("b", c, {10}, {model::OptimizerKind::kSgd, 1.0f}, 2);
  std::vector<std::thread> threads;
  auto run = [](Member* m, int thread, float g) {
    EXPECT_TRUE(m->strategy->ApplyGradient(thread, std::vector<float>{g}).ok());
  };
  threads.emplace_back(run, &a, 0, 1.0f);
  threads.emplace_back(run, &a, 1, 3.0f);
  threads.emplace_back(run, &b, 0, 5.0f);
  threads.emplace_back(run, &b, 1, 7.0f);
  for (auto& t : threads) t.join();
  EXPECT_THAT(a.params, ElementsAre(6.0f));
  EXPECT_THAT(b.params, ElementsAre(6.0f));
  EXPECT_EQ(a.strategy->stats().rounds, 1);
}

// A thread out of data leaves the barrier: the other thread's steps go on.
TEST_F(SyncStrategyTest, BspDoesNotWaitForAFinishedThread) {
  SyncConfig c = Config(SyncAlgorithm::kBsp);
  Member a = Make("a", c, {10}, {model::OptimizerKind::kSgd, 1.0f}, 2);
  a.strategy->ThreadDone(1);
  SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{2}));
  SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{2}));
  EXPECT_THAT(a.params, ElementsAre(6.0f));
  SS_ASSERT_OK(a.strategy->Finish());
}

// ASP: every update lands on the global weights; the replica is replaced by
// them, including the other trainer's updates.
TEST_F(SyncStrategyTest, AspSendsUpdatesToTheGlobalWeights) {
  SyncConfig c = Config(SyncAlgorithm::kAsp);
  Member a = Make("a", c, {1, 1});
  Member b = Make("b", c, {5, 5});  // Adopts a's initial weights.
  EXPECT_THAT(b.params, ElementsAre(1.0f, 1.0f));
  SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{1, 2}));
  EXPECT_THAT(a.params, ElementsAre(0.0f, -1.0f));
  SS_ASSERT_OK(b.strategy->ApplyGradient(0, std::vector<float>{1, 1}));
  EXPECT_THAT(b.params, ElementsAre(-1.0f, -2.0f));
  EXPECT_EQ(b.strategy->stats().rounds, 1);
  EXPECT_GT(b.strategy->stats().blocked_seconds, 0);
}

// ASP applies lr * lr_scale: N trainers' updates all land, so a job
// defaults the scale to 1 / N (sync.learningRateScale).
TEST_F(SyncStrategyTest, AspScalesItsLearningRate) {
  SyncConfig c = Config(SyncAlgorithm::kAsp);
  c.lr_scale = 0.25;
  Member a = Make("a", c, {1, 1});
  SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{4, 8}));
  EXPECT_THAT(a.params, ElementsAre(0.0f, -1.0f));
}

// The trainer's learning-rate warm-up reaches every algorithm's dense
// update, whichever way it applies it: locally, through the syncer's global
// weights (asp, ssp), after an all-reduce (bsp) or as a versioned delta
// (ps-plus).
TEST_F(SyncStrategyTest, EveryDenseUpdateFollowsTheTrainersWarmupFactor) {
  for (SyncAlgorithm algorithm : {SyncAlgorithm::kNone, SyncAlgorithm::kAsp, SyncAlgorithm::kSsp,
                                  SyncAlgorithm::kBsp, SyncAlgorithm::kPsPlus}) {
    SCOPED_TRACE(EnumName(algorithm));
    SyncConfig c = Config(algorithm);
    std::atomic<float> factor{0.25f};
    Member a = Make(std::string(EnumName(algorithm)), c, {1, 1}, {model::OptimizerKind::kSgd, 1.0f},
                    1, nullptr, &factor);
    // The algorithms that share global weights adopt those the previous one left.
    const std::vector<float> start = a.params;
    SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{4, 8}));
    EXPECT_THAT(a.params, ElementsAre(start[0] - 1, start[1] - 2));
    factor = 1.0f;  // Warmed up: the full rate.
    SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{1, 1}));
    EXPECT_THAT(a.params, ElementsAre(start[0] - 2, start[1] - 3));
    SS_ASSERT_OK(a.strategy->Finish());
  }
}

// Each algorithm gets the scale that is about it: learningRateScale for the
// shared-weight ones, replicaLearningRateScale for shadow-* and fg-* (each
// replica keeps its own Adagrad accumulator), none for bsp.
TEST(SyncConfigFromJobTest, LearningRateScaleFollowsTheAlgorithm) {
  JobSpec spec;
  spec.trainer.replicas = 4;
  spec.sync.algorithm = SyncAlgorithm::kAsp;
  EXPECT_DOUBLE_EQ(SyncConfigFromJob(spec).lr_scale, 0.25);
  spec.sync.learning_rate_scale = 0.3;
  EXPECT_DOUBLE_EQ(SyncConfigFromJob(spec).lr_scale, 0.3);
  spec.sync.algorithm = SyncAlgorithm::kShadowMa;
  EXPECT_DOUBLE_EQ(SyncConfigFromJob(spec).lr_scale, 0.5);  // 1 / sqrt(4), Adagrad
  spec.sync.algorithm = SyncAlgorithm::kFgBmuf;
  EXPECT_DOUBLE_EQ(SyncConfigFromJob(spec).lr_scale, 0.5);
  spec.sync.algorithm = SyncAlgorithm::kBsp;
  EXPECT_DOUBLE_EQ(SyncConfigFromJob(spec).lr_scale, 1.0);
}

// Shadow MA with no training: the loop converges both replicas on the mean.
TEST_F(SyncStrategyTest, ShadowMaAveragesInTheBackground) {
  SyncConfig c = Config(SyncAlgorithm::kShadowMa);
  Member a = Make("a", c, {0, 4});
  Member b = Make("b", c, {2, 0});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (a.strategy->stats().rounds < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  SS_ASSERT_OK(a.strategy->Finish());
  SS_ASSERT_OK(b.strategy->Finish());
  EXPECT_GE(a.strategy->stats().rounds, 3);
  EXPECT_THAT(a.params, ElementsAre(1.0f, 2.0f));
  EXPECT_THAT(b.params, ElementsAre(1.0f, 2.0f));
  EXPECT_EQ(a.strategy->stats().blocked_seconds, 0);  // Training never waits.
}

// Delta apply: local progress made while rounds run is kept. EASGD moves
// mass between the replica and the centre, so replica + centre equals the
// sum of the local updates however rounds and updates interleave, up to
// Hogwild's own lost updates: the training thread's and the shadow thread's
// relaxed read-modify-writes of the replica can collide. A collision loses
// either one step (1.0) or one round's whole delta, alpha * (replica -
// centre), which grows with the steps between rounds. A sum 3.5 above the
// steps was seen under ThreadSanitizer, whose slow rounds let the replica
// run ahead: the delta of a replica 7 steps past the centre, lost.
// Overwriting instead of applying the delta loses nearly all of them
// (applyMode: overwrite ends at 1 here, not 200), hence a bound of a tenth
// of the steps.
// One training thread's steps of +1 on member `a`'s replica (serving
// `gate` between them, if given): at least 200, and on until several rounds
// ran (a loaded machine can starve the shadow thread for a while). Returns
// the step count.
int StepUntilRounds(Member& a, ReplicaGate* gate = nullptr) {
  int steps = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (steps < 200 ||
         (a.strategy->stats().rounds < 3 && std::chrono::steady_clock::now() < deadline)) {
    EXPECT_TRUE(a.strategy->ApplyGradient(0, std::vector<float>{-1}).ok());
    EXPECT_TRUE(a.strategy->AfterStep(0).ok());
    ++steps;
    if (gate != nullptr) gate->Serve();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return steps;
}

TEST_F(SyncStrategyTest, ShadowEasgdKeepsLocalProgressMadeDuringRounds) {
  SyncConfig c = Config(SyncAlgorithm::kShadowEasgd);
  c.easgd_alpha = 0.5f;
  Member a = Make("a", c, {0});
  const int steps = StepUntilRounds(a);  // Relaxed updates, Hogwild-style.
  SS_ASSERT_OK(a.strategy->Finish());
  std::vector<float> centre(1);
  SS_ASSERT_OK(a.client->PullCentre(centre));
  EXPECT_GE(a.strategy->stats().rounds, 3);
  EXPECT_NEAR(a.params[0] + centre[0], steps, 0.1 * steps);
  EXPECT_GT(centre[0], 0);  // The centre followed.
  EXPECT_GT(a.strategy->stats().mean_gap_steps(), 0);
}

// The same with a lone training thread behind the trainer's gate: it
// updates the replica with plain stores, the shadow thread's snapshot and
// delta wait for the ends of its steps, and so no update is lost at all
// (ThreadSanitizer, in the tsan preset, reports any overlap).
TEST_F(SyncStrategyTest, ShadowRoundsReachALoneTrainingThreadBetweenItsSteps) {
  SyncConfig c = Config(SyncAlgorithm::kShadowEasgd);
  c.easgd_alpha = 0.5f;
  ReplicaGate gate(/*serialised=*/true);
  Member a = Make("a", c, {0}, {model::OptimizerKind::kSgd, 1.0f}, 1, &gate);
  gate.Open();
  const int steps = StepUntilRounds(a, &gate);  // Plain updates behind the gate.
  gate.Close();
  SS_ASSERT_OK(a.strategy->Finish());
  std::vector<float> centre(1);
  SS_ASSERT_OK(a.client->PullCentre(centre));
  EXPECT_GE(a.strategy->stats().rounds, 3);
  // Rounding only: a lost update would cost a whole step.
  EXPECT_NEAR(a.params[0] + centre[0], steps, 1e-3);
  EXPECT_GT(centre[0], 0);
}

// A trainer that finishes leaves the rounds: the others go on without
// waiting for the member timeout (30 s here).
TEST_F(SyncStrategyTest, FinishedTrainerDoesNotStallTheOthers) {
  SyncConfig c = Config(SyncAlgorithm::kShadowBmuf);
  c.bmuf = {0.5f, 1.0f, true};
  Member a = Make("a", c, {0});
  Member b = Make("b", c, {0});
  SS_ASSERT_OK(a.strategy->Finish());
  const int64_t before = b.strategy->stats().rounds;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (b.strategy->stats().rounds < before + 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(b.strategy->stats().rounds, before + 5);
  SS_ASSERT_OK(b.strategy->Finish());
}

// A syncer that restarts (losing the centre and the membership) costs
// rounds, not the training: the shadow thread backs off, seeds the centre
// again from its replica and goes on.
TEST_F(SyncStrategyTest, ShadowEasgdSurvivesASyncerRestart) {
  SyncConfig c = Config(SyncAlgorithm::kShadowEasgd);
  Member a = Make("a", c, {1, 2});
  auto wait_for_rounds = [&](int64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (a.strategy->stats().rounds < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return a.strategy->stats().rounds;
  };
  ASSERT_GE(wait_for_rounds(2), 2);
  const std::string address = server_->address();
  server_->Shutdown();
  server_.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rounds fail meanwhile
  syncer::SyncerServerOptions o;
  o.grpc_address = address;
  o.metrics_address = "";
  auto server = syncer::SyncerServer::Start(o);
  SS_ASSERT_OK(server);
  server_ = std::move(*server);
  const int64_t before = a.strategy->stats().rounds;
  EXPECT_GE(wait_for_rounds(before + 3), before + 3);
  SS_ASSERT_OK(a.strategy->Finish());
  std::vector<float> centre(2);
  SS_ASSERT_OK(a.client->PullCentre(centre));  // seeded again
}

int64_t WaitForRounds(const Member& m, int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (m.strategy->stats().rounds < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return m.strategy->stats().rounds;
}

// Warm-up (SGD, lr 1): a = 0, b = 4. Step 1: a + 1, b + 1: both at the
// mean 3. Step 2: a + 1 = 4, b - 1 = 2: both at 3. Only then does the
// shadow thread run rounds, without any step.
TEST_F(SyncStrategyTest, ShadowWarmupAveragesAfterEveryStepThenGoesToTheBackground) {
  SyncConfig c = Config(SyncAlgorithm::kShadowMa);
  c.num_trainers = 2;
  c.warmup_steps = 2;
  auto [a, b] = MakeTwo(c, {0}, {4});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(a.strategy->stats().rounds, 0);  // No shadow rounds during the warm-up.
  for (float b_grad : {-1.0f, 1.0f}) {
    InParallel({&a, &b}, [&](Member& m) {
      SS_ASSERT_OK(m.strategy->ApplyGradient(0, std::vector<float>{&m == &a ? -1.0f : b_grad}));
      SS_ASSERT_OK(m.strategy->AfterStep(0));
      // Relaxed: after the last warm-up step the shadow thread writes too.
      EXPECT_EQ(std::atomic_ref<float>(m.params[0]).load(std::memory_order_relaxed), 3.0f);
    });
  }
  EXPECT_GT(a.strategy->stats().blocked_seconds, 0);  // The warm-up is foreground.
  EXPECT_GE(WaitForRounds(a, 5), 5);                  // Then the shadow thread.
  InParallel({&a, &b}, [](Member& m) { SS_ASSERT_OK(m.strategy->Finish()); });
  EXPECT_THAT(a.params, ElementsAre(3.0f));
}

// shadow-easgd seeds the centre with the replicas' mean after the warm-up,
// not with the initial weights, which would pull every replica back.
TEST_F(SyncStrategyTest, ShadowEasgdCentreStartsAtTheWarmedUpMean) {
  SyncConfig c = Config(SyncAlgorithm::kShadowEasgd);
  c.num_trainers = 2;
  c.warmup_steps = 1;
  c.min_interval = absl::Hours(1);  // One shadow round each, then none.
  auto [a, b] = MakeTwo(c, {0}, {4});
  InParallel({&a, &b}, [](Member& m) {
    SS_ASSERT_OK(m.strategy->ApplyGradient(0, std::vector<float>{-2}));  // 2 and 6: mean 4
    SS_ASSERT_OK(m.strategy->AfterStep(0));
  });
  std::vector<float> centre(1);
  SS_ASSERT_OK(a.client->PullCentre(centre));
  EXPECT_THAT(centre, ElementsAre(4.0f));
  InParallel({&a, &b}, [](Member& m) { SS_ASSERT_OK(m.strategy->Finish()); });
}

// A trainer restarted after the warm-up began does not wait for the others
// at its start (they will never be there again): its shadow thread runs.
TEST_F(SyncStrategyTest, RestartedTrainerSkipsTheWarmup) {
  SyncConfig c = Config(SyncAlgorithm::kShadowMa);
  c.num_trainers = 2;
  c.warmup_steps = 1;
  auto [a, b] = MakeTwo(c, {0}, {4});
  InParallel({&a, &b}, [](Member& m) {
    SS_ASSERT_OK(m.strategy->ApplyGradient(0, std::vector<float>{0}));
    SS_ASSERT_OK(m.strategy->AfterStep(0));
  });
  SS_ASSERT_OK(b.strategy->Finish());
  b = Make("b", c, {7});  // Returns: no start barrier.
  EXPECT_GE(WaitForRounds(b, 3), 3);
  EXPECT_EQ(b.strategy->stats().blocked_seconds, 0);
  InParallel({&a, &b}, [](Member& m) { SS_ASSERT_OK(m.strategy->Finish()); });
}

// replicaLearningRateScale: the shadow strategies' dense step is the
// optimizer's times the scale (SGD, lr 1, scale 0.5: a gradient of 2 moves
// the weight by 1).
TEST_F(SyncStrategyTest, ShadowReplicaLearningRateScaleScalesTheDenseStep) {
  SyncConfig c = Config(SyncAlgorithm::kShadowMa);
  c.lr_scale = 0.5;
  Member a = Make("a", c, {0});
  SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{2}));
  // Relaxed: the shadow thread writes it too (a round of one changes nothing).
  EXPECT_EQ(std::atomic_ref<float>(a.params[0]).load(std::memory_order_relaxed), -1.0f);
  SS_ASSERT_OK(a.strategy->Finish());
}

// A trainer restarted along with the syncer finds no warm-up rounds (the
// syncer forgot them) and the others already in shadow rounds: it joins
// those within a poll or two instead of waiting at the warm-up's barrier for
// trainers that will never come (10 minutes). For EASGD the evidence is the
// centre, for MA and BMUF completed rounds.
TEST_F(SyncStrategyTest, TrainerRestartedWithTheSyncerSkipsAWarmupTheOthersArePast) {
  for (SyncAlgorithm algorithm : {SyncAlgorithm::kShadowEasgd, SyncAlgorithm::kShadowMa}) {
    SCOPED_TRACE(static_cast<int>(algorithm));
    SetUp();  // A fresh syncer, as after a restart.
    SyncConfig past = Config(algorithm);
    past.num_trainers = 2;  // "a" is past its warm-up: it goes straight to shadow rounds.
    Member a = Make("a", past, {0});
    ASSERT_GE(WaitForRounds(a, 2), 2);
    SyncConfig c = past;
    c.warmup_steps = 4;
    const absl::Time start = absl::Now();
    Member b = Make("b", c, {4});
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
    EXPECT_GE(WaitForRounds(b, 2), 2);  // Shadow rounds, not warm-up ones.
    SS_ASSERT_OK(b.strategy->ApplyGradient(0, std::vector<float>{0}));
    SS_ASSERT_OK(b.strategy->AfterStep(0));  // Does not wait for a warm-up round.
    EXPECT_EQ(b.strategy->stats().blocked_seconds, 0);
    InParallel({&a, &b}, [](Member& m) { SS_ASSERT_OK(m.strategy->Finish()); });
  }
}

// The final round: after the warm-up step and one shadow round (both at 2),
// a trains on to 3 and b stays at 2; with finalAverage both end at 2.5,
// without it they keep their own replicas. (The warm-up makes both join the
// rounds before the first one, which would otherwise complete with whoever
// came first.)
TEST_F(SyncStrategyTest, FinalAverageLeavesEveryReplicaAtTheMean) {
  for (bool final_average : {true, false}) {
    SCOPED_TRACE(final_average);
    SetUp();  // A fresh syncer: no rounds of the previous pass.
    SyncConfig c = Config(SyncAlgorithm::kShadowMa);
    c.num_trainers = 2;
    c.warmup_steps = 1;
    c.min_interval = absl::Hours(1);  // One shadow round, then none.
    c.final_average = final_average;
    auto [a, b] = MakeTwo(c, {0}, {4});
    InParallel({&a, &b}, [](Member& m) {
      SS_ASSERT_OK(m.strategy->ApplyGradient(0, std::vector<float>{0}));
      SS_ASSERT_OK(m.strategy->AfterStep(0));
    });
    ASSERT_EQ(WaitForRounds(a, 2), 2);
    ASSERT_EQ(WaitForRounds(b, 2), 2);
    // Relaxed: the shadow thread wrote it (and idles now).
    ASSERT_EQ(std::atomic_ref<float>(a.params[0]).load(std::memory_order_relaxed), 2.0f);
    SS_ASSERT_OK(a.strategy->ApplyGradient(0, std::vector<float>{-1}));
    InParallel({&a, &b}, [](Member& m) { SS_ASSERT_OK(m.strategy->Finish()); });
    EXPECT_THAT(a.params, ElementsAre(final_average ? 2.5f : 3.0f));
    EXPECT_THAT(b.params, ElementsAre(final_average ? 2.5f : 2.0f));
  }
}

TEST(MakeSyncStrategyTest, RejectsMissingSyncerAndUnknownAlgorithms) {
  SyncConfig c = Config(SyncAlgorithm::kShadowMa);
  EXPECT_THAT(MakeSyncStrategy(c, nullptr, nullptr).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "needs a syncer"));
  c.algorithm = SyncAlgorithm::kNone;
  EXPECT_TRUE(MakeSyncStrategy(c, nullptr, nullptr).ok());
  auto client = syncer::SyncerClient::Connect({.addresses = {"127.0.0.1:1"}, .member = "a"}, 1);
  ASSERT_TRUE(client.ok()) << client.status();
  c.algorithm = static_cast<SyncAlgorithm>(99);
  EXPECT_THAT(MakeSyncStrategy(c, client->get(), nullptr).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "unknown value 99"));
}

}  // namespace
}  // namespace shadowsync::worker
