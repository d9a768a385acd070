// Load on `shadowsync serve` (issue 27): a real serve process, driven over
// loopback by keep-alive HTTP clients sending KServe v2 infer requests (the
// `dense` and `sparse` tensors of the examples of --data).
//
//   serve_bench --shadowsync PATH --exports DIR --data TSV --work-dir DIR
//               [--threads 2] [--points 1x1,8x1,64x1,1x64,8x64,64x64] [--seconds 10]
//               [--swaps 10] [--swap-point 64x64]
//               [--load-seconds 0] [--load-clients 64] [--invalid-fraction 0.2]
//               [--max-rss-growth 0.02] [--max-p50-ms 0]
//
// --exports holds model-000001 and model-000002, trained on different numbers
// of examples; the bench writes its LATEST. Phases:
//   1. points: at each CxB, C clients send requests of B examples back to back
//      for --seconds after a warm-up; requests/s, examples/s, p50 and p99 ms.
//   2. swaps: at --swap-point, LATEST flips from one export to the other
//      --swaps times, each time waiting until /v2/models/ctr reports the new
//      version; every request that fails meanwhile is counted.
//   3. load (--load-seconds > 0): --load-clients clients, --invalid-fraction
//      of their requests invalid (malformed JSON, a wrong tensor name, a wrong
//      shape, an overflowing dense value, an oversize body). No valid request
//      may fail, every invalid one must be refused, and serve's resident
//      memory must grow by at most --max-rss-growth over the load's second
//      half. The first half lets the allocator settle at this concurrency
//      (a 180 s run grew 10.5% in its first half, 0.2% in its second); a
//      leak keeps growing.
// Exit status 1 if a check fails. The last line is machine-readable:
//   RESULT name=serve_http qps_c64_b64=.. eps_c64_b64=.. p50_ms_c64_b64=.. p99_ms_c64_b64=..
//          ... swap_failed_requests=.. [load_valid=.. load_valid_failed=.. ...]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace shadowsync::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Flags {
  std::string shadowsync;
  std::string exports;
  std::string data;
  std::string work_dir;
  int threads = 2;
  std::string points = "1x1,8x1,64x1,1x64,8x64,64x64";
  double seconds = 10;
  double warmup_seconds = 2;
  int swaps = 10;
  std::string swap_point = "64x64";
  double load_seconds = 0;
  int load_clients = 64;
  double invalid_fraction = 0.2;
  double max_rss_growth = 0.02;  // Over the load's second half.
  double max_p50_ms = 0;         // 0: no bound.
  std::vector<std::string> serve_args;
};

// One keep-alive HTTP/1.1 connection to 127.0.0.1:port, reopened when the
// server closes it. Not thread-safe: one per client thread.
class Connection {
 public:
  explicit Connection(int port) : port_(port) {}
  ~Connection() { Close(); }

