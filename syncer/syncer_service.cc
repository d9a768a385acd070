#include "syncer/syncer_service.h"

#include <deque>
#include <optional>
#include <span>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shadowsync::syncer {
namespace {

// --- Metrics -----------------------------------------------------------------
//
// Every metric of the syncer, declared once. To add one: 1) a row here (the
// shadowsync_syncer_ prefix, base units, counters ending in _total); 2) cache
// its handle in SyncerMetrics; 3) the panel in deploy/ dashboards.
struct MetricDef {
  const char* name;
  const char* help;
};

constexpr MetricDef kRounds = {"shadowsync_syncer_rounds_total",
                               "All-reduce rounds completed, by group (\"\" = the whole job)."};
constexpr MetricDef kMembers = {"shadowsync_syncer_members", "Live members, by group."};
constexpr MetricDef kDropped = {
    "shadowsync_syncer_dropped_members_total",
    "Members dropped from a round for not contributing within the member timeout."};
constexpr MetricDef kCentreAdds = {"shadowsync_syncer_centre_adds_total",
                                   "Deltas added to the centre variable."};
constexpr MetricDef kReceivedBytes = {"shadowsync_syncer_received_bytes_total",
                                      "Serialized request bytes received."};
constexpr MetricDef kSentBytes = {"shadowsync_syncer_sent_bytes_total",
                                  "Serialized response bytes sent."};
constexpr MetricDef kRoundSeconds = {"shadowsync_syncer_round_seconds",
                                     "Time from a round's first contribution to its completion."};
constexpr MetricDef kRequestSeconds = {
    "shadowsync_syncer_request_seconds",
    "Latency of each RPC, by method (AllReduce includes the wait for the round)."};
constexpr const MetricDef* kAllMetrics[] = {&kRounds,       &kMembers,       &kDropped,
                                            &kCentreAdds,   &kReceivedBytes, &kSentBytes,
                                            &kRoundSeconds, &kRequestSeconds};

// Keep in step with enum class Method.
constexpr const char* kMethodNames[kNumMethods] = {
    "InitCentre", "PullCentre", "AddToCentre", "AllReduce", "Join", "Leave", "Stats", "Clock"};

// 100us .. 60s, roughly 2.5x apart: rounds wait for the slowest member.
prometheus::Histogram::BucketBoundaries Buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0, 30.0,  60.0};
}

// The response's values field grown by `n` floats, to be filled in place.
std::span<float> Grow(google::protobuf::RepeatedField<float>* field, int64_t n) {
  field->Reserve(static_cast<int>(n));
  return {field->AddNAlreadyReserved(static_cast<int>(n)), static_cast<size_t>(n)};
}

DenseRange RangeOf(uint64_t offset, int64_t length, uint64_t total) {
  // uint64 -> int64: values over 2^63 become negative and fail the checks.
  return DenseRange{.offset = static_cast<int64_t>(offset),
                    .length = length,
                    .total = static_cast<int64_t>(total)};
}

}  // namespace

SyncerMetrics::SyncerMetrics(prometheus::Registry& registry)
    : rounds_family_(
          &prometheus::BuildCounter().Name(kRounds.name).Help(kRounds.help).Register(registry)),
      members_family_(
          &prometheus::BuildGauge().Name(kMembers.name).Help(kMembers.help).Register(registry)),
      dropped_(&prometheus::BuildCounter()
                    .Name(kDropped.name)
                    .Help(kDropped.help)
                    .Register(registry)
                    .Add({})),
      centre_adds_(&prometheus::BuildCounter()
                        .Name(kCentreAdds.name)
                        .Help(kCentreAdds.help)
                        .Register(registry)
                        .Add({})),
      received_bytes_(&prometheus::BuildCounter()
                           .Name(kReceivedBytes.name)
                           .Help(kReceivedBytes.help)
                           .Register(registry)
                           .Add({})),
      sent_bytes_(&prometheus::BuildCounter()
                       .Name(kSentBytes.name)
                       .Help(kSentBytes.help)
                       .Register(registry)
                       .Add({})),
      round_seconds_(&prometheus::BuildHistogram()
                          .Name(kRoundSeconds.name)
                          .Help(kRoundSeconds.help)
                          .Register(registry)
                          .Add({}, Buckets())) {
  auto& requests = prometheus::BuildHistogram()
                       .Name(kRequestSeconds.name)
                       .Help(kRequestSeconds.help)
                       .Register(registry);
  for (int m = 0; m < kNumMethods; ++m) {
    request_seconds_[m] = &requests.Add({{"method", kMethodNames[m]}}, Buckets());
  }
}

