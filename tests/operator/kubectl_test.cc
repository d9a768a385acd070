// Real kubectl 1.31 against the fake API server: keeps the fake honest about
// discovery, OpenAPI, client-side apply, server-side tables, /scale and
// deletion. kubectl comes from scripts/install-kube-tools.sh
// (<source>/.tools/bin/kubectl) or $SHADOWSYNC_KUBECTL; never the system one.
#include <stdio.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/test_util.h"

namespace shadowsync::testing {
namespace {

using json = nlohmann::json;

constexpr char kJob[] = "/apis/test.shadowsync.io/v1alpha1/namespaces/default/testjobs/example";
constexpr char kCrd[] =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/testjobs.test.shadowsync.io";
constexpr char kDeployment[] = "/apis/apps/v1/namespaces/default/deployments/testjob-operator";

std::string KubectlPath() {
  const char* env = std::getenv("SHADOWSYNC_KUBECTL");
  if (env != nullptr && *env != '\0') return env;
  return (std::filesystem::path(SourceDir()) / ".tools" / "bin" / "kubectl").string();
}

std::string Quote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

struct KubectlRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// The table rows of `kubectl get` output, split on whitespace.
std::vector<std::vector<std::string>> Rows(const std::string& output) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipWhitespace())) {
    rows.push_back(absl::StrSplit(line, ' ', absl::SkipWhitespace()));
  }
  return rows;
}

class KubectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kubectl_ = KubectlPath();
    ASSERT_TRUE(std::filesystem::exists(kubectl_))
        << "kubectl 1.31 not found at " << kubectl_
        << ": run scripts/install-kube-tools.sh (or set SHADOWSYNC_KUBECTL)";
    auto api = FakeKubeApiServer::Start();
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
    kubeconfig_ = dir_.File("kubeconfig");
    SS_ASSERT_OK(api_->WriteKubeconfig(kubeconfig_));
    KubectlRun version = Kubectl({"version", "--client", "-o", "json"});
    ASSERT_EQ(version.exit_code, 0) << version.output;
    json v = json::parse(version.output, nullptr, false);
    ASSERT_EQ(v["clientVersion"]["minor"], "31") << "need kubectl 1.31: " << version.output;
    testdata_ = (std::filesystem::path(SourceDir()) / "tests" / "operator" / "testdata").string();
  }

  KubectlRun Kubectl(const std::vector<std::string>& args) {
    std::string cmd =
        absl::StrCat("KUBECONFIG=", Quote(kubeconfig_), " ", Quote(kubectl_), " --cache-dir ",
                     Quote(dir_.File("cache")), " --request-timeout=30s");
    for (const std::string& a : args) absl::StrAppend(&cmd, " ", Quote(a));
    absl::StrAppend(&cmd, " 2>&1");
    KubectlRun run;
    FILE* pipe = popen(cmd.c_str(), "r");
    if (pipe == nullptr) return run;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
    const int status = pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return run;
  }

  std::string Testdata(const std::string& name = "") const {
    return name.empty() ? testdata_ + "/" : testdata_ + "/" + name;
  }

  // CRDs first, then the directory: the order a real cluster needs too.
  void ApplyAll() {
    KubectlRun crd = Kubectl({"apply", "-f", Testdata("00-crd.yaml")});
    ASSERT_EQ(crd.exit_code, 0) << crd.output;
    KubectlRun all = Kubectl({"apply", "-f", Testdata()});
    ASSERT_EQ(all.exit_code, 0) << all.output;
  }

  ScratchDir dir_;
  std::string kubectl_;
  std::string kubeconfig_;
  std::string testdata_;
  std::unique_ptr<FakeKubeApiServer> api_;
};

