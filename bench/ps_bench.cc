// Parameter-server throughput against Redis, in one invocation (issue 3,
// "Performance"). Both servers run as child processes on loopback, so each
// one's CPU time is its own, and both are driven by this process with the same
// precomputed id stream:
//
//   - ours: `shadowsync ps` (one server, RocksDB + RAM cache, Adagrad on the
//     server), reached through ps::PsClient over gRPC;
//   - redis: Debian's redis-server with persistence off, one hiredis
//     connection per client thread, rows stored as 128-byte binary values.
//
// A training step is: Lookup of a batch's rows, then PushGradients of the same
// rows. A batch is `tables` x `batch` ids, each drawn Zipf(s) over `ids`
// distinct ids (rejection-inversion sampling), de-duplicated per table as the
// trainer does before it calls the store. "Rows processed" = unique rows
// looked up + unique rows pushed, identical for both systems.
//
// Phases: warm-up (one pass over the whole stream, so both hold the working
// set), timed runs at 1 and 2 client threads (ours and redis interleaved,
// `--repeats` times; medians reported), cache-off (RocksDB only), hit ratio
// against cache size, and a 10M-row load with RSS and restart times.
//
//   ps_bench --work-dir DIR [--shadowsync PATH] [--redis-server PATH]
//            [--seconds 10] [--repeats 3] [--batches 2048] [--load-rows 10000000]
//            [--cache-mib 576] [--sweep-mib 16,64,256] [--load-cache-mib 256]
//            [--skip-cache-off] [--skip-sweep]
//
// The last line is machine-readable for bench/run.sh:
//   RESULT name=ps ours_rows_per_s=.. redis_rows_per_s=.. ratio=.. hit_ratio=.. ...
#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "common/grpc_util.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "model/embedding_table.h"
#include "model/optimizer.h"
#include "ps/client/ps_client.h"
#include "shadowsync/v1/ps.grpc.pb.h"

namespace shadowsync::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

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

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---------------------------------------------------------------------------
// Zipf(s) over ranks 1..n by rejection-inversion (Hörmann & Derflinger, "Rejection-inversion to
// generate variates from monotone discrete distributions", 1996; the form of Apache Commons
// RNG's RejectionInversionZipfSampler). O(1) per sample with no table, and the acceptance rate
// is above 90% for s = 1.1, so a few log/exp calls per sample: an alias table over 10M ranks
// would need 120 MB and be slower to build than the whole stream is to draw.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double s)
      : n_(static_cast<double>(n)),
        s_(s),
        h_integral_x1_(HIntegral(1.5) - 1.0),
        h_integral_n_(HIntegral(n_ + 0.5)),
        s_div_(2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0))) {}

  // A rank in [1, n] from a uniform in [0, 1) per attempt (`uniform` is called once per try).
  template <typename Uniform>
  int64_t Sample(Uniform&& uniform) const {
    while (true) {
      const double u = h_integral_n_ + uniform() * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      double k = std::floor(x + 0.5);
      k = std::clamp(k, 1.0, n_);
      if (k - x <= s_div_ || u >= HIntegral(k + 0.5) - H(k)) return static_cast<int64_t>(k);
    }
  }

 private:
  // (x^(1-s) - 1) / (1 - s), stable near s = 1.
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1.0 - s_) * log_x) * log_x;
  }
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;  // Rounding can push it past the domain.
    return std::exp(Helper1(t) * x);
  }
  // log1p(x) / x and expm1(x) / x, with their series near 0.
  static double Helper1(double x) {
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double Helper2(double x) {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x
                              : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }

  double n_, s_, h_integral_x1_, h_integral_n_, s_div_;
};

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

uint64_t RankToId(int64_t rank, int table, int64_t n) {
  // 7654321 is odd and not a multiple of 5, so coprime with 10^7 (and any n it does not divide).
  const unsigned __int128 a = 7654321, c = Mix64(0xbe7c4 + table) % static_cast<uint64_t>(n);
  return static_cast<uint64_t>((a * static_cast<uint64_t>(rank - 1) + c) %
                               static_cast<uint64_t>(n));
}

Workload MakeWorkload(const Flags& f) {
  Workload w;
  w.tables = f.tables;
  w.batches = f.batches;
  const ZipfSampler zipf(f.ids, f.zipf);
  uint64_t counter = Mix64(f.seed);
  auto uniform = [&counter] {
    return static_cast<double>(Mix64(counter++) >> 11) * (1.0 / 9007199254740992.0);
  };
  // Sampling alone, timed on its own so its cost can be compared with a step's.
  const int64_t draws = f.batches * f.tables * f.batch;
  std::vector<int64_t> ranks(static_cast<size_t>(draws));
  const Clock::time_point start = Clock::now();
  for (int64_t& r : ranks) r = zipf.Sample(uniform);
  w.sample_seconds = Seconds(Clock::now() - start);
  w.draws = draws;
  w.rank1_fraction =
      static_cast<double>(std::count(ranks.begin(), ranks.end(), 1)) / static_cast<double>(draws);

  w.offsets.reserve(static_cast<size_t>(f.batches * f.tables + 1));
  w.offsets.push_back(0);
  w.batch_rows.assign(static_cast<size_t>(f.batches), 0);
  std::vector<uint64_t> buf(static_cast<size_t>(f.batch));
  size_t next = 0;
  for (int64_t b = 0; b < f.batches; ++b) {
    for (int t = 0; t < f.tables; ++t) {
      for (int i = 0; i < f.batch; ++i) buf[i] = RankToId(ranks[next++], t, f.ids);
      std::sort(buf.begin(), buf.end());
      const auto end = std::unique(buf.begin(), buf.end());
      w.ids.insert(w.ids.end(), buf.begin(), end);
      w.offsets.push_back(w.ids.size());
      w.batch_rows[b] += end - buf.begin();
    }
  }
  w.total_seconds = Seconds(Clock::now() - start);
  // Distinct rows over the whole stream: the working set both systems hold after warm-up.
  for (int t = 0; t < f.tables; ++t) {
    std::vector<uint64_t> all;
    for (int64_t b = 0; b < f.batches; ++b) {
      const auto s = w.Ids(b, t);
      all.insert(all.end(), s.begin(), s.end());
    }
    std::sort(all.begin(), all.end());
    w.distinct_rows += std::unique(all.begin(), all.end()) - all.begin();
  }
  return w;
}

