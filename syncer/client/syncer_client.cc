#include "syncer/client/syncer_client.h"

#include <algorithm>
#include <latch>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"

namespace shadowsync::syncer {
namespace {

// Largest message sent or received; matches SyncerServerOptions.
constexpr int kMaxMessageBytes = 256 << 20;

// OK if `address` is host:port (host non-empty, or [v6]:port) with a port in
// 1..65535.
absl::Status CheckAddress(int index, const std::string& address) {
  const size_t colon = address.rfind(':');
  const size_t bracket = address.rfind(']');
  int port = 0;
  const bool ok = colon != std::string::npos && colon > 0 &&
                  (bracket == std::string::npos || bracket == colon - 1) &&
                  absl::SimpleAtoi(address.substr(colon + 1), &port) && port > 0 && port < 65536;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("addresses[", index, "]: '", address, "' is not host:port"));
}

// Runs an asynchronous call and waits for its callback.
absl::Status Await(const std::function<void(SyncerClient::DoneCallback)>& call) {
  // Shared with the callback: its count_down may still be waking this thread
  // when wait() returns, and must not touch a destroyed latch.
  auto latch = std::make_shared<std::latch>(1);
  auto status = std::make_shared<absl::Status>();
  call([latch, status](absl::Status s) {
    *status = std::move(s);
    latch->count_down();
  });
  latch->wait();
  return *status;
}

template <typename Request, typename Response>
struct Call {
  grpc::ClientContext context;
  Request request;
  Response response;
  grpc::Status status;
};

// The request's repeated float built from the slice of `values` in `range`:
// the one copy of the data on the way out.
void AddSlice(google::protobuf::RepeatedField<float>* field, std::span<const float> values,
              const DenseRange& range) {
  const float* begin = values.data() + range.offset;
  field->Add(begin, begin + range.length);
}

}  // namespace

SyncerClient::SyncerClient(SyncerClientOptions options, int64_t num_params)
    : options_(std::move(options)), num_params_(num_params) {}

absl::StatusOr<std::unique_ptr<SyncerClient>> SyncerClient::Connect(SyncerClientOptions options,
                                                                    int64_t num_params) {
  if (options.addresses.empty()) {
    return absl::InvalidArgumentError("addresses: no syncer replica given");
  }
  for (size_t i = 0; i < options.addresses.size(); ++i) {
    if (absl::Status s = CheckAddress(static_cast<int>(i), options.addresses[i]); !s.ok()) {
      return s;
    }
  }
  const int replicas = static_cast<int>(options.addresses.size());
  if (num_params < replicas) {
    return absl::InvalidArgumentError(absl::StrCat("num_params: ", num_params, " for ", replicas,
                                                   " syncer replicas; each needs at least one"));
  }
  std::unique_ptr<SyncerClient> client(new SyncerClient(std::move(options), num_params));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  for (int i = 0; i < replicas; ++i) {
    const std::string& address = client->options_.addresses[i];
    client->replicas_.push_back(Replica{
        .address = address,
        .range = ReplicaRange(i, replicas, num_params),
        .stub = v1::Syncer::NewStub(CreateChannel(address, client->options_.security, args)),
    });
  }
  return client;
}

