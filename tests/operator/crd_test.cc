// The CRD (operator/crd.h) against the job spec it is generated from, the
// committed deploy/crd.yaml, and the other deploy/ manifests.
#include "operator/crd.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec.h"
#include "operator/reconcile.h"
#include "tests/util/json_schema.h"
#include "tests/util/test_util.h"
#include "tests/util/yaml_json.h"

namespace shadowsync::op {
namespace {

using json = nlohmann::json;
using ::shadowsync::testing::SourcePath;
using ::shadowsync::testing::WalkSchema;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::IsSupersetOf;
using ::testing::Not;
using ::testing::StartsWith;

// A plain scalar that YAML 1.1 readers (kubectl's go-yaml) would take for a
// boolean must have been quoted.
json ToJson(const YAML::Node& node) {
  return testing::YamlToJson(
      node, [](const std::string& s) { ADD_FAILURE() << "unquoted YAML 1.1 boolean " << s; });
}

std::vector<json> LoadYamlDocuments(const std::string& path) {
  return testing::YamlDocumentsToJson(YAML::LoadAllFromFile(path), [](const std::string& s) {
    ADD_FAILURE() << "unquoted YAML 1.1 boolean " << s;
  });
}

// The schema node at a dot path such as ".status.replicaStatuses.trainer.active".
const json* SchemaAt(const json& root, const std::string& dot_path) {
  const json* node = &root;
  std::string rest = dot_path.substr(1);
  while (!rest.empty()) {
    const size_t dot = rest.find('.');
    const std::string key = rest.substr(0, dot);
    rest = dot == std::string::npos ? "" : rest.substr(dot + 1);
    if (!node->contains("properties") || !(*node)["properties"].contains(key)) return nullptr;
    node = &(*node)["properties"][key];
  }
  return node;
}

// `schema` without its transition rules (those that read oldSelf).
json StripTransitionRules(json schema) {
  if (!schema.is_object()) return schema;
  if (schema.contains("x-kubernetes-validations")) {
    json kept = json::array();
    for (const json& r : schema["x-kubernetes-validations"]) {
      if (r["rule"].get<std::string>().find("oldSelf") == std::string::npos) kept.push_back(r);
    }
    schema.erase("x-kubernetes-validations");
    if (!kept.empty()) schema["x-kubernetes-validations"] = kept;
  }
  for (auto& [k, v] : schema.items()) v = StripTransitionRules(v);
  return schema;
}

bool HasTransitionRule(const json& node) {
  for (const json& r : node.value("x-kubernetes-validations", json::array())) {
    if (r["rule"].get<std::string>().find("oldSelf") != std::string::npos) return true;
  }
  return false;
}

class CrdTest : public ::testing::Test {
 protected:
  const json crd_ = ShadowSyncJobCrd();
  const json& version_ = crd_["spec"]["versions"][0];
  const json& schema_ = version_["schema"]["openAPIV3Schema"];
  const json& spec_ = schema_["properties"]["spec"];
};

TEST_F(CrdTest, NamesGroupAndVersion) {
  EXPECT_EQ(crd_["apiVersion"], "apiextensions.k8s.io/v1");
  EXPECT_EQ(crd_["kind"], "CustomResourceDefinition");
  EXPECT_EQ(crd_["metadata"]["name"], "shadowsyncjobs.shadowsync.io");
  EXPECT_EQ(crd_["spec"]["group"], "shadowsync.io");
  EXPECT_EQ(crd_["spec"]["scope"], "Namespaced");
  EXPECT_EQ(crd_["spec"]["names"], json::parse(R"({
    "plural": "shadowsyncjobs", "singular": "shadowsyncjob", "kind": "ShadowSyncJob",
    "listKind": "ShadowSyncJobList", "shortNames": ["ssj"], "categories": ["all"]})"));
  ASSERT_EQ(crd_["spec"]["versions"].size(), 1u);
  EXPECT_EQ(version_["name"], "v1alpha1");
  EXPECT_EQ(version_["served"], true);
  EXPECT_EQ(version_["storage"], true);
  // The apiVersion the job spec parser demands is the CRD's group/version.
  EXPECT_EQ(std::string(kJobApiVersion), "shadowsync.io/v1alpha1");
}

TEST_F(CrdTest, PrinterColumns) {
  std::vector<std::string> names;
  for (const json& c : version_["additionalPrinterColumns"]) {
    if (c.value("priority", 0) == 0) names.push_back(c["name"]);
    SCOPED_TRACE(c.dump());
    const std::string path = c["jsonPath"];
    if (path == ".metadata.creationTimestamp") {
      EXPECT_EQ(c["type"], "date");
      continue;
    }
    // Every column points at a field of the schema, of the column's type.
    const json* node = SchemaAt(schema_, path);
    ASSERT_NE(node, nullptr);
    EXPECT_EQ((*node)["type"], c["type"]);
  }
  EXPECT_THAT(names, ElementsAreArray({"Phase", "Trainers", "PS", "Restarts", "Algorithm",
                                       "Examples/s", "Export", "Age"}));
}

TEST_F(CrdTest, StatusAndScaleSubresources) {
  const json& sub = version_["subresources"];
  EXPECT_EQ(sub["status"], json::object());
  EXPECT_EQ(sub["scale"]["specReplicasPath"], ".spec.trainer.replicas");
  EXPECT_EQ(sub["scale"]["statusReplicasPath"], ".status.replicaStatuses.trainer.active");
  EXPECT_EQ(sub["scale"]["labelSelectorPath"], ".status.selector");
  for (const char* key : {"specReplicasPath", "statusReplicasPath"}) {
    const json* node = SchemaAt(schema_, sub["scale"][key]);
    ASSERT_NE(node, nullptr) << key;
    EXPECT_EQ((*node)["type"], "integer");
  }
  const json* selector = SchemaAt(schema_, ".status.selector");
  ASSERT_NE(selector, nullptr);
  EXPECT_EQ((*selector)["type"], "string");
}

TEST_F(CrdTest, SpecSchemaIsTheJobSpecSchema) {
  // Apart from the CRD-only immutability rules, exactly JobSpecOpenApiSchema(),
  // its cross-field rules included.
  EXPECT_EQ(StripTransitionRules(spec_), JobSpecOpenApiSchema());
}

TEST_F(CrdTest, AlgorithmEnumIsWhatTheParserAccepts) {
  const json& algorithms = spec_["properties"]["sync"]["properties"]["algorithm"]["enum"];
  const auto& names = EnumTraits<SyncAlgorithm>::kNames;
  EXPECT_EQ(algorithms, json(std::vector<std::string>(names.begin(), names.end())));
  for (const json& name : algorithms) {
    const std::string yaml =
        "apiVersion: shadowsync.io/v1alpha1\nkind: ShadowSyncJob\n"
        "metadata: {name: a}\nspec: {sync: {algorithm: " +
        name.get<std::string>() + "}}\n";
    EXPECT_TRUE(ParseJobYaml(yaml).ok()) << name;
  }
  EXPECT_FALSE(ParseJobYaml("apiVersion: shadowsync.io/v1alpha1\nkind: ShadowSyncJob\n"
                            "metadata: {name: a}\nspec: {sync: {algorithm: shadow-sgd}}\n")
                   .ok());
}

TEST_F(CrdTest, MinimumsAndDefaults) {
  const json& props = spec_["properties"];
  EXPECT_EQ(props["trainer"]["properties"]["replicas"]["minimum"], 1);
  EXPECT_EQ(props["parameterServer"]["properties"]["replicas"]["minimum"], 1);
  EXPECT_EQ(props["parameterServer"]["properties"]["slots"]["minimum"], 1);
  EXPECT_EQ(props["parameterServer"]["properties"]["slots"]["maximum"], kMaxSlots);
  EXPECT_EQ(props["parameterServer"]["properties"]["slots"]["default"], 4096);
  EXPECT_EQ(props["syncer"]["properties"]["replicas"]["minimum"], 0);
  EXPECT_EQ(props["runPolicy"]["properties"]["backoffLimit"]["minimum"], 0);
  EXPECT_EQ(props["runPolicy"]["properties"]["cleanPodPolicy"]["enum"],
            json({"None", "Running", "All"}));
}

TEST_F(CrdTest, WhatCannotChangeLiveIsImmutable) {
  const json& props = spec_["properties"];
  const json& slots = props["parameterServer"]["properties"]["slots"]["x-kubernetes-validations"];
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0]["rule"], "self == oldSelf");
  EXPECT_THAT(slots[0]["message"].get<std::string>(), HasSubstr("immutable"));
  EXPECT_EQ(props["model"]["x-kubernetes-validations"][0]["rule"], "self == oldSelf");
  EXPECT_EQ(
      props["parameterServer"]["properties"]["storage"]["x-kubernetes-validations"][0]["rule"],
      "self == oldSelf");
  // Adding or removing the parent objects is caught on spec, with the
  // schema default for slots.
  std::vector<std::string> rules;
  for (const json& r : spec_["x-kubernetes-validations"]) rules.push_back(r["rule"]);
  EXPECT_THAT(rules, Contains(HasSubstr("self.parameterServer.slots : 4096")));
  EXPECT_THAT(rules, Contains("has(self.model) == has(oldSelf.model)"));
  // What must stay mutable: scaling, suspend.
  for (const char* path : {".spec.trainer.replicas", ".spec.parameterServer.replicas",
                           ".spec.runPolicy.suspend", ".spec.parameterServer"}) {
    EXPECT_FALSE(HasTransitionRule(*SchemaAt(schema_, path))) << path;
  }
}

