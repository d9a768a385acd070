// Walking OpenAPI v3 schemas (the job spec's and the CRD's) in tests.
#ifndef SHADOWSYNC_TESTS_UTIL_JSON_SCHEMA_H_
#define SHADOWSYNC_TESTS_UTIL_JSON_SCHEMA_H_

#include <functional>
#include <string>

#include "nlohmann/json.hpp"

namespace shadowsync::testing {

// Calls `visit(path, node)` for `node` and every schema node below it; `path`
// is dotted ("spec.trainer.replicas"), with "[]" for array items.
inline void WalkSchema(
    const nlohmann::json& node, const std::string& path,
    const std::function<void(const std::string&, const nlohmann::json&)>& visit) {
  visit(path, node);
  if (node.contains("properties")) {
    for (const auto& [name, child] : node["properties"].items()) {
      WalkSchema(child, path.empty() ? name : path + "." + name, visit);
    }
  }
  if (node.contains("items")) WalkSchema(node["items"], path + "[]", visit);
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_JSON_SCHEMA_H_