  // The status code, or -1 if the exchange failed at the transport.
  int Request(const std::string& method, const std::string& path, const std::string& body,
              std::string* response) {
    if (fd_ < 0 && !Connect()) return -1;
    const std::string head = absl::StrCat(
        method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ", body.size(),
        "\r\nContent-Type: application/json\r\n\r\n");
    if (!SendAll(head) || !SendAll(body)) {
      Close();
      return -1;
    }
    size_t header_end;
    while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Receive()) return -1;
    }
    const std::string head_text = absl::AsciiStrToLower(buffer_.substr(0, header_end));
    int code = -1;
    if (head_text.size() < 12 || !absl::SimpleAtoi(head_text.substr(9, 3), &code)) {
      Close();
      return -1;
    }
    size_t length = 0;
    if (size_t at = head_text.find("\r\ncontent-length:"); at != std::string::npos) {
      length = std::strtoul(head_text.c_str() + at + 17, nullptr, 10);
    }
    const bool close = head_text.find("\r\nconnection: close") != std::string::npos;
    while (buffer_.size() < header_end + 4 + length) {
      if (!Receive()) return -1;
    }
    response->assign(buffer_, header_end + 4, length);
    buffer_.erase(0, header_end + 4 + length);
    if (close) Close();
    return code;
  }

 private:
  bool Connect() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeval timeout{.tv_sec = 30, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Close();
      return false;
    }
    return true;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    buffer_.clear();
  }
  bool SendAll(const std::string& data) {
    for (size_t sent = 0; sent < data.size();) {
      const ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  bool Receive() {
    char chunk[1 << 15];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      Close();
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  const int port_;
  int fd_ = -1;
  std::string buffer_;
};

// The examples of the data file as v2 tensors: dense [13] and sparse [26]
// per example, as a client holding raw features sends them.
struct Examples {
  std::vector<std::vector<int64_t>> dense, sparse;
};

absl::StatusOr<Examples> ReadExamples(const std::string& path, size_t max) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  Examples out;
  for (std::string line; out.dense.size() < max && std::getline(in, line);) {
    const std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() != 40) continue;
    std::vector<int64_t> dense(13), sparse(26);
    for (int i = 0; i < 13; ++i) {
      if (!f[1 + i].empty() && !absl::SimpleAtoi(f[1 + i], &dense[i])) dense[i] = 0;
    }
    for (int i = 0; i < 26; ++i) {
      uint64_t id = 0;
      sparse[i] =
          f[14 + i].empty() || !absl::SimpleHexAtoi(f[14 + i], &id) ? -1 : static_cast<int64_t>(id);
    }
    out.dense.push_back(std::move(dense));
    out.sparse.push_back(std::move(sparse));
  }
  if (out.dense.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no examples"));
  return out;
}

// Request bodies of `batch` examples each, over the examples in turn.
std::vector<std::string> Bodies(const Examples& examples, int batch, int count) {
  std::vector<std::string> bodies;
  const size_t n = examples.dense.size();
  for (int r = 0; r < count; ++r) {
    Json dense = Json::array(), sparse = Json::array();
    for (int e = 0; e < batch; ++e) {
      const size_t i = (static_cast<size_t>(r) * batch + e) % n;
      for (int64_t v : examples.dense[i]) dense.push_back(v);
      for (int64_t v : examples.sparse[i]) sparse.push_back(v);
    }
    bodies.push_back(Json({{"inputs",
                            {{{"name", "dense"},
                              {"datatype", "INT64"},
                              {"shape", {batch, 13}},
                              {"data", std::move(dense)}},
                             {{"name", "sparse"},
                              {"datatype", "INT64"},
                              {"shape", {batch, 26}},
                              {"data", std::move(sparse)}}}}})
                         .dump());
  }
  return bodies;
}

// Invalid requests, each of a kind the server must refuse with 400.
std::vector<std::string> InvalidBodies(const std::string& valid, int64_t max_body_bytes) {
  Json wrong_name = Json::parse(valid), wrong_shape = Json::parse(valid),
       overflow = Json::parse(valid);
  wrong_name["inputs"][1]["name"] = "ids";
  wrong_shape["inputs"][0]["shape"] = {1, 12};
  std::string huge = overflow.dump();
  huge.replace(huge.find("\"data\":[") + 8, 0, "1e999,");  // Too large for a double.
  return {valid.substr(0, valid.size() / 2), wrong_name.dump(), wrong_shape.dump(), huge,
          std::string(static_cast<size_t>(max_body_bytes) + 1024, ' ')};
}

struct PointResult {
  int64_t requests = 0, examples = 0, failed = 0, invalid = 0, invalid_not_refused = 0;
  double seconds = 0;
  std::vector<float> latencies_ms;  // Of the valid requests.
  double Quantile(double q) {
    if (latencies_ms.empty()) return 0;
    const size_t k = std::min(latencies_ms.size() - 1,
                              static_cast<size_t>(q * static_cast<double>(latencies_ms.size())));
    std::nth_element(latencies_ms.begin(), latencies_ms.begin() + k, latencies_ms.end());
    return latencies_ms[k];
  }
};

// `clients` threads send bodies[...] (and, with `invalid_fraction`, the
// invalid ones) until `stop`; counted after `measure_from`.
PointResult Drive(int port, int clients, int batch, const std::vector<std::string>& bodies,
                  const std::vector<std::string>& invalid, double invalid_fraction,
                  Clock::time_point measure_from, const std::atomic<bool>& stop) {
  std::vector<PointResult> per(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      Connection conn(port);
      std::mt19937_64 rng(c + 1);
      std::uniform_real_distribution<double> u(0, 1);
      std::string response;
      PointResult& r = per[c];
      for (size_t i = c; !stop; i += clients) {
        const bool bad = !invalid.empty() && u(rng) < invalid_fraction;
        const std::string& body = bad ? invalid[i % invalid.size()] : bodies[i % bodies.size()];
        const auto start = Clock::now();
        const int code = conn.Request("POST", "/v2/models/ctr/infer", body, &response);
        const auto end = Clock::now();
        if (start < measure_from) continue;
        if (bad) {
          ++r.invalid;
          // An oversize body may be refused by a close before it is sent.
          if (code != 400 && !(code == -1 && body.size() > bodies[0].size() * 4)) {
            ++r.invalid_not_refused;
          }
          continue;
        }
        ++r.requests;
        if (code != 200) {
          if (r.failed++ < 3) LOG(WARNING) << "request failed: HTTP " << code << ": " << response;
          continue;
        }
        r.examples += batch;
        r.latencies_ms.push_back(
            static_cast<float>(std::chrono::duration<double, std::milli>(end - start).count()));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  PointResult total;
  for (PointResult& r : per) {
    total.requests += r.requests;
    total.examples += r.examples;
    total.failed += r.failed;
    total.invalid += r.invalid;
    total.invalid_not_refused += r.invalid_not_refused;
    total.latencies_ms.insert(total.latencies_ms.end(), r.latencies_ms.begin(),
                              r.latencies_ms.end());
  }
  total.seconds = std::chrono::duration<double>(Clock::now() - measure_from).count();
  return total;
}

absl::StatusOr<std::pair<int, int>> ParsePoint(const std::string& point) {
  std::pair<int, int> cb;
  const std::vector<std::string> parts = absl::StrSplit(point, 'x');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &cb.first) ||
      !absl::SimpleAtoi(parts[1], &cb.second) || cb.first < 1 || cb.second < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", point, "' is not CLIENTSxEXAMPLES (such as 64x64)"));
  }
  return cb;
}

absl::StatusOr<std::string> ExamplesTrained(const std::string& export_dir) {
  std::ifstream in(export_dir + "/manifest.json");
  if (!in) return absl::NotFoundError(absl::StrCat(export_dir, "/manifest.json: cannot open"));
  const Json manifest = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || !manifest.contains("examplesTrained")) {
    return absl::InvalidArgumentError(
        absl::StrCat(export_dir, "/manifest.json: no examplesTrained"));
  }
  return std::to_string(manifest["examplesTrained"].get<int64_t>());
}