// P(rank 1) of Zipf(s) over n, to check the sampler against.
double ZipfRank1Probability(int64_t n, double s) {
  double h = 0;
  for (int64_t k = n; k >= 1; --k) h += std::pow(static_cast<double>(k), -s);
  return 1.0 / h;
}

// ---------------------------------------------------------------------------
// /proc.

double SelfCpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto sec = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec * 1e-6; };
  return sec(usage.ru_utime) + sec(usage.ru_stime);
}

// A loopback port free right now (a small race with other processes is accepted).
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", strerror(errno)));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// GET http://127.0.0.1:port/metrics, parsed into "name{labels}" -> value.
absl::StatusOr<std::map<std::string, double>> ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", strerror(errno)));
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("write /metrics request");
  }
  std::string body;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, static_cast<size_t>(n));
  close(fd);
  std::map<std::string, double> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.rfind("shadowsync_", 0) != 0) continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    out[line.substr(0, space)] = std::atof(line.c_str() + space + 1);
  }
  return out;
}

// ---------------------------------------------------------------------------
// The servers.

// One `shadowsync ps` child on a loopback port, with the benchmark's table layout.
class OurServer {
 public:
  static absl::StatusOr<std::unique_ptr<OurServer>> Start(const Flags& f, const std::string& db,
                                                          int64_t cache_bytes,
                                                          const std::string& log_path) {
    std::unique_ptr<OurServer> s(new OurServer);
    const std::string ready = db + ".ready";
    fs::remove(ready);
    // clang-format off
    const std::vector<std::string> argv = {
        f.shadowsync, "ps",
        "--listen", "127.0.0.1:0",
        "--metrics-listen", "127.0.0.1:0",
        "--db", db,
        "--dim", std::to_string(f.dim),
        "--tables", std::to_string(f.tables),
        "--hash-buckets", std::to_string(f.ids),
        "--optimizer", "adagrad",
        "--cache-bytes", std::to_string(cache_bytes),
        "--ready-file", ready};
    // clang-format on
    SS_ASSIGN_OR_RETURN(s->child_, ChildProcess::Spawn(argv, log_path));
    // Startup time = fork to the ready file: exec, RocksDB open, redo-log replay, gRPC bind.
    SS_ASSIGN_OR_RETURN(const auto ports, s->child_->WaitReady(ready, absl::Minutes(10)));
    s->startup_seconds_ = Seconds(Clock::now() - s->child_->started());
    std::tie(s->grpc_port_, s->metrics_port_) = ports;
    ps::PsClientOptions options;
    options.rpc_deadline = absl::Seconds(60);  // A cold 10M-row push batch takes a while.
    SS_ASSIGN_OR_RETURN(s->client_, ps::PsClient::Connect(s->address(), f.dim, f.tables, options));
    return s;
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", grpc_port_); }
  pid_t pid() const { return child_->pid(); }
  double startup_seconds() const { return startup_seconds_; }
  ps::PsClient& client() { return *client_; }
  absl::StatusOr<std::map<std::string, double>> Metrics() const {
    return ScrapeMetrics(metrics_port_);
  }
  // SIGTERM (a clean shutdown: in-flight RPCs drain, dirty cached rows are written to RocksDB)
  // or SIGKILL (a crash); returns the seconds to exit.
  absl::StatusOr<double> Stop(int sig) {
    client_.reset();
    return child_->Stop(sig, absl::Minutes(10));
  }

  // The Stats RPC: its answer and its latency (it checksums every stored row).
  absl::StatusOr<std::pair<v1::StatsResponse, double>> Stats() const {
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(DeadlineFromNow(absl::Minutes(5)));
    v1::StatsResponse response;
    const Clock::time_point start = Clock::now();
    const grpc::Status status = stub->Stats(&context, v1::StatsRequest(), &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return std::make_pair(response, Seconds(Clock::now() - start));
  }

 private:
  OurServer() = default;
  std::unique_ptr<ChildProcess> child_;
  std::unique_ptr<ps::PsClient> client_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  double startup_seconds_ = 0;
};

struct RedisContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using RedisContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;
struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

absl::StatusOr<RedisContextPtr> RedisConnect(int port) {
  RedisContextPtr c(redisConnect("127.0.0.1", port));
  if (c == nullptr) return absl::ResourceExhaustedError("redisConnect: out of memory");
  if (c->err)
    return absl::UnavailableError(absl::StrCat("redis 127.0.0.1:", port, ": ", c->errstr));
  return c;
}

absl::StatusOr<RedisReplyPtr> RedisCommand(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()));
  if (reply == nullptr) return absl::UnavailableError(absl::StrCat("redis: ", c->errstr));
  return RedisReplyPtr(reply);
}

