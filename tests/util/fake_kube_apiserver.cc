#include "tests/util/fake_kube_apiserver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "tests/util/json_line_process.h"
#include "tests/util/yaml_json.h"

namespace shadowsync::testing {
namespace {

using json = nlohmann::json;
using Params = std::map<std::string, std::string>;

// ---------------------------------------------------------------------------
// JSON helpers.

const json& At(const json& j, const std::string& key) {
  static const json* const kNull = new json();
  if (!j.is_object()) return *kNull;
  auto it = j.find(key);
  return it == j.end() ? *kNull : *it;
}
std::string Str(const json& j) { return j.is_string() ? j.get<std::string>() : ""; }
const json& Meta(const json& o) { return At(o, "metadata"); }
std::string MetaStr(const json& o, const std::string& key) { return Str(At(Meta(o), key)); }

// Everything but metadata, status, apiVersion and kind: what bumps generation.
json SpecPart(const json& o) {
  json s = o.is_object() ? o : json::object();
  s.erase("metadata");
  s.erase("status");
  s.erase("apiVersion");
  s.erase("kind");
  return s;
}

// Splits a simple JSONPath (".a.b[0].c", ".metadata.labels['x']", "{.a}")
// into keys (strings) and indices (numbers). False if it is not that simple.
bool SplitJsonPath(absl::string_view path, std::vector<json>* parts) {
  if (absl::ConsumePrefix(&path, "{")) {
    if (!absl::ConsumeSuffix(&path, "}")) return false;
  }
  parts->clear();
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      ++i;
      size_t j = i;
      while (j < path.size() && path[j] != '.' && path[j] != '[') ++j;
      if (j == i) return false;
      parts->push_back(std::string(path.substr(i, j - i)));
      i = j;
    } else if (path[i] == '[') {
      const size_t close = path.find(']', i);
      if (close == absl::string_view::npos) return false;
      absl::string_view inner = path.substr(i + 1, close - i - 1);
      if (inner.size() >= 2 && (inner.front() == '\'' || inner.front() == '"') &&
          inner.back() == inner.front()) {
        parts->push_back(std::string(inner.substr(1, inner.size() - 2)));
      } else {
        int index;
        if (!absl::SimpleAtoi(inner, &index)) return false;
        parts->push_back(index);
      }
      i = close + 1;
    } else {
      return false;
    }
  }
  return true;
}

// The value at `path` in `obj`, or nullptr.
const json* Lookup(const json& obj, absl::string_view path) {
  std::vector<json> parts;
  if (!SplitJsonPath(path, &parts)) return nullptr;
  const json* cur = &obj;
  for (const json& p : parts) {
    if (p.is_string()) {
      if (!cur->is_object()) return nullptr;
      auto it = cur->find(p.get<std::string>());
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else {
      int index = p.get<int>();
      if (!cur->is_array()) return nullptr;
      if (index < 0) index += static_cast<int>(cur->size());
      if (index < 0 || index >= static_cast<int>(cur->size())) return nullptr;
      cur = &(*cur)[static_cast<size_t>(index)];
    }
  }
  return cur;
}

// Sets `path` (keys only) in `obj` to `value`, creating objects on the way.
bool SetPath(json* obj, absl::string_view path, json value) {
  std::vector<json> parts;
  if (!SplitJsonPath(path, &parts) || parts.empty()) return false;
  json* cur = obj;
  for (const json& p : parts) {
    if (!p.is_string()) return false;
    if (!cur->is_object()) *cur = json::object();
    cur = &(*cur)[p.get<std::string>()];
  }
  *cur = std::move(value);
  return true;
}

// ---------------------------------------------------------------------------
// Time.

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

// kubectl's duration.HumanDuration, which the API server uses for ages.
std::string HumanDuration(absl::Duration d) {
  const int64_t seconds = absl::ToInt64Seconds(d);
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return absl::StrCat(seconds, "s");
  const int64_t minutes = seconds / 60;
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return s == 0 ? absl::StrCat(minutes, "m") : absl::StrCat(minutes, "m", s, "s");
  }
  if (minutes < 60 * 3) return absl::StrCat(minutes, "m");
  const int64_t hours = minutes / 60;
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return m == 0 ? absl::StrCat(hours, "h") : absl::StrCat(hours, "h", m, "m");
  }
  if (hours < 48) return absl::StrCat(hours, "h");
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return h == 0 ? absl::StrCat(hours / 24, "d") : absl::StrCat(hours / 24, "d", h, "h");
  }
  if (hours < 24 * 365 * 2) return absl::StrCat(hours / 24, "d");
  if (hours < 24 * 365 * 8) {
    const int64_t dy = (hours / 24) % 365;
    return dy == 0 ? absl::StrCat(hours / 24 / 365, "y")
                   : absl::StrCat(hours / 24 / 365, "y", dy, "d");
  }
  return absl::StrCat(hours / 24 / 365, "y");
}

std::string AgeOf(const json& timestamp) {
  absl::Time t;
  std::string err;
  if (!timestamp.is_string() ||
      !absl::ParseTime(absl::RFC3339_full, timestamp.get<std::string>(), &t, &err)) {
    return "<unknown>";
  }
  return HumanDuration(absl::Now() - t);
}

// ---------------------------------------------------------------------------
// Resource types.

struct PrinterColumn {
  std::string name;
  std::string type;  // integer | number | string | boolean | date
  std::string format;
  std::string description;
  int priority = 0;
  std::string json_path;
};

struct ResourceType {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  std::string list_kind;
  bool namespaced = true;
  std::vector<std::string> short_names;
  std::vector<std::string> categories;
  bool has_status = false;
  bool has_scale = false;
  std::string spec_replicas_path;
  std::string status_replicas_path;
  std::string label_selector_path;     // CRDs: a string selector; built-ins use .spec.selector
  std::vector<PrinterColumn> columns;  // CRD additionalPrinterColumns
  bool from_crd = false;
  // A CRD version's openAPIV3Schema, and the name the validator knows it by
  // (changes with the schema).
  std::shared_ptr<const json> schema;
  std::string schema_key;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  std::string group_version() const { return api_version(); }
  std::string type_key() const { return group + "/" + version + "/" + plural; }
  // Objects are stored once per group and plural, whatever version wrote them.
  std::string store_key() const { return group + "/" + plural; }
  std::string qualified() const { return group.empty() ? plural : plural + "." + group; }
  std::string qualified_kind() const { return group.empty() ? kind : kind + "." + group; }
  bool IsCrd() const {
    return group == "apiextensions.k8s.io" && plural == "customresourcedefinitions";
  }
  bool IsNamespace() const { return group.empty() && plural == "namespaces"; }
};

ResourceType Builtin(std::string group, std::string version, std::string plural,
                     std::string singular, std::string kind, bool namespaced,
                     std::vector<std::string> short_names, std::vector<std::string> categories,
                     bool status, bool scale) {
  ResourceType rt;
  rt.group = std::move(group);
  rt.version = std::move(version);
  rt.plural = std::move(plural);
  rt.singular = std::move(singular);
  rt.kind = std::move(kind);
  rt.list_kind = rt.kind + "List";
  rt.namespaced = namespaced;
  rt.short_names = std::move(short_names);
  rt.categories = std::move(categories);
  rt.has_status = status;
  rt.has_scale = scale;
  if (scale) {
    rt.spec_replicas_path = ".spec.replicas";
    rt.status_replicas_path = ".status.replicas";
  }
  return rt;
}

std::vector<ResourceType> BuiltinTypes() {
  const std::vector<std::string> all = {"all"};
  return {
      Builtin("", "v1", "namespaces", "namespace", "Namespace", false, {"ns"}, {}, true, false),
      Builtin("", "v1", "pods", "pod", "Pod", true, {"po"}, all, true, false),
      Builtin("", "v1", "services", "service", "Service", true, {"svc"}, all, true, false),
      Builtin("", "v1", "configmaps", "configmap", "ConfigMap", true, {"cm"}, {}, false, false),
      Builtin("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, {"sa"}, {},
              false, false),
      Builtin("", "v1", "events", "event", "Event", true, {"ev"}, {}, false, false),
      Builtin("", "v1", "secrets", "secret", "Secret", true, {}, {}, false, false),
      Builtin("", "v1", "endpoints", "endpoints", "Endpoints", true, {"ep"}, {}, false, false),
      Builtin("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim",
              true, {"pvc"}, {}, true, false),
      Builtin("apps", "v1", "statefulsets", "statefulset", "StatefulSet", true, {"sts"}, all, true,
              true),
      Builtin("apps", "v1", "deployments", "deployment", "Deployment", true, {"deploy"}, all, true,
              true),
      Builtin("coordination.k8s.io", "v1", "leases", "lease", "Lease", true, {}, {}, false, false),
      Builtin("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", true,
              {"netpol"}, {}, false, false),
      Builtin("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget",
              true, {"pdb"}, {}, true, false),
      Builtin("events.k8s.io", "v1", "events", "event", "Event", true, {"ev"}, {}, false, false),
      Builtin("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true, {}, {}, false,
              false),
      Builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", true,
              {}, {}, false, false),
      Builtin("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole",
              false, {}, {}, false, false),
      Builtin("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding",
              "ClusterRoleBinding", false, {}, {}, false, false),
      Builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
              "CustomResourceDefinition", false, {"crd", "crds"}, {"api-extensions"}, true, false),
  };
}

// Kubernetes version priority: GA before beta before alpha, higher first.
int VersionRank(const std::string& v, int* major, int* minor) {
  *major = 0;
  *minor = 0;
  if (v.size() < 2 || v[0] != 'v' || !std::isdigit(static_cast<unsigned char>(v[1]))) return 0;
  size_t i = 1;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
    *major = *major * 10 + (v[i] - '0');
    ++i;
  }
  absl::string_view rest = absl::string_view(v).substr(i);
  int rank = 3;
  if (absl::ConsumePrefix(&rest, "beta")) {
    rank = 2;
  } else if (absl::ConsumePrefix(&rest, "alpha")) {
    rank = 1;
  } else if (!rest.empty()) {
    return 0;
  }
  if (rank < 3 && !absl::SimpleAtoi(rest, minor)) return 0;
  return rank;
}

bool VersionBefore(const std::string& a, const std::string& b) {
  int amaj, amin, bmaj, bmin;
  const int ar = VersionRank(a, &amaj, &amin);
  const int br = VersionRank(b, &bmaj, &bmin);
  if (ar != br) return ar > br;
  if (ar == 0) return a < b;
  if (amaj != bmaj) return amaj > bmaj;
  return amin > bmin;
}

// ---------------------------------------------------------------------------
// Errors as metav1.Status.

struct ApiError {
  int code = 500;
  std::string reason;
  std::string message;
  json details;  // null or an object
};

std::string ReasonForCode(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "Unknown";
  }
}

json StatusJson(const ApiError& e) {
  json s = {{"kind", "Status"},    {"apiVersion", "v1"},   {"metadata", json::object()},
            {"status", "Failure"}, {"message", e.message}, {"reason", e.reason},
            {"code", e.code}};
  if (e.details.is_object() && !e.details.empty()) s["details"] = e.details;
  return s;
}

ApiError Err(int code, std::string message, json details = nullptr) {
  return ApiError{code, ReasonForCode(code), std::move(message), std::move(details)};
}

json Details(const ResourceType& rt, const std::string& name) {
  json d = {{"name", name}, {"kind", rt.plural}};
  if (!rt.group.empty()) d["group"] = rt.group;
  return d;
}

ApiError NotFound(const ResourceType& rt, const std::string& name) {
  return Err(404, absl::StrCat(rt.qualified(), " \"", name, "\" not found"), Details(rt, name));
}

ApiError AlreadyExists(const ResourceType& rt, const std::string& name) {
  ApiError e =
      Err(409, absl::StrCat(rt.qualified(), " \"", name, "\" already exists"), Details(rt, name));
  e.reason = "AlreadyExists";
  return e;
}

ApiError Conflict(const ResourceType& rt, const std::string& name, const std::string& why) {
  return Err(
      409,
      absl::StrCat("Operation cannot be fulfilled on ", rt.qualified(), " \"", name, "\": ", why),
      Details(rt, name));
}

ApiError StaleConflict(const ResourceType& rt, const std::string& name) {
  return Conflict(rt, name,
                  "the object has been modified; please apply your changes to the latest "
                  "version and try again");
}

ApiError Invalid(const ResourceType& rt, const std::string& name, const std::string& field,
                 const std::string& message) {
  json details = {{"name", name}, {"kind", rt.kind}};
  if (!rt.group.empty()) details["group"] = rt.group;
  details["causes"] =
      json::array({{{"reason", "FieldValueInvalid"}, {"message", message}, {"field", field}}});
  return Err(
      422, absl::StrCat(rt.qualified_kind(), " \"", name, "\" is invalid: ", field, ": ", message),
      std::move(details));
}

// 422 with every cause ({field, reason, message}), worded as kube-apiserver
// words an aggregate: one cause inline, several in brackets.
ApiError InvalidCauses(const ResourceType& rt, const std::string& name, const json& causes) {
  json details = {{"name", name}, {"kind", rt.kind}, {"causes", causes}};
  if (!rt.group.empty()) details["group"] = rt.group;
  std::vector<std::string> parts;
  for (const json& c : causes) {
    const std::string field = Str(At(c, "field"));
    parts.push_back(absl::StrCat(field.empty() ? "<nil>" : field, ": ", Str(At(c, "message"))));
  }
  std::string all =
      parts.size() == 1 ? parts[0] : absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  return Err(422, absl::StrCat(rt.qualified_kind(), " \"", name, "\" is invalid: ", all),
             std::move(details));
}

ApiError ResourceNotFound() { return Err(404, "the server could not find the requested resource"); }

absl::Status ToAbslStatus(int code, const std::string& reason, const std::string& message) {
  switch (code) {
    case 404:
      return absl::NotFoundError(message);
    case 409:
      return reason == "AlreadyExists" ? absl::AlreadyExistsError(message)
                                       : absl::AbortedError(message);
    case 400:
    case 415:
    case 422:
      return absl::InvalidArgumentError(message);
    case 410:
      return absl::OutOfRangeError(message);
    case 405:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(absl::StrCat(code, " ", reason, ": ", message));
  }
}

