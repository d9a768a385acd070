// Generated artefacts of the field table: the CRD's OpenAPI v3 schema of
// `spec` and the Markdown field reference of docs/job-spec.md (plus the
// list of field paths, in table order).
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_fields.h"
#include "jobspec/job_spec_internal.h"

namespace shadowsync {
namespace job_spec_internal {
namespace {

// ---------------------------------------------------------------------------
// OpenAPI v3 structural schema.

// A default worth publishing: scalars and non-empty lists of scalars.
template <typename T>
std::optional<json> SchemaDefault(const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (value.empty()) {
      return std::nullopt;
    }
    return json(value);
  } else if constexpr (kIsVector<T>) {
    if constexpr (HasFields<typename T::value_type>) {
      return std::nullopt;
    } else {
      if (value.empty()) {
        return std::nullopt;
      }
      return EncodeValue(value);
    }
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T> ||
                       std::is_same_v<T, Quantity>) {
    return EncodeValue(value);
  } else {
    return std::nullopt;  // Optionals, objects, maps, templates.
  }
}

std::string Description(const FieldInfo& f) {
  std::string d(f.doc);
  if (!f.default_doc.empty()) {
    absl::StrAppend(&d, " Default: ", absl::StrReplaceAll(Av(f.default_doc), {{"`", ""}}), ".");
  }
  return d;
}

void AddBounds(json& s, const FieldInfo& f, bool integral) {
  auto bound = [integral](double b) { return integral ? json(static_cast<int64_t>(b)) : json(b); };
  if (f.min) {
    s["minimum"] = bound(*f.min);
    if (f.exclusive_min) {
      s["exclusiveMinimum"] = true;
    }
  }
  if (f.max) {
    s["maximum"] = bound(*f.max);
    if (f.exclusive_max) {
      s["exclusiveMaximum"] = true;
    }
  }
}

template <typename T>
json TypeSchema(const T& def, const FieldInfo& f);

class SchemaBuilder {
 public:
  template <typename T>
  void operator()(const T& def, const FieldInfo& f) {
    json s = TypeSchema(def, f);
    s["description"] = Description(f);
    if (f.schema_default && !f.required) {
      if (std::optional<json> d = SchemaDefault(def)) {
        s["default"] = *std::move(d);
      }
    }
    properties_[std::string(f.name)] = std::move(s);
    if (f.required) {
      required_.push_back(f.name);
    }
  }
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo& f, std::string_view, const Target&, Apply) {
    json s = TypeSchema(T{}, f);
    s["description"] = Description(f);
    properties_[std::string(f.name)] = std::move(s);
  }
  void Ignore(const auto&) {}

  json Object() const {
    json o = {{"type", "object"}, {"properties", properties_}};
    if (!required_.empty()) {
      o["required"] = required_;
    }
    return o;
  }

 private:
  json properties_ = json::object();
  json required_ = json::array();
};

template <typename T>
json TypeSchema(const T& def, const FieldInfo& f) {
  if constexpr (std::is_same_v<T, bool>) {
    return {{"type", "boolean"}};
  } else if constexpr (kIsInteger<T>) {
    json s = {{"type", "integer"}, {"format", sizeof(T) <= 4 ? "int32" : "int64"}};
    AddBounds(s, f, true);
    return s;
  } else if constexpr (std::is_floating_point_v<T>) {
    json s = {{"type", "number"}, {"format", "double"}};
    AddBounds(s, f, false);
    return s;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return {{"type", "string"}};
  } else if constexpr (std::is_enum_v<T>) {
    const auto& names = EnumTraits<T>::kNames;
    return {{"type", "string"}, {"enum", std::vector<std::string>(names.begin(), names.end())}};
  } else if constexpr (std::is_same_v<T, Quantity>) {
    // Exactly what controller-gen emits for resource.Quantity.
    return {
        {"anyOf", {{{"type", "integer"}}, {{"type", "string"}}}},
        {"pattern",
         R"(^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$)"},
        {"x-kubernetes-int-or-string", true}};
  } else if constexpr (std::is_same_v<T, json>) {
    return PodTemplateSchema();  // The only json fields are pod templates.
  } else if constexpr (kIsOptional<T>) {
    return TypeSchema(typename T::value_type{}, f);
  } else if constexpr (kIsVector<T>) {
    return {{"type", "array"}, {"items", TypeSchema(typename T::value_type{}, f)}};
  } else if constexpr (kIsStringMap<T>) {
    return {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}};
  } else {
    static_assert(HasFields<T>, "no schema for this field type");
    SchemaBuilder builder;
    Fields(builder, def);
    return builder.Object();
  }
}

