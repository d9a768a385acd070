// ShadowSyncJob manifests for the end-to-end tests of the `shadowsync` binary.
#ifndef SHADOWSYNC_TESTS_UTIL_JOB_YAML_H_
#define SHADOWSYNC_TESTS_UTIL_JOB_YAML_H_

#include <string>
#include <string_view>

namespace shadowsync::testing {

// A job named `name` that trains the small DLRM the end-to-end tests share
// (fast, yet it learns) on `examples` synthetic teacher examples (seed 4) and
// scores it on `eval_examples` more; `spec` (YAML lines indented by two)
// completes its spec.
inline std::string TinyJobYaml(std::string_view name, int examples, int eval_examples,
                               std::string_view spec) {
  std::string yaml = "apiVersion: shadowsync.io/v1alpha1\nkind: ShadowSyncJob\nmetadata: {name: ";
  yaml += name;
  yaml += "}\nspec:\n  model: {bottomMlp: [32], topMlp: [32], criteoTables: {hashBuckets: 5000}}\n";
  yaml += "  data: {format: synthetic, synthetic: {examples: " + std::to_string(examples) +
          ", evalExamples: " + std::to_string(eval_examples) + ", seed: 4}}\n";
  yaml += spec;
  return yaml;
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_JOB_YAML_H_
