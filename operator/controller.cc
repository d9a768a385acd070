#include "operator/controller.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/shard_map.h"
#include "common/status_macros.h"
#include "cpprest/http_client.h"
#include "glog/logging.h"
#include "operator/controller_internal.h"
#include "operator/crd.h"
#include "operator/credentials.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "ps/client/resharder.h"

namespace shadowsync::op {
namespace {

using kube::Json;

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string JobsCollection(const std::string& ns) {
  return kube::ResourcePath{.group = std::string(kGroup),
                            .version = std::string(kVersion),
                            .plural = "shadowsyncjobs",
                            .ns = ns}
      .Collection();
}

// A merge patch turning `before` into `after`: changed and new keys as in
// `after`, keys `after` lacks as null (RFC 7386 deletes them).
Json MergePatchFor(const Json& before, const Json& after) {
  if (!before.is_object() || !after.is_object()) return after;
  Json patch = Json::object();
  for (const auto& [key, value] : after.items()) {
    if (!before.contains(key)) {
      patch[key] = value;
    } else if (before[key] != value) {
      patch[key] = MergePatchFor(before[key], value);
    }
  }
  for (const auto& [key, value] : before.items()) {
    if (!after.contains(key)) patch[key] = nullptr;
  }
  return patch;
}

}  // namespace

struct Controller::Metrics {
  explicit Metrics(prometheus::Registry* registry) {
    if (registry == nullptr) return;
    auto& reconciles_family = prometheus::BuildCounter()
                                  .Name("shadowsync_operator_reconciles_total")
                                  .Help("Reconciles of a job key, by result.")
                                  .Register(*registry);
    reconciles_ok = &reconciles_family.Add({{"result", "ok"}});
    reconciles_error = &reconciles_family.Add({{"result", "error"}});
    auto& reshards_family = prometheus::BuildCounter()
                                .Name("shadowsync_operator_reshards_total")
                                .Help("Live reshards of the parameter servers, by result.")
                                .Register(*registry);
    reshards_ok = &reshards_family.Add({{"result", "ok"}});
    reshards_error = &reshards_family.Add({{"result", "error"}});
    auto& events_family = prometheus::BuildCounter()
                              .Name("shadowsync_operator_events_total")
                              .Help("Event writes (created or counted), by result.")
                              .Register(*registry);
    events_ok = &events_family.Add({{"result", "ok"}});
    events_error = &events_family.Add({{"result", "error"}});
    queue_depth = &prometheus::BuildGauge()
                       .Name("shadowsync_operator_queue_depth")
                       .Help("Job keys waiting in the work queue.")
                       .Register(*registry)
                       .Add({});
    leader = &prometheus::BuildGauge()
                  .Name("shadowsync_operator_leader")
                  .Help("1 while this replica holds the Lease.")
                  .Register(*registry)
                  .Add({});
    // Summed over the reshards running now; all 0 when none is (so the
    // dashboards' resharding panels show a flat line, not "no data").
    reshards_running = &prometheus::BuildGauge()
                            .Name("shadowsync_operator_reshards_running")
                            .Help("Reshards of the parameter servers in progress.")
                            .Register(*registry)
                            .Add({});
    reshard_slots_moved = &prometheus::BuildGauge()
                               .Name("shadowsync_operator_reshard_slots_moved")
                               .Help("Shard-map slots moved so far by the reshards in progress.")
                               .Register(*registry)
                               .Add({});
    reshard_slots_planned = &prometheus::BuildGauge()
                                 .Name("shadowsync_operator_reshard_slots_planned")
                                 .Help("Shard-map slots the reshards in progress are to move.")
                                 .Register(*registry)
                                 .Add({});
    job_phase = &prometheus::BuildGauge()
                     .Name("shadowsync_job_phase")
                     .Help(
                         "1 for the phase (status.phase) a job is in, 0 for the others; "
                         "series for the jobs this replica reconciles while it leads.")
                     .Register(*registry);
    duration = &prometheus::BuildHistogram()
                    .Name("shadowsync_operator_reconcile_duration_seconds")
                    .Help("Time of one reconcile.")
                    .Register(*registry)
                    .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.05, 0.1,
                                                                     0.5, 1, 5, 10});
  }
  prometheus::Counter* reconciles_ok = nullptr;
  prometheus::Counter* reconciles_error = nullptr;
  prometheus::Counter* reshards_ok = nullptr;
  prometheus::Counter* reshards_error = nullptr;
  prometheus::Counter* events_ok = nullptr;
  prometheus::Counter* events_error = nullptr;
  prometheus::Gauge* queue_depth = nullptr;
  prometheus::Gauge* leader = nullptr;
  prometheus::Gauge* reshards_running = nullptr;
  prometheus::Gauge* reshard_slots_moved = nullptr;
  prometheus::Gauge* reshard_slots_planned = nullptr;
  prometheus::Histogram* duration = nullptr;
  prometheus::Family<prometheus::Gauge>* job_phase = nullptr;

  // The job `key` ("namespace/name") is in `phase`: its series, one per
  // phase of kPhases, labelled job_namespace (the operator's own namespace
  // label is the scrape target's), shadowsync_job and phase.
  void SetPhase(const std::string& key, std::string_view phase) ABSL_LOCKS_EXCLUDED(phase_mu) {
    if (job_phase == nullptr) return;
    MutexLock l(&phase_mu);
    std::vector<prometheus::Gauge*>& gauges = phases[key];
    if (gauges.empty()) {
      const size_t slash = key.find('/');
      for (std::string_view p : kPhases) {
        gauges.push_back(&job_phase->Add({{"job_namespace", key.substr(0, slash)},
                                          {"shadowsync_job", key.substr(slash + 1)},
                                          {"phase", std::string(p)}}));
      }
    }
    for (size_t i = 0; i < gauges.size(); ++i) gauges[i]->Set(kPhases[i] == phase ? 1 : 0);
  }
  // The job's series go: it was deleted, or (every job) this replica stopped
  // leading, so that only the leader's phases are scraped.
  void RemovePhase(const std::string& key) ABSL_LOCKS_EXCLUDED(phase_mu) {
    if (job_phase == nullptr) return;
    MutexLock l(&phase_mu);
    auto it = phases.find(key);
    if (it == phases.end()) return;
    for (prometheus::Gauge* g : it->second) job_phase->Remove(g);
    phases.erase(it);
  }
  void RemoveAllPhases() ABSL_LOCKS_EXCLUDED(phase_mu) {
    if (job_phase == nullptr) return;
    MutexLock l(&phase_mu);
    for (const auto& [key, gauges] : phases) {
      for (prometheus::Gauge* g : gauges) job_phase->Remove(g);
    }
    phases.clear();
  }

  Mutex phase_mu;
  std::map<std::string, std::vector<prometheus::Gauge*>> phases ABSL_GUARDED_BY(phase_mu);
};

