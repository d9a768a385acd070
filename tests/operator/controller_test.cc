// The controller in-process against the fake API server, connected as the
// operator's ServiceAccount under deploy/rbac.yaml (operator_rbac.h): every
// request it makes must be one that RBAC grants, which TearDown checks. No
// pod runs: the test plays the kubelet by writing Ready pods, and no
// parameter server answers (the jobs never reshard).
#include "operator/controller.h"

#include <map>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/crd.h"
#include "operator/credentials.h"
#include "operator/kube_client.h"
#include "operator/kube_config.h"
#include "operator/reconcile.h"
#include "prometheus/registry.h"
#include "tests/operator/fake_api_client.h"
#include "tests/operator/job_json.h"
#include "tests/operator/operator_rbac.h"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/test_util.h"

namespace shadowsync::op {
namespace {

using json = nlohmann::json;

constexpr char kJobs[] = "/apis/shadowsync.io/v1alpha1/namespaces/default/shadowsyncjobs";
constexpr char kEvents[] = "/api/v1/namespaces/default/events";
constexpr char kPods[] = "/api/v1/namespaces/default/pods";

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto api = testing::FakeKubeApiServer::Start();
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
    SS_ASSERT_OK(api_->Create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                              ShadowSyncJobCrd()));
    SS_ASSERT_OK(testing::LoadOperatorRbac(*api_));
    const std::string kubeconfig = dir_.File("kubeconfig");
    SS_ASSERT_OK(api_->WriteKubeconfig(kubeconfig, "default", testing::kOperatorUser));
    absl::StatusOr<kube::KubeConfig> config = kube::LoadKubeconfig(kubeconfig);
    SS_ASSERT_OK(config);
    auto client = kube::KubeClient::FromConfig(*std::move(config));
    SS_ASSERT_OK(client);
    client_ = *std::move(client);
  }

  void TearDown() override {
    if (controller_ != nullptr) controller_->Stop();
    EXPECT_THAT(testing::ForbiddenRequests(*api_), ::testing::IsEmpty())
        << "the operator made a call deploy/rbac.yaml does not allow";
  }

  void StartController(const std::string& credentials_key = "",
                       GangScheduler gang_scheduler = GangScheduler::kNone) {
    ControllerOptions options;
    options.credentials_key = credentials_key;
    options.reconcile.gang_scheduler = gang_scheduler;
    options.namespaces = namespaces_;
    options.election.ns = testing::kOperatorNamespace;
    options.election.identity = "op-0";
    options.election.lease_duration = absl::Seconds(3);
    options.election.renew_deadline = absl::Seconds(2);
    options.election.retry_period = absl::Milliseconds(200);
    // Nothing listens there: the servers and trainers are never reached.
    options.reconcile.address_template = "127.0.0.1:{port}{index}";
    options.reconcile.ps_port = options.reconcile.syncer_port = options.reconcile.metrics_port = 1;
    options.ps_rpc_deadline = absl::Milliseconds(300);
    options.registry = &registry_;
    auto controller = Controller::Create(client_.get(), options);
    SS_ASSERT_OK(controller);
    controller_ = *std::move(controller);
    SS_ASSERT_OK(controller_->Start());
  }

  // One Ready pod per role of `job`, as the kubelet reports them.
  void ReadyPods(const std::string& job) {
    for (Role role : kRoles) {
      const std::string name = absl::StrCat(ChildName(job, role), "-0");
      const std::string role_name(RoleName(role));
      const json pod = {
          {"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"labels", {{std::string(kJobNameLabel), job}, {std::string(kRoleLabel), role_name}}}}},
          {"spec", {{"containers", {{{"name", role_name}, {"image", "shadowsync"}}}}}}};
      absl::StatusOr<json> created = api_->Create(kPods, pod);
      SS_ASSERT_OK(created);
      json ready = *created;
      ready["status"] = {{"phase", "Running"},
                         {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
      SS_ASSERT_OK(api_->UpdateStatus(absl::StrCat(kPods, "/", name), ready));
    }
  }

  json JobObject(const std::string& name) {
    absl::StatusOr<json> job = api_->Get(absl::StrCat(kJobs, "/", name));
    return job.ok() ? *job : json::object();
  }
  std::string Phase(const std::string& name) {
    return JobObject(name).value("/status/phase"_json_pointer, std::string());
  }
  void Suspend(const std::string& name, bool suspend) {
    SS_ASSERT_OK(api_->Patch(absl::StrCat(kJobs, "/", name),
                             {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}},
                             "application/merge-patch+json"));
  }
  // The job's Events with `reason`.
  std::vector<json> Events(const std::string& job, const std::string& reason) {
    std::vector<json> out;
    absl::StatusOr<std::vector<json>> events = api_->List(kEvents);
    if (!events.ok()) return out;
    for (const json& e : *events) {
      if (e["involvedObject"]["name"] == job && e["reason"] == reason) out.push_back(e);
    }
    return out;
  }

  testing::ScratchDir dir_;
  std::unique_ptr<testing::FakeKubeApiServer> api_;
  std::unique_ptr<kube::KubeClient> client_;
  prometheus::Registry registry_;
  std::unique_ptr<Controller> controller_;
  std::vector<std::string> namespaces_ = {"default"};  // Watched by StartController.
};

// With --gang-scheduler, each job gets a PodGroup in the scheduler's CRD
// (installed as a cluster running it has it), which deploy/rbac.yaml lets
// the operator write, and its pods name the scheduler and the group. A
// changed schedulingPolicy updates the PodGroup.
TEST_F(ControllerTest, WithAGangSchedulerEachJobGetsAPodGroupItsPodsJoin) {
  SS_ASSERT_OK(api_->ApplyFile(testing::SourcePath("tests/operator/podgroup_crds.yaml")));
  json job = testing::JobJson("j", 6000, 2, 2);
  job["spec"]["runPolicy"]["schedulingPolicy"] = {
      {"minAvailable", 3}, {"queue", "research"}, {"priorityClass", "high"}};
  SS_ASSERT_OK(api_->Create(kJobs, job));
  StartController("", GangScheduler::kVolcano);
  const std::string path = "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/j";
  auto sts_path = [](Role role) {
    return absl::StrCat("/apis/apps/v1/namespaces/default/statefulsets/", ChildName("j", role));
  };
  // The PodGroup comes first, the StatefulSets in the same pass after it.
  ASSERT_TRUE(kube::Eventually([&] {
    return api_->Get(path).ok() &&
           std::all_of(std::begin(kRoles), std::end(kRoles),
                       [&](Role role) { return api_->Get(sts_path(role)).ok(); });
  }));
  json group = *api_->Get(path);
  EXPECT_EQ(group["spec"],
            json({{"minMember", 3}, {"queue", "research"}, {"priorityClassName", "high"}}));
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["kind"], "ShadowSyncJob");
  for (Role role : kRoles) {
    absl::StatusOr<json> sts = api_->Get(sts_path(role));
    SS_ASSERT_OK(sts);
    const json& pod = (*sts)["spec"]["template"];
    EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
    EXPECT_EQ(pod["spec"]["priorityClassName"], "high");
    EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "j");
  }
  SS_ASSERT_OK(
      api_->Patch(absl::StrCat(kJobs, "/j"),
                  {{"spec", {{"runPolicy", {{"schedulingPolicy", {{"minAvailable", 5}}}}}}}},
                  "application/merge-patch+json"));
  ASSERT_TRUE(kube::Eventually([&] {
    absl::StatusOr<json> now = api_->Get(path);
    return now.ok() && (*now)["spec"]["minMember"] == 5;
  })) << api_->Get(path)->dump(2);
}

