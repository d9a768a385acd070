// The allow-list of spec.<role>.template (jobspec/job_spec_internal.h): a job
// author shapes where and how the pods run, never what they may reach on the
// node or in the cluster. A field not listed here is a problem of the job.
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/job_spec_internal.h"

namespace shadowsync::job_spec_internal {
namespace {

using Names = std::set<std::string>;

const Names& TemplateFields() {
  static const auto* names = new Names{"metadata", "spec"};
  return *names;
}
const Names& MetadataFields() {
  static const auto* names = new Names{"labels", "annotations"};
  return *names;
}
// Scheduling, image pulls, DNS and the pod's own volumes and containers.
// Not: serviceAccountName, automountServiceAccountToken, hostNetwork, hostPID,
// hostIPC, hostUsers, nodeName, shareProcessNamespace, runtimeClassName.
const Names& PodSpecFields() {
  static const auto* names = new Names{"affinity",
                                       "containers",
                                       "dnsConfig",
                                       "dnsPolicy",
                                       "imagePullSecrets",
                                       "initContainers",
                                       "nodeSelector",
                                       "priorityClassName",
                                       "schedulerName",
                                       "securityContext",
                                       "terminationGracePeriodSeconds",
                                       "tolerations",
                                       "topologySpreadConstraints",
                                       "volumes"};
  return *names;
}
// Identities that are not root. Not: runAsNonRoot (always true), sysctls,
// seLinuxOptions, seccompProfile, windowsOptions.
const Names& PodSecurityFields() {
  static const auto* names =
      new Names{"fsGroup", "fsGroupChangePolicy", "runAsGroup", "runAsUser", "supplementalGroups"};
  return *names;
}
const Names& ContainerFields() {
  static const auto* names = new Names{"args",
                                       "command",
                                       "env",
                                       "envFrom",
                                       "image",
                                       "imagePullPolicy",
                                       "lifecycle",
                                       "livenessProbe",
                                       "name",
                                       "ports",
                                       "readinessProbe",
                                       "resources",
                                       "securityContext",
                                       "startupProbe",
                                       "terminationMessagePath",
                                       "terminationMessagePolicy",
                                       "volumeMounts",
                                       "workingDir"};
  return *names;
}
// Not: privileged, allowPrivilegeEscalation, capabilities, procMount,
// runAsNonRoot, seLinuxOptions, seccompProfile.
const Names& ContainerSecurityFields() {
  static const auto* names = new Names{"readOnlyRootFilesystem", "runAsGroup", "runAsUser"};
  return *names;
}
// Not hostPort or hostIP.
const Names& PortFields() {
  static const auto* names = new Names{"containerPort", "name", "protocol"};
  return *names;
}
// Volume sources that stay inside the pod's own storage and the job's
// namespace. Not hostPath, nor network file systems named by address.
const Names& VolumeFields() {
  static const auto* names =
      new Names{"configMap", "downwardAPI",           "emptyDir",  "ephemeral",
                "name",      "persistentVolumeClaim", "projected", "secret"};
  return *names;
}

class TemplateChecker {
 public:
  explicit TemplateChecker(Problems& problems) : problems_(problems) {}

  void Check(const json& t, const std::string& path) {
    if (t.is_null()) return;
    if (!Object(t, path, TemplateFields())) return;
    if (auto m = t.find("metadata"); m != t.end()) {
      Object(*m, Join(path, "metadata"), MetadataFields());
    }
    auto spec = t.find("spec");
    if (spec == t.end()) return;
    const std::string spec_path = Join(path, "spec");
    if (!Object(*spec, spec_path, PodSpecFields())) return;
    if (auto s = spec->find("securityContext"); s != spec->end()) {
      const std::string p = Join(spec_path, "securityContext");
      if (Object(*s, p, PodSecurityFields())) NotRoot(*s, p);
    }
    for (const char* list : {"containers", "initContainers"}) {
      auto c = spec->find(list);
      if (c == spec->end()) continue;
      const std::string p = Join(spec_path, list);
      if (!c->is_array()) {
        Add(p, "must be a list");
        continue;
      }
      for (size_t i = 0; i < c->size(); ++i) Container((*c)[i], Index(p, i));
    }
    if (auto v = spec->find("volumes"); v != spec->end()) {
      const std::string p = Join(spec_path, "volumes");
      if (!v->is_array()) {
        Add(p, "must be a list");
      } else {
        for (size_t i = 0; i < v->size(); ++i) Object((*v)[i], Index(p, i), VolumeFields());
      }
    }
  }

 private:
  void Container(const json& c, const std::string& path) {
    if (!Object(c, path, ContainerFields())) return;
    if (auto s = c.find("securityContext"); s != c.end()) {
      const std::string p = Join(path, "securityContext");
      if (Object(*s, p, ContainerSecurityFields())) NotRoot(*s, p);
    }
    if (auto ports = c.find("ports"); ports != c.end()) {
      const std::string p = Join(path, "ports");
      if (!ports->is_array()) {
        Add(p, "must be a list");
        return;
      }
      for (size_t i = 0; i < ports->size(); ++i) Object((*ports)[i], Index(p, i), PortFields());
    }
  }

  // An object whose every key is in `allowed`; false if `j` is no object.
  bool Object(const json& j, const std::string& path, const Names& allowed) {
    if (!j.is_object()) {
      Add(path, absl::StrCat("must be an object, got ", Dump(j)));
      return false;
    }
    for (const auto& [key, unused] : j.items()) {
      if (!allowed.contains(key)) {
        Add(Join(path, key), absl::StrCat("not allowed in a pod template; allowed here: ",
                                          absl::StrJoin(allowed, ", "), " (docs/operator.md)"));
      }
    }
    return true;
  }

  void NotRoot(const json& security, const std::string& path) {
    auto user = security.find("runAsUser");
    if (user != security.end() && user->is_number() && user->get<double>() == 0) {
      Add(Join(path, "runAsUser"), "must not be 0: job pods never run as root");
    }
  }

  void Add(std::string path, std::string message) {
    problems_.push_back({std::move(path), std::move(message)});
  }

  Problems& problems_;
};

}  // namespace

void CheckPodTemplate(const json& pod_template, const std::string& path, Problems& problems) {
  TemplateChecker(problems).Check(pod_template, path);
}

}  // namespace shadowsync::job_spec_internal
