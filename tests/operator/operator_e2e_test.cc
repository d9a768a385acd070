// The operator end to end: `shadowsync operator` processes against the fake
// API server, with a fake kubelet running every pod as a real `shadowsync
// pod` process (real parameter servers, syncers and trainers on their own
// loopback IPs). Jobs run to completion, trainers and parameter servers
// scale live (2 -> 3 -> 2 with a key checksum), an operator killed in the
// middle of a reshard is replaced and the reshard completes, one stopped
// with SIGTERM ends its reshard before it releases the Lease, and two
// replicas contend for the Lease; delta exports of a running job reach a
// serve process watching the claim. The operators run as their ServiceAccount
// under deploy/rbac.yaml (operator_rbac.h): a call it does not grant fails
// the test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/eval_metrics.h"
#include "common/grpc_security.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/crd.h"
#include "ps/client/resharder.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "tests/operator/fake_kubelet.h"
#include "tests/operator/job_json.h"
#include "tests/operator/operator_rbac.h"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/http_get.h"
#include "tests/util/serve_requests.h"
#include "tests/util/test_util.h"
#include "tests/util/yaml_json.h"

namespace shadowsync {
namespace {

using nlohmann::json;

constexpr char kJobs[] = "/apis/shadowsync.io/v1alpha1/namespaces/default/shadowsyncjobs";
constexpr char kLease[] =
    "/apis/coordination.k8s.io/v1/namespaces/shadowsync-system/leases/shadowsync-operator";

bool WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// The security a default `helm install` gives the operator: the chart's
// Deployment args that carry it (--tls-*, --credentials-key-file) and the
// Secrets the chart generates, rendered by helm 3.17 and written under `dir`
// with the args pointing there.
std::vector<std::string> ChartSecurityArgs(const std::string& dir) {
  const std::string helm = testing::SourceDir() + "/.tools/bin/helm";
  std::string out;
  const std::string cmd = helm + " template e2e " + testing::SourceDir() + "/helm/shadowsync";
  if (testing::RunShell(cmd, &out) != 0) {
    ADD_FAILURE() << cmd << " (scripts/install-kube-tools.sh installs helm)\n" << out;
    return {};
  }
  const std::vector<json> docs = testing::YamlDocumentsToJson(YAML::LoadAll(out));
  std::map<std::string, std::string> mounts;  // Secret name -> local dir
  std::vector<std::string> args;
  for (const json& doc : docs) {
    if (doc.value("kind", "") == "Secret") {
      const std::string local = dir + "/" + doc["metadata"]["name"].get<std::string>();
      std::filesystem::create_directories(local);
      for (const auto& [key, value] : doc["data"].items()) {
        std::string content;
        EXPECT_TRUE(absl::Base64Unescape(value.get<std::string>(), &content)) << key;
        testing::WriteFile(local + "/" + key, content);
      }
      mounts[doc["metadata"]["name"]] = local;
    }
  }
  for (const json& doc : docs) {
    if (doc.value("kind", "") != "Deployment") continue;
    const json& pod = doc["spec"]["template"]["spec"];
    std::map<std::string, std::string> paths;  // mountPath -> local dir
    for (const json& m : pod["containers"][0]["volumeMounts"]) {
      for (const json& v : pod["volumes"]) {
        if (v["name"] == m["name"] && v.contains("secret")) {
          paths[m["mountPath"]] = mounts[v["secret"]["secretName"]];
        }
      }
    }
    for (std::string arg : pod["containers"][0]["args"]) {
      if (!arg.starts_with("--tls-") && !arg.starts_with("--credentials-key-file")) continue;
      for (const auto& [path, local] : paths) {
        arg = absl::StrReplaceAll(arg, {{"=" + path + "/", "=" + local + "/"}});
      }
      args.push_back(arg);
    }
  }
  EXPECT_EQ(args.size(), 5u) << "the chart's default security args: " << absl::StrJoin(args, " ");
  return args;
}

class OperatorE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto api = testing::FakeKubeApiServer::Start();
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
    ASSERT_TRUE(api_->Create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                             op::ShadowSyncJobCrd())
                    .ok());
    ASSERT_TRUE(testing::LoadOperatorRbac(*api_).ok());
    ASSERT_TRUE(
        api_->WriteKubeconfig(dir_.File("kubeconfig"), "default", testing::kOperatorUser).ok());
    // Security on, as the chart installs it by default.
    security_args_ = ChartSecurityArgs(dir_.File("chart-secrets"));
    ASSERT_FALSE(security_args_.empty());
    // Every pod its own loopback IP, unique to this test process, and the
    // same ports on all of them, as in a cluster.
    octet_ = 1 + getpid() % 250;
    port_ = 20000 + 3 * (getpid() % 10000);
    kubelet_ = std::make_unique<testing::FakeKubelet>(
        api_.get(), testing::FakeKubeletOptions{
                        .binary = Bin(),
                        .root_dir = dir_.File("nodes"),
                        .pod_ip = [this](int role, int index) { return PodIp(role, index); }});
  }

  void TearDown() override {
    for (pid_t pid : operators_) StopOperator(pid);
    EXPECT_THAT(testing::ForbiddenRequests(*api_), ::testing::IsEmpty())
        << "an operator made a call deploy/rbac.yaml does not allow";
    if (HasFailure()) {
      std::cerr << kubelet_->AllLogs();
      for (int i = 0; i < started_; ++i) {
        std::cerr << "==== operator " << i << " ====\n"
                  << testing::ReadFile(dir_.File(absl::StrCat("operator-", i, ".log")));
      }
    }
    kubelet_.reset();
  }

  static std::string Bin() { return testing::BinDir() + "/shadowsync"; }
  std::string PodIp(int role, int index) const {
    return absl::StrCat("127.1", role, ".", octet_, ".1", index);
  }
  std::string PsAddress(int i) const { return absl::StrCat(PodIp(1, i), ":", port_); }
  std::vector<std::string> PsAddresses(int n) const {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(PsAddress(i));
    return out;
  }

  // Starts `shadowsync operator`; its log goes to operator-<n>.log.
  pid_t StartOperator(bool leader_elect, const std::string& identity = "op",
                      int slots_per_step = 16) {
    const int n = started_++;
    const std::string log = dir_.File(absl::StrCat("operator-", n, ".log"));
    std::vector<std::string> args = {
        Bin(),
        "operator",
        "--kubeconfig",
        dir_.File("kubeconfig"),
        "--namespace",
        "default",
        "--metrics-listen",
        OperatorHttp(n),
        absl::StrCat("--leader-elect=", leader_elect ? "true" : "false"),
        "--identity",
        identity,
        "--lease-namespace",
        testing::kOperatorNamespace,
        "--lease-duration-seconds",
        "3",
        "--ps-port",
        std::to_string(port_),
        "--syncer-port",
        std::to_string(port_ + 1),
        "--pod-metrics-port",
        std::to_string(port_ + 2),
        "--address-template",
        absl::StrCat("127.1{role_index}.", octet_, ".1{index}:{port}"),
        "--reshard-slots-per-step",
        std::to_string(slots_per_step)};
    args.insert(args.end(), security_args_.begin(), security_args_.end());
    absl::StatusOr<pid_t> pid = Spawn(args, {.stderr_path = log, .truncate_output = true});
    // Never -1: the caller's kill(-1, sig) would signal every process.
    if (!pid.ok()) {
      std::cerr << "StartOperator: " << pid.status() << "\n";
      std::abort();
    }
    operators_.push_back(*pid);
    return *pid;
  }
  // /metrics, /healthz and /readyz of the n-th operator started.
  std::string OperatorHttp(int n) const {
    return absl::StrCat("127.9.", octet_, ".", 10 + n, ":", port_);
  }
  // The n-th operator's /metrics; "" if it does not answer.
  std::string OperatorMetrics(int n) const {
    const std::string http = OperatorHttp(n);
    std::string body;
    if (testing::HttpGet(http.substr(0, http.rfind(':')), port_, "/metrics", &body) != 200) {
      return "";
    }
    return body;
  }
  // The value of `series` (name and labels, as exposed); nullopt if absent.
  static std::optional<double> MetricValue(const std::string& text, const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return std::nullopt;
    return std::stod(text.substr(at + series.size() + 2));
  }
  // SIGTERM, then SIGKILL after 10 s; the exit code, or -1 if killed.
  int StopOperator(pid_t pid) {
    if (kill(pid, SIGTERM) != 0) return -1;
    int status = 0;
    for (int i = 0; i < 400; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
  }

  json Get(const std::string& path) {
    absl::StatusOr<json> o = api_->Get(path);
    return o.ok() ? *o : json::object();  // Absent: no fields.
  }
  json JobObject(const std::string& name) { return Get(absl::StrCat(kJobs, "/", name)); }
  std::string Phase(const std::string& name) {
    return JobObject(name).value("/status/phase"_json_pointer, std::string());
  }
  json Condition(const std::string& name, const std::string& type) {
    for (const json& c : JobObject(name).value("/status/conditions"_json_pointer, json::array())) {
      if (c["type"] == type) return c;
    }
    return json::object();
  }
  int StsReplicas(const std::string& name) {
    return Get("/apis/apps/v1/namespaces/default/statefulsets/" + name)
        .value("/spec/replicas"_json_pointer, -1);
  }
  void PatchSpec(const std::string& job, const json& spec) {
    ASSERT_TRUE(
        api_->Patch(absl::StrCat(kJobs, "/", job), {{"spec", spec}}, "application/merge-patch+json")
            .ok());
  }
  // What a client of job `job`'s servers holds, as its trainers do: the
  // chart's CA and certificate, and the job's own auth token from the
  // credentials Secret the operator made.
  GrpcSecurity ClientSecurity(const std::string& job = "big") {
    GrpcSecurityFiles files;
    for (const std::string& arg : security_args_) {
      const std::string value = arg.substr(arg.find('=') + 1);
      if (arg.starts_with("--tls-ca-file=")) files.tls_ca_file = value;
      if (arg.starts_with("--tls-cert-file=")) files.tls_cert_file = value;
      if (arg.starts_with("--tls-key-file=")) files.tls_key_file = value;
      if (arg.starts_with("--tls-server-name=")) files.tls_server_name = value;
    }
    absl::StatusOr<GrpcSecurity> security = LoadGrpcSecurity(files);
    EXPECT_TRUE(security.ok()) << security.status();
    if (!security.ok()) return {};
    const json secret = Get("/api/v1/namespaces/default/secrets/" + job + "-credentials");
    EXPECT_TRUE(
        absl::Base64Unescape(secret.value("/data/token"_json_pointer, ""), &security->auth_token))
        << secret.dump();
    return *security;
  }
  // The newest shard-map epoch of the first n servers (0 if none answers).
  uint64_t MaxEpoch(int n) {
    uint64_t epoch = 0;
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<ShardMap> map =
          ps::FetchShardMap(PsAddress(i), absl::Seconds(5), ClientSecurity());
      if (map.ok()) epoch = std::max(epoch, map->epoch());
    }
    return epoch;
  }
  // The slots server i owns in its own shard map; -1 if unreachable.
  int SlotsOwned(int i) {
    absl::StatusOr<ShardMap> map =
        ps::FetchShardMap(PsAddress(i), absl::Seconds(5), ClientSecurity());
    if (!map.ok()) return -1;
    return static_cast<int>(map->SlotsOwnedBy(i).size());
  }
  // Stops the trainers and waits until the rows stop changing.
  ps::RowSetChecksum PauseAndChecksum(const std::string& job, int servers) {
    kubelet_->Signal("default", job, "trainer", SIGSTOP);
    absl::StatusOr<ps::RowSetChecksum> before =
        ps::ClusterChecksum(PsAddresses(servers), absl::Seconds(120), ClientSecurity(job));
    for (int i = 0; i < 50 && before.ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      absl::StatusOr<ps::RowSetChecksum> now =
          ps::ClusterChecksum(PsAddresses(servers), absl::Seconds(120), ClientSecurity(job));
      if (now.ok() && *now == *before) break;
      before = now;
    }
    EXPECT_TRUE(before.ok()) << before.status();
    return before.ok() ? *before : ps::RowSetChecksum{};
  }

  // Runs job "big" (2 trainers, 2 servers) until every slot holds rows,
  // pauses its trainers, takes the rows' checksum into `before` and scales
  // the servers to 3; returns once the new one owns its first slots.
  void ScaleOutBigUntilMidway(ps::RowSetChecksum* before) {
    ASSERT_TRUE(api_->Create(kJobs, testing::JobJson("big", 5000000, 2, 2)).ok());
    ASSERT_TRUE(WaitFor([&] { return Phase("big") == "Running"; }, std::chrono::seconds(120)));
    ASSERT_TRUE(
        WaitFor([&] { return SlotsOwned(0) > 0 && SlotsOwned(1) > 0; }, std::chrono::seconds(60)));
    // Rows in every slot, so that each step has something to move.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    *before = PauseAndChecksum("big", 2);
    PatchSpec("big", {{"parameterServer", {{"replicas", 3}}}});
    ASSERT_TRUE(WaitFor([&] { return SlotsOwned(2) > 0; }, std::chrono::seconds(120)));
  }
  // The scale-out of ScaleOutBigUntilMidway completes, every row as `before`.
  void ExpectBigScaledOut(const ps::RowSetChecksum& before) {
    ASSERT_TRUE(WaitFor(
        [&] {
          return SlotsOwned(2) >= 341 &&
                 JobObject("big").value("/status/shardMap/numServers"_json_pointer, 0) == 3 &&
                 Condition("big", "Resharding").value("status", "") == "False";
        },
        std::chrono::seconds(180)))
        << JobObject("big")["status"].dump(2);
    absl::StatusOr<ps::RowSetChecksum> after =
        ps::ClusterChecksum(PsAddresses(3), absl::Seconds(120), ClientSecurity());
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(*after, before) << "rows changed across the reshard";
  }

  testing::ScratchDir dir_;
  std::unique_ptr<testing::FakeKubeApiServer> api_;
  std::unique_ptr<testing::FakeKubelet> kubelet_;
  std::vector<pid_t> operators_;            // running
  std::vector<std::string> security_args_;  // ChartSecurityArgs
  int started_ = 0;
  int octet_ = 0;
  int port_ = 0;
};

