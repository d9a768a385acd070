// `shadowsync syncer`: one syncer replica (syncer/syncer_server.h), the sync
// parameter server for the dense parameters, until SIGTERM or SIGINT, which
// shut it down cleanly.
#include <malloc.h>

#include <memory>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "glog/logging.h"
#include "syncer/syncer_server.h"

namespace shadowsync::cli {
namespace {

struct SyncerFlags {
  ServerFlags server{.listen = "0.0.0.0:7100", .metrics_listen = "0.0.0.0:7101"};
  double member_timeout_seconds = 10;
  int64_t max_waiting_bytes = syncer::SyncerServiceOptions().max_waiting_bytes;
  double reply_delay_ms = 0;
};

int RunSyncer(const SyncerFlags& f) {
  if (!(f.member_timeout_seconds > 0)) {
    LOG(ERROR) << "syncer: --member-timeout-seconds must be positive";
    return 2;
  }
  if (!(f.reply_delay_ms >= 0)) {
    LOG(ERROR) << "syncer: --reply-delay-ms must be >= 0";
    return 2;
  }
  syncer::SyncerServerOptions o;
  o.service.member_timeout = absl::Seconds(f.member_timeout_seconds);
  o.service.max_waiting_bytes = f.max_waiting_bytes;
  o.service.reply_delay = absl::Milliseconds(f.reply_delay_ms);

  // Every round allocates and frees a request and a reply the size of the
  // syncer's range (megabytes). By default glibc hands blocks that large
  // back to the kernel on free (munmap, or trimming a thread's arena), and
  // the next round faults every page in again: measured, half the syncer's
  // CPU per round. Keep them (up to 32 MiB blocks, 256 MiB of free top).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);

  return ServeUntilSignal("syncer", f.server, std::move(o), syncer::SyncerServer::Start);
}

}  // namespace

Action AddSyncerCommand(CLI::App& app) {
  auto f = std::make_shared<SyncerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "syncer",
      "Run a syncer replica (dense centre variable and all-reduce rounds) until SIGTERM/SIGINT.");
  AddServerFlags(*cmd, f->server);
  cmd->add_option("--member-timeout-seconds", f->member_timeout_seconds,
                  "drop a live member that has not contributed this long after a round's first "
                  "contribution")
      ->capture_default_str();
  cmd->add_option("--max-waiting-bytes", f->max_waiting_bytes,
                  "bytes the waiting all-reduce and clock calls may hold together (> 0)")
      ->capture_default_str();
  cmd->add_option("--reply-delay-ms", f->reply_delay_ms,
                  "for benchmarks: hold every reply this long, emulating the network time "
                  "loopback lacks")
      ->capture_default_str();
  return [f] { return RunSyncer(*f); };
}

}  // namespace shadowsync::cli