// kubectl maps every object before applying any, so a CR cannot be applied
// in the same invocation that creates its CRD; a real cluster says the same.
TEST_F(KubectlTest, ApplyingACrdAndItsObjectTogetherNeedsTheCrdFirst) {
  KubectlRun run = Kubectl({"apply", "-f", Testdata()});
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, ::testing::HasSubstr("ensure CRDs are installed first"));
  EXPECT_THAT(run.output, ::testing::HasSubstr("deployment.apps/testjob-operator created"));
  EXPECT_TRUE(api_->Get(kCrd).ok());
  EXPECT_THAT(api_->Get(kJob), StatusIs(absl::StatusCode::kNotFound, ""));
}

TEST_F(KubectlTest, ApplyCreatesEverythingAndReapplyChangesNothing) {
  KubectlRun crd = Kubectl({"apply", "-f", Testdata("00-crd.yaml")});
  ASSERT_EQ(crd.exit_code, 0) << crd.output;
  EXPECT_THAT(crd.output, ::testing::HasSubstr("customresourcedefinition.apiextensions.k8s.io/"
                                               "testjobs.test.shadowsync.io created"));
  KubectlRun all = Kubectl({"apply", "-f", Testdata()});
  ASSERT_EQ(all.exit_code, 0) << all.output;
  for (const char* line : {
           "customresourcedefinition.apiextensions.k8s.io/testjobs.test.shadowsync.io unchanged",
           "serviceaccount/testjob-operator created",
           "clusterrole.rbac.authorization.k8s.io/testjob-operator created",
           "clusterrolebinding.rbac.authorization.k8s.io/testjob-operator created",
           "role.rbac.authorization.k8s.io/testjob-operator-leader-election created",
           "rolebinding.rbac.authorization.k8s.io/testjob-operator-leader-election created",
           "deployment.apps/testjob-operator created",
           "testjob.test.shadowsync.io/example created",
       }) {
    EXPECT_THAT(all.output, ::testing::HasSubstr(line));
  }
  for (const char* path : {
           kJob,
           kDeployment,
           "/api/v1/namespaces/default/serviceaccounts/testjob-operator",
           "/apis/rbac.authorization.k8s.io/v1/clusterroles/testjob-operator",
           "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/testjob-operator",
           "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/"
           "testjob-operator-leader-election",
           "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/"
           "testjob-operator-leader-election",
       }) {
    EXPECT_TRUE(api_->Get(path).ok()) << path;
  }
  auto job = api_->Get(kJob);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["spec"]["trainer"]["replicas"], 2);
  EXPECT_TRUE((*job)["metadata"]["annotations"].contains(
      "kubectl.kubernetes.io/last-applied-configuration"));

  const int64_t revision = api_->resource_version();
  api_->ClearRequests();
  KubectlRun again = Kubectl({"apply", "-f", Testdata()});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  int unchanged = 0;
  for (absl::string_view line : absl::StrSplit(again.output, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::EndsWith(line, " unchanged")) << line;
    ++unchanged;
  }
  EXPECT_EQ(unchanged, 8);
  EXPECT_EQ(api_->resource_version(), revision) << "re-apply wrote something";
  for (const FakeKubeApiServer::Request& r : api_->Requests()) {
    EXPECT_TRUE(r.method == "GET") << r.method << " " << r.path;
  }
}