template <typename Request, typename Response, typename Build, typename Start, typename Consume>
void SyncerClient::CallAllAsync(int count, Build build, Start start, Consume consume,
                                DoneCallback done) {
  // Owned by the calls' callbacks: the last one to answer consumes every
  // response and ends the calls.
  struct State {
    State(int n, Consume c, DoneCallback d)
        : calls(n), remaining(n), consume(std::move(c)), done(std::move(d)) {}
    std::vector<Call<Request, Response>> calls;
    std::atomic<int> remaining;
    Consume consume;
    DoneCallback done;
  };
  auto state = std::make_shared<State>(count, std::move(consume), std::move(done));
  const auto deadline = DeadlineFromNow(options_.rpc_deadline);
  for (int i = 0; i < count; ++i) {
    Call<Request, Response>& call = state->calls[i];
    build(i, call.request);
    bytes_sent_.fetch_add(static_cast<int64_t>(call.request.ByteSizeLong()),
                          std::memory_order_relaxed);
    call.context.set_deadline(deadline);
  }
  // Started only once every request is built: an early answer must not
  // finish the state while later calls are still being filled in.
  for (int i = 0; i < count; ++i) {
    Call<Request, Response>& call = state->calls[i];
    start(*replicas_[i].stub->async(), &call.context, &call.request, &call.response,
          [this, state, &call](grpc::Status status) {
            call.status = std::move(status);
            // acq_rel: the last caller sees every other call's answer.
            if (state->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
            absl::Status first;
            for (int r = 0; r < static_cast<int>(state->calls.size()); ++r) {
              const Call<Request, Response>& c = state->calls[r];
              absl::Status s = FromGrpcStatus(c.status);
              if (s.ok()) {
                bytes_received_.fetch_add(static_cast<int64_t>(c.response.ByteSizeLong()),
                                          std::memory_order_relaxed);
                s = state->consume(r, c.response);
              }
              if (!s.ok() && first.ok()) first = FirstError(r, s);
            }
            // End every call (its ClientContext) before `done` lets the
            // caller go on, perhaps to destroy this client and its channels:
            // a context freed later, on a gRPC thread, would end its call
            // after the channel is gone (seen as an abort in ref_counted.h).
            state->calls.clear();
            state->done(std::move(first));
          });
  }
}

template <typename Request, typename Response, typename Build, typename Start, typename Consume>
absl::Status SyncerClient::CallAll(Build build, Start start, Consume consume) {
  return Await([&](DoneCallback done) {
    CallAllAsync<Request, Response>(num_replicas(), std::move(build), std::move(start),
                                    std::move(consume), std::move(done));
  });
}

absl::Status SyncerClient::FirstError(int replica, const absl::Status& s) const {
  return absl::Status(s.code(), absl::StrCat("syncer replica ", replica, " (",
                                             replicas_[replica].address, "): ", s.message()));
}

absl::Status SyncerClient::CheckLength(const char* what, size_t got) const {
  if (static_cast<int64_t>(got) == num_params_) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", got, " floats, but the dense vector has ", num_params_));
}

absl::Status SyncerClient::CopyOut(int replica,
                                   const google::protobuf::RepeatedField<float>& values,
                                   std::span<float> out) const {
  const DenseRange& range = replicas_[replica].range;
  if (values.size() != range.length) {
    return absl::InternalError(
        absl::StrCat("answered ", values.size(), " floats for the range ", range.ToString()));
  }
  std::copy(values.begin(), values.end(), out.begin() + range.offset);
  return absl::OkStatus();
}

absl::Status SyncerClient::InitCentre(std::span<const float> init, std::span<float> centre) {
  if (absl::Status s = CheckLength("init", init.size()); !s.ok()) return s;
  if (absl::Status s = CheckLength("centre", centre.size()); !s.ok()) return s;
  return CallAll<v1::InitCentreRequest, v1::CentreResponse>(
      [&](int i, v1::InitCentreRequest& request) {
        const DenseRange& range = replicas_[i].range;
        request.set_offset(static_cast<uint64_t>(range.offset));
        request.set_total(static_cast<uint64_t>(range.total));
        AddSlice(request.mutable_values(), init, range);
      },
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.InitCentre(context, request, response, std::move(done));
      },
      [&](int i, const v1::CentreResponse& response) {
        return CopyOut(i, response.values(), centre);
      });
}

absl::Status SyncerClient::PullCentre(std::span<float> centre, uint64_t* version) {
  return Await([&](DoneCallback done) { PullCentreAsync(centre, version, std::move(done)); });
}

void SyncerClient::PullCentreAsync(std::span<float> centre, uint64_t* version, DoneCallback done) {
  if (absl::Status s = CheckLength("centre", centre.size()); !s.ok()) return done(std::move(s));
  CallAllAsync<v1::PullCentreRequest, v1::CentreResponse>(
      num_replicas(),
      [&](int i, v1::PullCentreRequest& request) {
        const DenseRange& range = replicas_[i].range;
        request.set_offset(static_cast<uint64_t>(range.offset));
        request.set_total(static_cast<uint64_t>(range.total));
        request.set_length(static_cast<uint64_t>(range.length));
      },
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.PullCentre(context, request, response, std::move(done));
      },
      [this, centre, version](int i, const v1::CentreResponse& response) {
        if (i == 0 && version != nullptr) *version = response.version();
        return CopyOut(i, response.values(), centre);
      },
      std::move(done));
}

