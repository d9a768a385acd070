// Reconcile (operator/reconcile.h) driven through a tiny in-memory cluster:
// applied children are stored as the API server would (with defaults added),
// the new status is written back to the job, pods and the parameter servers'
// shard map are set by each test.
#include "operator/reconcile.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec.h"
#include "operator/crd.h"
#include "tests/util/test_util.h"

namespace shadowsync::op {
namespace {

using json = nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::IsSupersetOf;
using ::testing::Not;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

json BaseJob() {
  return json::parse(R"({
    "apiVersion": "shadowsync.io/v1alpha1", "kind": "ShadowSyncJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "uid-1", "generation": 1,
                 "labels": {"team": "ads"},
                 "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
    "spec": {
      "model": {"criteoTables": {"hashBuckets": 1000}},
      "data": {"format": "synthetic", "synthetic": {"examples": 10000, "evalExamples": 100}},
      "trainer": {"replicas": 2},
      "parameterServer": {"replicas": 2, "storage": {"size": "1Gi"}},
      "syncer": {"replicas": 1},
      "runPolicy": {"backoffLimit": 3}
    }})");
}

struct PodState {
  bool ready = true;
  std::string phase = "Running";
  int restart_count = 0;
  std::optional<int> last_exit;  // lastState.terminated.exitCode
  std::optional<int> exit_now;   // state.terminated.exitCode
  bool waiting = false;          // state.waiting (back-off)
  bool deleting = false;
  std::string message;  // The terminated state's message (of exit_now, else last_exit).
};

json Pod(const std::string& job, Role role, int index, const PodState& s = {}) {
  const std::string role_name(RoleName(role));
  json container = {{"name", role_name}, {"restartCount", s.restart_count}};
  if (s.exit_now) {
    container["state"] = {{"terminated", {{"exitCode", *s.exit_now}}}};
    if (!s.message.empty()) container["state"]["terminated"]["message"] = s.message;
  } else if (s.waiting) {
    container["state"] = {{"waiting", {{"reason", "CrashLoopBackOff"}}}};
  } else {
    container["state"] = {{"running", {{"startedAt", "2027-01-15T08:00:00Z"}}}};
  }
  if (s.last_exit) {
    container["lastState"] = {{"terminated", {{"exitCode", *s.last_exit}}}};
    if (!s.message.empty() && !s.exit_now) {
      container["lastState"]["terminated"]["message"] = s.message;
    }
  }
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", ChildName(job, role) + "-" + std::to_string(index)},
                {"namespace", "ns"},
                {"labels", {{"shadowsync.io/job-name", job}, {"shadowsync.io/role", role_name}}}}},
              {"status",
               {{"phase", s.phase},
                {"conditions", {{{"type", "Ready"}, {"status", s.ready ? "True" : "False"}}}},
                {"containerStatuses", {container}}}}};
  if (s.deleting) pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z";
  return pod;
}

PsClusterState Shards(std::vector<int> slots_per_server, uint64_t epoch = 1) {
  PsClusterState ps;
  ps.epoch = epoch;
  for (int n : slots_per_server) ps.num_slots += n;
  ps.slots_per_server = std::move(slots_per_server);
  return ps;
}

// Every key of `value` is declared by `schema` (else the API server's
// structural pruning would drop it).
void ExpectDeclared(const json& value, const json& schema, const std::string& path) {
  if (value.is_object()) {
    if (schema.value("x-kubernetes-preserve-unknown-fields", false)) return;
    for (const auto& [k, v] : value.items()) {
      ASSERT_TRUE(schema.contains("properties") && schema["properties"].contains(k))
          << path << "." << k << " is not in the CRD's status schema";
      ExpectDeclared(v, schema["properties"][k], path + "." + k);
    }
  } else if (value.is_array()) {
    for (const json& item : value) ExpectDeclared(item, schema["items"], path + "[]");
  }
}

// The API server's view: children by kind and name, pods, the job.
class Cluster {
 public:
  explicit Cluster(json job = BaseJob()) : job_(std::move(job)) {}

  Actions Step() {
    Observed o{.job = job_,
               .stateful_sets = stateful_sets_,
               .services = services_,
               .config_maps = config_maps_,
               .network_policies = network_policies_,
               .disruption_budgets = disruption_budgets_,
               .pod_groups = pod_groups_,
               .pods = pods_,
               .ps = ps,
               .examples_processed = examples_processed,
               .latest_export = latest_export,
               .init_imported_rows = init_imported_rows,
               .now = now};
    Actions a = Reconcile(o, options);
    for (const json& child : a.apply) Store(child);
    ExpectDeclared(a.status, JobStatusOpenApiSchema(), "status");
    job_["status"] = a.status;
    return a;
  }

  // Edits the spec, bumping metadata.generation as the API server does.
  void EditSpec(const std::function<void(json&)>& edit) {
    edit(job_["spec"]);
    job_["metadata"]["generation"] = job_["metadata"]["generation"].get<int>() + 1;
  }

  void SetPods(Role role, int n, const PodState& s = {}) {
    std::erase_if(pods_, [&](const json& p) {
      return p["metadata"]["labels"]["shadowsync.io/role"] == RoleName(role);
    });
    for (int i = 0; i < n; ++i) pods_.push_back(Pod("j", role, i, s));
  }
  void SetPod(Role role, int index, const PodState& s) {
    const std::string name = ChildName("j", role) + "-" + std::to_string(index);
    std::erase_if(pods_, [&](const json& p) { return p["metadata"]["name"] == name; });
    pods_.push_back(Pod("j", role, index, s));
  }
  // Every pod the StatefulSets ask for, ready.
  void AllPodsReady() {
    for (Role role : kRoles) SetPods(role, Replicas(role));
  }

  int Replicas(Role role) const {
    return stateful_sets_.at(ChildName("j", role))["spec"]["replicas"].get<int>();
  }
  const json& StatefulSet(Role role) const { return stateful_sets_.at(ChildName("j", role)); }
  const json& ConfigMap() const { return config_maps_.at("j-config"); }
  const json& status() const { return job_["status"]; }
  json& job() { return job_; }
  const json& Condition(const std::string& type) const {
    for (const json& c : job_["status"]["conditions"]) {
      if (c["type"] == type) return c;
    }
    static const json kNone;
    return kNone;
  }
  size_t children() const {
    return stateful_sets_.size() + services_.size() + config_maps_.size() +
           network_policies_.size() + disruption_budgets_.size() + pod_groups_.size();
  }
  const std::map<std::string, json>& network_policies() const { return network_policies_; }
  const std::map<std::string, json>& disruption_budgets() const { return disruption_budgets_; }

  std::optional<PsClusterState> ps;
  std::optional<int64_t> examples_processed;
  std::optional<json> latest_export;
  std::optional<int64_t> init_imported_rows;
  absl::Time now = kT0;
  std::map<std::string, json> claims;  // PersistentVolumeClaims created, by name.
  ReconcileOptions options;

 private:
  // As the API server stores it: with defaults and server fields added.
  void Store(json child) {
    child["metadata"]["resourceVersion"] = "7";
    child["metadata"]["uid"] = "child-uid";
    const std::string kind = child["kind"];
    const std::string name = child["metadata"]["name"];
    if (kind == "StatefulSet") {
      child["spec"]["revisionHistoryLimit"] = 10;
      for (json& c : child["spec"]["template"]["spec"]["containers"]) {
        c["terminationMessagePath"] = "/dev/termination-log";
      }
      child["status"] = {{"replicas", child["spec"]["replicas"]}};
      stateful_sets_[name] = child;
    } else if (kind == "Service") {
      child["spec"]["clusterIPs"] = {"None"};
      services_[name] = child;
    } else if (kind == "ConfigMap") {
      config_maps_[name] = child;
    } else if (kind == "NetworkPolicy") {
      network_policies_[name] = child;
    } else if (kind == "PodDisruptionBudget") {
      disruption_budgets_[name] = child;
    } else if (kind == "PodGroup") {
      pod_groups_[name] = child;
    } else if (kind == "PersistentVolumeClaim") {
      EXPECT_FALSE(claims.contains(name)) << "claim " << name << " created twice";
      claims[name] = child;
    } else {
      ADD_FAILURE() << "unexpected kind " << kind;
    }
  }

  json job_;
  std::map<std::string, json> stateful_sets_, services_, config_maps_;
  std::map<std::string, json> network_policies_, disruption_budgets_, pod_groups_;
  std::vector<json> pods_;
};

std::vector<std::string> Names(const std::vector<json>& objects) {
  std::vector<std::string> names;
  for (const json& o : objects)
    names.push_back(o["kind"].get<std::string>() + "/" + o["metadata"]["name"].get<std::string>());
  return names;
}

std::vector<std::string> Reasons(const std::vector<EventSpec>& events) {
  std::vector<std::string> reasons;
  for (const EventSpec& e : events) reasons.push_back(e.type + "/" + e.reason);
  return reasons;
}

// A job whose pods are all ready, with the servers' shard map observed.
// BaseJob with `n` parameter servers.
json JobWithServers(int n) {
  json job = BaseJob();
  job["spec"]["parameterServer"]["replicas"] = n;
  return job;
}

// `job` created and every pod ready; the servers not asked for their map yet.
Cluster PodsReady(json job = BaseJob()) {
  Cluster c(std::move(job));
  c.Step();
  c.AllPodsReady();
  return c;
}

Cluster RunningCluster(json job = BaseJob()) {
  Cluster c = PodsReady(std::move(job));
  c.ps = Shards({2048, 2048});
  c.now += absl::Seconds(10);
  c.Step();
  EXPECT_EQ(c.status()["phase"], "Running");
  return c;
}

// --- Creation -----------------------------------------------------------------------------