// A job runs to completion: the children with owner references, Running
// then Succeeded, every example counted from the trainers' metrics, Events
// recorded. A spec the schema accepts but the validator does not fails
// with InvalidSpec and gets no children.
TEST_F(OperatorE2eTest, RunsAJobToSuccessAndRefusesAnInvalidOne) {
  const pid_t op = StartOperator(/*leader_elect=*/false);
  // The API server fails some writes: the operator retries with backoff.
  api_->InjectFault({.method = "POST", .path_contains = "/statefulsets", .code = 500, .times = 2});
  api_->InjectFault(
      {.method = "PATCH", .path_contains = "shadowsyncjobs/tiny/status", .code = 503, .times = 2});
  // More trainers than examples: the CRD's rules refuse it at creation.
  absl::Status refused = api_->Create(kJobs, testing::JobJson("refused", 2, 3, 2)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("every trainer needs at least"));
  // A butterfly schedule that cannot factor 6 / 2 into radices of at most 2:
  // the one check CEL cannot make, so the operator refuses it at reconcile.
  json bad = testing::JobJson("bad", 6000, 6, 2);
  bad["spec"]["sync"] = {{"algorithm", "ds-sync"},
                         {"dsSync", {{"groupSize", 2}, {"schedule", "butterfly"}}}};
  ASSERT_TRUE(api_->Create(kJobs, bad).ok());
  ASSERT_TRUE(api_->Create(kJobs, testing::JobJson("tiny", 6000, 2, 2)).ok());

  ASSERT_TRUE(
      WaitFor([&] { return Condition("bad", "Failed").value("reason", "") == "InvalidSpec"; },
              std::chrono::seconds(60)))
      << JobObject("bad").dump(2);
  EXPECT_EQ(StsReplicas("bad-trainer"), -1) << "an invalid job gets no children";
  EXPECT_NE(Condition("bad", "Failed")
                .value("message", "")
                .find("butterfly cannot give every one of 6 trainers the exact mean"),
            std::string::npos)
      << Condition("bad", "Failed").dump();

  ASSERT_TRUE(WaitFor([&] { return Phase("tiny") == "Succeeded"; }, std::chrono::seconds(240)))
      << JobObject("tiny").dump(2);
  // The trainers' final counts follow within seconds (from their idle restarts).
  WaitFor(
      [&] { return JobObject("tiny").value("/status/examplesProcessed"_json_pointer, 0) == 6000; },
      std::chrono::seconds(30));
  const json job = JobObject("tiny");
  const std::string uid = job["metadata"]["uid"];
  for (const std::string path : {"/apis/apps/v1/namespaces/default/statefulsets/tiny-trainer",
                                 "/apis/apps/v1/namespaces/default/statefulsets/tiny-ps",
                                 "/apis/apps/v1/namespaces/default/statefulsets/tiny-syncer",
                                 "/api/v1/namespaces/default/services/tiny-ps",
                                 "/api/v1/namespaces/default/configmaps/tiny-config"}) {
    const json child = Get(path);
    ASSERT_FALSE(child.empty()) << path;
    EXPECT_EQ(child["metadata"]["ownerReferences"][0]["uid"], uid) << path;
  }
  EXPECT_EQ(job["status"].value("examplesProcessed", 0), 6000) << job["status"].dump(2);
  EXPECT_EQ(job["status"]["observedGeneration"], job["metadata"]["generation"]);
  absl::StatusOr<std::vector<json>> events = api_->List("/api/v1/namespaces/default/events");
  ASSERT_TRUE(events.ok());
  std::set<std::string> reasons;
  for (const json& e : *events) {
    if (e["involvedObject"]["name"] == "tiny") reasons.insert(e["reason"].get<std::string>());
    if (e["involvedObject"]["name"] == "bad")
      reasons.insert("bad:" + e["reason"].get<std::string>());
  }
  EXPECT_TRUE(reasons.count("bad:InvalidSpec")) << testing::ReadFile(dir_.File("operator-0.log"));
  EXPECT_GE(reasons.size(), 3u);
  EXPECT_NE(testing::ReadFile(dir_.File("operator-0.log")).find("retrying with backoff"),
            std::string::npos);

  // The operator's own endpoints, then a clean exit on SIGTERM.
  const std::string http = OperatorHttp(0);
  const std::string host = http.substr(0, http.rfind(':'));
  std::string body;
  EXPECT_EQ(testing::HttpGet(host, port_, "/healthz", &body), 200);
  EXPECT_EQ(testing::HttpGet(host, port_, "/readyz", &body), 200);
  ASSERT_EQ(testing::HttpGet(host, port_, "/metrics", &body), 200);
  EXPECT_NE(body.find("shadowsync_operator_reconciles_total{result=\"ok\"}"), std::string::npos)
      << body;
  EXPECT_NE(body.find("shadowsync_operator_reconciles_total{result=\"error\"}"), std::string::npos);
  EXPECT_EQ(StopOperator(op), 0);
  operators_.clear();
}