TEST_F(CrdTest, SchemaIsStructural) {
  std::vector<std::string> preserved;
  WalkSchema(schema_, "", [&](const std::string& path, const json& node) {
    SCOPED_TRACE(path);
    EXPECT_TRUE(node.contains("type") || node.value("x-kubernetes-int-or-string", false));
    if (node.value("x-kubernetes-preserve-unknown-fields", false)) preserved.push_back(path);
    if (node.contains("x-kubernetes-list-map-keys")) {
      // List-map keys must be required.
      const auto required = node["items"]["required"].get<std::vector<std::string>>();
      for (const json& key : node["x-kubernetes-list-map-keys"]) {
        EXPECT_THAT(required, Contains(key.get<std::string>()));
      }
    }
  });
  // Unknown fields survive only inside the allowed fields of pod templates.
  EXPECT_THAT(preserved, Not(IsEmpty()));
  for (const std::string& path : preserved) {
    EXPECT_THAT(path, AnyOf(StartsWith("spec.trainer.template.spec."),
                            StartsWith("spec.parameterServer.template.spec."),
                            StartsWith("spec.syncer.template.spec.")));
  }
}

TEST_F(CrdTest, StatusSchemaHasPhasesAndConditions) {
  const json& status = schema_["properties"]["status"]["properties"];
  EXPECT_EQ(status["phase"]["enum"],
            json({"Pending", "Running", "Resharding", "Succeeded", "Failed", "Suspended"}));
  const json& condition = status["conditions"]["items"]["properties"];
  for (const char* f :
       {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}) {
    EXPECT_TRUE(condition.contains(f)) << f;
  }
  EXPECT_EQ(status["conditions"]["x-kubernetes-list-type"], "map");
  for (const char* f :
       {"observedGeneration", "replicaStatuses", "shardMap", "resharding", "examplesProcessed",
        "examplesPerSecond", "trainNE", "startTime", "completionTime", "restarts", "selector"}) {
    EXPECT_TRUE(status.contains(f)) << f;
  }
  for (const char* f : {"epoch", "slots", "numServers", "assignment"}) {
    EXPECT_TRUE(status["shardMap"]["properties"].contains(f)) << f;
  }
  for (const char* f : {"from", "to", "slotsMoved", "slotsTotal", "startedAt"}) {
    EXPECT_TRUE(status["resharding"]["properties"].contains(f)) << f;
  }
  for (const char* role : {"trainer", "ps", "syncer"}) {
    for (const char* f : {"desired", "ready", "readyOfDesired", "active", "succeeded", "failed"}) {
      EXPECT_TRUE(status["replicaStatuses"]["properties"][role]["properties"].contains(f));
    }
  }
}

