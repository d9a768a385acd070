// Subcommand registration, shared by cli.cc and the per-command files. Called
// on the main thread while RunCli builds the command line.
#ifndef SHADOWSYNC_CLI_COMMANDS_H_
#define SHADOWSYNC_CLI_COMMANDS_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace shadowsync::cli {

// Each Add*Command registers its subcommand on `app` and returns the action
// to run when it was selected; the action returns the exit code.
using Action = std::function<int()>;
Action AddTrainCommand(CLI::App& app);
Action AddEvalCommand(CLI::App& app);
Action AddGenDataCommand(CLI::App& app);
Action AddBenchCommand(CLI::App& app);
Action AddPsCommand(CLI::App& app);
Action AddSyncerCommand(CLI::App& app);
Action AddWorkerCommand(CLI::App& app);
Action AddRunCommand(CLI::App& app);
Action AddScaleCommand(CLI::App& app);
Action AddExportCommand(CLI::App& app);
Action AddCrdCommand(CLI::App& app);
Action AddValidateCommand(CLI::App& app);
Action AddOperatorCommand(CLI::App& app);
Action AddPodCommand(CLI::App& app);
Action AddServeCommand(CLI::App& app);

}  // namespace shadowsync::cli

#endif  // SHADOWSYNC_CLI_COMMANDS_H_