// Random labels (nothing to learn) and spec.trainer.learningCheck.fail: the
// trainer stops with exit 3, its pod writes why to the container's
// termination message, and the operator fails the job at once with reason
// NotLearning and sets the NotLearning condition from that message.
TEST_F(OperatorE2eTest, ATrainerThatIsNotLearningFailsTheJob) {
  const std::string data = dir_.File("random.tsv");
  ASSERT_EQ(std::system((Bin() + " gen-data --out " + data + ".tmp --examples 20000 --seed 3 " +
                         ">/dev/null && awk 'BEGIN { srand(1); FS = OFS = \"\\t\" } "
                         "{ $1 = rand() < 0.25 ? 1 : 0; print }' " +
                         data + ".tmp > " + data)
                            .c_str()),
            0);
  StartOperator(/*leader_elect=*/false);
  json job = testing::JobJson("nl", 20000, 1, 1);
  job["spec"]["data"] = {{"format", "criteo-tsv"}, {"paths", {data}}};
  // Judged from examples 6400-12800: the warm-up is 100 steps of 64.
  job["spec"]["trainer"]["learningCheck"] = {{"afterExamples", 4000}, {"fail", true}};
  ASSERT_TRUE(api_->Create(kJobs, job).ok());
  ASSERT_TRUE(WaitFor([&] { return Phase("nl") == "Failed"; }, std::chrono::seconds(120)))
      << JobObject("nl").dump(2);
  const json failed = Condition("nl", "Failed");
  EXPECT_EQ(failed["reason"], "NotLearning") << failed.dump();
  EXPECT_THAT(failed["message"].get<std::string>(),
              ::testing::HasSubstr("nl-trainer-0: not learning: the model is not learning: "
                                   "train NE"));
  EXPECT_EQ(Condition("nl", "NotLearning")["status"], "True");
  // The container started again after exit 3 idles rather than train again
  // (CI, and a run here on a loaded machine, saw 2 restarts: the log of
  // every instance says why).
  const std::string log = dir_.File("nodes/default/nl-trainer-0/container.log");
  EXPECT_EQ(JobObject("nl")["status"].value("restarts", 0), 1)
      << "retried before failing; the trainer's instances:\n"
      << testing::ReadFile(log)
      << "the pod: " << Get("/api/v1/namespaces/default/pods/nl-trainer-0").dump(2);
  EXPECT_TRUE(WaitFor(
      [&] { return testing::ReadFile(log).find("idle until stopped") != std::string::npos; },
      std::chrono::seconds(30)))
      << testing::ReadFile(log);
}

