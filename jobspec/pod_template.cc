// The allow-list of spec.<role>.template (jobspec/job_spec_internal.h): a job
// author shapes where and how the pods run, never what they may reach on the
// node or in the cluster. A field not listed here is a problem of the job.
// The list is the template's schema in the CRD, so the API server refuses
// (kubectl's strict field validation) or drops what the operator would refuse.
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/job_spec_internal.h"

namespace shadowsync::job_spec_internal {
namespace {

// A field whose content the operator passes through as written.
json Open(std::string_view type) {
  if (type == "object") return {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
  if (type == "map") return {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}};
  if (type == "objects") return {{"type", "array"}, {"items", Open("object")}};
  if (type == "strings") return {{"type", "array"}, {"items", {{"type", "string"}}}};
  if (type == "integers") return {{"type", "array"}, {"items", {{"type", "integer"}}}};
  return {{"type", type}};
}

json Allowed(json properties) {
  return {{"type", "object"}, {"properties", std::move(properties)}};
}

json ListOf(json item) { return {{"type", "array"}, {"items", std::move(item)}}; }

constexpr std::string_view kNotRootMessage = "must not be 0: job pods never run as root";

// A securityContext: identities that are not root.
json SecurityContext(json properties) {
  json s = Allowed(std::move(properties));
  s["x-kubernetes-validations"] =
      json::array({{{"rule", "!has(self.runAsUser) || self.runAsUser != 0"},
                    {"message", kNotRootMessage},
                    {"fieldPath", ".runAsUser"}}});
  return s;
}

// Not: privileged, allowPrivilegeEscalation, capabilities, procMount,
// runAsNonRoot, seLinuxOptions, seccompProfile. Ports: not hostPort or hostIP.
json Container() {
  return Allowed({{"args", Open("strings")},
                  {"command", Open("strings")},
                  {"env", Open("objects")},
                  {"envFrom", Open("objects")},
                  {"image", Open("string")},
                  {"imagePullPolicy", Open("string")},
                  {"lifecycle", Open("object")},
                  {"livenessProbe", Open("object")},
                  {"name", Open("string")},
                  {"ports", ListOf(Allowed({{"containerPort", Open("integer")},
                                            {"name", Open("string")},
                                            {"protocol", Open("string")}}))},
                  {"readinessProbe", Open("object")},
                  {"resources", Open("object")},
                  {"securityContext", SecurityContext({{"readOnlyRootFilesystem", Open("boolean")},
                                                       {"runAsGroup", Open("integer")},
                                                       {"runAsUser", Open("integer")}})},
                  {"startupProbe", Open("object")},
                  {"terminationMessagePath", Open("string")},
                  {"terminationMessagePolicy", Open("string")},
                  {"volumeMounts", Open("objects")},
                  {"workingDir", Open("string")}});
}

// Scheduling, image pulls, DNS and the pod's own volumes and containers.
// Not: serviceAccountName, automountServiceAccountToken, hostNetwork, hostPID,
// hostIPC, hostUsers, nodeName, shareProcessNamespace, runtimeClassName.
// Pod securityContext not: runAsNonRoot (always true), sysctls,
// seLinuxOptions, seccompProfile, windowsOptions. Volumes: sources that stay
// inside the pod's own storage and the job's namespace; not hostPath, nor
// network file systems named by address.
json PodSpec() {
  return Allowed({{"affinity", Open("object")},
                  {"containers", ListOf(Container())},
                  {"dnsConfig", Open("object")},
                  {"dnsPolicy", Open("string")},
                  {"imagePullSecrets", Open("objects")},
                  {"initContainers", ListOf(Container())},
                  {"nodeSelector", Open("map")},
                  {"priorityClassName", Open("string")},
                  {"schedulerName", Open("string")},
                  {"securityContext", SecurityContext({{"fsGroup", Open("integer")},
                                                       {"fsGroupChangePolicy", Open("string")},
                                                       {"runAsGroup", Open("integer")},
                                                       {"runAsUser", Open("integer")},
                                                       {"supplementalGroups", Open("integers")}})},
                  {"terminationGracePeriodSeconds", Open("integer")},
                  {"tolerations", Open("objects")},
                  {"topologySpreadConstraints", Open("objects")},
                  {"volumes", ListOf(Allowed({{"configMap", Open("object")},
                                              {"downwardAPI", Open("object")},
                                              {"emptyDir", Open("object")},
                                              {"ephemeral", Open("object")},
                                              {"name", Open("string")},
                                              {"persistentVolumeClaim", Open("object")},
                                              {"projected", Open("object")},
                                              {"secret", Open("object")}}))}});
}

// Walks a template along PodTemplateSchema(): a key its object does not list
// is not allowed, and a securityContext may not name root. Only the shapes the
// allow-list needs are checked here; the pods' own API validation does the rest.
class TemplateChecker {
 public:
  explicit TemplateChecker(Problems& problems) : problems_(problems) {}

  void Check(const json& value, const json& schema, const std::string& path) {
    if (schema.contains("x-kubernetes-preserve-unknown-fields")) return;
    const std::string& type = schema["type"].get_ref<const std::string&>();
    if (type == "array") {
      if (!value.is_array()) {
        Add(path, "must be a list");
        return;
      }
      for (size_t i = 0; i < value.size(); ++i) Check(value[i], schema["items"], Index(path, i));
      return;
    }
    if (type != "object" || !schema.contains("properties")) return;
    if (!value.is_object()) {
      Add(path, absl::StrCat("must be an object, got ", Dump(value)));
      return;
    }
    const json& properties = schema["properties"];
    for (const auto& [key, field] : value.items()) {
      if (!properties.contains(key)) {
        std::vector<std::string> allowed;
        for (const auto& [name, unused] : properties.items()) allowed.push_back(name);
        Add(Join(path, key), absl::StrCat("not allowed in a pod template; allowed here: ",
                                          absl::StrJoin(allowed, ", "), " (docs/operator.md)"));
        continue;
      }
      Check(field, properties[key], Join(path, key));
    }
    if (schema.contains("x-kubernetes-validations")) {  // A securityContext.
      auto user = value.find("runAsUser");
      if (user != value.end() && user->is_number() && user->get<double>() == 0) {
        Add(Join(path, "runAsUser"), std::string(kNotRootMessage));
      }
    }
  }

 private:
  void Add(std::string path, std::string message) {
    problems_.push_back({std::move(path), std::move(message)});
  }

  Problems& problems_;
};

}  // namespace

const json& PodTemplateSchema() {
  static const json* schema = new json(
      Allowed({{"metadata", Allowed({{"labels", Open("map")}, {"annotations", Open("map")}})},
               {"spec", PodSpec()}}));
  return *schema;
}

void CheckPodTemplate(const json& pod_template, const std::string& path, Problems& problems) {
  if (pod_template.is_null()) return;
  TemplateChecker(problems).Check(pod_template, PodTemplateSchema(), path);
}

}  // namespace shadowsync::job_spec_internal
