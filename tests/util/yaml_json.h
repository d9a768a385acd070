// YAML manifests as JSON, for tests that read deploy/ files: the YAML 1.2
// core schema for plain scalars (true/false/null, integers, floats), quoted
// scalars always strings.
//
//   for (const nlohmann::json& doc : YamlDocumentsToJson(YAML::LoadAllFromFile(path))) ...
#ifndef SHADOWSYNC_TESTS_UTIL_YAML_JSON_H_
#define SHADOWSYNC_TESTS_UTIL_YAML_JSON_H_

#include <yaml-cpp/yaml.h>

#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace shadowsync::testing {

// `node` as JSON. `on_yaml11_bool` (may be empty) is called with every plain
// scalar that YAML 1.1 readers (kubectl's go-yaml) would take for a boolean
// ("yes", "on", ...), which this keeps a string: such a value must be quoted.
inline nlohmann::json YamlToJson(
    const YAML::Node& node, const std::function<void(const std::string&)>& on_yaml11_bool = {}) {
  using json = nlohmann::json;
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (auto it = node.begin(); it != node.end(); ++it) {
        o[it->first.Scalar()] = YamlToJson(it->second, on_yaml11_bool);
      }
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const YAML::Node& item : node) a.push_back(YamlToJson(item, on_yaml11_bool));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() != "?") return s;  // Quoted.
      static const std::regex kInt(R"([-+]?[0-9]+)");
      static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
      static const std::regex kYaml11Bool(R"(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)");
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      if (s == "null" || s == "Null" || s == "NULL" || s == "~" || s.empty()) return nullptr;
      if (std::regex_match(s, kInt)) return std::stoll(s);
      if (std::regex_match(s, kFloat)) return std::stod(s);
      if (on_yaml11_bool && std::regex_match(s, kYaml11Bool)) on_yaml11_bool(s);
      return s;
    }
    default:
      return nullptr;
  }
}

// Every non-empty document of a multi-document YAML stream, as JSON.
inline std::vector<nlohmann::json> YamlDocumentsToJson(
    const std::vector<YAML::Node>& docs,
    const std::function<void(const std::string&)>& on_yaml11_bool = {}) {
  std::vector<nlohmann::json> out;
  for (const YAML::Node& doc : docs) {
    if (!doc.IsNull()) out.push_back(YamlToJson(doc, on_yaml11_bool));
  }
  return out;
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_YAML_JSON_H_