TEST_F(KubectlTest, GetByShortNamePrintsPrinterColumnsWithLiveStatus) {
  ASSERT_NO_FATAL_FAILURE(ApplyAll());
  KubectlRun get = Kubectl({"get", "tj"});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  std::vector<std::vector<std::string>> rows = Rows(get.output);
  ASSERT_EQ(rows.size(), 2u) << get.output;
  EXPECT_EQ(rows[0], std::vector<std::string>({"NAME", "PHASE", "TRAINERS", "READY", "AGE"}));
  ASSERT_EQ(rows[1].size(), 3u) << get.output;  // no status yet: PHASE and READY are blank
  EXPECT_EQ(rows[1][0], "example");
  EXPECT_EQ(rows[1][1], "2");
  EXPECT_TRUE(absl::EndsWith(rows[1][2], "s")) << rows[1][2];

  // Play the operator: write status through the direct API.
  auto job = api_->Get(kJob);
  ASSERT_TRUE(job.ok());
  (*job)["status"] = {{"phase", "Running"}, {"replicaStatuses", {{"trainer", {{"ready", 2}}}}}};
  SS_ASSERT_OK(api_->UpdateStatus(kJob, *job));
  get = Kubectl({"get", "tj", "example"});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  rows = Rows(get.output);
  ASSERT_EQ(rows.size(), 2u) << get.output;
  ASSERT_EQ(rows[1].size(), 5u) << get.output;
  EXPECT_EQ(rows[1][1], "Running");
  EXPECT_EQ(rows[1][2], "2");
  EXPECT_EQ(rows[1][3], "2");

  (*job) = *api_->Get(kJob);
  (*job)["status"]["phase"] = "Succeeded";
  SS_ASSERT_OK(api_->UpdateStatus(kJob, *job));
  get = Kubectl({"get", "testjobs", "-A"});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  rows = Rows(get.output);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][0], "NAMESPACE");
  EXPECT_EQ(rows[1][0], "default");
  EXPECT_EQ(rows[1][2], "Succeeded");

  // Built-ins print NAME and AGE.
  get = Kubectl({"get", "deploy,sa"});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  EXPECT_THAT(get.output, ::testing::HasSubstr("deployment.apps/testjob-operator"));
  EXPECT_THAT(get.output, ::testing::HasSubstr("serviceaccount/testjob-operator"));
}

TEST_F(KubectlTest, ScaleWritesTheSpecReplicasPath) {
  ASSERT_NO_FATAL_FAILURE(ApplyAll());
  KubectlRun scale = Kubectl({"scale", "testjob/example", "--replicas=3"});
  ASSERT_EQ(scale.exit_code, 0) << scale.output;
  EXPECT_THAT(scale.output, ::testing::HasSubstr("testjob.test.shadowsync.io/example scaled"));
  auto job = api_->Get(kJob);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["spec"]["trainer"]["replicas"], 3);
  EXPECT_EQ((*job)["metadata"]["generation"], 2);

  scale = Kubectl({"scale", "deployment/testjob-operator", "--replicas=2"});
  ASSERT_EQ(scale.exit_code, 0) << scale.output;
  EXPECT_EQ((*api_->Get(kDeployment))["spec"]["replicas"], 2);
}

TEST_F(KubectlTest, GetJsonReturnsTheStoredObjects) {
  ASSERT_NO_FATAL_FAILURE(ApplyAll());
  KubectlRun list = Kubectl({"get", "testjob", "-o", "json"});
  ASSERT_EQ(list.exit_code, 0) << list.output;
  json l = json::parse(list.output, nullptr, false);
  ASSERT_FALSE(l.is_discarded()) << list.output;
  EXPECT_EQ(l["kind"], "List");
  ASSERT_EQ(l["items"].size(), 1u);
  EXPECT_EQ(l["items"][0]["kind"], "TestJob");
  EXPECT_EQ(l["items"][0]["spec"]["trainer"]["replicas"], 2);

  KubectlRun one = Kubectl({"get", "testjob", "example", "-o", "json"});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  json o = json::parse(one.output, nullptr, false);
  EXPECT_EQ(o["metadata"]["uid"], (*api_->Get(kJob))["metadata"]["uid"]);
  EXPECT_EQ(o["metadata"]["resourceVersion"], (*api_->Get(kJob))["metadata"]["resourceVersion"]);

  KubectlRun crd = Kubectl({"get", "crd", "testjobs.test.shadowsync.io", "-o",
                            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}"});
  ASSERT_EQ(crd.exit_code, 0) << crd.output;
  EXPECT_EQ(crd.output, "True");

  KubectlRun selected =
      Kubectl({"get", "testjobs", "-l", "app.kubernetes.io/name=example", "-o", "name"});
  ASSERT_EQ(selected.exit_code, 0) << selected.output;
  EXPECT_EQ(selected.output, "testjob.test.shadowsync.io/example\n");
  selected = Kubectl({"get", "testjobs", "-l", "app.kubernetes.io/name=other", "-o", "name"});
  EXPECT_EQ(selected.output, "");
}

// Re-applying a changed built-in sends a strategic merge patch.
TEST_F(KubectlTest, ReapplyingAChangedDeploymentPatchesIt) {
  ASSERT_NO_FATAL_FAILURE(ApplyAll());
  const std::string changed = absl::StrReplaceAll(
      ReadFile(Testdata("30-deployment.yaml")),
      {{"image: shadowsync:test", "image: shadowsync:v2"}, {"replicas: 1", "replicas: 2"}});
  const std::string path = dir_.File("deployment.yaml");
  WriteFile(path, changed);
  api_->ClearRequests();
  KubectlRun run = Kubectl({"apply", "-f", path});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, ::testing::HasSubstr("deployment.apps/testjob-operator configured"));
  bool patched = false;
  for (const FakeKubeApiServer::Request& r : api_->Requests()) {
    patched = patched || (r.method == "PATCH" && r.path == kDeployment && r.status == 200);
  }
  EXPECT_TRUE(patched);
  auto d = api_->Get(kDeployment);
  ASSERT_TRUE(d.ok());
  const json& container = (*d)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["image"], "shadowsync:v2");
  EXPECT_EQ(container["ports"][0]["containerPort"], 8080) << "merged, not replaced";
  EXPECT_EQ((*d)["spec"]["replicas"], 2);
  EXPECT_EQ((*d)["metadata"]["generation"], 2);

  run = Kubectl({"apply", "-f", path});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, ::testing::HasSubstr("deployment.apps/testjob-operator unchanged"));
}

