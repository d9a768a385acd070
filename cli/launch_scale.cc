// Launch (cli/launch_internal.h): live resharding (`shadowsync scale`).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/cli_util.h"
#include "cli/launch_internal.h"
#include "common/status_macros.h"
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
  o.kill_point = KillPoint();
  // A launcher killed from here on leaves servers that may disagree on the
  // shard map: launch.json tells a resume to repair them and finish.
  resharding_to_ = n;
  WriteLaunchState();
  absl::StatusOr<ps::ReshardReport> report = ps::Reshard(before, after, o);
  resharding_to_ = 0;
  if (!report.ok()) {
    // A step cut short (a server died mid-copy, so the rollback could not
    // reach it) leaves the servers on different maps with slots frozen:
    // once the dead server is back, a repair completes or undoes the step.
    if (absl::Status repaired = RepairAfterFailedReshard(n > current ? after : before);
        !repaired.ok()) {
      return absl::Status(
          report.status().code(),
          absl::StrCat(report.status().message(), "; and the repair failed: ", repaired.message()));
    }
    // Completed steps stand: the servers' map says which of them are in the
    // job now.
    absl::StatusOr<ShardMap> map =
        ps::FetchShardMap(ps_addresses_.front(), absl::Seconds(30), security_);
    if (map.ok()) {
      ps_addresses_ = map->addresses();
      StopServersFrom(map->num_servers());
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
    StopServersFrom(n);
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

absl::Status Launch::RepairAfterFailedReshard(const std::vector<std::string>& involved) {
  absl::Status last;
  for (int attempt = 0; attempt < 60; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    SS_RETURN_IF_ERROR(Reap());  // Restarts a server that died meanwhile.
    absl::StatusOr<ps::RepairReport> repair =
        ps::RepairShardMaps(involved, absl::Seconds(30), security_);
    if (repair.ok()) {
      if (repair->repaired) {
        LOG(WARNING) << "repaired the failed reshard's shard maps: " << ps::DescribeRepair(*repair);
      }
      return absl::OkStatus();
    }
    last = repair.status();
  }
  return last;
}

absl::Status Launch::FinishInterruptedReshard(int n) {
  SS_ASSIGN_OR_RETURN(const ps::RepairReport repair,
                      ps::RepairShardMaps(ps_addresses_, absl::Seconds(120), security_));
  if (repair.repaired) {
    LOG(WARNING) << "repaired the interrupted reshard's shard maps: " << ps::DescribeRepair(repair);
  }
  // The map may still list servers a scale-in drains, or not yet those a
  // scale-out adds (they joined owning nothing).
  const int in_map = static_cast<int>(repair.map.num_servers());
  if (in_map > static_cast<int>(ps_addresses_.size())) {
    return absl::DataLossError(absl::StrCat("the shard map lists ", in_map,
                                            " parameter servers; the resumed reshard knows ",
                                            ps_addresses_.size()));
  }
  const std::vector<std::string> before(ps_addresses_.begin(), ps_addresses_.begin() + in_map);
  SS_RETURN_IF_ERROR(ps::Readdress(before, absl::Seconds(30), security_).status());
  const std::vector<std::string> after(ps_addresses_.begin(), ps_addresses_.begin() + n);
  LOG(INFO) << "finishing the interrupted reshard: " << in_map << " -> " << n
            << " parameter server(s)";
  ps::ReshardOptions o;
  o.security = security_;
  o.kill_point = KillPoint();
  absl::StatusOr<ps::ReshardReport> report = ps::Reshard(before, after, o);
  // No trainer runs yet: a server that died meanwhile is restarted, the
  // maps repaired, and the reshard tried again.
  for (int attempt = 1; !report.ok() && attempt < 3; ++attempt) {
    LOG(WARNING) << "the resumed reshard failed (" << report.status().message()
                 << "); repairing and trying again";
    SS_RETURN_IF_ERROR(RepairAfterFailedReshard(ps_addresses_));
    SS_ASSIGN_OR_RETURN(const ShardMap map,
                        ps::FetchShardMap(ps_addresses_.front(), absl::Seconds(30), security_));
    const std::vector<std::string> now(ps_addresses_.begin(),
                                       ps_addresses_.begin() + map.num_servers());
    report = ps::Reshard(now, after, o);
  }
  SS_RETURN_IF_ERROR(report.status());
  StopServersFrom(n);
  ps_addresses_ = after;
  resharding_to_ = 0;
  WriteLaunchState();
  nlohmann::json r = ps::ReshardReportToJson(*report);
  r["paused"] = true;  // No trainer runs before a resume has finished it.
  r["resumed"] = true;
  reshards_.push_back(r);
  return absl::OkStatus();
}

void Launch::StopServersFrom(int first) {
  for (auto it = children_.begin(); it != children_.end();) {
    if (it->role == Role::kPs && std::stoi(it->name.substr(3)) >= first) {
      Stop(*it);
      retired_peak_rss_[it->name] = it->peak_rss_kb * 1024;
      fs::remove_all(absl::StrCat(run_dir_, "/", it->name));
      it = children_.erase(it);
    } else {
      ++it;
    }
  }
}

std::function<absl::Status(std::string_view, int)> Launch::KillPoint() {
  // <point>[#<n>]: SIGKILL at the n-th call (default the first) at `point`,
  // counted over the launcher's reshards.
  const char* env = std::getenv("SHADOWSYNC_KILL_POINT");
  if (env == nullptr || *env == '\0') return nullptr;
  const std::string_view spec = env;
  const size_t hash = spec.find('#');
  const std::string point(spec.substr(0, hash));
  int nth = 1;
  if (hash != std::string_view::npos &&
      (!absl::SimpleAtoi(std::string(spec.substr(hash + 1)), &nth) || nth < 1)) {
    LOG(WARNING) << "SHADOWSYNC_KILL_POINT=" << spec << ": want <point>[#<n >= 1>]; using n = 1";
    nth = 1;
  }
  return [this, point, nth](std::string_view at, int server) {
    if (at == point && ++kill_point_calls_ == nth) {
      LOG(WARNING) << "SHADOWSYNC_KILL_POINT: killing the launcher at reshard point " << at
                   << " (server " << server << ")";
      google::FlushLogFiles(google::GLOG_INFO);
      raise(SIGKILL);
    }
    return absl::OkStatus();
  };
}

}  // namespace shadowsync::cli::internal