// One reshard of one job, on its own thread.
absl::StatusOr<std::unique_ptr<Controller>> Controller::Create(kube::KubeClient* client,
                                                               ControllerOptions options) {
  if (client == nullptr) return absl::InvalidArgumentError("client: null");
  if (options.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("workers: ", options.workers, ", want >= 1"));
  }
  if (options.reshard_slots_per_step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard_slots_per_step: ", options.reshard_slots_per_step, ", want >= 1"));
  }
  if (options.reconcile.address_template.find("{index}") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("reconcile.address_template: '",
                                                   options.reconcile.address_template,
                                                   "' has no {index} placeholder"));
  }
  if (options.leader_election &&
      (options.election.lease_name.empty() || options.election.identity.empty())) {
    return absl::InvalidArgumentError(
        "leader election needs election.lease_name and election.identity");
  }
  return std::unique_ptr<Controller>(new Controller(client, std::move(options)));
}

Controller::Controller(kube::KubeClient* client, ControllerOptions options)
    : client_(client),
      options_([](ControllerOptions o) {
        o.reconcile.credentials = !o.credentials_key.empty();
        o.reconcile.credentials_tls = o.reconcile.credentials && o.ps_security.tls();
        o.reconcile.credentials_tls_server_name = o.ps_security.tls_server_name;
        return o;
      }(std::move(options))),
      metrics_(std::make_unique<Metrics>(options_.registry)),
      queue_(options_.queue) {}

Controller::~Controller() { Stop(); }