// ---------------------------------------------------------------------------
// One answer of the store: an HTTP code and a JSON body (a Status on error).

struct Reply {
  int code = 200;
  json body;
  std::string content_type = "application/json";
  bool raw = false;  // Send `text` instead of `body`.
  std::string text;
  std::vector<std::string> warnings;  // Warning headers (RFC 7234 code 299).
};

Reply FromError(const ApiError& e) { return Reply{e.code, StatusJson(e)}; }

absl::Status ReplyStatus(const Reply& r) {
  if (r.code < 400) return absl::OkStatus();
  return ToAbslStatus(r.code, Str(At(r.body, "reason")), Str(At(r.body, "message")));
}

absl::StatusOr<json> ReplyJson(Reply r) {
  if (r.code >= 400) return ReplyStatus(r);
  return std::move(r.body);
}

// ---------------------------------------------------------------------------
// Selectors.

struct LabelRequirement {
  enum class Op { kEq, kNotEq, kIn, kNotIn, kExists, kNotExists };
  std::string key;
  Op op = Op::kExists;
  std::vector<std::string> values;
};

// Parses a label selector ("a=b,c!=d,e in (x,y),f notin (z),g,!h").
std::optional<std::vector<LabelRequirement>> ParseLabelSelector(absl::string_view s,
                                                                std::string* error) {
  std::vector<LabelRequirement> reqs;
  // Split on commas outside parentheses.
  std::vector<std::string> terms;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      terms.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  terms.push_back(cur);
  auto is_key_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == '/';
  };
  for (std::string& raw : terms) {
    absl::string_view t = absl::StripAsciiWhitespace(raw);
    if (t.empty()) {
      if (terms.size() == 1) break;  // the empty selector
      *error = absl::StrCat("invalid label selector \"", s, "\": empty requirement");
      return std::nullopt;
    }
    LabelRequirement r;
    if (absl::ConsumePrefix(&t, "!")) {
      r.key = std::string(absl::StripAsciiWhitespace(t));
      r.op = LabelRequirement::Op::kNotExists;
    } else {
      size_t i = 0;
      while (i < t.size() && is_key_char(t[i])) ++i;
      r.key = std::string(t.substr(0, i));
      absl::string_view rest = absl::StripLeadingAsciiWhitespace(t.substr(i));
      if (rest.empty()) {
        r.op = LabelRequirement::Op::kExists;
      } else if (absl::ConsumePrefix(&rest, "!=")) {
        r.op = LabelRequirement::Op::kNotEq;
        r.values.push_back(std::string(absl::StripAsciiWhitespace(rest)));
      } else if (absl::ConsumePrefix(&rest, "==") || absl::ConsumePrefix(&rest, "=")) {
        r.op = LabelRequirement::Op::kEq;
        r.values.push_back(std::string(absl::StripAsciiWhitespace(rest)));
      } else {
        bool in = absl::ConsumePrefix(&rest, "in");
        bool notin = !in && absl::ConsumePrefix(&rest, "notin");
        rest = absl::StripAsciiWhitespace(rest);
        if ((!in && !notin) || !absl::ConsumePrefix(&rest, "(") ||
            !absl::ConsumeSuffix(&rest, ")")) {
          *error = absl::StrCat("unable to parse requirement: \"", t, "\"");
          return std::nullopt;
        }
        r.op = in ? LabelRequirement::Op::kIn : LabelRequirement::Op::kNotIn;
        for (absl::string_view v : absl::StrSplit(rest, ',')) {
          v = absl::StripAsciiWhitespace(v);
          if (!v.empty()) r.values.push_back(std::string(v));
        }
      }
    }
    if (r.key.empty()) {
      *error = absl::StrCat("invalid label selector \"", s, "\": empty key");
      return std::nullopt;
    }
    reqs.push_back(std::move(r));
  }
  return reqs;
}

bool MatchesLabels(const std::vector<LabelRequirement>& reqs, const json& object) {
  const json& labels = At(Meta(object), "labels");
  for (const LabelRequirement& r : reqs) {
    const json& v = At(labels, r.key);
    const bool has = v.is_string();
    const std::string value = Str(v);
    const bool in_values =
        has && std::find(r.values.begin(), r.values.end(), value) != r.values.end();
    switch (r.op) {
      case LabelRequirement::Op::kEq:
      case LabelRequirement::Op::kIn:
        if (!in_values) return false;
        break;
      case LabelRequirement::Op::kNotEq:
      case LabelRequirement::Op::kNotIn:
        if (in_values) return false;
        break;
      case LabelRequirement::Op::kExists:
        if (!has) return false;
        break;
      case LabelRequirement::Op::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

struct FieldRequirement {
  std::string path;  // ".metadata.name"
  bool equal = true;
  std::string value;
};

std::optional<std::vector<FieldRequirement>> ParseFieldSelector(absl::string_view s,
                                                                std::string* error) {
  std::vector<FieldRequirement> reqs;
  for (absl::string_view term : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    term = absl::StripAsciiWhitespace(term);
    FieldRequirement r;
    size_t pos;
    size_t len;
    if ((pos = term.find("!=")) != absl::string_view::npos) {
      r.equal = false;
      len = 2;
    } else if ((pos = term.find("==")) != absl::string_view::npos) {
      len = 2;
    } else if ((pos = term.find('=')) != absl::string_view::npos) {
      len = 1;
    } else {
      *error = absl::StrCat("invalid selector: '", s, "'; can't understand '", term, "'");
      return std::nullopt;
    }
    r.path = absl::StrCat(".", absl::StripAsciiWhitespace(term.substr(0, pos)));
    r.value = std::string(absl::StripAsciiWhitespace(term.substr(pos + len)));
    reqs.push_back(std::move(r));
  }
  return reqs;
}

std::string ScalarString(const json* v) {
  if (v == nullptr || v->is_null()) return "";
  if (v->is_string()) return v->get<std::string>();
  return v->dump();
}

bool MatchesFields(const std::vector<FieldRequirement>& reqs, const json& object) {
  for (const FieldRequirement& r : reqs) {
    const bool eq = ScalarString(Lookup(object, r.path)) == r.value;
    if (eq != r.equal) return false;
  }
  return true;
}

// metav1.FormatLabelSelector of a LabelSelector object.
std::string FormatLabelSelector(const json& selector) {
  std::vector<std::string> parts;
  for (auto& [k, v] : At(selector, "matchLabels").items()) {
    parts.push_back(absl::StrCat(k, "=", Str(v)));
  }
  const json& exprs = At(selector, "matchExpressions");
  if (exprs.is_array()) {
    for (const json& e : exprs) {
      const std::string key = Str(At(e, "key"));
      const std::string op = Str(At(e, "operator"));
      std::vector<std::string> values;
      if (At(e, "values").is_array()) {
        for (const json& v : At(e, "values")) values.push_back(Str(v));
      }
      std::sort(values.begin(), values.end());
      if (op == "In") parts.push_back(absl::StrCat(key, " in (", absl::StrJoin(values, ","), ")"));
      if (op == "NotIn") {
        parts.push_back(absl::StrCat(key, " notin (", absl::StrJoin(values, ","), ")"));
      }
      if (op == "Exists") parts.push_back(key);
      if (op == "DoesNotExist") parts.push_back("!" + key);
    }
  }
  return absl::StrJoin(parts, ",");
}

// ---------------------------------------------------------------------------
// Strategic merge patch, approximated (see the header).

const char* const kMergeKeys[] = {"name",          "uid",  "type", "mountPath",
                                  "containerPort", "port", "ip",   "devicePath"};

std::string MergeKeyOf(const json& list) {
  if (!list.is_array() || list.empty()) return "";
  for (const char* key : kMergeKeys) {
    bool all = true;
    for (const json& e : list) {
      if (!e.is_object() || !e.contains(key)) {
        all = false;
        break;
      }
    }
    if (all) return key;
  }
  return "";
}

json StripDirectives(const json& j) {
  if (j.is_object()) {
    json out = json::object();
    for (auto& [k, v] : j.items()) {
      if (!k.empty() && k[0] == '$') continue;
      out[k] = StripDirectives(v);
    }
    return out;
  }
  if (j.is_array()) {
    json out = json::array();
    for (const json& e : j) out.push_back(StripDirectives(e));
    return out;
  }
  return j;
}

json StrategicMerge(const json& target, const json& patch);

json MergeList(const json& current, const json& patch, const json& order) {
  const std::string key = MergeKeyOf(patch);
  if (key.empty() || !current.is_array()) {
    json out = json::array();
    for (const json& e : patch) {
      if (e.is_object() && Str(At(e, "$patch")) == "delete") continue;
      out.push_back(StripDirectives(e));
    }
    return out;
  }
  json out = current;
  for (const json& p : patch) {
    auto it = std::find_if(out.begin(), out.end(), [&](const json& c) {
      return c.is_object() && c.contains(key) && c[key] == p[key];
    });
    if (Str(At(p, "$patch")) == "delete") {
      if (it != out.end()) out.erase(it);
    } else if (it != out.end()) {
      *it = StrategicMerge(*it, p);
    } else {
      out.push_back(StripDirectives(p));
    }
  }
  if (order.is_array()) {
    json ordered = json::array();
    std::vector<bool> used(out.size(), false);
    for (const json& o : order) {
      for (size_t i = 0; i < out.size(); ++i) {
        if (!used[i] && out[i].is_object() && out[i].contains(key) && At(o, key) == out[i][key]) {
          ordered.push_back(out[i]);
          used[i] = true;
          break;
        }
      }
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (!used[i]) ordered.push_back(out[i]);
    }
    out = std::move(ordered);
  }
  return out;
}

json StrategicMerge(const json& target, const json& patch) {
  if (!patch.is_object()) return patch;
  if (Str(At(patch, "$patch")) == "replace") return StripDirectives(patch);
  json result = target.is_object() ? target : json::object();
  for (auto& [k, v] : patch.items()) {
    if (k.empty() || k[0] == '$') continue;
    if (v.is_null()) {
      result.erase(k);
    } else if (v.is_array()) {
      result[k] = MergeList(At(result, k), v, At(patch, "$setElementOrder/" + k));
    } else if (v.is_object()) {
      if (Str(At(v, "$patch")) == "delete") {
        result.erase(k);
      } else {
        result[k] = StrategicMerge(At(result, k), v);
      }
    } else {
      result[k] = v;
    }
  }
  for (auto& [k, v] : patch.items()) {
    constexpr absl::string_view kDelete = "$deleteFromPrimitiveList/";
    if (absl::StartsWith(k, kDelete) && v.is_array()) {
      const std::string field = k.substr(kDelete.size());
      if (result.contains(field) && result[field].is_array()) {
        json kept = json::array();
        for (const json& e : result[field]) {
          if (std::find(v.begin(), v.end(), e) == v.end()) kept.push_back(e);
        }
        result[field] = kept;
      }
    }
    if (k == "$retainKeys" && v.is_array()) {
      json kept = json::object();
      for (auto& [rk, rv] : result.items()) {
        if (std::find(v.begin(), v.end(), json(rk)) != v.end()) kept[rk] = rv;
      }
      result = kept;
    }
  }
  return result;
}

// ---------------------------------------------------------------------------
// Names.

bool IsDnsLabel(absl::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
      return false;
    }
  }
  return s.front() != '-' && s.back() != '-';
}

bool IsDnsSubdomain(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(s, '.')) {
    if (!IsDnsLabel(label)) return false;
  }
  return true;
}

bool IsPathSegmentName(absl::string_view s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == absl::string_view::npos &&
         s.find('%') == absl::string_view::npos;
}

// ---------------------------------------------------------------------------
// URLs.

