// The controller's reading of the cluster (operator/controller.h): the job's
// children from the informers' caches, the servers' shard maps, and the
// trainers' progress and newest export from their /metrics.
#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/shard_map.h"
#include "cpprest/http_client.h"
#include "operator/controller.h"
#include "operator/controller_internal.h"
#include "ps/client/resharder.h"

namespace shadowsync::op {
namespace {

using kube::Json;

// The sum of every sample of `metric` in a Prometheus text exposition.
std::optional<double> SumMetric(const std::string& text, const std::string& metric) {
  std::optional<double> sum;
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (const std::string& line : lines) {
    if (line.empty() || line[0] == '#' || line.compare(0, metric.size(), metric) != 0) continue;
    if (line.size() == metric.size() ||
        (line[metric.size()] != ' ' && line[metric.size()] != '{')) {
      continue;
    }
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space == std::string::npos || !absl::SimpleAtod(line.substr(space + 1), &v)) continue;
    sum = sum.value_or(0) + v;
  }
  return sum;
}

// The labels of the first sample of `metric` ("name{a=\"x\",b=\"y\"} v"),
// unescaped; nullopt without one.
std::optional<std::map<std::string, std::string>> MetricLabels(const std::string& text,
                                                               const std::string& metric) {
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (const std::string& line : lines) {
    if (!absl::StartsWith(line, metric + "{")) continue;
    std::map<std::string, std::string> labels;
    size_t i = metric.size() + 1;
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find("=\"", i);
      if (eq == std::string::npos) return std::nullopt;
      std::string key = line.substr(i, eq - i), value;
      for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) {
          ++i;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
      }
      labels[std::move(key)] = std::move(value);
      ++i;  // the closing quote
      if (i < line.size() && line[i] == ',') ++i;
    }
    return labels;
  }
  return std::nullopt;
}

// The newest export trainer 0 reports on its /metrics (cli/cluster_export.h),
// as status.export.latest has it.
std::optional<Json> ExportFromMetrics(const std::string& text) {
  std::optional<std::map<std::string, std::string>> info =
      MetricLabels(text, "shadowsync_export_info");
  if (!info.has_value() || (*info)["model"].empty()) return std::nullopt;
  Json latest = {{"model", (*info)["model"]},
                 {"request", (*info)["request"]},
                 {"final", (*info)["final"] == "true"}};
  for (const auto& [key, metric] :
       {std::pair{"rows", "shadowsync_export_rows"},
        std::pair{"examplesTrained", "shadowsync_export_examples_trained"}}) {
    if (std::optional<double> v = SumMetric(text, metric)) latest[key] = static_cast<int64_t>(*v);
  }
  for (const auto& [key, metric] : {std::pair{"evalNE", "shadowsync_export_eval_ne"},
                                    std::pair{"evalAUC", "shadowsync_export_eval_auc"}}) {
    if (std::optional<double> v = SumMetric(text, metric)) latest[key] = *v;
  }
  if (std::optional<double> t = SumMetric(text, "shadowsync_export_timestamp_seconds")) {
    latest["time"] =
        absl::FormatTime(absl::RFC3339_sec, absl::FromUnixSeconds(*t), absl::UTCTimeZone());
  }
  return latest;
}