void SyncerMetrics::RecordRequest(Method method, std::chrono::steady_clock::duration latency,
                                  int64_t bytes_in, int64_t bytes_out) {
  request_seconds_[static_cast<int>(method)]->Observe(
      std::chrono::duration<double>(latency).count());
  received_bytes_->Increment(static_cast<double>(bytes_in));
  sent_bytes_->Increment(static_cast<double>(bytes_out));
}

SyncerMetrics::GroupMetrics SyncerMetrics::ForGroup(const std::string& group) {
  MutexLock lock(&mu_);
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    it = groups_
             .emplace(group, GroupMetrics{&rounds_family_->Add({{"group", group}}),
                                          &members_family_->Add({{"group", group}})})
             .first;
  }
  return it->second;  // A copy: the map may rehash; the handles are stable.
}

void SyncerMetrics::OnRoundComplete(const std::string& group, uint64_t round, int members,
                                    absl::Duration elapsed) {
  ForGroup(group).rounds->Increment();
  round_seconds_->Observe(absl::ToDoubleSeconds(elapsed));
}

void SyncerMetrics::OnMemberDropped(const std::string& group, const std::string& member,
                                    uint64_t round) {
  dropped_->Increment();
  LOG(WARNING) << "syncer dropped member " << member << " from group '" << group << "' in round "
               << round << ": no contribution within the member timeout";
}

void SyncerMetrics::OnLiveMembers(const std::string& group, int live) {
  ForGroup(group).members->Set(live);
}

std::vector<std::string> SyncerMetrics::MetricNames() {
  std::vector<std::string> names;
  for (const MetricDef* def : kAllMetrics) names.emplace_back(def->name);
  return names;
}

// Replies held for a fixed delay, in arrival order (the same delay keeps
// their due times in order), sent by one thread.
class SyncerService::DelayedReplies {
 public:
  explicit DelayedReplies(absl::Duration delay) : delay_(delay), thread_([this] { Run(); }) {}
  ~DelayedReplies() {
    Flush();
    thread_.join();
  }

  void Send(grpc::ServerUnaryReactor* reactor, grpc::Status status) {
    {
      MutexLock l(&mu_);
      if (!stopped_) {
        held_.push_back({absl::Now() + delay_, reactor, std::move(status)});
        return;
      }
    }
    reactor->Finish(status);
  }

  // Sends what is held now, and every later reply at once.
  void Flush() {
    MutexLock l(&mu_);
    stopped_ = true;
  }

 private:
  struct Held {
    absl::Time due;
    grpc::ServerUnaryReactor* reactor;
    grpc::Status status;
  };

  void Run() {
    MutexLock l(&mu_);
    while (true) {
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || !held_.empty(); });
      if (held_.empty()) return;  // Stopped with nothing held.
      const absl::Time due = held_.front().due;
      if (!stopped_ && absl::Now() < due) {
        mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; },
                             due - absl::Now());
        continue;
      }
      Held h = std::move(held_.front());
      held_.pop_front();
      mu_.Unlock();
      h.reactor->Finish(h.status);
      mu_.Lock();
    }
  }

  const absl::Duration delay_;
  Mutex mu_;
  std::deque<Held> held_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

SyncerService::SyncerService(SyncerMetrics* metrics, SyncerServiceOptions options)
    : metrics_(metrics),
      options_(std::move(options)),
      delayed_(options_.reply_delay > absl::ZeroDuration()
                   ? std::make_unique<DelayedReplies>(options_.reply_delay)
                   : nullptr),
      rounds_(AllReduceOptions{.member_timeout = options_.member_timeout, .observer = metrics}),
      clocks_(SspClockOptions{.member_timeout = options_.member_timeout,
                              .on_dropped = [](const std::string& member, int64_t clock) {
                                LOG(WARNING)
                                    << "syncer dropped SSP clock member " << member << " at clock "
                                    << clock << ": silent for the member timeout";
                              }}) {}