// ---------------------------------------------------------------------------
// Markdown reference.

struct DocRow {
  std::string path;  // "spec.model.tables[].hashBuckets".
  std::string type;
  std::string default_text;
  std::string doc;
};

template <typename T>
std::string DocType(const FieldInfo& f) {
  if constexpr (std::is_same_v<T, bool>) {
    return "boolean";
  } else if constexpr (kIsInteger<T> || std::is_floating_point_v<T>) {
    std::string range = RangeText(f, kIsInteger<T>);
    return absl::StrCat(kIsInteger<T> ? "integer" : "number", range.empty() ? "" : ", ", range);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "string";
  } else if constexpr (std::is_enum_v<T>) {
    std::vector<std::string> names;
    for (std::string_view n : EnumTraits<T>::kNames) {
      names.push_back(absl::StrCat("`", Av(n), "`"));
    }
    return absl::StrCat("enum: ", absl::StrJoin(names, ", "));
  } else if constexpr (std::is_same_v<T, Quantity>) {
    std::string range = RangeText(f, true);
    return absl::StrCat("quantity", range.empty() ? "" : ", ", range);
  } else if constexpr (std::is_same_v<T, json>) {
    return "object (pod template, allow-listed fields)";
  } else if constexpr (kIsOptional<T>) {
    return absl::StrCat(DocType<typename T::value_type>(f), " (optional)");
  } else if constexpr (kIsVector<T>) {
    using Item = typename T::value_type;
    if constexpr (HasFields<Item>) {
      return "list of objects";
    } else {
      std::string range = RangeText(f, kIsInteger<Item>);
      return absl::StrCat("list of ", kIsInteger<Item> ? "integers" : "strings",
                          range.empty() ? "" : ", each ", range);
    }
  } else if constexpr (kIsStringMap<T>) {
    return "map of string to string";
  } else {
    return "object";
  }
}

template <typename T>
std::string DocDefault(const T& def, const FieldInfo& f) {
  if (!f.default_doc.empty()) {
    return std::string(f.default_doc);
  }
  if (f.required) {
    return "required";
  }
  if constexpr (kIsOptional<T>) {
    return "unset";
  } else if constexpr (HasFields<T>) {
    return "";
  } else if constexpr (std::is_same_v<T, json>) {
    return "none";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return def.empty() ? "empty" : absl::StrCat("`", def, "`");
  } else {
    json j = EncodeValue(def).value_or(json());
    std::string text = j.is_string() ? j.get<std::string>() : Dump(j);
    if (j.is_array()) {
      text = absl::StrReplaceAll(text, {{",", ", "}});
    }
    return absl::StrCat("`", text, "`");
  }
}

class DocWriter {
 public:
  DocWriter(std::string path, std::vector<DocRow>& rows) : path_(std::move(path)), rows_(rows) {}