// Issue 30, finding 8: resuming a job repeats its Running Event. The repeat
// is counted by a PATCH of the existing Event (RBAC grants create and patch
// on events, not get or update), and the status follows to Running.
TEST_F(ControllerTest, ASuspendedJobResumesToRunningAndItsRepeatedEventIsCounted) {
  ReadyPods("j");
  SS_ASSERT_OK(api_->Create(kJobs, testing::JobJson("j", 6000, 1, 1)));
  StartController();
  ASSERT_TRUE(kube::Eventually([&] { return Phase("j") == "Running"; })) << JobObject("j").dump(2);
  ASSERT_TRUE(kube::Eventually([&] { return Events("j", "Running").size() == 1; }));

  Suspend("j", true);
  ASSERT_TRUE(kube::Eventually([&] { return Phase("j") == "Suspended"; }))
      << JobObject("j").dump(2);
  // Usually 1; a reconcile that read the job from a cache not yet showing
  // its Running status counts the Event again.
  const int64_t before = Events("j", "Running")[0]["count"];
  Suspend("j", false);
  ASSERT_TRUE(kube::Eventually([&] { return Phase("j") == "Running"; }))
      << JobObject("j")["status"].dump(2);
  ASSERT_TRUE(kube::Eventually([&] {
    const std::vector<json> running = Events("j", "Running");
    return running.size() == 1 && running[0]["count"] > before;
  })) << json(Events("j", "Running")).dump(2);
  EXPECT_EQ(Events("j", "Resumed").size(), 1u);

  const std::string path =
      absl::StrCat(kEvents, "/", Events("j", "Running")[0]["metadata"]["name"].get<std::string>());
  int patches = 0;
  for (const testing::FakeKubeApiServer::Request& r : api_->Requests()) {
    if (r.path != path) continue;
    EXPECT_EQ(r.user, testing::kOperatorUser);
    EXPECT_THAT(r.method, ::testing::AnyOf("POST", "PATCH")) << r.path;
    if (r.method == "PATCH" && r.status == 200) ++patches;
  }
  EXPECT_GE(patches, 1);
  EXPECT_EQ(controller_->stats().event_errors, 0);
}