SyncerService::~SyncerService() { Close(); }

void SyncerService::Close() {
  rounds_.Close();
  clocks_.Close();
  if (delayed_ != nullptr) delayed_->Flush();
}

absl::Status SyncerService::CheckName(const char* field, const std::string& name) const {
  if (name.size() > options_.max_name_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", name.size(), " bytes, more than the limit of ", options_.max_name_bytes));
  }
  return absl::OkStatus();
}

void SyncerService::Finish(grpc::ServerUnaryReactor* reactor, Method method,
                           SteadyClock::time_point start, const absl::Status& status,
                           int64_t bytes_in, int64_t bytes_out) {
  metrics_->RecordRequest(method, SteadyClock::now() - start, bytes_in,
                          status.ok() ? bytes_out : 0);
  if (delayed_ != nullptr) {
    delayed_->Send(reactor, ToGrpcStatus(status));
    return;
  }
  reactor->Finish(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* SyncerService::InitCentre(grpc::CallbackServerContext* context,
                                                    const v1::InitCentreRequest* request,
                                                    v1::CentreResponse* response) {
  const SteadyClock::time_point start = SteadyClock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = [&]() -> absl::Status {
    const int64_t n = request->values_size();
    SS_RETURN_IF_ERROR(range_.Check(RangeOf(request->offset(), n, request->total()), "values"));
    SS_ASSIGN_OR_RETURN(const uint64_t version,
                        centre_.Init({request->values().data(), static_cast<size_t>(n)},
                                     Grow(response->mutable_values(), n)));
    response->set_version(version);
    return absl::OkStatus();
  }();
  Finish(reactor, Method::kInitCentre, start, status, static_cast<int64_t>(request->ByteSizeLong()),
         static_cast<int64_t>(response->ByteSizeLong()));
  return reactor;
}

grpc::ServerUnaryReactor* SyncerService::PullCentre(grpc::CallbackServerContext* context,
                                                    const v1::PullCentreRequest* request,
                                                    v1::CentreResponse* response) {
  const SteadyClock::time_point start = SteadyClock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = [&]() -> absl::Status {
    const int64_t n = static_cast<int64_t>(std::min<uint64_t>(request->length(), INT64_MAX));
    // A pull carries no data to vouch for its length: it never binds the range
    // (and before any binding there is no centre to pull).
    SS_RETURN_IF_ERROR(
        range_.Check(RangeOf(request->offset(), n, request->total()), "length", /*bind=*/false));
    if (!centre_.initialised()) {
      return absl::FailedPreconditionError("centre not initialised: call InitCentre first");
    }
    SS_ASSIGN_OR_RETURN(const uint64_t version, centre_.Read(Grow(response->mutable_values(), n)));
    response->set_version(version);
    return absl::OkStatus();
  }();
  Finish(reactor, Method::kPullCentre, start, status, static_cast<int64_t>(request->ByteSizeLong()),
         static_cast<int64_t>(response->ByteSizeLong()));
  return reactor;
}

grpc::ServerUnaryReactor* SyncerService::AddToCentre(grpc::CallbackServerContext* context,
                                                     const v1::AddToCentreRequest* request,
                                                     v1::CentreResponse* response) {
  const SteadyClock::time_point start = SteadyClock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = [&]() -> absl::Status {
    const int64_t n = request->delta_size();
    SS_RETURN_IF_ERROR(range_.Check(RangeOf(request->offset(), n, request->total()), "delta"));
    if (!centre_.initialised()) {
      return absl::FailedPreconditionError("centre not initialised: call InitCentre first");
    }
    std::span<float> out;
    if (request->return_centre()) out = Grow(response->mutable_values(), n);
    SS_ASSIGN_OR_RETURN(const uint64_t version,
                        centre_.Add({request->delta().data(), static_cast<size_t>(n)}, out));
    metrics_->AddCentreAdd();
    response->set_version(version);
    return absl::OkStatus();
  }();
  Finish(reactor, Method::kAddToCentre, start, status,
         static_cast<int64_t>(request->ByteSizeLong()),
         static_cast<int64_t>(response->ByteSizeLong()));
  return reactor;
}

absl::Status SyncerService::HoldWaiting(const char* method, int64_t bytes) {
  MutexLock lock(&waiting_mu_);
  if (waiting_bytes_ + bytes > options_.max_waiting_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        method, ": the waiting calls hold ", waiting_bytes_, " bytes; this one's ", bytes,
        " would pass this syncer's max_waiting_bytes of ", options_.max_waiting_bytes));
  }
  waiting_bytes_ += bytes;
  return absl::OkStatus();
}