std::string UrlDecode(absl::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      int v = 0;
      if (!absl::SimpleHexAtoi(s.substr(i + 1, 2), &v)) v = '?';
      out.push_back(static_cast<char>(v));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

Params ParseQuery(absl::string_view query) {
  Params params;
  for (absl::string_view kv : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t eq = kv.find('=');
    std::string key = UrlDecode(kv.substr(0, eq), true);
    std::string value = eq == absl::string_view::npos ? "" : UrlDecode(kv.substr(eq + 1), true);
    params[key] = value;
  }
  return params;
}

std::string Param(const Params& p, const std::string& key) {
  auto it = p.find(key);
  return it == p.end() ? "" : it->second;
}

// A resource URL: /api/v1/... or /apis/<group>/<version>/...
struct ApiPath {
  std::string group;
  std::string version;
  bool has_namespace = false;
  std::string ns;
  std::string plural;  // "" when the path has too many or too few segments
  std::string name;    // "" for a collection
  std::string sub;     // "status", "scale", ... or ""
};

// Nullopt when `path` is not below a group version (discovery paths included).
std::optional<ApiPath> ParseApiPath(absl::string_view path) {
  std::vector<std::string> seg;
  for (absl::string_view s : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    seg.push_back(UrlDecode(s, false));
  }
  ApiPath p;
  size_t i;
  if (seg.size() >= 2 && seg[0] == "api") {
    p.version = seg[1];
    i = 2;
  } else if (seg.size() >= 3 && seg[0] == "apis") {
    p.group = seg[1];
    p.version = seg[2];
    i = 3;
  } else {
    return std::nullopt;
  }
  std::vector<std::string> rest(seg.begin() + static_cast<ptrdiff_t>(i), seg.end());
  if (rest.empty()) return std::nullopt;
  const bool namespace_sub =
      rest.size() == 3 && rest[0] == "namespaces" && (rest[2] == "status" || rest[2] == "finalize");
  if (rest[0] == "namespaces" && rest.size() >= 3 && !namespace_sub) {
    if (rest.size() > 5) return p;
    p.has_namespace = true;
    p.ns = rest[1];
    p.plural = rest[2];
    if (rest.size() > 3) p.name = rest[3];
    if (rest.size() > 4) p.sub = rest[4];
  } else {
    if (rest.size() > 3) return p;
    p.plural = rest[0];
    if (rest.size() > 1) p.name = rest[1];
    if (rest.size() > 2) p.sub = rest[2];
  }
  return p;
}

std::string ObjKey(const std::string& ns, const std::string& name) { return ns + "/" + name; }

// ---------------------------------------------------------------------------
// HTTP plumbing.

struct HttpRequest {
  std::string method;
  std::string target;
  std::string version;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

const char* StatusText(int code) {
  switch (code) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

// A buffered HTTP/1.1 connection. Not thread-safe; owned by one thread.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}

  // Reads the next request. False at EOF, on a socket error or on a
  // malformed request.
  bool ReadRequest(HttpRequest* req) {
    size_t end;
    while ((end = buf_.find("\r\n\r\n", pos_)) == std::string::npos) {
      if (buf_.size() - pos_ > (1 << 20) || !Fill()) return false;
    }
    std::string head = buf_.substr(pos_, end - pos_);
    pos_ = end + 4;
    std::vector<std::string> lines = absl::StrSplit(head, "\r\n");
    std::vector<std::string> first = absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
    if (first.size() != 3) return false;
    *req = HttpRequest();
    req->method = first[0];
    req->target = first[1];
    req->version = first[2];
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
      std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
      auto [it, inserted] = req->headers.emplace(name, value);
      if (!inserted) it->second += ", " + value;
    }
    if (absl::EqualsIgnoreCase(req->Header("expect"), "100-continue")) {
      if (!Send("HTTP/1.1 100 Continue\r\n\r\n")) return false;
    }
    if (absl::StrContains(absl::AsciiStrToLower(req->Header("transfer-encoding")), "chunked")) {
      while (true) {
        std::string line;
        if (!ReadLine(&line)) return false;
        const std::string size_hex = line.substr(0, line.find(';'));
        size_t size = 0;
        if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_hex), &size)) return false;
        if (size == 0) {
          do {
            if (!ReadLine(&line)) return false;
          } while (!line.empty());
          break;
        }
        std::string chunk;
        if (!ReadExact(size, &chunk) || !ReadLine(&line)) return false;
        req->body += chunk;
      }
    } else if (const std::string cl = req->Header("content-length"); !cl.empty()) {
      size_t n = 0;
      if (!absl::SimpleAtoi(cl, &n) || !ReadExact(n, &req->body)) return false;
    }
    if (pos_ > (64 << 10)) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    return true;
  }

  bool Send(absl::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  bool SendChunk(absl::string_view data) {
    return Send(absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n"));
  }

  // True when the peer has closed its side (checked without blocking).
  bool PeerClosed() {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    if (p.revents & POLLIN) {
      char c;
      const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      return n == 0;
    }
    return false;
  }

  int fd() const { return fd_; }

 private:
  bool Fill() {
    char tmp[16384];
    while (true) {
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf_.append(tmp, static_cast<size_t>(n));
      return true;
    }
  }
  bool ReadLine(std::string* line) {
    size_t end;
    while ((end = buf_.find("\r\n", pos_)) == std::string::npos) {
      if (!Fill()) return false;
    }
    *line = buf_.substr(pos_, end - pos_);
    pos_ = end + 2;
    return true;
  }
  bool ReadExact(size_t n, std::string* out) {
    while (buf_.size() - pos_ < n) {
      if (!Fill()) return false;
    }
    *out = buf_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  const int fd_;
  std::string buf_;
  size_t pos_ = 0;
};

std::string ResponseHead(int code, const std::string& content_type, size_t length, bool close,
                         int retry_after, const std::vector<std::string>& warnings = {}) {
  std::string head =
      absl::StrCat("HTTP/1.1 ", code, " ", StatusText(code), "\r\nContent-Type: ", content_type,
                   "\r\nCache-Control: no-cache, private\r\nContent-Length: ", length, "\r\n");
  if (retry_after > 0) absl::StrAppend(&head, "Retry-After: ", retry_after, "\r\n");
  for (const std::string& w : warnings) {
    absl::StrAppend(&head, "Warning: 299 - \"", absl::StrReplaceAll(w, {{"\"", "\\\""}}), "\"\r\n");
  }
  if (close) absl::StrAppend(&head, "Connection: close\r\n");
  absl::StrAppend(&head, "\r\n");
  return head;
}

// One stored change, kept for watch replay.
struct Event {
  int64_t rev = 0;
  std::string type;  // ADDED, MODIFIED, DELETED
  std::string store_key;
  std::string ns;
  json object;  // The new state (for DELETED: the last state at the deletion revision).
  json old;     // The previous state, null for ADDED.
};

enum class UpdateMode { kMain, kStatus };

// ---------------------------------------------------------------------------
// Identities and RBAC (see the header).

constexpr char kAdminToken[] = "fake-token";
constexpr char kUserTokenPrefix[] = "fake-token-for:";

struct UserInfo {
  std::string name;
  std::vector<std::string> groups;

  bool InGroup(const std::string& group) const {
    return std::find(groups.begin(), groups.end(), group) != groups.end();
  }
};

UserInfo UserNamed(const std::string& name) {
  if (name == kFakeAdminUser) return {name, {"system:masters", "system:authenticated"}};
  UserInfo user{name, {}};
  const std::vector<std::string> parts = absl::StrSplit(name, ':');
  if (parts.size() == 4 && parts[0] == "system" && parts[1] == "serviceaccount") {
    user.groups = {"system:serviceaccounts", "system:serviceaccounts:" + parts[2]};
  }
  user.groups.push_back("system:authenticated");
  return user;
}

UserInfo Authenticate(const HttpRequest& req) {
  const std::string header = req.Header("authorization");
  absl::string_view token = header;
  if (absl::ConsumePrefix(&token, "Bearer ") && absl::ConsumePrefix(&token, kUserTokenPrefix) &&
      !token.empty()) {
    return UserNamed(std::string(token));
  }
  return UserNamed(kFakeAdminUser);
}

// What a request asks to do, as kube-apiserver's RequestInfo names it.
struct RequestAttributes {
  bool resource_request = false;
  std::string verb;
  std::string group;
  std::string resource;
  std::string subresource;
  std::string ns;
  std::string name;
};

RequestAttributes AttributesOf(const std::string& method, const std::string& path, bool is_watch) {
  RequestAttributes a;
  a.verb = absl::AsciiStrToLower(method);
  std::optional<ApiPath> p = ParseApiPath(path);
  if (!p || p->plural.empty()) return a;
  a.resource_request = true;
  a.group = p->group;
  a.resource = p->plural;
  a.subresource = p->sub;
  a.ns = p->ns;
  a.name = p->name;
  // A namespace is its own namespace (/api/v1/namespaces/<name>).
  if (!p->has_namespace && a.resource == "namespaces") a.ns = a.name;
  if (method == "GET" || method == "HEAD") {
    a.verb = is_watch ? "watch" : a.name.empty() ? "list" : "get";
  } else if (method == "POST") {
    a.verb = "create";
  } else if (method == "PUT") {
    a.verb = "update";
  } else if (method == "DELETE") {
    a.verb = a.name.empty() ? "deletecollection" : "delete";
  }
  return a;
}

// `list` is an array holding `value` or "*".
bool ListAllows(const json& list, const std::string& value) {
  if (!list.is_array()) return false;
  for (const json& v : list) {
    if (v == "*" || v == value) return true;
  }
  return false;
}

bool RuleAllows(const json& rule, const RequestAttributes& a) {
  if (!ListAllows(At(rule, "verbs"), a.verb) || !ListAllows(At(rule, "apiGroups"), a.group)) {
    return false;
  }
  bool resource = false;
  for (const json& r : At(rule, "resources")) {
    resource = resource || r == "*" ||
               (a.subresource.empty()
                    ? r == a.resource
                    : r == a.resource + "/" + a.subresource || r == "*/" + a.subresource);
  }
  if (!resource) return false;
  const json& names = At(rule, "resourceNames");
  if (!names.is_array() || names.empty()) return true;
  return !a.name.empty() && std::find(names.begin(), names.end(), json(a.name)) != names.end();
}

// `subject` of a binding in `binding_ns` ("" for a ClusterRoleBinding) is `user`.
bool SubjectMatches(const json& subject, const UserInfo& user, const std::string& binding_ns) {
  const std::string kind = Str(At(subject, "kind"));
  const std::string name = Str(At(subject, "name"));
  if (kind == "User") return name == user.name;
  if (kind == "Group") return user.InGroup(name);
  if (kind == "ServiceAccount") {
    std::string ns = Str(At(subject, "namespace"));
    if (ns.empty()) ns = binding_ns;
    return user.name == absl::StrCat("system:serviceaccount:", ns, ":", name);
  }
  return false;
}

// The 403 kube-apiserver's RBAC authorizer answers.
ApiError Forbidden(const UserInfo& user, const RequestAttributes& a) {
  const std::string group_resource = a.group.empty() ? a.resource : a.resource + "." + a.group;
  const std::string resource =
      a.subresource.empty() ? a.resource : a.resource + "/" + a.subresource;
  const std::string scope =
      a.ns.empty() ? " at the cluster scope" : absl::StrCat(" in the namespace \"", a.ns, "\"");
  const std::string why = absl::StrCat("User \"", user.name, "\" cannot ", a.verb, " resource \"",
                                       resource, "\" in API group \"", a.group, "\"", scope);
  json details = {{"kind", a.resource}};
  if (!a.name.empty()) details["name"] = a.name;
  if (!a.group.empty()) details["group"] = a.group;
  return Err(403,
             a.name.empty() ? absl::StrCat(group_resource, " is forbidden: ", why)
                            : absl::StrCat(group_resource, " \"", a.name, "\" is forbidden: ", why),
             std::move(details));
}

constexpr char kTableMime[] = "application/json;as=Table;v=v1;g=meta.k8s.io";

}  // namespace

// ---------------------------------------------------------------------------

class FakeKubeApiServer::Impl {
 public:
  explicit Impl(FakeKubeApiServerOptions options) : options_(std::move(options)) {
    std::random_device rd;
    rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
    MutexLock l(&mu_);
    for (ResourceType& rt : BuiltinTypes()) types_[rt.type_key()] = rt;
    for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
      const ResourceType& rt = types_.at("/v1/namespaces");
      json obj = {{"apiVersion", "v1"},
                  {"kind", "Namespace"},
                  {"metadata", {{"name", ns}, {"labels", {{"kubernetes.io/metadata.name", ns}}}}},
                  {"spec", {{"finalizers", {"kubernetes"}}}}};
      DoCreate(rt, "", std::move(obj), false);
    }
  }

  ~Impl() { Stop(); }

  absl::Status Listen() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(options_.port));
    if (::inet_pton(AF_INET, options_.host.c_str(), &addr.sin_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad IPv4 host ", options_.host));
    }
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd_, 128) != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot bind ", options_.host, ":", options_.port, ": ", strerror(errno)));
    }
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

  void Stop() {
    {
      MutexLock l(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    accept_stopping_.store(true);
    if (listen_fd_ >= 0) {
      ::shutdown(listen_fd_, SHUT_RDWR);
      if (accept_thread_.joinable()) accept_thread_.join();
      ::close(listen_fd_);
      listen_fd_ = -1;
    }
    std::vector<std::unique_ptr<ConnSlot>> conns;
    {
      MutexLock l(&conn_mu_);
      for (auto& c : conns_) ::shutdown(c->fd, SHUT_RDWR);
      conns.swap(conns_);
    }
    for (auto& c : conns) {
      c->thread.join();
      ::close(c->fd);
    }
  }

  int port() const { return port_; }
  std::string url() const { return absl::StrCat("http://", options_.host, ":", port_); }

  // --- direct API ----------------------------------------------------------

  absl::StatusOr<json> DirectGet(const std::string& path) {
    MutexLock l(&mu_);
    return ReplyJson(RouteObject("GET", path, json(), "", {}));
  }
  absl::StatusOr<std::vector<json>> DirectList(const std::string& path) {
    MutexLock l(&mu_);
    SS_ASSIGN_OR_RETURN(json list, ReplyJson(RouteObject("GET", path, json(), "", {})));
    if (!list.contains("items")) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a collection"));
    }
    return list["items"].get<std::vector<json>>();
  }
  absl::StatusOr<json> DirectWrite(const std::string& method, const std::string& path, json body,
                                   const std::string& content_type) {
    MutexLock l(&mu_);
    return ReplyJson(RouteObject(method, path, std::move(body), content_type, {}));
  }

  // Creates `obj`, or replaces it when it exists (ApplyFile).
  absl::Status DirectApply(json obj) {
    MutexLock l(&mu_);
    const std::string api_version = Str(At(obj, "apiVersion"));
    const std::string kind = Str(At(obj, "kind"));
    const ResourceType* found = nullptr;
    for (const auto& [key, rt] : types_) {
      if (rt.api_version() == api_version && rt.kind == kind) found = &rt;
    }
    if (found == nullptr) {
      return absl::NotFoundError(absl::StrCat("no resource of kind ", kind, " in ", api_version));
    }
    const ResourceType rt = *found;  // a copy: CRD writes may unregister it
    std::string ns = rt.namespaced ? MetaStr(obj, "namespace") : "";
    if (rt.namespaced && ns.empty()) ns = "default";
    Reply r = DoCreate(rt, ns, obj, false);
    if (r.code == 409 && Str(At(r.body, "reason")) == "AlreadyExists") {
      if (obj["metadata"].is_object()) obj["metadata"].erase("resourceVersion");
      const std::string name = MetaStr(obj, "name");
      r = DoUpdate(rt, ns, name, std::move(obj), UpdateMode::kMain, false);
    }
    return ReplyStatus(r);
  }

  int64_t resource_version() {
    MutexLock l(&mu_);
    return rev_;
  }
  void Compact() {
    MutexLock l(&mu_);
    history_.clear();
    compacted_rev_ = rev_;
  }
  void DropWatches() {
    MutexLock l(&mu_);
    ++drop_generation_;
  }
  void InjectFault(FakeKubeFault fault) {
    MutexLock l(&mu_);
    faults_.push_back(std::move(fault));
  }
  void ClearFaults() {
    MutexLock l(&mu_);
    faults_.clear();
  }
  std::vector<Request> Requests() {
    MutexLock l(&mu_);
    return requests_;
  }
  void ClearRequests() {
    MutexLock l(&mu_);
    requests_.clear();
  }
  int active_watches() {
    MutexLock l(&mu_);
    return active_watches_;
  }
  bool WaitForWatches(int n, absl::Duration timeout) {
    MutexLock l(&mu_);
    return mu_.AwaitWithTimeout(
        [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_watches_ >= n; }, timeout);
  }

 private:
  struct ConnSlot {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  // What one watch stream selects.
  struct WatchSpec {
    ResourceType rt;
    bool all_namespaces = true;
    std::string ns;
    std::vector<LabelRequirement> labels;
    std::vector<FieldRequirement> fields;
    bool table = false;
    std::string include_object;
  };

  // --- registry --------------------------------------------------------------

  const ResourceType* FindType(const std::string& group, const std::string& version,
                               const std::string& plural) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = types_.find(group + "/" + version + "/" + plural);
    return it == types_.end() ? nullptr : &it->second;
  }

  const ResourceType* FindByStoreKey(const std::string& store_key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [key, rt] : types_) {
      if (rt.store_key() == store_key) return &rt;
    }
    return nullptr;
  }

  // The resource types a CRD object declares, or an error message.
  static std::optional<std::vector<ResourceType>> TypesFromCrd(const json& crd, std::string* field,
                                                               std::string* error) {
    const json& spec = At(crd, "spec");
    const json& names = At(spec, "names");
    ResourceType base;
    base.group = Str(At(spec, "group"));
    base.plural = Str(At(names, "plural"));
    base.kind = Str(At(names, "kind"));
    base.singular = Str(At(names, "singular"));
    if (base.singular.empty()) base.singular = absl::AsciiStrToLower(base.kind);
    base.list_kind = Str(At(names, "listKind"));
    if (base.list_kind.empty()) base.list_kind = base.kind + "List";
    if (At(names, "shortNames").is_array()) {
      base.short_names = At(names, "shortNames").get<std::vector<std::string>>();
    }
    if (At(names, "categories").is_array()) {
      base.categories = At(names, "categories").get<std::vector<std::string>>();
    }
    const std::string scope = Str(At(spec, "scope"));
    base.namespaced = scope == "Namespaced";
    base.from_crd = true;
    if (base.group.empty() || base.group.find('.') == std::string::npos) {
      *field = "spec.group";
      *error = "should be a domain with at least one dot";
      return std::nullopt;
    }
    if (base.plural.empty() || base.kind.empty()) {
      *field = base.plural.empty() ? "spec.names.plural" : "spec.names.kind";
      *error = "Required value";
      return std::nullopt;
    }
    if (scope != "Namespaced" && scope != "Cluster") {
      *field = "spec.scope";
      *error =
          "Unsupported value: \"" + scope + "\": supported values: \"Cluster\", \"Namespaced\"";
      return std::nullopt;
    }
    if (MetaStr(crd, "name") != base.plural + "." + base.group) {
      *field = "metadata.name";
      *error = "must be spec.names.plural+\".\"+spec.group";
      return std::nullopt;
    }
    std::vector<ResourceType> out;
    const json& versions = At(spec, "versions");
    if (!versions.is_array() || versions.empty()) {
      *field = "spec.versions";
      *error = "Invalid value: must have exactly one version marked as storage version";
      return std::nullopt;
    }
    for (const json& v : versions) {
      if (At(v, "served") != json(true)) continue;
      ResourceType rt = base;
      rt.version = Str(At(v, "name"));
      const json& sub = At(v, "subresources");
      rt.has_status = At(sub, "status").is_object();
      const json& scale = At(sub, "scale");
      if (scale.is_object()) {
        rt.has_scale = true;
        rt.spec_replicas_path = Str(At(scale, "specReplicasPath"));
        rt.status_replicas_path = Str(At(scale, "statusReplicasPath"));
        rt.label_selector_path = Str(At(scale, "labelSelectorPath"));
      }
      if (const json& schema = At(At(v, "schema"), "openAPIV3Schema"); schema.is_object()) {
        rt.schema = std::make_shared<const json>(schema);
        rt.schema_key = absl::StrCat(rt.type_key(), "@", std::hash<std::string>()(schema.dump()));
      }
      const json& cols = At(v, "additionalPrinterColumns");
      if (cols.is_array()) {
        for (const json& c : cols) {
          PrinterColumn pc;
          pc.name = Str(At(c, "name"));
          pc.type = Str(At(c, "type"));
          pc.format = Str(At(c, "format"));
          pc.description = Str(At(c, "description"));
          pc.priority = At(c, "priority").is_number_integer() ? At(c, "priority").get<int>() : 0;
          pc.json_path = Str(At(c, "jsonPath"));
          rt.columns.push_back(std::move(pc));
        }
      }
      out.push_back(std::move(rt));
    }
    return out;
  }

  // Fills a CRD's status as the apiextensions controllers would.
  static void SetCrdStatus(json* crd, const json& old_status) {
    const json& spec = At(*crd, "spec");
    json names = At(spec, "names");
    if (!names.contains("singular")) names["singular"] = absl::AsciiStrToLower(Str(names["kind"]));
    if (!names.contains("listKind")) names["listKind"] = Str(names["kind"]) + "List";
    json stored = json::array();
    for (const json& v : At(spec, "versions")) {
      if (At(v, "storage") == json(true)) stored.push_back(At(v, "name"));
    }
    if (At(old_status, "storedVersions").is_array()) {
      for (const json& v : At(old_status, "storedVersions")) {
        if (std::find(stored.begin(), stored.end(), v) == stored.end()) stored.push_back(v);
      }
    }
    auto condition = [&](const std::string& type, const std::string& reason,
                         const std::string& message) {
      std::string since = Rfc3339(absl::Now());
      if (At(old_status, "conditions").is_array()) {
        for (const json& c : At(old_status, "conditions")) {
          if (Str(At(c, "type")) == type && Str(At(c, "status")) == "True") {
            since = Str(At(c, "lastTransitionTime"));
          }
        }
      }
      return json{{"type", type},
                  {"status", "True"},
                  {"reason", reason},
                  {"message", message},
                  {"lastTransitionTime", since}};
    };
    (*crd)["status"] = {{"acceptedNames", names},
                        {"storedVersions", stored},
                        {"conditions",
                         {condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                          condition("Established", "InitialNamesAccepted",
                                    "the initial names have been accepted")}}};
  }

  void RegisterCrd(const json& crd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string field, error;
    auto types = TypesFromCrd(crd, &field, &error);
    if (!types) return;
    for (ResourceType& rt : *types) types_[rt.type_key()] = std::move(rt);
  }

  void UnregisterCrd(const json& crd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string group = Str(At(At(crd, "spec"), "group"));
    const std::string plural = Str(At(At(At(crd, "spec"), "names"), "plural"));
    for (auto it = types_.begin(); it != types_.end();) {
      if (it->second.from_crd && it->second.group == group && it->second.plural == plural) {
        it = types_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // --- the store -----------------------------------------------------------

  std::map<std::string, json>& Bucket(const ResourceType& rt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return objects_[rt.store_key()];
  }

  const json* FindObject(const ResourceType& rt, const std::string& ns, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto& bucket = Bucket(rt);
    auto it = bucket.find(ObjKey(ns, name));
    return it == bucket.end() ? nullptr : &it->second;
  }

  bool UidExists(const std::string& uid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [key, bucket] : objects_) {
      for (const auto& [k, obj] : bucket) {
        if (MetaStr(obj, "uid") == uid) return true;
      }
    }
    return false;
  }

  // The object as served for `rt`'s version.
  static json AsVersion(const ResourceType& rt, json obj) {
    obj["apiVersion"] = rt.api_version();
    obj["kind"] = rt.kind;
    return obj;
  }

  std::string NewUid() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t a = rng_();
    const uint64_t b = rng_();
    const std::string hex =
        absl::StrCat(absl::Hex(a, absl::kZeroPad16), absl::Hex(b, absl::kZeroPad16));
    std::string uid = absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-4", hex.substr(13, 3),
                                   "-", hex.substr(16, 4), "-", hex.substr(20, 12));
    uid[19] = "89ab"[rng_() % 4];
    return uid;
  }

  std::string RandomSuffix() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
    std::string s;
    for (int i = 0; i < 5; ++i) s.push_back(kAlphabet[rng_() % (sizeof(kAlphabet) - 1)]);
    return s;
  }

  // Stores `obj` (or removes it for DELETED) at the next revision, records
  // the event and applies CRD side effects. Returns the stored object.
  json Commit(const ResourceType& rt, const std::string& type, json obj, json old)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string ns = MetaStr(obj, "namespace");
    const std::string name = MetaStr(obj, "name");
    ++rev_;
    obj["metadata"]["resourceVersion"] = std::to_string(rev_);
    auto& bucket = Bucket(rt);
    if (type == "DELETED") {
      bucket.erase(ObjKey(ns, name));
    } else {
      bucket[ObjKey(ns, name)] = obj;
    }
    history_.push_back(Event{rev_, type, rt.store_key(), ns, obj, old});
    while (history_.size() > options_.watch_history) {
      compacted_rev_ = history_.front().rev;
      history_.pop_front();
    }
    if (rt.IsCrd()) {
      if (!old.is_null()) UnregisterCrd(old);
      if (type == "DELETED") {
        DeleteAllOf(Str(At(At(obj, "spec"), "group")),
                    Str(At(At(At(obj, "spec"), "names"), "plural")));
      } else {
        RegisterCrd(obj);
      }
    }
    return obj;
  }

  // Deletes every object of a CRD's resource (the CRD itself is gone).
  void DeleteAllOf(const std::string& group, const std::string& plural)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ResourceType rt;
    rt.group = group;
    rt.plural = plural;
    rt.from_crd = true;
    std::vector<json> doomed;
    for (const auto& [key, obj] : Bucket(rt)) doomed.push_back(obj);
    for (const json& obj : doomed) {
      rt.kind = Str(At(obj, "kind"));
      DeleteNow(rt, obj, "Background");
    }
    objects_.erase(rt.store_key());
  }

  // Removes `obj` now, then collects garbage.
  json DeleteNow(const ResourceType& rt, const json& obj, const std::string& policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    json last = Commit(rt, "DELETED", obj, obj);
    if (rt.IsNamespace()) {
      const std::string ns = MetaStr(obj, "name");
      std::vector<std::pair<std::string, json>> doomed;
      for (const auto& [store_key, bucket] : objects_) {
        for (const auto& [key, o] : bucket) {
          if (MetaStr(o, "namespace") == ns) doomed.emplace_back(store_key, o);
        }
      }
      for (const auto& [store_key, o] : doomed) {
        const ResourceType* drt = FindByStoreKey(store_key);
        if (drt == nullptr) continue;
        const ResourceType copy = *drt;  // deletions may change types_
        if (FindObject(copy, ns, MetaStr(o, "name")) != nullptr) DeleteNow(copy, o, policy);
      }
    }
    CollectGarbage(MetaStr(obj, "uid"), policy);
    return last;
  }

  // The garbage collector, run synchronously: dependents of `uid`.
  void CollectGarbage(const std::string& uid, const std::string& policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (uid.empty()) return;
    std::vector<std::pair<std::string, json>> dependents;
    for (const auto& [store_key, bucket] : objects_) {
      for (const auto& [key, o] : bucket) {
        const json& refs = At(Meta(o), "ownerReferences");
        if (!refs.is_array()) continue;
        for (const json& ref : refs) {
          if (Str(At(ref, "uid")) == uid) {
            dependents.emplace_back(store_key, o);
            break;
          }
        }
      }
    }
    for (auto& [store_key, stale] : dependents) {
      const ResourceType* found = FindByStoreKey(store_key);
      if (found == nullptr) continue;
      const ResourceType rt_copy = *found;  // deletions may change types_
      const ResourceType* rt = &rt_copy;
      const json* cur = FindObject(*rt, MetaStr(stale, "namespace"), MetaStr(stale, "name"));
      if (cur == nullptr) continue;  // deleted by an earlier cascade
      json obj = *cur;
      json kept = json::array();
      bool live_owner = false;
      for (const json& ref : obj["metadata"]["ownerReferences"]) {
        const std::string ref_uid = Str(At(ref, "uid"));
        if (ref_uid == uid) continue;
        if (UidExists(ref_uid)) {
          live_owner = true;
          kept.push_back(ref);
        }
      }
      if (policy == "Orphan" || live_owner) {
        json old = obj;
        if (kept.empty()) {
          obj["metadata"].erase("ownerReferences");
        } else {
          obj["metadata"]["ownerReferences"] = kept;
        }
        Commit(*rt, "MODIFIED", std::move(obj), std::move(old));
      } else if (At(Meta(obj), "finalizers").is_array() && !obj["metadata"]["finalizers"].empty()) {
        if (!Meta(obj).contains("deletionTimestamp")) {
          json old = obj;
          obj["metadata"]["deletionTimestamp"] = Rfc3339(absl::Now());
          obj["metadata"]["deletionGracePeriodSeconds"] = 0;
          Commit(*rt, "MODIFIED", std::move(obj), std::move(old));
        }
      } else {
        DeleteNow(*rt, obj, "Background");
      }
    }
  }

  // --- operations (HTTP and direct) ------------------------------------------

  Reply DoGet(const ResourceType& rt, const std::string& ns, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const json* obj = FindObject(rt, ns, name);
    if (obj == nullptr) return FromError(NotFound(rt, name));
    return Reply{200, AsVersion(rt, *obj)};
  }

  Reply DoList(const ResourceType& rt, bool all_namespaces, const std::string& ns,
               const Params& params) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string error;
    auto labels = ParseLabelSelector(Param(params, "labelSelector"), &error);
    if (!labels) return FromError(Err(400, error));
    auto fields = ParseFieldSelector(Param(params, "fieldSelector"), &error);
    if (!fields) return FromError(Err(400, error));
    int64_t limit = 0;
    if (!Param(params, "limit").empty() && !absl::SimpleAtoi(Param(params, "limit"), &limit)) {
      return FromError(Err(400, "invalid limit"));
    }
    std::string after;
    if (const std::string token = Param(params, "continue"); !token.empty()) {
      std::string decoded;
      if (!absl::WebSafeBase64Unescape(token, &decoded)) {
        return FromError(Err(400, "continue key is not valid: illegal base64 data"));
      }
      after = decoded;
    }
    json items = json::array();
    std::string last_key;
    bool more = false;
    for (const auto& [key, obj] : Bucket(rt)) {
      if (!all_namespaces && MetaStr(obj, "namespace") != ns) continue;
      if (!after.empty() && key <= after) continue;
      if (!MatchesLabels(*labels, obj) || !MatchesFields(*fields, obj)) continue;
      if (limit > 0 && static_cast<int64_t>(items.size()) >= limit) {
        more = true;
        break;
      }
      json item = AsVersion(rt, obj);
      if (!rt.from_crd) {
        // Typed lists of built-ins carry no kind/apiVersion per item.
        item.erase("kind");
        item.erase("apiVersion");
      }
      items.push_back(std::move(item));
      last_key = key;
    }
    json meta = {{"resourceVersion", std::to_string(rev_)}};
    if (more) meta["continue"] = absl::WebSafeBase64Escape(last_key);
    return Reply{200, json{{"kind", rt.list_kind},
                           {"apiVersion", rt.api_version()},
                           {"metadata", meta},
                           {"items", items}}};
  }

  Reply DoCreate(const ResourceType& rt, const std::string& url_ns, json obj, bool dry_run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!obj.is_object()) return FromError(Err(400, "the body of the request must be an object"));
    if (const std::string kind = Str(At(obj, "kind")); !kind.empty() && kind != rt.kind) {
      return FromError(
          Err(400,
              absl::StrCat("the object provided is unrecognized (must be of type ", rt.kind, ")")));
    }
    if (!obj["metadata"].is_object()) obj["metadata"] = json::object();
    json& meta = obj["metadata"];
    if (rt.namespaced) {
      const std::string body_ns = Str(At(meta, "namespace"));
      if (!body_ns.empty() && body_ns != url_ns) {
        return FromError(Err(400,
                             "the namespace of the provided object does not match the namespace "
                             "sent on the request"));
      }
      meta["namespace"] = url_ns;
      const ResourceType* ns_rt = FindType("", "v1", "namespaces");
      if (ns_rt != nullptr && FindObject(*ns_rt, "", url_ns) == nullptr) {
        return FromError(NotFound(*ns_rt, url_ns));
      }
    } else {
      meta.erase("namespace");
    }
    if (!Str(At(meta, "resourceVersion")).empty()) {
      return FromError(Err(500, "resourceVersion should not be set on objects to be created"));
    }
    std::string name = Str(At(meta, "name"));
    if (name.empty()) {
      const std::string prefix = Str(At(meta, "generateName"));
      if (prefix.empty()) {
        return FromError(
            Invalid(rt, "", "metadata.name", "Required value: name or generateName is required"));
      }
      do {
        name = prefix + RandomSuffix();
      } while (FindObject(rt, url_ns, name) != nullptr);
      meta["name"] = name;
    }
    const bool valid_name = rt.group == "rbac.authorization.k8s.io" ? IsPathSegmentName(name)
                            : rt.IsNamespace() || (rt.group.empty() && rt.plural == "services")
                                ? IsDnsLabel(name)
                                : IsDnsSubdomain(name);
    if (!valid_name) {
      return FromError(Invalid(rt, name, "metadata.name",
                               absl::StrCat("Invalid value: \"", name,
                                            "\": a lowercase RFC 1123 name must consist of lower "
                                            "case alphanumeric characters, '-' or '.'")));
    }
    if (FindObject(rt, rt.namespaced ? url_ns : "", name) != nullptr) {
      return FromError(AlreadyExists(rt, name));
    }
    meta["uid"] = NewUid();
    meta["creationTimestamp"] = Rfc3339(absl::Now());
    meta["generation"] = 1;
    meta.erase("deletionTimestamp");
    meta.erase("deletionGracePeriodSeconds");
    obj = AsVersion(rt, std::move(obj));
    if (rt.has_status) {
      obj.erase("status");
      if (rt.IsNamespace()) obj["status"] = {{"phase", "Active"}};
      if (rt.group.empty() && rt.plural == "pods") obj["status"] = {{"phase", "Pending"}};
    }
    if (rt.IsCrd()) {
      if (auto error = ValidateCrd(rt, obj, nullptr)) return FromError(*error);
      SetCrdStatus(&obj, json());
    }
    if (auto error = ValidateCustom(rt, &obj, nullptr)) return FromError(*error);
    if (dry_run) return Reply{201, obj};
    return Reply{201, AsVersion(rt, Commit(rt, "ADDED", std::move(obj), json()))};
  }

  std::optional<ApiError> ValidateCrd(const ResourceType& rt, const json& crd, const json* old)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string field, error;
    auto types = TypesFromCrd(crd, &field, &error);
    if (!types) return Invalid(rt, MetaStr(crd, "name"), field, error);
    for (const ResourceType& t : *types) {
      const ResourceType* existing = FindType(t.group, t.version, t.plural);
      if (existing != nullptr && !existing->from_crd) {
        return Invalid(rt, MetaStr(crd, "name"), "spec.names.plural",
                       "conflicts with a built-in resource");
      }
    }
    json causes = json::array();
    for (const ResourceType& t : *types) {
      absl::StatusOr<json> problems = RegisterSchema(t);
      if (!problems.ok()) return Err(500, std::string(problems.status().message()));
      for (const json& p : *problems) {
        causes.push_back(
            {{"reason", "FieldValueInvalid"},
             {"field", absl::StrCat("spec.versions[", t.version, "].schema.openAPIV3Schema",
                                    Str(At(p, "field")).empty() ? "" : ".", Str(At(p, "field")),
                                    ".x-kubernetes-validations")},
             {"message", absl::StrCat("Invalid value: \"", Str(At(p, "rule")),
                                      "\": compilation failed: ", Str(At(p, "problem")))}});
      }
    }
    if (!causes.empty()) return InvalidCauses(rt, MetaStr(crd, "name"), causes);
    return std::nullopt;
  }

  // The validator's answer to `request`; it starts on first use.
  absl::StatusOr<json> CallValidator(const json& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (validator_ == nullptr) {
      SS_ASSIGN_OR_RETURN(validator_, JsonLineProcess::Start(options_.crd_validator));
    }
    absl::StatusOr<json> reply = validator_->Call(request);
    if (!reply.ok()) {  // Restarted, and given its schemas again, by the next call.
      validator_.reset();
      validator_schemas_.clear();
    }
    if (reply.ok() && reply->contains("error")) {
      return absl::InternalError(absl::StrCat("crd validator: ", Str((*reply)["error"])));
    }
    return reply;
  }

  // Gives `t`'s schema to the validator once; the rules that do not compile
  // ({field, rule, problem}), none without a schema or a validator.
  absl::StatusOr<json> RegisterSchema(const ResourceType& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!t.schema || options_.crd_validator.empty()) return json::array();
    if (auto it = validator_schemas_.find(t.schema_key); it != validator_schemas_.end()) {
      return it->second;
    }
    SS_ASSIGN_OR_RETURN(
        json reply,
        CallValidator({{"op", "schema"}, {"key", t.schema_key}, {"schema", *t.schema}}));
    validator_schemas_[t.schema_key] = reply["problems"];
    return reply["problems"];
  }

  // Validates a custom resource about to be stored by a create or an update
  // (`old`: the stored object), filling in defaults and pruning unknown
  // fields as kube-apiserver does.
  std::optional<ApiError> ValidateCustom(const ResourceType& rt, json* obj, const json* old)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!rt.from_crd || !rt.schema || options_.crd_validator.empty()) return std::nullopt;
    absl::StatusOr<json> reply = RegisterSchema(rt);
    if (reply.ok()) {
      reply = CallValidator({{"op", "validate"},
                             {"key", rt.schema_key},
                             {"object", *obj},
                             {"old", old == nullptr ? json() : *old}});
    }
    if (!reply.ok()) return Err(500, std::string(reply.status().message()));
    if (!At(*reply, "errors").empty())
      return InvalidCauses(rt, MetaStr(*obj, "name"), (*reply)["errors"]);
    std::vector<std::string> unknown;
    for (const json& field : At(*reply, "unknown")) {
      unknown.push_back(absl::StrCat("unknown field \"", Str(field), "\""));
    }
    if (!unknown.empty() && field_validation_ == "Strict") {
      return Err(400,
                 absl::StrCat(rt.kind, " in version \"", rt.version, "\" cannot be handled as a ",
                              rt.kind, ": strict decoding error: ", absl::StrJoin(unknown, ", ")));
    }
    if (field_validation_ != "Ignore") {
      warnings_.insert(warnings_.end(), unknown.begin(), unknown.end());
    }
    for (const json& d : At(*reply, "defaults")) SetAt(obj, d["path"], d["value"]);
    for (const json& path : At(*reply, "prune")) EraseAt(obj, path);
    return std::nullopt;
  }

  // Sets (erases) the value at `path`, a list of object keys and list indexes.
  static void SetAt(json* obj, const json& path, const json& value) {
    json* node = obj;
    for (const json& step : path) {
      node = step.is_string() ? &(*node)[step.get<std::string>()] : &node->at(step.get<size_t>());
    }
    *node = value;
  }
  static void EraseAt(json* obj, const json& path) {
    json* node = obj;
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      node = path[i].is_string() ? &node->at(path[i].get<std::string>())
                                 : &node->at(path[i].get<size_t>());
    }
    node->erase(path.back().get<std::string>());
  }

  // PUT (and the end of PATCH): replaces the object or, in kStatus mode, its status.
  Reply DoUpdate(const ResourceType& rt, const std::string& ns, const std::string& name, json body,
                 UpdateMode mode, bool dry_run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!body.is_object()) return FromError(Err(400, "the body of the request must be an object"));
    if (const std::string kind = Str(At(body, "kind")); !kind.empty() && kind != rt.kind) {
      return FromError(
          Err(400,
              absl::StrCat("the object provided is unrecognized (must be of type ", rt.kind, ")")));
    }
    const std::string body_name = MetaStr(body, "name");
    if (body_name != name) {
      return FromError(Err(400, absl::StrCat("the name of the object (", body_name,
                                             ") does not match the name on the URL (", name, ")")));
    }
    if (const std::string body_ns = MetaStr(body, "namespace");
        rt.namespaced && !body_ns.empty() && body_ns != ns) {
      return FromError(Err(400,
                           "the namespace of the provided object does not match the namespace "
                           "sent on the request"));
    }
    const json* cur = FindObject(rt, rt.namespaced ? ns : "", name);
    if (cur == nullptr) return FromError(NotFound(rt, name));
    const json old = *cur;
    const std::string rv = MetaStr(body, "resourceVersion");
    if (!rv.empty() && rv != MetaStr(old, "resourceVersion")) {
      return FromError(StaleConflict(rt, name));
    }
    if (const std::string uid = MetaStr(body, "uid"); !uid.empty() && uid != MetaStr(old, "uid")) {
      return FromError(Conflict(rt, name,
                                absl::StrCat("Precondition failed: UID in precondition: ", uid,
                                             ", UID in object meta: ", MetaStr(old, "uid"))));
    }
    json obj;
    if (mode == UpdateMode::kStatus) {
      obj = old;
      if (body.contains("status")) {
        obj["status"] = body["status"];
      } else {
        obj.erase("status");
      }
    } else {
      obj = std::move(body);
      if (!obj["metadata"].is_object()) obj["metadata"] = json::object();
      json& meta = obj["metadata"];
      for (const char* key : {"uid", "creationTimestamp", "generation", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "namespace"}) {
        if (Meta(old).contains(key)) {
          meta[key] = old["metadata"][key];
        } else {
          meta.erase(key);
        }
      }
      if (rt.has_status) {
        if (old.contains("status")) {
          obj["status"] = old["status"];
        } else {
          obj.erase("status");
        }
      }
    }
    obj = AsVersion(rt, std::move(obj));
    obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"];
    // /status too: kube-apiserver validates the whole object on either.
    if (auto error = ValidateCustom(rt, &obj, &old)) return FromError(*error);
    if (SpecPart(obj) != SpecPart(old)) {
      const json& gen = At(Meta(old), "generation");
      obj["metadata"]["generation"] = (gen.is_number_integer() ? gen.get<int64_t>() : 0) + 1;
    }
    if (rt.IsCrd()) {
      if (auto error = ValidateCrd(rt, obj, &old)) return FromError(*error);
      SetCrdStatus(&obj, At(old, "status"));
    }
    if (obj == AsVersion(rt, old)) return Reply{200, obj};  // no-op: no new revision
    if (dry_run) return Reply{200, obj};
    json stored = Commit(rt, "MODIFIED", std::move(obj), old);
    if (Meta(stored).contains("deletionTimestamp") &&
        (!At(Meta(stored), "finalizers").is_array() || stored["metadata"]["finalizers"].empty())) {
      DeleteNow(rt, stored, "Background");
    }
    return Reply{200, AsVersion(rt, stored)};
  }

  Reply DoDelete(const ResourceType& rt, const std::string& ns, const std::string& name,
                 const json& options, const Params& params, bool dry_run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const json* cur = FindObject(rt, rt.namespaced ? ns : "", name);
    if (cur == nullptr) return FromError(NotFound(rt, name));
    const json obj = *cur;
    const json& pre = At(options, "preconditions");
    if (const std::string uid = Str(At(pre, "uid")); !uid.empty() && uid != MetaStr(obj, "uid")) {
      return FromError(Conflict(rt, name,
                                absl::StrCat("Precondition failed: UID in precondition: ", uid,
                                             ", UID in object meta: ", MetaStr(obj, "uid"))));
    }
    if (const std::string rv = Str(At(pre, "resourceVersion"));
        !rv.empty() && rv != MetaStr(obj, "resourceVersion")) {
      return FromError(Conflict(
          rt, name,
          absl::StrCat("Precondition failed: ResourceVersion in precondition: ", rv,
                       ", ResourceVersion in object meta: ", MetaStr(obj, "resourceVersion"))));
    }
    std::string policy = Str(At(options, "propagationPolicy"));
    if (policy.empty()) policy = Param(params, "propagationPolicy");
    if (At(options, "orphanDependents") == json(true)) policy = "Orphan";
    if (dry_run) return Reply{200, AsVersion(rt, obj)};
    const json& finalizers = At(Meta(obj), "finalizers");
    if (finalizers.is_array() && !finalizers.empty()) {
      if (Meta(obj).contains("deletionTimestamp")) return Reply{200, AsVersion(rt, obj)};
      json next = obj;
      next["metadata"]["deletionTimestamp"] = Rfc3339(absl::Now());
      next["metadata"]["deletionGracePeriodSeconds"] = 0;
      return Reply{200, AsVersion(rt, Commit(rt, "MODIFIED", std::move(next), obj))};
    }
    json last = DeleteNow(rt, obj, policy);
    if (rt.from_crd) return Reply{200, AsVersion(rt, last)};
    json details = Details(rt, name);
    details["uid"] = MetaStr(obj, "uid");
    return Reply{200, json{{"kind", "Status"},
                           {"apiVersion", "v1"},
                           {"metadata", json::object()},
                           {"status", "Success"},
                           {"details", details}}};
  }

  Reply DoDeleteCollection(const ResourceType& rt, bool all_namespaces, const std::string& ns,
                           const json& options, const Params& params, bool dry_run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Reply list = DoList(rt, all_namespaces, ns, params);
    if (list.code != 200) return list;
    for (const json& item : list.body["items"]) {
      Reply r =
          DoDelete(rt, MetaStr(item, "namespace"), MetaStr(item, "name"), options, params, dry_run);
      if (r.code >= 400 && r.code != 404) return r;
    }
    return list;
  }

  // The autoscaling/v1 Scale of an object.
  Reply ScaleOf(const ResourceType& rt, const json& obj) {
    auto replicas = [&](const std::string& path) -> int64_t {
      const json* v = path.empty() ? nullptr : Lookup(obj, path);
      return v != nullptr && v->is_number_integer() ? v->get<int64_t>() : 0;
    };
    json status = {{"replicas", replicas(rt.status_replicas_path)}};
    std::string selector;
    if (rt.from_crd) {
      const json* v =
          rt.label_selector_path.empty() ? nullptr : Lookup(obj, rt.label_selector_path);
      if (v != nullptr && v->is_string()) selector = v->get<std::string>();
    } else {
      selector = FormatLabelSelector(At(At(obj, "spec"), "selector"));
    }
    if (!selector.empty()) status["selector"] = selector;
    json meta = {{"name", MetaStr(obj, "name")},
                 {"uid", MetaStr(obj, "uid")},
                 {"resourceVersion", MetaStr(obj, "resourceVersion")},
                 {"creationTimestamp", MetaStr(obj, "creationTimestamp")}};
    if (rt.namespaced) meta["namespace"] = MetaStr(obj, "namespace");
    return Reply{200, json{{"kind", "Scale"},
                           {"apiVersion", "autoscaling/v1"},
                           {"metadata", meta},
                           {"spec", {{"replicas", replicas(rt.spec_replicas_path)}}},
                           {"status", status}}};
  }

  Reply DoScaleUpdate(const ResourceType& rt, const std::string& ns, const std::string& name,
                      const json& scale, bool dry_run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const json* cur = FindObject(rt, rt.namespaced ? ns : "", name);
    if (cur == nullptr) return FromError(NotFound(rt, name));
    if (const std::string kind = Str(At(scale, "kind")); !kind.empty() && kind != "Scale") {
      return FromError(Err(400, "the object provided is unrecognized (must be of type Scale)"));
    }
    const std::string rv = MetaStr(scale, "resourceVersion");
    if (!rv.empty() && rv != MetaStr(*cur, "resourceVersion")) {
      return FromError(StaleConflict(rt, name));
    }
    const json& replicas = At(At(scale, "spec"), "replicas");
    if (!replicas.is_number_integer() || replicas.get<int64_t>() < 0) {
      ResourceType scale_rt = rt;
      scale_rt.kind = "Scale";
      scale_rt.group = "autoscaling";
      return FromError(Invalid(scale_rt, name, "spec.replicas",
                               "Invalid value: must be greater than or equal to 0"));
    }
    json obj = *cur;
    SetPath(&obj, rt.spec_replicas_path, replicas);
    Reply r = DoUpdate(rt, ns, name, std::move(obj), UpdateMode::kMain, dry_run);
    if (r.code != 200) return r;
    return ScaleOf(rt, r.body);
  }

  // Applies a PATCH body of `content_type` to `current`.
  std::optional<ApiError> ApplyPatch(const std::string& content_type, const std::string& body,
                                     json* current) {
    json patch;
    try {
      patch = json::parse(body);
    } catch (const json::exception& e) {
      return Err(400, absl::StrCat("error decoding patch: ", e.what()));
    }
    if (content_type == "application/merge-patch+json") {
      current->merge_patch(patch);
    } else if (content_type == "application/json-patch+json") {
      try {
        *current = current->patch(patch);
      } catch (const json::exception& e) {
        return Err(422, absl::StrCat("the server rejected our request due to an error in our "
                                     "request: json patch: ",
                                     e.what()));
      }
    } else if (content_type == "application/strategic-merge-patch+json" ||
               content_type == "application/apply-patch+yaml") {
      if (!patch.is_object()) return Err(400, "the patch must be a JSON object");
      *current = StrategicMerge(*current, patch);
    } else {
      return Err(415, absl::StrCat("the body of the request was in an unknown format - accepted "
                                   "media types include: application/json-patch+json, "
                                   "application/merge-patch+json, "
                                   "application/strategic-merge-patch+json, "
                                   "application/apply-patch+yaml"));
    }
    return std::nullopt;
  }

  Reply DoPatch(const ResourceType& rt, const std::string& ns, const std::string& name,
                const std::string& sub, const std::string& content_type, const std::string& body,
                bool dry_run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const json* cur = FindObject(rt, rt.namespaced ? ns : "", name);
    if (cur == nullptr) {
      if (content_type == "application/apply-patch+yaml" && sub.empty()) {
        json obj;
        try {
          obj = json::parse(body);
        } catch (const json::exception& e) {
          return FromError(Err(400, "server-side apply: only JSON bodies are supported"));
        }
        if (obj.is_object() && !obj["metadata"].is_object()) obj["metadata"] = json::object();
        if (obj.is_object()) obj["metadata"]["name"] = name;
        return DoCreate(rt, ns, std::move(obj), dry_run);
      }
      return FromError(NotFound(rt, name));
    }
    if (sub == "scale") {
      json scale = ScaleOf(rt, *cur).body;
      if (auto error = ApplyPatch(content_type, body, &scale)) return FromError(*error);
      return DoScaleUpdate(rt, ns, name, scale, dry_run);
    }
    json obj = *cur;
    if (auto error = ApplyPatch(content_type, body, &obj)) return FromError(*error);
    if (!obj.is_object()) return FromError(Err(422, "the patched object is not an object"));
    return DoUpdate(rt, ns, name, std::move(obj),
                    sub == "status" ? UpdateMode::kStatus : UpdateMode::kMain, dry_run);
  }

  // --- tables ----------------------------------------------------------------

  static json TableColumns(const ResourceType& rt) {
    json cols = json::array();
    cols.push_back({{"name", "Name"},
                    {"type", "string"},
                    {"format", "name"},
                    {"description", "Name must be unique within a namespace."},
                    {"priority", 0}});
    bool has_date = false;
    for (const PrinterColumn& c : rt.columns) {
      cols.push_back({{"name", c.name},
                      {"type", c.type},
                      {"format", c.format},
                      {"description", c.description},
                      {"priority", c.priority}});
      has_date = has_date || c.type == "date";
    }
    if (!has_date) {
      cols.push_back({{"name", "Age"},
                      {"type", "date"},
                      {"format", ""},
                      {"description",
                       "CreationTimestamp is a timestamp representing the server "
                       "time when this object was created."},
                      {"priority", 0}});
    }
    return cols;
  }

  static json TableRow(const ResourceType& rt, const json& obj, const std::string& include) {
    json cells = json::array({MetaStr(obj, "name")});
    bool has_date = false;
    for (const PrinterColumn& c : rt.columns) {
      const json* v = Lookup(obj, c.json_path);
      if (v == nullptr || v->is_null()) {
        cells.push_back(nullptr);
      } else if (c.type == "date") {
        cells.push_back(AgeOf(*v));
      } else if (c.type == "string") {
        cells.push_back(v->is_string() ? *v : json(v->dump()));
      } else {
        cells.push_back(*v);
      }
      has_date = has_date || c.type == "date";
    }
    if (!has_date) cells.push_back(AgeOf(At(Meta(obj), "creationTimestamp")));
    json row = {{"cells", cells}};
    if (include == "Object") {
      row["object"] = obj;
    } else if (include != "None") {
      row["object"] = {{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", Meta(obj)}};
    }
    return row;
  }

  json ToTable(const ResourceType& rt, const std::vector<json>& objects, const Params& params,
               const json& list_meta) {
    json rows = json::array();
    const std::string include = Param(params, "includeObject");
    for (const json& o : objects) rows.push_back(TableRow(rt, o, include));
    return json{{"kind", "Table"},
                {"apiVersion", "meta.k8s.io/v1"},
                {"metadata", list_meta},
                {"columnDefinitions", TableColumns(rt)},
                {"rows", rows}};
  }

  // --- discovery ---------------------------------------------------------------

  // Group name → its versions, in priority order; core first, then built-ins
  // in registration order, then CRD groups by name.
  std::vector<std::pair<std::string, std::vector<std::string>>> Groups() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;
    auto add = [&](const ResourceType& rt) {
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == rt.group; });
      if (it == groups.end()) {
        groups.push_back({rt.group, {}});
        it = groups.end() - 1;
      }
      if (std::find(it->second.begin(), it->second.end(), rt.version) == it->second.end()) {
        it->second.push_back(rt.version);
      }
    };
    for (const ResourceType& rt : BuiltinTypes()) add(rt);
    std::vector<const ResourceType*> crds;
    for (const auto& [key, rt] : types_) {
      if (rt.from_crd) crds.push_back(&rt);
    }
    std::sort(crds.begin(), crds.end(),
              [](const ResourceType* a, const ResourceType* b) { return a->group < b->group; });
    for (const ResourceType* rt : crds) add(*rt);
    for (auto& [group, versions] : groups) {
      std::sort(versions.begin(), versions.end(), VersionBefore);
    }
    return groups;
  }

  static json GroupJson(const std::string& name, const std::vector<std::string>& versions) {
    json vs = json::array();
    for (const std::string& v : versions) {
      vs.push_back({{"groupVersion", name + "/" + v}, {"version", v}});
    }
    return json{{"name", name}, {"versions", vs}, {"preferredVersion", vs[0]}};
  }

  json ResourceListJson(const std::string& group, const std::string& version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    json resources = json::array();
    const json verbs = {"create", "delete", "deletecollection", "get",
                        "list",   "patch",  "update",           "watch"};
    std::vector<const ResourceType*> selected;
    for (const auto& [key, rt] : types_) {
      if (rt.group == group && rt.version == version) selected.push_back(&rt);
    }
    std::sort(selected.begin(), selected.end(),
              [](const ResourceType* a, const ResourceType* b) { return a->plural < b->plural; });
    for (const ResourceType* rt : selected) {
      json r = {{"name", rt->plural},
                {"singularName", rt->singular},
                {"namespaced", rt->namespaced},
                {"kind", rt->kind},
                {"verbs", verbs}};
      if (!rt->short_names.empty()) r["shortNames"] = rt->short_names;
      if (!rt->categories.empty()) r["categories"] = rt->categories;
      resources.push_back(r);
      if (rt->has_status) {
        resources.push_back({{"name", rt->plural + "/status"},
                             {"singularName", ""},
                             {"namespaced", rt->namespaced},
                             {"kind", rt->kind},
                             {"verbs", {"get", "patch", "update"}}});
      }
      if (rt->has_scale) {
        resources.push_back({{"name", rt->plural + "/scale"},
                             {"singularName", ""},
                             {"namespaced", rt->namespaced},
                             {"group", "autoscaling"},
                             {"version", "v1"},
                             {"kind", "Scale"},
                             {"verbs", {"get", "patch", "update"}}});
      }
    }
    return json{{"kind", "APIResourceList"},
                {"apiVersion", "v1"},
                {"groupVersion", group.empty() ? version : group + "/" + version},
                {"resources", resources}};
  }

  // Discovery and other non-resource paths; nullopt if `path` is not one.
  std::optional<Reply> Discovery(const std::string& path, const std::string& accept)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (path == "/version" || path == "/version/") {
      return Reply{200, json{{"major", "1"},
                             {"minor", "31"},
                             {"gitVersion", "v1.31.0-shadowsync-fake"},
                             {"gitCommit", "0000000000000000000000000000000000000000"},
                             {"gitTreeState", "clean"},
                             {"buildDate", "2024-08-13T00:00:00Z"},
                             {"goVersion", "go1.22.5"},
                             {"compiler", "gc"},
                             {"platform", "linux/amd64"}}};
    }
    if (path == "/healthz" || path == "/livez" || path == "/readyz") {
      Reply r{200, json()};
      r.content_type = "text/plain; charset=utf-8";
      r.raw = true;
      r.text = "ok";
      return r;
    }
    if (path == "/api" || path == "/api/") {
      return Reply{200, json{{"kind", "APIVersions"},
                             {"versions", {"v1"}},
                             {"serverAddressByClientCIDRs",
                              {{{"clientCIDR", "0.0.0.0/0"},
                                {"serverAddress", absl::StrCat(options_.host, ":", port_)}}}}}};
    }
    if (path == "/api/v1" || path == "/api/v1/") return Reply{200, ResourceListJson("", "v1")};
    if (path == "/apis" || path == "/apis/") {
      json groups = json::array();
      for (const auto& [name, versions] : Groups()) {
        if (!name.empty()) groups.push_back(GroupJson(name, versions));
      }
      return Reply{200, json{{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}}};
    }
    std::vector<std::string> seg = absl::StrSplit(path, '/', absl::SkipEmpty());
    if (!seg.empty() && seg[0] == "apis" && (seg.size() == 2 || seg.size() == 3)) {
      for (const auto& [name, versions] : Groups()) {
        if (name != seg[1]) continue;
        if (seg.size() == 2) {
          json g = GroupJson(name, versions);
          g["kind"] = "APIGroup";
          g["apiVersion"] = "v1";
          return Reply{200, g};
        }
        if (std::find(versions.begin(), versions.end(), seg[2]) != versions.end()) {
          return Reply{200, ResourceListJson(name, seg[2])};
        }
      }
      return FromError(ResourceNotFound());
    }
    if (seg.size() >= 2 && seg[0] == "openapi" && seg[1] == "v3") return OpenApiV3(seg);
    if (seg.size() == 2 && seg[0] == "openapi" && seg[1] == "v2") {
      // An empty document: kubectl (asking for protobuf) parses zero bytes as
      // an empty openapi_v2.Document and then validates no kind client-side.
      Reply r{200, json()};
      if (absl::StrContains(accept, "protobuf")) {
        r.content_type = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
        r.raw = true;
      } else {
        r.body = {{"swagger", "2.0"},
                  {"info", {{"title", "Kubernetes"}, {"version", "v1.31.0"}}},
                  {"paths", json::object()}};
      }
      return r;
    }
    if (!seg.empty() && (seg[0] == "openapi" || seg[0] == "swagger.json")) {
      return FromError(ResourceNotFound());
    }
    return std::nullopt;
  }

  // A minimal OpenAPI v3: the root lists every group version; each group
  // version's document declares only the PATCH operations with their
  // x-kubernetes-group-version-kind and the fieldValidation query parameter.
  // That is what kubectl 1.31 reads to decide that the server validates
  // fields itself (else it wants /openapi/v2 as protobuf for client-side
  // validation). No schemas: kubectl then computes strategic merge patches
  // from its compiled-in types.
  Reply OpenApiV3(const std::vector<std::string>& seg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (seg.size() == 2) {
      json paths = json::object();
      for (const auto& [group, versions] : Groups()) {
        for (const std::string& v : versions) {
          const std::string gv = group.empty() ? "api/" + v : "apis/" + group + "/" + v;
          paths[gv] = {{"serverRelativeURL", "/openapi/v3/" + gv}};
        }
      }
      return Reply{200, json{{"paths", paths}}};
    }
    std::string group;
    std::string version;
    if (seg.size() == 4 && seg[2] == "api") {
      version = seg[3];
    } else if (seg.size() == 5 && seg[2] == "apis") {
      group = seg[3];
      version = seg[4];
    } else {
      return FromError(ResourceNotFound());
    }
    json paths = json::object();
    for (const auto& [key, rt] : types_) {
      if (rt.group != group || rt.version != version) continue;
      const std::string prefix =
          group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
      const std::string path = rt.namespaced
                                   ? prefix + "/namespaces/{namespace}/" + rt.plural + "/{name}"
                                   : prefix + "/" + rt.plural + "/{name}";
      paths[path] = {{"patch",
                      {{"operationId", "patch" + rt.kind},
                       {"x-kubernetes-action", "patch"},
                       {"x-kubernetes-group-version-kind",
                        {{"group", rt.group}, {"version", rt.version}, {"kind", rt.kind}}},
                       {"parameters",
                        {{{"name", "fieldValidation"},
                          {"in", "query"},
                          {"schema", {{"type", "string"}, {"uniqueItems", true}}}}}},
                       {"responses", {{"200", {{"description", "OK"}}}}}}}};
    }
    if (paths.empty()) return FromError(ResourceNotFound());
    return Reply{200, json{{"openapi", "3.0.0"},
                           {"info", {{"title", "Kubernetes"}, {"version", "v1.31.0"}}},
                           {"paths", paths},
                           {"components", {{"schemas", json::object()}}}}};
  }

  // --- routing -----------------------------------------------------------------

  // Handles every non-watch request for `path`. `body` is the parsed JSON
  // body for POST/PUT/DELETE, `raw_body` the text for PATCH.
  Reply Route(const std::string& method, const std::string& path, const json& body,
              const std::string& raw_body, const std::string& content_type, const Params& params,
              const std::string& accept) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    field_validation_ = Param(params, "fieldValidation");
    warnings_.clear();
    Reply r = RouteRequest(method, path, body, raw_body, content_type, params, accept);
    if (r.code < 400) r.warnings = std::move(warnings_);
    field_validation_.clear();
    warnings_.clear();
    return r;
  }

  Reply RouteRequest(const std::string& method, const std::string& path, const json& body,
                     const std::string& raw_body, const std::string& content_type,
                     const Params& params, const std::string& accept)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool table = absl::StrContains(accept, "as=Table");
    if (auto r = Discovery(path, accept)) {
      if (method != "GET") return FromError(Err(405, "the server does not allow this method"));
      return *r;
    }
    std::optional<ApiPath> p = ParseApiPath(path);
    if (!p || p->plural.empty()) return FromError(ResourceNotFound());
    const ResourceType* found = FindType(p->group, p->version, p->plural);
    if (found == nullptr) return FromError(ResourceNotFound());
    const ResourceType rt = *found;  // a copy: CRD writes may unregister it
    if (p->has_namespace && !rt.namespaced) return FromError(ResourceNotFound());
    if (!p->has_namespace && rt.namespaced && !p->name.empty()) {
      return FromError(ResourceNotFound());
    }
    const bool dry_run = Param(params, "dryRun") == "All";
    const std::string& ns = p->ns;
    if (p->name.empty()) {
      if (method == "GET") {
        Reply r = DoList(rt, !p->has_namespace, ns, params);
        if (r.code == 200 && table) {
          r.body =
              ToTable(rt, r.body["items"].get<std::vector<json>>(), params, r.body["metadata"]);
          r.content_type = kTableMime;
        }
        return r;
      }
      if (method == "POST") {
        if (!p->has_namespace && rt.namespaced) {
          return FromError(Err(405,
                               "the server does not allow this method on the requested "
                               "resource"));
        }
        return DoCreate(rt, ns, body, dry_run);
      }
      if (method == "DELETE") {
        return DoDeleteCollection(rt, !p->has_namespace, ns, body, params, dry_run);
      }
      return FromError(Err(405, "the server does not allow this method on the requested resource"));
    }
    if (p->sub.empty() || (p->sub == "status" && rt.has_status)) {
      const UpdateMode mode = p->sub.empty() ? UpdateMode::kMain : UpdateMode::kStatus;
      if (method == "GET") {
        Reply r = DoGet(rt, ns, p->name);
        if (r.code == 200 && table) {
          r.body = ToTable(rt, {r.body}, params, {{"resourceVersion", std::to_string(rev_)}});
          r.content_type = kTableMime;
        }
        return r;
      }
      if (method == "PUT") return DoUpdate(rt, ns, p->name, body, mode, dry_run);
      if (method == "PATCH") {
        return DoPatch(rt, ns, p->name, p->sub, content_type, raw_body, dry_run);
      }
      if (method == "DELETE" && mode == UpdateMode::kMain) {
        return DoDelete(rt, ns, p->name, body, params, dry_run);
      }
      return FromError(Err(405, "the server does not allow this method on the requested resource"));
    }
    if (p->sub == "scale" && rt.has_scale) {
      if (method == "GET") {
        const json* obj = FindObject(rt, rt.namespaced ? ns : "", p->name);
        if (obj == nullptr) return FromError(NotFound(rt, p->name));
        return ScaleOf(rt, *obj);
      }
      if (method == "PUT") return DoScaleUpdate(rt, ns, p->name, body, dry_run);
      if (method == "PATCH") {
        return DoPatch(rt, ns, p->name, "scale", content_type, raw_body, dry_run);
      }
      return FromError(Err(405, "the server does not allow this method on the requested resource"));
    }
    return FromError(ResourceNotFound());
  }

  // The direct API's entry: `body` is JSON (PATCH bodies too).
  Reply RouteObject(const std::string& method, const std::string& path, json body,
                    const std::string& content_type, const Params& params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::string_view clean = path;
    const size_t q = clean.find('?');
    Params query = params;
    if (q != absl::string_view::npos) {
      query = ParseQuery(clean.substr(q + 1));
      clean = clean.substr(0, q);
    }
    const std::string raw = method == "PATCH" ? body.dump() : "";
    return Route(method, std::string(clean), body, raw, content_type, query, "");
  }

  // --- HTTP --------------------------------------------------------------------

  void AcceptLoop() {
    while (!accept_stopping_.load()) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (accept_stopping_.load()) break;
        if (errno == EINTR || errno == ECONNABORTED) continue;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      MutexLock l(&conn_mu_);
      for (auto it = conns_.begin(); it != conns_.end();) {
        if ((*it)->done.load()) {
          (*it)->thread.join();
          ::close((*it)->fd);
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
      auto slot = std::make_unique<ConnSlot>();
      slot->fd = fd;
      ConnSlot* s = slot.get();
      slot->thread = std::thread([this, s] {
        ServeConnection(s->fd);
        ::shutdown(s->fd, SHUT_RDWR);
        s->done.store(true);
      });
      conns_.push_back(std::move(slot));
    }
  }

  void ServeConnection(int fd) {
    Connection conn(fd);
    HttpRequest req;
    while (conn.ReadRequest(&req)) {
      if (!Handle(conn, req)) break;
    }
  }

  void Record(const std::string& method, const std::string& path, const std::string& query,
              int status, const UserInfo& user) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    requests_.push_back(Request{method, path, query, status, user.name});
    if (options_.log_requests) {
      std::cerr << "fake-kube-apiserver: " << user.name << " " << method << " " << path
                << (query.empty() ? "" : "?") << query << " -> " << status << "\n";
    }
  }

  // RBAC (see the header): nullopt if `user` may do `a`, else the 403.
  std::optional<ApiError> Authorize(const UserInfo& user, const RequestAttributes& a)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (user.InGroup("system:masters") || !a.resource_request) return std::nullopt;
    constexpr char kRbac[] = "rbac.authorization.k8s.io";
    const ResourceType* roles = FindType(kRbac, "v1", "roles");
    const ResourceType* cluster_roles = FindType(kRbac, "v1", "clusterroles");
    // Whether `binding` (in `ns`, "" for a ClusterRoleBinding) grants `a` to `user`.
    auto grants = [&](const json& binding, const std::string& ns) {
      bool named = false;
      for (const json& subject : At(binding, "subjects")) {
        named = named || SubjectMatches(subject, user, ns);
      }
      if (!named) return false;
      const json& ref = At(binding, "roleRef");
      const std::string kind = Str(At(ref, "kind"));
      const json* role = nullptr;
      if (kind == "ClusterRole" && cluster_roles != nullptr) {
        role = FindObject(*cluster_roles, "", Str(At(ref, "name")));
      } else if (kind == "Role" && !ns.empty() && roles != nullptr) {
        role = FindObject(*roles, ns, Str(At(ref, "name")));
      }
      if (role == nullptr) return false;
      for (const json& rule : At(*role, "rules")) {
        if (RuleAllows(rule, a)) return true;
      }
      return false;
    };
    if (const ResourceType* t = FindType(kRbac, "v1", "clusterrolebindings")) {
      for (const auto& [key, binding] : Bucket(*t)) {
        if (grants(binding, "")) return std::nullopt;
      }
    }
    if (const ResourceType* t = FindType(kRbac, "v1", "rolebindings");
        t != nullptr && !a.ns.empty()) {
      for (const auto& [key, binding] : Bucket(*t)) {
        if (MetaStr(binding, "namespace") == a.ns && grants(binding, a.ns)) return std::nullopt;
      }
    }
    return Forbidden(user, a);
  }

  // Sleeps `d` unless the server stops first.
  void SleepFor(absl::Duration d) {
    MutexLock l(&mu_);
    mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; }, d);
  }

  // The first live fault matching, consumed; nullopt if none.
  std::optional<FakeKubeFault> TakeFault(const std::string& method, const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = faults_.begin(); it != faults_.end(); ++it) {
      if (it->times <= 0) continue;
      if (!it->method.empty() && it->method != method) continue;
      if (!it->path_contains.empty() && path.find(it->path_contains) == std::string::npos) {
        continue;
      }
      FakeKubeFault f = *it;
      if (--it->times <= 0) faults_.erase(it);
      return f;
    }
    return std::nullopt;
  }

  bool WriteReply(Connection& conn, const Reply& r, bool close) {
    const std::string body = r.raw ? r.text : r.body.dump();
    const int retry_after = r.code == 429 ? 1 : 0;
    return conn.Send(
        ResponseHead(r.code, r.content_type, body.size(), close, retry_after, r.warnings) + body);
  }

  // Answers one request. False when the connection must close.
  bool Handle(Connection& conn, const HttpRequest& req) {
    const size_t q = req.target.find('?');
    const std::string path = req.target.substr(0, q);
    const std::string query = q == std::string::npos ? "" : req.target.substr(q + 1);
    const Params params = ParseQuery(query);
    const std::string watch = Param(params, "watch");
    const bool is_watch = req.method == "GET" && (watch == "1" || watch == "true");
    bool close =
        absl::EqualsIgnoreCase(req.Header("connection"), "close") || req.version == "HTTP/1.0";
    const bool table = absl::StrContains(req.Header("accept"), "as=Table");

    const UserInfo user = Authenticate(req);

    std::optional<FakeKubeFault> fault;
    {
      MutexLock l(&mu_);
      fault = TakeFault(is_watch ? "WATCH" : req.method, path);
    }
    if (fault) {
      if (fault->delay > absl::ZeroDuration()) SleepFor(fault->delay);
      if (fault->code != 0) {
        Reply r = FromError(Err(fault->code, absl::StrCat("injected fault (", fault->code, ")")));
        {
          MutexLock l(&mu_);
          Record(req.method, path, query, r.code, user);
        }
        return WriteReply(conn, r, close) && !close;
      }
    }
    {
      MutexLock l(&mu_);
      if (std::optional<ApiError> denied =
              Authorize(user, AttributesOf(req.method, path, is_watch))) {
        const Reply r = FromError(*denied);
        Record(req.method, path, query, r.code, user);
        return WriteReply(conn, r, close) && !close;
      }
    }
    if (is_watch) return ServeWatch(conn, req, path, query, params, table, user) && !close;

    json body;
    std::string content_type = req.Header("content-type");
    content_type = absl::AsciiStrToLower(
        absl::StripAsciiWhitespace(content_type.substr(0, content_type.find(';'))));
    Reply r;
    bool parsed = true;
    if (absl::StrContains(content_type, "protobuf")) {
      parsed = false;
      r = FromError(Err(415, "the fake API server speaks JSON only, not " + content_type +
                                 ", send application/json"));
    } else if (!req.body.empty() && req.method != "PATCH") {
      try {
        body = json::parse(req.body);
      } catch (const json::exception& e) {
        parsed = false;
        r = FromError(
            Err(400, absl::StrCat("couldn't decode the request body as JSON: ", e.what())));
      }
    }
    {
      MutexLock l(&mu_);
      if (parsed) {
        r = Route(req.method, path, body, req.body, content_type, params, req.Header("accept"));
      }
      Record(req.method, path, query, r.code, user);
    }
    return WriteReply(conn, r, close) && !close;
  }

  // One watch event line for `spec`, or nullopt if the event does not concern it.
  std::optional<std::string> EventLine(const Event& e, const WatchSpec& w, const Params& params) {
    if (e.store_key != w.rt.store_key()) return std::nullopt;
    if (!w.all_namespaces && e.ns != w.ns) return std::nullopt;
    auto matches = [&](const json& o) {
      return !o.is_null() && MatchesLabels(w.labels, o) && MatchesFields(w.fields, o);
    };
    std::string type;
    if (e.type == "ADDED") {
      if (!matches(e.object)) return std::nullopt;
      type = "ADDED";
    } else if (e.type == "DELETED") {
      if (!matches(e.object)) return std::nullopt;
      type = "DELETED";
    } else {
      const bool now = matches(e.object);
      const bool before = matches(e.old);
      if (!now && !before) return std::nullopt;
      type = now && before ? "MODIFIED" : now ? "ADDED" : "DELETED";
    }
    return WatchLine(type, e.object, w, params);
  }

  std::string WatchLine(const std::string& type, const json& object, const WatchSpec& w,
                        const Params& params) {
    json obj = AsVersion(w.rt, object);
    if (w.table)
      obj = ToTable(w.rt, {obj}, params, {{"resourceVersion", MetaStr(obj, "resourceVersion")}});
    return json{{"type", type}, {"object", obj}}.dump() + "\n";
  }

  // Streams a watch. False when the connection must close (dropped, stopped
  // or broken); true after a clean end.
  bool ServeWatch(Connection& conn, const HttpRequest& req, const std::string& path,
                  const std::string& query, const Params& params, bool table,
                  const UserInfo& user) {
    WatchSpec w;
    w.table = table;
    std::vector<std::string> lines;
    bool expired = false;
    int64_t cursor = 0;
    int64_t drop_generation = 0;
    {
      MutexLock l(&mu_);
      std::optional<ApiPath> p = ParseApiPath(path);
      const ResourceType* rt =
          p && !p->plural.empty() ? FindType(p->group, p->version, p->plural) : nullptr;
      std::string error;
      std::optional<std::vector<LabelRequirement>> labels;
      std::optional<std::vector<FieldRequirement>> fields;
      Reply bad;
      if (rt == nullptr || !p->sub.empty() || (p->has_namespace && !rt->namespaced)) {
        bad = FromError(ResourceNotFound());
      } else if (!(labels = ParseLabelSelector(Param(params, "labelSelector"), &error)) ||
                 !(fields = ParseFieldSelector(Param(params, "fieldSelector"), &error))) {
        bad = FromError(Err(400, error));
      }
      const std::string rv = Param(params, "resourceVersion");
      if (bad.code == 200 && !rv.empty() && rv != "0" && !absl::SimpleAtoi(rv, &cursor)) {
        bad = FromError(Err(400, absl::StrCat("invalid resource version: ", rv)));
      }
      if (bad.code != 200) {
        Record(req.method, path, query, bad.code, user);
        return WriteReply(conn, bad, false);
      }
      w.rt = *rt;
      w.all_namespaces = !p->has_namespace;
      w.ns = p->ns;
      w.labels = std::move(*labels);
      w.fields = std::move(*fields);
      if (!p->name.empty()) w.fields.push_back(FieldRequirement{".metadata.name", true, p->name});
      const bool initial_events = Param(params, "sendInitialEvents") == "true";
      if (rv.empty() || rv == "0" || initial_events) {
        for (const auto& [key, obj] : Bucket(w.rt)) {
          if (!w.all_namespaces && MetaStr(obj, "namespace") != w.ns) continue;
          if (!MatchesLabels(w.labels, obj) || !MatchesFields(w.fields, obj)) continue;
          lines.push_back(WatchLine("ADDED", obj, w, params));
        }
        cursor = rev_;
        if (initial_events) {
          lines.push_back(json{{"type", "BOOKMARK"},
                               {"object",
                                {{"kind", w.rt.kind},
                                 {"apiVersion", w.rt.api_version()},
                                 {"metadata",
                                  {{"resourceVersion", std::to_string(cursor)},
                                   {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}}}}
                              .dump() +
                          "\n");
        }
      } else if (cursor < compacted_rev_) {
        expired = true;
        lines.push_back(ExpiredLine(cursor));
      }
      drop_generation = drop_generation_;
      ++active_watches_;
      Record(req.method, path, query, 200, user);
    }
    struct Unregister {
      Impl* impl;
      ~Unregister() {
        MutexLock l(&impl->mu_);
        --impl->active_watches_;
      }
    } unregister{this};

    const std::string content_type = table ? kTableMime : "application/json";
    if (!conn.Send(absl::StrCat("HTTP/1.1 200 OK\r\nContent-Type: ", content_type,
                                "\r\nCache-Control: no-cache, private\r\n"
                                "Transfer-Encoding: chunked\r\n\r\n"))) {
      return false;
    }
    for (const std::string& line : lines) {
      if (!conn.SendChunk(line)) return false;
    }
    if (expired) return conn.Send("0\r\n\r\n");

    int64_t timeout_seconds = 0;
    if (!absl::SimpleAtoi(Param(params, "timeoutSeconds"), &timeout_seconds)) timeout_seconds = 0;
    const absl::Time deadline =
        timeout_seconds > 0 ? absl::Now() + absl::Seconds(timeout_seconds) : absl::InfiniteFuture();
    const std::string bookmarks = Param(params, "allowWatchBookmarks");
    const bool want_bookmarks = bookmarks == "true" || bookmarks == "1";
    absl::Time next_bookmark =
        want_bookmarks ? absl::Now() + options_.bookmark_interval : absl::InfiniteFuture();
    const std::string type_key = w.rt.type_key();

    while (true) {
      enum class Next { kStream, kEnd, kAbort } next = Next::kStream;
      lines.clear();
      {
        MutexLock l(&mu_);
        const absl::Time now = absl::Now();
        const absl::Time wake = std::min({deadline, next_bookmark, now + absl::Milliseconds(200)});
        mu_.AwaitWithTimeout(
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
              return stopping_ || drop_generation_ != drop_generation || rev_ > cursor ||
                     types_.count(type_key) == 0;
            },
            std::max(wake - now, absl::ZeroDuration()));
        if (stopping_ || drop_generation_ != drop_generation) {
          next = Next::kAbort;
        } else if (cursor < compacted_rev_) {
          lines.push_back(ExpiredLine(cursor));
          next = Next::kEnd;
        } else {
          if (rev_ > cursor) {
            auto it = std::upper_bound(history_.begin(), history_.end(), cursor,
                                       [](int64_t c, const Event& e) { return c < e.rev; });
            for (; it != history_.end(); ++it) {
              if (auto line = EventLine(*it, w, params)) lines.push_back(std::move(*line));
            }
            cursor = rev_;
          }
          // The CRD behind this watch is gone: deliver its objects' deletions, then end.
          if (types_.count(type_key) == 0) next = Next::kEnd;
        }
      }
      if (next == Next::kAbort) {
        ::shutdown(conn.fd(), SHUT_RDWR);
        return false;
      }
      for (const std::string& line : lines) {
        if (!conn.SendChunk(line)) return false;
      }
      if (next == Next::kEnd) return conn.Send("0\r\n\r\n");
      const absl::Time now = absl::Now();
      if (now >= next_bookmark) {
        json bookmark = {{"type", "BOOKMARK"},
                         {"object",
                          {{"kind", w.rt.kind},
                           {"apiVersion", w.rt.api_version()},
                           {"metadata", {{"resourceVersion", std::to_string(cursor)}}}}}};
        if (!conn.SendChunk(bookmark.dump() + "\n")) return false;
        next_bookmark = now + options_.bookmark_interval;
      }
      if (now >= deadline) return conn.Send("0\r\n\r\n");
      if (conn.PeerClosed()) return false;
    }
  }

  std::string ExpiredLine(int64_t rv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ApiError e =
        Err(410, absl::StrCat("too old resource version: ", rv, " (", compacted_rev_, ")"));
    e.reason = "Expired";
    return json{{"type", "ERROR"}, {"object", StatusJson(e)}}.dump() + "\n";
  }

  // Constant after construction.
  const FakeKubeApiServerOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> accept_stopping_{false};

  Mutex conn_mu_;
  std::vector<std::unique_ptr<ConnSlot>> conns_ ABSL_GUARDED_BY(conn_mu_);

  mutable Mutex mu_;
  std::map<std::string, ResourceType> types_ ABSL_GUARDED_BY(mu_);  // by type_key()
  // store_key() → ObjKey(namespace, name) → object, as stored.
  std::map<std::string, std::map<std::string, json>> objects_ ABSL_GUARDED_BY(mu_);
  int64_t rev_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Event> history_ ABSL_GUARDED_BY(mu_);  // ascending rev, newest at the back
  int64_t compacted_rev_ ABSL_GUARDED_BY(mu_) = 0;  // events up to this rev are forgotten
  std::vector<FakeKubeFault> faults_ ABSL_GUARDED_BY(mu_);
  std::vector<Request> requests_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t drop_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int active_watches_ ABSL_GUARDED_BY(mu_) = 0;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  // The custom-resource validator, started on first use, and the schemas it
  // has been given (by key) with the rules of each that do not compile.
  std::unique_ptr<JsonLineProcess> validator_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, json> validator_schemas_ ABSL_GUARDED_BY(mu_);
  // The request's fieldValidation, and the warnings it collected.
  std::string field_validation_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> warnings_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<FakeKubeApiServer>> FakeKubeApiServer::Start(
    FakeKubeApiServerOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Listen(); !s.ok()) return s;
  return std::unique_ptr<FakeKubeApiServer>(new FakeKubeApiServer(std::move(impl)));
}

