#include "cli/cli.h"

#include <vector>

#include "cli/commands.h"
#include "common/grpc_util.h"

namespace shadowsync::cli {

int RunCli(int argc, char** argv) {
  DisableMutexDeadlockDetection();
  CLI::App app{"ShadowSync: train DLRM-style CTR models on one machine or many."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shadowsync 0.1.0");
  std::vector<Action> actions = {
      AddTrainCommand(app), AddEvalCommand(app),   AddGenDataCommand(app), AddBenchCommand(app),
      AddPsCommand(app),    AddSyncerCommand(app), AddWorkerCommand(app),  AddRunCommand(app),
      AddScaleCommand(app), AddExportCommand(app), AddCrdCommand(app),     AddOperatorCommand(app),
      AddPodCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  // Exactly one subcommand was given; its position matches the actions list.
  const auto subs = app.get_subcommands({});
  for (size_t i = 0; i < subs.size(); ++i) {
    if (subs[i]->parsed()) return actions[i]();
  }
  return 2;
}

}  // namespace shadowsync::cli