// An Event that cannot be written is logged and counted; the reconcile goes
// on and the status follows.
TEST_F(ControllerTest, AnEventThatCannotBeWrittenDoesNotHoldUpTheStatus) {
  api_->InjectFault({.method = "POST", .path_contains = "/events", .code = 500, .times = 1000000});
  ReadyPods("j");
  SS_ASSERT_OK(api_->Create(kJobs, testing::JobJson("j", 6000, 1, 1)));
  StartController();
  ASSERT_TRUE(kube::Eventually([&] { return Phase("j") == "Running"; })) << JobObject("j").dump(2);
  EXPECT_TRUE(Events("j", "Running").empty());
  EXPECT_GT(controller_->stats().event_errors, 0);
  EXPECT_EQ(controller_->stats().reconcile_errors, 0);
  bool counted = false;
  for (const auto& family : registry_.Collect()) {
    if (family.name != "shadowsync_operator_events_total") continue;
    for (const auto& metric : family.metric) {
      if (metric.label[0].value == "error") counted = metric.counter.value > 0;
    }
  }
  EXPECT_TRUE(counted) << "shadowsync_operator_events_total{result=\"error\"}";
}

// shadowsync_job_phase: one series per phase of each job, 1 for the phase
// its status shows; the job's series go with the job.
TEST_F(ControllerTest, TheJobPhaseGaugeFollowsTheStatusAndGoesWithTheJob) {
  auto phases = [&](const std::string& job) {
    std::map<std::string, double> out;
    for (const auto& family : registry_.Collect()) {
      if (family.name != "shadowsync_job_phase") continue;
      for (const auto& metric : family.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : metric.label) labels[l.name] = l.value;
        if (labels["shadowsync_job"] != job) continue;
        EXPECT_EQ(labels["job_namespace"], "default");
        out[labels["phase"]] = metric.gauge.value;
      }
    }
    return out;
  };
  auto only = [](const std::string& phase) {
    std::map<std::string, double> want;
    for (std::string_view p : kPhases) want[std::string(p)] = p == phase ? 1 : 0;
    return want;
  };
  ReadyPods("j");
  SS_ASSERT_OK(api_->Create(kJobs, testing::JobJson("j", 6000, 1, 1)));
  StartController();
  ASSERT_TRUE(kube::Eventually([&] { return phases("j") == only("Running"); }))
      << JobObject("j")["status"].dump(2);
  Suspend("j", true);
  ASSERT_TRUE(kube::Eventually([&] { return phases("j") == only("Suspended"); }))
      << JobObject("j")["status"].dump(2);
  SS_ASSERT_OK(api_->Delete(absl::StrCat(kJobs, "/j")));
  EXPECT_TRUE(kube::Eventually([&] { return phases("j").empty(); }));
}

