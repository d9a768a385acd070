// `shadowsync run job.yaml` end to end: the real binary launching real ps,
// syncer and worker processes on loopback.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "common/grpc_security.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ps/client/resharder.h"
#include "tests/util/job_yaml.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::RunShell;
using ::shadowsync::testing::StartLauncher;

// The job's spec after its model and data (testing::TinyJobYaml).
constexpr char kCluster[] =
    R"(  trainer: {replicas: 2, threads: 1, batchSize: 64, learningRate: 0.02}
  parameterServer: {replicas: 2, cacheBytes: 16Mi}
  syncer: {replicas: 1}
  sync: {algorithm: shadow-easgd, dutyCycle: 1}
  checkpoint: {intervalSeconds: 1}
  runPolicy: {backoffLimit: 2}
)";

class RunTest : public ::testing::Test {
 protected:
  std::string Bin() { return testing::BinDir() + "/shadowsync"; }
  static std::string WriteJobText(int examples) {
    return testing::TinyJobYaml("tiny", examples, 2000, kCluster);
  }
  // Test certificates and a token (tests/util/gen_test_certs.sh) in
  // <dir>/certs; returns the token's value.
  std::string MakeCerts() {
    const std::string certs = dir_.File("certs");
    const std::string cmd =
        "bash " + testing::SourceDir() + "/tests/util/gen_test_certs.sh " + certs;
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    const std::string token = testing::ReadFile(certs + "/token");
    return token.substr(0, token.find('\n'));
  }
  std::string WriteJob(int examples, int backoff_limit = 2) {
    std::string text = WriteJobText(examples);
    text.replace(text.find("backoffLimit: 2"), 15,
                 "backoffLimit: " + std::to_string(backoff_limit));
    const std::string path = dir_.File("job.yaml");
    testing::WriteFile(path, text);
    return path;
  }
  testing::ScratchDir dir_;
};

TEST_F(RunTest, RunsTheWholeJobAndWritesTheReport) {
  const std::string job = WriteJob(12000);
  std::string out;
  ASSERT_EQ(
      RunShell(Bin() + " run " + job + " --out " + dir_.File("run") + " --progress-interval 0.2",
               &out),
      0)
      << out;
  EXPECT_NE(out.find("/metrics"), std::string::npos) << out;  // endpoints listed at start
  EXPECT_NE(out.find("eval NE"), std::string::npos) << out;
  const auto r = nlohmann::json::parse(testing::ReadFile(dir_.File("run/report.json")));
  EXPECT_EQ(r["examples"], 12000);  // each example trained by exactly one trainer
  EXPECT_EQ(r["per_trainer"].size(), 2u);
  EXPECT_LT(r["eval_ne"].get<double>(), 1.0);
  EXPECT_GT(r["sync"]["rounds"].get<int64_t>(), 0);
  EXPECT_EQ(r["restarts"], 0);
  for (const char* child : {"ps-0", "ps-1", "syncer-0", "trainer-0", "trainer-1"}) {
    EXPECT_GT(r["peak_rss_bytes"][child].get<int64_t>(), 0) << child;
  }
  // The chart: throughput and NE over seconds, with the eval NE and the
  // synthetic data's teacher NE (the floor) drawn in.
  const std::string svg = testing::ReadFile(dir_.File("run/report.svg"));
  ASSERT_TRUE(r.contains("teacher")) << r.dump();
  for (const char* text : {"examples/s", "train NE (running)", ">seconds<", "eval NE", "teacher"}) {
    EXPECT_NE(svg.find(text), std::string::npos) << text << " not in the chart:\n" << svg;
  }
  EXPECT_NE(svg.find("stroke-dasharray=\"6 4\""), std::string::npos) << svg;  // a level line

  // Running again into the same directory starts fresh (the servers' old
  // state would carry the old run's ports) and reuses the generated data.
  out.clear();
  ASSERT_EQ(
      RunShell(Bin() + " run " + job + " --out " + dir_.File("run") + " --progress-interval 0.2",
               &out),
      0)
      << out;
  EXPECT_NE(out.find("starting fresh"), std::string::npos) << out;
  EXPECT_EQ(out.find("generating"), std::string::npos) << out;
  EXPECT_EQ(nlohmann::json::parse(testing::ReadFile(dir_.File("run/report.json")))["examples"],
            12000);
}

