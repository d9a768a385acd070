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
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/ps_bench_internal.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/embedding_table.h"

namespace shadowsync::bench::internal {
namespace {

namespace fs = std::filesystem;

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
}  // namespace shadowsync::bench::internal

int main(int argc, char** argv) {
  // Our clients run as the trainer's do (cli.cc).
  shadowsync::DisableMutexDeadlockDetection();
  shadowsync::InitLogging(argv[0]);
  shadowsync::bench::internal::Flags f;
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
  const absl::Status s = shadowsync::bench::internal::Main(f);
  if (!s.ok()) {
    LOG(ERROR) << "ps_bench: " << s;
    return 1;
  }
  return 0;
}
