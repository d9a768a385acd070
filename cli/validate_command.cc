// `shadowsync validate FILE...`: checks job files as `shadowsync run` and the
// operator do (decoding, then range and cross-field rules), without running
// anything, and lists every problem of each file, "<file>:<line>: <path>:
// <what>". Exit 0 when every file is valid, 1 otherwise.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "jobspec/job_spec.h"

namespace shadowsync::cli {

Action AddValidateCommand(CLI::App& app) {
  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "validate",
      "Check job files (YAML or JSON) as `run` and the operator do, listing every problem.");
  cmd->add_option("files", *files, "job files")->required();
  return [files] {
    int invalid = 0;
    for (const std::string& file : *files) {
      const absl::StatusOr<ShadowSyncJob> job = LoadJobFile(file);
      if (job.ok()) {
        std::cout << file << ": valid (" << JobSummary(*job) << ")\n";
        continue;
      }
      ++invalid;
      std::cout << file << ": invalid\n" << job.status().message() << "\n";
    }
    return invalid == 0 ? 0 : 1;
  };
}

}  // namespace shadowsync::cli