// The namespaced install with a list of namespaces: the operator's rules as
// a Role in each watched namespace and no ClusterRoleBinding. The operator
// manages the jobs there, and never touches, lists or watches another
// namespace: every request it makes is one the Roles allow (TearDown).
TEST_F(ControllerTest, WatchesOnlyTheListedNamespacesWithARoleInEach) {
  const std::string rbac = "/apis/rbac.authorization.k8s.io/v1";
  SS_ASSERT_OK(api_->Delete(rbac + "/clusterrolebindings/shadowsync-operator"));
  absl::StatusOr<json> rules = api_->Get(rbac + "/clusterroles/shadowsync-operator");
  SS_ASSERT_OK(rules);
  for (const std::string ns : {"team-a", "team-b", "team-c"}) {
    SS_ASSERT_OK(
        api_->Create("/api/v1/namespaces",
                     {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}}));
    json job = testing::JobJson("j", 6000, 1, 1);
    job["metadata"]["namespace"] = ns;
    SS_ASSERT_OK(api_->Create(
        absl::StrCat("/apis/shadowsync.io/v1alpha1/namespaces/", ns, "/shadowsyncjobs"), job));
    if (ns == "team-c") continue;
    SS_ASSERT_OK(api_->Create(absl::StrCat(rbac, "/namespaces/", ns, "/roles"),
                              {{"apiVersion", "rbac.authorization.k8s.io/v1"},
                               {"kind", "Role"},
                               {"metadata", {{"name", "shadowsync-operator"}, {"namespace", ns}}},
                               {"rules", (*rules)["rules"]}}));
    SS_ASSERT_OK(api_->Create(absl::StrCat(rbac, "/namespaces/", ns, "/rolebindings"),
                              {{"apiVersion", "rbac.authorization.k8s.io/v1"},
                               {"kind", "RoleBinding"},
                               {"metadata", {{"name", "shadowsync-operator"}, {"namespace", ns}}},
                               {"roleRef",
                                {{"apiGroup", "rbac.authorization.k8s.io"},
                                 {"kind", "Role"},
                                 {"name", "shadowsync-operator"}}},
                               {"subjects",
                                {{{"kind", "ServiceAccount"},
                                  {"name", "shadowsync-operator"},
                                  {"namespace", testing::kOperatorNamespace}}}}}));
  }
  namespaces_ = {"team-a", "team-b"};
  StartController();
  auto config_map = [&](const std::string& ns) {
    return api_->Get(absl::StrCat("/api/v1/namespaces/", ns, "/configmaps/j-config")).ok();
  };
  ASSERT_TRUE(kube::Eventually([&] { return config_map("team-a") && config_map("team-b"); }));
  ASSERT_TRUE(kube::Eventually([&] { return controller_->ready(); }));
  EXPECT_FALSE(config_map("team-c"));
  EXPECT_FALSE(api_->Get("/apis/shadowsync.io/v1alpha1/namespaces/team-c/shadowsyncjobs/j")
                   ->contains("status"));
  for (const testing::FakeKubeApiServer::Request& r : api_->Requests()) {
    if (r.user != testing::kOperatorUser) continue;
    EXPECT_FALSE(absl::StrContains(r.path, "team-c")) << r.method << " " << r.path;
    EXPECT_TRUE(absl::StrContains(r.path, "/namespaces/"))
        << "cluster-wide: " << r.method << " " << r.path;
  }
}

