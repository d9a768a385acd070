// ps_bench (bench/ps_bench_internal.h): the peer, Debian's redis-server as a child process
// driven through hiredis, and a training step as a Redis client would run it.

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/ps_bench_internal.h"
#include "common/status_macros.h"
#include "model/embedding_table.h"
#include "model/optimizer.h"

namespace shadowsync::bench::internal {
namespace {

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

}  // namespace

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(const Flags& f,
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

absl::Status RedisServer::Stop() { return child_->Stop(SIGTERM, absl::Seconds(60)).status(); }

absl::StatusOr<std::string> RedisServer::Info(const std::string& field) const {
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

absl::StatusOr<RunResult> RunRedis(RedisServer& server, int threads, double seconds,
                                   const Workload& w, const Flags& f) {
  MakeStepper make = [&]() -> absl::StatusOr<std::unique_ptr<Stepper>> {
    SS_ASSIGN_OR_RETURN(auto s, RedisStepper::Create(server.port(), w, f));
    return std::unique_ptr<Stepper>(std::move(s));
  };
  return Run("redis", threads, seconds, w, make, server.pid());
}

}  // namespace shadowsync::bench::internal