// The operator's security, narrowed to what the job's pods have: TLS if
// spec.security.tls asks for it or the job's credentials carry the
// operator's certificate, the token if spec.security.authToken asks, and the
// job's admin token with credentials.
GrpcSecurity Controller::SecurityFor(const Json& job) const {
  GrpcSecurity out = options_.ps_security;
  const Json* security = nullptr;
  if (job.contains("spec") && job["spec"].is_object() && job["spec"].contains("security")) {
    security = &job["spec"]["security"];
  }
  auto has = [&](const char* key) {
    return security != nullptr && security->is_object() && security->contains(key) &&
           (*security)[key].is_object();
  };
  // As Reconcile decides: a job whose servers started without credentials
  // keeps running without them.
  std::optional<Json> ps;
  if (const Caches* caches = CachesOf(NamespaceOf(job)); caches != nullptr) {
    ps = caches->stateful_sets->GetByKey(
        absl::StrCat(NamespaceOf(job), "/", ChildName(NameOf(job), Role::kPs)));
  }
  const bool credentials = UsesCredentials(ps ? &*ps : nullptr, options_.reconcile);
  if (!has("tls") && !(credentials && options_.reconcile.credentials_tls)) {
    out.ca_pem.clear();
    out.cert_pem.clear();
    out.key_pem.clear();
  }
  if (!has("authToken")) out.auth_token.clear();
  if (credentials) out.admin_token = DeriveJobToken(options_.credentials_key, kAdminTokenKey, job);
  return out;
}

absl::Status Controller::EnsureCredentials(const Json& job) {
  if (options_.credentials_key.empty()) return absl::OkStatus();
  const std::string uid = job.value("/metadata/uid"_json_pointer, std::string());
  {
    MutexLock l(&mu_);
    if (credentials_created_.contains(uid)) return absl::OkStatus();
  }
  const Json secret = RenderCredentialsSecret(
      job, JobCredentials(options_.credentials_key, job, options_.ps_security), options_.reconcile);
  const std::string path = ObjectPath(secret);
  absl::StatusOr<Json> created = client_->Create(path.substr(0, path.rfind('/')), secret);
  if (!created.ok() && !absl::IsAlreadyExists(created.status())) return created.status();
  MutexLock l(&mu_);
  credentials_created_.insert(uid);
  return absl::OkStatus();
}

void Controller::Enqueue(const Json& object) {
  queue_.Add(kube::ObjectKey(object));
  if (metrics_->queue_depth != nullptr) metrics_->queue_depth->Set(queue_.Len());
}

void Controller::EnqueueOwner(const Json& child) {
  const std::string job = JobLabelOf(child);
  if (job.empty()) return;
  queue_.Add(absl::StrCat(NamespaceOf(child), "/", job));
}

std::vector<kube::Informer*> Controller::Caches::Children() const {
  std::vector<kube::Informer*> children = {stateful_sets.get(),    services.get(),
                                           config_maps.get(),      pods.get(),
                                           network_policies.get(), disruption_budgets.get()};
  if (pod_groups) children.push_back(pod_groups.get());
  return children;
}

std::vector<kube::Informer*> Controller::Caches::All() const {
  std::vector<kube::Informer*> all = Children();
  all.insert(all.begin(), jobs.get());
  return all;
}

const Controller::Caches* Controller::CachesOf(const std::string& ns) const {
  auto it = caches_.find(options_.namespaces.empty() ? "" : ns);
  return it == caches_.end() ? nullptr : &it->second;
}

void Controller::EnqueueAllJobs() {
  for (const auto& [ns, caches] : caches_) {
    for (const Json& job : caches.jobs->ListCached()) Enqueue(job);
  }
}

