#include "ps/client/ps_client.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <latch>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "ps/client/wrong_owner.h"

namespace shadowsync::ps {

// One parameter server: its channel and stub, shared by every routing that
// names its address.
struct PsClient::Server {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::ParameterServer::Stub> stub;
};

// A shard map with the server of each index resolved. Immutable once built.
struct PsClient::Routing {
  ShardMap map;
  std::vector<std::shared_ptr<Server>> servers;  // by map index
};

// One RPC: ids of some tables bound for one server.
struct PsClient::Unit {
  struct Piece {
    uint32_t table;
    std::vector<uint32_t> index;  // positions in rows[table].ids, ascending
  };
  uint32_t server = 0;
  std::vector<Piece> pieces;
  int64_t ids = 0;

  std::shared_ptr<Server> target;
  grpc::ClientContext context;
  v1::LookupRequest lookup_request;
  v1::LookupResponse lookup_response;
  v1::PushGradientsRequest push_request;
  v1::PushGradientsResponse push_response;
  grpc::Status status;
  bool sent = false;  // false: the request never left this process
};

namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const PsClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Reconnect quickly to a restarted server (gRPC's default backs off to 120s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return CreateChannel(address, options.security, args);
}

// gRPC's words for a call that found no connection to go out on: a server
// that is gone, whose channel still looked ready when the call started.
bool NeverSent(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE &&
         status.error_message().starts_with("failed to connect to all addresses");
}

bool LookupRetryable(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return true;
    default:
      return false;
  }
}

// Waits until `channel` is connected; false if it fails to connect (gRPC's
// fail-fast rule: TRANSIENT_FAILURE is not waited out) or `deadline` passes.
bool WaitConnected(grpc::Channel& channel, std::chrono::system_clock::time_point deadline) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (!channel.WaitForStateChange(state, deadline)) return false;
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return true;
}

}  // namespace

PsClient::PsClient(int dim, int num_tables, PsClientOptions options)
    : dim_(dim), num_tables_(num_tables), options_(std::move(options)) {}

PsClient::~PsClient() = default;

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(ShardMap map, int dim, int num_tables,
                                                           PsClientOptions options) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("dim = ", dim, ", must be >= 1"));
  if (num_tables < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_tables = ", num_tables, ", must be >= 1"));
  }
  std::unique_ptr<PsClient> client(new PsClient(dim, num_tables, std::move(options)));
  {
    MutexLock lock(&client->mu_);
    client->routing_ = client->MakeRouting(std::move(map));
  }
  return client;
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(const std::string& bootstrap_address,
                                                            int dim, int num_tables,
                                                            PsClientOptions options) {
  auto channel = MakeChannel(bootstrap_address, options);
  auto stub = v1::ParameterServer::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(DeadlineFromNow(options.rpc_deadline));
  context.set_wait_for_ready(true);  // The server may still be starting.
  v1::ShardMap proto;
  const grpc::Status status = stub->GetShardMap(&context, v1::GetShardMapRequest(), &proto);
  if (!status.ok()) {
    const absl::Status s = FromGrpcStatus(status);
    return absl::Status(s.code(),
                        absl::StrCat("shard map from ", bootstrap_address, ": ", s.message()));
  }
  SS_ASSIGN_OR_RETURN(ShardMap map, ShardMap::FromProto(proto));
  return Create(std::move(map), dim, num_tables, std::move(options));
}

std::shared_ptr<const PsClient::Routing> PsClient::MakeRouting(ShardMap map) {
  std::vector<std::shared_ptr<Server>> servers;
  for (const std::string& address : map.addresses()) {
    std::shared_ptr<Server>& server = servers_[address];
    if (server == nullptr) {
      server = std::make_shared<Server>();
      server->address = address;
      server->channel = MakeChannel(address, options_);
      server->stub = v1::ParameterServer::NewStub(server->channel);
    }
    servers.push_back(server);
  }
  return std::make_shared<const Routing>(Routing{std::move(map), std::move(servers)});
}

std::shared_ptr<const PsClient::Routing> PsClient::routing() const {
  ReaderMutexLock lock(&mu_);
  return routing_;
}

std::shared_ptr<const ShardMap> PsClient::shard_map() const {
  std::shared_ptr<const Routing> r = routing();
  return std::shared_ptr<const ShardMap>(r, &r->map);
}

PsClient::Counters PsClient::counters() const {
  return Counters{.rpcs = rpcs_.load(std::memory_order_relaxed),
                  .retries = retries_.load(std::memory_order_relaxed),
                  .wrong_owner = wrong_owner_.load(std::memory_order_relaxed),
                  .map_refreshes = map_refreshes_.load(std::memory_order_relaxed)};
}