TEST(JsonToYamlTest, QuotesWhatWouldReadAsAnotherType) {
  const json value = {
      {"strings",
       {"true", "False", "yes",   "no",     "on",           "off",          "y",          "N",
        "null", "~",     "",      "1",      "1.5",          "-2",           ".5",         "1e3",
        "0x1F", "1Gi",   " lead", "trail ", "a: b",         "#c",           "- d",        "[e]",
        "{f}",  "*g",    "&h",    "!i",     "|j",           ">k",           "'l'",        "\"m\"",
        "%n",   "@o",    "`p`",   "q\nr",   "x-kubernetes", "shadow-easgd", "Examples/s", "<<"}},
      {"numbers", {0, -1, 4096, 1.5, 0.02, 1e-9, 1048576}},
      {"booleans", {true, false}},
      {"empty", {{"object", json::object()}, {"array", json::array()}}},
      {"nested", {{{"a", {{"b", {1, 2}}}}}}},
      {"true", "key named true"}};
  const std::string yaml = JsonToYaml(value);
  EXPECT_EQ(ToJson(YAML::Load(yaml)), value) << yaml;
  EXPECT_THAT(yaml, HasSubstr("\"true\": key named true"));
}

TEST(JsonToYamlTest, LeadsWithApiVersionKindMetadata) {
  const std::string yaml =
      JsonToYaml({{"spec", 1}, {"metadata", {{"name", "x"}}}, {"kind", "K"}, {"apiVersion", "v"}});
  EXPECT_EQ(yaml, "apiVersion: v\nkind: K\nmetadata:\n  name: x\nspec: 1\n");
}