FakeKubeApiServer::FakeKubeApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeKubeApiServer::~FakeKubeApiServer() = default;

std::string FakeKubeApiServer::url() const { return impl_->url(); }
int FakeKubeApiServer::port() const { return impl_->port(); }

std::string FakeKubeApiServer::TokenFor(const std::string& user) {
  return user == kFakeAdminUser ? kAdminToken : kUserTokenPrefix + user;
}

absl::Status FakeKubeApiServer::WriteKubeconfig(const std::string& path, const std::string& ns,
                                                const std::string& user) const {
  std::ofstream out(path, std::ios::trunc);
  out << "apiVersion: v1\n"
      << "kind: Config\n"
      << "clusters:\n"
      << "- name: fake\n"
      << "  cluster:\n"
      << "    server: " << url() << "\n"
      << "users:\n"
      << "- name: fake\n"
      << "  user:\n"
      << "    token: \"" << TokenFor(user) << "\"\n"
      << "contexts:\n"
      << "- name: fake\n"
      << "  context:\n"
      << "    cluster: fake\n"
      << "    user: fake\n"
      << "    namespace: " << ns << "\n"
      << "current-context: fake\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write kubeconfig ", path));
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> FakeKubeApiServer::Get(const std::string& path) const {
  return impl_->DirectGet(path);
}