absl::Status Controller::Start() {
  if (started_.exchange(true)) return absl::FailedPreconditionError("Start: already started");
  const std::string selector(kJobNameLabel);
  std::vector<std::string> namespaces = options_.namespaces;
  if (namespaces.empty()) namespaces.push_back("");  // All of them.
  for (const std::string& ns : namespaces) {
    Caches& c = caches_[ns];
    auto informer = [&](kube::ResourcePath path, const std::string& label_selector) {
      path.ns = ns;
      return std::make_unique<kube::Informer>(client_, path.Collection(), label_selector,
                                              options_.informer);
    };
    c.jobs = std::make_unique<kube::Informer>(client_, JobsCollection(ns), "", options_.informer);
    c.stateful_sets =
        informer({.group = "apps", .version = "v1", .plural = "statefulsets"}, selector);
    c.services = informer({.version = "v1", .plural = "services"}, selector);
    c.config_maps = informer({.version = "v1", .plural = "configmaps"}, selector);
    c.pods = informer({.version = "v1", .plural = "pods"}, selector);
    c.network_policies = informer(
        {.group = "networking.k8s.io", .version = "v1", .plural = "networkpolicies"}, selector);
    c.disruption_budgets =
        informer({.group = "policy", .version = "v1", .plural = "poddisruptionbudgets"}, selector);
    if (options_.reconcile.gang_scheduler != GangScheduler::kNone) {
      const auto [group, version] = PodGroupApi(options_.reconcile.gang_scheduler);
      c.pod_groups =
          informer({.group = group, .version = version, .plural = "podgroups"}, selector);
    }
    c.jobs->AddEventHandler({
        .on_add = [this](const Json& o) { Enqueue(o); },
        .on_update = [this](const Json&, const Json& o) { Enqueue(o); },
        .on_delete = [this](const Json& o) { Enqueue(o); },
    });
    for (kube::Informer* children : c.Children()) {
      children->AddEventHandler({
          .on_add = [this](const Json& o) { EnqueueOwner(o); },
          .on_update = [this](const Json&, const Json& o) { EnqueueOwner(o); },
          .on_delete = [this](const Json& o) { EnqueueOwner(o); },
      });
    }
  }
  for (const auto& [ns, caches] : caches_) {
    for (kube::Informer* informer : caches.All()) informer->Start();
  }
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  if (!options_.leader_election) {
    OnStartedLeading();
    return absl::OkStatus();
  }
  elector_ = std::make_unique<kube::LeaderElector>(
      client_, options_.election, [this] { OnStartedLeading(); }, [this] { OnStoppedLeading(); });
  return elector_->Start();
}

void Controller::OnStartedLeading() {
  LOG(INFO) << "leading ("
            << (options_.leader_election ? options_.election.identity : "no election") << ")";
  leading_.store(true);
  was_leading_.store(true);
  if (metrics_->leader != nullptr) metrics_->leader->Set(1);
  // Reconcile everything once: the previous leader may have left work undone.
  for (const auto& [ns, caches] : caches_) caches.jobs->WaitForSync(absl::Seconds(30));
  EnqueueAllJobs();
}

void Controller::OnStoppedLeading() {
  if (!leading_.exchange(false)) return;
  if (metrics_->leader != nullptr) metrics_->leader->Set(0);
  metrics_->RemoveAllPhases();
  LOG(WARNING) << "lost the Lease: no longer acting";
  if (options_.on_lost_leadership && !stopped_.load()) options_.on_lost_leadership();
}

void Controller::Stop() {
  if (!started_.load() || stopped_.exchange(true)) return;
  // Everything this leader does ends before the Lease goes: released first,
  // a standby would take over and reshard the job this one still reshards.
  // stopped_ makes the workers pass over the keys still queued, StartReshard
  // refuse, and the running reshards stop after their current step.
  queue_.ShutDown();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  std::map<std::string, std::shared_ptr<ReshardTask>> reshards;
  {
    MutexLock l(&mu_);
    reshards.swap(reshards_);
  }
  for (auto& [key, task] : reshards) {
    if (task->thread.joinable()) task->thread.join();
  }
  if (elector_ != nullptr) elector_->Stop();  // Releases the Lease for a fast takeover.
  leading_.store(false);
  for (const auto& [ns, caches] : caches_) {
    for (kube::Informer* informer : caches.All()) informer->Stop();
  }
}

bool Controller::ready() const {
  if (!started_.load() || stopped_.load()) return false;
  for (const auto& [ns, caches] : caches_) {
    for (const kube::Informer* informer : caches.All()) {
      if (!informer->HasSynced()) return false;
    }
  }
  return true;
}

bool Controller::leading() const { return leading_.load(); }

Controller::Stats Controller::stats() const {
  MutexLock l(&mu_);
  return stats_;
}

void Controller::WorkerLoop() {
  while (std::optional<std::string> key = queue_.Get()) {
    if (metrics_->queue_depth != nullptr) metrics_->queue_depth->Set(queue_.Len());
    if (!leading_.load() || stopped_.load()) {
      // A standby, or stopping: the (next) leader enqueues every job when it
      // takes over.
      queue_.Forget(*key);
      queue_.Done(*key);
      continue;
    }
    const absl::Time start = absl::Now();
    const absl::Status status = ReconcileKey(*key);
    if (metrics_->duration != nullptr) {
      metrics_->duration->Observe(absl::ToDoubleSeconds(absl::Now() - start));
    }
    {
      MutexLock l(&mu_);
      ++stats_.reconciles;
      if (!status.ok()) ++stats_.reconcile_errors;
    }
    if (status.ok()) {
      if (metrics_->reconciles_ok != nullptr) metrics_->reconciles_ok->Increment();
      queue_.Forget(*key);
    } else {
      if (metrics_->reconciles_error != nullptr) metrics_->reconciles_error->Increment();
      LOG(WARNING) << "reconcile " << *key << ": " << status << " (retrying with backoff)";
      queue_.AddRateLimited(*key);
    }
    queue_.Done(*key);
  }
}

