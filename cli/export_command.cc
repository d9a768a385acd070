// `shadowsync export RUN_DIR`: an export of a running local job's model now,
// taken by its launcher (cli/launcher.h, docs/export.md).
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/launcher.h"
#include "exporter/job_export.h"

namespace shadowsync::cli {

Action AddExportCommand(CLI::App& app) {
  struct Flags {
    std::string run_dir;
    double timeout_seconds = 600;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Export the model of a running `shadowsync run` job now (docs/export.md).");
  cmd->add_option("run_dir", flags->run_dir, "the job's run directory (shadowsync run --out)")
      ->required();
  cmd->add_option("--timeout", flags->timeout_seconds, "seconds to wait for the launcher")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print the export's summary as JSON");
  return [flags] {
    absl::StatusOr<nlohmann::json> r = RequestExport(flags->run_dir, flags->timeout_seconds);
    if (!r.ok()) {
      TellUser(absl::StrCat("shadowsync export: ", r.status().message()));
      return 1;
    }
    if (flags->json) {
      std::cout << r->dump(2) << "\n";
      return 0;
    }
    std::cout << exporter::DescribeExport(*r) << "\n";
    return 0;
  };
}

}  // namespace shadowsync::cli