TEST_F(CrdTest, YamlParsesBackToTheCrd) { EXPECT_EQ(ToJson(YAML::Load(CrdYaml())), crd_); }

TEST_F(CrdTest, CommittedCrdYamlIsGenerated) {
  const std::string path = SourcePath("deploy/crd.yaml");
  if (testing::RewriteOrExpectGenerated(
          path, CrdYaml(),
          "`shadowsync crd > deploy/crd.yaml` (or SHADOWSYNC_UPDATE_DOCS=1 crd_test)")) {
    GTEST_SKIP() << "rewrote " << path;
  }
}

// deploy/examples/ and deploy/examples/sync/ (one job per synchronization
// algorithm, named after it).
TEST(DeployExamplesTest, EveryExampleParsesAndValidates) {
  int examples = 0;
  bool has_shadow_easgd_criteo = false;
  std::set<std::string> sync_examples;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(SourcePath("deploy/examples"))) {
    const std::string path = entry.path().string();
    if (!path.ends_with(".yaml")) continue;
    SCOPED_TRACE(path);
    ++examples;
    absl::StatusOr<ShadowSyncJob> job = LoadJobFile(path);  // Parses and validates.
    ASSERT_TRUE(job.ok()) << job.status();
    has_shadow_easgd_criteo |= job->spec.sync.algorithm == SyncAlgorithm::kShadowEasgd &&
                               job->spec.data.format == DataFormat::kCriteoTsv;
    if (entry.path().parent_path().filename() == "sync") {
      // The file is named after the algorithm it shows.
      EXPECT_EQ(entry.path().stem().string(), std::string(EnumName(job->spec.sync.algorithm)));
      sync_examples.insert(entry.path().stem().string());
    }
    // A CR too: one document, the CRD's group, version and kind.
    const std::vector<json> docs = LoadYamlDocuments(path);
    ASSERT_EQ(docs.size(), 1u);
    EXPECT_EQ(docs[0]["apiVersion"], std::string(kGroup) + "/" + std::string(kVersion));
    EXPECT_EQ(docs[0]["kind"], std::string(kJobKind));
  }
  EXPECT_GE(examples, 2);
  EXPECT_TRUE(has_shadow_easgd_criteo);
  for (std::string_view algorithm : EnumTraits<SyncAlgorithm>::kNames) {
    EXPECT_TRUE(sync_examples.contains(std::string(algorithm)))
        << "no deploy/examples/sync/" << algorithm << ".yaml";
  }
}

