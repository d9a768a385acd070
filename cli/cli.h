// The `shadowsync` command: main.cc only calls RunCli; each subcommand lives
// in its own file (cli/commands.h lists them). Called once, from main.
#ifndef SHADOWSYNC_CLI_CLI_H_
#define SHADOWSYNC_CLI_CLI_H_

namespace shadowsync::cli {

// Parses argv, starts logging at the level of --log-level and -v
// (common/logging.h), runs the subcommand and returns the process exit code:
// 0 success, 1 runtime failure, 2 bad usage or invalid job spec.
int RunCli(int argc, char** argv);

}  // namespace shadowsync::cli

#endif  // SHADOWSYNC_CLI_CLI_H_