// sync-switch through the launcher: every trainer switches from BSP to ASP
// at the same round, the progress line shows the mode, and the report each
// trainer's switches.
// Random labels (nothing to learn): every trainer's learning check finds it.
// By default the job finishes with the problems in its report and output;
// with --fail-on-divergence (spec.trainer.learningCheck.fail) the first
// trainer to find it stops, is not restarted, and the job fails.
TEST_F(RunTest, TrainersThatAreNotLearningWarnOrFailTheJob) {
  std::string out;
  ASSERT_EQ(RunShell(Bin() + " gen-data --out " + dir_.File("real.tsv") +
                         " --examples 30000 --seed 3 >/dev/null && awk 'BEGIN { srand(1); "
                         "FS = OFS = \"\\t\" } { $1 = rand() < 0.25 ? 1 : 0; print }' " +
                         dir_.File("real.tsv") + " > " + dir_.File("random.tsv"),
                     &out),
            0)
      << out;
  std::string text = testing::TinyJobYaml("nl", 30000, 0, kCluster);
  auto replace = [&text](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("format: synthetic,", "format: criteo-tsv, paths: [" + dir_.File("random.tsv") + "],");
  replace("learningRate: 0.02}", "learningRate: 0.02, learningCheck: {afterExamples: 10000}}");
  const std::string job = dir_.File("job.yaml");
  testing::WriteFile(job, text);

  ASSERT_EQ(RunShell(Bin() + " run " + job + " --out " + dir_.File("warn"), &out), 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("WARNING: trainer-0: the model is not learning"));
  const auto report = nlohmann::json::parse(testing::ReadFile(dir_.File("warn/report.json")));
  ASSERT_EQ(report["learning_problems"].size(), 2u) << report.dump(2);
  EXPECT_THAT(report["learning_problems"][1]["problem"].get<std::string>(),
              ::testing::HasSubstr("train NE"));

  out.clear();
  EXPECT_EQ(
      RunShell(Bin() + " run " + job + " --out " + dir_.File("fail") + " --fail-on-divergence",
               &out),
      1)
      << out;
  EXPECT_THAT(out, ::testing::ContainsRegex("trainer-[01] stopped: its run is not learning"));
  EXPECT_THAT(out, ::testing::Not(::testing::HasSubstr("restarting")));
}

TEST_F(RunTest, SyncSwitchShowsItsModeAndSwitchesInTheReport) {
  std::string text = WriteJobText(40000);
  text.replace(text.find("algorithm: shadow-easgd, dutyCycle: 1"), 37,
               "algorithm: sync-switch, syncSwitch: {switchFraction: 0.5}");
  testing::WriteFile(dir_.File("switch.yaml"), text);
  std::string out;
  ASSERT_EQ(RunShell(Bin() + " run " + dir_.File("switch.yaml") + " --out " + dir_.File("run") +
                         " --progress-interval 0.1",
                     &out),
            0)
      << out;
  EXPECT_NE(out.find("sync asp"), std::string::npos) << out;
  const auto r = nlohmann::json::parse(testing::ReadFile(dir_.File("run/report.json")));
  ASSERT_EQ(r["per_trainer"].size(), 2u);
  // 40000 examples / (2 trainers x 1 thread x 64) = 313 BSP steps; half of them.
  for (const auto& t : r["per_trainer"]) {
    EXPECT_EQ(t["sync_details"]["mode"], "asp") << t;
    EXPECT_EQ(t["sync_details"]["bsp_to_asp"], 1) << t;
    EXPECT_EQ(t["sync_details"]["bsp_rounds"], 157) << t;
  }
  EXPECT_EQ(r["examples"], 40000);
}

// Every class of invalid spec fails before anything starts (no run
// directory), with exit code 2, the file:line and the field path.
TEST_F(RunTest, EveryInvalidSpecClassFailsBeforeAnythingStarts) {
  constexpr char kHead[] =
      "apiVersion: shadowsync.io/v1alpha1\nkind: ShadowSyncJob\nmetadata: {name: bad}\nspec:\n";
  struct Case {
    const char* what;
    std::string text;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"range", std::string(kHead) + "  trainer: {replicas: 0}\n",
       "bad.yaml:5: spec.trainer.replicas: must be >= 1, got 0"},
      {"unknown field", std::string(kHead) + "  trainer: {replica: 2}\n",
       "bad.yaml:5: spec.trainer.replica: unknown field (did you mean \"replicas\"?)"},
      {"type", std::string(kHead) + "  trainer: {replicas: two}\n",
       "bad.yaml:5: spec.trainer.replicas: expected an integer, got \"two\""},
      {"enum", std::string(kHead) + "  sync: {algorithm: gossip}\n",
       "bad.yaml:5: spec.sync.algorithm: unknown value \"gossip\"; expected one of"},
      {"quantity", std::string(kHead) + "  parameterServer: {cacheBytes: 16Zi}\n",
       "bad.yaml:5: spec.parameterServer.cacheBytes: expected a Kubernetes quantity"},
      {"list element", std::string(kHead) + "  model: {bottomMlp: [32, -4]}\n",
       "bad.yaml:5: spec.model.bottomMlp[1]: must be >= 1, got -4"},
      {"cross-field",
       std::string(kHead) + "  sync: {algorithm: shadow-easgd}\n  syncer: {replicas: 0}\n",
       "bad.yaml:6: spec.syncer.replicas: must be >= 1 for algorithm shadow-easgd"},
      {"yaml syntax", std::string(kHead) + "  trainer: [1, 2\n", "bad.yaml:6:1: YAML syntax error"},
      {"kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
       "bad.yaml:1: apiVersion: expected \"shadowsync.io/v1alpha1\", got \"v1\""},
  };
  for (const Case& c : cases) {
    testing::WriteFile(dir_.File("bad.yaml"), c.text);
    std::string out;
    EXPECT_EQ(
        RunShell(Bin() + " run " + dir_.File("bad.yaml") + " --out " + dir_.File("run"), &out), 2)
        << c.what << ": " << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.what << ": " << out;
    EXPECT_FALSE(std::filesystem::exists(dir_.File("run"))) << c.what;
  }
  std::string out;  // Not an invalid spec but no spec at all: an I/O error.
  EXPECT_EQ(RunShell(Bin() + " run " + dir_.File("missing.yaml"), &out), 1) << out;
  EXPECT_NE(out.find("cannot read job file " + dir_.File("missing.yaml")), std::string::npos)
      << out;
}