// spec.export (docs/export.md): the operator creates the export claim, kept
// after the job; an export-request annotation made at creation is answered
// by trainer 0 while the job trains; the final export, taken once every
// trainer is done, is in status.export (and `kubectl get`'s Export column)
// before the job is Succeeded, and `shadowsync eval --model` on it repeats
// the eval NE and AUC the status reports. A second job warm-starts from it
// on another number of parameter servers and continues from it.
TEST_F(OperatorE2eTest, ExportsIntoTheClaimAndAnotherJobWarmStartsFromIt) {
  StartOperator(/*leader_elect=*/false);
  json job = testing::JobJson("exp", 60000, 2, 2);
  job["metadata"]["annotations"] = {{"shadowsync.io/export-request", "first"}};
  job["spec"]["export"] = {{"keep", 5}};
  // Slowed down: training lasts at least 30000 / 64 steps x 20 ms = 9 s
  // per trainer, so that the request is answered while it runs.
  job["spec"]["trainer"]["straggler"] = {{"count", 2}, {"delayMs", 20}};
  ASSERT_TRUE(api_->Create(kJobs, job).ok());

  const std::string claim = kubelet_->ClaimDir("default", "exp-exports");
  ASSERT_TRUE(WaitFor([&] { return Phase("exp") == "Succeeded"; }, std::chrono::seconds(300)))
      << JobObject("exp").dump(2);
  const json status = JobObject("exp")["status"];
  const json& e = status["export"];
  EXPECT_EQ(e.value("claim", ""), "exp-exports") << e.dump(2);
  EXPECT_EQ(e.value("claimCreated", false), true);
  EXPECT_EQ(e.value("request", ""), "first");
  const json& latest = e["latest"];
  EXPECT_EQ(latest.value("final", false), true) << e.dump(2);
  EXPECT_EQ(latest.value("model", ""), "model-000002") << e.dump(2);
  EXPECT_GT(latest.value("rows", 0), 0);
  EXPECT_EQ(latest.value("examplesTrained", 0), 60000);

  // The claim: not owned by the job, so the exports outlive it.
  const json pvc = Get("/api/v1/namespaces/default/persistentvolumeclaims/exp-exports");
  ASSERT_FALSE(pvc.empty());
  EXPECT_FALSE(pvc["metadata"].contains("ownerReferences")) << pvc.dump(2);
  EXPECT_EQ(pvc["spec"]["accessModes"][0], "ReadWriteMany");

  // The request's export, taken while training ran (unscored), then the final one.
  const json first =
      json::parse(testing::ReadFile(claim + "/model-000001/manifest.json"), nullptr, false);
  ASSERT_TRUE(first.is_object()) << "no on-demand export in " << claim;
  EXPECT_TRUE(first.value("eval", json::object()).empty()) << first["eval"];
  EXPECT_LT(first.value("examples_trained", 0), 60000);
  EXPECT_EQ(testing::ReadFile(claim + "/LATEST"), "model-000002\n");

  const std::string eval_data = dir_.File("nodes/default/exp-trainer-0/volumes/data/data/eval.tsv");
  std::string out;
  const std::string cmd = Bin() + " eval --model " + claim + "/model-000002 --data " + eval_data;
  ASSERT_EQ(testing::RunShell(cmd, &out), 0) << cmd << "\n" << out;
  const json eval = json::parse(out.substr(out.find('{')), nullptr, false);
  EXPECT_NEAR(eval["eval_ne"].get<double>(), latest["evalNE"].get<double>(), 1e-6) << out;
  EXPECT_NEAR(eval["eval_auc"].get<double>(), latest["evalAUC"].get<double>(), 1e-6) << out;

  const json exp_report =
      json::parse(testing::ReadFile(dir_.File("nodes/default/exp-trainer-0/volumes/data/done")),
                  nullptr, false);
  ASSERT_TRUE(exp_report.is_object() && exp_report.contains("train_ne"));
  EXPECT_EQ(exp_report["export"]["path"].get<std::string>().substr(
                exp_report["export"]["path"].get<std::string>().rfind('/') + 1),
            "model-000002");

  // Deleting the job collects its children, not the claim.
  ASSERT_TRUE(api_->Delete(absl::StrCat(kJobs, "/exp")).ok());
  EXPECT_TRUE(Get("/apis/apps/v1/namespaces/default/statefulsets/exp-trainer").empty());
  EXPECT_FALSE(Get("/api/v1/namespaces/default/persistentvolumeclaims/exp-exports").empty());
  // The next job's pods get the same loopback IPs and ports.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const char* pod :
             {"exp-trainer-0", "exp-trainer-1", "exp-ps-0", "exp-ps-1", "exp-syncer-0"}) {
          if (kubelet_->Pid("default", pod) != 0) return false;
        }
        return true;
      },
      std::chrono::seconds(60)));

  // A warm start from that export on 3 parameter servers instead of 2:
  // every row loaded (routed by the new shard map), and the first
  // evaluation, of the model as loaded, is the export's own.
  json warm = testing::JobJson("warm", 60000, 2, 3);
  warm["spec"]["init"] = {{"fromModel", "model-000002"}, {"volumeClaimName", "exp-exports"}};
  warm["spec"]["export"] = json::object();
  ASSERT_TRUE(api_->Create(kJobs, warm).ok());
  ASSERT_TRUE(WaitFor([&] { return Phase("warm") == "Succeeded"; }, std::chrono::seconds(300)))
      << JobObject("warm").dump(2) << kubelet_->Log("default", "warm-trainer-0");
  const json warm_status = JobObject("warm")["status"];
  EXPECT_EQ(warm_status["init"].value("imported", false), true) << warm_status.dump(2);
  EXPECT_EQ(warm_status["init"].value("rows", 0), latest["rows"]) << warm_status.dump(2);
  const json report =
      json::parse(testing::ReadFile(dir_.File("nodes/default/warm-trainer-0/volumes/data/done")),
                  nullptr, false);
  ASSERT_TRUE(report.is_object() && report.contains("init_eval")) << report.dump(2);
  EXPECT_NEAR(report["init_eval"]["eval_ne"].get<double>(), latest["evalNE"].get<double>(), 1e-6);
  EXPECT_NEAR(report["init_eval"]["eval_auc"].get<double>(), latest["evalAUC"].get<double>(), 1e-6);
  // Training went on from there: over the same data again, trainer 0's
  // train NE is well below the first job's from scratch (a start from a
  // fresh model would repeat it).
  const double cold_train_ne = exp_report["train_ne"].get<double>();
  const double warm_train_ne = report["train_ne"].get<double>();
  std::cout << "trainer 0 train NE: first job " << cold_train_ne << ", warm-started job "
            << warm_train_ne << "\n";
  EXPECT_LT(warm_train_ne, cold_train_ne - 0.02);
}

