#include "operator/crd.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "jobspec/job_spec.h"

namespace shadowsync::op {
namespace {

using json = nlohmann::json;

json Integer(std::string_view description, bool int64 = false) {
  return {{"type", "integer"},
          {"format", int64 ? "int64" : "int32"},
          {"minimum", 0},
          {"description", description}};
}

json Number(std::string_view description) {
  return {{"type", "number"}, {"format", "double"}, {"description", description}};
}

json String(std::string_view description) {
  return {{"type", "string"}, {"description", description}};
}

json Time(std::string_view description) {
  return {{"type", "string"}, {"format", "date-time"}, {"description", description}};
}

json Object(std::string_view description, json properties) {
  return {{"type", "object"}, {"description", description}, {"properties", std::move(properties)}};
}

json ReplicaStatusSchema(std::string_view role) {
  return Object(
      absl::StrCat("Pods of the ", std::string(role), " StatefulSet."),
      {{"desired", Integer("Pods the spec asks for (0 while the spec is invalid).")},
       {"ready", Integer("Pods whose Ready condition is True.")},
       {"readyOfDesired", String("ready/desired, as `kubectl get` shows it, e.g. \"2/3\".")},
       {"active", Integer("Pods not terminated (Pending or Running) and not being deleted.")},
       {"succeeded",
        Integer("Pods whose main container exited 0 (trainers: finished their share).")},
       {"failed", Integer("Pods in phase Failed, or whose main container last exited non-zero.")},
       {"restarts",
        Integer("Failed runs of the main containers (exits other than a trainer's exit 0 when "
                "its data is done) and pods in phase Failed.")}});
}

json ConditionSchema() {
  json item =
      Object("A metav1.Condition.",
             {{"type", String("Created, Running, Resharding, Suspended, Succeeded or Failed.")},
              {"status",
               {{"type", "string"},
                {"enum", {"True", "False", "Unknown"}},
                {"description", "True, False or Unknown."}}},
              {"reason", String("CamelCase reason of the last change, e.g. BackoffLimitExceeded.")},
              {"message", String("Human-readable details.")},
              {"lastTransitionTime", Time("When status last changed.")},
              {"observedGeneration",
               Integer("metadata.generation the condition was computed from.", true)}});
  item["required"] = {"type", "status"};
  return {{"type", "array"},
          {"description",
           "Conditions, one per type (Created, Running, Resharding, Suspended, Succeeded, "
           "Failed). lastTransitionTime changes only when a condition's status does."},
          {"items", std::move(item)},
          {"x-kubernetes-list-type", "map"},
          {"x-kubernetes-list-map-keys", {"type"}}};
}

json Rule(std::string rule, std::string message) {
  return {{"rule", std::move(rule)}, {"message", std::move(message)}};
}

// The spec schema with the rules on what cannot change while a job exists.
// A `self == oldSelf` rule on a field runs only when the old and the new
// object both have it, so rules on `spec` itself catch adding or removing.
json SpecSchema() {
  json spec = JobSpecOpenApiSchema();
  json& props = spec["properties"];
  json& ps = props["parameterServer"]["properties"];
  // Appended: JobSpecOpenApiSchema() carries the cross-field rules already.
  auto add = [](json& node, json rule) {
    node["x-kubernetes-validations"].push_back(std::move(rule));
  };
  add(ps["slots"],
      Rule("self == oldSelf",
           "spec.parameterServer.slots is immutable: every row's place is slot = H(table, id) mod "
           "slots"));
  add(ps["storage"], Rule("self == oldSelf",
                          "spec.parameterServer.storage is immutable: a StatefulSet's "
                          "volumeClaimTemplates cannot change"));
  add(props["model"], Rule("self == oldSelf",
                           "spec.model is immutable: the tables, embedding dimension and layers "
                           "are fixed for the life of the job"));
  const std::string default_slots = std::to_string(ParameterServerSpec{}.slots);
  auto slots_of = [&](const char* self) {
    return absl::StrCat("(has(", self, ".parameterServer) && has(", self,
                        ".parameterServer.slots) ? ", self,
                        ".parameterServer.slots : ", default_slots, ")");
  };
  auto has_storage = [](const char* self) {
    return absl::StrCat("(has(", self, ".parameterServer) && has(", self,
                        ".parameterServer.storage))");
  };
  add(spec, Rule("has(self.model) == has(oldSelf.model)",
                 "spec.model cannot be added or removed after creation"));
  add(spec, Rule(absl::StrCat(slots_of("self"), " == ", slots_of("oldSelf")),
                 "spec.parameterServer.slots is immutable"));
  add(spec, Rule(absl::StrCat(has_storage("self"), " == ", has_storage("oldSelf")),
                 "spec.parameterServer.storage cannot be added or removed after creation"));
  return spec;
}

json PrinterColumn(std::string_view name, std::string_view type, std::string_view path,
                   std::string_view description, int priority = 0) {
  json c = {{"name", name}, {"type", type}, {"jsonPath", path}, {"description", description}};
  if (priority != 0) c["priority"] = priority;
  return c;
}

// --- YAML -------------------------------------------------------------------

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// True if a YAML 1.1 (go-yaml v2, kubectl) or 1.2 reader could resolve the
// plain scalar `s` to something other than a string. Errs on the side of
// quoting: anything that starts like a number is quoted.
bool NeedsQuotes(std::string_view s) {
  if (s.empty()) return true;
  static constexpr std::string_view kReserved[] = {
      "~", "null", "true", "false", "yes",   "no",   "on", "off",
      "y", "n",    ".inf", "-.inf", "+.inf", ".nan", "<<", "="};
  for (std::string_view r : kReserved) {
    if (EqualsIgnoreCase(s, r)) return true;
  }
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  if (digit(s[0])) return true;
  if ((s[0] == '+' || s[0] == '-' || s[0] == '.') && s.size() > 1 && (digit(s[1]) || s[1] == '.')) {
    return true;
  }
  // Leading or trailing blanks do not survive a plain scalar.
  return std::isspace(static_cast<unsigned char>(s.front())) ||
         std::isspace(static_cast<unsigned char>(s.back()));
}

// Sorted (json objects are std::maps), except that a Kubernetes object
// (one with an apiVersion) starts with apiVersion, kind and metadata.
std::vector<std::string> OrderedKeys(const json& object) {
  static constexpr std::string_view kLeading[] = {"apiVersion", "kind", "metadata"};
  std::vector<std::string> keys;
  if (object.contains("apiVersion")) {
    for (std::string_view k : kLeading) {
      if (object.contains(std::string(k))) keys.emplace_back(k);
    }
  }
  for (const auto& [key, value] : object.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  return keys;
}

void EmitString(YAML::Emitter& out, const std::string& s) {
  if (NeedsQuotes(s)) out << YAML::DoubleQuoted;
  out << s;
}

void Emit(YAML::Emitter& out, const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      if (j.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      out << YAML::BeginMap;
      for (const std::string& key : OrderedKeys(j)) {
        out << YAML::Key;
        EmitString(out, key);
        out << YAML::Value;
        Emit(out, j[key]);
      }
      out << YAML::EndMap;
      return;
    case json::value_t::array:
      if (j.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      out << YAML::BeginSeq;
      for (const json& item : j) Emit(out, item);
      out << YAML::EndSeq;
      return;
    case json::value_t::string:
      EmitString(out, j.get<std::string>());
      return;
    case json::value_t::boolean:
      out << j.get<bool>();
      return;
    case json::value_t::null:
      out << YAML::Null;
      return;
    default:  // Numbers: JSON's shortest round-trip text is valid YAML.
      out << j.dump();
      return;
  }
}

}  // namespace

nlohmann::json JobStatusOpenApiSchema() {
  std::vector<std::string> phases(std::begin(kPhases), std::end(kPhases));
  json status = Object(
      "Observed state, written by the operator (docs/operator.md).",
      {{"phase",
        {{"type", "string"},
         {"enum", phases},
         {"description",
          "Summary of the conditions: Pending, Running, Resharding, Succeeded, Failed or "
          "Suspended. Succeeded and Failed are final."}}},
       {"conditions", ConditionSchema()},
       {"observedGeneration",
        Integer("metadata.generation of the spec the operator last acted upon.", true)},
       {"selector", String("Label selector of the trainer pods, for the scale subresource (HPA).")},
       {"replicaStatuses",
        Object("Pod counts per role.", {{"trainer", ReplicaStatusSchema("trainer")},
                                        {"ps", ReplicaStatusSchema("ps")},
                                        {"syncer", ReplicaStatusSchema("syncer")}})},
       {"shardMap",
        Object("The parameter servers' shard map as last observed.",
               {{"epoch", Integer("Increases with every change of the map.", true)},
                {"slots", Integer("Hash slots (spec.parameterServer.slots).")},
                {"numServers", Integer("Parameter servers that own slots: ps-0 .. ps-(n-1).")},
                {"assignment",
                 {{"type", "array"},
                  {"description", "Slots owned by each parameter server, by index."},
                  {"items", {{"type", "integer"}, {"format", "int32"}}}}}})},
       {"resharding",
        Object("The reshard in progress; absent when the servers that own slots are the ones "
               "spec.parameterServer.replicas asks for.",
               {{"from", Integer("Parameter servers owning slots before.")},
                {"to", Integer("Parameter servers owning slots after.")},
                {"slotsMoved", Integer("Slots moved so far.", true)},
                {"slotsTotal", Integer("Slots this reshard moves.", true)},
                {"startedAt", Time("When the operator first asked for this reshard.")}})},
       {"examplesProcessed", Integer("Training examples processed by all trainers.", true)},
       {"examplesPerSecond", Number("Recent training throughput of all trainers.")},
       {"trainNE", Number("Running normalized entropy of the training loss.")},
       {"startTime",
        Time("When the job became active; reset on resume. activeDeadlineSeconds counts from "
             "here.")},
       {"completionTime",
        Time("When the job Succeeded or Failed. ttlSecondsAfterFinished counts from here.")},
       {"restarts",
        Integer("Trainer restarts and failed trainer pods counted against "
                "runPolicy.backoffLimit (a lower bound: a deleted pod takes its count along).")},
       {"init",
        Object("A warm start (spec.init; docs/export.md).",
               {{"claim", String("The PersistentVolumeClaim holding the export.")},
                {"model", String("The export's path inside it.")},
                {"imported",
                 {{"type", "boolean"},
                  {"description",
                   "Trainer 0 has loaded it onto the parameter servers; until then it is the "
                   "only trainer."}}},
                {"rows", Integer("Rows it loaded.", true)}})},
       {"export",
        Object(
            "Exports of the model (spec.export; docs/export.md).",
            {{"claim", String("The PersistentVolumeClaim the exports go to.")},
             {"path", String("Where the trainer pods mount it.")},
             {"claimCreated",
              {{"type", "boolean"},
               {"description", "The operator created the claim (no volumeClaimName)."}}},
             {"request",
              String("The last shadowsync.io/export-request annotation value answered.")},
             {"latest", Object("The newest export trainer 0 reports.",
                               {{"model", String("Its directory in the claim: model-NNNNNN.")},
                                {"request", String("The on-demand request it answered, if any.")},
                                {"final",
                                 {{"type", "boolean"},
                                  {"description", "The export taken when the job completed."}}},
                                {"rows", Integer("Embedding rows.", true)},
                                {"examplesTrained", Integer("Examples trained into it.", true)},
                                {"evalNE", Number("Eval NE at export time (the final export).")},
                                {"evalAUC", Number("Eval AUC at export time (the final export).")},
                                {"time", Time("When it was taken.")}})}})},
       {"rejectedSpec",
        Object("The last spec update the operator refused (invalid, or changing an immutable "
               "field); the job keeps running with the spec it had.",
               {{"generation", Integer("metadata.generation of the refused spec.", true)},
                {"message", String("Why, one line per problem, each naming the field.")}})}});
  return status;
}

nlohmann::json ShadowSyncJobCrd() {
  json schema = Object(
      "A ShadowSyncJob trains a DLRM-style CTR model with trainers, embedding parameter "
      "servers and dense-sync servers (docs/architecture.md).",
      {{"apiVersion", String("shadowsync.io/v1alpha1.")},
       {"kind", String("ShadowSyncJob.")},
       {"metadata", {{"type", "object"}}},
       {"spec", SpecSchema()},
       {"status", JobStatusOpenApiSchema()}});
  schema["required"] = {"spec"};
  // The name becomes part of child names ("<name>-trainer-12") and of
  // Services (DNS-1035 labels); the root is where a rule may read it.
  schema["x-kubernetes-validations"] = json::array(
      {Rule(absl::StrCat("!has(self.metadata.name) || size(self.metadata.name) <= ",
                         kMaxJobNameLength),
            absl::StrCat("metadata.name must be at most ", kMaxJobNameLength,
                         " characters so child names such as \"<name>-trainer-12\" stay "
                         "within Kubernetes limits")),
       Rule(
           "!has(self.metadata.name) || self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
           "metadata.name must be a DNS-1035 label: lowercase letters, digits and '-', "
           "starting with a letter and ending with a letter or digit")});

  json version = {
      {"name", kVersion},
      {"served", true},
      {"storage", true},
      {"schema", {{"openAPIV3Schema", std::move(schema)}}},
      {"subresources",
       {{"status", json::object()},
        {"scale",
         {{"specReplicasPath", ".spec.trainer.replicas"},
          {"statusReplicasPath", ".status.replicaStatuses.trainer.active"},
          {"labelSelectorPath", ".status.selector"}}}}},
      {"additionalPrinterColumns",
       {PrinterColumn("Phase", "string", ".status.phase",
                      "Pending, Running, Resharding, "
                      "Succeeded, Failed or Suspended."),
        PrinterColumn("Trainers", "string", ".status.replicaStatuses.trainer.readyOfDesired",
                      "Ready over desired trainer pods."),
        PrinterColumn("PS", "string", ".status.replicaStatuses.ps.readyOfDesired",
                      "Ready over desired parameter-server pods."),
        PrinterColumn("Restarts", "integer", ".status.restarts",
                      "Trainer restarts counted against runPolicy.backoffLimit."),
        PrinterColumn("Algorithm", "string", ".spec.sync.algorithm", "Dense sync strategy."),
        PrinterColumn("Examples/s", "number", ".status.examplesPerSecond",
                      "Recent training throughput."),
        PrinterColumn("Examples", "integer", ".status.examplesProcessed", "Examples processed.", 1),
        PrinterColumn("NE", "number", ".status.trainNE", "Running train NE.", 1),
        PrinterColumn("Export", "string", ".status.export.latest.model",
                      "The newest export in the export claim."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation.")}}};

  return {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata",
       {{"name", kCrdName},
        {"labels",
         {{"app.kubernetes.io/name", "shadowsync"}, {"app.kubernetes.io/part-of", "shadowsync"}}}}},
      {"spec",
       {{"group", kGroup},
        {"scope", "Namespaced"},
        {"names",
         {{"plural", kPlural},
          {"singular", kSingular},
          {"kind", kJobKind},
          {"listKind", kListKind},
          {"shortNames", {kShortName}},
          {"categories", {"all"}}}},
        {"versions", {std::move(version)}}}}};
}

std::string JsonToYaml(const nlohmann::json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetBoolFormat(YAML::TrueFalseBool);
  Emit(out, value);
  return std::string(out.c_str()) + "\n";
}

std::string CrdYaml() {
  return absl::StrCat(
      "# The ShadowSyncJob CustomResourceDefinition. Generated by `shadowsync crd`\n"
      "# (operator/crd.cc, spec schema from JobSpecOpenApiSchema() in "
      "jobspec/job_spec_schema.cc);\n"
      "# do not edit: regenerate with `shadowsync crd > deploy/crd.yaml`.\n",
      JsonToYaml(ShadowSyncJobCrd()));
}

}  // namespace shadowsync::op
