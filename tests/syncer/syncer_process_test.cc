// `shadowsync syncer` as a process: it reports its ports in --ready-file,
// serves a client, exports its metrics over HTTP, and exits 0 on SIGTERM
// after answering a waiting all-reduce call UNAVAILABLE.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "syncer/client/syncer_client.h"
#include "tests/util/http_get.h"
#include "tests/util/test_util.h"

namespace shadowsync::syncer {
namespace {

using ::shadowsync::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SyncerProcessTest, ServesReportsMetricsAndStopsOnSigterm) {
  testing::ScratchDir dir;
  const std::string ready = dir.File("syncer.ready");
  const std::string log = dir.File("syncer.log");
  std::vector<std::string> args = {testing::BinDir() + "/shadowsync",
                                   "syncer",
                                   "--listen=127.0.0.1:0",
                                   "--metrics-listen=127.0.0.1:0",
                                   "--member-timeout-seconds=30",
                                   "--shutdown-grace-seconds=1",
                                   "--ready-file=" + ready};
  absl::StatusOr<pid_t> started =
      Spawn(args, {.stdout_path = log, .stderr_path = log, .truncate_output = true});
  SS_ASSERT_OK(started);
  const pid_t pid = *started;

  int grpc_port = 0, metrics_port = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline && grpc_port == 0) {
    ASSERT_EQ(waitpid(pid, nullptr, WNOHANG), 0) << testing::ReadFile(log);
    if (std::filesystem::exists(ready)) {
      std::istringstream(testing::ReadFile(ready)) >> grpc_port >> metrics_port;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // Polling a child process.
    }
  }
  ASSERT_GT(grpc_port, 0) << testing::ReadFile(log);
  ASSERT_GT(metrics_port, 0);

  constexpr int64_t kN = 100;
  auto a = SyncerClient::Connect(
      {.addresses = {"127.0.0.1:" + std::to_string(grpc_port)}, .member = "a"}, kN);
  auto b = SyncerClient::Connect(
      {.addresses = {"127.0.0.1:" + std::to_string(grpc_port)}, .member = "b"}, kN);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> v(kN, 2.0f), out(kN);
  SS_ASSERT_OK((*a)->InitCentre(v, out));
  SS_ASSERT_OK((*a)->AddToCentre(v));
  auto r = (*a)->AllReduceMean("", v, out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->members, 1);

  std::string body;
  ASSERT_EQ(testing::HttpGet(metrics_port, "/healthz", &body), 200);
  ASSERT_EQ(testing::HttpGet(metrics_port, "/metrics", &body), 200);
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_rounds_total{group=\"\"} 1"));
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_centre_adds_total 1"));
  EXPECT_THAT(body, HasSubstr("shadowsync_syncer_members{group=\"\"} 1"));

  // b joins and waits for a; SIGTERM answers it instead.
  absl::StatusOr<RoundResult> waiting;
  std::thread t([&] { waiting = (*b)->AllReduceMean("", v, out); });
  while (std::chrono::steady_clock::now() < deadline &&
         testing::HttpGet(metrics_port, "/metrics", &body) == 200 &&
         body.find("shadowsync_syncer_members{group=\"\"} 2") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // Polling a child process.
  }
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  t.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_THAT(waiting, StatusIs(absl::StatusCode::kUnavailable, ""));
  const std::string logged = testing::ReadFile(log);
  EXPECT_THAT(logged, HasSubstr("syncer listening grpc=127.0.0.1:"));
  EXPECT_THAT(logged, HasSubstr("syncer received SIGTERM"));
  EXPECT_THAT(logged, HasSubstr("syncer stopped"));
}

}  // namespace
}  // namespace shadowsync::syncer