absl::Status SyncerClient::AddToCentre(std::span<const float> delta) {
  return AddAndPull(delta, {}, nullptr);
}

void SyncerClient::AddToCentreAsync(std::span<const float> delta, DoneCallback done) {
  AddAndPullAsync(delta, {}, nullptr, std::move(done));
}

absl::Status SyncerClient::AddAndPull(std::span<const float> delta, std::span<float> centre,
                                      uint64_t* version) {
  return Await(
      [&](DoneCallback done) { AddAndPullAsync(delta, centre, version, std::move(done)); });
}

void SyncerClient::AddAndPullAsync(std::span<const float> delta, std::span<float> centre,
                                   uint64_t* version, DoneCallback done) {
  if (absl::Status s = CheckLength("delta", delta.size()); !s.ok()) return done(std::move(s));
  // An empty `centre` only from AddToCentre (n >= 1).
  const bool pull = !centre.empty();
  if (pull) {
    if (absl::Status s = CheckLength("centre", centre.size()); !s.ok()) return done(std::move(s));
  }
  CallAllAsync<v1::AddToCentreRequest, v1::CentreResponse>(
      num_replicas(),
      [&](int i, v1::AddToCentreRequest& request) {
        const DenseRange& range = replicas_[i].range;
        request.set_offset(static_cast<uint64_t>(range.offset));
        request.set_total(static_cast<uint64_t>(range.total));
        AddSlice(request.mutable_delta(), delta, range);
        request.set_return_centre(pull);
      },
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.AddToCentre(context, request, response, std::move(done));
      },
      [this, pull, centre, version](int i, const v1::CentreResponse& response) {
        if (i == 0 && version != nullptr) *version = response.version();
        return pull ? CopyOut(i, response.values(), centre) : absl::OkStatus();
      },
      std::move(done));
}

absl::StatusOr<ClockResult> SyncerClient::Clock(int64_t clock, int64_t staleness,
                                                absl::Duration max_wait) {
  absl::StatusOr<ClockResult> result;
  const absl::Status s = Await([&](DoneCallback done) {
    ClockAsync(clock, staleness, max_wait,
               [&result, done = std::move(done)](absl::StatusOr<ClockResult> r) {
                 const absl::Status status = r.status();
                 result = std::move(r);
                 done(status);
               });
  });
  if (!s.ok()) return s;
  return result;
}

void SyncerClient::ClockAsync(int64_t clock, int64_t staleness, absl::Duration max_wait,
                              ClockCallback done) {
  if (options_.member.empty()) return done(absl::InvalidArgumentError("member: empty"));
  if (max_wait <= absl::ZeroDuration()) max_wait = options_.rpc_deadline / 2;
  auto result = std::make_shared<ClockResult>();
  // Replica 0 only: the clock is a few integers, not a range of the vector.
  CallAllAsync<v1::ClockRequest, v1::ClockResponse>(
      1,
      [&](int i, v1::ClockRequest& request) {
        request.set_member(options_.member);
        request.set_clock(clock);
        request.set_staleness(staleness);
        request.set_max_wait_seconds(absl::ToDoubleSeconds(max_wait));
      },
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.Clock(context, request, response, std::move(done));
      },
      [result](int i, const v1::ClockResponse& response) {
        *result = ClockResult{.released = response.released(),
                              .min_clock = response.min_clock(),
                              .member_clock = response.member_clock(),
                              .joined = response.joined(),
                              .live_members = static_cast<int>(response.live_members()),
                              .waited = absl::Seconds(response.waited_seconds())};
        return absl::OkStatus();
      },
      [result, done = std::move(done)](absl::Status s) {
        if (!s.ok()) return done(std::move(s));
        done(*result);
      });
}

