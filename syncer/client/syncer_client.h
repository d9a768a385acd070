// The trainer's client of the syncer replicas (syncer/syncer_service.h): the
// dense vector of n floats is split into the replicas' ranges (replica i
// holds [i*n/S, (i+1)*n/S)), and every call goes to all replicas in parallel,
// each with the slice of its range. Thread-safe: calls from several threads
// (a shadow thread and a foreground thread) are independent.
//
// Nothing is retried; errors name the replica and keep the server's code
// (docs/sync.md, "The trainers' client", has the errors and group membership).
//
//   SyncerClientOptions options{.addresses = {"syncer-0:7100", "syncer-1:7100"},
//                               .member = "trainer-0"};
//   SS_ASSIGN_OR_RETURN(auto client, SyncerClient::Connect(options, n));
//   SS_RETURN_IF_ERROR(client->InitCentre(weights, centre));
//   SS_ASSIGN_OR_RETURN(RoundResult r, client->AllReduceMean("", weights, mean));
#ifndef SHADOWSYNC_SYNCER_CLIENT_SYNCER_CLIENT_H_
#define SHADOWSYNC_SYNCER_CLIENT_SYNCER_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "shadowsync/v1/syncer.grpc.pb.h"
#include "syncer/client/dense_range.h"

namespace shadowsync::syncer {

struct SyncerClientOptions {
  // host:port of each syncer replica; replica i owns range i.
  std::vector<std::string> addresses;
  // Unique member id for all-reduce rounds, e.g. "trainer-0". Required by
  // AllReduceMean, Join, LeaveGroup and Leave.
  std::string member;
  // Deadline of each RPC; an all-reduce's wait for its round counts.
  // Default: 60s.
  absl::Duration rpc_deadline = absl::Seconds(60);
  // Mutual TLS and the bearer token of every call. Default: plaintext, none.
  GrpcSecurity security;
};

struct RoundResult {
  uint64_t round = 0;  // the group's completed-round number on replica 0
  int members = 0;     // members that contributed (minimum over replicas)
  // Time the contribution waited for the other members' (minimum over
  // replicas): the call's latency minus this is the round's own cost.
  absl::Duration waited = absl::InfiniteDuration();
};

// One answer of the SSP clock (ClockResponse in syncer.proto).
struct ClockResult {
  bool released = false;     // clock <= min_clock + staleness
  int64_t min_clock = 0;     // over the live members
  int64_t member_clock = 0;  // this member's recorded clock (>= the reported one)
  bool joined = false;       // this call made the member live; member_clock is its start
  int live_members = 0;
  absl::Duration waited;  // time the call waited on the syncer
};

class SyncerClient {
 public:
  using DoneCallback = std::function<void(absl::Status)>;
  using ClockCallback = std::function<void(absl::StatusOr<ClockResult>)>;

  // num_params = n, the full dense vector length. Creates one channel per
  // replica (connections are made lazily). INVALID_ARGUMENT if there is no
  // address, an address is not host:port, or n < the number of replicas
  // (every replica must hold at least one float).
  static absl::StatusOr<std::unique_ptr<SyncerClient>> Connect(SyncerClientOptions options,
                                                               int64_t num_params);

  // Sets the centre to `init` on each range that has none yet; `centre`
  // receives the current centre (n floats; may alias `init`).
  absl::Status InitCentre(std::span<const float> init, std::span<float> centre);
  // The centre into `centre` (n floats); `version`: replica 0's count of adds.
  // FAILED_PRECONDITION before InitCentre.
  absl::Status PullCentre(std::span<float> centre, uint64_t* version = nullptr);
  // centre += delta on every range (each range atomically).
  absl::Status AddToCentre(std::span<const float> delta);
  // AddToCentre, and the centre right after this add into `centre` (may alias
  // `delta`), in one RPC per replica.
  absl::Status AddAndPull(std::span<const float> delta, std::span<float> centre,
                          uint64_t* version = nullptr);
  // Asynchronous forms, for overlapping sync with computation: they return at
  // once and run `done` exactly once, on a gRPC thread (it must not block),
  // when every replica has answered. The request is built before returning,
  // so `delta` may be reused at once; `centre` and `version` must stay valid
  // until `done` runs, and so must this client. An invalid argument runs
  // `done` at once, on the caller's thread.
  void PullCentreAsync(std::span<float> centre, uint64_t* version, DoneCallback done);
  void AddToCentreAsync(std::span<const float> delta, DoneCallback done);
  void AddAndPullAsync(std::span<const float> delta, std::span<float> centre, uint64_t* version,
                       DoneCallback done);

