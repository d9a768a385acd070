// Shared by the sync-strategy tests: an in-process syncer on loopback, and
// one trainer's side of a strategy (a replica, its client and strategy).
#ifndef SHADOWSYNC_TESTS_WORKER_STRATEGY_TEST_UTIL_H_
#define SHADOWSYNC_TESTS_WORKER_STRATEGY_TEST_UTIL_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "syncer/client/syncer_client.h"
#include "syncer/syncer_server.h"
#include "worker/sync/factory.h"
#include "worker/sync/strategy.h"

namespace shadowsync::worker::strategy_test {

struct Member {
  std::vector<float> params, state;
  std::unique_ptr<syncer::SyncerClient> client;
  std::unique_ptr<SyncStrategy> strategy;
};

class StrategyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    syncer::SyncerServerOptions o;
    o.metrics_address = "";
    o.service.member_timeout = absl::Seconds(30);
    auto server = syncer::SyncerServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // A client of the test's syncer for member `name` and a vector of n floats.
  std::unique_ptr<syncer::SyncerClient> Connect(const std::string& name, int64_t n) {
    syncer::SyncerClientOptions co;
    co.addresses = {server_->address()};
    co.member = name;
    auto client = syncer::SyncerClient::Connect(co, n);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Member `name` running `config`'s strategy, started on replica `init`
  // (behind `gate`, and at the warm-up factor `*lr_factor`, if given).
  Member Make(const std::string& name, const SyncConfig& config, std::vector<float> init,
              model::OptimizerConfig optimizer = {model::OptimizerKind::kSgd, 1.0f},
              int threads = 1, ReplicaGate* gate = nullptr,
              const std::atomic<float>* lr_factor = nullptr) {
    Member m;
    m.params = std::move(init);
    m.state.assign(m.params.size(), 0.0f);
    m.client = Connect(name, static_cast<int64_t>(m.params.size()));
    auto strategy = MakeSyncStrategy(config, m.client.get(), nullptr);
    EXPECT_TRUE(strategy.ok()) << strategy.status();
    m.strategy = std::move(*strategy);
    const absl::Status started =
        m.strategy->Start(DenseReplica{m.params, m.state, optimizer, threads, gate, lr_factor});
    EXPECT_TRUE(started.ok()) << started;
    return m;
  }

  // Members "a" and "b" started together: with a warm-up, Start waits for
  // every trainer.
  std::pair<Member, Member> MakeTwo(const SyncConfig& config, std::vector<float> a_init,
                                    std::vector<float> b_init) {
    std::pair<Member, Member> m;
    std::thread a([&] { m.first = Make("a", config, a_init); });
    m.second = Make("b", config, b_init);
    a.join();
    return m;
  }

  std::unique_ptr<syncer::SyncerServer> server_;
};

}  // namespace shadowsync::worker::strategy_test

#endif  // SHADOWSYNC_TESTS_WORKER_STRATEGY_TEST_UTIL_H_