absl::Status PsClient::RefreshShardMap(uint64_t min_epoch) {
  MutexLock refresh(&refresh_mu_);
  std::shared_ptr<const Routing> current = routing();
  if (min_epoch > 0 && current->map.epoch() >= min_epoch) return absl::OkStatus();

  // Ask every known server at once; the newest answer wins.
  const std::vector<std::shared_ptr<Server>>& servers = current->servers;
  struct Ask {
    grpc::ClientContext context;
    v1::ShardMap map;
    grpc::Status status;
  };
  std::vector<Ask> asks(servers.size());
  // Shared with the callbacks: the last count_down may still be waking this
  // thread when wait() returns, and must not touch a destroyed latch.
  auto latch = std::make_shared<std::latch>(static_cast<std::ptrdiff_t>(servers.size()));
  for (size_t i = 0; i < servers.size(); ++i) {
    Ask& ask = asks[i];
    ask.context.set_deadline(DeadlineFromNow(options_.rpc_deadline));
    static const v1::GetShardMapRequest kRequest;
    servers[i]->stub->async()->GetShardMap(&ask.context, &kRequest, &ask.map,
                                           [&ask, latch](grpc::Status s) {
                                             ask.status = std::move(s);
                                             latch->count_down();
                                           });
  }
  latch->wait();

  std::optional<ShardMap> newest;
  absl::Status last_error = absl::UnavailableError("no parameter server answered");
  for (size_t i = 0; i < asks.size(); ++i) {
    if (!asks[i].status.ok()) {
      last_error = FromGrpcStatus(asks[i].status);
      continue;
    }
    absl::StatusOr<ShardMap> map = ShardMap::FromProto(asks[i].map);
    if (!map.ok()) {
      last_error = map.status();
      continue;
    }
    if (map->num_slots() != current->map.num_slots()) {
      last_error = absl::FailedPreconditionError(
          absl::StrCat("ps ", i, " (", servers[i]->address, ") has ", map->num_slots(),
                       " slots, the client's map ", current->map.num_slots()));
      continue;
    }
    if (!newest.has_value() || map->epoch() > newest->epoch()) newest = *std::move(map);
  }
  if (newest.has_value() && newest->epoch() > current->map.epoch()) {
    MutexLock lock(&mu_);
    routing_ = MakeRouting(*std::move(newest));
    map_refreshes_.fetch_add(1, std::memory_order_relaxed);
    current = routing_;
  }
  if (current->map.epoch() < min_epoch) {
    return absl::UnavailableError(absl::StrCat("no parameter server has shard map epoch ",
                                               min_epoch, " yet (newest ", current->map.epoch(),
                                               "; last error: ", last_error.message(), ")"));
  }
  return absl::OkStatus();
}

absl::Duration PsClient::Backoff(int retry) const {
  absl::Duration d = options_.backoff_base;
  for (int i = 1; i < retry && d < options_.backoff_max; ++i) d *= 2;
  d = std::min(d, options_.backoff_max);
  thread_local std::minstd_rand rng(std::random_device{}());
  return d * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
}

absl::Status PsClient::Lookup(std::span<model::TableRows> rows) {
  return Run(Kind::kLookup, rows, {});
}

absl::Status PsClient::Push(std::span<const model::TableRows> grads) {
  return Run(Kind::kPush, {}, grads);
}

