// Job text -> JSON value: YAML (one document, scalars by the YAML 1.2 core
// schema, the line of every field path recorded for messages) or JSON text
// (duplicate keys reported, which nlohmann would collapse). The JSON codec
// (job_spec_codec.cc) decodes the value.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "jobspec/job_spec_internal.h"
#include "jobspec/text_checks.h"
#include "jobspec/yaml_scalar.h"

namespace shadowsync::job_spec_internal {
namespace {

// ---------------------------------------------------------------------------
// YAML -> JSON, recording the line of every field path.

class YamlConverter {
 public:
  YamlConverter(LineMap& lines, Problems& problems) : lines_(lines), problems_(problems) {}

  json Convert(const YAML::Node& node, const std::string& path) {
    switch (node.Type()) {
      case YAML::NodeType::Scalar:
        return Scalar(node, path);
      case YAML::NodeType::Sequence: {
        json a = json::array();
        for (size_t i = 0; i < node.size(); ++i) {
          const std::string child = Index(path, i);
          lines_.emplace(child, node[i].Mark().line + 1);
          a.push_back(Convert(node[i], child));
        }
        return a;
      }
      case YAML::NodeType::Map: {
        json o = json::object();
        for (auto it = node.begin(); it != node.end(); ++it) {
          const int line = it->first.Mark().line + 1;
          if (!it->first.IsScalar()) {
            problems_.push_back({path, "keys must be strings", std::nullopt, line});
            continue;
          }
          const std::string& key = it->first.Scalar();
          const std::string child = Join(path, key);
          if (o.contains(key)) {
            problems_.push_back(
                {child, absl::StrCat("duplicate key (first given on line ", lines_[child], ")"),
                 std::nullopt, line});
            continue;
          }
          lines_.emplace(child, line);
          o[key] = Convert(it->second, child);
        }
        return o;
      }
      default:  // Null, Undefined.
        return nullptr;
    }
  }

 private:
  json Scalar(const YAML::Node& node, const std::string& path) {
    const std::string& tag = node.Tag();
    const std::string& text = node.Scalar();
    if (tag == "!" || tag == "tag:yaml.org,2002:str") {
      return text;  // Quoted or block scalars.
    }
    if (tag == "?" || tag.empty()) {
      return ResolvePlainScalar(text);
    }
    json resolved = ResolvePlainScalar(text);
    if ((tag == "tag:yaml.org,2002:int" && resolved.is_number_integer()) ||
        (tag == "tag:yaml.org,2002:float" && resolved.is_number()) ||
        (tag == "tag:yaml.org,2002:bool" && resolved.is_boolean()) ||
        (tag == "tag:yaml.org,2002:null" && resolved.is_null())) {
      return tag == "tag:yaml.org,2002:float" ? json(resolved.get<double>()) : resolved;
    }
    problems_.push_back(
        {path, absl::StrCat("unsupported or mismatched YAML tag ", tag, " on \"", text, "\"")});
    return text;
  }

  LineMap& lines_;
  Problems& problems_;
};

// Parses YAML events and drops them: only the number of documents matters.
class DocumentCounter final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};
constexpr int kMaxYamlDocuments = 16;

// Duplicate keys are legal JSON that nlohmann would silently collapse; this
// parser callback reports them with their path.
class DuplicateKeyFinder {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames_.push_back({event == json::parse_event_t::object_start, ChildPath()});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) {
          duplicates_.push_back({Join(f.path, f.key), "duplicate key"});
        }
        break;
      }
      case json::parse_event_t::value:
        ChildPath();
        break;
    }
    return true;
  }
  Problems& duplicates() { return duplicates_; }

 private:
  struct Frame {
    bool is_object;
    std::string path;
    std::set<std::string> keys = {};
    std::string key = {};
    size_t next_index = 0;
  };
  // The path of the element now starting in the innermost container.
  std::string ChildPath() {
    if (frames_.empty()) {
      return "";
    }
    Frame& f = frames_.back();
    return f.is_object ? Join(f.path, f.key) : Index(f.path, f.next_index++);
  }
  std::vector<Frame> frames_;
  Problems duplicates_;
};

}  // namespace

absl::StatusOr<json> YamlToJson(std::string_view text, std::string_view source, LineMap& lines,
                                Problems& problems) {
  // YAML streams are Unicode; and every string we keep is later written as
  // JSON (status, ConfigMap, job.json), which cannot hold stray bytes.
  if (const size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    const std::string_view before = text.substr(0, bad);
    const size_t line = std::count(before.begin(), before.end(), '\n') + 1;
    const size_t line_start = before.rfind('\n');
    const size_t column = bad - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    return absl::InvalidArgumentError(absl::StrCat(
        Av(source), ":", line, ":", column, ": not valid UTF-8 (a YAML file must be UTF-8)"));
  }
  YAML::Node doc;
  int docs = 0;
  try {
    // Not YAML::LoadAll: on some malformed inputs (e.g. ",*") yaml-cpp 0.7's
    // parser yields empty documents forever and LoadAll allocates until the
    // process dies (jbeder/yaml-cpp#1319, found by fuzz_job_spec). Count
    // documents up to a cap, then load the first.
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (docs < kMaxYamlDocuments && parser.HandleNextDocument(counter)) ++docs;
    if (docs == 1) doc = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        Av(source), ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
  if (docs != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(source), ": expected exactly one YAML document (one ShadowSyncJob), found ",
                     docs, docs == kMaxYamlDocuments ? " or more" : ""));
  }
  YamlConverter converter(lines, problems);
  return converter.Convert(doc, "");
}

absl::StatusOr<json> JsonTextToJson(std::string_view text, std::string_view source,
                                    Problems& problems) {
  try {
    DuplicateKeyFinder finder;
    json j = json::parse(text.begin(), text.end(), std::ref(finder));
    problems = std::move(finder.duplicates());
    return j;
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based offset of the offending character.
    size_t end = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    size_t line = 1 + std::count(text.begin(), text.begin() + end, '\n');
    size_t line_start = text.rfind('\n', end == 0 ? 0 : end - 1);
    size_t column = line_start == std::string_view::npos || end == 0 ? end + 1 : end - line_start;
    std::string what = e.what();
    size_t detail = what.find("syntax error");
    return absl::InvalidArgumentError(absl::StrCat(
        Av(source), ":", line, ":", column,
        ": JSON syntax error: ", detail == std::string::npos ? what : what.substr(detail)));
  }
}

}  // namespace shadowsync::job_spec_internal