absl::Status Controller::ApplyChild(const Json& desired, const Observed& observed) {
  const std::string path = ObjectPath(desired);
  const std::string name = NameOf(desired);
  const std::string kind = desired.value("kind", "");
  const std::map<std::string, Json>* cache = kind == "StatefulSet"     ? &observed.stateful_sets
                                             : kind == "Service"       ? &observed.services
                                             : kind == "NetworkPolicy" ? &observed.network_policies
                                             : kind == "PodDisruptionBudget"
                                                 ? &observed.disruption_budgets
                                             : kind == "PodGroup" ? &observed.pod_groups
                                                                  : &observed.config_maps;
  if (cache->count(name) > 0)
    return client_->Patch(path, desired, kube::PatchType::kMerge).status();
  const std::string collection = path.substr(0, path.rfind('/'));
  absl::StatusOr<Json> created = client_->Create(collection, desired);
  if (absl::IsAlreadyExists(created.status())) {
    // A claim is created once and never changed (a bound claim's spec is
    // immutable): one already there, e.g. an earlier job's, is kept.
    if (kind == "PersistentVolumeClaim") return absl::OkStatus();
    // The cache was behind: it exists, so bring it in line.
    return client_->Patch(path, desired, kube::PatchType::kMerge).status();
  }
  return created.status();
}

absl::Status Controller::WriteStatus(const Json& job, const Json& status) {
  const Json before = job.value("status", Json::object());
  if (before == status) return absl::OkStatus();
  const std::string path = ObjectPath(job);
  return client_->PatchStatus(path, Json{{"status", MergePatchFor(before, status)}}).status();
}

void Controller::RecordEvent(const Json& job, const EventSpec& event) {
  const absl::Status status = WriteEvent(job, event);
  {
    MutexLock l(&mu_);
    if (!status.ok()) ++stats_.event_errors;
  }
  prometheus::Counter* counter = status.ok() ? metrics_->events_ok : metrics_->events_error;
  if (counter != nullptr) counter->Increment();
  // An Event is a note for people: losing one must not hold up the status
  // or the children, so the reconcile goes on.
  if (!status.ok()) {
    LOG(WARNING) << kube::ObjectKey(job) << ": event " << event.reason
                 << " not recorded: " << status;
  }
}

absl::Status Controller::WriteEvent(const Json& job, const EventSpec& event) {
  const std::string ns = NamespaceOf(job), name = NameOf(job);
  const std::string uid = job.value("/metadata/uid"_json_pointer, std::string());
  // One Event object per (job, reason, message), counted, as kubectl shows.
  const std::string event_name = absl::StrFormat(
      "%s.%016x", name, absl::HashOf(uid, event.reason, event.message) & 0xffffffffffffffffULL);
  const std::string collection =
      kube::ResourcePath{.version = "v1", .plural = "events", .ns = ns}.Collection();
  const std::string path = collection + "/" + event_name;
  const std::string cache_key = ns + "/" + event_name;
  const std::string now = Rfc3339(absl::Now());
  // Only create and patch, the verbs deploy/rbac.yaml grants on events, as
  // client-go's recorder: a repeat PATCHes the count and lastTimestamp of
  // the Event this process wrote, known from event_counts_.
  auto count_repeat = [&](int64_t count) -> absl::Status {
    SS_ASSIGN_OR_RETURN(Json patched,
                        client_->Patch(path, Json{{"count", count}, {"lastTimestamp", now}},
                                       kube::PatchType::kStrategicMerge));
    RememberEventCount(cache_key, patched.value("count", count));
    return absl::OkStatus();
  };
  std::optional<int64_t> count;
  {
    MutexLock l(&mu_);
    auto it = event_counts_.find(cache_key);
    if (it != event_counts_.end()) count = it->second;
  }
  if (count.has_value()) {
    absl::Status s = count_repeat(*count + 1);
    // NotFound: the Event expired (the API server keeps them an hour by
    // default); it starts over.
    if (!absl::IsNotFound(s)) return s;
  }
  Json object = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", event_name}, {"namespace", ns}}},
      {"involvedObject",
       {{"apiVersion", absl::StrCat(std::string(kGroup), "/", std::string(kVersion))},
        {"kind", "ShadowSyncJob"},
        {"name", name},
        {"namespace", ns},
        {"uid", uid}}},
      {"reason", event.reason},
      {"message", event.message},
      {"type", event.type},
      {"source", {{"component", "shadowsync-operator"}}},
      {"reportingComponent", "shadowsync-operator"},
      {"reportingInstance", options_.election.identity},
      {"firstTimestamp", now},
      {"lastTimestamp", now},
      {"count", 1},
  };
  absl::StatusOr<Json> created = client_->Create(collection, object);
  if (created.ok()) {
    RememberEventCount(cache_key, 1);
    return absl::OkStatus();
  }
  if (!absl::IsAlreadyExists(created.status())) return created.status();
  // Written before this process started (a restart, the previous leader):
  // its count is not known here, and reading it would need get. A patch of
  // lastTimestamp alone answers with the stored Event, count included.
  SS_ASSIGN_OR_RETURN(Json touched, client_->Patch(path, Json{{"lastTimestamp", now}},
                                                   kube::PatchType::kStrategicMerge));
  return count_repeat(touched.value("count", 1) + 1);
}