// The version /v2/models/ctr reports, or "" if it cannot be read.
std::string ServedVersion(int port) {
  Connection conn(port);
  std::string body;
  if (conn.Request("GET", "/v2/models/ctr", "", &body) != 200) return "";
  const Json metadata = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!metadata.contains("versions") || metadata["versions"].empty()) return "";
  return metadata["versions"][0].get<std::string>();
}

// shadowsync_serve_rows_total{source="SOURCE"} from serve's /metrics on
// `metrics_port`; -1 if absent.
double RowsFrom(int metrics_port, const std::string& source) {
  Connection conn(metrics_port);
  std::string body;
  if (conn.Request("GET", "/metrics", "", &body) != 200) return -1;
  const std::string name = "shadowsync_serve_rows_total{source=\"" + source + "\"} ";
  const size_t at = body.find(name);
  return at == std::string::npos ? -1 : std::strtod(body.c_str() + at + name.size(), nullptr);
}

int Run(const Flags& f) {
  const std::string versions[2] = {"model-000001", "model-000002"};
  std::string served_versions[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::string> v = ExamplesTrained(f.exports + "/" + versions[i]);
    if (!v.ok()) {
      LOG(ERROR) << v.status();
      return 2;
    }
    served_versions[i] = *v;
  }
  if (served_versions[0] == served_versions[1]) {
    LOG(ERROR) << "the two exports must differ in examples trained (the served version)";
    return 2;
  }
  absl::StatusOr<Examples> examples = ReadExamples(f.data, 8192);
  if (!examples.ok()) {
    LOG(ERROR) << examples.status();
    return 2;
  }
  std::vector<std::pair<int, int>> points;
  for (absl::string_view p : absl::StrSplit(f.points, ',', absl::SkipEmpty())) {
    absl::StatusOr<std::pair<int, int>> cb = ParsePoint(std::string(p));
    if (!cb.ok()) {
      LOG(ERROR) << "--points: " << cb.status().message();
      return 2;
    }
    points.push_back(*cb);
  }
  absl::StatusOr<std::pair<int, int>> swap_point = ParsePoint(f.swap_point);
  if (!swap_point.ok()) {
    LOG(ERROR) << "--swap-point: " << swap_point.status().message();
    return 2;
  }
  fs::create_directories(f.work_dir);
  if (absl::Status s = WriteFileAtomically(f.exports + "/LATEST", versions[0] + "\n"); !s.ok()) {
    LOG(ERROR) << s;
    return 2;
  }
  constexpr int64_t kMaxBodyBytes = 1 << 20;
  const std::string ready = f.work_dir + "/serve.ready";
  fs::remove(ready);
  std::vector<std::string> serve_argv = {f.shadowsync,       "serve",
                                         "--model",          f.exports,
                                         "--listen",         "127.0.0.1:0",
                                         "--metrics-listen", "127.0.0.1:0",
                                         "--grpc-listen",    "127.0.0.1:0",
                                         "--ready-file",     ready,
                                         "--threads",        std::to_string(f.threads),
                                         "--http-threads",   "160",
                                         "--poll-seconds",   "0.2",
                                         "--max-body-bytes", std::to_string(kMaxBodyBytes)};
  serve_argv.insert(serve_argv.end(), f.serve_args.begin(), f.serve_args.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> serve =
      ChildProcess::Spawn(serve_argv, f.work_dir + "/serve.log");
  if (!serve.ok()) {
    LOG(ERROR) << serve.status();
    return 1;
  }
  absl::StatusOr<std::pair<int, int>> ports = (*serve)->WaitReady(ready, absl::Seconds(120));
  if (!ports.ok()) {
    LOG(ERROR) << ports.status() << "\n" << (*serve)->LogTail();
    return 1;
  }
  const int port = ports->first;
  bool ok = true;
  std::string result = "RESULT name=serve_http";

  // 1. The grid of clients x examples per request.
  for (const auto& [clients, batch] : points) {
    const std::vector<std::string> bodies = Bodies(*examples, batch, 256);
    std::atomic<bool> stop{false};
    const auto measure_from =
        Clock::now() + std::chrono::milliseconds(static_cast<int>(f.warmup_seconds * 1000));
    std::thread timer([&] {
      std::this_thread::sleep_until(measure_from +
                                    std::chrono::milliseconds(static_cast<int>(f.seconds * 1000)));
      stop = true;
    });
    PointResult r = Drive(port, clients, batch, bodies, {}, 0, measure_from, stop);
    timer.join();
    const double qps = static_cast<double>(r.requests - r.failed) / r.seconds;
    const double eps = static_cast<double>(r.examples) / r.seconds;
    const double p50 = r.Quantile(0.50), p99 = r.Quantile(0.99);
    std::printf(
        "c=%-3d b=%-3d requests/s=%9.1f examples/s=%10.1f p50_ms=%7.3f p99_ms=%7.3f "
        "failed=%lld\n",
        clients, batch, qps, eps, p50, p99, static_cast<long long>(r.failed));
    std::fflush(stdout);
    const std::string key = absl::StrCat("c", clients, "_b", batch);
    absl::StrAppendFormat(&result, " qps_%s=%.1f eps_%s=%.1f p50_ms_%s=%.3f p99_ms_%s=%.3f", key,
                          qps, key, eps, key, p50, key, p99);
    if (r.failed > 0 || r.requests == 0) ok = false;
    if (f.max_p50_ms > 0 && p50 > f.max_p50_ms) {
      LOG(ERROR) << "c=" << clients << " b=" << batch << ": p50 " << p50
                 << " ms exceeds --max-p50-ms " << f.max_p50_ms;
      ok = false;
    }
  }

  // 2. Hot swaps under load.
  if (f.swaps > 0) {
    const auto [clients, batch] = *swap_point;
    const std::vector<std::string> bodies = Bodies(*examples, batch, 256);
    std::atomic<bool> stop{false};
    PointResult r;
    std::thread load([&] { r = Drive(port, clients, batch, bodies, {}, 0, Clock::now(), stop); });
    int swapped = 0;
    double slowest = 0;
    for (int s = 0; s < f.swaps; ++s) {
      const int next = (s + 1) % 2;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const auto start = Clock::now();
      if (absl::Status w = WriteFileAtomically(f.exports + "/LATEST", versions[next] + "\n");
          !w.ok()) {
        LOG(ERROR) << w;
        break;
      }
      while (ServedVersion(port) != served_versions[next] &&
             Clock::now() - start < std::chrono::seconds(60)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (ServedVersion(port) != served_versions[next]) {
        LOG(ERROR) << "swap " << s << ": version " << served_versions[next]
                   << " not served within 60 s";
        break;
      }
      ++swapped;
      slowest = std::max(slowest, std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stop = true;
    load.join();
    std::printf(
        "swaps=%d of %d at c=%d b=%d: requests=%lld failed=%lld p99_ms=%.3f "
        "slowest_swap_s=%.2f\n",
        swapped, f.swaps, clients, batch, static_cast<long long>(r.requests),
        static_cast<long long>(r.failed), r.Quantile(0.99), slowest);
    absl::StrAppendFormat(&result, " swaps=%d swap_failed_requests=%lld swap_p99_ms=%.3f", swapped,
                          static_cast<long long>(r.failed), r.Quantile(0.99));
    if (swapped != f.swaps || r.failed > 0) ok = false;
  }

  // 3. Valid and invalid requests for a while; memory must stay flat.
  if (f.load_seconds > 0) {
    const std::vector<std::string> bodies = Bodies(*examples, 16, 256);
    const std::vector<std::string> invalid = InvalidBodies(bodies[0], kMaxBodyBytes);
    std::atomic<bool> stop{false};
    const auto measure_from =
        Clock::now() + std::chrono::milliseconds(static_cast<int>(f.warmup_seconds * 1000));
    PointResult r;
    std::thread load([&] {
      r = Drive(port, f.load_clients, 16, bodies, invalid, f.invalid_fraction, measure_from, stop);
    });
    std::this_thread::sleep_until(measure_from);
    const int64_t rss_start = ProcStatusKb((*serve)->pid(), "VmRSS");
    int64_t rss_peak = rss_start, rss_mid = 0;
    const auto end =
        measure_from + std::chrono::milliseconds(static_cast<int>(f.load_seconds * 1000));
    const auto mid = measure_from + (end - measure_from) / 2;
    while (Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      const int64_t rss = ProcStatusKb((*serve)->pid(), "VmRSS");
      rss_peak = std::max(rss_peak, rss);
      // Growth that keeps on through the second half is a leak; growth that
      // stops is the allocator settling.
      if (rss_mid == 0 && Clock::now() >= mid) rss_mid = rss;
    }
    const int64_t rss_end = ProcStatusKb((*serve)->pid(), "VmRSS");
    stop = true;
    load.join();
    const auto growth_from = [&](int64_t from) {
      return from > 0 ? static_cast<double>(rss_end - from) / static_cast<double>(from) : 0.0;
    };
    const double growth = growth_from(rss_start), second_half_growth = growth_from(rss_mid);
    std::printf(
        "load: clients=%d seconds=%.0f valid=%lld valid_failed=%lld invalid=%lld "
        "invalid_not_refused=%lld p99_ms=%.3f rss_kb start=%lld mid=%lld end=%lld peak=%lld "
        "growth=%.3f second_half_growth=%.3f\n",
        f.load_clients, f.load_seconds, static_cast<long long>(r.requests),
        static_cast<long long>(r.failed), static_cast<long long>(r.invalid),
        static_cast<long long>(r.invalid_not_refused), r.Quantile(0.99),
        static_cast<long long>(rss_start), static_cast<long long>(rss_mid),
        static_cast<long long>(rss_end), static_cast<long long>(rss_peak), growth,
        second_half_growth);
    absl::StrAppendFormat(&result,
                          " load_valid=%lld load_valid_failed=%lld load_invalid=%lld "
                          "load_invalid_not_refused=%lld load_rss_growth=%.3f "
                          "load_rss_second_half_growth=%.3f",
                          static_cast<long long>(r.requests), static_cast<long long>(r.failed),
                          static_cast<long long>(r.invalid),
                          static_cast<long long>(r.invalid_not_refused), growth,
                          second_half_growth);
    if (r.failed > 0 || r.invalid_not_refused > 0 || r.invalid == 0 ||
        second_half_growth > f.max_rss_growth) {
      ok = false;
    }
  }

  // Where the looked-up rows came from (memory; or cache and disk with
  // --serve-arg=--cache-bytes=N).
  const double memory = RowsFrom(ports->second, "memory"), cache = RowsFrom(ports->second, "cache"),
               disk = RowsFrom(ports->second, "disk");
  std::printf("rows: memory=%.0f cache=%.0f disk=%.0f\n", memory, cache, disk);
  absl::StrAppendFormat(&result, " rows_memory=%.0f rows_cache=%.0f rows_disk=%.0f", memory, cache,
                        disk);

  const absl::StatusOr<double> stopped = (*serve)->Stop(SIGTERM, absl::Seconds(30));
  if (!stopped.ok()) {
    LOG(ERROR) << "serve did not stop on SIGTERM: " << stopped.status();
    ok = false;
  }
  std::printf("%s checks=%s\n", result.c_str(), ok ? "pass" : "fail");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace shadowsync::bench

int main(int argc, char** argv) {
  shadowsync::InitLogging(argv[0]);
  CLI::App app{"Load on a real `shadowsync serve` over loopback (bench/serve.sh)."};
  shadowsync::bench::Flags f;
  app.add_option("--shadowsync", f.shadowsync, "the shadowsync binary")->required();
  app.add_option("--exports", f.exports, "a directory with model-000001 and model-000002")
      ->required();
  app.add_option("--data", f.data, "Criteo TSV whose examples the requests carry")->required();
  app.add_option("--work-dir", f.work_dir, "serve's log and ready file")->required();
  app.add_option("--threads", f.threads, "serve's scoring threads")->capture_default_str();
  app.add_option("--points", f.points, "CLIENTSxEXAMPLES measured, comma-separated")
      ->capture_default_str();
  app.add_option("--seconds", f.seconds, "per point")->capture_default_str();
  app.add_option("--warmup-seconds", f.warmup_seconds, "before each measurement")
      ->capture_default_str();
  app.add_option("--swaps", f.swaps, "hot swaps under load (0: none)")->capture_default_str();
  app.add_option("--swap-point", f.swap_point, "CLIENTSxEXAMPLES during the swaps")
      ->capture_default_str();
  app.add_option("--load-seconds", f.load_seconds, "the mixed valid/invalid load (0: none)")
      ->capture_default_str();
  app.add_option("--load-clients", f.load_clients, "clients of the mixed load")
      ->capture_default_str();
  app.add_option("--invalid-fraction", f.invalid_fraction, "of the mixed load")
      ->capture_default_str();
  app.add_option("--max-rss-growth", f.max_rss_growth, "allowed over the mixed load's second half")
      ->capture_default_str();
  app.add_option("--serve-arg", f.serve_args, "passed on to shadowsync serve (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--max-p50-ms", f.max_p50_ms, "fail a point whose median latency exceeds it")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return shadowsync::bench::Run(f);
}
