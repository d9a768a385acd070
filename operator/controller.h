// The ShadowSyncJob controller (docs/operator.md): informers on the jobs and
// their children feed a rate-limited work queue; workers turn each job key
// into Reconcile() (operator/reconcile.h) over what the caches, the
// parameter servers and the trainers say, and carry out its actions: apply
// children, write status, record Events, run live resharding
// (ps/client/resharder.h) on a thread of its own. Only the Lease holder acts; a
// standby keeps its caches warm.
//
//   SS_ASSIGN_OR_RETURN(auto client, kube::KubeClient::FromConfig(config));
//   SS_ASSIGN_OR_RETURN(auto controller, Controller::Create(client.get(), options));
//   SS_RETURN_IF_ERROR(controller->Start());
//   ... controller->Stop();  // ends its work, then releases the Lease
//
// A reshard cut by an operator restart is repaired and finished by the next
// leader (docs/operator.md, "Controller"). Events are notes: one that cannot
// be written is logged and counted, never a failed reconcile. Thread-safe:
// ready(), leading() and stats() may be called from any thread (the /readyz
// and /metrics handlers); Start() and Stop() by the owner, Stop() idempotent.
#ifndef SHADOWSYNC_OPERATOR_CONTROLLER_H_
#define SHADOWSYNC_OPERATOR_CONTROLLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "common/mutex.h"
#include "operator/informer.h"
#include "operator/kube_client.h"
#include "operator/leader_election.h"
#include "operator/reconcile.h"
#include "operator/work_queue.h"

namespace prometheus {
class Registry;
}

namespace shadowsync::op {

struct ControllerOptions {
  // The namespaces whose jobs this operator manages (a namespaced install:
  // Roles in each, no ClusterRole); empty = all namespaces.
  std::vector<std::string> namespaces;
  ReconcileOptions reconcile;
  int workers = 2;
  // Lease-based leader election; off: act at once (a single replica).
  bool leader_election = true;
  kube::LeaderElectionConfig election{.lease_name = "shadowsync-operator"};
  // Called when this replica loses the Lease after having held it. The
  // command exits (a fresh process starts as a standby); default: stop
  // acting and keep the caches.
  std::function<void()> on_lost_leadership;
  // Slots per reshard step and the RPC deadlines toward the servers.
  int reshard_slots_per_step = 256;
  absl::Duration ps_rpc_deadline = absl::Seconds(5);
  // The operator's own certificate and token for its calls to the servers
  // (`shadowsync operator --tls-* --auth-token-file`). Per job, TLS is used
  // only if its spec.security.tls is set, or the job's credentials carry
  // this certificate; the token only if authToken is.
  GrpcSecurity ps_security;
  // The key each job's credentials are derived from
  // (`--credentials-key-file`, operator/credentials.h). Set: every job gets
  // its Secret "<job>-credentials" (with ps_security's TLS files when it has
  // them), its servers take admin RPCs only with the job's admin token, and
  // the operator sends it. Empty: no credentials (reconcile.credentials is
  // set from this).
  std::string credentials_key;
  kube::InformerOptions informer;
  kube::RateLimiterOptions queue;
  // Receives the shadowsync_operator_* metrics; may be null.
  prometheus::Registry* registry = nullptr;
};

class Controller {
 public:
  // `client` must outlive the controller. InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<Controller>> Create(kube::KubeClient* client,
                                                            ControllerOptions options);
  ~Controller();  // Stop()s.

  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Starts the informers, the workers and (if enabled) the elector.
  absl::Status Start();
  // Stops taking work, lets the workers finish their reconciles and every
  // running reshard its current step (a cut step would need a repair), and
  // only then releases the Lease: the next leader never works beside this
  // one. Then stops the informers. Idempotent.
  void Stop();

  // Every informer has synced: /readyz.
  bool ready() const;
  // This replica holds the Lease (always, without leader election).
  bool leading() const;