// Pids of live processes whose command line contains `text` (not this one's).
std::vector<pid_t> ProcessesMentioning(const std::string& text) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (pid == getpid()) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    std::ifstream stat(entry.path() / "stat");
    std::string stat_text;
    std::getline(stat, stat_text);
    const bool zombie = stat_text.find(") Z ") != std::string::npos;
    if (!zombie && cmdline.find(text) != std::string::npos) pids.push_back(pid);
  }
  return pids;
}

// Ctrl-C (SIGINT to the launcher) stops every child and exits 130.
TEST_F(RunTest, InterruptStopsEveryChild) {
  const std::string run = dir_.File("run");
  const pid_t launcher = StartLauncher(Bin(), WriteJob(400000), run);
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  ASSERT_EQ(kill(launcher, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130) << testing::ReadFile(run + ".log");
  EXPECT_TRUE(ProcessesMentioning(run + "/").empty()) << "children left behind";
}

// Children die with the launcher, even with a SIGKILLed one, instead of
// living on as orphans.
TEST_F(RunTest, ChildrenDieWithAKilledLauncher) {
  const std::string run = dir_.File("run");
  const pid_t launcher = StartLauncher(Bin(), WriteJob(400000), run);
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  std::vector<pid_t> left = ProcessesMentioning(run + "/");
  for (int i = 0; i < 200 && !left.empty(); ++i) {  // they shut down on SIGTERM
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = ProcessesMentioning(run + "/");
  }
  EXPECT_TRUE(left.empty()) << left.size() << " children left behind";
}

// A parameter server killed with SIGKILL mid-run is restarted on the same
// directory and port; the job completes.
TEST_F(RunTest, RestartsAKilledParameterServerAndCompletes) {
  const std::string run = dir_.File("run");
  // Restarts: the server's, and one for each trainer that had a push in
  // flight at the kill (see below), so up to 3. With 2 the job failed when
  // both trainers had one.
  const pid_t launcher = StartLauncher(Bin(), WriteJob(60000, /*backoff_limit=*/3), run);
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  const std::vector<pid_t> ps1 = ProcessesMentioning("--db " + run + "/ps-1");
  ASSERT_EQ(ps1.size(), 1u);
  ASSERT_EQ(kill(ps1[0], SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadFile(run + ".log");
  const auto r = nlohmann::json::parse(testing::ReadFile(run + "/report.json"));
  // A trainer whose push was in flight at the kill cannot know whether it
  // was applied (pushes are never resent), so it may fail and be restarted
  // too; it then resumes its share.
  EXPECT_GE(r["restarts"], 1);
  EXPECT_EQ(r["examples"], 60000);
  const std::string log = testing::ReadFile(run + ".log");
  const size_t restart = log.find("ps-1 killed by signal 9; restarting");
  ASSERT_NE(restart, std::string::npos) << log;
  // With the server's last words, which a test's run directory does not keep.
  const std::string line = log.substr(restart, log.find('\n', restart) - restart);
  EXPECT_NE(line.find("; last log line: "), std::string::npos) << line;
}

// The syncer killed mid-run comes back at the same address; the trainers'
// shadow threads rejoin it and the job completes.
TEST_F(RunTest, RestartsAKilledSyncerAndCompletes) {
  const std::string run = dir_.File("run");
  const pid_t launcher = StartLauncher(Bin(), WriteJob(60000), run);
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  const std::vector<pid_t> syncer = ProcessesMentioning("--ready-file " + run + "/syncer-0.ready");
  ASSERT_EQ(syncer.size(), 1u);
  ASSERT_EQ(kill(syncer[0], SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadFile(run + ".log");
  const auto r = nlohmann::json::parse(testing::ReadFile(run + "/report.json"));
  EXPECT_EQ(r["restarts"], 1) << testing::ReadFile(run + ".log");
  EXPECT_EQ(r["examples"], 60000);  // no trainer had to start over
  EXPECT_LT(r["eval_ne"].get<double>(), 1.0);
}

// Runs `job` (100,000 examples), kills trainer 1 with SIGKILL once it has
// reported progress, and checks that the launcher restarted it once and the
// job completed with every example trained (some of the last second's
// possibly twice). Returns the run directory.
std::string RunKillingTrainerOne(const std::string& bin, const std::string& job,
                                 const std::string& run) {
  const pid_t launcher = StartLauncher(bin, job, run);
  EXPECT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  // Trainer 1 has trained (its first progress report) before it is killed;
  // a loaded machine may take many seconds to get there.
  for (int i = 0; i < 3000 && !std::filesystem::exists(run + "/trainer-1.progress.json"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(std::filesystem::exists(run + "/trainer-1.progress.json"))
      << "trainer 1 reported no progress in 60 s";
  const std::vector<pid_t> trainer = ProcessesMentioning(" worker --config " + run);
  EXPECT_EQ(trainer.size(), 2u);
  if (trainer.size() == 2) {
    EXPECT_EQ(kill(trainer[1], SIGKILL), 0);
  }
  int status = 0;
  EXPECT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadFile(run + ".log");
  const auto r = nlohmann::json::parse(testing::ReadFile(run + "/report.json"));
  EXPECT_EQ(r["restarts"], 1);
  EXPECT_EQ(r["examples"], 100000);
  EXPECT_LT(r["eval_ne"].get<double>(), 1.0);
  return run;
}

// A killed trainer is restarted and resumes after the part of its share it
// had reported.
TEST_F(RunTest, RestartsAKilledTrainerWhichResumesItsShare) {
  RunKillingTrainerOne(Bin(), WriteJob(100000), dir_.File("run"));
}

// The same under sync-switch held in BSP: the job completes, and the
// restarted trainer took the restart path (it finishes its share under ASP,
// outside the lockstep; SyncSwitchTest checks the arithmetic and that the
// other trainer's rounds do not wait for it).
TEST_F(RunTest, RestartsAKilledSyncSwitchTrainerOutsideTheLockstep) {
  std::string text = WriteJobText(100000);
  const std::string easgd = "algorithm: shadow-easgd";
  text.replace(text.find(easgd), easgd.size(),
               "algorithm: sync-switch, syncSwitch: {policy: offline, switchFraction: 1}");
  const std::string job = dir_.File("job.yaml");
  testing::WriteFile(job, text);
  const std::string run = RunKillingTrainerOne(Bin(), job, dir_.File("run"));
  EXPECT_NE(testing::ReadFile(run + "/trainer-1.log").find("restarted into a running job"),
            std::string::npos);
}

// The trainers' log lines other than progress: what went wrong, on failure.
std::string TrainerEvents(const std::string& run) {
  std::string out;
  for (const char* name : {"/trainer-0.log", "/trainer-1.log"}) {
    std::ifstream in(run + name);
    for (std::string line; std::getline(in, line);) {
      if (line.find(" examples  ") == std::string::npos) out += name + (": " + line) + "\n";
    }
  }
  return out;
}

// `shadowsync scale` reshards 2 -> 3 -> 2 parameter servers while training
// runs, then again with training paused. Every move's rows arrive intact
// (key and value checksums of the moved rows equal before and after), the
// paused reshards keep every row of the cluster, no trainer fails, and the
// job completes on 2 servers.
TEST_F(RunTest, ReshardsLiveAndPausedWhileTheJobRuns) {
  const std::string run = dir_.File("run");
  const pid_t launcher = StartLauncher(Bin(), WriteJob(600000), run);
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  // A hand-written request that is not one is refused with a result, and
  // garbage is logged and dropped: the job and later requests carry on.
  // Written atomically, as `shadowsync scale` does: never read half-written.
  auto request = [&](const std::string& text) {
    SS_ASSERT_OK(WriteFileAtomically(run + "/control/scale.json", text));
  };
  request(R"({"id": "by-hand", "ps": "three"})");
  for (int i = 0; i < 500 && !std::filesystem::exists(run + "/control/scale-by-hand.result.json");
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto refused =
      nlohmann::json::parse(testing::ReadFile(run + "/control/scale-by-hand.result.json"));
  EXPECT_EQ(refused["ok"], false);
  EXPECT_NE(refused["error"].get<std::string>().find("malformed scale request"), std::string::npos)
      << refused;
  request("{not json");
  for (int i = 0; i < 500 && std::filesystem::exists(run + "/control/scale.json"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(std::filesystem::exists(run + "/control/scale.json"));
  struct Step {
    int ps;
    bool pause;
  };
  for (const Step& step : {Step{3, false}, Step{2, false}, Step{3, true}, Step{2, true}}) {
    std::string out;
    const std::string cmd = Bin() + " scale " + run + " --ps " + std::to_string(step.ps) +
                            (step.pause ? " --pause" : "");
    ASSERT_EQ(RunShell(cmd, &out), 0) << cmd << "\n" << out << testing::ReadFile(run + ".log");
    EXPECT_NE(out.find(step.pause ? "(training paused: equal)" : "(training ran meanwhile)"),
              std::string::npos)
        << out;
  }
  EXPECT_FALSE(std::filesystem::exists(run + "/ps-2"));  // drained, stopped, removed
  int status = 0;
  EXPECT_NE(testing::ReadFile(run + ".log").find("ignored a malformed scale request"),
            std::string::npos);
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadFile(run + ".log");
  const auto r = nlohmann::json::parse(testing::ReadFile(run + "/report.json"));
  EXPECT_EQ(r["restarts"], 0) << testing::ReadFile(run + ".log") << TrainerEvents(run);
  EXPECT_EQ(r["examples"], 600000);
  EXPECT_EQ(r["parameter_servers"], 2);
  EXPECT_LT(r["eval_ne"].get<double>(), 1.0);
  EXPECT_GT(r["peak_rss_bytes"]["ps-2"].get<int64_t>(), 0);
  ASSERT_EQ(r["reshards"].size(), 4u);
  for (const auto& reshard : r["reshards"]) {
    EXPECT_GT(reshard["slots_moved"].get<int64_t>(), 1000) << reshard;
    EXPECT_GT(reshard["moved_before"]["rows"].get<int64_t>(), 0) << reshard;
    EXPECT_EQ(reshard["moved_before"], reshard["moved_after"]) << reshard;
    if (reshard["paused"].get<bool>()) {
      EXPECT_EQ(reshard["cluster_before"], reshard["cluster_after"]) << reshard;
    }
  }
}

TEST_F(RunTest, ScaleWithoutARunningJobFailsClearly) {
  std::string out;
  EXPECT_EQ(RunShell(Bin() + " scale " + dir_.File("nothing") + " --ps 3", &out), 1);
  EXPECT_NE(out.find("no `shadowsync run` is running in"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunShell(Bin() + " scale " + dir_.File("nothing") + " --ps 0", &out), 2);
  EXPECT_NE(out.find("--ps: must be >= 1, got 0"), std::string::npos) << out;
}

// A launcher killed with SIGKILL takes its children with it; `run --resume`
// brings the job back: the servers reopen their RocksDB directories on new
// ports, the trainers continue from their dense checkpoints, and every
// example of the data is counted once.
TEST_F(RunTest, ResumesAfterTheLauncherWasKilled) {
  const std::string run = dir_.File("run");
  const std::string job = WriteJob(200000);
  const pid_t launcher = StartLauncher(Bin(), job, run);
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  for (int i = 0; i < 500 && !(std::filesystem::exists(run + "/trainer-0.ckpt") &&
                               std::filesystem::exists(run + "/trainer-1.ckpt"));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ckpt"));
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  for (int i = 0; i < 200 && !ProcessesMentioning(run + "/").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(ProcessesMentioning(run + "/").empty());
  ASSERT_FALSE(std::filesystem::exists(run + "/report.json"));

  std::string out;
  ASSERT_EQ(RunShell(Bin() + " run " + job + " --out " + run + " --resume", &out), 0) << out;
  EXPECT_NE(out.find("resuming the job in"), std::string::npos) << out;
  const auto r = nlohmann::json::parse(testing::ReadFile(run + "/report.json"));
  EXPECT_TRUE(r["resumed"].get<bool>());
  EXPECT_EQ(r["examples"], 200000);
  int64_t resumed = 0;
  for (const auto& t : r["per_trainer"]) resumed += t["resumed_from_examples"].get<int64_t>();
  EXPECT_GT(resumed, 0);
  EXPECT_LT(r["eval_ne"].get<double>(), 1.0);

  // A finished job, and a directory without one, have nothing to resume.
  out.clear();
  EXPECT_EQ(RunShell(Bin() + " run " + job + " --out " + run + " --resume", &out), 2);
  EXPECT_NE(out.find("finished"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunShell(Bin() + " run " + job + " --out " + dir_.File("empty") + " --resume", &out),
            2);
  EXPECT_NE(out.find("nothing to resume"), std::string::npos) << out;
}

// Issue 30, finding 4: a launcher killed during `shadowsync scale` left
// servers on different shard maps, and `run --resume` refused them. Now
// launch.json records the reshard under way, and a resume repairs the maps,
// finishes the reshard before any trainer starts, and trains to the end.
// The launcher dies at its kill point between the two servers that adopt
// the first step of a 3 -> 2 scale-in, so the repair completes that step.
TEST_F(RunTest, ResumesAfterTheLauncherWasKilledMidReshard) {
  const std::string run = dir_.File("run");
  std::string text = WriteJobText(300000);
  const std::string two = "parameterServer: {replicas: 2";
  text.replace(text.find(two), two.size(), "parameterServer: {replicas: 3");
  const std::string job = dir_.File("job.yaml");
  testing::WriteFile(job, text);
  ASSERT_EQ(setenv("SHADOWSYNC_KILL_POINT", "adopt#2", 1), 0);
  const pid_t launcher = StartLauncher(Bin(), job, run);
  ASSERT_EQ(unsetenv("SHADOWSYNC_KILL_POINT"), 0);
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  SS_ASSERT_OK(WriteFileAtomically(run + "/control/scale.json", R"({"id": "in", "ps": 2})"));
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << testing::ReadFile(run + ".log");
  for (int i = 0; i < 200 && !ProcessesMentioning(run + "/").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(ProcessesMentioning(run + "/").empty());
  const auto state = nlohmann::json::parse(testing::ReadFile(run + "/launch.json"));
  EXPECT_EQ(state["parameter_servers"], 3);
  EXPECT_EQ(state["resharding_to"], 2);

  std::string out;
  ASSERT_EQ(RunShell(Bin() + " run " + job + " --out " + run + " --resume", &out), 0) << out;
  EXPECT_NE(out.find("a reshard to 2 was under way"), std::string::npos) << out;
  EXPECT_NE(out.find("its step completed"), std::string::npos) << out;
  EXPECT_NE(out.find("finishing the interrupted reshard: 3 -> 2"), std::string::npos) << out;
  const auto r = nlohmann::json::parse(testing::ReadFile(run + "/report.json"));
  EXPECT_TRUE(r["resumed"].get<bool>());
  EXPECT_EQ(r["examples"], 300000);
  EXPECT_EQ(r["parameter_servers"], 2);
  ASSERT_EQ(r["reshards"].size(), 1u);
  const auto& reshard = r["reshards"][0];
  EXPECT_TRUE(reshard["resumed"].get<bool>());
  EXPECT_GT(reshard["slots_moved"].get<int64_t>(), 0) << reshard;
  EXPECT_EQ(reshard["moved_before"], reshard["moved_after"]) << reshard;
  EXPECT_EQ(reshard["cluster_before"], reshard["cluster_after"]) << reshard;
  EXPECT_FALSE(std::filesystem::exists(run + "/ps-2"));
  EXPECT_LT(r["eval_ne"].get<double>(), 1.0);
}

// The parameter servers' row count and checksums, through their Stats RPC.
ps::RowSetChecksum Checksum(const std::string& run) {
  const auto state = nlohmann::json::parse(testing::ReadFile(run + "/launch.json"));
  auto sum = ps::ClusterChecksum(state["ps_addresses"].get<std::vector<std::string>>());
  EXPECT_TRUE(sum.ok()) << sum.status();
  return sum.value_or(ps::RowSetChecksum{});
}

// Every role killed with SIGKILL in one run. With the trainers stopped, a
// parameter server's SIGKILL and restart keeps every row bit for bit (no row
// was touched after the kill); then the syncer and a trainer die too. The
// job completes with every example counted and an eval NE within 1% of an
// undisturbed run of the same job.
TEST_F(RunTest, KillsOfEveryRoleKeepTheRowsAndTheQuality) {
  const std::string job = WriteJob(150000, /*backoff_limit=*/8);
  std::string out;
  ASSERT_EQ(RunShell(Bin() + " run " + job + " --out " + dir_.File("calm"), &out), 0) << out;
  const double calm_ne =
      nlohmann::json::parse(testing::ReadFile(dir_.File("calm/report.json")))["eval_ne"];

  const std::string run = dir_.File("run");
  const pid_t launcher = StartLauncher(Bin(), job, run);
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.ready")) << testing::ReadFile(run + ".log");
  // Trainer 1 has trained (its first progress report) before it is killed;
  // a loaded machine may take many seconds to get there.
  for (int i = 0; i < 3000 && !std::filesystem::exists(run + "/trainer-1.progress.json"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(run + "/trainer-1.progress.json"))
      << "trainer 1 reported no progress in 60 s";
  const std::vector<pid_t> trainers = ProcessesMentioning(" worker --config " + run);
  ASSERT_EQ(trainers.size(), 2u);
  for (pid_t t : trainers) ASSERT_EQ(kill(t, SIGSTOP), 0);
  // Pushes already sent still land: wait until the rows stop changing.
  ps::RowSetChecksum before = Checksum(run);
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const ps::RowSetChecksum now = Checksum(run);
    if (now == before) break;
    before = now;
  }
  ASSERT_GT(before.rows, 0);
  const std::vector<pid_t> ps1 = ProcessesMentioning("--db " + run + "/ps-1");
  ASSERT_EQ(ps1.size(), 1u);
  ASSERT_EQ(kill(ps1[0], SIGKILL), 0);
  std::vector<pid_t> restarted;
  for (int i = 0; i < 600; ++i) {
    restarted = ProcessesMentioning("--db " + run + "/ps-1");
    if (restarted.size() == 1 && restarted[0] != ps1[0] &&
        std::filesystem::exists(run + "/ps-1.ready")) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(restarted.size() == 1 && restarted[0] != ps1[0]) << testing::ReadFile(run + ".log");
  EXPECT_EQ(Checksum(run), before) << "rows changed across the parameter server's SIGKILL";
  for (pid_t t : trainers) ASSERT_EQ(kill(t, SIGCONT), 0);

  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::vector<pid_t> syncer = ProcessesMentioning("--ready-file " + run + "/syncer-0.ready");
  ASSERT_EQ(syncer.size(), 1u);
  ASSERT_EQ(kill(syncer[0], SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::vector<pid_t> trainer1 =
      ProcessesMentioning(" worker --config " + run + "/job.json --index 1 ");
  if (trainer1.size() == 1) kill(trainer1[0], SIGKILL);  // unless it already finished

  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadFile(run + ".log");
  const auto r = nlohmann::json::parse(testing::ReadFile(run + "/report.json"));
  EXPECT_GE(r["restarts"], 2) << testing::ReadFile(run + ".log");
  EXPECT_EQ(r["examples"], 150000);
  const double ne = r["eval_ne"];
  EXPECT_NEAR(ne, calm_ne, 0.01 * calm_ne) << "undisturbed " << calm_ne << ", killed " << ne;
}

// A job with spec.security: every link is mutual TLS with a bearer token;
// the token never shows in any process's output.
TEST_F(RunTest, SecuredJobTrainsOverMutualTlsWithATokenThatNeverShows) {
  const std::string certs = dir_.File("certs");
  const std::string token_value = MakeCerts();
  ASSERT_GE(token_value.size(), 32u);
  std::string text = WriteJobText(6000);
  text += "  security:\n    tls: {caFile: " + certs + "/ca.crt, certFile: " + certs +
          "/tls.crt, keyFile: " + certs + "/tls.key}\n    authToken: {file: " + certs + "/token}\n";
  const std::string job = dir_.File("secure.yaml");
  testing::WriteFile(job, text);
  std::string out;
  ASSERT_EQ(
      RunShell(Bin() + " run " + job + " --out " + dir_.File("run") + " --progress-interval 0.2",
               &out),
      0)
      << out;
  const auto r = nlohmann::json::parse(testing::ReadFile(dir_.File("run/report.json")));
  EXPECT_EQ(r["examples"], 6000);
  EXPECT_GT(r["sync"]["rounds"].get<int64_t>(), 0);  // The syncer was reached.
  EXPECT_EQ(r["restarts"], 0);

  // Every server said it serves mutual TLS with a token; nothing printed it.
  std::string all = out;
  int logs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.File("run"))) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.starts_with("data")) continue;
    const std::string content = testing::ReadFile(entry.path().string());
    if (name.ends_with(".log")) {
      ++logs;
      if (name.starts_with("ps-") || name.starts_with("syncer-")) {
        EXPECT_THAT(content, ::testing::HasSubstr("tls=mutual tls_server_name=shadowsync token=on"))
            << name;
      }
    }
    all += content;
  }
  EXPECT_EQ(logs, 5);  // ps-0, ps-1, syncer-0, trainer-0, trainer-1
  EXPECT_EQ(all.find(token_value), std::string::npos) << "the token leaked";
  EXPECT_EQ(all.find("PRIVATE KEY"), std::string::npos) << "a key leaked";

  // A server of this job refuses a client without the job's certificate:
  // plaintext and a certificate of another CA fail, the job's one passes.
  // (Servers are stopped now; start one ps with the job's flags.)
  const std::string ready = dir_.File("ps.ready");
  absl::StatusOr<pid_t> started =
      Spawn({Bin(), "ps", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--db",
             dir_.File("db"), "--ready-file", ready, "--tls-ca-file", certs + "/ca.crt",
             "--tls-cert-file", certs + "/tls.crt", "--tls-key-file", certs + "/tls.key",
             "--auth-token-file", certs + "/token"},
            {.stderr_path = dir_.File("ps.log"), .truncate_output = true});
  SS_ASSERT_OK(started);
  const pid_t ps = *started;
  int port = 0;
  for (int i = 0; i < 200 && port == 0; ++i) {
    std::ifstream in(ready);
    in >> port;
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(port, 0) << testing::ReadFile(dir_.File("ps.log"));
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto load = [&](const std::string& leaf, const std::string& token_file) {
    GrpcSecurityFiles files;
    files.tls_ca_file = certs + "/ca.crt";
    files.tls_cert_file = certs + "/" + leaf + ".crt";
    files.tls_key_file = certs + "/" + leaf + ".key";
    files.auth_token_file = certs + "/" + token_file;
    return *LoadGrpcSecurity(files);
  };
  EXPECT_TRUE(ps::FetchShardMap(address, absl::Seconds(5), load("tls", "token")).ok());
  EXPECT_EQ(ps::FetchShardMap(address, absl::Seconds(5), GrpcSecurity()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(ps::FetchShardMap(address, absl::Seconds(5), load("other", "token")).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      ps::FetchShardMap(address, absl::Seconds(5), load("tls", "wrong-token")).status().code(),
      absl::StatusCode::kUnauthenticated);
  kill(ps, SIGTERM);
  int status = 0;
  waitpid(ps, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(testing::ReadFile(dir_.File("ps.log")).find(token_value), std::string::npos);
}

TEST_F(RunTest, SecuredJobWithAMissingFileFailsNamingTheField) {
  std::string text = WriteJobText(1000);
  text += "  security:\n    authToken: {file: " + dir_.File("nope") + "}\n";
  const std::string job = dir_.File("bad.yaml");
  testing::WriteFile(job, text);
  std::string out;
  EXPECT_NE(RunShell(Bin() + " run " + job + " --out " + dir_.File("run"), &out), 0);
  EXPECT_NE(out.find("spec.security.authToken.file: cannot read " + dir_.File("nope")),
            std::string::npos)
      << out;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("run/ps-0.log"))) << "nothing should start";
}

// `shadowsync pod` (the operator's pods) hands its --tls-* and
// --auth-token-file paths to the process it runs; `shadowsync operator`
// refuses a bad path by name.
TEST_F(RunTest, PodPassesSecurityFlagsToItsServerAndOperatorChecksItsFiles) {
  const std::string certs = dir_.File("certs");
  const std::string token_value = MakeCerts();
  const std::string map = dir_.File("shard-map.json");
  testing::WriteFile(map, R"({"numServers": 1, "psAddresses": ["127.0.0.1:1"]})");
  const std::string flags = " --tls-ca-file=" + certs + "/ca.crt --tls-cert-file=" + certs +
                            "/tls.crt --tls-key-file=" + certs +
                            "/tls.key --auth-token-file=" + certs + "/token";
  std::string out;
  // Runs until `timeout` stops it (the pod forwards SIGTERM; the ps drains).
  RunShell("timeout -s TERM 4 " + Bin() + " pod --index 0 --role ps --config " +
               testing::SourceDir() + "/deploy/examples/quickstart.yaml --shard-map " + map +
               " --data-dir " + dir_.File("pod") +
               " --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0" + flags,
           &out);
  EXPECT_THAT(out, ::testing::HasSubstr("--tls-cert-file " + certs + "/tls.crt")) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("--auth-token-file " + certs + "/token")) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("tls=mutual tls_server_name=shadowsync token=on")) << out;
  EXPECT_EQ(out.find(token_value), std::string::npos) << "the token leaked";

  out.clear();
  EXPECT_EQ(RunShell(Bin() + " operator --metrics-listen '' --auth-token-file " +
                         dir_.File("missing-token") + " --kubeconfig " + dir_.File("none"),
                     &out),
            2);
  EXPECT_THAT(out,
              ::testing::HasSubstr("--auth-token-file: cannot read " + dir_.File("missing-token")))
      << out;
}

}  // namespace
}  // namespace shadowsync