absl::Status PsClient::Run(Kind kind, std::span<model::TableRows> lookup_rows,
                           std::span<const model::TableRows> push_rows) {
  const bool lookup = kind == Kind::kLookup;
  const size_t num_rows = lookup ? lookup_rows.size() : push_rows.size();
  auto ids_of = [&](uint32_t t) -> const std::vector<uint64_t>& {
    return lookup ? lookup_rows[t].ids : push_rows[t].ids;
  };
  if (num_rows != static_cast<size_t>(num_tables_)) {
    return absl::InvalidArgumentError(absl::StrCat(lookup ? "lookup" : "push", " names ", num_rows,
                                                   " tables, the client has ", num_tables_));
  }
  // Work still to do: per table, positions of ids not yet answered.
  std::vector<std::vector<uint32_t>> pending(num_tables_);
  int64_t total = 0;
  for (uint32_t t = 0; t < static_cast<uint32_t>(num_tables_); ++t) {
    const size_t n = ids_of(t).size();
    if (lookup) {
      lookup_rows[t].values.resize(n * dim_);
    } else if (push_rows[t].values.size() != n * dim_) {
      return absl::InvalidArgumentError(
          absl::StrCat("push to table ", t, ": ", push_rows[t].values.size(),
                       " gradient values for ", n, " ids of dim ", dim_));
    }
    pending[t].resize(n);
    std::iota(pending[t].begin(), pending[t].end(), 0u);
    total += static_cast<int64_t>(n);
  }
  if (total == 0) return absl::OkStatus();

  absl::Status last_error;
  bool retry_now = false;  // The map just changed: resend without waiting.
  int counted = 0;         // Retries that count toward max_retries.
  std::optional<absl::Time> redirected_since;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      if (counted > options_.max_retries) {
        return absl::Status(
            last_error.code(),
            absl::StrCat(last_error.message(), " (gave up after ", attempt, " attempts)"));
      }
      if (!retry_now) absl::SleepFor(Backoff(attempt));
    }
    retry_now = false;

    // Split the pending ids by owner, at most max_rows_per_rpc ids per unit.
    const std::shared_ptr<const Routing> routing = this->routing();
    const ShardMap& map = routing->map;
    std::deque<Unit> units;  // Not movable (ClientContext): a deque never moves them.
    std::vector<int> open_unit(map.num_servers(), -1);
    for (uint32_t t = 0; t < static_cast<uint32_t>(num_tables_); ++t) {
      const std::vector<uint64_t>& ids = ids_of(t);
      for (const uint32_t i : pending[t]) {
        const uint32_t server = map.OwnerOf(t, ids[i]);
        int& u = open_unit[server];
        if (u < 0 || units[u].ids >= options_.max_rows_per_rpc) {
          u = static_cast<int>(units.size());
          Unit& unit = units.emplace_back();
          unit.server = server;
          unit.target = routing->servers[server];
        }
        Unit& unit = units[u];
        if (unit.pieces.empty() || unit.pieces.back().table != t) {
          unit.pieces.push_back(Unit::Piece{.table = t, .index = {}});
        }
        unit.pieces.back().index.push_back(i);
        ++unit.ids;
      }
      pending[t].clear();
    }
    // Requests.
    for (Unit& unit : units) {
      unit.context.set_deadline(DeadlineFromNow(options_.rpc_deadline));
      if (lookup) {
        unit.lookup_request.set_epoch(map.epoch());
        for (const Unit::Piece& piece : unit.pieces) {
          v1::TableRows* out = unit.lookup_request.add_tables();
          out->set_table(piece.table);
          const std::vector<uint64_t>& ids = lookup_rows[piece.table].ids;
          out->mutable_ids()->Reserve(static_cast<int>(piece.index.size()));
          for (const uint32_t i : piece.index) out->mutable_ids()->AddAlreadyReserved(ids[i]);
        }
      } else {
        unit.push_request.set_epoch(map.epoch());
        for (const Unit::Piece& piece : unit.pieces) {
          v1::TableRows* out = unit.push_request.add_tables();
          out->set_table(piece.table);
          const model::TableRows& g = push_rows[piece.table];
          const int n = static_cast<int>(piece.index.size());
          out->mutable_ids()->Reserve(n);
          out->mutable_values()->Resize(n * dim_, 0.0f);
          float* values = out->mutable_values()->mutable_data();
          for (int k = 0; k < n; ++k) {
            const uint32_t i = piece.index[k];
            out->mutable_ids()->AddAlreadyReserved(g.ids[i]);
            std::memcpy(values + static_cast<size_t>(k) * dim_, g.values.data() + size_t{i} * dim_,
                        sizeof(float) * dim_);
          }
        }
      }
    }
    SendAll(kind, units);

    // Answers: copy out what succeeded, requeue what may be retried.
    bool refresh = false;
    bool other_failure = false;  // Anything but WRONG_OWNER.
    bool unreachable = false;    // A server did not answer: maybe it left the job.
    uint64_t min_epoch = 0;
    for (Unit& unit : units) {
      if (unit.status.ok()) {
        if (!lookup) continue;
        const v1::LookupResponse& response = unit.lookup_response;
        if (response.tables_size() != static_cast<int>(unit.pieces.size())) {
          return absl::InternalError(absl::StrCat("ps ", unit.server, " (", unit.target->address,
                                                  ") answered ", response.tables_size(),
                                                  " tables for ", unit.pieces.size()));
        }
        for (size_t p = 0; p < unit.pieces.size(); ++p) {
          const Unit::Piece& piece = unit.pieces[p];
          const v1::TableRows& got = response.tables(static_cast<int>(p));
          if (got.values_size() != static_cast<int64_t>(piece.index.size()) * dim_) {
            return absl::InternalError(absl::StrCat(
                "ps ", unit.server, " (", unit.target->address, ") answered ", got.values_size(),
                " floats for ", piece.index.size(), " ids of table ", piece.table));
          }
          float* out = lookup_rows[piece.table].values.data();
          const float* in = got.values().data();
          for (size_t k = 0; k < piece.index.size(); ++k) {
            std::memcpy(out + size_t{piece.index[k]} * dim_, in + k * dim_, sizeof(float) * dim_);
          }
        }
        continue;
      }
      const grpc::StatusCode code = unit.status.error_code();
      bool retry;
      if (const std::optional<WrongOwner> wrong = GetWrongOwner(unit.status)) {
        wrong_owner_.fetch_add(1, std::memory_order_relaxed);
        refresh = true;
        min_epoch = std::max(min_epoch, wrong->epoch);
        retry = true;
      } else if (lookup) {
        other_failure = true;
        retry = LookupRetryable(code);
        unreachable |= code == grpc::StatusCode::UNAVAILABLE;
      } else {
        other_failure = true;
        // Never reached the server: cannot have been applied.
        retry = !unit.sent || NeverSent(unit.status);
        unreachable |= retry;
      }
      const absl::Status s = FromGrpcStatus(unit.status);
      last_error =
          absl::Status(s.code(), absl::StrCat(lookup ? "lookup" : "push", " on ps ", unit.server,
                                              " (", unit.target->address, "): ", s.message()));
      if (!retry) return last_error;
      retries_.fetch_add(1, std::memory_order_relaxed);
      for (const Unit::Piece& piece : unit.pieces) {
        std::vector<uint32_t>& p = pending[piece.table];
        p.insert(p.end(), piece.index.begin(), piece.index.end());
      }
    }
    if (std::all_of(pending.begin(), pending.end(), [](const auto& p) { return p.empty(); })) {
      return absl::OkStatus();
    }
    if (other_failure) {
      ++counted;
    } else {
      // Only redirects: a reshard step is moving slots, which takes as long
      // as it takes; wait for it up to reshard_wait.
      if (!redirected_since.has_value()) redirected_since = absl::Now();
      if (absl::Now() - *redirected_since > options_.reshard_wait) {
        return absl::Status(last_error.code(),
                            absl::StrCat(last_error.message(), " (still redirected after ",
                                         absl::FormatDuration(options_.reshard_wait), ")"));
      }
    }
    if (refresh) {
      const uint64_t before = routing->map.epoch();
      const absl::Status refreshed = RefreshShardMap(std::max(min_epoch, before + 1));
      // A newer map makes an immediate retry worthwhile; otherwise back off.
      retry_now = refreshed.ok() && this->routing()->map.epoch() > before;
      if (!refreshed.ok()) last_error = refreshed;
    } else if (unreachable) {
      // A drained server is stopped after a scale-in: a client that slept
      // through the reshard learns the new map from the others.
      const uint64_t before = routing->map.epoch();
      (void)RefreshShardMap();
      retry_now = this->routing()->map.epoch() > before;
    }
  }
}

