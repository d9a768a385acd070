// Load on one parameter server and on one syncer (issue 9, "Load"): N
// concurrent clients (own gRPC channel each) send a mix of valid and invalid
// requests for a fixed time to a real `shadowsync ps` and then a real
// `shadowsync syncer` child process, after a warm-up. It checks that
//   - no valid request fails,
//   - every invalid request is refused with the status it deserves (and none
//     is accepted),
//   - the server's resident memory at the end is within --max-rss-growth of
//     its value right after warm-up (sampled every second, the peak is
//     reported too),
// and reports p50/p99/p999 latency of the valid requests per server.
//
//   load_bench --work-dir DIR [--shadowsync PATH] [--clients 64] [--seconds 60]
//              [--warmup-seconds 10] [--invalid-fraction 0.2] [--max-rss-growth 0.10]
//
// Exit status 1 if a check fails. The last line is machine-readable:
//   RESULT name=load clients=.. seconds=.. ps_valid=.. ps_valid_failed=.. ps_p50_ms=.. ...
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "shadowsync/v1/ps.grpc.pb.h"
#include "shadowsync/v1/syncer.grpc.pb.h"

namespace shadowsync::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string work_dir;
  std::string shadowsync;
  int clients = 64;
  double seconds = 60;
  double warmup_seconds = 10;
  double invalid_fraction = 0.2;
  double max_rss_growth = 0.10;
  // The parameter server's shape and limit (oversize requests exceed it).
  int tables = 8;
  int dim = 16;
  int ids_per_table = 64;
  int max_request_rows = 4096;
  // The syncer's centre: floats in its one range.
  int centre_floats = 64 * 1024;
};

// One request's outcome as a client saw it.
struct Outcome {
  bool valid = true;
  grpc::StatusCode want = grpc::StatusCode::OK;  // For invalid requests.
  grpc::Status status;
};

// Counters and latencies of one client thread (merged at the end).
struct ClientStats {
  int64_t valid = 0, valid_failed = 0, invalid = 0, invalid_wrong_status = 0;
  std::vector<double> valid_latency_ms;
  std::map<std::string, int64_t> failures;  // "CODE message" -> count (first few kinds)
};

// A request generator: fills one request, sends it and says what it was.
using Request = std::function<Outcome(std::mt19937_64& rng, bool invalid)>;

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

struct PhaseResult {
  ClientStats total;
  int64_t rss_after_warmup_kb = 0, rss_end_kb = 0, rss_peak_kb = 0;
  double p50 = 0, p99 = 0, p999 = 0;
  double seconds = 0;
};

// Runs `make_client(i)` request loops on `clients` threads: warm-up, then the
// measured period, sampling the server's RSS every second.
PhaseResult RunPhase(const Flags& f, pid_t server,
                     const std::function<Request(int client)>& make_client) {
  std::atomic<bool> measuring{false}, stop{false};
  std::vector<ClientStats> stats(f.clients);
  std::vector<std::thread> threads;
  for (int i = 0; i < f.clients; ++i) {
    threads.emplace_back([&, i] {
      Request send = make_client(i);
      std::mt19937_64 rng(1000 + i);
      std::bernoulli_distribution invalid(f.invalid_fraction);
      ClientStats& s = stats[i];
      while (!stop.load(std::memory_order_relaxed)) {
        const bool bad = invalid(rng);
        const Clock::time_point t0 = Clock::now();
        Outcome o = send(rng, bad);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (!measuring.load(std::memory_order_relaxed)) continue;
        if (o.valid) {
          ++s.valid;
          s.valid_latency_ms.push_back(ms);
          if (!o.status.ok()) {
            ++s.valid_failed;
            if (s.failures.size() < 8) {
              ++s.failures[absl::StrCat("valid: ", o.status.error_code(), " ",
                                        o.status.error_message())];
            }
          }
        } else {
          ++s.invalid;
          if (o.status.error_code() != o.want) {
            ++s.invalid_wrong_status;
            if (s.failures.size() < 8) {
              ++s.failures[absl::StrCat("invalid (want ", o.want, "): ", o.status.error_code(), " ",
                                        o.status.error_message())];
            }
          }
        }
      }
    });
  }
  PhaseResult r;
  std::this_thread::sleep_for(std::chrono::duration<double>(f.warmup_seconds));
  r.rss_after_warmup_kb = ProcStatusKb(server, "VmRSS");
  measuring = true;
  const Clock::time_point start = Clock::now();
  while (Clock::now() - start < std::chrono::duration<double>(f.seconds)) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    r.rss_peak_kb = std::max(r.rss_peak_kb, ProcStatusKb(server, "VmRSS"));
  }
  measuring = false;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.rss_end_kb = ProcStatusKb(server, "VmRSS");
  stop = true;
  for (std::thread& t : threads) t.join();
  for (ClientStats& s : stats) {
    r.total.valid += s.valid;
    r.total.valid_failed += s.valid_failed;
    r.total.invalid += s.invalid;
    r.total.invalid_wrong_status += s.invalid_wrong_status;
    r.total.valid_latency_ms.insert(r.total.valid_latency_ms.end(), s.valid_latency_ms.begin(),
                                    s.valid_latency_ms.end());
    for (const auto& [k, n] : s.failures) r.total.failures[k] += n;
  }
  r.p50 = Percentile(r.total.valid_latency_ms, 0.50);
  r.p99 = Percentile(r.total.valid_latency_ms, 0.99);
  r.p999 = Percentile(r.total.valid_latency_ms, 0.999);
  return r;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return c;
}