// Debian's redis-server on a free loopback port, persistence off (no RDB snapshots, no AOF),
// otherwise its stock configuration (single-threaded command execution, io-threads 1).
class RedisServer {
 public:
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(const Flags& f,
                                                            const std::string& dir) {
    std::unique_ptr<RedisServer> s(new RedisServer);
    SS_ASSIGN_OR_RETURN(s->port_, FreePort());
    // clang-format off
    const std::vector<std::string> argv = {
        f.redis_server,
        "--bind", "127.0.0.1",
        "--port", std::to_string(s->port_),
        "--save", "",            // no RDB snapshots
        "--appendonly", "no",    // no AOF
        "--daemonize", "no",
        "--dir", dir,
        "--logfile", ""};        // stdout, which Spawn sends to redis.log
    // clang-format on
    SS_ASSIGN_OR_RETURN(s->child_, ChildProcess::Spawn(argv, dir + "/redis.log"));
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
    while (true) {
      if (s->child_->Exited()) {
        return absl::InternalError(absl::StrCat("redis-server exited:\n", s->child_->LogTail()));
      }
      absl::StatusOr<RedisContextPtr> c = RedisConnect(s->port_);
      if (c.ok()) {
        absl::StatusOr<RedisReplyPtr> pong = RedisCommand(c->get(), {"PING"});
        if (pong.ok() && (*pong)->type == REDIS_REPLY_STATUS) break;
      }
      if (Clock::now() > deadline) return absl::DeadlineExceededError("redis-server startup");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return s;
  }

  int port() const { return port_; }
  pid_t pid() const { return child_->pid(); }
  absl::Status Stop() { return child_->Stop(SIGTERM, absl::Seconds(60)).status(); }
  // A field of INFO (e.g. "used_memory", "db0"); empty if absent.
  absl::StatusOr<std::string> Info(const std::string& field) const {
    SS_ASSIGN_OR_RETURN(RedisContextPtr c, RedisConnect(port_));
    SS_ASSIGN_OR_RETURN(RedisReplyPtr r, RedisCommand(c.get(), {"INFO"}));
    if (r->type != REDIS_REPLY_STRING) return absl::InternalError("INFO: not a string");
    std::istringstream in(std::string(r->str, r->len));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(field + ":", 0) == 0) {
        std::string v = line.substr(field.size() + 1);
        while (!v.empty() && (v.back() == '\r' || v.back() == '\n')) v.pop_back();
        return v;
      }
    }
    return std::string();
  }

 private:
  RedisServer() = default;
  std::unique_ptr<ChildProcess> child_;
  int port_ = 0;
};

// ---------------------------------------------------------------------------
// Clients: one Stepper per client thread runs training steps on one system.

// A fixed, finite gradient pattern; its values do not affect the cost of either system.
std::vector<float> GradientPattern(size_t floats) {
  std::vector<float> g(floats);
  for (size_t i = 0; i < floats; ++i)
    g[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 7) - 3);
  return g;
}

class Stepper {
 public:
  virtual ~Stepper() = default;
  // One training step on batch `b`: look its rows up, then push a gradient for each. Returns
  // the rows processed (lookup rows + push rows).
  virtual absl::StatusOr<int64_t> Step(int64_t b) = 0;
};

// Ours: the trainer's path, PsClient::Lookup then PsClient::Push.
class OurStepper final : public Stepper {
 public:
  OurStepper(ps::PsClient& client, const Workload& w, int dim, int batch)
      : client_(client),
        w_(w),
        dim_(dim),
        rows_(w.tables),
        grads_(w.tables),
        pattern_(GradientPattern(static_cast<size_t>(batch) * dim)) {}

  absl::StatusOr<int64_t> Step(int64_t b) override {
    int64_t n = 0;
    for (int t = 0; t < w_.tables; ++t) {
      const std::span<const uint64_t> ids = w_.Ids(b, t);
      rows_[t].ids.assign(ids.begin(), ids.end());
      n += static_cast<int64_t>(ids.size());
    }
    SS_RETURN_IF_ERROR(client_.Lookup(rows_));
    for (int t = 0; t < w_.tables; ++t) {
      grads_[t].ids = rows_[t].ids;
      grads_[t].values.assign(pattern_.begin(), pattern_.begin() + grads_[t].ids.size() * dim_);
    }
    SS_RETURN_IF_ERROR(client_.Push(grads_));
    return 2 * n;
  }

 private:
  ps::PsClient& client_;
  const Workload& w_;
  const int dim_;
  std::vector<model::TableRows> rows_, grads_;
  const std::vector<float> pattern_;
};

// Redis: per table one MGET, all 26 pipelined; the client applies the same Adagrad update the
// parameter server applies (Redis cannot), then per table one MSET of the new 128-byte rows
// (16 values + 16 Adagrad accumulators, as our rows store), all 26 pipelined. A key is 12 bytes:
// table (u32) then id (u64), little-endian. A missing key reads as the row's initial value.
class RedisStepper final : public Stepper {
 public:
  static absl::StatusOr<std::unique_ptr<RedisStepper>> Create(int port, const Workload& w,
                                                              const Flags& f) {
    SS_ASSIGN_OR_RETURN(RedisContextPtr c, RedisConnect(port));
    return std::unique_ptr<RedisStepper>(new RedisStepper(std::move(c), w, f));
  }