void PsClient::SendAll(Kind kind, std::deque<Unit>& units) {
  const bool lookup = kind == Kind::kLookup;
  rpcs_.fetch_add(static_cast<int64_t>(units.size()), std::memory_order_relaxed);
  // Pushes are sent only over a connected channel, so a connection failure
  // is known not to have applied anything (see the header).
  auto connected = [&](Unit& unit) {
    if (lookup) return true;
    if (WaitConnected(*unit.target->channel, DeadlineFromNow(options_.rpc_deadline))) return true;
    unit.status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "not connected; push not sent");
    return false;
  };
  // All but the first asynchronously; the first on this thread, which would
  // otherwise just wait.
  auto latch = std::make_shared<std::latch>(static_cast<std::ptrdiff_t>(units.size()) - 1);
  for (size_t u = 1; u < units.size(); ++u) {
    Unit& unit = units[u];
    if (!connected(unit)) {
      latch->count_down();
      continue;
    }
    unit.sent = true;
    auto done = [&unit, latch](grpc::Status s) {
      unit.status = std::move(s);
      latch->count_down();
    };
    if (lookup) {
      unit.target->stub->async()->Lookup(&unit.context, &unit.lookup_request, &unit.lookup_response,
                                         std::move(done));
    } else {
      unit.target->stub->async()->PushGradients(&unit.context, &unit.push_request,
                                                &unit.push_response, std::move(done));
    }
  }
  Unit& first = units.front();
  if (connected(first)) {
    first.sent = true;
    first.status = lookup ? first.target->stub->Lookup(&first.context, first.lookup_request,
                                                       &first.lookup_response)
                          : first.target->stub->PushGradients(&first.context, first.push_request,
                                                              &first.push_response);
  }
  latch->wait();
}

}  // namespace shadowsync::ps
