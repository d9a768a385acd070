// Reconcile (operator/reconcile_internal.h): the job, its reference and
// its spec: as decoded and validated, as in effect, and what may not change.

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/job_spec.h"
#include "operator/reconcile_internal.h"

namespace shadowsync::op::internal {
namespace {

constexpr std::string_view kDefaultExportMount = "/var/lib/shadowsync-exports";

}  // namespace

JobRef RefOf(const json& job) {
  const json& meta = Field(job, "metadata");
  JobRef ref{.name = StringField(meta, "name"),
             .ns = StringField(meta, "namespace"),
             .uid = StringField(meta, "uid"),
             .generation = IntField(meta, "generation")};
  if (ref.ns.empty()) ref.ns = "default";
  if (Field(meta, "labels").is_object()) ref.labels = meta["labels"];
  // Presence, not values: `export: {}` asks for exports with the defaults.
  if (const json& e = Field(Field(job, "spec"), "export"); e.is_object()) {
    ref.export_claim = StringField(e, "volumeClaimName");
    ref.export_claim_created = ref.export_claim.empty();
    if (ref.export_claim_created) ref.export_claim = ExportClaimName(ref.name);
    ref.export_mount = StringField(e, "path");
    if (ref.export_mount.empty()) ref.export_mount = kDefaultExportMount;
  }
  const json& init = Field(Field(job, "spec"), "init");
  if (!StringField(init, "fromModel").empty()) {
    ref.init_claim = StringField(init, "volumeClaimName");
    ref.init_imported = Field(Field(Field(job, "status"), "init"), "imported") == json(true);
  }
  return ref;
}

ParsedSpec ParseSpec(const json& object) {
  ParsedSpec p;
  absl::StatusOr<ShadowSyncJob> job = JobFromJson(object);
  if (!job.ok()) {
    p.error = std::string(job.status().message());
    return p;
  }
  p.job = *std::move(job);
  if (absl::Status s = ValidateJob(*p.job); !s.ok()) {
    p.error = std::string(s.message());
    return p;
  }
  if (const InitSpec& init = p.job->spec.init; !init.from_model.empty()) {
    if (init.volume_claim_name.empty()) {
      p.error =
          "spec.init.volumeClaimName: required with spec.init.fromModel on Kubernetes (the claim "
          "holding the export, e.g. an earlier job's <job>-exports)";
      return p;
    }
    if (init.from_model.starts_with("/") || init.from_model == ".." ||
        init.from_model.starts_with("../") || init.from_model.find("/../") != std::string::npos) {
      p.error = absl::StrCat(
          "spec.init.fromModel: on Kubernetes, a path inside spec.init.volumeClaimName "
          "(e.g. model-000003), got \"",
          init.from_model, "\"");
      return p;
    }
  }
  if (!p.job->spec.export_.path.empty() && !p.job->spec.export_.path.starts_with("/")) {
    p.error = absl::StrCat(
        "spec.export.path: on Kubernetes, the absolute path where the trainer "
        "pods mount the export claim, got \"",
        p.job->spec.export_.path, "\"");
    return p;
  }
  p.valid = true;
  return p;
}

std::optional<ShadowSyncJob> SpecInEffect(const Observed& o, const JobRef& ref) {
  auto it = o.config_maps.find(ConfigMapName(ref.name));
  if (it == o.config_maps.end()) return std::nullopt;
  const json& text = Field(Field(it->second, "data"), kJobConfigKey);
  if (!text.is_string()) return std::nullopt;
  absl::StatusOr<ShadowSyncJob> job = ParseJobJson(text.get<std::string>(), "ConfigMap");
  if (!job.ok() || !ValidateJob(*job).ok()) return std::nullopt;
  return *std::move(job);
}

std::string ImmutableChanges(const ShadowSyncJob& before, const ShadowSyncJob& after) {
  std::vector<std::string> problems;
  if (before.spec.parameter_server.slots != after.spec.parameter_server.slots) {
    problems.push_back(absl::StrCat(
        "spec.parameterServer.slots: cannot change while the job exists (",
        before.spec.parameter_server.slots, " -> ", after.spec.parameter_server.slots, ")"));
  }
  if (before.spec.model != after.spec.model) {
    problems.push_back(
        "spec.model: cannot change while the job exists (tables, embedding dimension and layers "
        "are fixed)");
  }
  if (!(before.spec.init == after.spec.init)) {
    problems.push_back("spec.init: cannot change while the job exists (the model it started from)");
  }
  if (!(before.spec.export_ == after.spec.export_)) {
    problems.push_back(
        "spec.export: cannot change while the job exists (the trainer pods mount its claim)");
  }
  if (before.spec.parameter_server.storage != after.spec.parameter_server.storage) {
    problems.push_back(
        "spec.parameterServer.storage: cannot change while the job exists (a StatefulSet's "
        "volumeClaimTemplates are immutable)");
  }
  return absl::StrJoin(problems, "\n");
}

}  // namespace shadowsync::op::internal
