// ps_bench (bench/ps_bench_internal.h): client threads running training steps against one
// system, timed, with both processes' CPU time.

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <latch>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "bench/ps_bench_internal.h"
#include "common/status_macros.h"

namespace shadowsync::bench::internal {
namespace {

double SelfCpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto sec = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec * 1e-6; };
  return sec(usage.ru_utime) + sec(usage.ru_stime);
}

}  // namespace

std::vector<float> GradientPattern(size_t floats) {
  std::vector<float> g(floats);
  for (size_t i = 0; i < floats; ++i)
    g[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 7) - 3);
  return g;
}

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
  // Every thread ready (its buffers reserved), then all go at once, after
  // the CPU counters are read.
  std::latch ready(threads);
  std::latch go(1);
  Clock::time_point start, deadline;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      PerThread& p = per[i];
      p.latency_ms.reserve(1 << 16);
      const int64_t first = i * w.batches / threads;
      const int64_t last = seconds > 0 ? INT64_MAX : (i + 1) * w.batches / threads;
      ready.count_down();
      go.wait();
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
  ready.wait();
  const double server_cpu0 = ProcCpuSeconds(server_pid);
  const double client_cpu0 = SelfCpuSeconds();
  start = Clock::now();
  deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go.count_down();
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

}  // namespace shadowsync::bench::internal