  struct Stats {
    int64_t reconciles = 0;
    int64_t reconcile_errors = 0;
    int64_t reshards = 0;  // finished successfully
    int64_t reshard_failures = 0;
    int64_t event_errors = 0;  // Events that could not be written (logged).
  };
  Stats stats() const;

 private:
  struct Metrics;
  struct ReshardTask;

  Controller(kube::KubeClient* client, ControllerOptions options);
  void Enqueue(const kube::Json& object);
  // Creates the job's credentials Secret once per job uid and process (a
  // Secret already there is the one created earlier: its contents follow
  // from the key). No-op without a credentials key.
  absl::Status EnsureCredentials(const kube::Json& job);
  // The security of the operator's calls to the job's servers.
  GrpcSecurity SecurityFor(const kube::Json& job) const;
  void EnqueueOwner(const kube::Json& child);
  void EnqueueAllJobs();
  void WorkerLoop();
  absl::Status ReconcileKey(const std::string& key);
  Observed Observe(const kube::Json& job);
  std::optional<PsClusterState> ObservePs(const kube::Json& job, int servers);
  absl::Status ApplyChild(const kube::Json& desired, const Observed& observed);
  absl::Status WriteStatus(const kube::Json& job, const kube::Json& status);
  // WriteEvent; a failure is logged and counted, not returned.
  void RecordEvent(const kube::Json& job, const EventSpec& event);
  absl::Status WriteEvent(const kube::Json& job, const EventSpec& event);
  void RememberEventCount(const std::string& key, int64_t count);
  void StartReshard(const std::string& key, const kube::Json& job, const ReshardRequest& request);
  // Sets the reshard gauges from the reshards still running.
  void PublishReshardProgress();
  void OnStartedLeading();
  void OnStoppedLeading();
  std::string Address(const kube::Json& job, Role role, int index) const;
  std::vector<std::string> PsAddresses(const kube::Json& job, int n) const;

  kube::KubeClient* const client_;
  const ControllerOptions options_;
  std::unique_ptr<Metrics> metrics_;
  kube::WorkQueue queue_;
  // The informers of one watched namespace ("" = all namespaces).
  struct Caches {
    std::unique_ptr<kube::Informer> jobs, stateful_sets, services, config_maps, pods;
    std::unique_ptr<kube::Informer> network_policies, disruption_budgets;
    std::unique_ptr<kube::Informer> pod_groups;  // Null without a gang scheduler.
    std::vector<kube::Informer*> Children() const;
    std::vector<kube::Informer*> All() const;
  };
  // The caches a job in `ns` is in; null if this operator does not watch it.
  const Caches* CachesOf(const std::string& ns) const;
  // By namespace; set by Start(), then only read.
  std::map<std::string, Caches> caches_;
  std::unique_ptr<kube::LeaderElector> elector_;
  std::vector<std::thread> workers_;
  std::atomic<bool> leading_{false};
  std::atomic<bool> was_leading_{false};
  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<ReshardTask>> reshards_ ABSL_GUARDED_BY(mu_);
  // Per job: the trainers' example counts as last reported, and the sample
  // examples/s is measured from.
  struct JobProgress {
    std::vector<int64_t> per_trainer;
    int finished = 0;     // trainers reporting shadowsync_trainer_finished 1
    int final_polls = 0;  // looks after Succeeded for the final counts
    absl::Time scraped_at = absl::InfinitePast();
    absl::Time sampled_at = absl::InfinitePast();
    int64_t sampled_examples = 0;
  };
  std::map<std::string, JobProgress> progress_ ABSL_GUARDED_BY(mu_);
  // "namespace/name" of each Event this process wrote → its count.
  std::map<std::string, int64_t> event_counts_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> credentials_created_ ABSL_GUARDED_BY(mu_);  // Job uids.
};

}  // namespace shadowsync::op

#endif  // SHADOWSYNC_OPERATOR_CONTROLLER_H_
