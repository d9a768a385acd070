// The cross-field checks of ValidateSpec (job_spec.cc) as CEL rules
// (x-kubernetes-validations) in the spec's schema, so that the API server
// refuses at `kubectl apply` what the operator would refuse at reconcile. Each
// rule here has its C++ twin in job_spec.cc, and tests/deploy/crd_rules_test.mjs
// checks that both refuse the same specs. Rules are written for an object the
// API server has defaulted, and fall back to the C++ default where a parent is
// absent (the server defaults fields only inside objects that exist).
//
// One check has no rule: whether a ds-sync butterfly schedule can factor
// trainers / groupSize into small enough radices (DsSyncButterflyRadices) is a
// search CEL cannot express. The operator refuses such a job at reconcile.
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/example.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_internal.h"

namespace shadowsync::job_spec_internal {
namespace {

json Rule(std::string rule, std::string_view message, std::string_view field_path = "",
          std::string_view reason = "") {
  json r = {{"rule", std::move(rule)}, {"message", message}};
  if (!field_path.empty()) r["fieldPath"] = field_path;
  if (!reason.empty()) r["reason"] = reason;
  return r;
}

void Add(json& schema, json rule) { schema["x-kubernetes-validations"].push_back(std::move(rule)); }

// `self.<dotted path>`, or `fallback` where a step of the path is absent.
std::string Get(std::string_view path, std::string_view fallback) {
  std::string has;
  std::string prefix = "self";
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string_view::npos) dot = path.size();
    const absl::string_view step = Av(path.substr(start, dot - start));
    absl::StrAppend(&has, has.empty() ? "" : " && ", "has(", prefix, ".", step, ")");
    absl::StrAppend(&prefix, ".", step);
    start = dot + 1;
  }
  return absl::StrCat("(", has, " ? ", prefix, " : ", Av(fallback), ")");
}

std::string Quoted(std::string_view s) { return absl::StrCat("'", Av(s), "'"); }

// DNS-1123 subdomain: dot-separated labels of at most 63 lowercase
// alphanumerics and '-', starting and ending alphanumeric; 253 in all.
constexpr std::string_view kDnsSubdomainRule =
    "self == '' || (size(self) <= 253 && "
    "self.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$')"
    ")";

void DnsName(json& schema) {
  Add(schema, Rule(std::string(kDnsSubdomainRule), "must be a DNS-1123 subdomain or empty"));
}

// The schema node at `path` below `schema`; throws if there is none, so a
// renamed field fails the CRD's generation instead of adding a stray node.
json& At(json& schema, std::initializer_list<const char*> path) {
  json* node = &schema;
  for (const char* key : path) node = &node->at("properties").at(key);
  return *node;
}

// A file the pods read from a Secret mounted at `mount` must lie under it.
void MountedFiles(json& object, std::string_view mount,
                  std::initializer_list<std::pair<std::string_view, std::string_view>> files) {
  for (const auto& [field, default_value] : files) {
    const std::string value = Get(field, Quoted(default_value));
    const std::string field_path = absl::StrCat(".", Av(field));
    Add(object, Rule(absl::StrCat(value, " != ''"), "must not be empty", field_path));
    Add(object,
        Rule(absl::StrCat(Get("secretName", "''"), " == '' || ", value, ".startsWith('", Av(mount),
                          "/')"),
             absl::StrCat("must be under ", Av(mount), ", where secretName's Secret is mounted"),
             field_path));
  }
}

}  // namespace