// GET http://`address``path` with a short timeout; nullopt on any failure.
std::optional<std::string> HttpGetText(const std::string& address, const std::string& path) {
  try {
    web::http::client::http_client_config config;
    config.set_timeout(std::chrono::seconds(2));
    web::http::client::http_client client("http://" + address, config);
    web::http::http_response response = client.request(web::http::methods::GET, path).get();
    if (response.status_code() != 200) return std::nullopt;
    return response.extract_utf8string(true).get();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string Controller::Address(const Json& job, Role role, int index) const {
  const int port = role == Role::kPs       ? options_.reconcile.ps_port
                   : role == Role::kSyncer ? options_.reconcile.syncer_port
                                           : options_.reconcile.metrics_port;
  return FormatAddress(options_.reconcile.address_template, NameOf(job), role, index,
                       NamespaceOf(job), port);
}

std::vector<std::string> Controller::PsAddresses(const Json& job, int n) const {
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) addresses.push_back(Address(job, Role::kPs, i));
  return addresses;
}

std::optional<PsClusterState> Controller::ObservePs(const Json& job, int servers) {
  std::optional<ShardMap> newest;
  bool disagree = false;
  const GrpcSecurity security = SecurityFor(job);  // Once: it derives the admin token.
  for (int i = 0; i < servers; ++i) {
    absl::StatusOr<ShardMap> map =
        ps::FetchShardMap(Address(job, Role::kPs, i), options_.ps_rpc_deadline, security);
    if (!map.ok()) continue;  // Not up yet, or joined without a map.
    disagree = disagree || (newest.has_value() && map->epoch() != newest->epoch());
    if (!newest.has_value() || map->epoch() > newest->epoch()) newest = *std::move(map);
  }
  if (!newest.has_value()) return std::nullopt;
  PsClusterState state{.epoch = newest->epoch(),
                       .num_slots = static_cast<int>(newest->num_slots())};
  state.slots_per_server.assign(newest->num_servers(), 0);
  for (uint32_t slot = 0; slot < newest->num_slots(); ++slot) {
    ++state.slots_per_server[newest->owner_of_slot(slot)];
  }
  // A reshard cut short leaves epochs apart or slots unevenly spread.
  state.unbalanced = disagree || !newest->PlanRebalance(state.OwningServers()).empty();
  return state;
}

Observed Controller::Observe(const Json& job) {
  Observed observed{.job = job, .now = absl::Now()};
  const std::string ns = NamespaceOf(job), name = NameOf(job);
  auto mine = [&](const Json& o) { return NamespaceOf(o) == ns && JobLabelOf(o) == name; };
  const Caches* caches = CachesOf(ns);
  if (caches != nullptr) {
    for (const Json& o : caches->stateful_sets->ListCached()) {
      if (mine(o)) observed.stateful_sets[NameOf(o)] = o;
    }
    for (const Json& o : caches->services->ListCached()) {
      if (mine(o)) observed.services[NameOf(o)] = o;
    }
    for (const Json& o : caches->network_policies->ListCached()) {
      if (mine(o)) observed.network_policies[NameOf(o)] = o;
    }
    for (const Json& o : caches->disruption_budgets->ListCached()) {
      if (mine(o)) observed.disruption_budgets[NameOf(o)] = o;
    }
    if (caches->pod_groups) {
      for (const Json& o : caches->pod_groups->ListCached()) {
        if (mine(o)) observed.pod_groups[NameOf(o)] = o;
      }
    }
    for (const Json& o : caches->config_maps->ListCached()) {
      if (mine(o)) observed.config_maps[NameOf(o)] = o;
    }
    for (const Json& o : caches->pods->ListCached()) {
      if (mine(o)) observed.pods.push_back(o);
    }
  }
  // The servers that may hold slots: the StatefulSet's and the spec's.
  const int servers = job.value("/spec/parameterServer/replicas"_json_pointer, 0);
  auto sts = observed.stateful_sets.find(ChildName(name, Role::kPs));
  const int sts_replicas =
      sts != observed.stateful_sets.end() ? sts->second.value("/spec/replicas"_json_pointer, 0) : 0;
  // None to ask while the StatefulSet is at 0 (a suspended job).
  if (sts_replicas > 0) observed.ps = ObservePs(job, std::max(servers, sts_replicas));
  const std::string key = kube::ObjectKey(job);
  {
    MutexLock l(&mu_);
    auto it = reshards_.find(key);
    if (it != reshards_.end() && !it->second->done.load() && observed.ps.has_value()) {
      observed.ps->reshard = ReshardProgress{.from_servers = it->second->request.from_servers,
                                             .to_servers = it->second->request.to_servers,
                                             .slots_moved = it->second->moved.load(),
                                             .slots_total = it->second->total.load()};
    }
  }
  // Training progress from the trainers' /metrics. A trainer that cannot be
  // reached (restarting) counts with what it last reported.
  // At most once a second per job: pod events can trigger many reconciles
  // in a row, and each scrape is an HTTP request per trainer.
  {
    MutexLock l(&mu_);
    JobProgress& p = progress_[key];
    if (observed.now - p.scraped_at < absl::Seconds(1)) return observed;  // keeps the status
    p.scraped_at = observed.now;
  }
  const int trainers = job.value("/spec/trainer/replicas"_json_pointer, 0);
  std::vector<std::optional<std::string>> texts(trainers);
  for (int i = 0; i < trainers; ++i) {
    texts[i] = HttpGetText(Address(job, Role::kTrainer, i), "/metrics");
  }
  MutexLock l(&mu_);
  JobProgress& p = progress_[key];
  p.per_trainer.resize(trainers, 0);
  p.finished = 0;
  bool any = false;
  if (trainers > 0 && texts[0].has_value()) {
    observed.latest_export = ExportFromMetrics(*texts[0]);
    if (std::optional<double> rows = SumMetric(*texts[0], "shadowsync_init_imported_rows")) {
      observed.init_imported_rows = static_cast<int64_t>(*rows);
    }
  }
  for (int i = 0; i < trainers; ++i) {
    if (!texts[i].has_value()) continue;
    if (std::optional<double> v = SumMetric(*texts[i], "shadowsync_trainer_examples_total")) {
      // A restarted trainer counts from its checkpoint: add what it resumed from.
      const double resumed =
          SumMetric(*texts[i], "shadowsync_trainer_examples_resumed").value_or(0);
      p.per_trainer[i] = std::max(p.per_trainer[i], static_cast<int64_t>(*v + resumed));
      any = true;
    }
    if (SumMetric(*texts[i], "shadowsync_trainer_finished").value_or(0) > 0) ++p.finished;
  }
  if (any) {
    int64_t sum = 0;
    for (int64_t v : p.per_trainer) sum += v;
    observed.examples_processed = sum;
    // A rate over at least a second.
    const absl::Duration elapsed = observed.now - p.sampled_at;
    if (p.sampled_at != absl::InfinitePast() && elapsed >= absl::Seconds(1)) {
      observed.examples_per_second =
          std::max<int64_t>(0, sum - p.sampled_examples) / absl::ToDoubleSeconds(elapsed);
    }
    if (p.sampled_at == absl::InfinitePast() || elapsed >= absl::Seconds(1)) {
      p.sampled_at = observed.now;
      p.sampled_examples = sum;
    }
  }
  return observed;
}

}  // namespace shadowsync::op
