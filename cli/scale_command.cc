// `shadowsync scale RUN_DIR --ps N`: live resharding of a local job's
// parameter servers, carried out by its launcher (cli/launcher.h).
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/launcher.h"

namespace shadowsync::cli {

Action AddScaleCommand(CLI::App& app) {
  auto request = std::make_shared<ScaleRequest>();
  CLI::App* cmd = app.add_subcommand(
      "scale", "Reshard a running `shadowsync run` job to N parameter servers, live.");
  cmd->add_option("run_dir", request->run_dir, "the job's run directory (shadowsync run --out)")
      ->required();
  cmd->add_option("--ps", request->parameter_servers, "parameter servers wanted")->required();
  cmd->add_flag("--pause", request->pause,
                "stop training while the slots move: then every row's value checksum must match");
  cmd->add_option("--timeout", request->timeout_seconds, "seconds to wait for the launcher")
      ->capture_default_str();
  return [request] {
    absl::StatusOr<nlohmann::json> r = RequestScale(*request);
    if (!r.ok()) {
      TellUser(absl::StrCat("shadowsync scale: ", r.status().message()));
      return r.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    if (r->value("unchanged", false)) {
      std::cout << "already " << request->parameter_servers << " parameter server(s)\n";
      return 0;
    }
    const nlohmann::json& before = (*r)["moved_before"];
    const nlohmann::json& after = (*r)["moved_after"];
    std::cout << absl::StrFormat(
        "resharded %d -> %d parameter servers in %.1f s: %d slots, %d rows moved in %d steps\n"
        "moved rows before/after: %d/%d, key checksum %s/%s, value checksum %s/%s\n"
        "cluster before: %d rows, keys %s, values %s\n"
        "cluster after:  %d rows, keys %s, values %s%s\n",
        (*r)["servers_before"].get<int>(), (*r)["servers_after"].get<int>(),
        (*r)["seconds"].get<double>(), (*r)["slots_moved"].get<int64_t>(),
        before["rows"].get<int64_t>(), (*r)["steps"].get<int>(), before["rows"].get<int64_t>(),
        after["rows"].get<int64_t>(), before["key_checksum"].get<std::string>(),
        after["key_checksum"].get<std::string>(), before["value_checksum"].get<std::string>(),
        after["value_checksum"].get<std::string>(), (*r)["cluster_before"]["rows"].get<int64_t>(),
        (*r)["cluster_before"]["key_checksum"].get<std::string>(),
        (*r)["cluster_before"]["value_checksum"].get<std::string>(),
        (*r)["cluster_after"]["rows"].get<int64_t>(),
        (*r)["cluster_after"]["key_checksum"].get<std::string>(),
        (*r)["cluster_after"]["value_checksum"].get<std::string>(),
        request->pause ? " (training paused: equal)" : " (training ran meanwhile)");
    return 0;
  };
}

}  // namespace shadowsync::cli
