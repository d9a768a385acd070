// The syncer's gRPC service: adapts the Syncer RPCs of
// proto/shadowsync/v1/syncer.proto to a Centre and an AllReduceRounds over
// the range this syncer holds, and records the shadowsync_syncer_* metrics.
// Thread-safe; gRPC calls it from any number of threads.
//
// Threading. Every RPC is handled inline in its gRPC callback (a copy or an
// add of one range under a lock), except AllReduce and Clock, whose reactors
// stay open without a thread until their round completes or the clock
// releases them; the answer is written on the thread that completes it.
#ifndef SHADOWSYNC_SYNCER_SYNCER_SERVICE_H_
#define SHADOWSYNC_SYNCER_SYNCER_SERVICE_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "shadowsync/v1/syncer.grpc.pb.h"
#include "syncer/all_reduce.h"
#include "syncer/centre.h"
#include "syncer/range_binding.h"
#include "syncer/ssp_clock.h"

namespace shadowsync::syncer {

// The RPCs, for per-method metrics. Keep kMethodNames (syncer_service.cc) in step.
enum class Method {
  kInitCentre,
  kPullCentre,
  kAddToCentre,
  kAllReduce,
  kJoin,
  kLeave,
  kStats,
  kClock
};
inline constexpr int kNumMethods = 8;

// The shadowsync_syncer_* metrics, declared once in the table in
// syncer_service.cc; handles are cached here (per group on the group's first
// round or membership change). Also logs dropped members. Thread-safe.
class SyncerMetrics final : public AllReduceObserver {
 public:
  // Registers the families on `registry`, which must outlive this.
  explicit SyncerMetrics(prometheus::Registry& registry);

  void RecordRequest(Method method, std::chrono::steady_clock::duration latency, int64_t bytes_in,
                     int64_t bytes_out);
  void AddCentreAdd() { centre_adds_->Increment(); }

  // AllReduceObserver.
  void OnRoundComplete(const std::string& group, uint64_t round, int members,
                       absl::Duration elapsed) override;
  void OnMemberDropped(const std::string& group, const std::string& member,
                       uint64_t round) override;
  void OnLiveMembers(const std::string& group, int live) override;

  // Every metric name the syncer exports, for tests and docs.
  static std::vector<std::string> MetricNames();

 private:
  struct GroupMetrics {
    prometheus::Counter* rounds;
    prometheus::Gauge* members;
  };
  GroupMetrics ForGroup(const std::string& group);

  prometheus::Family<prometheus::Counter>* rounds_family_;
  prometheus::Family<prometheus::Gauge>* members_family_;
  prometheus::Counter* dropped_;
  prometheus::Counter* centre_adds_;
  prometheus::Counter* received_bytes_;
  prometheus::Counter* sent_bytes_;
  prometheus::Histogram* round_seconds_;
  std::array<prometheus::Histogram*, kNumMethods> request_seconds_{};

  Mutex mu_;
  absl::flat_hash_map<std::string, GroupMetrics> groups_ ABSL_GUARDED_BY(mu_);
};

struct SyncerServiceOptions {
  // See AllReduceOptions::member_timeout; also how long an SSP clock member
  // may stay silent (SspClockOptions). Default: 10s.
  absl::Duration member_timeout = absl::Seconds(10);
  // Longest group and member names, in bytes. Default: 256.
  size_t max_name_bytes = 256;
  // Bytes the waiting AllReduce and Clock calls may hold together, each
  // counted as its request plus kWaitingCallOverhead; a call that would pass
  // it is answered RESOURCE_EXHAUSTED at once and changes nothing. It must
  // hold one contribution per trainer. Default: 2 GiB.
  int64_t max_waiting_bytes = int64_t{2} << 30;
  // Added to every reply before it is sent, emulating the network time
  // (round trip plus transfer) that loopback lacks, for benchmarks of
  // latency hiding (bench/stragglers.sh). One timer thread holds the
  // replies: a delayed call costs no thread and no CPU. Close() sends the
  // held replies at once. Default: none.
  absl::Duration reply_delay = absl::ZeroDuration();
};

class SyncerService final : public v1::Syncer::CallbackService {
 public:
  // What a waiting call counts as beyond its request, against
  // max_waiting_bytes: its gRPC call and reactor state.
  static constexpr int64_t kWaitingCallOverhead = 1024;

  // `metrics` must outlive the service.
  SyncerService(SyncerMetrics* metrics, SyncerServiceOptions options);
  // Close()s. REQUIRES: the gRPC server is shut down.
  ~SyncerService() override;

  SyncerService(const SyncerService&) = delete;
  SyncerService& operator=(const SyncerService&) = delete;

  // Answers every waiting AllReduce and Clock, and every later one, with
  // UNAVAILABLE, so that the server's Shutdown() need not wait for them.
  void Close();

  grpc::ServerUnaryReactor* InitCentre(grpc::CallbackServerContext* context,
                                       const v1::InitCentreRequest* request,
                                       v1::CentreResponse* response) override;
  grpc::ServerUnaryReactor* PullCentre(grpc::CallbackServerContext* context,
                                       const v1::PullCentreRequest* request,
                                       v1::CentreResponse* response) override;
  grpc::ServerUnaryReactor* AddToCentre(grpc::CallbackServerContext* context,
                                        const v1::AddToCentreRequest* request,
                                        v1::CentreResponse* response) override;
  grpc::ServerUnaryReactor* AllReduce(grpc::CallbackServerContext* context,
                                      const v1::AllReduceRequest* request,
                                      v1::AllReduceResponse* response) override;
  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context,
                                 const v1::JoinRequest* request,
                                 v1::JoinResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* Clock(grpc::CallbackServerContext* context,
                                  const v1::ClockRequest* request,
                                  v1::ClockResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::SyncerStatsRequest* request,
                                  v1::SyncerStatsResponse* response) override;

 private:
  using SteadyClock = std::chrono::steady_clock;
  absl::Status CheckName(const char* field, const std::string& name) const;
  void Finish(grpc::ServerUnaryReactor* reactor, Method method, SteadyClock::time_point start,
              const absl::Status& status, int64_t bytes_in, int64_t bytes_out);

  SyncerMetrics* const metrics_;
  const SyncerServiceOptions options_;
  class DelayedReplies;
  std::unique_ptr<DelayedReplies> delayed_;  // Null without a reply delay.
  RangeBinding range_;
  Centre centre_;
  // OK and counts `bytes` as held by a waiting call, or RESOURCE_EXHAUSTED
  // naming `method` if that would pass max_waiting_bytes.
  absl::Status HoldWaiting(const char* method, int64_t bytes) ABSL_LOCKS_EXCLUDED(waiting_mu_);
  void ReleaseWaiting(int64_t bytes) ABSL_LOCKS_EXCLUDED(waiting_mu_);
  Mutex waiting_mu_;
  int64_t waiting_bytes_ ABSL_GUARDED_BY(waiting_mu_) = 0;

  AllReduceRounds rounds_;
  SspClocks clocks_;
};

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_SYNCER_SERVICE_H_