absl::StatusOr<std::vector<nlohmann::json>> FakeKubeApiServer::List(
    const std::string& collection_path) const {
  return impl_->DirectList(collection_path);
}

absl::StatusOr<nlohmann::json> FakeKubeApiServer::Create(const std::string& collection_path,
                                                         nlohmann::json object) {
  return impl_->DirectWrite("POST", collection_path, std::move(object), "");
}

absl::StatusOr<nlohmann::json> FakeKubeApiServer::Update(const std::string& path,
                                                         nlohmann::json object) {
  return impl_->DirectWrite("PUT", path, std::move(object), "");
}

absl::StatusOr<nlohmann::json> FakeKubeApiServer::UpdateStatus(const std::string& path,
                                                               nlohmann::json object) {
  std::string status_path = path;
  if (!absl::EndsWith(status_path, "/status")) status_path += "/status";
  return impl_->DirectWrite("PUT", status_path, std::move(object), "");
}

absl::Status FakeKubeApiServer::Delete(const std::string& path) {
  return impl_->DirectWrite("DELETE", path, nlohmann::json(), "").status();
}

absl::StatusOr<nlohmann::json> FakeKubeApiServer::Patch(const std::string& path,
                                                        const nlohmann::json& patch,
                                                        const std::string& content_type) {
  return impl_->DirectWrite("PATCH", path, patch, content_type);
}

