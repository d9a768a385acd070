// Private to jobspec/: what the job spec's files share. The problem list
// every decoder and validator appends to, and its formatting; path and
// message helpers; the range checker (ValidateJob, and the decoder for
// shorthands) and the encoder (JobToJson, and the defaults the schema and
// the reference show); and the functions one file defines for another.
//
// The files, one concern each (the way RocksDB splits db_impl_*.cc):
//   job_spec.h            the public types and API
//   job_spec_fields.h     the field table every visitor walks
//   job_spec.cc           derived defaults, ValidateJob, JobSummary, the DS-Sync butterfly
//   job_spec_codec.cc     JSON value <-> structs: ParseJob*, JobFromJson, LoadJobFile, JobToJson
//   job_spec_parse.cc     YAML or JSON text -> JSON value, with YAML source lines
//   job_spec_schema.cc    the OpenAPI schema, the Markdown reference, JobFieldPaths
//   job_spec_internal.cc  problem and message formatting
//   pod_template.cc       the allow-list of spec.<role>.template
//   yaml_scalar.h         the YAML 1.2 core schema's plain-scalar resolution
//   text_checks.h         UTF-8, DNS names, label keys; ParseQuantity
//
// Thread-safe: pure functions; a RangeChecker or ObjectEncoder belongs to
// the one call that made it.
#ifndef SHADOWSYNC_JOBSPEC_JOB_SPEC_INTERNAL_H_
#define SHADOWSYNC_JOBSPEC_JOB_SPEC_INTERNAL_H_

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_fields.h"

namespace shadowsync::job_spec_internal {

using json = nlohmann::json;

// ---------------------------------------------------------------------------
// Problems: every decoder and validator appends here instead of stopping at
// the first, so a user fixes a file in one round.

struct Problem {
  std::string path;     // "spec.trainer.replicas"; "" for the document itself.
  std::string message;  // "must be >= 1, got 0".
  // Where to look the line up in a YAML source: the path itself, or for a
  // missing field its parent object.
  std::optional<std::string> line_path = std::nullopt;
  // A line known directly (YAML problems found while converting).
  std::optional<int> line = std::nullopt;
};
using Problems = std::vector<Problem>;

// Field path -> 1-based source line, filled while converting YAML.
using LineMap = std::map<std::string, int>;

// Debian's absl has its own string_view type rather than an alias of
// std::string_view; this bridges our std::string_views into absl calls.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// "<parent>.<name>", or "<name>" when parent is empty.
std::string Join(std::string_view parent, std::string_view name);

// "<parent>[<i>]".
std::string Index(std::string_view parent, size_t i);

// JSON text of `j` for a message: user strings may hold invalid UTF-8, which
// dump() throws on; it is shown replaced (U+FFFD) instead.
std::string Dump(const json& j);

// "must be >= 1", "must be in (0, 1]".
std::string RangeText(const FieldInfo& f, bool integral);

// One line per problem: "<source>:<line>: <path>: <message>". With a line
// map, sorted by line (problems without a line last, in field order).
std::string FormatProblems(const Problems& problems, std::string_view source, const LineMap* lines);

// Text -> JSON value. YAML keeps lines for later messages; JSON has none.
// A syntax error, or a YAML text that is not exactly one document, is the
// status; problems found on the way (duplicate keys, unsupported tags) are
// appended to `problems`. (job_spec_parse.cc)
absl::StatusOr<json> YamlToJson(std::string_view text, std::string_view source, LineMap& lines,
                                Problems& problems);
absl::StatusOr<json> JsonTextToJson(std::string_view text, std::string_view source,
                                    Problems& problems);

// Every range and cross-field problem of `job`, in field-table order; what
// ValidateJob reports. (job_spec.cc)
Problems JobProblems(const ShadowSyncJob& job);

// Every field of the pod template at `path` (spec.<role>.template) outside
// its allow-list, and a root runAsUser. (pod_template.cc)
void CheckPodTemplate(const json& pod_template, const std::string& path, Problems& problems);

// The CRD schema of a pod template: the same allow-list, with the content of
// allowed fields passed through. (pod_template.cc)
const json& PodTemplateSchema();

// Adds the cross-field checks of JobProblems to the schema of `spec`, as CEL
// rules (x-kubernetes-validations). (job_spec_rules.cc)
void AddCelRules(json& spec);

// ---------------------------------------------------------------------------
// Range checks: the bounds of the field table applied to values. Used by
// ValidateJob and, for shorthands, by the decoder.

class RangeChecker {
 public:
  RangeChecker(std::string path, Problems& problems)
      : path_(std::move(path)), problems_(problems) {}

