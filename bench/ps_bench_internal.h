// Private to the ps_bench program (bench/ps_bench.cc), one file per concern:
//   ps_bench.cc           the flags, the phases (Main) and their printout
//   ps_bench_workload.cc  the precomputed id stream
//   ps_bench_run.cc       client threads running training steps on one system
//   ps_bench_ours.cc      `shadowsync ps` as a child process, and its steps
//   ps_bench_redis.cc     redis-server as a child process, and its steps
// Not thread-safe unless a class says otherwise: the main thread starts,
// stops and reads the servers; each client thread owns its own Stepper.
#ifndef SHADOWSYNC_BENCH_PS_BENCH_INTERNAL_H_
#define SHADOWSYNC_BENCH_PS_BENCH_INTERNAL_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/bench_util.h"
#include "ps/client/ps_client.h"
#include "shadowsync/v1/ps.pb.h"

namespace shadowsync::bench::internal {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Flags {
  std::string work_dir;
  std::string shadowsync;
  std::string redis_server = "/usr/bin/redis-server";
  int tables = 26;
  int batch = 256;
  int dim = 16;
  int64_t ids = 10'000'000;
  double zipf = 1.1;
  int64_t batches = 2048;
  uint64_t seed = 1;
  double seconds = 10;
  int repeats = 3;
  // Our RAM cache for the main runs. Redis keeps every row in RAM, so for a comparison at
  // comparable memory our server gets a cache that holds the stream's working set too: 2.96 M
  // rows x (128 B + 57 B cache overhead) = 521 MiB, plus 10%. Both resident set sizes are
  // printed ("working set: ... RSS"); with 256 MiB ours was 536 MiB against Redis's 686 MiB.
  int64_t cache_mib = 576;
  // The 10M-row load keeps the server's default cache, as it measured before.
  int64_t load_cache_mib = 256;
  std::string sweep_mib = "16,64,256";
  bool skip_cache_off = false;
  bool skip_sweep = false;
  int64_t load_rows = 10'000'000;
  int64_t load_batch_rows = 26 * 8192;
  bool keep_dbs = false;
  std::string perf_dir;
};

// --- The id stream (ps_bench_workload.cc) ----------------------------------------------------

// The id stream: for every (batch, table) the unique ids of `batch` Zipf draws. Ranks map to ids
// in [0, ids) by a per-table affine bijection, so the hot rows of different tables are different
// ids (and land in different hash slots and cache shards) yet stay inside hash_buckets.
struct Workload {
  int tables = 0;
  int64_t batches = 0;
  std::vector<uint64_t> ids;
  std::vector<uint64_t> offsets;    // batches * tables + 1 entries into `ids`
  std::vector<int64_t> batch_rows;  // unique ids per batch, all tables
  int64_t draws = 0;
  double sample_seconds = 0;  // sampling alone
  double total_seconds = 0;   // sampling + de-duplication
  double rank1_fraction = 0;  // observed P(rank 1), to check the sampler
  int64_t distinct_rows = 0;  // distinct (table, id) over the stream

  std::span<const uint64_t> Ids(int64_t b, int t) const {
    const size_t i = static_cast<size_t>(b * tables + t);
    return {ids.data() + offsets[i], offsets[i + 1] - offsets[i]};
  }
};

Workload MakeWorkload(const Flags& f);

// P(rank 1) of Zipf(s) over n, to check the sampler against.
double ZipfRank1Probability(int64_t n, double s);

// --- Runs (ps_bench_run.cc) --------------------------------------------------------------------

// A fixed, finite gradient pattern; its values do not affect the cost of either system.
std::vector<float> GradientPattern(size_t floats);

class Stepper {
 public:
  virtual ~Stepper() = default;
  // One training step on batch `b`: look its rows up, then push a gradient for each. Returns
  // the rows processed (lookup rows + push rows).
  virtual absl::StatusOr<int64_t> Step(int64_t b) = 0;
};

struct RunResult {
  std::string system;
  int threads = 0;
  double seconds = 0;
  int64_t rows = 0;
  int64_t steps = 0;
  double server_cpu = 0;            // CPU seconds of the server process during the run
  double client_cpu = 0;            // CPU seconds of this process during the run
  double p50_ms = 0, p99_ms = 0;    // per-step latency
  std::optional<double> hit_ratio;  // ours: cache hits / (hits + misses) during the run
  int64_t server_lookup_rows = -1, server_push_rows = -1;  // ours: the server's own counts