absl::StatusOr<RoundResult> SyncerClient::AllReduceMean(std::string_view group,
                                                        std::span<const float> in,
                                                        std::span<float> out) {
  if (options_.member.empty()) return absl::InvalidArgumentError("member: empty");
  if (absl::Status s = CheckLength("in", in.size()); !s.ok()) return s;
  if (absl::Status s = CheckLength("out", out.size()); !s.ok()) return s;
  RoundResult result{.round = 0, .members = std::numeric_limits<int>::max()};
  // Every request is built (copying `in`) before any response is written to
  // `out`, so the two may alias.
  absl::Status status = CallAll<v1::AllReduceRequest, v1::AllReduceResponse>(
      [&](int i, v1::AllReduceRequest& request) {
        const DenseRange& range = replicas_[i].range;
        request.set_group(std::string(group));
        request.set_member(options_.member);
        request.set_offset(static_cast<uint64_t>(range.offset));
        request.set_total(static_cast<uint64_t>(range.total));
        AddSlice(request.mutable_values(), in, range);
      },
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.AllReduce(context, request, response, std::move(done));
      },
      [&](int i, const v1::AllReduceResponse& response) {
        if (i == 0) result.round = response.round();
        result.members = std::min(result.members, static_cast<int>(response.members()));
        result.waited = std::min(result.waited, absl::Seconds(response.waited_seconds()));
        return CopyOut(i, response.values(), out);
      });
  if (!status.ok()) return status;
  return result;
}

absl::Status SyncerClient::Join(std::string_view group) {
  if (options_.member.empty()) return absl::InvalidArgumentError("member: empty");
  return CallAll<v1::JoinRequest, v1::JoinResponse>(
      [&](int i, v1::JoinRequest& request) {
        request.set_group(std::string(group));
        request.set_member(options_.member);
      },
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.Join(context, request, response, std::move(done));
      },
      [](int i, const v1::JoinResponse& response) { return absl::OkStatus(); });
}

absl::Status SyncerClient::AwaitMembers(std::string_view group, int members,
                                        absl::Duration timeout) {
  if (options_.member.empty()) return absl::InvalidArgumentError("member: empty");
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    // Join is idempotent and answers the live count: it is the poll too.
    std::vector<int> live(num_replicas(), 0);
    const absl::Status joined = CallAll<v1::JoinRequest, v1::JoinResponse>(
        [&](int i, v1::JoinRequest& request) {
          request.set_group(std::string(group));
          request.set_member(options_.member);
        },
        [](auto& stub, auto* context, auto* request, auto* response, auto done) {
          stub.Join(context, request, response, std::move(done));
        },
        [&live](int i, const v1::JoinResponse& response) {
          live[i] = static_cast<int>(response.live_members());
          return absl::OkStatus();
        });
    if (!joined.ok()) return joined;
    const int fewest = *std::min_element(live.begin(), live.end());
    if (fewest >= members) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("only ", fewest, " of ", members,
                                                      " members joined group '", std::string(group),
                                                      "' within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::Status SyncerClient::LeaveGroup(std::string_view group) {
  if (options_.member.empty()) return absl::InvalidArgumentError("member: empty");
  return CallAll<v1::LeaveRequest, v1::LeaveResponse>(
      [&](int i, v1::LeaveRequest& request) {
        request.set_member(options_.member);
        request.set_group(std::string(group));
      },
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.Leave(context, request, response, std::move(done));
      },
      [](int i, const v1::LeaveResponse& response) { return absl::OkStatus(); });
}

absl::StatusOr<uint64_t> SyncerClient::RoundsCompleted(std::string_view group) {
  std::vector<uint64_t> rounds(num_replicas(), 0);
  SS_RETURN_IF_ERROR((CallAll<v1::SyncerStatsRequest, v1::SyncerStatsResponse>(
      [](int i, v1::SyncerStatsRequest& request) {},
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.Stats(context, request, response, std::move(done));
      },
      [&](int i, const v1::SyncerStatsResponse& response) {
        for (const v1::SyncerGroupStats& g : response.groups()) {
          if (g.group() == group) rounds[i] = g.rounds_completed();
        }
        return absl::OkStatus();
      })));
  return *std::max_element(rounds.begin(), rounds.end());
}

absl::Status SyncerClient::Leave() {
  if (options_.member.empty()) return absl::InvalidArgumentError("member: empty");
  return CallAll<v1::LeaveRequest, v1::LeaveResponse>(
      [&](int i, v1::LeaveRequest& request) { request.set_member(options_.member); },
      [](auto& stub, auto* context, auto* request, auto* response, auto done) {
        stub.Leave(context, request, response, std::move(done));
      },
      [](int i, const v1::LeaveResponse& response) { return absl::OkStatus(); });
}

}  // namespace shadowsync::syncer
