// Launch (cli/launch_internal.h): live resharding (`shadowsync scale`).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "cli/cli_util.h"
#include "cli/launch_internal.h"
#include "glog/logging.h"
#include "ps/client/resharder.h"

namespace shadowsync::cli::internal {

absl::StatusOr<nlohmann::json> Launch::ScaleTo(int n, bool pause) {
  const int current = static_cast<int>(ps_addresses_.size());
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--ps: must be >= 1, got ", n));
  }
  if (n == current) {
    return nlohmann::json{{"servers_before", n}, {"servers_after", n}, {"unchanged", true}};
  }
  std::vector<pid_t> paused;
  auto resume = [&paused] {
    for (pid_t pid : paused) kill(pid, SIGCONT);
    paused.clear();
  };
  absl::Cleanup resume_on_return = resume;
  if (pause) {
    for (const Child& c : children_) {
      if (c.role == Role::kTrainer && c.pid > 0 && kill(c.pid, SIGSTOP) == 0) {
        paused.push_back(c.pid);
      }
    }
    // Requests already sent still land: wait until the cluster stops changing.
    std::optional<ps::RowSetChecksum> last;
    for (int i = 0; i < 50; ++i) {
      absl::StatusOr<ps::RowSetChecksum> now =
          ps::ClusterChecksum(ps_addresses_, absl::Seconds(120), security_);
      if (now.ok() && last.has_value() && *now == *last) break;
      if (now.ok()) last = *now;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  const std::vector<std::string> before = ps_addresses_;
  std::vector<std::string> after = before;
  after.resize(std::min(n, current));
  for (int i = current; i < n; ++i) {
    absl::StatusOr<int> port = FreePort();
    if (!port.ok()) return port.status();
    after.push_back(absl::StrCat("127.0.0.1:", *port));
    fs::remove_all(absl::StrCat(run_dir_, "/ps-", i));  // A server scaled away earlier.
    Child c = PsChild(i, after.back(), /*join=*/true);
    absl::Status started = Spawn(c);
    children_.push_back(std::move(c));
    if (started.ok()) started = AwaitReady(children_.back());
    if (!started.ok()) return started;
    LogEndpoints(children_.back());
  }
  EndProgress();
  LOG(INFO) << "resharding " << current << " -> " << n << " parameter server(s)"
            << (pause ? " with training paused" : "");
  ps::ReshardOptions o;
  o.security = security_;
  absl::StatusOr<ps::ReshardReport> report = ps::Reshard(before, after, o);

  // Servers from index `first` on leave the job.
  auto stop_from = [&](int first) {
    for (auto it = children_.begin(); it != children_.end();) {
      if (it->role == Role::kPs && std::stoi(it->name.substr(3)) >= first) {
        Stop(*it);
        retired_peak_rss_[it->name] = it->peak_rss_kb * 1024;
        it = children_.erase(it);
      } else {
        ++it;
      }
    }
  };
  if (!report.ok()) {
    // Completed steps stand (a failed one was rolled back): the servers'
    // map says which of them are in the job now.
    absl::StatusOr<ShardMap> map =
        ps::FetchShardMap(ps_addresses_.front(), absl::Seconds(30), security_);
    if (map.ok()) {
      ps_addresses_ = map->addresses();
      stop_from(map->num_servers());
      WriteLaunchState();
    }
    return report.status();
  }
  ps_addresses_ = after;
  if (n < current) {
    // A drained server lingers, answering WRONG_OWNER, until every trainer
    // has learned the new map from it: stopped at once, it would meet
    // trainers (paused ones above all) still routing to it, whose pushes
    // then fail in a way they cannot prove unapplied (CANCELLED, a broken
    // pipe) and must restart.
    resume();
    std::this_thread::sleep_for(kDrainedLinger);
    stop_from(n);
    for (int i = n; i < current; ++i) fs::remove_all(absl::StrCat(run_dir_, "/ps-", i));
  }
  WriteLaunchState();
  nlohmann::json r = ps::ReshardReportToJson(*report);
  r["paused"] = pause;
  reshards_.push_back(r);
  if (pause && !(report->cluster_before == report->cluster_after)) {
    return absl::DataLossError(
        absl::StrCat("with training paused, the cluster's rows changed in the reshard: before ",
                     r["cluster_before"].dump(), ", after ", r["cluster_after"].dump()));
  }
  return r;
}

}  // namespace shadowsync::cli::internal