  double rows_per_s() const { return seconds > 0 ? static_cast<double>(rows) / seconds : 0; }
};

using MakeStepper = std::function<absl::StatusOr<std::unique_ptr<Stepper>>()>;

// `threads` client threads, each with its own Stepper, start together. With `seconds` > 0 each
// cycles through the stream from its own offset (thread i starts at batch i * batches /
// threads) until the time is up; otherwise each does its share of one pass over the stream.
absl::StatusOr<RunResult> Run(const std::string& system, int threads, double seconds,
                              const Workload& w, const MakeStepper& make, pid_t server_pid);

// --- Ours (ps_bench_ours.cc) -------------------------------------------------------------------

// One `shadowsync ps` child on a loopback port, with the benchmark's table layout. client() is
// used by several client threads at once (PsClient is thread-safe); the rest by one thread.
class OurServer {
 public:
  static absl::StatusOr<std::unique_ptr<OurServer>> Start(const Flags& f, const std::string& db,
                                                          int64_t cache_bytes,
                                                          const std::string& log_path);

  std::string address() const;
  pid_t pid() const { return child_->pid(); }
  double startup_seconds() const { return startup_seconds_; }
  ps::PsClient& client() { return *client_; }
  absl::StatusOr<std::map<std::string, double>> Metrics() const;
  // SIGTERM (a clean shutdown: in-flight RPCs drain, dirty cached rows are written to RocksDB)
  // or SIGKILL (a crash); returns the seconds to exit.
  absl::StatusOr<double> Stop(int sig);

  // The Stats RPC: its answer and its latency (it checksums every stored row).
  absl::StatusOr<std::pair<v1::StatsResponse, double>> Stats() const;

 private:
  OurServer() = default;
  std::unique_ptr<ChildProcess> child_;
  std::unique_ptr<ps::PsClient> client_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  double startup_seconds_ = 0;
};

// A run against our server, with the cache hit ratio and the server's row counters read from
// its /metrics (the RowStoreStats that Stats reports) before and after.
// With --perf-dir and a `profile` name, the server is profiled during the run (perf record
// with DWARF call graphs, which costs the server a few percent) into PERF_DIR/PROFILE.data.
absl::StatusOr<RunResult> RunOurs(OurServer& server, int threads, double seconds, const Workload& w,
                                  const Flags& f, const std::string& profile = "");

// --- Redis (ps_bench_redis.cc) -----------------------------------------------------------------

// Debian's redis-server on a free loopback port, persistence off (no RDB snapshots, no AOF),
// otherwise its stock configuration (single-threaded command execution, io-threads 1).
class RedisServer {
 public:
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(const Flags& f, const std::string& dir);

  int port() const { return port_; }
  pid_t pid() const { return child_->pid(); }
  absl::Status Stop();
  // A field of INFO (e.g. "used_memory", "db0"); empty if absent.
  absl::StatusOr<std::string> Info(const std::string& field) const;

 private:
  RedisServer() = default;
  std::unique_ptr<ChildProcess> child_;
  int port_ = 0;
};

absl::StatusOr<RunResult> RunRedis(RedisServer& server, int threads, double seconds,
                                   const Workload& w, const Flags& f);

}  // namespace shadowsync::bench::internal

#endif  // SHADOWSYNC_BENCH_PS_BENCH_INTERNAL_H_