  template <typename T>
  void operator()(const T& value, const FieldInfo& f) {
    Check(value, Join(path_, f.name), f);
  }
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo&, std::string_view, const Target&, Apply) {}
  void Ignore(const auto&) {}

 private:
  template <typename T>
  void Check(const T& value, const std::string& path, const FieldInfo& f) {
    if constexpr (kIsInteger<T>) {
      CheckNumber(static_cast<double>(value), absl::StrCat(value), path, f, true);
    } else if constexpr (std::is_floating_point_v<T>) {
      CheckNumber(value, absl::StrCat(value), path, f, false);
    } else if constexpr (std::is_same_v<T, Quantity>) {
      CheckNumber(static_cast<double>(value.value), value.text, path, f, true);
    } else if constexpr (kIsOptional<T>) {
      if (value) {
        Check(*value, path, f);
      }
    } else if constexpr (kIsVector<T>) {
      for (size_t i = 0; i < value.size(); ++i) {
        Check(value[i], Index(path, i), f);
      }
    } else if constexpr (HasFields<T>) {
      RangeChecker sub(path, problems_);
      Fields(sub, value);
    }
  }

  void CheckNumber(double v, const std::string& shown, const std::string& path, const FieldInfo& f,
                   bool integral) {
    // Every comparison with NaN is false, so NaN fails any bound.
    bool ok = true;
    if (f.min) {
      ok &= f.exclusive_min ? v > *f.min : v >= *f.min;
    }
    if (f.max) {
      ok &= f.exclusive_max ? v < *f.max : v <= *f.max;
    }
    if (!ok) {
      problems_.push_back(
          {path, absl::StrCat("must be ", RangeText(f, integral), ", got ", shown)});
    }
  }

  std::string path_;
  Problems& problems_;
};

// ---------------------------------------------------------------------------
// Encoding: struct -> JSON, every field explicit.

template <typename T>
std::optional<json> EncodeValue(const T& value);

class ObjectEncoder {
 public:
  explicit ObjectEncoder(json& out) : out_(out) {}
  template <typename T>
  void operator()(const T& value, const FieldInfo& f) {
    if (std::optional<json> j = EncodeValue(value)) {
      out_[std::string(f.name)] = *std::move(j);
    }
  }
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo&, std::string_view, const Target&, Apply) {}
  void Ignore(const auto&) {}

 private:
  json& out_;
};

// nullopt for "absent": an unset optional or an empty pod template.
template <typename T>
std::optional<json> EncodeValue(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return json(std::string(EnumName(value)));
  } else if constexpr (std::is_same_v<T, Quantity>) {
    return json(value.text);
  } else if constexpr (std::is_same_v<T, json>) {
    if (value.is_null()) {
      return std::nullopt;
    }
    return value;
  } else if constexpr (kIsOptional<T>) {
    if (!value) {
      return std::nullopt;
    }
    return EncodeValue(*value);
  } else if constexpr (kIsVector<T>) {
    json a = json::array();
    for (const auto& item : value) {
      a.push_back(EncodeValue(item).value_or(json()));
    }
    return a;
  } else if constexpr (HasFields<T>) {
    json o = json::object();
    ObjectEncoder encoder(o);
    Fields(encoder, value);
    return o;
  } else {
    return json(value);  // bool, numbers, strings, string maps.
  }
}

}  // namespace shadowsync::job_spec_internal

#endif  // SHADOWSYNC_JOBSPEC_JOB_SPEC_INTERNAL_H_
