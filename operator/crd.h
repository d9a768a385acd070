// The ShadowSyncJob CustomResourceDefinition (docs/job-spec.md, docs/operator.md), generated
// from the one job-spec definition: openAPIV3Schema.properties.spec is
// JobSpecOpenApiSchema() (jobspec/job_spec.h) plus the CRD-only immutability
// rules; the status schema, names, subresources and printer columns are
// defined here. deploy/crd.yaml is CrdYaml()'s output (`shadowsync crd`),
// and a test keeps the two equal. Pure functions; thread-safe.
//
//   std::cout << CrdYaml();                         // what `shadowsync crd` prints
//   nlohmann::json status = JobStatusOpenApiSchema();
#ifndef SHADOWSYNC_OPERATOR_CRD_H_
#define SHADOWSYNC_OPERATOR_CRD_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace shadowsync::op {

inline constexpr std::string_view kGroup = "shadowsync.io";
inline constexpr std::string_view kVersion = "v1alpha1";
inline constexpr std::string_view kPlural = "shadowsyncjobs";
inline constexpr std::string_view kSingular = "shadowsyncjob";
inline constexpr std::string_view kListKind = "ShadowSyncJobList";
inline constexpr std::string_view kShortName = "ssj";
inline constexpr std::string_view kCrdName = "shadowsyncjobs.shadowsync.io";

// The phases of status.phase, in the order of the schema's enum.
inline constexpr std::string_view kPhases[] = {"Pending",   "Running", "Resharding",
                                               "Succeeded", "Failed",  "Suspended"};

// The condition types the operator maintains (metav1.Condition), in the
// order they appear in status.conditions. NotLearning appears only once a
// trainer reported that its run is not learning (spec.trainer.learningCheck).
inline constexpr std::string_view kConditionTypes[] = {
    "Created", "Running", "Resharding", "Suspended", "Succeeded", "Failed", "NotLearning"};

// The apiextensions.k8s.io/v1 CustomResourceDefinition
// shadowsyncjobs.shadowsync.io: version v1alpha1 (served, storage), scope
// Namespaced, short name ssj, category all; structural schema; status and
// scale subresources (scale = trainer replicas); printer columns Phase,
// Trainers, PS, Algorithm, Examples/s, Age (+ Examples and NE in -o wide);
// `self == oldSelf` rules on what cannot change while a job exists
// (spec.parameterServer.slots, spec.model, spec.parameterServer.storage).
nlohmann::json ShadowSyncJobCrd();

// The OpenAPI schema of .status (what reconcile.h writes).
nlohmann::json JobStatusOpenApiSchema();

// ShadowSyncJobCrd() as YAML, with a generated-file header: the content of
// deploy/crd.yaml. Deterministic (see JsonToYaml).
std::string CrdYaml();

// Renders any JSON value as block-style YAML (2-space indent). Strings that
// a YAML 1.1 or 1.2 reader would take for another type ("true", "yes",
// "1.0", "") are double-quoted, so parsing the output gives `value` back.
// Keys are sorted, except that an object with an apiVersion starts with
// apiVersion, kind and metadata.
std::string JsonToYaml(const nlohmann::json& value);

}  // namespace shadowsync::op

#endif  // SHADOWSYNC_OPERATOR_CRD_H_