TEST_F(KubectlTest, DeleteRemovesEverything) {
  ASSERT_NO_FATAL_FAILURE(ApplyAll());
  KubectlRun job = Kubectl({"delete", "-f", Testdata("40-testjob.yaml")});
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_THAT(job.output, ::testing::HasSubstr("testjob.test.shadowsync.io \"example\" deleted"));
  EXPECT_THAT(api_->Get(kJob), StatusIs(absl::StatusCode::kNotFound, ""));

  // The CRD is deleted before the (already gone) object in the directory.
  KubectlRun all = Kubectl({"delete", "-f", Testdata(), "--ignore-not-found"});
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_THAT(all.output, ::testing::HasSubstr("deployment.apps \"testjob-operator\" deleted"));
  EXPECT_THAT(api_->Get(kCrd), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(api_->Get(kDeployment), StatusIs(absl::StatusCode::kNotFound, ""));
  auto roles = api_->List("/apis/rbac.authorization.k8s.io/v1/clusterroles");
  ASSERT_TRUE(roles.ok());
  EXPECT_TRUE(roles->empty());

  KubectlRun get = Kubectl({"get", "tj"});
  EXPECT_NE(get.exit_code, 0);
  // Either from fresh discovery or, with kubectl's cached discovery, from the
  // server's 404 for the unregistered resource.
  EXPECT_THAT(get.output,
              ::testing::AnyOf(::testing::HasSubstr("doesn't have a resource type \"tj\""),
                               ::testing::HasSubstr("could not find the requested resource")));
}

// The product's own manifests: `kubectl apply -f deploy/` (CRD, RBAC,
// operator Deployment) and then the example jobs succeed, and `kubectl get
// ssj` prints the CRD's printer columns with the status the operator wrote.
TEST_F(KubectlTest, DeployManifestsApplyAndGetSsjShowsLiveColumns) {
  const std::string deploy = (std::filesystem::path(SourceDir()) / "deploy").string();
  KubectlRun apply = Kubectl({"apply", "-f", deploy + "/"});
  ASSERT_EQ(apply.exit_code, 0) << apply.output;
  EXPECT_THAT(apply.output, ::testing::HasSubstr("shadowsyncjobs.shadowsync.io created"));
  EXPECT_THAT(apply.output, ::testing::HasSubstr("deployment.apps/shadowsync-operator created"));
  // The operator's Secrets (its pod waits for them): made once, then kept.
  const std::string make_secrets =
      absl::StrCat("KUBECONFIG=", Quote(kubeconfig_), " KUBECTL=", Quote(kubectl_), " bash ",
                   Quote(deploy + "/make-secrets.sh"), " 2>&1");
  std::string out;
  ASSERT_EQ(RunShell(make_secrets, &out), 0) << out;
  const std::string secrets = "/api/v1/namespaces/shadowsync-system/secrets/";
  absl::StatusOr<nlohmann::json> tls = api_->Get(secrets + "shadowsync-tls");
  absl::StatusOr<nlohmann::json> key = api_->Get(secrets + "shadowsync-credentials-key");
  ASSERT_TRUE(tls.ok() && key.ok()) << out;
  for (const char* k : {"ca.crt", "tls.crt", "tls.key"}) {
    std::string pem;
    ASSERT_TRUE(absl::Base64Unescape((*tls)["data"][k].get<std::string>(), &pem)) << k;
    WriteFile(dir_.File(k), pem);
  }
  std::string verified;
  ASSERT_EQ(RunShell(absl::StrCat("openssl verify -purpose sslserver -CAfile ", dir_.File("ca.crt"),
                                  " ", dir_.File("tls.crt"), " && openssl verify -purpose ",
                                  "sslclient -CAfile ", dir_.File("ca.crt"), " ",
                                  dir_.File("tls.crt"), " 2>&1"),
                     &verified),
            0)
      << verified;
  std::string secret_key;
  ASSERT_TRUE(absl::Base64Unescape((*key)["data"]["key"].get<std::string>(), &secret_key));
  EXPECT_GE(secret_key.size(), 32u);
  ASSERT_EQ(RunShell(make_secrets, &out), 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("secret/shadowsync-tls exists in shadowsync-system: kept"));
  EXPECT_EQ((*api_->Get(secrets + "shadowsync-credentials-key"))["data"], (*key)["data"]);
  apply = Kubectl({"apply", "-f", deploy + "/examples/"});
  ASSERT_EQ(apply.exit_code, 0) << apply.output;
  EXPECT_THAT(apply.output, ::testing::HasSubstr("shadowsyncjob.shadowsync.io/quickstart created"));

  const std::string path =
      "/apis/shadowsync.io/v1alpha1/namespaces/default/shadowsyncjobs/quickstart";
  auto job = api_->Get(path);
  ASSERT_TRUE(job.ok()) << job.status();
  (*job)["status"] = {{"phase", "Running"},
                      {"replicaStatuses",
                       {{"trainer", {{"ready", 1}, {"readyOfDesired", "1/2"}}},
                        {"ps", {{"ready", 2}, {"readyOfDesired", "2/2"}}}}},
                      {"restarts", 3},
                      {"export", {{"latest", {{"model", "model-000001"}}}}},
                      {"examplesPerSecond", 51234.5},
                      {"examplesProcessed", 800000}};
  SS_ASSERT_OK(api_->UpdateStatus(path, *job));
  KubectlRun get = Kubectl({"get", "ssj", "quickstart"});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  std::vector<std::vector<std::string>> rows = Rows(get.output);
  ASSERT_EQ(rows.size(), 2u) << get.output;
  EXPECT_EQ(rows[0], std::vector<std::string>({"NAME", "PHASE", "TRAINERS", "PS", "RESTARTS",
                                               "ALGORITHM", "EXAMPLES/S", "EXPORT", "AGE"}))
      << get.output;
  EXPECT_THAT(rows[1],
              ::testing::ElementsAre("quickstart", "Running", "1/2", "2/2", "3", "shadow-easgd",
                                     "51234.5", "model-000001", ::testing::_))
      << get.output;
  EXPECT_THAT(rows[1], ::testing::Contains("Running")) << get.output;
  EXPECT_THAT(rows[1], ::testing::Contains("shadow-easgd")) << get.output;
  EXPECT_THAT(get.output, ::testing::HasSubstr("51234")) << get.output;
  // `kubectl scale` goes through the scale subresource to the trainers.
  KubectlRun scale = Kubectl({"scale", "ssj/quickstart", "--replicas=3"});
  ASSERT_EQ(scale.exit_code, 0) << scale.output;
  EXPECT_EQ((*api_->Get(path))["spec"]["trainer"]["replicas"], 3);
}

// The CRD's schema and CEL rules at `kubectl apply`: the specs the operator
// would refuse at reconcile are refused before they are stored, each problem
// named by its field, all at once; kubectl's strict field validation refuses
// a pod-template field outside the allow-list; transition rules guard the
// immutable fields on update; /scale is validated too.
TEST_F(KubectlTest, TheCrdRefusesInvalidJobsAtApplyNamingEveryField) {
  const std::string deploy = (std::filesystem::path(SourceDir()) / "deploy").string();
  KubectlRun crd = Kubectl({"apply", "-f", deploy + "/crd.yaml"});
  ASSERT_EQ(crd.exit_code, 0) << crd.output;
  const std::string head =
      "apiVersion: shadowsync.io/v1alpha1\nkind: ShadowSyncJob\nmetadata:\n  name: bad\n";
  auto apply = [&](const std::string& name, const std::string& yaml) {
    const std::string path = dir_.File(name + ".yaml");
    WriteFile(path, yaml);
    return Kubectl({"apply", "-f", path});
  };
  struct Case {
    std::string name, spec, field, message;
  };
  const std::vector<Case> cases = {
      {"no-paths", "spec:\n  data: {format: criteo-tsv}\n", "spec.data.paths",
       "Required value: must list at least one file when spec.data.format is criteo-tsv"},
      {"group",
       "spec:\n  trainer: {replicas: 2}\n  sync: {algorithm: ds-sync, dsSync: {groupSize: 4}}\n",
       "spec.sync.dsSync.groupSize", "must be <= spec.trainer.replicas"},
      {"no-syncer", "spec:\n  syncer: {replicas: 0}\n  sync: {algorithm: shadow-easgd}\n",
       "spec.syncer.replicas", "must be >= 1 unless spec.sync.algorithm is none"},
      {"no-spec", "", "spec", "Required value"},
      {"template", "spec:\n  trainer:\n    template: {spec: 42}\n", "spec.trainer.template.spec",
       "must be of type object"},
  };
  const std::string jobs = "/apis/shadowsync.io/v1alpha1/namespaces/default/shadowsyncjobs";
  for (const Case& c : cases) {
    KubectlRun run = apply(c.name, head + c.spec);
    EXPECT_NE(run.exit_code, 0) << c.name << ": " << run.output;
    EXPECT_THAT(run.output, ::testing::HasSubstr("The ShadowSyncJob \"bad\" is invalid: "))
        << c.name;
    EXPECT_THAT(run.output, ::testing::HasSubstr(c.field + ": ")) << c.name << ": " << run.output;
    EXPECT_THAT(run.output, ::testing::HasSubstr(c.message)) << c.name << ": " << run.output;
    EXPECT_TRUE(absl::IsNotFound(api_->Get(jobs + "/bad").status())) << c.name;
  }
  // Every problem of one spec in one answer.
  KubectlRun all = apply("all", head +
                                    "spec:\n  data: {format: criteo-tsv}\n  syncer: {replicas: 0}\n"
                                    "  trainer:\n    threads: 0\n"
                                    "    template: {spec: {securityContext: {runAsUser: 0}}}\n");
  EXPECT_NE(all.exit_code, 0);
  for (const char* field : {"spec.data.paths: ", "spec.syncer.replicas: ", "spec.trainer.threads: ",
                            "spec.trainer.template.spec.securityContext.runAsUser: "}) {
    EXPECT_THAT(all.output, ::testing::HasSubstr(field)) << all.output;
  }
  // Strict field validation (kubectl's default) refuses a field the pod
  // template's allow-list lacks; the server would otherwise drop it.
  KubectlRun host =
      apply("host", head + "spec:\n  trainer:\n    template:\n      spec: {hostNetwork: true}\n");
  EXPECT_NE(host.exit_code, 0);
  EXPECT_THAT(
      host.output,
      ::testing::HasSubstr(
          "strict decoding error: unknown field \"spec.trainer.template.spec.hostNetwork\""))
      << host.output;
  KubectlRun warned = Kubectl({"apply", "--validate=warn", "-f", dir_.File("host.yaml")});
  ASSERT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_THAT(warned.output,
              ::testing::HasSubstr("unknown field \"spec.trainer.template.spec.hostNetwork\""));
  absl::StatusOr<json> stored = api_->Get(jobs + "/bad");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ((*stored)["spec"]["trainer"]["template"]["spec"], json::object()) << "pruned";
  EXPECT_EQ((*stored)["spec"]["trainer"]["replicas"], 2) << "defaulted";

  // Transition rules: the model cannot change; the trainers can scale, but not
  // below a ds-sync group.
  KubectlRun ok = apply("ok", head +
                                  "spec:\n  trainer: {replicas: 4}\n  syncer: {replicas: 1}\n"
                                  "  sync: {algorithm: ds-sync, dsSync: {groupSize: 2}}\n");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  KubectlRun model =
      apply("model", head +
                         "spec:\n  model: {embeddingDim: 32}\n  trainer: {replicas: 4}\n"
                         "  syncer: {replicas: 1}\n"
                         "  sync: {algorithm: ds-sync, dsSync: {groupSize: 2}}\n");
  EXPECT_NE(model.exit_code, 0);
  EXPECT_THAT(model.output, ::testing::HasSubstr("spec.model cannot be added or removed"))
      << model.output;
  KubectlRun scale = Kubectl({"scale", "ssj/bad", "--replicas=1"});
  EXPECT_NE(scale.exit_code, 0);
  EXPECT_THAT(scale.output, ::testing::HasSubstr("spec.sync.dsSync.groupSize")) << scale.output;
  EXPECT_EQ((*api_->Get(jobs + "/bad"))["spec"]["trainer"]["replicas"], 4);
  scale = Kubectl({"scale", "ssj/bad", "--replicas=6"});
  EXPECT_EQ(scale.exit_code, 0) << scale.output;

  // /status writes are held to the status schema: a wrong type is refused,
  // a field the schema lacks is dropped, as a real server would.
  json job = *api_->Get(jobs + "/bad");
  job["status"] = {{"phase", "Running"}, {"restarts", "three"}};
  absl::Status wrong = api_->UpdateStatus(jobs + "/bad", job).status();
  EXPECT_TRUE(absl::IsInvalidArgument(wrong)) << wrong;
  EXPECT_THAT(std::string(wrong.message()), ::testing::HasSubstr("status.restarts"));
  job["status"] = {{"phase", "Running"}, {"restarts", 3}, {"mood", "fine"}};
  SS_ASSERT_OK(api_->UpdateStatus(jobs + "/bad", job));
  EXPECT_EQ((*api_->Get(jobs + "/bad"))["status"], json({{"phase", "Running"}, {"restarts", 3}}));

  // A CRD whose rule does not compile is refused, as kube-apiserver would.
  std::string broken = ReadFile(deploy + "/crd.yaml");
  const std::string rule = "rule: self == oldSelf";
  ASSERT_NE(broken.find(rule), std::string::npos);
  broken.replace(broken.find(rule), rule.size(), "rule: self.nosuch == oldSelf");
  KubectlRun refused = apply("broken-crd", broken);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, ::testing::HasSubstr("compilation failed: undefined field 'nosuch'"))
      << refused.output;
  refused = Kubectl({"apply", "-f", dir_.File("broken-crd.yaml")});  // Not accepted the 2nd time.
  EXPECT_NE(refused.exit_code, 0) << refused.output;
}

}  // namespace
}  // namespace shadowsync::testing