// spec.export.deltaIntervalSeconds on Kubernetes: trainer 0 writes a delta
// export into the claim every interval while the job trains, and
// `shadowsync serve` watching the claim (as the chart's serving pods do)
// swaps each in within its poll plus the load; the scores it gives change
// to those of the delta, and equal `shadowsync eval`'s of it.
TEST_F(OperatorE2eTest, DeltaExportsOfARunningJobReachServeOnTheClaim) {
  StartOperator(/*leader_elect=*/false);
  json job = testing::JobJson("dlt", 60000, 1, 1);
  job["spec"]["export"] = {{"deltaIntervalSeconds", 2}};
  // Slowed down: training lasts at least 60000 / 64 steps x 15 ms = 14 s.
  job["spec"]["trainer"]["straggler"] = {{"count", 1}, {"delayMs", 15}};
  ASSERT_TRUE(api_->Create(kJobs, job).ok());
  const std::string claim = kubelet_->ClaimDir("default", "dlt-exports");
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(claim + "/LATEST"); },
                      std::chrono::seconds(120)))
      << JobObject("dlt").dump(2) << kubelet_->Log("default", "dlt-trainer-0");

  const std::string ready = dir_.File("serve.ready");
  absl::StatusOr<pid_t> serve =
      Spawn({Bin(), "serve", "--model", claim, "--poll-seconds=0.2", "--gemm=openblas",
             "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--grpc-listen=127.0.0.1:0",
             "--ready-file", ready},
            {.stdout_path = dir_.File("serve.log"), .stderr_path = dir_.File("serve.log")});
  ASSERT_TRUE(serve.ok()) << serve.status();
  int port = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        std::ifstream in(ready);
        return static_cast<bool>(in >> port);
      },
      std::chrono::seconds(60)))
      << testing::ReadFile(dir_.File("serve.log"));

  const std::string eval_data = dir_.File("nodes/default/dlt-trainer-0/volumes/data/data/eval.tsv");
  std::vector<std::string> lines;
  std::vector<float> labels;
  {
    std::ifstream in(eval_data);
    for (std::string line; std::getline(in, line);) {
      lines.push_back(line);
      labels.push_back(line[0] == '1' ? 1.0f : 0.0f);
    }
  }
  ASSERT_EQ(lines.size(), 1000u) << eval_data;
  const std::string request = testing::LinesRequest(lines, 0, lines.size()).dump();
  std::string error;
  std::vector<float> first_probs;
  const std::string first = testing::ScoreWithOneExport(port, request, &first_probs, &error);
  ASSERT_FALSE(first.empty()) << error;

  // A delta written after serve started reaches it while the job trains.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::string body;
        if (testing::HttpGet(port, "/v2/models/ctr", &body) != 200) return false;
        const std::string now = json::parse(body)["parameters"]["export"].get<std::string>();
        if (now == first) return false;
        const json manifest =
            json::parse(testing::ReadFile(now + "/manifest.json"), nullptr, false);
        return manifest.is_object() && manifest.contains("delta");
      },
      std::chrono::seconds(60)))
      << "no delta served; phase " << Phase("dlt") << "\n"
      << kubelet_->Log("default", "dlt-trainer-0") << testing::ReadFile(dir_.File("serve.log"));
  std::vector<float> probs;
  const std::string later = testing::ScoreWithOneExport(port, request, &probs, &error);
  ASSERT_FALSE(later.empty()) << error;
  EXPECT_NE(probs, first_probs) << "the delta did not change the scores";
  std::string out;
  const std::string cmd = Bin() + " eval --gemm openblas --model " + later + " --data " +
                          eval_data + " --report-json " + dir_.File("delta-eval.json");
  ASSERT_EQ(testing::RunShell(cmd, &out), 0) << cmd << "\n" << out;
  const json eval = json::parse(testing::ReadFile(dir_.File("delta-eval.json")));
  const QualityReport quality = Evaluate(probs, labels);
  EXPECT_NEAR(quality.logloss, eval["eval_logloss"].get<double>(), 1e-6) << later;
  EXPECT_NEAR(quality.auc, eval["eval_auc"].get<double>(), 1e-6) << later;
  ASSERT_EQ(kill(*serve, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(*serve, &status, 0), *serve);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing::ReadFile(dir_.File("serve.log"));
  EXPECT_TRUE(WaitFor([&] { return Phase("dlt") == "Succeeded"; }, std::chrono::seconds(300)))
      << JobObject("dlt").dump(2);
}

