// ps_bench (bench/ps_bench_internal.h): our parameter server, `shadowsync ps` as a child
// process, its /metrics, and a training step the trainer's way.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/ps_bench_internal.h"
#include "common/grpc_util.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "model/embedding_table.h"
#include "ps/client/ps_client.h"
#include "shadowsync/v1/ps.grpc.pb.h"

namespace shadowsync::bench::internal {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

absl::StatusOr<std::unique_ptr<OurServer>> OurServer::Start(const Flags& f, const std::string& db,
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

std::string OurServer::address() const { return absl::StrCat("127.0.0.1:", grpc_port_); }

absl::StatusOr<std::map<std::string, double>> OurServer::Metrics() const {
  return ScrapeMetrics(metrics_port_);
}

absl::StatusOr<double> OurServer::Stop(int sig) {
  client_.reset();
  return child_->Stop(sig, absl::Minutes(10));
}

absl::StatusOr<std::pair<v1::StatsResponse, double>> OurServer::Stats() const {
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

absl::StatusOr<RunResult> RunOurs(OurServer& server, int threads, double seconds, const Workload& w,
                                  const Flags& f, const std::string& profile) {
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

}  // namespace shadowsync::bench::internal