// Issue 30: each job's credentials. The key derives every token; a job's
// tokens depend on its namespace, name and uid, so a recreated job (new uid)
// or another job never holds them.
TEST(CredentialsTest, EachJobGetsItsOwnTokensFromTheKey) {
  const std::string key(40, 'k');
  const json job = testing::JobJson("j", 6000, 1, 1);
  json with_uid = job;
  with_uid["metadata"]["namespace"] = "ml";
  with_uid["metadata"]["uid"] = "uid-1";
  const std::string admin = DeriveJobToken(key, "admin-token", with_uid);
  EXPECT_THAT(admin, ::testing::MatchesRegex("[0-9a-f]{64}"));
  EXPECT_EQ(DeriveJobToken(key, "admin-token", with_uid), admin);
  EXPECT_NE(DeriveJobToken(key, "token", with_uid), admin);
  EXPECT_NE(DeriveJobToken(std::string(40, 'K'), "admin-token", with_uid), admin);
  for (const char* field : {"namespace", "name", "uid"}) {
    json other = with_uid;
    other["metadata"][field] = "x";
    EXPECT_NE(DeriveJobToken(key, "admin-token", other), admin) << field;
  }

  const std::map<std::string, std::string> plain = JobCredentials(key, with_uid, GrpcSecurity());
  EXPECT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain.at("admin-token"), admin);
  EXPECT_EQ(plain.at("token"), DeriveJobToken(key, "token", with_uid));
  GrpcSecurity tls;
  tls.ca_pem = "ca";
  tls.cert_pem = "cert";
  tls.key_pem = "key";
  const std::map<std::string, std::string> with_tls = JobCredentials(key, with_uid, tls);
  EXPECT_EQ(with_tls.at("ca.crt"), "ca");
  EXPECT_EQ(with_tls.at("tls.crt"), "cert");
  EXPECT_EQ(with_tls.at("tls.key"), "key");
}

// With a credentials key, the operator creates each job's Secret before its
// pods, with a single POST per job (RBAC grants only create on Secrets: it
// never reads one), holding the tokens derived for that job.
TEST_F(ControllerTest, CreatesEachJobsCredentialsSecretOnceWithoutReadingSecrets) {
  const std::string key(48, 'z');
  SS_ASSERT_OK(api_->Create(kJobs, testing::JobJson("j", 6000, 1, 1)));
  SS_ASSERT_OK(api_->Create(kJobs, testing::JobJson("k", 6000, 1, 1)));
  StartController(key);
  ASSERT_TRUE(kube::Eventually([&] { return !Phase("j").empty() && !Phase("k").empty(); }));
  for (const char* name : {"j", "k"}) {
    absl::StatusOr<json> secret =
        api_->Get(absl::StrCat("/api/v1/namespaces/default/secrets/", name, "-credentials"));
    SS_ASSERT_OK(secret);
    std::string admin;
    ASSERT_TRUE(absl::Base64Unescape((*secret)["data"]["admin-token"].get<std::string>(), &admin));
    EXPECT_EQ(admin, DeriveJobToken(key, "admin-token", JobObject(name)));
    EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["uid"],
              JobObject(name)["metadata"]["uid"]);
    // The servers mount it; the operator's StatefulSet says so.
    absl::StatusOr<json> sts =
        api_->Get(absl::StrCat("/apis/apps/v1/namespaces/default/statefulsets/", name, "-ps"));
    SS_ASSERT_OK(sts);
    EXPECT_THAT(sts->dump(), ::testing::HasSubstr("--admin-token-file="));
  }
  // More reconciles (a suspend and a resume) create nothing more.
  Suspend("j", true);
  ASSERT_TRUE(kube::Eventually([&] { return Phase("j") == "Suspended"; }));
  int posts = 0;
  for (const testing::FakeKubeApiServer::Request& r : api_->Requests()) {
    if (!absl::StrContains(r.path, "/secrets")) continue;
    EXPECT_EQ(r.method, "POST") << r.path;
    ++posts;
  }
  EXPECT_EQ(posts, 2);
}

}  // namespace
}  // namespace shadowsync::op
