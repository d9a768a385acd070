// `shadowsync crd [--json]`: prints the ShadowSyncJob CustomResourceDefinition
// (operator/crd.h), the content of deploy/crd.yaml.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "operator/crd.h"

namespace shadowsync::cli {

Action AddCrdCommand(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "crd", "Print the ShadowSyncJob CustomResourceDefinition (kubectl apply -f -).");
  cmd->add_flag("--json", *json, "print JSON instead of YAML");
  return [json] {
    if (*json) {
      std::cout << op::ShadowSyncJobCrd().dump(2) << "\n";
    } else {
      std::cout << op::CrdYaml();
    }
    return std::cout.good() ? 0 : 1;
  };
}

}  // namespace shadowsync::cli