// Trainers 2 -> 3 change only the trainer StatefulSet: the running trainers
// keep their processes. Parameter servers 2 -> 3 -> 2 reshard live; with the
// trainers paused around it, every row is still stored exactly once.
TEST_F(OperatorE2eTest, ScalesTrainersAndParameterServersLive) {
  StartOperator(/*leader_elect=*/false);
  ASSERT_TRUE(api_->Create(kJobs, testing::JobJson("big", 5000000, 2, 2)).ok());
  ASSERT_TRUE(WaitFor([&] { return Phase("big") == "Running"; }, std::chrono::seconds(120)))
      << JobObject("big").dump(2);
  const pid_t trainer0 = kubelet_->Pid("default", "big-trainer-0");
  ASSERT_GT(trainer0, 0);

  // Every watch breaks: the operator re-watches and still sees the change.
  api_->DropWatches();
  PatchSpec("big", {{"trainer", {{"replicas", 3}}}});
  ASSERT_TRUE(WaitFor([&] { return kubelet_->Pid("default", "big-trainer-2") > 0; },
                      std::chrono::seconds(60)));
  EXPECT_EQ(kubelet_->Pid("default", "big-trainer-0"), trainer0) << "a running trainer restarted";
  EXPECT_EQ(StsReplicas("big-ps"), 2);
  ASSERT_TRUE(
      WaitFor([&] { return SlotsOwned(0) > 0 && SlotsOwned(1) > 0; }, std::chrono::seconds(60)));

  // Security on by default: what a trainer holds (the chart's certificate
  // and the job's token) reads the shard map but cannot change it; without
  // the token nothing gets in.
  absl::StatusOr<ShardMap> map =
      ps::FetchShardMap(PsAddress(0), absl::Seconds(5), ClientSecurity());
  ASSERT_TRUE(map.ok()) << map.status();
  v1::SetShardMapRequest take_all;  // Every slot to server 0.
  *take_all.mutable_map() =
      ShardMap::Balanced(map->num_slots(), {PsAddress(0)}, map->epoch() + 1).ToProto();
  v1::SetShardMapResponse taken;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const grpc::Status refused =
      v1::ParameterServer::NewStub(CreateChannel(PsAddress(0), ClientSecurity()))
          ->SetShardMap(&context, take_all, &taken);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  EXPECT_EQ(MaxEpoch(2), map->epoch());
  GrpcSecurity no_token = ClientSecurity();
  no_token.auth_token.clear();
  EXPECT_EQ(ps::FetchShardMap(PsAddress(0), absl::Seconds(5), no_token).status().code(),
            absl::StatusCode::kUnauthenticated);

  const ps::RowSetChecksum before = PauseAndChecksum("big", 2);
  ASSERT_GT(before.rows, 0);
  PatchSpec("big", {{"parameterServer", {{"replicas", 3}}}});
  bool saw_resharding = false;
  ASSERT_TRUE(WaitFor(
      [&] {
        saw_resharding =
            saw_resharding || Condition("big", "Resharding").value("status", "") == "True";
        return SlotsOwned(2) > 300 &&
               JobObject("big").value("/status/shardMap/numServers"_json_pointer, 0) == 3 &&
               Condition("big", "Resharding").value("status", "") == "False";
      },
      std::chrono::seconds(120)))
      << JobObject("big")["status"].dump(2);
  EXPECT_TRUE(saw_resharding);
  absl::StatusOr<ps::RowSetChecksum> after_out =
      ps::ClusterChecksum(PsAddresses(3), absl::Seconds(120), ClientSecurity());
  ASSERT_TRUE(after_out.ok());
  EXPECT_EQ(*after_out, before) << "rows changed across the scale-out";

  PatchSpec("big", {{"parameterServer", {{"replicas", 2}}}});
  ASSERT_TRUE(WaitFor(
      [&] { return StsReplicas("big-ps") == 2 && kubelet_->Pid("default", "big-ps-2") == 0; },
      std::chrono::seconds(120)))
      << JobObject("big")["status"].dump(2);
  absl::StatusOr<ps::RowSetChecksum> after_in =
      ps::ClusterChecksum(PsAddresses(2), absl::Seconds(120), ClientSecurity());
  ASSERT_TRUE(after_in.ok());
  EXPECT_EQ(*after_in, before) << "rows changed across the scale-in";
  EXPECT_EQ(SlotsOwned(0) + SlotsOwned(1), 1024);
  kubelet_->Signal("default", "big", "trainer", SIGCONT);
}