void Controller::RememberEventCount(const std::string& key, int64_t count) {
  MutexLock l(&mu_);
  // Bounded like client-go's cache; a forgotten Event costs one more PATCH.
  if (event_counts_.size() >= 4096 && !event_counts_.contains(key)) event_counts_.clear();
  event_counts_[key] = count;
}

void Controller::PublishReshardProgress() {
  if (metrics_->reshards_running == nullptr) return;
  int running = 0;
  int64_t moved = 0, planned = 0;
  {
    MutexLock l(&mu_);
    for (const auto& [key, task] : reshards_) {
      if (task->done.load()) continue;
      ++running;
      moved += task->moved.load();
      planned += task->total.load();
    }
  }
  metrics_->reshards_running->Set(running);
  metrics_->reshard_slots_moved->Set(static_cast<double>(moved));
  metrics_->reshard_slots_planned->Set(static_cast<double>(planned));
}

void Controller::StartReshard(const std::string& key, const Json& job,
                              const ReshardRequest& request) {
  auto task = std::make_shared<ReshardTask>();
  task->request = request;
  {
    MutexLock l(&mu_);
    // Stop() joins what is in reshards_ once the workers are done; nothing
    // new starts after it began.
    if (stopped_.load()) return;
    auto it = reshards_.find(key);
    if (it != reshards_.end()) {
      if (!it->second->done.load()) return;  // One at a time per job.
      if (it->second->thread.joinable()) it->second->thread.join();
    }
    reshards_[key] = task;
  }
  PublishReshardProgress();
  const int from = request.from_servers, to = request.to_servers;
  const std::vector<std::string> all = PsAddresses(job, std::max(from, to));
  LOG(INFO) << key << ": resharding " << from << " -> " << to << " parameter servers";
  const GrpcSecurity security = SecurityFor(job);
  task->thread = std::thread([this, key, task, all, to, security] {
    absl::Status status = [&]() -> absl::Status {
      // A step cut in half by a previous leader's death is undone first.
      SS_ASSIGN_OR_RETURN(ps::RepairReport repair,
                          ps::RepairShardMaps(all, options_.ps_rpc_deadline * 24, security));
      if (repair.repaired) {
        LOG(WARNING) << key << ": repaired an interrupted reshard: " << ps::DescribeRepair(repair);
      }
      // A resumed scale-out starts from a map that already lists the new
      // servers; a resumed scale-in from one that still lists the drained.
      const std::vector<std::string> before = repair.map.addresses();
      const std::vector<std::string> after(all.begin(), all.begin() + to);
      ps::ReshardOptions options{.slots_per_step = options_.reshard_slots_per_step};
      options.security = security;
      // Between steps, so the servers agree on a map and the next leader
      // continues from it without a repair.
      options.stop_requested = [this] { return stopped_.load() || !leading_.load(); };
      options.progress = [this, key, task](int64_t moved, int64_t total, uint64_t) {
        task->moved.store(moved);
        task->total.store(total);
        PublishReshardProgress();
        queue_.Add(key);  // The Resharding condition shows the progress.
      };
      SS_ASSIGN_OR_RETURN(ps::ReshardReport report, ps::Reshard(before, after, options));
      task->summary = absl::StrFormat(
          "moved %d slots (%d rows) from %d to %d parameter servers in %d steps; moved rows' "
          "key checksum %016x before and %016x after",
          report.slots_moved, report.moved_after.rows, report.servers_before, report.servers_after,
          report.steps, report.moved_before.keys, report.moved_after.keys);
      return absl::OkStatus();
    }();
    task->stopped = absl::IsCancelled(status) && (stopped_.load() || !leading_.load());
    if (task->stopped) LOG(INFO) << key << ": " << status.message();
    task->status = status;
    task->done.store(true);
    queue_.Add(key);
  });
}