// --- deploy/rbac.yaml and deploy/operator.yaml --------------------------------

std::vector<json> DocsOfKind(const std::vector<json>& docs, const std::string& kind) {
  std::vector<json> out;
  std::copy_if(docs.begin(), docs.end(), std::back_inserter(out),
               [&](const json& d) { return d.value("kind", "") == kind; });
  return out;
}

// Verbs granted on group/resource by the rules of `role`.
std::set<std::string> Verbs(const json& role, const std::string& group,
                            const std::string& resource) {
  std::set<std::string> verbs;
  for (const json& rule : role["rules"]) {
    const json& groups = rule["apiGroups"];
    const json& resources = rule["resources"];
    if (std::find(groups.begin(), groups.end(), group) == groups.end()) continue;
    if (std::find(resources.begin(), resources.end(), resource) == resources.end()) continue;
    for (const json& v : rule["verbs"]) verbs.insert(v);
  }
  return verbs;
}

json OperatorClusterRole(const std::vector<json>& docs) {
  for (const json& role : DocsOfKind(docs, "ClusterRole")) {
    if (role["metadata"]["name"] == "shadowsync-operator") return role;
  }
  return json();
}

TEST(DeployRbacTest, OperatorRoleCoversExactlyWhatItUses) {
  const std::vector<json> docs = LoadYamlDocuments(SourcePath("deploy/rbac.yaml"));
  const json role = OperatorClusterRole(docs);
  ASSERT_TRUE(role.is_object());
  for (const json& rule : role["rules"]) {
    for (const char* list : {"verbs", "resources", "apiGroups"}) {
      EXPECT_THAT(rule[list].get<std::vector<std::string>>(), ::testing::Not(Contains("*")))
          << rule.dump();
    }
  }
  // Every kind Reconcile applies, with the verbs the controller uses: its
  // informers, create, merge patch and delete (never PUT).
  const std::set<std::string> manage = {"get", "list", "watch", "create", "patch", "delete"};
  EXPECT_EQ(Verbs(role, "apps", "statefulsets"), manage);
  EXPECT_EQ(Verbs(role, "", "services"), manage);
  EXPECT_EQ(Verbs(role, "", "configmaps"), manage);
  EXPECT_EQ(Verbs(role, "networking.k8s.io", "networkpolicies"), manage);
  EXPECT_EQ(Verbs(role, "policy", "poddisruptionbudgets"), manage);
  EXPECT_EQ(Verbs(role, "", "pods"), (std::set<std::string>{"get", "list", "watch"}));
  EXPECT_EQ(Verbs(role, "", "events"), (std::set<std::string>{"create", "patch"}));
  EXPECT_EQ(Verbs(role, "shadowsync.io", "shadowsyncjobs"),
            (std::set<std::string>{"get", "list", "watch", "delete"}));
  EXPECT_EQ(Verbs(role, "shadowsync.io", "shadowsyncjobs/status"),
            (std::set<std::string>{"patch"}));
  EXPECT_EQ(Verbs(role, "shadowsync.io", "shadowsyncjobs/finalizers"),
            (std::set<std::string>{"update"}));
  EXPECT_TRUE(Verbs(role, "shadowsync.io", "shadowsyncjobs/scale").empty());
  // Each job's credentials Secret: created, never read back.
  EXPECT_EQ(Verbs(role, "", "secrets"), (std::set<std::string>{"create"}));
  // Leases only in the operator's namespace.
  EXPECT_TRUE(Verbs(role, "coordination.k8s.io", "leases").empty());
  bool lease_role = false;
  for (const json& r : DocsOfKind(docs, "Role")) {
    if (Verbs(r, "coordination.k8s.io", "leases").contains("update")) {
      lease_role = true;
      EXPECT_EQ(r["metadata"]["namespace"], "shadowsync-system");
    }
  }
  EXPECT_TRUE(lease_role);
  // The bindings name the operator's service account.
  for (const char* kind : {"ClusterRoleBinding", "RoleBinding"}) {
    for (const json& b : DocsOfKind(docs, kind)) {
      EXPECT_EQ(b["subjects"][0]["name"], "shadowsync-operator") << kind;
      EXPECT_EQ(b["subjects"][0]["namespace"], "shadowsync-system") << kind;
    }
  }
}