// Suspend stops every pod, servers included (what Kueue expects); resume
// brings each server back on its own volume, with its shard map and rows.
TEST_F(OperatorE2eTest, ASuspendedJobRunsNoPodAndResumesWithItsRows) {
  StartOperator(/*leader_elect=*/false);
  ASSERT_TRUE(api_->Create(kJobs, testing::JobJson("big", 5000000, 2, 2)).ok());
  ASSERT_TRUE(WaitFor([&] { return Phase("big") == "Running"; }, std::chrono::seconds(120)));
  ASSERT_TRUE(
      WaitFor([&] { return SlotsOwned(0) > 0 && SlotsOwned(1) > 0; }, std::chrono::seconds(60)));
  const ps::RowSetChecksum before = PauseAndChecksum("big", 2);
  ASSERT_GT(before.rows, 0);

  PatchSpec("big", {{"runPolicy", {{"suspend", true}}}});
  const std::vector<std::string> pods = {"big-ps-0", "big-ps-1", "big-trainer-0", "big-trainer-1",
                                         "big-syncer-0"};
  auto none_runs = [&] {
    return std::all_of(pods.begin(), pods.end(),
                       [&](const std::string& pod) { return kubelet_->Pid("default", pod) == 0; });
  };
  ASSERT_TRUE(WaitFor([&] { return Phase("big") == "Suspended" && none_runs(); },
                      std::chrono::seconds(120)))
      << JobObject("big")["status"].dump(2);
  EXPECT_EQ(StsReplicas("big-ps"), 0);

  PatchSpec("big", {{"runPolicy", {{"suspend", false}}}});
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<ps::RowSetChecksum> now =
            ps::ClusterChecksum(PsAddresses(2), absl::Seconds(5), ClientSecurity());
        return now.ok() && now->rows > 0;
      },
      std::chrono::seconds(120)));
  // Rows only grow once the trainers are back, so the servers came back
  // with at least every row they had: a server that lost its volume would
  // start from none.
  absl::StatusOr<ps::RowSetChecksum> after =
      ps::ClusterChecksum(PsAddresses(2), absl::Seconds(120), ClientSecurity());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(after->rows, before.rows);
  for (int i = 0; i < 2; ++i) {
    // The run after the resume (the log holds every run) read its own map.
    const std::string log = kubelet_->Log("default", absl::StrCat("big-ps-", i));
    const size_t last_start = log.rfind("ps opening store");
    ASSERT_NE(last_start, log.find("ps opening store")) << "one run only:\n" << log;
    EXPECT_NE(log.find("ps using the persisted shard map", last_start), std::string::npos) << log;
  }
  ASSERT_TRUE(WaitFor([&] { return Phase("big") == "Running"; }, std::chrono::seconds(120)))
      << JobObject("big")["status"].dump(2);
}

// An operator killed with SIGKILL in the middle of a reshard: its
// replacement repairs the cut step and finishes the move; no row is lost
// or duplicated.
TEST_F(OperatorE2eTest, ReshardResumesAfterTheOperatorIsKilled) {
  // Two slots per step: over a hundred steps to cut into.
  const pid_t first = StartOperator(/*leader_elect=*/true, "op-a", /*slots_per_step=*/2);
  ps::RowSetChecksum before;
  ASSERT_NO_FATAL_FAILURE(ScaleOutBigUntilMidway(&before));
  // The dashboards' resharding progress: slots moved of planned, mid-move.
  std::optional<double> moved, planned, running;
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string text = OperatorMetrics(0);
        moved = MetricValue(text, "shadowsync_operator_reshard_slots_moved");
        planned = MetricValue(text, "shadowsync_operator_reshard_slots_planned");
        running = MetricValue(text, "shadowsync_operator_reshards_running");
        return moved.value_or(0) > 0;
      },
      std::chrono::seconds(30)));
  EXPECT_EQ(running, 1);
  // 1024 slots over 3 servers: the new one's third.
  EXPECT_GE(planned.value_or(0), 341);
  EXPECT_LE(planned.value_or(0), 342);
  EXPECT_LE(moved.value_or(0), planned.value_or(0));
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  operators_.erase(operators_.begin());
  EXPECT_LT(SlotsOwned(2), 341) << "the reshard finished before the kill: the test proves nothing";

  StartOperator(/*leader_elect=*/true, "op-b");
  ASSERT_NO_FATAL_FAILURE(ExpectBigScaledOut(before));
  // Done: the gauges are back at 0 (data, not an empty panel).
  ASSERT_TRUE(WaitFor(
      [&] { return MetricValue(OperatorMetrics(1), "shadowsync_operator_reshards_running") == 0; },
      std::chrono::seconds(10)));
  const std::string text = OperatorMetrics(1);
  EXPECT_EQ(MetricValue(text, "shadowsync_operator_reshard_slots_moved"), 0) << text;
  EXPECT_EQ(MetricValue(text, "shadowsync_operator_reshard_slots_planned"), 0) << text;
  EXPECT_EQ(MetricValue(text, R"(shadowsync_operator_reshards_total{result="ok"})"), 1) << text;
  kubelet_->Signal("default", "big", "trainer", SIGCONT);
}