TEST(ReconcileTest, FreshJobCreatesEveryChildWithOwnerReferences) {
  Cluster c;
  const Actions a = c.Step();
  EXPECT_THAT(Names(a.apply),
              ElementsAre("ConfigMap/j-config", "Service/j-trainer", "Service/j-ps",
                          "Service/j-syncer", "NetworkPolicy/j-servers", "PodDisruptionBudget/j-ps",
                          "StatefulSet/j-ps", "StatefulSet/j-syncer", "StatefulSet/j-trainer"));
  for (const json& child : a.apply) {
    SCOPED_TRACE(child["metadata"]["name"]);
    EXPECT_EQ(child["metadata"]["namespace"], "ns");
    EXPECT_EQ(child["metadata"]["ownerReferences"], json::parse(R"([{
      "apiVersion": "shadowsync.io/v1alpha1", "kind": "ShadowSyncJob", "name": "j",
      "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}])"));
    const json& labels = child["metadata"]["labels"];
    EXPECT_EQ(labels["shadowsync.io/job-name"], "j");
    EXPECT_EQ(labels["app.kubernetes.io/instance"], "j");
    EXPECT_EQ(labels["app.kubernetes.io/managed-by"], "shadowsync-operator");
    EXPECT_EQ(labels["team"], "ads");  // The job's labels go onto every child.
    if (child["kind"] != "ConfigMap" && child["kind"] != "NetworkPolicy") {
      EXPECT_TRUE(labels.contains("shadowsync.io/role"));
    }
  }
  EXPECT_EQ(c.status()["phase"], "Pending");
  EXPECT_EQ(c.Condition("Created")["status"], "True");
  EXPECT_EQ(c.Condition("Running")["status"], "False");
  EXPECT_EQ(c.Condition("Failed")["status"], "False");
  EXPECT_EQ(c.status()["observedGeneration"], 1);
  EXPECT_EQ(c.status()["selector"], "shadowsync.io/job-name=j,shadowsync.io/role=trainer");
  EXPECT_EQ(c.status()["startTime"], "2027-01-15T08:00:00Z");
  EXPECT_THAT(Reasons(a.events), ElementsAre("Normal/Created"));
  EXPECT_EQ(a.reshard, std::nullopt);
  EXPECT_THAT(a.delete_paths, IsEmpty());
  for (const json& cond : c.status()["conditions"]) {
    EXPECT_EQ(cond["observedGeneration"], 1);
    EXPECT_EQ(cond["lastTransitionTime"], "2027-01-15T08:00:00Z");
  }

  // Nothing changed: nothing to do.
  c.now += absl::Seconds(5);
  const Actions again = c.Step();
  EXPECT_THAT(again.apply, IsEmpty());
  EXPECT_THAT(again.events, IsEmpty());
}

TEST(ReconcileTest, ServicesAreHeadlessAndPublishNotReadyAddresses) {
  Cluster c;
  const Actions a = c.Step();
  for (const json& child : a.apply) {
    if (child["kind"] != "Service") continue;
    SCOPED_TRACE(child["metadata"]["name"]);
    EXPECT_EQ(child["spec"]["clusterIP"], "None");
    EXPECT_EQ(child["spec"]["publishNotReadyAddresses"], true);
    const std::string role = child["metadata"]["labels"]["shadowsync.io/role"];
    EXPECT_EQ(child["spec"]["selector"],
              json({{"shadowsync.io/job-name", "j"}, {"shadowsync.io/role", role}}));
  }
}

TEST(ReconcileTest, StatefulSetsRunThePodCommand) {
  struct Case {
    Role role;
    int replicas;
    std::optional<int> grpc_port;
  };
  Cluster c;
  c.Step();
  for (const Case& k : {Case{Role::kTrainer, 2, std::nullopt}, Case{Role::kPs, 2, 7000},
                        Case{Role::kSyncer, 1, 7100}}) {
    const std::string role(RoleName(k.role));
    SCOPED_TRACE(role);
    const json& sts = c.StatefulSet(k.role);
    EXPECT_EQ(sts["spec"]["replicas"], k.replicas);
    EXPECT_EQ(sts["spec"]["serviceName"], "j-" + role);
    EXPECT_EQ(sts["spec"]["podManagementPolicy"], "Parallel");
    EXPECT_EQ(sts["spec"]["selector"]["matchLabels"],
              json({{"shadowsync.io/job-name", "j"}, {"shadowsync.io/role", role}}));
    const json& pod = sts["spec"]["template"];
    EXPECT_EQ(pod["metadata"]["labels"]["shadowsync.io/role"], role);
    EXPECT_EQ(pod["spec"]["restartPolicy"], "Always");
    EXPECT_EQ(pod["spec"]["automountServiceAccountToken"], false);
    EXPECT_EQ(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    const json& main = pod["spec"]["containers"][0];
    // Requests the scheduler can place by; no limits the author did not set.
    const json& requests = main["resources"]["requests"];
    EXPECT_EQ(requests["cpu"], k.role == Role::kTrainer ? "2" : k.role == Role::kPs ? "1" : "500m");
    if (k.role == Role::kPs) {  // The row cache (1Gi by default) plus 1Gi.
      EXPECT_EQ(requests["memory"], std::to_string(int64_t{2} << 30));
    }
    EXPECT_FALSE(main["resources"].contains("limits"));
    EXPECT_EQ(main["name"], role);
    EXPECT_EQ(main["image"], "shadowsync:0.1.0");
    const std::vector<std::string> args = main["args"];
    EXPECT_THAT(args, ::testing::IsSupersetOf({std::string("pod"), "--role=" + role,
                                               std::string("--config=/etc/shadowsync/job.json")}));
    EXPECT_EQ(args[0], "pod");
    EXPECT_THAT(args, Contains("--metrics-listen=0.0.0.0:9100"));
    std::map<std::string, int> ports;
    for (const json& p : main["ports"]) ports[p["name"]] = p["containerPort"];
    EXPECT_EQ(ports["metrics"], 9100);
    if (k.grpc_port) {
      EXPECT_EQ(ports["grpc"], *k.grpc_port);
      EXPECT_THAT(args, Contains("--listen=0.0.0.0:" + std::to_string(*k.grpc_port)));
    } else {
      EXPECT_FALSE(ports.contains("grpc"));
    }
    EXPECT_EQ(main["readinessProbe"]["httpGet"], json({{"path", "/healthz"}, {"port", "metrics"}}));
    EXPECT_EQ(main["livenessProbe"]["httpGet"], json({{"path", "/livez"}, {"port", "metrics"}}));
    std::map<std::string, json> env;
    for (const json& e : main["env"]) env[e["name"]] = e;
    EXPECT_EQ(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    EXPECT_EQ(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
    EXPECT_EQ(main["securityContext"]["readOnlyRootFilesystem"], true);
    std::map<std::string, std::string> mounts;
    for (const json& m : main["volumeMounts"]) mounts[m["mountPath"]] = m["name"];
    EXPECT_EQ(mounts["/etc/shadowsync"], "config");
    EXPECT_EQ(mounts["/var/lib/shadowsync"], "data");
  }
  // The servers keep their RocksDB on a claim per pod.
  const json& claims = c.StatefulSet(Role::kPs)["spec"]["volumeClaimTemplates"];
  ASSERT_EQ(claims.size(), 1u);
  EXPECT_EQ(claims[0]["metadata"]["name"], "data");
  EXPECT_EQ(claims[0]["spec"]["resources"]["requests"]["storage"], "1Gi");
  EXPECT_FALSE(c.StatefulSet(Role::kTrainer)["spec"].contains("volumeClaimTemplates"));
}

TEST(ReconcileTest, SecuredJobsMountTheSecretsAndPassFilePathsOnly) {
  json job = BaseJob();
  job["spec"]["security"] = {{"tls", {{"secretName", "my-tls"}}},
                             {"authToken", {{"secretName", "my-token"}}}};
  Cluster c(job);
  c.Step();
  for (Role role : kRoles) {
    SCOPED_TRACE(std::string(RoleName(role)));
    const json& pod = c.StatefulSet(role)["spec"]["template"]["spec"];
    const json& main = pod["containers"][0];
    const std::vector<std::string> args = main["args"];
    EXPECT_THAT(args, ::testing::IsSupersetOf({"--tls-ca-file=/etc/shadowsync/tls/ca.crt",
                                               "--tls-cert-file=/etc/shadowsync/tls/tls.crt",
                                               "--tls-key-file=/etc/shadowsync/tls/tls.key",
                                               "--tls-server-name=shadowsync",
                                               "--auth-token-file=/etc/shadowsync/auth/token"}));
    // The Secrets are projected, read-only, into the config volume at
    // /etc/shadowsync/{tls,auth}: a mount nested in the read-only config
    // mount could not be created.
    const json* config = nullptr;
    for (const json& v : pod["volumes"]) {
      if (v["name"] == "config") config = &v;
    }
    ASSERT_NE(config, nullptr);
    ASSERT_TRUE(config->contains("projected")) << config->dump();
    const json& sources = (*config)["projected"]["sources"];
    EXPECT_EQ((*config)["projected"]["defaultMode"], 0440);
    EXPECT_EQ(sources[0], json({{"configMap", {{"name", "j-config"}}}}));
    EXPECT_EQ(sources[1], json::parse(R"({"secret": {"name": "my-tls", "items": [
                  {"key": "ca.crt", "path": "tls/ca.crt"},
                  {"key": "tls.crt", "path": "tls/tls.crt"},
                  {"key": "tls.key", "path": "tls/tls.key"}]}})"));
    EXPECT_EQ(sources[2], json::parse(R"({"secret": {"name": "my-token", "items": [
                  {"key": "token", "path": "auth/token"}]}})"));
    bool config_read_only = false;
    for (const json& m : main["volumeMounts"]) {
      if (m["name"] == "config") {
        EXPECT_EQ(m["mountPath"], "/etc/shadowsync");
        config_read_only = m.value("readOnly", false);
      }
    }
    EXPECT_TRUE(config_read_only);
    // Nothing carries a secret's value: no env from Secrets, no token flag.
    for (const std::string& a : args) {
      EXPECT_FALSE(absl::StartsWith(a, "--auth-token=")) << a;
    }
    EXPECT_THAT(main.dump(), Not(HasSubstr("secretKeyRef")));
  }
}