void AddCelRules(json& spec) {
  const JobSpec d;
  const std::string trainers = Get("trainer.replicas", std::to_string(d.trainer.replicas));
  const std::string algorithm = Get("sync.algorithm", Quoted(EnumName(d.sync.algorithm)));

  // spec.model
  Add(At(spec, {"model", "denseFeatures"}),
      Rule(absl::StrCat("self == ", kCriteoDense),
           absl::StrCat("must be ", kCriteoDense,
                        ", the dense columns of the Criteo layout both data formats produce")));
  json& tables = At(spec, {"model", "tables"});
  tables["maxItems"] = kCriteoSparse;  // Bounds the cost of the uniqueness rule.
  Add(tables, Rule(absl::StrCat("size(self) == ", kCriteoSparse),
                   absl::StrCat("must list ", kCriteoSparse,
                                " tables, one per categorical column of the Criteo layout")));
  Add(tables, Rule("self.all(t, self.exists_one(u, u.name == t.name))",
                   "table names must be unique", "", "FieldValueDuplicate"));
  tables.at("items").at("properties").at("name")["minLength"] = 1;

  // spec.data
  for (const char* list : {"paths", "evalPaths"}) {
    At(spec, {"data", list}).at("items")["minLength"] = 1;
  }
  Add(spec, Rule(absl::StrCat(Get("data.format", Quoted(EnumName(d.data.format))),
                              " != 'criteo-tsv' || size(", Get("data.paths", "[]"), ") > 0"),
                 "must list at least one file when spec.data.format is criteo-tsv", ".data.paths",
                 "FieldValueRequired"));
  // Each trainer reads its own share: one without an example never steps.
  const std::string examples =
      Get("data.synthetic.examples", std::to_string(d.data.synthetic.examples));
  Add(spec,
      Rule(absl::StrCat(Get("data.format", Quoted(EnumName(d.data.format))), " != 'synthetic' || ",
                        examples, " < 1 || ", examples, " >= ", trainers),
           "every trainer needs at least one example: spec.data.synthetic.examples must be "
           ">= spec.trainer.replicas",
           ".trainer.replicas"));

  // spec.trainer
  Add(At(spec, {"trainer"}),
      Rule(absl::StrCat("!has(self.straggler) || ",
                        Get("straggler.count", std::to_string(StragglerSpec{}.count)),
                        " <= ", Get("replicas", std::to_string(d.trainer.replicas))),
           "must be <= spec.trainer.replicas", ".straggler.count"));

  // spec.parameterServer
  json& ps = At(spec, {"parameterServer"});
  const std::string servers = Get("replicas", std::to_string(d.parameter_server.replicas));
  const std::string slots = Get("slots", std::to_string(d.parameter_server.slots));
  Add(ps, Rule(absl::StrCat(servers, " < 1 || ", slots, " < 1 || ", slots, " >= ", servers),
               "must be >= spec.parameterServer.replicas so every server owns a slot", ".slots"));
  DnsName(At(ps, {"storage", "storageClassName"}));

  // spec.runPolicy.schedulingPolicy
  json& policy = At(spec, {"runPolicy", "schedulingPolicy"});
  Add(spec, Rule(absl::StrCat(
                     "!has(self.runPolicy) || !has(self.runPolicy.schedulingPolicy) || "
                     "!has(self.runPolicy.schedulingPolicy.minAvailable) || "
                     "self.runPolicy.schedulingPolicy.minAvailable <= ",
                     trainers, " + ",
                     Get("parameterServer.replicas", std::to_string(d.parameter_server.replicas)),
                     " + ", Get("syncer.replicas", std::to_string(d.syncer.replicas))),
                 "must be <= the job's pods (trainers + parameter servers + syncers)",
                 ".runPolicy.schedulingPolicy.minAvailable"));
  DnsName(At(policy, {"priorityClass"}));
  DnsName(At(policy, {"queue"}));

  // spec.export, spec.init
  DnsName(At(spec, {"export", "volumeClaimName"}));
  DnsName(At(spec, {"export", "storage", "storageClassName"}));
  DnsName(At(spec, {"init", "volumeClaimName"}));

  // spec.security
  const TlsSpec tls_defaults;
  json& tls = At(spec, {"security", "tls"});
  MountedFiles(tls, kTlsMountPath,
               {{"caFile", tls_defaults.ca_file},
                {"certFile", tls_defaults.cert_file},
                {"keyFile", tls_defaults.key_file}});
  DnsName(At(tls, {"serverName"}));
  DnsName(At(tls, {"secretName"}));
  json& token = At(spec, {"security", "authToken"});
  MountedFiles(token, kAuthMountPath, {{"file", AuthTokenSpec{}.file}});
  DnsName(At(token, {"secretName"}));

  // spec.syncer, spec.sync
  Add(spec, Rule(absl::StrCat(algorithm, " == 'none' || ",
                              Get("syncer.replicas", std::to_string(d.syncer.replicas)), " >= 1"),
                 "must be >= 1 unless spec.sync.algorithm is none (only none runs without a "
                 "syncer)",
                 ".syncer.replicas"));
  const std::string group = Get("sync.dsSync.groupSize", std::to_string(d.sync.ds_sync.group_size));
  Add(spec, Rule(absl::StrCat(algorithm, " != 'ds-sync' || ", group, " <= ", trainers),
                 "must be <= spec.trainer.replicas", ".sync.dsSync.groupSize"));
  Add(spec, Rule(absl::StrCat(algorithm, " != 'ds-sync' || ", group, " > ", trainers, " || ",
                              trainers, " % ", group, " == 0"),
                 "must divide spec.trainer.replicas into equal groups", ".sync.dsSync.groupSize"));
}

}  // namespace shadowsync::job_spec_internal
