// The JSON codec: a JSON value (from YAML, JSON text or the API server) to
// the structs, collecting every problem, and back (ObjectEncoder in
// job_spec_internal.h); the public decoding entry points and JobToJson.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_fields.h"
#include "jobspec/job_spec_internal.h"

namespace shadowsync {
namespace job_spec_internal {
namespace {

// ---------------------------------------------------------------------------
// Small formatting helpers.

// A JSON value as shown after "got": strings quoted (and shortened),
// containers by kind.
std::string Got(const json& j) {
  switch (j.type()) {
    case json::value_t::string: {
      std::string s = j.get<std::string>();
      if (s.size() > 40) {
        size_t cut = 37;  // Not inside a UTF-8 sequence: JSON could not hold half of one.
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
        s = s.substr(0, cut) + "...";
      }
      return Dump(json(s));
    }
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "a list";
    case json::value_t::null:
      return "null";
    case json::value_t::number_float: {
      double d = j.get<double>();
      return std::isfinite(d) ? absl::StrCat(d) : (std::isnan(d) ? ".nan" : ".inf");
    }
    default:
      return Dump(j);
  }
}

std::string QuotedList(auto names) {
  std::vector<std::string> quoted;
  for (std::string_view n : names) {
    quoted.push_back(absl::StrCat("\"", Av(n), "\""));
  }
  return absl::StrJoin(quoted, ", ");
}

// Edit distance on names normalised for case and '_'/'-', so "batch_size"
// and "BatchSize" both find "batchSize".
std::string NormalizeName(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '-') {
      continue;
    }
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// Optimal-string-alignment distance: insertions, deletions, substitutions
// and adjacent transpositions ("nmae" -> "name") each cost 1.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) {
    d[i][0] = i;
  }
  for (size_t j = 0; j <= b.size(); ++j) {
    d[0][j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string_view> Suggest(std::string_view wrong,
                                        const std::vector<std::string_view>& candidates) {
  const std::string w = NormalizeName(wrong);
  const size_t limit = std::clamp<size_t>(w.size() / 3, 1, 3);
  std::optional<std::string_view> best;
  size_t best_distance = limit + 1;
  for (std::string_view c : candidates) {
    size_t d = EditDistance(w, NormalizeName(c));
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------
// Decoding: JSON value -> struct, collecting type errors and unknown fields.

template <typename T>
void DecodeValue(const json& j, const std::string& path, T& out, Problems& problems);

class ObjectDecoder {
 public:
  ObjectDecoder(const json& object, std::string path, Problems& problems)
      : object_(object), path_(std::move(path)), problems_(problems) {}

  template <typename T>
  void operator()(T& value, const FieldInfo& f) {
    known_.push_back(f.name);
    const json* j = Find(f.name);
    if (j == nullptr) {
      if (f.required) {
        problems_.push_back({Join(path_, f.name), "required field is missing", path_});
      }
      return;
    }
    DecodeValue(*j, Join(path_, f.name), value, problems_);
  }

  // A field that exists only on the wire and is folded into `target`.
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo& f, std::string_view replaces, Target& target, Apply apply) {
    known_.push_back(f.name);
    const json* j = Find(f.name);
    if (j == nullptr) {
      return;
    }
    const std::string path = Join(path_, f.name);
    if (Find(replaces) != nullptr) {
      problems_.push_back(
          {path, absl::StrCat("cannot be combined with ", Join(path_, replaces), "; give one")});
      return;
    }
    T shorthand;
    const size_t before = problems_.size();
    DecodeValue(*j, path, shorthand, problems_);
    RangeChecker checker(path, problems_);
    Fields(checker, shorthand);
    if (problems_.size() == before) {
      apply(shorthand, target);
    }
  }

  // Keys accepted and dropped.
  void Ignore(const auto& names) { ignored_.insert(ignored_.end(), names.begin(), names.end()); }

  // Reports every key no field claimed.
  void Finish() {
    for (const auto& [key, value] : object_.items()) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end() ||
          std::find(ignored_.begin(), ignored_.end(), key) != ignored_.end()) {
        continue;
      }
      std::string message = "unknown field";
      if (std::optional<std::string_view> s = Suggest(key, known_)) {
        absl::StrAppend(&message, " (did you mean \"", Av(*s), "\"?)");
      } else {
        absl::StrAppend(&message, "; known fields: ",
                        absl::StrJoin(known_, ", ", [](std::string* out, std::string_view n) {
                          out->append(n);
                        }));
      }
      problems_.push_back({Join(path_, key), std::move(message)});
    }
  }

 private:
  const json* Find(std::string_view name) const {
    auto it = object_.find(std::string(name));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  const json& object_;
  std::string path_;
  Problems& problems_;
  std::vector<std::string_view> known_;
  std::vector<std::string_view> ignored_;
};

template <typename T>
std::optional<T> AsInteger(const json& j) {
  using Limits = std::numeric_limits<T>;
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u <= static_cast<uint64_t>(Limits::max())) {
      return static_cast<T>(u);
    }
  } else if (j.is_number_integer()) {
    int64_t i = j.get<int64_t>();
    if (i >= static_cast<int64_t>(Limits::min()) && i <= static_cast<int64_t>(Limits::max())) {
      return static_cast<T>(i);
    }
  } else if (j.is_number_float()) {
    // 3.0 and 1e7 are integers; Kubernetes' schema validation agrees.
    double d = j.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && d >= static_cast<double>(Limits::min()) &&
        d < std::ldexp(1.0, Limits::digits)) {
      return static_cast<T>(d);
    }
  }
  return std::nullopt;
}

template <typename T>
void DecodeValue(const json& j, const std::string& path, T& out, Problems& problems) {
  auto fail = [&](std::string_view expected) {
    problems.push_back({path, absl::StrCat("expected ", Av(expected), ", got ", Got(j))});
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) {
      return fail("a boolean (true or false)");
    }
    out = j.get<bool>();
  } else if constexpr (kIsInteger<T>) {
    if (std::optional<T> v = AsInteger<T>(j)) {
      out = *v;
    } else if (j.is_number() && std::isfinite(j.get<double>()) &&
               j.get<double>() == std::trunc(j.get<double>())) {
      fail(absl::StrCat("an integer in [", std::numeric_limits<T>::min(), ", ",
                        std::numeric_limits<T>::max(), "]"));
    } else {
      fail("an integer");
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number() || !std::isfinite(j.get<double>())) {
      return fail("a finite number");
    }
    out = j.get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) {
      return fail("a string");
    }
    out = j.get<std::string>();
  } else if constexpr (std::is_enum_v<T>) {
    constexpr auto& kNames = EnumTraits<T>::kNames;
    if (!j.is_string()) {
      return fail(absl::StrCat("one of ", QuotedList(kNames)));
    }
    const std::string name = j.get<std::string>();
    if (std::optional<T> e = ParseEnumName<T>(name)) {
      out = *e;
      return;
    }
    std::string message = absl::StrCat("unknown value ", Got(j));
    if (std::optional<std::string_view> s =
            Suggest(name, std::vector<std::string_view>(kNames.begin(), kNames.end()))) {
      absl::StrAppend(&message, " (did you mean \"", Av(*s), "\"?)");
    }
    absl::StrAppend(&message, "; expected one of ", QuotedList(kNames));
    problems.push_back({path, std::move(message)});
  } else if constexpr (std::is_same_v<T, Quantity>) {
    std::string text;
    if (j.is_string()) {
      text = j.get<std::string>();
    } else if (j.is_number_integer()) {
      text = Dump(j);
    } else if (j.is_number_float() && std::isfinite(j.get<double>())) {
      text = absl::StrCat(j.get<double>());
    }
    absl::StatusOr<Quantity> q = ParseQuantity(text);
    if (text.empty() || !q.ok()) {
      return fail("a Kubernetes quantity such as \"1Gi\" or \"500M\"");
    }
    out = *std::move(q);
  } else if constexpr (std::is_same_v<T, json>) {
    if (!j.is_object()) {
      return fail("an object");
    }
    out = j;
  } else if constexpr (kIsOptional<T>) {
    typename T::value_type inner{};
    DecodeValue(j, path, inner, problems);
    out = std::move(inner);
  } else if constexpr (kIsVector<T>) {
    if (!j.is_array()) {
      return fail("a list");
    }
    out.clear();
    for (size_t i = 0; i < j.size(); ++i) {
      typename T::value_type item{};
      DecodeValue(j[i], Index(path, i), item, problems);
      out.push_back(std::move(item));
    }
  } else if constexpr (kIsStringMap<T>) {
    if (!j.is_object()) {
      return fail("a map of strings");
    }
    out.clear();
    for (const auto& [key, value] : j.items()) {
      if (!value.is_string()) {
        problems.push_back({Join(path, key), absl::StrCat("expected a string, got ", Got(value))});
        continue;
      }
      out[key] = value.template get<std::string>();
    }
  } else {
    static_assert(HasFields<T>, "no decoder for this field type");
    if (!j.is_object()) {
      return fail("an object");
    }
    ObjectDecoder decoder(j, path, problems);
    Fields(decoder, out);
    decoder.Finish();
  }
}