absl::Status Controller::ReconcileKey(const std::string& key) {
  // Keys are "<namespace>/<name>" (kube::ObjectKey).
  const Caches* caches = CachesOf(key.substr(0, key.find('/')));
  std::optional<Json> job;
  if (caches != nullptr) job = caches->jobs->GetByKey(key);
  if (!job.has_value()) {
    // Deleted: ownerReferences clean the children up; forget its progress.
    metrics_->RemovePhase(key);
    MutexLock l(&mu_);
    progress_.erase(key);
    return absl::OkStatus();
  }
  // A finished reshard reports before the next decision.
  std::shared_ptr<ReshardTask> finished;
  {
    MutexLock l(&mu_);
    auto it = reshards_.find(key);
    if (it != reshards_.end() && it->second->done.load()) {
      finished = it->second;
      reshards_.erase(it);
    }
  }
  if (finished != nullptr) {
    if (finished->thread.joinable()) finished->thread.join();
    // Not from the reshard's thread: StartReshard joins it holding mu_.
    PublishReshardProgress();
  }
  // Stopped between steps when this replica lost the Lease: neither done nor
  // failed; Reconcile asks for the rest.
  if (finished != nullptr && !finished->stopped) {
    {
      MutexLock l(&mu_);
      ++(finished->status.ok() ? stats_.reshards : stats_.reshard_failures);
    }
    prometheus::Counter* counter =
        finished->status.ok() ? metrics_->reshards_ok : metrics_->reshards_error;
    if (counter != nullptr) counter->Increment();
    const EventSpec event =
        finished->status.ok()
            ? EventSpec{"Normal", "Resharded", finished->summary}
            : EventSpec{"Warning", "ReshardFailed", std::string(finished->status.message())};
    LOG_AT_LEVEL(finished->status.ok() ? google::GLOG_INFO : google::GLOG_WARNING)
        << key << ": " << event.reason << ": " << event.message;
    RecordEvent(*job, event);
    if (!finished->status.ok()) return finished->status;  // Retried with backoff.
  }

  // Before the pods that mount it: until it exists they would not start.
  SS_RETURN_IF_ERROR(EnsureCredentials(*job));
  Observed observed = Observe(*job);
  const Actions actions = Reconcile(observed, options_.reconcile);
  for (const Json& child : actions.apply) SS_RETURN_IF_ERROR(ApplyChild(child, observed));
  for (const std::string& path : actions.delete_paths) {
    absl::Status s = client_->Delete(path);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  for (const EventSpec& event : actions.events) RecordEvent(*job, event);
  SS_RETURN_IF_ERROR(WriteStatus(*job, actions.status));
  metrics_->SetPhase(key, actions.status.value("phase", ""));
  {
    // Succeeded as soon as the trainers exited 0; their final counts come
    // from their idle restarts a moment later: look again until all report.
    MutexLock l(&mu_);
    JobProgress& p = progress_[key];
    if (actions.status.value("phase", "") == "Succeeded" &&
        p.finished < static_cast<int>(p.per_trainer.size()) && p.final_polls < 30) {
      ++p.final_polls;
      queue_.AddAfter(key, absl::Seconds(2));
    }
  }
  if (actions.reshard.has_value()) StartReshard(key, *job, *actions.reshard);
  if (actions.delete_job) {
    LOG(INFO) << key << ": ttlSecondsAfterFinished expired: deleting the job";
    absl::Status s = client_->Delete(ObjectPath(*job));
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  if (actions.requeue_after.has_value()) queue_.AddAfter(key, *actions.requeue_after);
  return absl::OkStatus();
}

}  // namespace shadowsync::op
