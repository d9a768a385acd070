// `shadowsync gen-data`: synthetic Criteo-layout data from a planted teacher.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "data/synthetic.h"

namespace shadowsync::cli {

Action AddGenDataCommand(CLI::App& app) {
  auto options = std::make_shared<SyntheticOptions>();
  CLI::App* cmd = app.add_subcommand(
      "gen-data",
      "Write synthetic Criteo-layout data and FILE.teacher.json (the best achievable NE).");
  cmd->add_option("--out", options->out_path, "output TSV (.gz for gzip)")->required();
  cmd->add_option("--examples", options->examples, "examples to write")->capture_default_str();
  cmd->add_option("--seed", options->seed, "generator seed")->capture_default_str();
  return [options] {
    auto report = GenerateSynthetic(*options);
    if (!report.ok()) {
      TellUser(absl::StrCat("shadowsync gen-data: ", report.status().message()));
      return report.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::cout << absl::StrFormat("wrote %d examples to %s (ctr %.4f); teacher NE %.4f AUC %.4f\n",
                                 report->examples, options->out_path, report->ctr, report->ne,
                                 report->auc);
    return 0;
  };
}

}  // namespace shadowsync::cli