void DecodeJob(const json& root, ShadowSyncJob& job, Problems& problems) {
  if (!root.is_object()) {
    problems.push_back(
        {"", absl::StrCat("expected an object with apiVersion, kind, metadata and spec, got ",
                          Got(root))});
    return;
  }
  bool header_ok = true;
  auto check = [&](std::string_view key, std::string_view expected) {
    auto it = root.find(std::string(key));
    if (it == root.end() || it->is_null()) {
      problems.push_back(
          {std::string(key),
           absl::StrCat("required field is missing; expected \"", Av(expected), "\""), ""});
      header_ok = false;
    } else if (!it->is_string() || it->get<std::string>() != expected) {
      problems.push_back(
          {std::string(key), absl::StrCat("expected \"", Av(expected), "\", got ", Got(*it))});
      header_ok = false;
    }
  };
  check("apiVersion", kJobApiVersion);
  check("kind", kJobKind);
  // Another kind of object would only add noise about its fields.
  if (!header_ok) {
    return;
  }
  ObjectDecoder decoder(root, "", problems);
  constexpr std::array<std::string_view, 3> kHeader = {"apiVersion", "kind", "status"};
  decoder.Ignore(kHeader);
  Fields(decoder, job);
  decoder.Finish();
}

absl::StatusOr<ShadowSyncJob> DecodeOrError(const json& root, Problems problems,
                                            std::string_view source, const LineMap* lines) {
  ShadowSyncJob job;
  DecodeJob(root, job, problems);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(FormatProblems(problems, source, lines));
  }
  return job;
}

}  // namespace
}  // namespace job_spec_internal

