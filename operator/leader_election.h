// Leader election over a coordination.k8s.io/v1 Lease, as client-go's
// leaderelection + LeaseLock, so that of several operator replicas exactly
// one reconciles at a time. Expiry is judged by the local clock (clock skew
// does not matter), and a leader that cannot renew for renew_deadline stops
// leading before anyone else can take over (docs/operator.md, "The
// Kubernetes client layer", has the protocol).
//
//   LeaderElector elector(client, {.ns = "shadowsync", .lease_name = "shadowsync-operator",
//                                  .identity = pod_name},
//                         [&] { controller.Start(); }, [&] { std::exit(1); });
//   SS_RETURN_IF_ERROR(elector.Start());
//
// Callbacks run on the elector's thread and must return promptly (start
// threads, do not run the controller inside them). Thread-safe.
#ifndef SHADOWSYNC_OPERATOR_LEADER_ELECTION_H_
#define SHADOWSYNC_OPERATOR_LEADER_ELECTION_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "operator/kube_client.h"

namespace shadowsync::kube {

// Kubernetes MicroTime, "2006-01-02T15:04:05.000000Z" (UTC).
std::string FormatMicroTime(absl::Time t);
// Parses MicroTime or RFC 3339 with any fraction and offset.
absl::StatusOr<absl::Time> ParseMicroTime(const std::string& s);

struct LeaderElectionConfig {
  std::string ns = "default";  // The Lease's namespace.
  std::string lease_name;
  std::string identity;  // Unique per replica: the pod name.
  // How long a lease stays valid after its last observed renewal. Default: 15 s.
  absl::Duration lease_duration = absl::Seconds(15);
  // The leader gives up if it cannot renew for this long. Default: 10 s.
  absl::Duration renew_deadline = absl::Seconds(10);
  // Time between tries to acquire or renew. Default: 2 s.
  absl::Duration retry_period = absl::Seconds(2);
  // On Stop(), hand the lease back (holderIdentity ""). Default: true.
  bool release_on_stop = true;
};

class LeaderElector {
 public:
  // `client` must outlive this. Either callback may be empty.
  LeaderElector(KubeClient* client, LeaderElectionConfig config,
                std::function<void()> on_started_leading, std::function<void()> on_stopped_leading,
                std::function<void(const std::string& leader)> on_new_leader = nullptr);
  ~LeaderElector();  // Stops.
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Validates the config (InvalidArgument: empty name or identity,
  // lease_duration <= renew_deadline, renew_deadline <= retry_period) and
  // starts competing on a thread of its own.
  absl::Status Start();
  // Stops competing: releases the lease if held (and release_on_stop), calls
  // on_stopped_leading if it was leading, joins. Idempotent.
  void Stop();

  // True while leading. Turns false as soon as renew_deadline has passed
  // since the last renewal, even if a slow renew call has not returned yet.
  bool IsLeader() const;
  // The holder identity last observed ("" if none or unknown).
  std::string leader() const;

  // The Lease object's path.
  std::string lease_path() const;

  // One acquire-or-renew attempt, as the loop makes it. True if we hold the
  // lease afterwards. Exposed for tests of the races.
  bool TEST_TryAcquireOrRenew() { return TryAcquireOrRenew(); }

 private:
  void Run();
  bool TryAcquireOrRenew();
  // Hands the lease back: holderIdentity "", renewTime now.
  void Release();
  void SetLeading(bool leading);
  void SetRenewed(absl::Time t);
  // The client for lease calls: own_client_ once started, else client_.
  KubeClient* client() { return own_client_ != nullptr ? own_client_.get() : client_; }
  void ObserveHolder(const std::string& holder);

  // Constant after construction:
  KubeClient* const client_;
  const LeaderElectionConfig config_;
  const std::function<void()> on_started_leading_;
  const std::function<void()> on_stopped_leading_;
  const std::function<void(const std::string&)> on_new_leader_;

  // A client whose request timeout fits the renew deadline, so a hung call
  // cannot keep a stale leader leading past the lease. Set by Start().
  std::unique_ptr<KubeClient> own_client_;
  Cancellation cancel_;  // Has its own synchronization.
  std::thread thread_;   // Touched only by Start/Stop.

  // Used only by the elector's thread (and TEST_ calls before Start):
  // The spec we last saw and when we saw it change (the local clock).
  std::optional<Json> observed_spec_;
  absl::Time observed_time_;
  std::optional<Json> observed_lease_;  // The whole object, for the fast renew path.

  mutable Mutex mu_;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time renewed_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string leader_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shadowsync::kube

#endif  // SHADOWSYNC_OPERATOR_LEADER_ELECTION_H_