void SyncerService::ReleaseWaiting(int64_t bytes) {
  MutexLock lock(&waiting_mu_);
  waiting_bytes_ -= bytes;
}

grpc::ServerUnaryReactor* SyncerService::AllReduce(grpc::CallbackServerContext* context,
                                                   const v1::AllReduceRequest* request,
                                                   v1::AllReduceResponse* response) {
  const SteadyClock::time_point start = SteadyClock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const int64_t bytes_in = static_cast<int64_t>(request->ByteSizeLong());
  const int64_t n = request->values_size();
  const int64_t held = bytes_in + kWaitingCallOverhead;
  const absl::Status status = [&]() -> absl::Status {
    if (request->member().empty()) return absl::InvalidArgumentError("member: empty");
    SS_RETURN_IF_ERROR(CheckName("member", request->member()));
    SS_RETURN_IF_ERROR(CheckName("group", request->group()));
    SS_RETURN_IF_ERROR(range_.Check(RangeOf(request->offset(), n, request->total()), "values"));
    return HoldWaiting("AllReduce", held);
  }();
  if (!status.ok()) {
    Finish(reactor, Method::kAllReduce, start, status, bytes_in, 0);
    return reactor;
  }
  // The request (and so the span) lives until the reactor finishes.
  rounds_.Contribute(
      request->group(), request->member(), {request->values().data(), static_cast<size_t>(n)},
      [this, reactor, response, start, bytes_in, held](absl::StatusOr<RoundOutcome> outcome) {
        ReleaseWaiting(held);
        if (!outcome.ok()) {
          Finish(reactor, Method::kAllReduce, start, outcome.status(), bytes_in, 0);
          return;
        }
        response->mutable_values()->Add(outcome->mean->begin(), outcome->mean->end());
        response->set_round(outcome->round);
        response->set_members(static_cast<uint32_t>(outcome->members));
        response->set_waited_seconds(
            std::chrono::duration<double>(SteadyClock::now() - start).count());
        Finish(reactor, Method::kAllReduce, start, absl::OkStatus(), bytes_in,
               static_cast<int64_t>(response->ByteSizeLong()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* SyncerService::Join(grpc::CallbackServerContext* context,
                                              const v1::JoinRequest* request,
                                              v1::JoinResponse* response) {
  const SteadyClock::time_point start = SteadyClock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = [&]() -> absl::Status {
    if (request->member().empty()) return absl::InvalidArgumentError("member: empty");
    SS_RETURN_IF_ERROR(CheckName("member", request->member()));
    SS_RETURN_IF_ERROR(CheckName("group", request->group()));
    int live = 0;
    const bool added = rounds_.Join(request->group(), request->member(), &live);
    response->set_added(added);
    response->set_live_members(static_cast<uint32_t>(live));
    return absl::OkStatus();
  }();
  Finish(reactor, Method::kJoin, start, status, static_cast<int64_t>(request->ByteSizeLong()),
         static_cast<int64_t>(response->ByteSizeLong()));
  return reactor;
}

grpc::ServerUnaryReactor* SyncerService::Leave(grpc::CallbackServerContext* context,
                                               const v1::LeaveRequest* request,
                                               v1::LeaveResponse* response) {
  const SteadyClock::time_point start = SteadyClock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = [&]() -> absl::Status {
    if (request->member().empty()) return absl::InvalidArgumentError("member: empty");
    SS_RETURN_IF_ERROR(CheckName("member", request->member()));
    std::optional<std::string> group;
    if (request->has_group()) {
      SS_RETURN_IF_ERROR(CheckName("group", request->group()));
      group = request->group();
    }
    const int groups = rounds_.Leave(request->member(), group);
    response->set_groups(static_cast<uint32_t>(groups));
    // A clean exit also stops the member's SSP clock holding others back.
    if (!group.has_value()) clocks_.Leave(request->member());
    // Not logged per group: DS-Sync moves members between groups every round.
    if (groups > 0 && !group.has_value()) {
      LOG(INFO) << "syncer member " << request->member() << " left " << groups << " group(s)";
    }
    return absl::OkStatus();
  }();
  Finish(reactor, Method::kLeave, start, status, static_cast<int64_t>(request->ByteSizeLong()),
         static_cast<int64_t>(response->ByteSizeLong()));
  return reactor;
}

grpc::ServerUnaryReactor* SyncerService::Clock(grpc::CallbackServerContext* context,
                                               const v1::ClockRequest* request,
                                               v1::ClockResponse* response) {
  const SteadyClock::time_point start = SteadyClock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const int64_t bytes_in = static_cast<int64_t>(request->ByteSizeLong());
  const int64_t held = bytes_in + kWaitingCallOverhead;
  const absl::Status status = [&]() -> absl::Status {
    if (request->member().empty()) return absl::InvalidArgumentError("member: empty");
    SS_RETURN_IF_ERROR(CheckName("member", request->member()));
    if (request->clock() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("clock: must be >= 0, got ", request->clock()));
    }
    if (request->staleness() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("staleness: must be >= 0, got ", request->staleness()));
    }
    if (!(request->max_wait_seconds() >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_wait_seconds: must be >= 0, got ", request->max_wait_seconds()));
    }
    return HoldWaiting("Clock", held);
  }();
  if (!status.ok()) {
    Finish(reactor, Method::kClock, start, status, bytes_in, 0);
    return reactor;
  }
  const absl::Duration max_wait = request->max_wait_seconds() > 0
                                      ? absl::Seconds(request->max_wait_seconds())
                                      : absl::InfiniteDuration();
  clocks_.Report(
      request->member(), request->clock(), request->staleness(), max_wait,
      [this, reactor, response, start, bytes_in, held](absl::StatusOr<ClockOutcome> outcome) {
        ReleaseWaiting(held);
        if (!outcome.ok()) {
          Finish(reactor, Method::kClock, start, outcome.status(), bytes_in, 0);
          return;
        }
        response->set_released(outcome->released);
        response->set_min_clock(outcome->min_clock);
        response->set_member_clock(outcome->member_clock);
        response->set_joined(outcome->joined);
        response->set_live_members(static_cast<uint32_t>(outcome->live_members));
        response->set_waited_seconds(absl::ToDoubleSeconds(outcome->waited));
        Finish(reactor, Method::kClock, start, absl::OkStatus(), bytes_in,
               static_cast<int64_t>(response->ByteSizeLong()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* SyncerService::Stats(grpc::CallbackServerContext* context,
                                               const v1::SyncerStatsRequest* request,
                                               v1::SyncerStatsResponse* response) {
  const SteadyClock::time_point start = SteadyClock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (const std::optional<DenseRange> range = range_.range(); range.has_value()) {
    response->set_has_range(true);
    response->set_offset(static_cast<uint64_t>(range->offset));
    response->set_length(static_cast<uint64_t>(range->length));
    response->set_total(static_cast<uint64_t>(range->total));
  }
  response->set_has_centre(centre_.initialised());
  response->set_centre_version(centre_.version());
  for (const auto& [member, clock] : clocks_.Snapshot())
    (*response->mutable_clocks())[member] = clock;
  for (GroupSnapshot& g : rounds_.Snapshot()) {
    v1::SyncerGroupStats* out = response->add_groups();
    out->set_group(std::move(g.group));
    out->set_rounds_completed(g.rounds_completed);
    for (std::string& m : g.live_members) out->add_live_members(std::move(m));
    for (std::string& m : g.contributors) out->add_contributors(std::move(m));
    out->set_dropped_members(g.dropped_members);
  }
  Finish(reactor, Method::kStats, start, absl::OkStatus(), 0,
         static_cast<int64_t>(response->ByteSizeLong()));
  return reactor;
}

}  // namespace shadowsync::syncer