  absl::StatusOr<int64_t> Step(int64_t b) override {
    redisContext* c = c_.get();
    // Keys for every table, then the pipelined MGETs.
    int64_t n = 0;
    for (int t = 0; t < w_.tables; ++t) n += static_cast<int64_t>(w_.Ids(b, t).size());
    keys_.resize(static_cast<size_t>(n) * kKeyBytes);
    rows_.resize(static_cast<size_t>(n) * row_floats_);
    size_t k = 0;
    for (int t = 0; t < w_.tables; ++t) {
      for (const uint64_t id : w_.Ids(b, t)) {
        const uint32_t table = static_cast<uint32_t>(t);
        std::memcpy(&keys_[k * kKeyBytes], &table, 4);
        std::memcpy(&keys_[k * kKeyBytes + 4], &id, 8);
        ++k;
      }
    }
    k = 0;
    for (int t = 0; t < w_.tables; ++t) {
      const size_t m = w_.Ids(b, t).size();
      argv_.assign(1, "MGET");
      argvlen_.assign(1, 4);
      for (size_t i = 0; i < m; ++i, ++k) {
        argv_.push_back(&keys_[k * kKeyBytes]);
        argvlen_.push_back(kKeyBytes);
      }
      if (redisAppendCommandArgv(c, static_cast<int>(argv_.size()), argv_.data(),
                                 argvlen_.data()) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat("redis MGET: ", c->errstr));
      }
    }
    k = 0;
    for (int t = 0; t < w_.tables; ++t) {
      const std::span<const uint64_t> ids = w_.Ids(b, t);
      void* raw = nullptr;
      if (redisGetReply(c, &raw) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat("redis MGET reply: ", c->errstr));
      }
      RedisReplyPtr reply(static_cast<redisReply*>(raw));
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != ids.size()) {
        return absl::InternalError(absl::StrCat("redis MGET: unexpected reply type ", reply->type));
      }
      for (size_t i = 0; i < ids.size(); ++i, ++k) {
        float* row = &rows_[k * row_floats_];
        const redisReply* e = reply->element[i];
        if (e->type == REDIS_REPLY_STRING && e->len == row_floats_ * sizeof(float)) {
          std::memcpy(row, e->str, row_floats_ * sizeof(float));
        } else if (e->type == REDIS_REPLY_NIL) {
          model::InitEmbeddingRow(seed_, static_cast<uint32_t>(t), ids[i], hash_buckets_,
                                  std::span<float>(row, dim_));
          std::fill(row + dim_, row + row_floats_, 0.0f);
        } else {
          return absl::InternalError(
              absl::StrCat("redis MGET: element of type ", e->type, " and length ", e->len));
        }
      }
    }
    // The update, then the pipelined MSETs.
    for (size_t r = 0; r < static_cast<size_t>(n); ++r) {
      float* row = &rows_[r * row_floats_];
      model::ApplyUpdateExclusive(optimizer_, row, row + dim_, pattern_.data(), dim_);
    }
    k = 0;
    for (int t = 0; t < w_.tables; ++t) {
      const size_t m = w_.Ids(b, t).size();
      argv_.assign(1, "MSET");
      argvlen_.assign(1, 4);
      for (size_t i = 0; i < m; ++i, ++k) {
        argv_.push_back(&keys_[k * kKeyBytes]);
        argvlen_.push_back(kKeyBytes);
        argv_.push_back(reinterpret_cast<const char*>(&rows_[k * row_floats_]));
        argvlen_.push_back(row_floats_ * sizeof(float));
      }
      if (redisAppendCommandArgv(c, static_cast<int>(argv_.size()), argv_.data(),
                                 argvlen_.data()) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat("redis MSET: ", c->errstr));
      }
    }
    for (int t = 0; t < w_.tables; ++t) {
      void* raw = nullptr;
      if (redisGetReply(c, &raw) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat("redis MSET reply: ", c->errstr));
      }
      RedisReplyPtr reply(static_cast<redisReply*>(raw));
      if (reply->type != REDIS_REPLY_STATUS) {
        return absl::InternalError(absl::StrCat("redis MSET: unexpected reply type ", reply->type));
      }
    }
    return 2 * n;
  }

 private:
  static constexpr size_t kKeyBytes = 12;

  RedisStepper(RedisContextPtr c, const Workload& w, const Flags& f)
      : c_(std::move(c)),
        w_(w),
        dim_(f.dim),
        row_floats_(2 * static_cast<size_t>(f.dim)),
        seed_(f.seed),
        hash_buckets_(static_cast<uint64_t>(f.ids)),
        pattern_(GradientPattern(static_cast<size_t>(f.dim))) {
    optimizer_.kind = model::OptimizerKind::kAdagrad;
  }

  RedisContextPtr c_;
  const Workload& w_;
  const int dim_;
  const size_t row_floats_;
  const uint64_t seed_;
  const uint64_t hash_buckets_;
  const std::vector<float> pattern_;
  model::OptimizerConfig optimizer_;
  std::vector<char> keys_;
  std::vector<float> rows_;
  std::vector<const char*> argv_;
  std::vector<size_t> argvlen_;
};