TEST(ReconcileTest, SecretsOutsideTheConfigDirGetTheirOwnReadOnlyVolumes) {
  json job = BaseJob();
  job["spec"]["security"] = {{"tls", {{"secretName", "my-tls"}}}};
  Cluster c(job);
  c.options.config_dir = "/config";
  c.Step();
  const json& pod = c.StatefulSet(Role::kPs)["spec"]["template"]["spec"];
  std::map<std::string, json> volumes;
  for (const json& v : pod["volumes"]) volumes[v["name"]] = v;
  EXPECT_EQ(volumes["shadowsync-tls"]["secret"],
            json({{"secretName", "my-tls"}, {"defaultMode", 0440}}));
  EXPECT_TRUE(volumes["config"].contains("configMap"));
  EXPECT_FALSE(volumes.contains("shadowsync-auth-token"));
  std::map<std::string, json> mounts;
  for (const json& m : pod["containers"][0]["volumeMounts"]) mounts[m["name"]] = m;
  EXPECT_EQ(mounts["shadowsync-tls"]["mountPath"], "/etc/shadowsync/tls");
  EXPECT_EQ(mounts["shadowsync-tls"]["readOnly"], true);
  const std::vector<std::string> args = pod["containers"][0]["args"];
  EXPECT_THAT(args, Contains("--tls-cert-file=/etc/shadowsync/tls/tls.crt"));
  EXPECT_THAT(args, Not(Contains(HasSubstr("--auth-token-file"))));
}

// With credentials (a `helm install` by default): every pod gets the job's
// auth token and the operator's TLS files from "<job>-credentials"; only
// the parameter servers get the admin token, and the trainers only when they
// warm-start (trainer 0 imports the export with ImportSlots).
TEST(ReconcileTest, CredentialsGiveTheAdminTokenToTheServersOnly) {
  for (const bool warm_start : {false, true}) {
    SCOPED_TRACE(warm_start ? "warm start" : "cold start");
    json job = BaseJob();
    if (warm_start) {
      job["spec"]["init"] = {{"fromModel", "model-000001"}, {"volumeClaimName", "exports"}};
    }
    Cluster c(job);
    c.options.credentials = true;
    c.options.credentials_tls = true;
    c.Step();
    for (Role role : kRoles) {
      SCOPED_TRACE(std::string(RoleName(role)));
      const json& pod = c.StatefulSet(role)["spec"]["template"]["spec"];
      const std::vector<std::string> args = pod["containers"][0]["args"];
      EXPECT_THAT(args,
                  ::testing::IsSupersetOf({"--tls-ca-file=/etc/shadowsync/credentials/ca.crt",
                                           "--tls-cert-file=/etc/shadowsync/credentials/tls.crt",
                                           "--tls-key-file=/etc/shadowsync/credentials/tls.key",
                                           "--tls-server-name=shadowsync",
                                           "--auth-token-file=/etc/shadowsync/credentials/token"}));
      const bool admin = role == Role::kPs || (warm_start && role == Role::kTrainer);
      json items = json::parse(R"([{"key": "ca.crt", "path": "credentials/ca.crt"},
                                   {"key": "tls.crt", "path": "credentials/tls.crt"},
                                   {"key": "tls.key", "path": "credentials/tls.key"},
                                   {"key": "token", "path": "credentials/token"}])");
      if (admin) {
        EXPECT_THAT(args, Contains("--admin-token-file=/etc/shadowsync/credentials/admin-token"));
        items.push_back({{"key", "admin-token"}, {"path", "credentials/admin-token"}});
      } else {
        EXPECT_THAT(args, Not(Contains(HasSubstr("--admin-token-file"))));
      }
      const json* config = nullptr;
      for (const json& v : pod["volumes"]) {
        if (v["name"] == "config") config = &v;
      }
      ASSERT_NE(config, nullptr);
      ASSERT_TRUE(config->contains("projected")) << config->dump();
      EXPECT_EQ((*config)["projected"]["sources"][1],
                json({{"secret", {{"name", "j-credentials"}, {"items", items}}}}));
    }
  }
  // The job's own Secrets win over the credentials' TLS and token; the
  // servers still get the admin token.
  json job = BaseJob();
  job["spec"]["security"] = {{"tls", {{"secretName", "my-tls"}}},
                             {"authToken", {{"secretName", "my-token"}}}};
  Cluster c(job);
  c.options.credentials = true;
  c.options.credentials_tls = true;
  c.Step();
  const std::vector<std::string> ps_args =
      c.StatefulSet(Role::kPs)["spec"]["template"]["spec"]["containers"][0]["args"];
  EXPECT_THAT(ps_args, ::testing::IsSupersetOf(
                           {"--tls-ca-file=/etc/shadowsync/tls/ca.crt",
                            "--auth-token-file=/etc/shadowsync/auth/token",
                            "--admin-token-file=/etc/shadowsync/credentials/admin-token"}));
  EXPECT_THAT(ps_args, Not(Contains(HasSubstr("credentials/token"))));
  EXPECT_THAT(ps_args, Not(Contains(HasSubstr("credentials/ca.crt"))));
}

// A job whose servers started before the operator had credentials keeps
// running without them: a restarted pod with TLS and tokens could not talk
// to its peers. A new job gets them.
TEST(ReconcileTest, AJobStartedWithoutCredentialsKeepsRunningWithout) {
  Cluster c;
  c.Step();  // Without credentials.
  const json ps_before = c.StatefulSet(Role::kPs);
  ASSERT_THAT(ps_before.dump(), Not(HasSubstr("--admin-token-file")));
  EXPECT_FALSE(UsesCredentials(&ps_before, {.credentials = true}));
  c.options.credentials = true;
  c.options.credentials_tls = true;
  c.Step();
  EXPECT_EQ(c.StatefulSet(Role::kPs), ps_before);
  EXPECT_THAT(c.StatefulSet(Role::kTrainer).dump(), Not(HasSubstr("credentials")));

  EXPECT_TRUE(UsesCredentials(nullptr, {.credentials = true}));
  EXPECT_FALSE(UsesCredentials(nullptr, {}));
  Cluster fresh;
  fresh.options.credentials = true;
  fresh.Step();
  const json ps_new = fresh.StatefulSet(Role::kPs);
  EXPECT_TRUE(UsesCredentials(&ps_new, {.credentials = true}));
}

TEST(ReconcileTest, TheCredentialsSecretIsOwnedByTheJobAndHoldsItsData) {
  json job = BaseJob();
  const json secret = RenderCredentialsSecret(
      job, {{"admin-token", "a1"}, {"token", "t1"}, {"ca.crt", "-----BEGIN CERTIFICATE-----"}}, {});
  EXPECT_EQ(secret["kind"], "Secret");
  EXPECT_EQ(secret["metadata"]["name"], "j-credentials");
  EXPECT_EQ(secret["metadata"]["namespace"], "ns");
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["uid"], job["metadata"]["uid"]);
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(secret["metadata"]["labels"]["shadowsync.io/job-name"], "j");
  EXPECT_EQ(secret["data"], json({{"admin-token", "YTE="},
                                  {"token", "dDE="},
                                  {"ca.crt", "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"}}));
  EXPECT_EQ(ObjectPath(secret), "/api/v1/namespaces/ns/secrets/j-credentials");
}

TEST(ReconcileTest, UnsecuredJobsGetNoSecurityFlagsOrSecrets) {
  Cluster c;
  c.Step();
  const json& pod = c.StatefulSet(Role::kTrainer)["spec"]["template"]["spec"];
  EXPECT_THAT(pod.dump(), Not(HasSubstr("--tls-")));
  EXPECT_THAT(pod.dump(), Not(HasSubstr("--auth-token")));
  EXPECT_THAT(pod.dump(), Not(HasSubstr("\"secret")));
}

TEST(ReconcileTest, ConfigMapHoldsTheRenderedJobAndTheShardMap) {
  Cluster c;
  c.Step();
  const json& data = c.ConfigMap()["data"];
  absl::StatusOr<ShadowSyncJob> rendered = ParseJobJson(data["job.json"].get<std::string>());
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  absl::StatusOr<ShadowSyncJob> expected = JobFromJson(BaseJob());
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(rendered->spec, expected->spec);
  EXPECT_EQ(rendered->metadata.name, "j");
  EXPECT_EQ(rendered->metadata.namespace_name, "ns");
  EXPECT_TRUE(rendered->metadata.annotations.empty());
  const json shard_map = json::parse(data["shard-map.json"].get<std::string>());
  EXPECT_EQ(shard_map["numServers"], 2);
  EXPECT_EQ(shard_map["slots"], 4096);
  EXPECT_EQ(shard_map["psAddresses"], json({"j-ps-0.j-ps.ns.svc:7000", "j-ps-1.j-ps.ns.svc:7000"}));
  EXPECT_EQ(shard_map["syncerAddresses"], json({"j-syncer-0.j-syncer.ns.svc:7100"}));
}