  template <typename T>
  void operator()(const T& def, const FieldInfo& f) {
    Emit(def, Join(path_, f.name), f);
  }
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo& f, std::string_view, const Target&, Apply) {
    Emit(T{}, Join(path_, f.name), f);
  }
  void Ignore(const auto&) {}

 private:
  template <typename T>
  void Emit(const T& def, const std::string& path, const FieldInfo& f) {
    std::string doc(f.doc);
    rows_.push_back({path, DocType<T>(f), DocDefault(def, f), std::move(doc)});
    Recurse(def, path);
  }

  template <typename T>
  void Recurse(const T& def, const std::string& path) {
    if constexpr (kIsOptional<T>) {
      Recurse(typename T::value_type{}, path);
    } else if constexpr (kIsVector<T>) {
      if constexpr (HasFields<typename T::value_type>) {
        Recurse(typename T::value_type{}, path + "[]");
      }
    } else if constexpr (HasFields<T>) {
      DocWriter sub(path, rows_);
      Fields(sub, def);
    }
  }

  std::string path_;
  std::vector<DocRow>& rows_;
};

std::vector<DocRow> AllDocRows() {
  std::vector<DocRow> rows = {
      {"apiVersion", "string", absl::StrCat("required: `", Av(kJobApiVersion), "`"),
       "API group and version."},
      {"kind", "string", absl::StrCat("required: `", Av(kJobKind), "`"), "Object kind."},
  };
  DocWriter writer("", rows);
  const ShadowSyncJob defaults;
  Fields(writer, defaults);
  return rows;
}

std::string EscapeCell(std::string_view s) { return absl::StrReplaceAll(Av(s), {{"|", "\\|"}}); }

}  // namespace
}  // namespace job_spec_internal

using job_spec_internal::AllDocRows;
using job_spec_internal::Av;
using job_spec_internal::DocRow;
using job_spec_internal::EscapeCell;
using job_spec_internal::FieldInfo;
using job_spec_internal::json;
using job_spec_internal::TypeSchema;

nlohmann::json JobSpecOpenApiSchema() {
  json schema = TypeSchema(JobSpec{}, FieldInfo{.name = "spec"});
  schema["description"] = absl::StrCat("Spec of a ", Av(kJobKind),
                                       ". Generated by JobSpecOpenApiSchema() in "
                                       "jobspec/job_spec_schema.cc; do not edit by hand.");
  job_spec_internal::AddCelRules(schema);
  return schema;
}

std::string JobSpecReferenceMarkdown() {
  // A "Top level" table (apiVersion, kind, metadata, spec), then one section
  // per object below them: metadata and each spec.<section>.
  auto section_of = [](const std::string& path) -> std::string {
    size_t dot = path.find('.');
    if (dot == std::string::npos) {
      return "";
    }
    if (!absl::StartsWith(path, "spec.")) {
      return path.substr(0, dot);
    }
    dot = path.find('.', dot + 1);
    return dot == std::string::npos ? path : path.substr(0, dot);
  };
  std::vector<DocRow> rows = AllDocRows();
  std::stable_partition(rows.begin(), rows.end(),
                        [&](const DocRow& row) { return section_of(row.path).empty(); });
  std::string out;
  std::optional<std::string> current;
  for (const DocRow& row : rows) {
    const std::string section = section_of(row.path);
    const bool intro = row.path == section;  // The row of the section's own object.
    if (section != current) {
      current = section;
      absl::StrAppend(&out, out.empty() ? "" : "\n", "### ",
                      section.empty() ? "Top level" : absl::StrCat("`", section, "`"), "\n\n");
      if (intro) {
        absl::StrAppend(&out, row.doc, "\n\n");
      }
      absl::StrAppend(&out, "| Field | Type | Default | Description |\n|---|---|---|---|\n");
    }
    if (intro) {
      continue;
    }
    absl::StrAppend(&out, "| `", row.path, "` | ", EscapeCell(row.type), " | ",
                    EscapeCell(row.default_text), " | ", EscapeCell(row.doc), " |\n");
  }
  return out;
}

std::vector<std::string> JobFieldPaths() {
  std::vector<std::string> paths;
  for (const DocRow& row : AllDocRows()) {
    paths.push_back(row.path);
  }
  return paths;
}

}  // namespace shadowsync
