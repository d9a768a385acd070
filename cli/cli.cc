#include "cli/cli.h"

#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/version.h"

namespace shadowsync::cli {

int RunCli(int argc, char** argv) {
  DisableMutexDeadlockDetection();
  CLI::App app{"ShadowSync: train DLRM-style CTR models on one machine or many."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shadowsync " + std::string(kReleaseVersion));
  // The logging flags are the main command's, also accepted after the
  // subcommand (fallthrough, which the subcommands inherit): `shadowsync ps
  // --log-level warning` and a pod template's extra args work too.
  app.fallthrough();
  std::string log_level;
  std::optional<int> verbosity;
  app.add_option("--log-level", log_level,
                 "least severe log lines shown: " + LogLevelNames() +
                     " (default: $GLOG_minloglevel, else info); the processes this one starts "
                     "inherit it")
      ->check([](const std::string& name) {
        absl::StatusOr<LogLevel> level = ParseLogLevel(name);
        return level.ok() ? std::string() : std::string(level.status().message());
      });
  app.add_option("-v,--verbosity", verbosity,
                 "show VLOG(n) lines for n <= N (default: $GLOG_v, else 0)")
      ->check(CLI::NonNegativeNumber);
  std::vector<Action> actions = {
      AddTrainCommand(app),    AddEvalCommand(app), AddGenDataCommand(app),
      AddBenchCommand(app),    AddPsCommand(app),   AddSyncerCommand(app),
      AddWorkerCommand(app),   AddRunCommand(app),  AddScaleCommand(app),
      AddExportCommand(app),   AddCrdCommand(app),  AddValidateCommand(app),
      AddOperatorCommand(app), AddPodCommand(app),  AddServeCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  LogOptions log;
  if (!log_level.empty()) log.level = *ParseLogLevel(log_level);
  log.verbosity = verbosity;
  InitLogging(argv[0], log);
  // Exactly one subcommand was given; its position matches the actions list.
  const auto subs = app.get_subcommands({});
  for (size_t i = 0; i < subs.size(); ++i) {
    if (subs[i]->parsed()) return actions[i]();
  }
  return 2;
}

}  // namespace shadowsync::cli