// Only the job's own pods and the operator's may open its servers' gRPC
// ports; /metrics stays open. A drain takes one parameter server at a time.
// Without --network-policy, a policy made before is deleted.
TEST(ReconcileTest, EveryJobGetsANetworkPolicyAndAServerDisruptionBudget) {
  Cluster c;
  c.options.operator_namespace = "ops";
  c.options.operator_pod_labels = {{"app.kubernetes.io/name", "op"}};
  c.Step();
  ASSERT_EQ(c.network_policies().count("j-servers"), 1u);
  const json& policy = c.network_policies().at("j-servers");
  EXPECT_EQ(policy["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(policy["metadata"]["ownerReferences"][0]["name"], "j");
  const json& spec = policy["spec"];
  EXPECT_EQ(spec["policyTypes"], json({"Ingress"}));
  EXPECT_EQ(spec["podSelector"]["matchLabels"], json({{"shadowsync.io/job-name", "j"}}));
  EXPECT_EQ(spec["podSelector"]["matchExpressions"][0]["values"], json({"ps", "syncer"}));
  ASSERT_EQ(spec["ingress"].size(), 2u);
  const json& grpc = spec["ingress"][0];
  EXPECT_EQ(grpc["ports"], json::parse(R"([{"port": 7000, "protocol": "TCP"},
                                            {"port": 7100, "protocol": "TCP"}])"));
  EXPECT_EQ(grpc["from"][0], json::parse(R"({"podSelector":
                                             {"matchLabels": {"shadowsync.io/job-name": "j"}}})"));
  EXPECT_EQ(grpc["from"][1], json::parse(R"({
      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
      "podSelector": {"matchLabels": {"app.kubernetes.io/name": "op"}}})"));
  const json& metrics = spec["ingress"][1];
  EXPECT_FALSE(metrics.contains("from"));  // Prometheus and the kubelet's probes.
  EXPECT_EQ(metrics["ports"], json::parse(R"([{"port": 9100, "protocol": "TCP"}])"));

  ASSERT_EQ(c.disruption_budgets().count("j-ps"), 1u);
  const json& budget = c.disruption_budgets().at("j-ps");
  EXPECT_EQ(budget["apiVersion"], "policy/v1");
  EXPECT_EQ(budget["spec"]["maxUnavailable"], 1);
  EXPECT_EQ(budget["spec"]["selector"]["matchLabels"],
            json({{"shadowsync.io/job-name", "j"}, {"shadowsync.io/role", "ps"}}));
  EXPECT_THAT(c.Step().apply, IsEmpty());  // Nothing changed, nothing applied.

  c.options.network_policy = false;
  Actions a = c.Step();
  EXPECT_THAT(a.delete_paths,
              ElementsAre("/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/j-servers"));
}

TEST(ReconcileTest, PodTemplatesMergeTheUserTemplate) {
  json job = BaseJob();
  job["spec"]["trainer"]["template"] = json::parse(R"({
    "metadata": {"labels": {"tier": "batch", "shadowsync.io/role": "hijack"},
                 "annotations": {"a": "b"}},
    "spec": {
      "nodeSelector": {"pool": "cpu"},
      "tolerations": [{"key": "dedicated", "operator": "Exists"}],
      "volumes": [{"name": "criteo", "persistentVolumeClaim": {"claimName": "criteo"}}],
      "containers": [
        {"name": "trainer", "image": "registry/shadowsync:9",
         "resources": {"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}},
         "env": [{"name": "OMP_NUM_THREADS", "value": "4"}],
         "args": ["--verbose"],
         "volumeMounts": [{"name": "criteo", "mountPath": "/data"}]},
        {"name": "sidecar", "image": "busybox"}]}})");
  Cluster c(job);
  c.Step();
  const json& pod = c.StatefulSet(Role::kTrainer)["spec"]["template"];
  EXPECT_EQ(pod["metadata"]["labels"]["tier"], "batch");
  EXPECT_EQ(pod["metadata"]["labels"]["shadowsync.io/role"], "trainer");  // Ours win.
  EXPECT_EQ(pod["metadata"]["annotations"]["a"], "b");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "cpu");
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "dedicated");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Always");
  ASSERT_EQ(pod["spec"]["containers"].size(), 2u);
  const json& main = pod["spec"]["containers"][0];
  EXPECT_EQ(main["image"], "registry/shadowsync:9");
  EXPECT_EQ(main["resources"]["requests"], json({{"cpu", "4"}}));  // Theirs, whole.
  EXPECT_EQ(main["args"][0], "pod");
  EXPECT_EQ(main["args"].back(), "--verbose");
  const auto env = main["env"].get<std::vector<json>>();
  const auto mounts = main["volumeMounts"].get<std::vector<json>>();
  EXPECT_THAT(env, Contains(json({{"name", "OMP_NUM_THREADS"}, {"value", "4"}})));
  EXPECT_THAT(mounts, Contains(json({{"name", "criteo"}, {"mountPath", "/data"}})));
  EXPECT_THAT(
      mounts,
      Contains(json({{"name", "config"}, {"mountPath", "/etc/shadowsync"}, {"readOnly", true}})));
  EXPECT_EQ(pod["spec"]["containers"][1]["name"], "sidecar");
  std::vector<std::string> volumes;
  for (const json& v : pod["spec"]["volumes"]) volumes.push_back(v["name"]);
  EXPECT_THAT(volumes, ::testing::IsSupersetOf({"config", "data", "criteo"}));
  // The other roles are untouched.
  EXPECT_EQ(c.StatefulSet(Role::kPs)["spec"]["template"]["spec"]["containers"][0]["image"],
            "shadowsync:0.1.0");
}