using job_spec_internal::DecodeOrError;
using job_spec_internal::Fields;
using job_spec_internal::JobProblems;
using job_spec_internal::json;
using job_spec_internal::JsonTextToJson;
using job_spec_internal::LineMap;
using job_spec_internal::ObjectEncoder;
using job_spec_internal::Problems;
using job_spec_internal::YamlToJson;

absl::StatusOr<ShadowSyncJob> ParseJobYaml(std::string_view text, std::string_view source_name) {
  LineMap lines;
  Problems problems;
  absl::StatusOr<json> root = YamlToJson(text, source_name, lines, problems);
  if (!root.ok()) {
    return root.status();
  }
  return DecodeOrError(*root, std::move(problems), source_name, &lines);
}

absl::StatusOr<ShadowSyncJob> ParseJobJson(std::string_view text, std::string_view source_name) {
  Problems problems;
  absl::StatusOr<json> root = JsonTextToJson(text, source_name, problems);
  if (!root.ok()) {
    return root.status();
  }
  return DecodeOrError(*root, std::move(problems), source_name, nullptr);
}

absl::StatusOr<ShadowSyncJob> JobFromJson(const nlohmann::json& object) {
  return DecodeOrError(object, {}, "", nullptr);
}

absl::StatusOr<ShadowSyncJob> LoadJobFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read job file ", path, ": ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  LineMap lines;
  Problems problems;
  const bool is_json = absl::EndsWith(path, ".json");
  absl::StatusOr<json> root =
      is_json ? JsonTextToJson(text, path, problems) : YamlToJson(text, path, lines, problems);
  if (!root.ok()) {
    return root.status();
  }
  const LineMap* line_map = is_json ? nullptr : &lines;
  absl::StatusOr<ShadowSyncJob> job = DecodeOrError(*root, std::move(problems), path, line_map);
  if (!job.ok()) {
    return job.status();
  }
  Problems invalid = JobProblems(*job);
  if (!invalid.empty()) {
    return absl::InvalidArgumentError(FormatProblems(invalid, path, line_map));
  }
  return job;
}

nlohmann::json JobToJson(const ShadowSyncJob& job) {
  json out = {{"apiVersion", kJobApiVersion}, {"kind", kJobKind}};
  ObjectEncoder encoder(out);
  Fields(encoder, job);
  return out;
}

}  // namespace shadowsync