// ---------------------------------------------------------------------------
// Runs.

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
                              const Workload& w, const MakeStepper& make, pid_t server_pid) {
  std::vector<std::unique_ptr<Stepper>> steppers;
  for (int i = 0; i < threads; ++i) {
    SS_ASSIGN_OR_RETURN(std::unique_ptr<Stepper> s, make());
    steppers.push_back(std::move(s));
  }
  struct PerThread {
    int64_t rows = 0, steps = 0;
    std::vector<float> latency_ms;
    absl::Status status;
    Clock::time_point end;
  };
  std::vector<PerThread> per(static_cast<size_t>(threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point start, deadline;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      PerThread& p = per[i];
      p.latency_ms.reserve(1 << 16);
      const int64_t first = i * w.batches / threads;
      const int64_t last = seconds > 0 ? INT64_MAX : (i + 1) * w.batches / threads;
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (int64_t k = first; k < last; ++k) {
        const Clock::time_point t0 = Clock::now();
        if (seconds > 0 && t0 >= deadline) break;
        absl::StatusOr<int64_t> rows = steppers[i]->Step(k % w.batches);
        if (!rows.ok()) {
          p.status = rows.status();
          break;
        }
        p.rows += *rows;
        ++p.steps;
        p.latency_ms.push_back(static_cast<float>(Seconds(Clock::now() - t0) * 1e3));
      }
      p.end = Clock::now();
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const double server_cpu0 = ProcCpuSeconds(server_pid);
  const double client_cpu0 = SelfCpuSeconds();
  start = Clock::now();
  deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go.store(true, std::memory_order_release);
  for (std::thread& t : pool) t.join();

  RunResult r;
  r.system = system;
  r.threads = threads;
  r.server_cpu = ProcCpuSeconds(server_pid) - server_cpu0;
  r.client_cpu = SelfCpuSeconds() - client_cpu0;
  Clock::time_point end = start;
  std::vector<float> latency;
  for (PerThread& p : per) {
    if (!p.status.ok()) return p.status;
    r.rows += p.rows;
    r.steps += p.steps;
    end = std::max(end, p.end);
    latency.insert(latency.end(), p.latency_ms.begin(), p.latency_ms.end());
  }
  r.seconds = Seconds(end - start);
  if (!latency.empty()) {
    std::sort(latency.begin(), latency.end());
    r.p50_ms = latency[latency.size() / 2];
    r.p99_ms = latency[std::min(latency.size() - 1, latency.size() * 99 / 100)];
  }
  return r;
}

// A run against our server, with the cache hit ratio and the server's row counters read from
// its /metrics (the RowStoreStats that Stats reports) before and after.
// With --perf-dir and a `profile` name, the server is profiled during the run (perf record
// with DWARF call graphs, which costs the server a few percent) into PERF_DIR/PROFILE.data.
absl::StatusOr<RunResult> RunOurs(OurServer& server, int threads, double seconds, const Workload& w,
                                  const Flags& f, const std::string& profile = "") {
  SS_ASSIGN_OR_RETURN(auto before, server.Metrics());
  MakeStepper make = [&]() -> absl::StatusOr<std::unique_ptr<Stepper>> {
    return std::make_unique<OurStepper>(server.client(), w, f.dim, f.batch);
  };
  std::unique_ptr<ChildProcess> perf;
  if (!f.perf_dir.empty() && !profile.empty()) {
    fs::create_directories(f.perf_dir);
    const std::string out = (fs::path(f.perf_dir) / (profile + ".data")).string();
    SS_ASSIGN_OR_RETURN(
        perf, ChildProcess::Spawn({"/usr/bin/perf", "record", "-F", "499", "--call-graph",
                                   "dwarf,16384", "-p", std::to_string(server.pid()), "-o", out},
                                  out + ".log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // Let it attach.
  }
  SS_ASSIGN_OR_RETURN(RunResult r, Run("ours", threads, seconds, w, make, server.pid()));
  if (perf != nullptr) SS_RETURN_IF_ERROR(perf->Stop(SIGINT, absl::Minutes(5)).status());
  SS_ASSIGN_OR_RETURN(auto after, server.Metrics());
  auto delta = [&](const std::string& name) { return after[name] - before[name]; };
  const double hits = delta("shadowsync_ps_cache_hits_total");
  const double misses = delta("shadowsync_ps_cache_misses_total");
  if (hits + misses > 0) r.hit_ratio = hits / (hits + misses);
  r.server_lookup_rows = static_cast<int64_t>(delta("shadowsync_ps_lookup_rows_total"));
  r.server_push_rows = static_cast<int64_t>(delta("shadowsync_ps_push_rows_total"));
  return r;
}

absl::StatusOr<RunResult> RunRedis(RedisServer& server, int threads, double seconds,
                                   const Workload& w, const Flags& f) {
  MakeStepper make = [&]() -> absl::StatusOr<std::unique_ptr<Stepper>> {
    SS_ASSIGN_OR_RETURN(auto s, RedisStepper::Create(server.port(), w, f));
    return std::unique_ptr<Stepper>(std::move(s));
  };
  return Run("redis", threads, seconds, w, make, server.pid());
}

std::string Fmt(double v, const char* fmt = "%.4g") {
  return std::isfinite(v) ? absl::StrFormat(fmt, v) : "nan";
}

void PrintHeader() {
  std::cout << absl::StrFormat("%-22s %3s %12s %8s %8s %8s %8s %9s %9s %8s\n", "run", "thr",
                               "rows/s", "steps/s", "p50_ms", "p99_ms", "srv_cpu", "cli_cpu",
                               "rows/srvcpu", "hit");
}

void PrintRun(const std::string& label, const RunResult& r) {
  const double rows_per_cpu = r.server_cpu > 0 ? static_cast<double>(r.rows) / r.server_cpu : 0;
  std::cout << absl::StrFormat("%-22s %3d %12.0f %8.1f %8.2f %8.2f %8.2f %9.2f %9.0f %8s\n", label,
                               r.threads, r.rows_per_s(), static_cast<double>(r.steps) / r.seconds,
                               r.p50_ms, r.p99_ms, r.server_cpu / r.seconds,
                               r.client_cpu / r.seconds, rows_per_cpu,
                               r.hit_ratio ? Fmt(*r.hit_ratio, "%.4f") : "-");
  std::cout.flush();
}

double Median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Hit ratio pooled over runs (total hits / total probes, weighting each run by its work).
double PooledHitRatio(const std::vector<RunResult>& runs) {
  double hits = 0, probes = 0;
  for (const RunResult& r : runs) {
    if (!r.hit_ratio) continue;
    const double p = static_cast<double>(r.server_lookup_rows + r.server_push_rows);
    hits += *r.hit_ratio * p;
    probes += p;
  }
  return probes > 0 ? hits / probes : std::nan("");
}

double Mib(int64_t kb) { return kb < 0 ? std::nan("") : static_cast<double>(kb) / 1024.0; }

// ---------------------------------------------------------------------------

absl::Status Main(const Flags& f) {
  std::map<std::string, std::string> result;  // RESULT keys beyond the required four
  const fs::path work(f.work_dir);
  fs::create_directories(work);
  const std::string main_db = (work / "main_db").string();
  const std::string load_db = (work / "load_db").string();
  fs::remove_all(main_db);
  fs::remove_all(load_db);
  fs::remove_all(work / "redis");
  fs::create_directories(work / "redis");

  std::cout << absl::StrFormat(
      "ps benchmark: dim=%d tables=%d batch=%d ids=Zipf(%.2f) over %d, stream=%d batches, "
      "%.0fs per timed run, %d repeats (median), seed=%d\n",
      f.dim, f.tables, f.batch, f.zipf, f.ids, f.batches, f.seconds, f.repeats, f.seed);
  std::cout << "  ours: " << f.shadowsync << " ps (child process, adagrad, cache " << f.cache_mib
            << " MiB); redis: " << f.redis_server
            << " (child process, --save '' --appendonly no); machine: "
            << std::thread::hardware_concurrency() << " cores\n";

  // ---- The id stream.
  const Workload w = MakeWorkload(f);
  int64_t stream_rows = 0;
  for (int64_t n : w.batch_rows) stream_rows += n;
  const double unique_per_step = static_cast<double>(stream_rows) / static_cast<double>(w.batches);
  const double p1 = ZipfRank1Probability(f.ids, f.zipf);
  std::cout << absl::StrFormat(
      "stream: %d draws in %.2fs (%.1f M samples/s; %.2fs with de-dup), P(rank 1) = %.4f "
      "(exact %.4f)\n"
      "  %.0f unique rows per step (of %d ids), %d distinct rows in the stream\n",
      w.draws, w.sample_seconds, w.draws / w.sample_seconds / 1e6, w.total_seconds,
      w.rank1_fraction, p1, unique_per_step, f.tables * f.batch, w.distinct_rows);
  // The sampler is not on the timed path (the stream is precomputed); at this rate a step's
  // draws would cost tables * batch / rate seconds, compared here with the steps we measure.
  result["sampler_us_per_step"] =
      Fmt(1e6 * f.tables * f.batch * w.sample_seconds / static_cast<double>(w.draws), "%.1f");

  // ---- Servers and warm-up.
  SS_ASSIGN_OR_RETURN(auto redis, RedisServer::Start(f, (work / "redis").string()));
  SS_ASSIGN_OR_RETURN(auto ours, OurServer::Start(f, main_db, f.cache_mib << 20,
                                                  (work / "ours_main.log").string()));
  LOG(INFO) << "ours at " << ours->address() << " (pid " << ours->pid()
            << "), redis at 127.0.0.1:" << redis->port() << " (pid " << redis->pid() << ")";
  std::cout << "\nwarm-up: one pass over the stream, 2 threads (first touch: rows are created)\n";
  PrintHeader();
  {
    SS_ASSIGN_OR_RETURN(RunResult r, RunOurs(*ours, 2, 0, w, f));
    PrintRun("warm ours", r);
    SS_ASSIGN_OR_RETURN(RunResult q, RunRedis(*redis, 2, 0, w, f));
    PrintRun("warm redis", q);
  }

  // ---- Timed runs, interleaved; the order alternates each repeat so drifts hit both alike.
  std::cout << "\ntimed runs (" << f.seconds << "s each)\n";
  PrintHeader();
  std::map<std::pair<std::string, int>, std::vector<RunResult>> runs;
  for (int rep = 0; rep < f.repeats; ++rep) {
    for (int threads : {1, 2}) {
      const bool ours_first = (rep + threads) % 2 == 1;
      for (int k = 0; k < 2; ++k) {
        const bool run_ours = (k == 0) == ours_first;
        RunResult r;
        if (run_ours) {
          SS_ASSIGN_OR_RETURN(r, RunOurs(*ours, threads, f.seconds, w, f,
                                         rep == 0 ? absl::StrCat("main_", threads, "t") : ""));
        } else {
          SS_ASSIGN_OR_RETURN(r, RunRedis(*redis, threads, f.seconds, w, f));
        }
        PrintRun(absl::StrCat(r.system, " #", rep + 1), r);
        runs[{r.system, threads}].push_back(r);
      }
    }
  }
  auto median_rate = [&](const std::string& system, int threads) {
    std::vector<double> v;
    for (const RunResult& r : runs[{system, threads}]) v.push_back(r.rows_per_s());
    return Median(v);
  };
  auto best_rate = [&](const std::string& system, int threads) {
    double b = 0;
    for (const RunResult& r : runs[{system, threads}]) b = std::max(b, r.rows_per_s());
    return b;
  };
  const double ours1 = median_rate("ours", 1), redis1 = median_rate("redis", 1);
  const double ours2 = median_rate("ours", 2), redis2 = median_rate("redis", 2);
  const double hit1 = PooledHitRatio(runs[{"ours", 1}]);
  const double hit2 = PooledHitRatio(runs[{"ours", 2}]);
  std::cout << absl::StrFormat(
      "\nmedian rows/s (best in brackets): ours %.0f (%.0f) redis %.0f (%.0f) ratio %.3f at 1 "
      "thread; ours %.0f (%.0f) redis %.0f (%.0f) ratio %.3f at 2 threads\n",
      ours1, best_rate("ours", 1), redis1, best_rate("redis", 1), ours1 / redis1, ours2,
      best_rate("ours", 2), redis2, best_rate("redis", 2), ours2 / redis2);
  std::cout << absl::StrFormat("cache hit ratio during the timed runs: %.4f (1 thread), %.4f (2)\n",
                               hit1, hit2);
  {
    // The server's own row counts against ours: the same definition on both sides.
    int64_t client = 0, server = 0;
    for (const RunResult& r : runs[{"ours", 1}]) {
      client += r.rows;
      server += r.server_lookup_rows + r.server_push_rows;
    }
    std::cout << "rows counted by the client " << client << ", by the server (lookup_rows + "
              << "push_rows) " << server << "\n";
  }
  result["ours_rows_per_s_2t"] = Fmt(ours2, "%.0f");
  result["redis_rows_per_s_2t"] = Fmt(redis2, "%.0f");
  result["ratio_2t"] = Fmt(ours2 / redis2, "%.3f");
  result["hit_ratio_2t"] = Fmt(hit2, "%.4f");

  // Memory holding the stream's working set, and the Stats RPC (which checksums every row).
  {
    const int64_t ours_rss = ProcStatusKb(ours->pid(), "VmRSS");
    const int64_t redis_rss = ProcStatusKb(redis->pid(), "VmRSS");
    SS_ASSIGN_OR_RETURN(auto stats, ours->Stats());
    SS_ASSIGN_OR_RETURN(std::string keys, redis->Info("db0"));
    std::cout << absl::StrFormat(
        "working set: ours %d rows stored (%d cached), RSS %.0f MiB; redis %s, RSS %.0f MiB\n"
        "Stats RPC: cumulative hit ratio %.4f (includes warm-up), took %.2fs (checksums every "
        "row)\n",
        stats.first.rows_stored(), stats.first.cached_rows(), Mib(ours_rss), keys, Mib(redis_rss),
        stats.first.cache_hit_ratio(), stats.second);
    result["rss_mb_working_set"] = Fmt(Mib(ours_rss), "%.0f");
    result["redis_rss_mb_working_set"] = Fmt(Mib(redis_rss), "%.0f");
    result["stats_rpc_seconds"] = Fmt(stats.second, "%.2f");
  }
  SS_RETURN_IF_ERROR(redis->Stop());
  redis.reset();

  // ---- Cache off: every row read from and written to RocksDB.
  if (!f.skip_cache_off) {
    SS_ASSIGN_OR_RETURN(const double stop_s, ours->Stop(SIGTERM));
    ours.reset();
    SS_ASSIGN_OR_RETURN(ours,
                        OurServer::Start(f, main_db, 0, (work / "ours_nocache.log").string()));
    std::cout << absl::StrFormat(
        "\ncache off (--cache-bytes 0; RocksDB block cache 64 MiB): shutdown %.2fs, restart %.2fs "
        "with %d rows\n",
        stop_s, ours->startup_seconds(), w.distinct_rows);
    PrintHeader();
    SS_ASSIGN_OR_RETURN(RunResult warm, RunOurs(*ours, 2, std::min(f.seconds, 5.0), w, f));
    PrintRun("warm ours (no cache)", warm);
    std::vector<double> one, two;
    for (int rep = 0; rep < f.repeats; ++rep) {
      for (int threads : {1, 2}) {
        SS_ASSIGN_OR_RETURN(RunResult r,
                            RunOurs(*ours, threads, f.seconds, w, f,
                                    rep == 0 ? absl::StrCat("nocache_", threads, "t") : ""));
        PrintRun(absl::StrCat("ours no-cache #", rep + 1), r);
        (threads == 1 ? one : two).push_back(r.rows_per_s());
      }
    }
    result["cache_off_rows_per_s"] = Fmt(Median(one), "%.0f");
    result["cache_off_rows_per_s_2t"] = Fmt(Median(two), "%.0f");
    std::cout << absl::StrFormat("cache off median rows/s: %.0f (1 thread), %.0f (2 threads)\n",
                                 Median(one), Median(two));
  }

  // ---- Hit ratio against cache size: restart with each size, one warm pass, one timed run.
  if (!f.skip_sweep) {
    std::cout << "\nhit ratio against cache size (restart, one warm pass, then one timed run at "
                 "1 thread; "
              << w.distinct_rows << " distinct rows of 128 B + 57 B cache overhead)\n";
    PrintHeader();
    std::vector<std::string> sizes = absl::StrSplit(f.sweep_mib, ',', absl::SkipEmpty());
    for (const std::string& size : sizes) {
      const int64_t mib = std::atoll(size.c_str());
      SS_RETURN_IF_ERROR(ours->Stop(SIGTERM).status());
      ours.reset();
      SS_ASSIGN_OR_RETURN(
          ours, OurServer::Start(f, main_db, mib << 20, (work / "ours_sweep.log").string()));
      SS_ASSIGN_OR_RETURN(RunResult warm, RunOurs(*ours, 2, 0, w, f));
      PrintRun(absl::StrCat("warm ", mib, " MiB"), warm);
      SS_ASSIGN_OR_RETURN(RunResult r,
                          RunOurs(*ours, 1, f.seconds, w, f, absl::StrCat("cache_", mib, "mib")));
      PrintRun(absl::StrCat("ours cache ", mib, " MiB"), r);
      result[absl::StrCat("hit_ratio_", mib, "mib")] = Fmt(r.hit_ratio.value_or(0), "%.4f");
      result[absl::StrCat("rows_per_s_", mib, "mib")] = Fmt(r.rows_per_s(), "%.0f");
    }
  }
  SS_RETURN_IF_ERROR(ours->Stop(SIGTERM).status());
  ours.reset();

  // ---- 10M rows: load, resident memory, crash and clean restarts.
  if (f.load_rows > 0) {
    std::cout << "\nload " << f.load_rows << " distinct rows (pushes of " << f.load_batch_rows
              << " rows, 2 threads) into a fresh server, cache " << f.load_cache_mib << " MiB\n";
    SS_ASSIGN_OR_RETURN(ours, OurServer::Start(f, load_db, f.load_cache_mib << 20,
                                               (work / "ours_load.log").string()));
    // Row r is (table r % tables, id r / tables): every id below ids, none repeated.
    const int64_t per_push = f.load_batch_rows;
    const int64_t pushes = (f.load_rows + per_push - 1) / per_push;
    std::atomic<int64_t> next{0};
    absl::Status failed;
    Mutex failed_mu;
    const double cpu0 = ProcCpuSeconds(ours->pid());
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < 2; ++i) {
      pool.emplace_back([&] {
        std::vector<model::TableRows> grads(f.tables);
        const std::vector<float> pattern =
            GradientPattern(static_cast<size_t>(per_push / f.tables + 1) * f.dim);
        for (int64_t p; (p = next.fetch_add(1)) < pushes;) {
          for (auto& g : grads) g.ids.clear();
          const int64_t end = std::min(f.load_rows, (p + 1) * per_push);
          for (int64_t r = p * per_push; r < end; ++r) {
            grads[r % f.tables].ids.push_back(static_cast<uint64_t>(r / f.tables));
          }
          for (auto& g : grads) {
            g.values.assign(pattern.begin(), pattern.begin() + g.ids.size() * f.dim);
          }
          if (absl::Status s = ours->client().Push(grads); !s.ok()) {
            MutexLock l(&failed_mu);
            failed = s;
            return;
          }
        }
      });
    }
    for (std::thread& t : pool) t.join();
    SS_RETURN_IF_ERROR(failed);
    const double load_s = Seconds(Clock::now() - start);
    const double load_cpu = ProcCpuSeconds(ours->pid()) - cpu0;
    SS_ASSIGN_OR_RETURN(auto m, ours->Metrics());
    const int64_t rss = ProcStatusKb(ours->pid(), "VmRSS");
    const int64_t hwm = ProcStatusKb(ours->pid(), "VmHWM");
    std::cout << absl::StrFormat(
        "loaded %.0f rows in %.1fs: %.0f rows/s (server %.2f cores); rows_stored %.0f; "
        "RSS %.0f MiB (peak %.0f MiB)\n",
        static_cast<double>(f.load_rows), load_s, f.load_rows / load_s, load_cpu / load_s,
        m["shadowsync_ps_rows_stored"], Mib(rss), Mib(hwm));

    // A crash: SIGKILL, then a restart replays the redo log.
    SS_RETURN_IF_ERROR(ours->Stop(SIGKILL).status());
    ours.reset();
    SS_ASSIGN_OR_RETURN(ours, OurServer::Start(f, load_db, f.load_cache_mib << 20,
                                               (work / "ours_load.log").string()));
    const double crash_restart = ours->startup_seconds();
    SS_ASSIGN_OR_RETURN(auto m2, ours->Metrics());
    // A clean shutdown and restart.
    SS_ASSIGN_OR_RETURN(const double shutdown_s, ours->Stop(SIGTERM));
    ours.reset();
    SS_ASSIGN_OR_RETURN(ours, OurServer::Start(f, load_db, f.load_cache_mib << 20,
                                               (work / "ours_load.log").string()));
    const double restart = ours->startup_seconds();
    // The first lookup after the restart: cold cache, rows from RocksDB.
    std::vector<model::TableRows> rows(f.tables);
    for (int t = 0; t < f.tables; ++t) {
      for (uint64_t id = 0; id < static_cast<uint64_t>(f.batch); ++id)
        rows[t].ids.push_back(id * 977);
    }
    const Clock::time_point l0 = Clock::now();
    SS_RETURN_IF_ERROR(ours->client().Lookup(rows));
    const double first_lookup_ms = Seconds(Clock::now() - l0) * 1e3;
    SS_ASSIGN_OR_RETURN(auto m3, ours->Metrics());
    const int64_t rss_restart = ProcStatusKb(ours->pid(), "VmRSS");
    int64_t db_bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(load_db)) {
      if (e.is_regular_file()) db_bytes += static_cast<int64_t>(e.file_size());
    }
    std::cout << absl::StrFormat(
        "restart after SIGKILL (redo-log replay): %.2fs, rows_stored %.0f\n"
        "clean shutdown (SIGTERM) %.2fs, restart %.2fs, rows_stored %.0f, first lookup of %d "
        "rows %.1f ms, RSS after restart %.0f MiB; database %.0f MiB on disk\n",
        crash_restart, m2["shadowsync_ps_rows_stored"], shutdown_s, restart,
        m3["shadowsync_ps_rows_stored"], f.tables * f.batch, first_lookup_ms, Mib(rss_restart),
        static_cast<double>(db_bytes) / (1 << 20));
    SS_RETURN_IF_ERROR(ours->Stop(SIGTERM).status());
    ours.reset();
    result["load_rows_per_s"] = Fmt(f.load_rows / load_s, "%.0f");
    result["rss_mb_10m"] = Fmt(Mib(rss), "%.0f");
    result["restart_seconds"] = Fmt(restart, "%.2f");
    result["crash_restart_seconds"] = Fmt(crash_restart, "%.2f");
    result["shutdown_seconds"] = Fmt(shutdown_s, "%.2f");
    result["rows_10m_after_crash"] = Fmt(m2["shadowsync_ps_rows_stored"], "%.0f");
  }

  if (!f.keep_dbs) {
    fs::remove_all(main_db);
    fs::remove_all(load_db);
  }
  std::cout << "logs: " << f.work_dir << "\n";
  std::string extra;
  for (const auto& [k, v] : result) absl::StrAppend(&extra, " ", k, "=", v);
  std::cout << absl::StrFormat(
                   "RESULT name=ps ours_rows_per_s=%s redis_rows_per_s=%s ratio=%s "
                   "hit_ratio=%s",
                   Fmt(ours1, "%.0f"), Fmt(redis1, "%.0f"), Fmt(ours1 / redis1, "%.3f"),
                   Fmt(hit1, "%.4f"))
            << extra << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace shadowsync::bench

int main(int argc, char** argv) {
  // Our clients run as the trainer's do (cli.cc).
  shadowsync::DisableMutexDeadlockDetection();
  shadowsync::InitLogging(argv[0]);
  shadowsync::bench::Flags f;
  CLI::App app("Parameter-server throughput against Redis (bench/ps.sh runs it).");
  app.add_option("--work-dir", f.work_dir, "databases and logs go here")->required();
  app.add_option("--shadowsync", f.shadowsync, "the shadowsync binary (default: next to this one)");
  app.add_option("--redis-server", f.redis_server, "redis-server binary")->capture_default_str();
  app.add_option("--tables", f.tables, "tables per batch")->capture_default_str();
  app.add_option("--batch", f.batch, "ids per table per batch")->capture_default_str();
  app.add_option("--dim", f.dim, "embedding dimension")->capture_default_str();
  app.add_option("--ids", f.ids, "distinct ids per table (Zipf support)")->capture_default_str();
  app.add_option("--zipf", f.zipf, "Zipf exponent")->capture_default_str();
  app.add_option("--batches", f.batches, "batches in the precomputed stream")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "stream and row-init seed")->capture_default_str();
  app.add_option("--seconds", f.seconds, "length of each timed run")->capture_default_str();
  app.add_option("--repeats", f.repeats, "timed runs per configuration (median)")
      ->capture_default_str();
  app.add_option("--cache-mib", f.cache_mib, "our cache size for the main runs, MiB")
      ->capture_default_str();
  app.add_option("--sweep-mib", f.sweep_mib, "cache sizes for the hit-ratio sweep, MiB")
      ->capture_default_str();
  app.add_flag("--skip-cache-off", f.skip_cache_off, "skip the RocksDB-only runs");
  app.add_flag("--skip-sweep", f.skip_sweep, "skip the cache-size sweep");
  app.add_option("--load-rows", f.load_rows, "rows for the load/RSS/restart test (0: skip)")
      ->capture_default_str();
  app.add_option("--load-cache-mib", f.load_cache_mib, "our cache size for the load test, MiB")
      ->capture_default_str();
  app.add_option("--load-batch-rows", f.load_batch_rows, "rows per push while loading")
      ->capture_default_str();
  app.add_flag("--keep-dbs", f.keep_dbs, "keep the databases in --work-dir");
  app.add_option("--perf-dir", f.perf_dir,
                 "profile the server with perf during the first timed run of each kind "
                 "(slows those runs a little)");
  CLI11_PARSE(app, argc, argv);
  if (f.shadowsync.empty()) {
    f.shadowsync =
        (std::filesystem::canonical("/proc/self/exe").parent_path() / "shadowsync").string();
  }
  if (f.repeats < 1 || f.seconds <= 0 || f.batches < 2 || f.tables < 1 || f.batch < 1) {
    LOG(ERROR) << "ps_bench: --repeats >= 1, --seconds > 0, --batches >= 2, --tables and --batch "
                  ">= 1";
    return 2;
  }
  const absl::Status s = shadowsync::bench::Main(f);
  if (!s.ok()) {
    LOG(ERROR) << "ps_bench: " << s;
    return 1;
  }
  return 0;
}