// The operator's pull policy and pull secrets reach every pod; a template's
// own imagePullSecrets replace them, as any pod-spec field of a template does.
TEST(ReconcileTest, PullPolicyAndSecretsReachThePodsUnlessATemplateSetsItsOwn) {
  json job = BaseJob();
  job["spec"]["syncer"]["template"] =
      json::parse(R"({"spec": {"imagePullSecrets": [{"name": "team-registry"}]}})");
  Cluster c(job);
  c.options.image_pull_policy = "Always";
  c.options.image_pull_secrets = {"registry-a", "registry-b"};
  c.Step();
  for (Role role : {Role::kTrainer, Role::kPs}) {
    const json& pod = c.StatefulSet(role)["spec"]["template"];
    EXPECT_EQ(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
    EXPECT_EQ(pod["spec"]["imagePullSecrets"],
              json::parse(R"([{"name": "registry-a"}, {"name": "registry-b"}])"));
  }
  const json& syncer = c.StatefulSet(Role::kSyncer)["spec"]["template"];
  EXPECT_EQ(syncer["spec"]["containers"][0]["imagePullPolicy"], "Always");
  EXPECT_EQ(syncer["spec"]["imagePullSecrets"], json::parse(R"([{"name": "team-registry"}])"));

  // None by default.
  Cluster plain(BaseJob());
  plain.Step();
  const json& pod = plain.StatefulSet(Role::kTrainer)["spec"]["template"];
  EXPECT_FALSE(pod["spec"].contains("imagePullSecrets"));
  EXPECT_EQ(pod["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
}

// --- Running and scaling trainers -----------------------------------------------------------

TEST(ReconcileTest, PodsReadyMakeTheJobRunning) {
  Cluster c;
  c.Step();
  c.SetPods(Role::kTrainer, 2);
  c.SetPods(Role::kPs, 2);
  c.SetPods(Role::kSyncer, 1, {.ready = false});
  c.now += absl::Seconds(3);
  Actions a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Pending");
  EXPECT_EQ(c.Condition("Running")["reason"], "WaitingForReplicas");
  EXPECT_THAT(c.Condition("Running")["message"].get<std::string>(), HasSubstr("syncer 0/1"));

  c.SetPods(Role::kSyncer, 1);
  c.now += absl::Seconds(3);
  c.examples_processed = 1234;
  a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_EQ(c.Condition("Running")["status"], "True");
  EXPECT_EQ(c.Condition("Running")["reason"], "AllReplicasReady");
  EXPECT_EQ(c.Condition("Running")["lastTransitionTime"], "2027-01-15T08:00:06Z");
  EXPECT_EQ(c.Condition("Created")["lastTransitionTime"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(c.status()["replicaStatuses"]["trainer"]["ready"], 2);
  EXPECT_EQ(c.status()["replicaStatuses"]["trainer"]["active"], 2);
  // What `kubectl get ssj` shows: ready over what the spec asks for.
  EXPECT_EQ(c.status()["replicaStatuses"]["trainer"]["desired"], 2);
  EXPECT_EQ(c.status()["replicaStatuses"]["trainer"]["readyOfDesired"], "2/2");
  EXPECT_EQ(c.status()["replicaStatuses"]["syncer"]["readyOfDesired"], "1/1");
  EXPECT_EQ(c.status()["examplesProcessed"], 1234);
  EXPECT_THAT(Reasons(a.events), ElementsAre("Normal/Running"));
  EXPECT_THAT(a.apply, IsEmpty());
  ASSERT_TRUE(a.requeue_after.has_value());  // Progress refresh.

  // A trainer restarting does not make the job Pending again.
  c.SetPod(Role::kTrainer, 1, {.ready = false, .restart_count = 1, .last_exit = 137});
  a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_EQ(c.Condition("Running")["reason"], "ReplicasNotReady");
  EXPECT_EQ(c.status()["restarts"], 1);
}

TEST(ReconcileTest, ScalingTrainersChangesOnlyTheTrainerReplicas) {
  Cluster c = RunningCluster();
  const json trainer_before = c.StatefulSet(Role::kTrainer);
  c.EditSpec([](json& spec) { spec["trainer"]["replicas"] = 4; });
  const Actions a = c.Step();
  EXPECT_THAT(Names(a.apply), ElementsAre("ConfigMap/j-config", "StatefulSet/j-trainer"));
  json expected = trainer_before;
  expected["spec"]["replicas"] = 4;
  expected["status"]["replicas"] = 4;
  EXPECT_EQ(c.StatefulSet(Role::kTrainer), expected);  // The pod template did not change.
  EXPECT_EQ(c.Replicas(Role::kPs), 2);
  EXPECT_EQ(c.Replicas(Role::kSyncer), 1);
  const json config = json::parse(c.ConfigMap()["data"]["job.json"].get<std::string>());
  EXPECT_EQ(config["spec"]["trainer"]["replicas"], 4);
  EXPECT_EQ(a.reshard, std::nullopt);
  EXPECT_EQ(c.status()["observedGeneration"], 2);
  EXPECT_THAT(Reasons(a.events), ElementsAre("Normal/TrainersScaled"));
}

// --- Parameter-server scaling and resharding ------------------------------------------------

TEST(ReconcileTest, ScaleOutWaitsForTheNewServersThenReshards) {
  Cluster c = RunningCluster();
  c.EditSpec([](json& spec) { spec["parameterServer"]["replicas"] = 3; });
  Actions a = c.Step();
  EXPECT_EQ(c.Replicas(Role::kPs), 3);  // The new server first.
  EXPECT_EQ(a.reshard, std::nullopt);   // Not ready yet.
  EXPECT_EQ(c.status()["phase"], "Resharding");
  EXPECT_EQ(c.Condition("Resharding")["status"], "True");
  EXPECT_EQ(c.Condition("Resharding")["reason"], "WaitingForServers");
  EXPECT_THAT(c.Condition("Resharding")["message"].get<std::string>(), HasSubstr("j-ps-2"));
  EXPECT_EQ(c.status()["resharding"]["from"], 2);
  EXPECT_EQ(c.status()["resharding"]["to"], 3);
  EXPECT_THAT(Reasons(a.events), Contains("Normal/Resharding"));
  // The ConfigMap still says 2 servers own slots: ps-2 starts as a joiner.
  EXPECT_EQ(json::parse(c.ConfigMap()["data"]["shard-map.json"].get<std::string>())["numServers"],
            2);
  ASSERT_TRUE(a.requeue_after.has_value());
  EXPECT_LE(*a.requeue_after, absl::Seconds(5));

  c.SetPod(Role::kPs, 2, {.ready = false});
  c.now += absl::Seconds(5);
  a = c.Step();
  EXPECT_EQ(a.reshard, std::nullopt);

  c.SetPod(Role::kPs, 2, {});
  c.now += absl::Seconds(5);
  a = c.Step();
  EXPECT_EQ(a.reshard, (ReshardRequest{2, 3}));
  EXPECT_THAT(Reasons(a.events), Contains("Normal/ReshardStarted"));
  const std::string started = c.status()["resharding"]["startedAt"];

  // While the controller moves slots, no second request; progress is shown.
  c.ps = Shards({2048, 2048, 0});
  c.ps->reshard = ReshardProgress{2, 3, 512, 1365};
  c.now += absl::Seconds(5);
  a = c.Step();
  EXPECT_EQ(a.reshard, std::nullopt);
  EXPECT_EQ(c.status()["resharding"]["slotsMoved"], 512);
  EXPECT_EQ(c.status()["resharding"]["slotsTotal"], 1365);
  EXPECT_EQ(c.status()["resharding"]["startedAt"], started);
  EXPECT_EQ(c.Condition("Resharding")["reason"], "MovingSlots");

  // Done: three servers own the slots.
  c.ps = Shards({1366, 1365, 1365}, 7);
  c.now += absl::Seconds(5);
  a = c.Step();
  EXPECT_EQ(a.reshard, std::nullopt);
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_EQ(c.Condition("Resharding")["status"], "False");
  EXPECT_FALSE(c.status().contains("resharding"));
  EXPECT_EQ(c.status()["shardMap"]["numServers"], 3);
  EXPECT_EQ(c.status()["shardMap"]["epoch"], 7);
  EXPECT_EQ(c.Replicas(Role::kPs), 3);
  EXPECT_THAT(Reasons(a.events), Contains("Normal/ReshardComplete"));
  EXPECT_EQ(json::parse(c.ConfigMap()["data"]["shard-map.json"].get<std::string>())["numServers"],
            3);
}

TEST(ReconcileTest, ScaleInDrainsBeforeRemovingAServer) {
  Cluster c = PodsReady(JobWithServers(3));
  c.ps = Shards({1366, 1365, 1365});
  c.Step();
  ASSERT_EQ(c.status()["phase"], "Running");

  c.EditSpec([](json& spec) { spec["parameterServer"]["replicas"] = 2; });
  Actions a = c.Step();
  EXPECT_EQ(c.Replicas(Role::kPs), 3);  // ps-2 still owns slots.
  EXPECT_EQ(a.reshard, (ReshardRequest{3, 2}));
  EXPECT_EQ(c.status()["phase"], "Resharding");

  // Part-way: ps-2 still owns some slots; nothing is removed.
  for (int step = 0; step < 3; ++step) {
    c.ps = Shards({1800, 1800, 496});
    c.ps->reshard = ReshardProgress{3, 2, 869, 1365};
    c.now += absl::Seconds(5);
    a = c.Step();
    EXPECT_EQ(c.Replicas(Role::kPs), 3);
    EXPECT_EQ(a.reshard, std::nullopt);
  }
  // The reshard ended, but the map still shows ps-2 owning slots (e.g. it
  // was rolled back): ask again, keep the server.
  c.ps = Shards({1800, 1800, 496});
  a = c.Step();
  EXPECT_EQ(c.Replicas(Role::kPs), 3);
  EXPECT_EQ(a.reshard, (ReshardRequest{3, 2}));

  // Drained: now the StatefulSet shrinks.
  c.ps = Shards({2048, 2048, 0}, 9);
  a = c.Step();
  EXPECT_EQ(c.Replicas(Role::kPs), 2);
  EXPECT_EQ(a.reshard, std::nullopt);
  EXPECT_EQ(c.Condition("Resharding")["status"], "False");
  EXPECT_EQ(c.status()["phase"], "Running");
}

// A reshard cut short by an operator restart: three servers own slots, as
// the spec asks, but unevenly. The new operator finishes the move (3 -> 3).
TEST(ReconcileTest, AnUnbalancedMapIsReshardedToTheEnd) {
  Cluster c = PodsReady(JobWithServers(3));
  c.ps = Shards({1900, 1900, 296}, 7);
  c.ps->unbalanced = true;
  Actions a = c.Step();
  EXPECT_EQ(a.reshard, (ReshardRequest{3, 3}));
  EXPECT_EQ(c.Condition("Resharding")["status"], "True");
  EXPECT_EQ(c.status()["phase"], "Resharding");
  c.ps = Shards({1366, 1365, 1365}, 9);
  a = c.Step();
  EXPECT_EQ(a.reshard, std::nullopt);
  EXPECT_EQ(c.Condition("Resharding")["status"], "False");
}

TEST(ReconcileTest, WithoutTheShardMapNoServerIsRemoved) {
  Cluster c = PodsReady(JobWithServers(3));
  c.Step();  // The servers were never asked: c.ps is empty.
  c.EditSpec([](json& spec) { spec["parameterServer"]["replicas"] = 2; });
  const Actions a = c.Step();
  EXPECT_EQ(c.Replicas(Role::kPs), 3);
  EXPECT_EQ(a.reshard, std::nullopt);
  EXPECT_EQ(c.Condition("Resharding")["reason"], "WaitingForShardMap");
}

// --- runPolicy ------------------------------------------------------------------------------

// Suspend stops every pod (Kueue and quotas count them); the servers'
// volumes stay, so a resume brings each back with its rows.
TEST(ReconcileTest, SuspendStopsEveryPodAndResumeRestartsThem) {
  Cluster c = RunningCluster();
  c.EditSpec([](json& spec) { spec["runPolicy"]["suspend"] = true; });
  c.now += absl::Minutes(1);
  Actions a = c.Step();
  EXPECT_EQ(c.Replicas(Role::kTrainer), 0);
  EXPECT_EQ(c.Replicas(Role::kSyncer), 0);
  EXPECT_EQ(c.Replicas(Role::kPs), 0);
  EXPECT_EQ(c.StatefulSet(Role::kPs)["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"],
            "Retain");
  EXPECT_THAT(c.Condition("Suspended")["message"].get<std::string>(),
              HasSubstr("every pod stopped"));
  EXPECT_EQ(c.status()["phase"], "Suspended");
  EXPECT_EQ(c.Condition("Suspended")["status"], "True");
  EXPECT_EQ(c.Condition("Running")["status"], "False");
  EXPECT_FALSE(c.status().contains("startTime"));
  EXPECT_THAT(Reasons(a.events), Contains("Normal/Suspended"));
  EXPECT_EQ(a.requeue_after, std::nullopt);

  c.SetPods(Role::kTrainer, 0);
  c.SetPods(Role::kSyncer, 0);
  c.SetPods(Role::kPs, 0);
  c.EditSpec([](json& spec) { spec["runPolicy"]["suspend"] = false; });
  c.now += absl::Minutes(1);
  a = c.Step();
  EXPECT_EQ(c.Replicas(Role::kTrainer), 2);
  EXPECT_EQ(c.Replicas(Role::kSyncer), 1);
  EXPECT_EQ(c.Replicas(Role::kPs), 2);
  EXPECT_EQ(c.Condition("Suspended")["status"], "False");
  EXPECT_EQ(c.Condition("Suspended")["reason"], "Resumed");
  EXPECT_EQ(c.status()["phase"], "Pending");
  EXPECT_EQ(c.status()["startTime"], "2027-01-15T08:02:10Z");  // Counts from the resume.
  EXPECT_THAT(Reasons(a.events), Contains("Normal/Resumed"));

  c.AllPodsReady();
  c.Step();
  EXPECT_EQ(c.status()["phase"], "Running");
}

// Kueue creates a job suspended and admits it by clearing suspend: until
// then no role has a pod, and the queue label reaches every pod.
TEST(ReconcileTest, AJobCreatedSuspendedRunsNoPodUntilAdmitted) {
  json job = BaseJob();
  job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-queue";
  job["spec"]["runPolicy"]["suspend"] = true;
  Cluster c(job);
  c.Step();
  for (Role role : {Role::kTrainer, Role::kPs, Role::kSyncer}) {
    SCOPED_TRACE(RoleName(role));
    EXPECT_EQ(c.Replicas(role), 0);
    EXPECT_EQ(
        c.StatefulSet(role)["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "team-queue");
  }
  EXPECT_EQ(c.status()["phase"], "Suspended");
  c.EditSpec([](json& spec) { spec["runPolicy"]["suspend"] = false; });
  c.Step();
  EXPECT_EQ(c.Replicas(Role::kTrainer), 2);
  EXPECT_EQ(c.Replicas(Role::kPs), 2);
  EXPECT_EQ(c.Replicas(Role::kSyncer), 1);
}

// A reshard running at suspend finishes before the servers stop; one asked
// for while suspended waits for the resume.
TEST(ReconcileTest, SuspendLetsARunningReshardFinishAndDefersANewOne) {
  Cluster c = RunningCluster();
  c.EditSpec([](json& spec) {
    spec["parameterServer"]["replicas"] = 3;
    spec["runPolicy"]["suspend"] = true;
  });
  Actions a = c.Step();
  EXPECT_EQ(a.reshard, std::nullopt);
  EXPECT_EQ(c.Replicas(Role::kPs), 0);
  EXPECT_EQ(c.Condition("Resharding")["reason"], "Suspended");
  EXPECT_EQ(a.requeue_after, std::nullopt);

  c = RunningCluster();
  c.ps->reshard =
      ReshardProgress{.from_servers = 2, .to_servers = 3, .slots_moved = 5, .slots_total = 100};
  c.EditSpec([](json& spec) {
    spec["parameterServer"]["replicas"] = 3;
    spec["runPolicy"]["suspend"] = true;
  });
  a = c.Step();
  EXPECT_EQ(c.Replicas(Role::kPs), 3);
  EXPECT_EQ(c.Replicas(Role::kTrainer), 0);
  EXPECT_EQ(c.Condition("Resharding")["reason"], "MovingSlots");
  EXPECT_THAT(c.Condition("Suspended")["message"].get<std::string>(),
              HasSubstr("once the running reshard ends"));
}

// Gang scheduling: with a scheduler, a PodGroup of every pod (or of
// minAvailable) in its CRD, before the StatefulSets, and pods that name the
// scheduler and the group; without one, no PodGroup, and priorityClass still
// reaches the pods.
TEST(ReconcileTest, AGangSchedulerGetsAPodGroupInItsOwnForm) {
  {
    Cluster c;
    c.options.gang_scheduler = GangScheduler::kVolcano;
    const Actions a = c.Step();
    const auto group = std::find_if(a.apply.begin(), a.apply.end(),
                                    [](const json& o) { return o["kind"] == "PodGroup"; });
    ASSERT_NE(group, a.apply.end());
    EXPECT_EQ((*group)["apiVersion"], "scheduling.volcano.sh/v1beta1");
    EXPECT_EQ((*group)["metadata"]["name"], "j");
    EXPECT_EQ((*group)["spec"], json({{"minMember", 2 + 2 + 1}}));  // Every pod.
    EXPECT_LT(group - a.apply.begin(),
              std::find_if(a.apply.begin(), a.apply.end(), [](const json& o) {
                return o["kind"] == "StatefulSet";
              }) - a.apply.begin());
    const json& pod = c.StatefulSet(Role::kPs)["spec"]["template"];
    EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
    EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "j");
  }
  {
    json job = BaseJob();
    job["spec"]["runPolicy"]["schedulingPolicy"] = {
        {"minAvailable", 4}, {"queue", "q"}, {"priorityClass", "high"}};
    Cluster c(job);
    c.options.gang_scheduler = GangScheduler::kSchedulerPlugins;
    const Actions a = c.Step();
    const auto group = std::find_if(a.apply.begin(), a.apply.end(),
                                    [](const json& o) { return o["kind"] == "PodGroup"; });
    ASSERT_NE(group, a.apply.end());
    EXPECT_EQ((*group)["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
    EXPECT_EQ((*group)["spec"], json({{"minMember", 4}}));  // No queue in this CRD.
    const json& pod = c.StatefulSet(Role::kTrainer)["spec"]["template"];
    EXPECT_EQ(pod["spec"]["schedulerName"], "scheduler-plugins-scheduler");
    EXPECT_EQ(pod["spec"]["priorityClassName"], "high");
    EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "j");
  }
  {
    json job = BaseJob();
    job["spec"]["runPolicy"]["schedulingPolicy"] = {{"priorityClass", "high"}};
    Cluster c(job);
    const Actions a = c.Step();
    for (const json& o : a.apply) EXPECT_NE(o["kind"], "PodGroup");
    const json& pod = c.StatefulSet(Role::kSyncer)["spec"]["template"];
    EXPECT_FALSE(pod["spec"].contains("schedulerName"));
    EXPECT_EQ(pod["spec"]["priorityClassName"], "high");
  }
  EXPECT_EQ(ParseGangScheduler("kube-batch", "--gang-scheduler").status().message(),
            "--gang-scheduler: 'kube-batch' is not one of none, volcano, scheduler-plugins");
}

TEST(ReconcileTest, TrainerFailuresCountAgainstTheBackoffLimit) {
  struct Case {
    std::string name;
    PodState pod;  // Of trainer 0; trainer 1 is healthy.
    int restarts;
  };
  const std::vector<Case> cases = {
      {"healthy", {}, 0},
      {"restarted after a crash", {.restart_count = 1, .last_exit = 1}, 1},
      {"crashed, not yet restarted", {.restart_count = 0, .exit_now = 2}, 1},
      {"in back-off after 2 crashes",
       {.ready = false, .restart_count = 1, .last_exit = 1, .waiting = true},
       2},
      {"finished and idling", {.restart_count = 1, .last_exit = 0}, 0},
      {"crashed twice then finished", {.restart_count = 3, .last_exit = 0}, 2},
      {"evicted", {.ready = false, .phase = "Failed"}, 1},
      {"crash-looping", {.ready = false, .restart_count = 4, .last_exit = 1, .waiting = true}, 5},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Cluster c = RunningCluster();
    c.SetPod(Role::kTrainer, 0, k.pod);
    c.Step();
    EXPECT_EQ(c.status()["restarts"], k.restarts);
    EXPECT_EQ(c.status()["replicaStatuses"]["trainer"]["restarts"], k.restarts);
    EXPECT_EQ(c.status()["phase"], k.restarts > 3 ? "Failed" : "Running");  // backoffLimit 3.
  }
}

// A trainer's report that its run is not learning (its termination message,
// cli/pod_command.cc) becomes the NotLearning condition and a Warning event.
// A trainer that stopped for it (exit 3, spec.trainer.learningCheck.fail)
// fails the job at once, whatever the backoff limit.
TEST(ReconcileTest, ATrainerThatIsNotLearningSetsAConditionOrFailsTheJob) {
  const std::string problem = "not learning: the model is not learning: train NE 1.0041";
  Cluster c = RunningCluster();
  c.SetPod(Role::kTrainer, 1, {.restart_count = 1, .last_exit = 0, .message = problem});
  Actions a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_EQ(c.Condition("NotLearning")["status"], "True");
  EXPECT_EQ(c.Condition("NotLearning")["message"], "j-trainer-1: " + problem);
  EXPECT_THAT(Reasons(a.events), Contains("Warning/NotLearning"));
  // Kept once seen, though the container's state no longer says it.
  c.SetPod(Role::kTrainer, 1, {.restart_count = 2, .last_exit = 0});
  c.now += absl::Seconds(1);
  a = c.Step();
  EXPECT_EQ(c.Condition("NotLearning")["message"], "j-trainer-1: " + problem);
  EXPECT_THAT(Reasons(a.events), Not(Contains("Warning/NotLearning")));

  Cluster f = RunningCluster();
  EXPECT_TRUE(f.Condition("NotLearning").is_null()) << "absent while every run learns";
  f.SetPod(Role::kTrainer, 0,
           {.ready = false, .restart_count = 0, .exit_now = kExitNotLearning, .message = problem});
  a = f.Step();
  EXPECT_EQ(f.status()["phase"], "Failed");
  EXPECT_EQ(f.Condition("Failed")["reason"], "NotLearning");
  EXPECT_THAT(f.Condition("Failed")["message"].get<std::string>(),
              HasSubstr("j-trainer-0: " + problem));
  EXPECT_EQ(f.Condition("NotLearning")["status"], "True");
  EXPECT_THAT(Reasons(a.events), Contains("Warning/NotLearning"));
  // An exit 3 without a message (the file was not there) fails it too, and
  // so does one the container was already restarted after.
  Cluster g = RunningCluster();
  g.SetPod(Role::kTrainer, 0, {.ready = false, .exit_now = kExitNotLearning});
  g.Step();
  EXPECT_EQ(g.Condition("Failed")["reason"], "NotLearning");
  Cluster h = RunningCluster();
  h.SetPod(Role::kTrainer, 1, {.restart_count = 1, .last_exit = kExitNotLearning});
  h.Step();
  EXPECT_EQ(h.Condition("Failed")["reason"], "NotLearning");
}

TEST(ReconcileTest, BackoffLimitExceededFailsTheJobAndStopsThePods) {
  Cluster c = RunningCluster();
  c.SetPod(Role::kTrainer, 0, {.restart_count = 3, .last_exit = 1});
  Actions a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Running");  // 3 restarts: the limit, not over it.
  c.SetPod(Role::kTrainer, 1, {.ready = false, .exit_now = 1});
  c.now += absl::Seconds(1);
  a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Failed");
  EXPECT_EQ(c.Condition("Failed")["status"], "True");
  EXPECT_EQ(c.Condition("Failed")["reason"], "BackoffLimitExceeded");
  EXPECT_EQ(c.Condition("Running")["status"], "False");
  EXPECT_EQ(c.status()["completionTime"], "2027-01-15T08:00:11Z");
  EXPECT_THAT(Reasons(a.events), Contains("Warning/BackoffLimitExceeded"));
  // cleanPodPolicy Running (the default): everything still running stops.
  EXPECT_EQ(c.Replicas(Role::kTrainer), 0);
  EXPECT_EQ(c.Replicas(Role::kPs), 0);
  EXPECT_EQ(c.Replicas(Role::kSyncer), 0);
}

TEST(ReconcileTest, ActiveDeadlineFailsTheJob) {
  json job = BaseJob();
  job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 100;
  Cluster c(job);
  Actions a = c.Step();
  ASSERT_TRUE(a.requeue_after.has_value());
  EXPECT_EQ(*a.requeue_after, absl::Seconds(100));
  c.AllPodsReady();
  c.now += absl::Seconds(99);
  a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_EQ(*a.requeue_after, absl::Seconds(1));
  c.now += absl::Seconds(1);
  a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Failed");
  EXPECT_EQ(c.Condition("Failed")["reason"], "DeadlineExceeded");
  EXPECT_THAT(Reasons(a.events), Contains("Warning/DeadlineExceeded"));
}

TEST(ReconcileTest, SuccessAppliesCleanPodPolicyAndTtl) {
  struct Case {
    std::string policy;
    int trainer, ps, syncer;  // Replicas after success.
  };
  for (const Case& k : {Case{"Running", 2, 0, 0}, Case{"All", 0, 0, 0}, Case{"None", 2, 2, 1}}) {
    SCOPED_TRACE(k.policy);
    json job = BaseJob();
    job["spec"]["runPolicy"]["cleanPodPolicy"] = k.policy;
    job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 60;
    Cluster c = RunningCluster(job);
    // Trainer 0 done, trainer 1 still training.
    c.SetPod(Role::kTrainer, 0, {.restart_count = 1, .last_exit = 0});
    c.Step();
    EXPECT_EQ(c.status()["phase"], "Running");
    EXPECT_EQ(c.status()["replicaStatuses"]["trainer"]["succeeded"], 1);
    // Both done.
    c.SetPod(Role::kTrainer, 1, {.exit_now = 0});
    c.now += absl::Seconds(20);
    Actions a = c.Step();
    EXPECT_EQ(c.status()["phase"], "Succeeded");
    EXPECT_EQ(c.Condition("Succeeded")["status"], "True");
    EXPECT_EQ(c.Condition("Succeeded")["reason"], "AllTrainersSucceeded");
    EXPECT_EQ(c.Condition("Running")["status"], "False");
    EXPECT_EQ(c.status()["completionTime"], "2027-01-15T08:00:30Z");
    EXPECT_THAT(Reasons(a.events), Contains("Normal/Succeeded"));
    EXPECT_EQ(c.Replicas(Role::kTrainer), k.trainer);
    EXPECT_EQ(c.Replicas(Role::kPs), k.ps);
    EXPECT_EQ(c.Replicas(Role::kSyncer), k.syncer);
    EXPECT_EQ(a.requeue_after, absl::Seconds(60));
    EXPECT_FALSE(a.delete_job);

    c.now += absl::Seconds(59);
    a = c.Step();
    EXPECT_FALSE(a.delete_job);
    EXPECT_EQ(a.requeue_after, absl::Seconds(1));
    EXPECT_THAT(a.apply, IsEmpty());
    c.now += absl::Seconds(1);
    a = c.Step();
    EXPECT_TRUE(a.delete_job);
  }
}

// --- Exports ----------------------------------------------------------------------------

// spec.export: the claim is created once, before the StatefulSets, and not
// owned by the job; only trainers mount it and get the export flags; the
// annotation reaches the ConfigMap's export-request file.
TEST(ReconcileTest, ExportsMountTheClaimInTheTrainersAndPassTheRequest) {
  json job = BaseJob();
  job["spec"]["export"] = json::object();
  job["spec"]["export"]["storage"] = {{"size", "5Gi"}, {"storageClassName", "nfs"}};
  job["metadata"]["annotations"] = {{"shadowsync.io/export-request", "r1"}};
  Cluster c(job);
  Actions a = c.Step();
  ASSERT_FALSE(a.apply.empty());
  EXPECT_EQ(Names(a.apply).front(), "PersistentVolumeClaim/j-exports");
  const json& claim = c.claims.at("j-exports");
  EXPECT_FALSE(claim["metadata"].contains("ownerReferences"));
  EXPECT_EQ(claim["metadata"]["labels"]["shadowsync.io/job-name"], "j");
  EXPECT_EQ(claim["spec"]["accessModes"], json({"ReadWriteMany"}));
  EXPECT_EQ(claim["spec"]["resources"]["requests"]["storage"], "5Gi");
  EXPECT_EQ(claim["spec"]["storageClassName"], "nfs");
  EXPECT_EQ(c.status()["export"]["claim"], "j-exports");
  EXPECT_EQ(c.status()["export"]["claimCreated"], true);
  EXPECT_EQ(c.ConfigMap()["data"]["export-request"], "r1");

  const json& trainer = c.StatefulSet(Role::kTrainer)["spec"]["template"]["spec"];
  EXPECT_THAT(trainer["containers"][0]["args"].get<std::vector<std::string>>(),
              IsSupersetOf({"--export-dir=/var/lib/shadowsync-exports", "--job-uid=uid-1"}));
  EXPECT_THAT(
      trainer["volumes"],
      Contains(json{{"name", "exports"}, {"persistentVolumeClaim", {{"claimName", "j-exports"}}}}));
  EXPECT_THAT(trainer["containers"][0]["volumeMounts"],
              Contains(json{{"name", "exports"}, {"mountPath", "/var/lib/shadowsync-exports"}}));
  for (Role role : {Role::kPs, Role::kSyncer}) {
    EXPECT_EQ(c.StatefulSet(role).dump().find("exports"), std::string::npos) << RoleName(role);
  }

  // Created once; a new request value reaches the ConfigMap.
  c.job()["metadata"]["annotations"]["shadowsync.io/export-request"] = "r2";
  a = c.Step();
  EXPECT_THAT(Names(a.apply), Not(Contains("PersistentVolumeClaim/j-exports")));
  EXPECT_EQ(c.ConfigMap()["data"]["export-request"], "r2");
}

TEST(ReconcileTest, ANamedExportClaimIsMountedNotCreated) {
  json job = BaseJob();
  job["spec"]["export"] = {{"volumeClaimName", "models"}, {"path", "/models"}};
  Cluster c(job);
  c.Step();
  EXPECT_TRUE(c.claims.empty());
  EXPECT_EQ(c.status()["export"]["claim"], "models");
  EXPECT_FALSE(c.status()["export"].contains("claimCreated"));
  const json& trainer = c.StatefulSet(Role::kTrainer)["spec"]["template"]["spec"];
  EXPECT_THAT(
      trainer["volumes"],
      Contains(json{{"name", "exports"}, {"persistentVolumeClaim", {{"claimName", "models"}}}}));
  EXPECT_THAT(trainer["containers"][0]["args"].get<std::vector<std::string>>(),
              Contains("--export-dir=/models"));
  // Without spec.export: no claim, no mount, no request file.
  Cluster plain;
  plain.Step();
  EXPECT_TRUE(plain.claims.empty());
  EXPECT_FALSE(plain.status().contains("export"));
  EXPECT_FALSE(plain.ConfigMap()["data"].contains("export-request"));
}

// With exports, every trainer done is not yet success: trainer 0's final
// export must be reported first; status.export.latest follows trainer 0.
TEST(ReconcileTest, WithExportsTheJobSucceedsOnceTheFinalExportIsReported) {
  json job = BaseJob();
  job["spec"]["export"] = json::object();
  Cluster c = RunningCluster(job);
  c.latest_export = json{{"model", "model-000001"}, {"request", "r1"}, {"final", false}};
  c.Step();
  EXPECT_EQ(c.status()["export"]["latest"]["model"], "model-000001");
  EXPECT_EQ(c.status()["export"]["request"], "r1");

  c.SetPods(Role::kTrainer, 2, {.restart_count = 1, .last_exit = 0});
  c.latest_export.reset();  // trainer 0 not scraped: the status keeps its export
  c.Step();
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_EQ(c.Condition("Succeeded")["reason"], "WaitingForFinalExport");
  EXPECT_EQ(c.status()["export"]["latest"]["model"], "model-000001");

  c.latest_export =
      json{{"model", "model-000002"}, {"request", "r1"}, {"final", true}, {"rows", 1234},
           {"evalNE", 0.8},           {"evalAUC", 0.7}};
  c.Step();
  EXPECT_EQ(c.status()["phase"], "Succeeded");
  EXPECT_EQ(c.status()["export"]["latest"]["model"], "model-000002");
  EXPECT_EQ(c.status()["export"]["latest"]["evalNE"], 0.8);
}

// spec.init: trainers mount the claim read-only; trainer 0 runs alone until
// it reports the rows loaded, then the rest start, and the ConfigMap says
// so (no restart loads the export again).
TEST(ReconcileTest, AWarmStartRunsTrainerZeroAloneUntilTheExportIsLoaded) {
  json job = BaseJob();
  job["spec"]["init"] = {{"fromModel", "model-000002"}, {"volumeClaimName", "old-exports"}};
  Cluster c(job);
  c.Step();
  EXPECT_EQ(c.Replicas(Role::kTrainer), 1);
  EXPECT_EQ(c.ConfigMap()["data"]["init-imported"], "false");
  EXPECT_EQ(c.status()["init"],
            json({{"claim", "old-exports"}, {"model", "model-000002"}, {"imported", false}}));
  const json& trainer = c.StatefulSet(Role::kTrainer)["spec"]["template"]["spec"];
  EXPECT_THAT(trainer["containers"][0]["args"].get<std::vector<std::string>>(),
              Contains("--init-dir=/var/lib/shadowsync-init"));
  EXPECT_THAT(trainer["volumes"],
              Contains(json{
                  {"name", "init"},
                  {"persistentVolumeClaim", {{"claimName", "old-exports"}, {"readOnly", true}}}}));
  EXPECT_THAT(
      trainer["containers"][0]["volumeMounts"],
      Contains(
          json{{"name", "init"}, {"mountPath", "/var/lib/shadowsync-init"}, {"readOnly", true}}));
  EXPECT_EQ(c.StatefulSet(Role::kPs).dump().find("old-exports"), std::string::npos);

  c.AllPodsReady();
  c.Step();
  EXPECT_EQ(c.Replicas(Role::kTrainer), 1) << "trainer 0 has not loaded the export yet";
  c.init_imported_rows = 5000;
  c.Step();
  EXPECT_EQ(c.status()["init"]["imported"], true);
  EXPECT_EQ(c.status()["init"]["rows"], 5000);
  EXPECT_EQ(c.Replicas(Role::kTrainer), 2);
  c.Step();  // The status written, the ConfigMap follows.
  EXPECT_EQ(c.ConfigMap()["data"]["init-imported"], "true");
  // A restarted trainer 0 that skipped the load reports 0: the status keeps 5000.
  c.init_imported_rows = 0;
  c.Step();
  EXPECT_EQ(c.status()["init"]["rows"], 5000);
  // The model a job started from cannot change.
  c.EditSpec([](json& spec) { spec["init"]["fromModel"] = "model-000003"; });
  c.Step();
  EXPECT_THAT(c.status()["rejectedSpec"]["message"].get<std::string>(), HasSubstr("spec.init"));
}

TEST(ReconcileTest, FinishedIsFinal) {
  Cluster c = RunningCluster();
  c.SetPods(Role::kTrainer, 2, {.exit_now = 0});
  c.Step();
  ASSERT_EQ(c.status()["phase"], "Succeeded");
  const json conditions = c.status()["conditions"];
  // A trainer crashing afterwards, spec edits, time: still Succeeded.
  c.SetPods(Role::kTrainer, 2, {.restart_count = 9, .last_exit = 1});
  c.EditSpec([](json& spec) {
    spec["trainer"]["replicas"] = 5;
    spec["parameterServer"]["replicas"] = 4;
  });
  c.now += absl::Hours(1);
  Actions a = c.Step();
  EXPECT_EQ(c.status()["phase"], "Succeeded");
  EXPECT_EQ(c.status()["conditions"], conditions);
  EXPECT_THAT(a.apply, IsEmpty());
  EXPECT_THAT(a.events, IsEmpty());
  EXPECT_EQ(a.reshard, std::nullopt);

  // Failed stays Failed even when every trainer then finishes.
  json job = BaseJob();
  job["spec"]["runPolicy"]["cleanPodPolicy"] = "None";
  Cluster f = RunningCluster(job);
  f.SetPods(Role::kTrainer, 2, {.restart_count = 4, .last_exit = 1});
  f.Step();
  ASSERT_EQ(f.status()["phase"], "Failed");
  f.SetPods(Role::kTrainer, 2, {.exit_now = 0});
  a = f.Step();
  EXPECT_EQ(f.status()["phase"], "Failed");
  EXPECT_EQ(f.Condition("Succeeded")["status"], "False");
  EXPECT_THAT(a.events, IsEmpty());
}

// --- Invalid and rejected specs ---------------------------------------------------------

TEST(ReconcileTest, InvalidSpecCreatesNothingAndFails) {
  struct Case {
    std::string name;
    std::string patch;  // A JSON merge patch (RFC 7386) of BaseJob's spec.
    std::string field;  // Named in the message.
  };
  const std::vector<Case> cases = {
      {"ds-sync group size does not divide the trainers",
       R"({"trainer": {"replicas": 3},)"
       R"( "sync": {"algorithm": "ds-sync", "dsSync": {"groupSize": 2}}})",
       "spec.sync.dsSync.groupSize"},
      {"more servers than slots", R"({"parameterServer": {"replicas": 5, "slots": 4}})",
       "spec.parameterServer.slots"},
      {"syncer-less shadow-easgd", R"({"syncer": {"replicas": 0}})", "spec.syncer.replicas"},
      {"unknown field", R"({"trainer": {"replica": 2}})", "spec.trainer.replica"},
      {"a warm start without its claim", R"({"init": {"fromModel": "model-000001"}})",
       "spec.init.volumeClaimName: required"},
      {"a warm start from outside its claim",
       R"({"init": {"fromModel": "../other/model-000001", "volumeClaimName": "models"}})",
       "spec.init.fromModel: on Kubernetes, a path inside"},
      {"a warm-start claim that is no name",
       R"({"init": {"fromModel": "model-000001", "volumeClaimName": "Old Exports"}})",
       "spec.init.volumeClaimName"},
      {"an export path that is no mount path", R"({"export": {"path": "exports"}})",
       "spec.export.path: on Kubernetes, the absolute path"},
      {"an export claim that is no name", R"({"export": {"volumeClaimName": "My_Claim"}})",
       "spec.export.volumeClaimName"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    json job = BaseJob();
    job["spec"].merge_patch(json::parse(k.patch));
    Cluster c(job);
    Actions a = c.Step();
    EXPECT_THAT(a.apply, IsEmpty());
    EXPECT_EQ(c.children(), 0u);
    EXPECT_EQ(c.status()["phase"], "Failed");
    EXPECT_EQ(c.Condition("Failed")["status"], "True");
    EXPECT_EQ(c.Condition("Failed")["reason"], "InvalidSpec");
    EXPECT_THAT(c.Condition("Failed")["message"].get<std::string>(), HasSubstr(k.field));
    EXPECT_EQ(c.Condition("Created")["status"], "False");
    ASSERT_EQ(a.events.size(), 1u);
    EXPECT_EQ(a.events[0].type, "Warning");
    EXPECT_EQ(a.events[0].reason, "InvalidSpec");
    EXPECT_THAT(a.events[0].message, HasSubstr(k.field));
    EXPECT_EQ(c.status()["observedGeneration"], 1);

    // Final: fixing the spec does not resurrect the job; no event spam.
    c.EditSpec([](json& spec) { spec = BaseJob()["spec"]; });
    c.now += absl::Seconds(30);
    a = c.Step();
    EXPECT_THAT(a.apply, IsEmpty());
    EXPECT_THAT(a.events, IsEmpty());
    EXPECT_EQ(c.status()["phase"], "Failed");
  }
}

TEST(ReconcileTest, RejectedUpdatesKeepTheRunningJob) {
  struct Case {
    std::string name;
    std::function<void(json&)> edit;
    std::string reason;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"invalid: 3 trainers in ds-sync groups of 2",
       [](json& spec) {
         spec["sync"] = {{"algorithm", "ds-sync"}};
         spec["trainer"]["replicas"] = 3;
       },
       "InvalidSpec", "spec.sync.dsSync.groupSize"},
      {"slots", [](json& spec) { spec["parameterServer"]["slots"] = 8192; },
       "ImmutableFieldChanged", "spec.parameterServer.slots"},
      {"model", [](json& spec) { spec["model"]["embeddingDim"] = 32; }, "ImmutableFieldChanged",
       "spec.model"},
      {"storage", [](json& spec) { spec["parameterServer"]["storage"]["size"] = "2Gi"; },
       "ImmutableFieldChanged", "spec.parameterServer.storage"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Cluster c = RunningCluster();
    c.EditSpec(k.edit);
    Actions a = c.Step();
    EXPECT_THAT(a.apply, IsEmpty());
    EXPECT_EQ(c.Replicas(Role::kTrainer), 2);
    EXPECT_EQ(c.status()["phase"], "Running");
    EXPECT_EQ(c.status()["observedGeneration"], 1);
    EXPECT_EQ(c.status()["rejectedSpec"]["generation"], 2);
    EXPECT_THAT(c.status()["rejectedSpec"]["message"].get<std::string>(), HasSubstr(k.field));
    ASSERT_EQ(a.events.size(), 1u);
    EXPECT_EQ(a.events[0].type, "Warning");
    EXPECT_EQ(a.events[0].reason, k.reason);
    // Once per generation.
    a = c.Step();
    EXPECT_THAT(a.events, IsEmpty());
    // A valid edit is taken again.
    c.EditSpec([](json& spec) {
      spec = BaseJob()["spec"];
      spec["trainer"]["replicas"] = 4;
    });
    a = c.Step();
    EXPECT_EQ(c.Replicas(Role::kTrainer), 4);
    EXPECT_EQ(c.status()["observedGeneration"], 3);
    EXPECT_FALSE(c.status().contains("rejectedSpec"));
  }
}

// --- Conditions and generations ----------------------------------------------------------

TEST(ReconcileTest, ConditionsKeepTheirTransitionTimeUntilTheyFlip) {
  Cluster c = RunningCluster();
  const json before = c.status()["conditions"];
  c.now += absl::Minutes(10);
  c.Step();
  EXPECT_EQ(c.status()["conditions"], before);

  // Suspended flips (and Running); the others keep their time.
  c.EditSpec([](json& spec) { spec["runPolicy"]["suspend"] = true; });
  c.Step();
  for (const json& cond : c.status()["conditions"]) {
    SCOPED_TRACE(cond["type"]);
    const bool flipped = cond["type"] == "Suspended" || cond["type"] == "Running";
    json old;
    for (const json& b : before) {
      if (b["type"] == cond["type"]) old = b;
    }
    if (flipped) {
      EXPECT_EQ(cond["lastTransitionTime"], "2027-01-15T08:10:10Z");
    } else {
      EXPECT_EQ(cond["lastTransitionTime"], old["lastTransitionTime"]);
    }
    EXPECT_EQ(cond["observedGeneration"], 2);
  }
  EXPECT_EQ(c.status()["observedGeneration"], 2);
}

TEST(ReconcileTest, EveryConditionTypeIsSetInOrder) {
  Cluster c;
  c.Step();
  std::vector<std::string> types;
  for (const json& cond : c.status()["conditions"]) types.push_back(cond["type"]);
  EXPECT_THAT(types,
              ElementsAre("Created", "Running", "Resharding", "Suspended", "Succeeded", "Failed"));
}

TEST(ReconcileTest, AJobBeingDeletedIsLeftAlone) {
  Cluster c = RunningCluster();
  const json status = c.status();
  c.job()["metadata"]["deletionTimestamp"] = "2027-01-15T09:00:00Z";
  const Actions a = c.Step();
  EXPECT_THAT(a.apply, IsEmpty());
  EXPECT_THAT(a.events, IsEmpty());
  EXPECT_EQ(a.status, status);
}

TEST(ReconcileTest, UnwantedOwnedChildrenAreDeleted) {
  Cluster c;
  c.Step();
  Observed o{.job = c.job(), .now = kT0};
  o.stateful_sets["j-evaluator"] = json::parse(R"({"apiVersion": "apps/v1",
      "kind": "StatefulSet", "metadata": {"name": "j-evaluator", "namespace": "ns"}})");
  const Actions a = Reconcile(o);
  EXPECT_THAT(a.delete_paths, ElementsAre("/apis/apps/v1/namespaces/ns/statefulsets/j-evaluator"));
}

TEST(ReconcileHelpersTest, NamesAndPaths) {
  EXPECT_EQ(ChildName("j", Role::kPs), "j-ps");
  EXPECT_EQ(ConfigMapName("j"), "j-config");
  EXPECT_EQ(PodAddress("j", Role::kPs, 3, "ns", 7000), "j-ps-3.j-ps.ns.svc:7000");
  EXPECT_EQ(ObjectPath(json::parse(R"({"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": "c", "namespace": "n"}})")),
            "/api/v1/namespaces/n/configmaps/c");
  EXPECT_TRUE(IsSubset(json::parse(R"({"a": [1, {"b": 2}]})"),
                       json::parse(R"({"a": [1, {"b": 2, "c": 3}], "d": 4})")));
  EXPECT_FALSE(IsSubset(json::parse(R"({"a": [1]})"), json::parse(R"({"a": [1, 2]})")));
  EXPECT_FALSE(IsSubset(json::parse(R"({"a": 1})"), json::parse(R"({"b": 1})")));
  EXPECT_EQ(Shards({5, 0, 3, 0}).OwningServers(), 3);
  EXPECT_EQ(Shards({0, 0}).OwningServers(), 0);
}

}  // namespace
}  // namespace shadowsync::op