absl::Status FakeKubeApiServer::ApplyFile(const std::string& yaml_path) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAllFromFile(yaml_path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(yaml_path, ": ", e.what()));
  }
  for (nlohmann::json& object : YamlDocumentsToJson(docs)) {
    const std::string what = absl::StrCat(object.value("kind", ""), " ",
                                          object.value("/metadata/name"_json_pointer, ""));
    if (absl::Status s = impl_->DirectApply(std::move(object)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(yaml_path, ": ", what, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

int64_t FakeKubeApiServer::resource_version() const { return impl_->resource_version(); }
void FakeKubeApiServer::Compact() { impl_->Compact(); }
void FakeKubeApiServer::DropWatches() { impl_->DropWatches(); }
void FakeKubeApiServer::InjectFault(FakeKubeFault fault) { impl_->InjectFault(std::move(fault)); }
void FakeKubeApiServer::ClearFaults() { impl_->ClearFaults(); }
std::vector<FakeKubeApiServer::Request> FakeKubeApiServer::Requests() const {
  return impl_->Requests();
}
void FakeKubeApiServer::ClearRequests() { impl_->ClearRequests(); }

std::vector<std::string> FakeKubeApiServerOptions::DefaultCrdValidator() {
  return {SHADOWSYNC_FAKE_KUBE_NODE, SHADOWSYNC_FAKE_KUBE_CRD_VALIDATE, "--serve"};
}
int FakeKubeApiServer::active_watches() const { return impl_->active_watches(); }
bool FakeKubeApiServer::WaitForWatches(int n, absl::Duration timeout) const {
  return impl_->WaitForWatches(n, timeout);
}

}  // namespace shadowsync::testing