// Issue 30, finding 3: SIGTERM in the middle of a reshard. The operator ends
// the reshard after its current step and only then releases the Lease: once
// the Lease is released no shard map changes (else a standby taking over
// at once would reshard beside it), the operator exits 0, and its successor
// finishes the move from that step without a repair.
TEST_F(OperatorE2eTest, SigtermEndsTheReshardBeforeReleasingTheLease) {
  // Two slots per step: over a hundred steps, so SIGTERM lands mid-move.
  const pid_t first = StartOperator(/*leader_elect=*/true, "op-a", /*slots_per_step=*/2);
  ps::RowSetChecksum before;
  ASSERT_NO_FATAL_FAILURE(ScaleOutBigUntilMidway(&before));
  ASSERT_EQ(Get(kLease).value("/spec/holderIdentity"_json_pointer, std::string()), "op-a");

  kill(first, SIGTERM);
  // Until it exits: the first look at the shard maps after the Lease is no
  // longer op-a's.
  std::optional<uint64_t> epoch_after_release;
  int status = 0;
  bool exited = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!exited && std::chrono::steady_clock::now() < deadline) {
    if (!epoch_after_release.has_value() &&
        Get(kLease).value("/spec/holderIdentity"_json_pointer, std::string()) != "op-a") {
      epoch_after_release = MaxEpoch(3);
    }
    exited = waitpid(first, &status, WNOHANG) == first;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!exited) {
    kill(first, SIGKILL);
    waitpid(first, nullptr, 0);
  }
  operators_.erase(operators_.begin());
  ASSERT_TRUE(exited) << "no exit within 30 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_TRUE(epoch_after_release.has_value()) << "the Lease was not released";
  EXPECT_EQ(Get(kLease).value("/spec/holderIdentity"_json_pointer, std::string("?")), "");
  EXPECT_EQ(*epoch_after_release, MaxEpoch(3))
      << "a shard map changed after the Lease was released: two resharders could overlap";
  EXPECT_LT(SlotsOwned(2), 341) << "the reshard finished before SIGTERM: the test proves nothing";
  EXPECT_NE(testing::ReadFile(dir_.File("operator-0.log")).find("reshard stopped at epoch"),
            std::string::npos);

  StartOperator(/*leader_elect=*/true, "op-b");
  ASSERT_NO_FATAL_FAILURE(ExpectBigScaledOut(before));
  EXPECT_EQ(testing::ReadFile(dir_.File("operator-1.log")).find("repaired an interrupted reshard"),
            std::string::npos)
      << "the stop cut a step";
  kubelet_->Signal("default", "big", "trainer", SIGCONT);
}

// Two replicas: one holds the Lease and acts; when it dies the other takes
// over within the lease duration and acts on a change.
TEST_F(OperatorE2eTest, TwoReplicasContendForTheLease) {
  const pid_t a = StartOperator(/*leader_elect=*/true, "op-a");
  const pid_t b = StartOperator(/*leader_elect=*/true, "op-b");
  const std::string lease = kLease;
  std::string holder;
  ASSERT_TRUE(WaitFor(
      [&] {
        holder = Get(lease).value("/spec/holderIdentity"_json_pointer, std::string());
        return !holder.empty();
      },
      std::chrono::seconds(30)));
  ASSERT_TRUE(holder == "op-a" || holder == "op-b") << holder;
  ASSERT_TRUE(api_->Create(kJobs, testing::JobJson("big", 5000000, 2, 2)).ok());
  ASSERT_TRUE(WaitFor([&] { return StsReplicas("big-trainer") == 2; }, std::chrono::seconds(60)));
  // Only the holder acted: every Event is its own. (The controller records
  // the reconcile's Events after applying its children, so they may trail
  // the StatefulSets.)
  absl::StatusOr<std::vector<json>> events;
  ASSERT_TRUE(WaitFor(
      [&] {
        events = api_->List("/api/v1/namespaces/default/events");
        return events.ok() && !events->empty();
      },
      std::chrono::seconds(30)));
  for (const json& e : *events) EXPECT_EQ(e["reportingInstance"], holder) << e.dump();
  const pid_t leader = holder == "op-a" ? a : b;
  const std::string standby = holder == "op-a" ? "op-b" : "op-a";
  kill(leader, SIGKILL);
  waitpid(leader, nullptr, 0);
  operators_.erase(std::find(operators_.begin(), operators_.end(), leader));
  ASSERT_TRUE(WaitFor(
      [&] {
        return Get(lease).value("/spec/holderIdentity"_json_pointer, std::string()) == standby;
      },
      std::chrono::seconds(30)));
  PatchSpec("big", {{"trainer", {{"replicas", 3}}}});
  EXPECT_TRUE(WaitFor([&] { return StsReplicas("big-trainer") == 3; }, std::chrono::seconds(60)));
}

}  // namespace
}  // namespace shadowsync