std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int client) {
  grpc::ChannelArguments args;
  // A distinct argument keeps gRPC from sharing one connection between clients.
  args.SetInt("shadowsync.load_client", client);
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// Parameter-server requests: lookups and pushes of random rows (valid), and
// four kinds of bad ones: an empty batch, a table out of range, a push whose
// values do not match its ids, and more ids than --max-request-rows.
Request PsClient(const Flags& f, const std::string& address, int client) {
  auto stub = std::shared_ptr<v1::ParameterServer::Stub>(
      v1::ParameterServer::NewStub(OwnChannel(address, client)));
  return [f, stub](std::mt19937_64& rng, bool invalid) {
    // A bounded working set (tables x 20k rows, well inside the cache), so
    // memory growth means a leak, not new rows.
    std::uniform_int_distribution<uint64_t> id(0, 20'000);
    auto fill = [&](google::protobuf::RepeatedPtrField<v1::TableRows>* tables, int per_table,
                    bool with_values) {
      for (int t = 0; t < f.tables; ++t) {
        v1::TableRows* rows = tables->Add();
        rows->set_table(t);
        for (int k = 0; k < per_table; ++k) {
          rows->add_ids(id(rng));
          if (with_values) {
            for (int d = 0; d < f.dim; ++d) rows->add_values(1e-3f);
          }
        }
      }
    };
    Outcome o;
    o.valid = !invalid;
    const int kind = static_cast<int>(rng() % 4);
    const bool push = rng() % 2 == 0;
    if (!invalid) {
      if (push) {
        v1::PushGradientsRequest q;
        fill(q.mutable_tables(), f.ids_per_table, true);
        v1::PushGradientsResponse a;
        o.status = stub->PushGradients(Context().get(), q, &a);
      } else {
        v1::LookupRequest q;
        fill(q.mutable_tables(), f.ids_per_table, false);
        v1::LookupResponse a;
        o.status = stub->Lookup(Context().get(), q, &a);
      }
      return o;
    }
    v1::PushGradientsRequest q;
    v1::PushGradientsResponse a;
    switch (kind) {
      case 0:  // No ids at all.
        o.want = grpc::StatusCode::INVALID_ARGUMENT;
        break;
      case 1:  // A table the server does not have.
        fill(q.mutable_tables(), 4, true);
        q.mutable_tables(0)->set_table(f.tables + 7);
        o.want = grpc::StatusCode::INVALID_ARGUMENT;
        break;
      case 2:  // Values not ids x dim.
        fill(q.mutable_tables(), 4, true);
        q.mutable_tables(0)->add_values(1.0f);
        o.want = grpc::StatusCode::INVALID_ARGUMENT;
        break;
      case 3:  // Oversize.
        fill(q.mutable_tables(), f.max_request_rows / f.tables + 1, true);
        o.want = grpc::StatusCode::RESOURCE_EXHAUSTED;
        break;
    }
    o.status = stub->PushGradients(Context().get(), q, &a);
    return o;
  };
}

// Syncer requests: pulls of and adds to the centre, and SSP clock reports
// (valid), and bad ones: a slice of the wrong length, a range other than the
// centre's, an empty clock member, a negative clock.
Request SyncerClient(const Flags& f, const std::string& address, int client) {
  auto stub = std::shared_ptr<v1::Syncer::Stub>(v1::Syncer::NewStub(OwnChannel(address, client)));
  const std::string member = absl::StrCat("load-", client);
  return [f, stub, member](std::mt19937_64& rng, bool invalid) {
    Outcome o;
    o.valid = !invalid;
    const int kind = static_cast<int>(rng() % (invalid ? 4 : 3));
    const uint64_t n = static_cast<uint64_t>(f.centre_floats);
    if (!invalid) {
      if (kind == 0) {
        v1::PullCentreRequest q;
        q.set_offset(0);
        q.set_total(n);
        q.set_length(n);
        v1::CentreResponse a;
        o.status = stub->PullCentre(Context().get(), q, &a);
      } else if (kind == 1) {
        v1::AddToCentreRequest q;
        q.set_offset(0);
        q.set_total(n);
        q.mutable_delta()->Resize(static_cast<int>(n), 0.0f);
        v1::CentreResponse a;
        o.status = stub->AddToCentre(Context().get(), q, &a);
      } else {
        // Far more staleness than steps: never waits for the other clients.
        v1::ClockRequest q;
        q.set_member(member);
        q.set_clock(static_cast<int64_t>(rng() % 1000));
        q.set_staleness(1'000'000);
        v1::ClockResponse a;
        o.status = stub->Clock(Context().get(), q, &a);
      }
      return o;
    }
    o.want = grpc::StatusCode::INVALID_ARGUMENT;
    v1::CentreResponse a;
    switch (kind) {
      case 0: {
        v1::AddToCentreRequest q;
        q.set_offset(0);
        q.set_total(n);
        q.mutable_delta()->Resize(static_cast<int>(n) - 1, 0.0f);
        o.status = stub->AddToCentre(Context().get(), q, &a);
        break;
      }
      case 1: {
        v1::PullCentreRequest q;
        q.set_offset(1);
        q.set_total(n);
        q.set_length(n - 1);
        o.status = stub->PullCentre(Context().get(), q, &a);
        break;
      }
      case 2: {
        v1::ClockRequest q;
        v1::ClockResponse c;
        q.set_clock(1);
        o.status = stub->Clock(Context().get(), q, &c);
        break;
      }
      case 3: {
        v1::ClockRequest q;
        v1::ClockResponse c;
        q.set_member(member);
        q.set_clock(-5);
        o.status = stub->Clock(Context().get(), q, &c);
        break;
      }
    }
    return o;
  };
}

// Prints one phase and returns whether its checks passed.
bool Report(const Flags& f, const std::string& name, const PhaseResult& r) {
  const double growth =
      r.rss_after_warmup_kb > 0
          ? static_cast<double>(r.rss_end_kb - r.rss_after_warmup_kb) / r.rss_after_warmup_kb
          : 0;
  std::printf(
      "%s: %lld valid requests (%.0f/s), %lld failed; %lld invalid, %lld with a wrong status; "
      "latency p50 %.2f ms p99 %.2f ms p999 %.2f ms; RSS %lld kB after warm-up, %lld kB at the "
      "end (%+.1f%%), peak %lld kB\n",
      name.c_str(), static_cast<long long>(r.total.valid), r.total.valid / r.seconds,
      static_cast<long long>(r.total.valid_failed), static_cast<long long>(r.total.invalid),
      static_cast<long long>(r.total.invalid_wrong_status), r.p50, r.p99, r.p999,
      static_cast<long long>(r.rss_after_warmup_kb), static_cast<long long>(r.rss_end_kb),
      100 * growth, static_cast<long long>(r.rss_peak_kb));
  for (const auto& [what, n] : r.total.failures) {
    std::printf("  %s: %lld x %s\n", name.c_str(), static_cast<long long>(n), what.c_str());
  }
  bool ok = true;
  if (r.total.valid_failed > 0) {
    std::printf("FAIL %s: %lld valid requests failed\n", name.c_str(),
                static_cast<long long>(r.total.valid_failed));
    ok = false;
  }
  if (r.total.invalid_wrong_status > 0) {
    std::printf("FAIL %s: %lld invalid requests got another status than expected\n", name.c_str(),
                static_cast<long long>(r.total.invalid_wrong_status));
    ok = false;
  }
  if (growth > f.max_rss_growth) {
    std::printf("FAIL %s: resident memory grew %.1f%% (limit %.0f%%)\n", name.c_str(), 100 * growth,
                100 * f.max_rss_growth);
    ok = false;
  }
  if (r.total.valid == 0) {
    std::printf("FAIL %s: no valid request completed\n", name.c_str());
    ok = false;
  }
  return ok;
}

absl::StatusOr<bool> Run(const Flags& f) {
  fs::create_directories(f.work_dir);
  // clang-format off
  const std::string ps_db = f.work_dir + "/ps-db";
  fs::remove_all(ps_db);
  fs::remove(ps_db + ".ready");
  SS_ASSIGN_OR_RETURN(auto ps, ChildProcess::Spawn({
      f.shadowsync, "ps",
      "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
      "--db", ps_db, "--dim", std::to_string(f.dim), "--tables", std::to_string(f.tables),
      "--hash-buckets", "1000000", "--cache-bytes", std::to_string(64 << 20),
      "--max-request-rows", std::to_string(f.max_request_rows),
      "--ready-file", ps_db + ".ready"}, f.work_dir + "/ps.log"));
  // clang-format on
  SS_ASSIGN_OR_RETURN(const auto ps_ports, ps->WaitReady(ps_db + ".ready", absl::Minutes(2)));
  const std::string ps_address = absl::StrCat("127.0.0.1:", ps_ports.first);
  std::printf("load: %d clients, %.0f s warm-up + %.0f s, %.0f%% invalid requests\n", f.clients,
              f.warmup_seconds, f.seconds, 100 * f.invalid_fraction);
  std::fflush(stdout);
  const PhaseResult ps_result =
      RunPhase(f, ps->pid(), [&](int i) { return PsClient(f, ps_address, i); });
  const bool ps_ok = Report(f, "ps", ps_result);
  SS_RETURN_IF_ERROR(ps->Stop(SIGTERM, absl::Seconds(30)).status());

  const std::string syncer_ready = f.work_dir + "/syncer.ready";
  fs::remove(syncer_ready);
  SS_ASSIGN_OR_RETURN(
      auto syncer,
      ChildProcess::Spawn({f.shadowsync, "syncer", "--listen", "127.0.0.1:0", "--metrics-listen",
                           "127.0.0.1:0", "--ready-file", syncer_ready},
                          f.work_dir + "/syncer.log"));
  SS_ASSIGN_OR_RETURN(const auto syncer_ports, syncer->WaitReady(syncer_ready, absl::Minutes(1)));
  const std::string syncer_address = absl::StrCat("127.0.0.1:", syncer_ports.first);
  {
    // The centre the clients pull and add to.
    auto stub = v1::Syncer::NewStub(OwnChannel(syncer_address, -1));
    v1::InitCentreRequest q;
    q.set_offset(0);
    q.set_total(f.centre_floats);
    q.mutable_values()->Resize(f.centre_floats, 0.5f);
    v1::CentreResponse a;
    const grpc::Status s = stub->InitCentre(Context().get(), q, &a);
    if (!s.ok()) return absl::InternalError(absl::StrCat("InitCentre: ", s.error_message()));
  }
  const PhaseResult syncer_result =
      RunPhase(f, syncer->pid(), [&](int i) { return SyncerClient(f, syncer_address, i); });
  const bool syncer_ok = Report(f, "syncer", syncer_result);
  SS_RETURN_IF_ERROR(syncer->Stop(SIGTERM, absl::Seconds(30)).status());

  auto growth = [](const PhaseResult& r) {
    return r.rss_after_warmup_kb > 0
               ? static_cast<double>(r.rss_end_kb - r.rss_after_warmup_kb) / r.rss_after_warmup_kb
               : 0;
  };
  std::printf(
      "RESULT name=load clients=%d seconds=%.0f ps_valid=%lld ps_valid_failed=%lld "
      "ps_invalid=%lld ps_invalid_wrong=%lld ps_p50_ms=%.3f ps_p99_ms=%.3f ps_p999_ms=%.3f "
      "ps_rss_growth=%.3f syncer_valid=%lld syncer_valid_failed=%lld syncer_invalid=%lld "
      "syncer_invalid_wrong=%lld syncer_p50_ms=%.3f syncer_p99_ms=%.3f syncer_p999_ms=%.3f "
      "syncer_rss_growth=%.3f pass=%d\n",
      f.clients, f.seconds, static_cast<long long>(ps_result.total.valid),
      static_cast<long long>(ps_result.total.valid_failed),
      static_cast<long long>(ps_result.total.invalid),
      static_cast<long long>(ps_result.total.invalid_wrong_status), ps_result.p50, ps_result.p99,
      ps_result.p999, growth(ps_result), static_cast<long long>(syncer_result.total.valid),
      static_cast<long long>(syncer_result.total.valid_failed),
      static_cast<long long>(syncer_result.total.invalid),
      static_cast<long long>(syncer_result.total.invalid_wrong_status), syncer_result.p50,
      syncer_result.p99, syncer_result.p999, growth(syncer_result), ps_ok && syncer_ok ? 1 : 0);
  return ps_ok && syncer_ok;
}

}  // namespace
}  // namespace shadowsync::bench

int main(int argc, char** argv) {
  shadowsync::InitLogging(argv[0]);
  shadowsync::bench::Flags f;
  CLI::App app("Load on one parameter server and one syncer: valid and invalid requests.");
  app.add_option("--work-dir", f.work_dir, "scratch directory")->required();
  app.add_option("--shadowsync", f.shadowsync, "the shadowsync binary")->required();
  app.add_option("--clients", f.clients, "concurrent clients, each with its own channel")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", f.seconds, "measured seconds per server")->check(CLI::PositiveNumber);
  app.add_option("--warmup-seconds", f.warmup_seconds, "load before measuring")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--invalid-fraction", f.invalid_fraction, "share of invalid requests")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-rss-growth", f.max_rss_growth,
                 "allowed RSS growth from after warm-up to the end")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<bool> ok = shadowsync::bench::Run(f);
  if (!ok.ok()) {
    LOG(ERROR) << "load_bench: " << ok.status();
    return 2;
  }
  return *ok ? 0 : 1;
}