  // SSP clock (syncer replica 0 only): records this member's `clock` and
  // answers once it is within `staleness` of the slowest live member, or
  // after `max_wait` with released = false (the caller asks again). Default
  // max_wait: half the RPC deadline, so a long wait never hits the deadline.
  absl::StatusOr<ClockResult> Clock(int64_t clock, int64_t staleness,
                                    absl::Duration max_wait = absl::ZeroDuration());
  // Clock, answered through `done` on a gRPC thread (it must not block).
  void ClockAsync(int64_t clock, int64_t staleness, absl::Duration max_wait, ClockCallback done);

  // Mean over the group's members of their `in` (n floats each) into `out`
  // (may alias `in`). Blocks until the round completes on every replica (or
  // the deadline). Group "" is the whole job.
  absl::StatusOr<RoundResult> AllReduceMean(std::string_view group, std::span<const float> in,
                                            std::span<float> out);
  // Makes this member live in `group` on every replica without contributing,
  // so that the group's open round (or the next, if none is open) waits for
  // its contribution, up to the syncer's member timeout from the round's
  // first contribution. Idempotent.
  absl::Status Join(std::string_view group);
  // Join(), then waits until `members` members (this one included) are live
  // in `group` on every replica: a start barrier for strategies whose rounds
  // must include every trainer (a round otherwise completes with whoever has
  // joined, and a late trainer falls rounds behind). DeadlineExceeded naming
  // how many had joined after `timeout`.
  absl::Status AwaitMembers(std::string_view group, int members, absl::Duration timeout);
  // Removes this member from `group` on every replica; rounds there that
  // wait only for it complete. Its other groups are untouched.
  absl::Status LeaveGroup(std::string_view group);
  // Removes this member from every group on every replica (a clean exit).
  absl::Status Leave();
  // The rounds `group` has completed: the most any replica reports, 0 for a
  // group none knows. How a trainer tells a restart into a running job from
  // a fresh start.
  absl::StatusOr<uint64_t> RoundsCompleted(std::string_view group);

  int64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  int64_t bytes_received() const { return bytes_received_.load(std::memory_order_relaxed); }
  int num_replicas() const { return static_cast<int>(replicas_.size()); }

 private:
  struct Replica {
    std::string address;
    DenseRange range;
    std::unique_ptr<v1::Syncer::StubInterface> stub;
  };
  SyncerClient(SyncerClientOptions options, int64_t num_params);

  // Runs one RPC per replica in parallel: `build(i, request)` fills replica
  // i's request, `start(stub, context, request, response, done)` starts it,
  // `consume(i, response)` reads an OK response. Returns the first error.
  template <typename Request, typename Response, typename Build, typename Start, typename Consume>
  absl::Status CallAll(Build build, Start start, Consume consume);
  // CallAll without waiting, to replicas [0, count): `build` runs before
  // returning; `consume`, then `done` with the first error, run on the gRPC
  // thread of the last answer.
  template <typename Request, typename Response, typename Build, typename Start, typename Consume>
  void CallAllAsync(int count, Build build, Start start, Consume consume, DoneCallback done);
  absl::Status FirstError(int replica, const absl::Status& s) const;
  absl::Status CheckLength(const char* what, size_t got) const;
  // Copies a response's slice into `out` at replica i's range.
  absl::Status CopyOut(int replica, const google::protobuf::RepeatedField<float>& values,
                       std::span<float> out) const;

  const SyncerClientOptions options_;
  const int64_t num_params_;
  std::vector<Replica> replicas_;
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> bytes_received_{0};
};

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_CLIENT_SYNCER_CLIENT_H_
