// The trainers' parameter-server client: a model::EmbeddingStore whose rows
// live on parameter servers (docs/resharding.md). Each call splits its ids by the
// shard map, sends one request per server (several if a server's part exceeds
// max_rows_per_rpc) to all servers in parallel, and reassembles the answers in
// request order. Thread-safe: any number of trainer threads may call Lookup
// and Push concurrently; they share one gRPC channel per server.
//
// WRONG_OWNER makes it adopt the servers' newest shard map and resend the
// failed part. Lookups are retried; a push part only when it certainly was
// not applied, so no push is applied twice; a failed Push's parts on other
// servers may have been applied (docs/reliability.md, "The parameter-server
// client", has the exact rules).
//
//   SS_ASSIGN_OR_RETURN(auto store, PsClient::Connect("ps-0:7000", 16, 26));
//   std::vector<model::TableRows> rows(26);
//   rows[3].ids = {17, 99};
//   SS_RETURN_IF_ERROR(store->Lookup(rows));  // rows[3].values: 2 * 16 floats
#ifndef SHADOWSYNC_PS_CLIENT_PS_CLIENT_H_
#define SHADOWSYNC_PS_CLIENT_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "common/mutex.h"
#include "common/shard_map.h"
#include "grpcpp/grpcpp.h"
#include "model/embedding_table.h"
#include "shadowsync/v1/ps.grpc.pb.h"

namespace shadowsync::ps {

struct PsClientOptions {
  // Deadline of every RPC attempt. Default: 10s.
  absl::Duration rpc_deadline = absl::Seconds(10);
  // Retries of a Lookup or Push after its first attempt. Default: 8.
  int max_retries = 8;
  // Retries answered only by WRONG_OWNER do not count toward max_retries:
  // they mean slots are moving (ps/client/resharder.h), and the client waits for the
  // move up to this long. Default: 60s.
  absl::Duration reshard_wait = absl::Seconds(60);
  // Backoff before retry k is min(backoff_base * 2^(k-1), backoff_max),
  // scaled by a random factor in [0.5, 1]. Defaults: 10ms, 1s.
  absl::Duration backoff_base = absl::Milliseconds(10);
  absl::Duration backoff_max = absl::Seconds(1);
  // Ids per RPC; a server's larger part is split. Keep at or below the
  // servers' --max-request-rows. Default: 256Ki.
  int max_rows_per_rpc = 1 << 18;
  // Largest gRPC message sent or received. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
  // Mutual TLS and the bearer token of every call. Default: plaintext, none.
  GrpcSecurity security;
};

class PsClient final : public model::EmbeddingStore {
 public:
  // A client routing by `map`. InvalidArgument for dim < 1 or num_tables < 1.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(ShardMap map, int dim, int num_tables,
                                                          PsClientOptions options = {});
  // Fetches the shard map from the server at `bootstrap_address` (waiting up
  // to rpc_deadline for it to come up), then as Create.
  static absl::StatusOr<std::unique_ptr<PsClient>> Connect(const std::string& bootstrap_address,
                                                           int dim, int num_tables,
                                                           PsClientOptions options = {});
  ~PsClient() override;

  int dim() const override { return dim_; }
  int num_tables() const override { return num_tables_; }
  // rows.size() == num_tables(), else InvalidArgument. Fills every
  // rows[t].values with ids.size() * dim floats.
  absl::Status Lookup(std::span<model::TableRows> rows) override;
  // grads.size() == num_tables() and grads[t].values.size() ==
  // grads[t].ids.size() * dim, else InvalidArgument. See the retry rules
  // (top) for what an error means.
  absl::Status Push(std::span<const model::TableRows> grads) override;

  // The map requests are routed by.
  std::shared_ptr<const ShardMap> shard_map() const;
  // Asks every server of the current map for its map and adopts the newest.
  // Unavailable if no server answers with an epoch >= min_epoch.
  absl::Status RefreshShardMap(uint64_t min_epoch = 0);

  // Totals since construction, for metrics and tests.
  struct Counters {
    int64_t rpcs = 0;           // RPC attempts (Lookup and PushGradients).
    int64_t retries = 0;        // Parts resent.
    int64_t wrong_owner = 0;    // WRONG_OWNER answers.
    int64_t map_refreshes = 0;  // Maps adopted after construction.
  };
  Counters counters() const;

 private:
  struct Server;
  struct Routing;
  struct Unit;
  enum class Kind { kLookup, kPush };

  PsClient(int dim, int num_tables, PsClientOptions options);
  // Routes `map` through per-address servers (channels reused by address).
  std::shared_ptr<const Routing> MakeRouting(ShardMap map) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<const Routing> routing() const;
  // The shared body of Lookup and Push: `lookup_rows` or `push_rows` is set.
  absl::Status Run(Kind kind, std::span<model::TableRows> lookup_rows,
                   std::span<const model::TableRows> push_rows);
  // Sends every unit in parallel and waits for all.
  void SendAll(Kind kind, std::deque<Unit>& units);
  absl::Duration Backoff(int retry) const;

  const int dim_;
  const int num_tables_;
  const PsClientOptions options_;

  mutable Mutex mu_;
  std::shared_ptr<const Routing> routing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Server>> servers_ ABSL_GUARDED_BY(mu_);
  // One refresh at a time; the others wait and reuse its result.
  Mutex refresh_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  std::atomic<int64_t> rpcs_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<int64_t> wrong_owner_{0};
  std::atomic<int64_t> map_refreshes_{0};
};

}  // namespace shadowsync::ps

#endif  // SHADOWSYNC_PS_CLIENT_PS_CLIENT_H_