TEST(DeployRbacTest, ReconcileOnlyAppliesKindsTheRoleManages) {
  const json role = OperatorClusterRole(LoadYamlDocuments(SourcePath("deploy/rbac.yaml")));
  const json job = json::parse(R"({"apiVersion": "shadowsync.io/v1alpha1",
      "kind": "ShadowSyncJob", "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
      "spec": {}})");
  const Actions actions = Reconcile({.job = job});
  ASSERT_FALSE(actions.apply.empty());
  for (const json& child : actions.apply) {
    const std::string api_version = child["apiVersion"];
    const size_t slash = api_version.find('/');
    const std::string group = slash == std::string::npos ? "" : api_version.substr(0, slash);
    std::string resource = child["kind"];
    std::transform(resource.begin(), resource.end(), resource.begin(), ::tolower);
    resource =
        resource.ends_with('y') ? resource.substr(0, resource.size() - 1) + "ies" : resource + "s";
    EXPECT_THAT(Verbs(role, group, resource), IsSupersetOf({"create", "patch", "delete"}))
        << group << "/" << resource;
  }
}

TEST(DeployOperatorTest, DeploymentIsLockedDown) {
  const std::vector<json> docs = LoadYamlDocuments(SourcePath("deploy/operator.yaml"));
  ASSERT_EQ(DocsOfKind(docs, "Namespace").size(), 1u);
  EXPECT_EQ(DocsOfKind(docs, "Namespace")[0]["metadata"]["name"], "shadowsync-system");
  const std::vector<json> deployments = DocsOfKind(docs, "Deployment");
  ASSERT_EQ(deployments.size(), 1u);
  const json& pod = deployments[0]["spec"]["template"]["spec"];
  EXPECT_EQ(pod["serviceAccountName"], "shadowsync-operator");
  EXPECT_EQ(pod["securityContext"]["runAsNonRoot"], true);
  ASSERT_EQ(pod["containers"].size(), 1u);
  const json& c = pod["containers"][0];
  EXPECT_EQ(c["args"][0], "operator");
  EXPECT_EQ(c["securityContext"]["allowPrivilegeEscalation"], false);
  EXPECT_EQ(c["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_EQ(c["securityContext"]["capabilities"]["drop"], json({"ALL"}));
  EXPECT_TRUE(c["resources"]["requests"].contains("cpu"));
  EXPECT_TRUE(c["resources"]["limits"].contains("memory"));
  EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"], "/healthz");
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"], "/readyz");
  std::vector<std::string> ports;
  for (const json& p : c["ports"]) ports.push_back(p["name"]);
  EXPECT_THAT(ports, Contains("metrics"));
}

}  // namespace
}  // namespace shadowsync::op
