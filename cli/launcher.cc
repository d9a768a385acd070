#include "cli/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "cli/cli_util.h"
#include "common/status_macros.h"
#include "exporter/job_export.h"
#include "jobspec/job_spec.h"
#include "model/optimizer.h"
#include "ps/client/resharder.h"
#include "worker/checkpoint.h"

extern char** environ;

namespace shadowsync::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// How long a drained parameter server keeps answering after a scale-in.
constexpr std::chrono::seconds kDrainedLinger(2);

absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  if (!ok) return absl::UnavailableError("cannot find a free port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

// A number field of a child's JSON file, or 0: a NaN is written as null,
// and a file may be older than the field.
double Num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
int64_t Int(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : 0;
}

enum class Role { kPs, kSyncer, kTrainer };

struct Child {
  std::string name;  // "ps-0", "syncer-0", "trainer-1"
  Role role;
  std::vector<std::string> argv;
  std::string log, ready;
  pid_t pid = -1;
  bool finished = false;      // A trainer that exited 0.
  int64_t skip_examples = 0;  // A restarted trainer resumes after these.
  std::string checkpoint;     // A trainer's dense checkpoint.
  int metrics_port = 0;
  int64_t peak_rss_kb = 0;  // Over every incarnation.
};

class Launch {
 public:
  explicit Launch(const LaunchOptions& options) : options_(options) {}
  ~Launch() { StopAll(); }

  absl::StatusOr<nlohmann::json> Run();

 private:
  absl::Status Spawn(Child& c);
  // Waits for c's ready file; its metrics port is the file's second number.
  absl::Status AwaitReady(Child& c);
  // Reaps exited children; restarts crashed ones. Error when out of restarts.
  absl::Status Reap();
  void StopAll();
  // Stops one child (SIGTERM, then SIGKILL after 20 s) and reaps it.
  void Stop(Child& c);
  void AwaitExit(Child& c, Clock::time_point deadline);
  // ps-i at `address`; `join`: owning nothing until a reshard gives it slots.
  Child PsChild(int i, const std::string& address, bool join) const;
  // Serves a pending `shadowsync scale` request, if any. Only a reshard that
  // lost data is an error: the job must not go on.
  absl::Status PollControl();
  absl::StatusOr<nlohmann::json> ScaleTo(int n, bool pause);
  // Exports of the model (exporter/job_export.h). While training runs, an
  // export runs in the background after the trainers were asked for fresh
  // checkpoints (SIGUSR1); one at a time. `request_id` (a `shadowsync
  // export`, "" for an interval) is answered when it ends.
  void StartExport(const std::string& request_id);
  // Collects a finished background export; `wait`: waits for a running one.
  void PollExport(bool wait);
  // Once training has ended: the export scored on the eval data.
  absl::StatusOr<nlohmann::json> FinalExport();
  exporter::JobExportRequest ExportRequest() const;
  std::string ExportsDir() const;
  void LogExport(const nlohmann::json& summary) const;
  // Writes control/<kind>-<id>.result.json through a rename.
  void AnswerControl(const std::string& kind, const std::string& id,
                     const nlohmann::json& result) const;
  // What a resume needs to know beyond the job: the parameter servers now.
  void WriteLaunchState() const;
  void ShowProgress(bool final);
  nlohmann::json Report(double seconds);
  void WritePlot(const std::string& path) const;

  const LaunchOptions& options_;
  ShadowSyncJob job_;
  GrpcSecurity security_;  // Of the launcher's own calls to the servers (spec.security).
  std::string run_dir_;
  std::vector<Child> children_;
  std::vector<std::string> ps_addresses_;  // ps-i at [i]; changes with scale
  std::vector<std::string> syncer_addresses_;
  std::vector<std::string> checkpoints_;  // trainer-i's at [i]
  std::vector<std::string> eval_data_;
  nlohmann::json init_;                     // The warm start's import, if any.
  nlohmann::json latest_export_ = nullptr;  // Summary of the newest export.
  Clock::time_point last_export_;
  struct RunningExport {
    std::future<absl::StatusOr<nlohmann::json>> result;
    std::string request_id;
    double job_seconds = 0;  // When it started.
  };
  std::optional<RunningExport> export_;
  nlohmann::json reshards_ = nlohmann::json::array();
  nlohmann::json retired_peak_rss_ = nlohmann::json::object();  // Servers scaled away.
  int restarts_ = 0;
  int64_t total_examples_ = -1;
  Clock::time_point start_;
  struct Sample {
    double seconds, examples_per_second, train_ne;
    int64_t examples;
  };
  std::vector<Sample> samples_;
  int64_t last_examples_ = 0;
  double last_seconds_ = 0;
};

absl::Status Launch::Spawn(Child& c) {
  if (!c.ready.empty()) fs::remove(c.ready);
  std::vector<std::string> args = c.argv;
  if (c.skip_examples > 0) {
    args.insert(args.end(), {"--skip-examples", std::to_string(c.skip_examples)});
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Opened before the fork: the child may only make async-signal-safe calls.
  const int log = open(c.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::UnavailableError(absl::StrCat("cannot open ", c.log));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Its own process group: a terminal's Ctrl-C reaches the launcher only,
    // which then stops every child in order. And a child dies with the
    // launcher (even a SIGKILLed one) instead of living on as an orphan.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the launcher died before prctl
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execve(argv[0], argv.data(), environ);
    _exit(127);
  }
  close(log);
  if (pid < 0) {
    c.pid = -1;
    return absl::UnavailableError(absl::StrCat("cannot start ", c.name, ": ", strerror(errno)));
  }
  c.pid = pid;
  return absl::OkStatus();
}

absl::Status Launch::AwaitReady(Child& c) {
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    if (options_.stop != nullptr && options_.stop->load()) return absl::CancelledError("stopped");
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      c.pid = -1;
      return absl::UnavailableError(
          absl::StrCat(c.name, " exited before it was ready; see ", c.log));
    }
    std::ifstream in(c.ready);
    int grpc_port = 0, metrics_port = 0;
    if (in >> grpc_port >> metrics_port) {
      c.metrics_port = metrics_port;
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(c.name, " not ready after 120 s; see ", c.log));
}

absl::Status Launch::Reap() {
  while (true) {
    int status = 0;
    rusage usage{};
    const pid_t pid = wait4(-1, &status, WNOHANG, &usage);
    if (pid <= 0) return absl::OkStatus();
    auto it = std::find_if(children_.begin(), children_.end(),
                           [pid](const Child& c) { return c.pid == pid; });
    if (it == children_.end()) continue;
    Child& c = *it;
    c.pid = -1;
    c.peak_rss_kb = std::max<int64_t>(c.peak_rss_kb, usage.ru_maxrss);
    if (c.role == Role::kTrainer && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      c.finished = true;
      continue;
    }
    const std::string how = WIFSIGNALED(status)
                                ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                : absl::StrCat("exited with ", WEXITSTATUS(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.name, " ", how, " (bad input); see ", c.log));
    }
    if (++restarts_ > job_.spec.run_policy.backoff_limit) {
      return absl::AbortedError(absl::StrCat(c.name, " ", how, "; ", restarts_ - 1,
                                             " restarts used up runPolicy.backoffLimit = ",
                                             job_.spec.run_policy.backoff_limit, "; see ", c.log));
    }
    if (c.role == Role::kTrainer) {
      // Resume after what its last progress report counted: at most one
      // progress interval of its share is trained twice.
      std::ifstream in(run_dir_ + "/" + c.name + ".progress.json");
      nlohmann::json p = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (p.is_object()) c.skip_examples += Int(p, "examples");
      fs::remove(run_dir_ + "/" + c.name + ".progress.json");
    }
    std::cerr << (options_.tty ? "\n" : "") << c.name << " " << how << "; restarting (" << restarts_
              << " of " << job_.spec.run_policy.backoff_limit << ")"
              << (c.skip_examples > 0
                      ? absl::StrCat(", resuming after ", c.skip_examples, " examples of its share")
                      : "")
              << "\n";
    SS_RETURN_IF_ERROR(Spawn(c));
    if (c.role != Role::kTrainer) SS_RETURN_IF_ERROR(AwaitReady(c));
  }
}

// Waits for `c` (sent SIGTERM already), with SIGKILL after `deadline`.
void Launch::AwaitExit(Child& c, Clock::time_point deadline) {
  while (c.pid > 0) {
    int status = 0;
    rusage usage{};
    const pid_t pid = wait4(c.pid, &status, WNOHANG, &usage);
    if (pid == c.pid || pid < 0) {
      c.peak_rss_kb = std::max<int64_t>(c.peak_rss_kb, usage.ru_maxrss);
      c.pid = -1;
      break;
    }
    if (Clock::now() > deadline) kill(c.pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Launch::Stop(Child& c) {
  if (c.pid <= 0) return;
  kill(c.pid, SIGTERM);
  AwaitExit(c, Clock::now() + std::chrono::seconds(20));
}

void Launch::StopAll() {
  // Every child at once, then the waits: shutdowns overlap.
  for (Child& c : children_) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  for (Child& c : children_) AwaitExit(c, deadline);
}

void Launch::ShowProgress(bool final) {
  int64_t examples = 0;
  double ne_weighted = 0;
  std::string mode;  // The sync strategy's, when it has one (e.g. sync-switch).
  for (const Child& c : children_) {
    if (c.role != Role::kTrainer) continue;
    examples += c.skip_examples;
    // At the end, the trainers' reports: their last progress files may lag.
    std::ifstream in(run_dir_ + "/" + c.name + (final ? ".json" : ".progress.json"));
    nlohmann::json p = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!p.is_object()) continue;
    const int64_t n = Int(p, "examples");
    examples += n;
    // Progress files carry the strategy's details as "sync", reports as "sync_details".
    const char* key = final ? "sync_details" : "sync";
    if (mode.empty() && p.contains(key) && p[key].is_object() && p[key].contains("mode") &&
        p[key]["mode"].is_string()) {
      mode = p[key]["mode"].get<std::string>();
    }
    ne_weighted += Num(p, "train_ne") * static_cast<double>(n);
  }
  const double seconds = Since(start_);
  // The last line shows the whole run's rate, not the last interval's.
  const double eps = final ? examples / std::max(seconds, 1e-9)
                           : (examples - last_examples_) / std::max(seconds - last_seconds_, 1e-9);
  last_examples_ = examples;
  last_seconds_ = seconds;
  const double ne = examples > 0 ? ne_weighted / static_cast<double>(examples) : 0;
  samples_.push_back({seconds, eps, ne, examples});
  std::string bar;
  if (total_examples_ > 0) {
    const double frac = std::min(1.0, static_cast<double>(examples) / total_examples_);
    const int width = 30, filled = static_cast<int>(frac * width);
    const double eta = eps > 0 ? (total_examples_ - examples) / eps : 0;
    bar = absl::StrFormat("[%s%s] %5.1f%% %d/%d  eta %.0fs  ", std::string(filled, '#'),
                          std::string(width - filled, '.'), 100 * frac, examples, total_examples_,
                          eta);
  } else {
    bar = absl::StrFormat("%d examples  ", examples);
  }
  const std::string line =
      absl::StrFormat("%s%.0f ex/s  train NE %.4f  %.0fs%s", bar, eps, ne, seconds,
                      mode.empty() ? "" : absl::StrCat("  sync ", mode));
  if (options_.tty) {
    std::cerr << "\r" << line << "\033[K" << (final ? "\n" : "") << std::flush;
  } else {
    std::cerr << line << "\n";
  }
}

nlohmann::json Launch::Report(double seconds) {
  nlohmann::json trainers = nlohmann::json::array();
  int64_t examples = 0, rounds = 0, sent = 0, received = 0;
  double ne = 0, logloss = 0, blocked = 0, round_seconds = 0, gap = 0;
  double eval_ne = 0, eval_auc = 0, eval_logloss = 0, eval_calibration = 0;
  int evaluated = 0, n = 0;
  for (const Child& c : children_) {
    if (c.role != Role::kTrainer) continue;
    std::ifstream in(run_dir_ + "/" + c.name + ".json");
    nlohmann::json r = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object()) continue;
    ++n;
    const int64_t e = Int(r, "examples");
    examples += e + Int(r, "skipped_examples");
    ne += Num(r, "train_ne") * static_cast<double>(e);
    logloss += Num(r, "train_logloss") * static_cast<double>(e);
    rounds += Int(r, "sync_rounds");
    sent += Int(r, "sync_bytes_sent");
    received += Int(r, "sync_bytes_received");
    blocked += Num(r, "sync_blocked_seconds");
    round_seconds += Num(r, "sync_mean_round_seconds");
    gap += Num(r, "sync_mean_gap_steps");
    if (r.contains("eval_ne")) {
      ++evaluated;
      eval_ne += Num(r, "eval_ne");
      eval_auc += Num(r, "eval_auc");
      eval_logloss += Num(r, "eval_logloss");
      eval_calibration += Num(r, "eval_calibration");
    }
    trainers.push_back(std::move(r));
  }
  nlohmann::json peak = nlohmann::json::object();
  for (const Child& c : children_) peak[c.name] = c.peak_rss_kb * 1024;
  for (const auto& [name, bytes] : retired_peak_rss_.items()) peak[name] = bytes;
  nlohmann::json out = {
      {"job", job_.metadata.name},
      {"run_dir", run_dir_},
      {"algorithm", std::string(EnumName(job_.spec.sync.algorithm))},
      {"trainers", job_.spec.trainer.replicas},
      {"threads", job_.spec.trainer.threads},
      {"parameter_servers", ps_addresses_.size()},
      {"syncers", job_.spec.syncer.replicas},
      {"examples", examples},
      {"seconds", seconds},
      {"examples_per_second", examples / std::max(seconds, 1e-9)},
      {"train_ne", examples > 0 ? ne / static_cast<double>(examples) : 0},
      {"train_logloss", examples > 0 ? logloss / static_cast<double>(examples) : 0},
      {"sync",
       {{"rounds", rounds},
        {"bytes_sent", sent},
        {"bytes_received", received},
        {"blocked_seconds", blocked},
        {"mean_round_seconds", n > 0 ? round_seconds / n : 0},
        {"mean_gap_steps", n > 0 ? gap / n : 0}}},
      {"restarts", restarts_},
      {"resumed", options_.resume},
      {"reshards", reshards_},
      {"peak_rss_bytes", peak},
      {"per_trainer", trainers},
  };
  if (evaluated > 0) {
    out["eval_ne"] = eval_ne / evaluated;
    out["eval_auc"] = eval_auc / evaluated;
    out["eval_logloss"] = eval_logloss / evaluated;
    out["eval_calibration"] = eval_calibration / evaluated;
    out["eval_source"] = "mean of the trainers' evaluations";
  }
  if (!init_.is_null()) {
    out["init"] = init_;
    // Every trainer starts from the same model: the first one's score says it.
    for (const nlohmann::json& r : trainers) {
      if (r.contains("init_eval")) {
        out["init"]["eval"] = r["init_eval"];
        break;
      }
    }
  }
  if (!latest_export_.is_null()) {
    out["export"] = latest_export_;
    // The job's model is the export: its evaluation is the job's.
    const nlohmann::json& eval = latest_export_["eval"];
    if (eval.is_object() && eval.contains("eval_ne")) {
      for (const char* key : {"eval_ne", "eval_auc", "eval_logloss", "eval_calibration"}) {
        out[key] = eval[key];
      }
      out["eval_source"] = "the exported model";
    }
  }
  // Synthetic data: the planted teacher's own quality, the best any model can do.
  std::ifstream teacher_file(run_dir_ + "/data/synthetic.tsv.teacher.json");
  nlohmann::json teacher = nlohmann::json::parse(teacher_file, nullptr, false);
  if (teacher.is_object()) out["teacher"] = teacher;
  nlohmann::json series = nlohmann::json::array();
  for (const Sample& s : samples_) {
    series.push_back({{"seconds", s.seconds},
                      {"examples", s.examples},
                      {"examples_per_second", s.examples_per_second},
                      {"train_ne", s.train_ne}});
  }
  out["progress"] = std::move(series);
  return out;
}

// Two stacked line charts over time: throughput and running train NE.
void Launch::WritePlot(const std::string& path) const {
  const int w = 720, panel = 200, ml = 80, mr = 20, mt = 30, gap = 40;
  const double t1 = samples_.empty() ? 1 : std::max(samples_.back().seconds, 1e-9);
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\""
      << mt + 2 * panel + gap + 40 << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << w / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">"
      << job_.metadata.name << ": " << EnumName(job_.spec.sync.algorithm) << ", "
      << job_.spec.trainer.replicas << " trainers</text>\n";
  auto chart = [&](int top, const char* label, auto value, const char* color) {
    double lo = 1e300, hi = -1e300;
    for (const Sample& s : samples_) {
      if (s.examples == 0) continue;
      lo = std::min(lo, value(s));
      hi = std::max(hi, value(s));
    }
    if (lo > hi) lo = 0, hi = 1;
    if (hi - lo < 1e-9) hi = lo + 1e-9;
    auto sx = [&](double t) { return ml + t / t1 * (w - ml - mr); };
    auto sy = [&](double v) { return top + (hi - v) / (hi - lo) * panel; };
    svg << "<line x1=\"" << ml << "\" y1=\"" << top + panel << "\" x2=\"" << w - mr << "\" y2=\""
        << top + panel << "\" stroke=\"black\"/>\n"
        << "<line x1=\"" << ml << "\" y1=\"" << top << "\" x2=\"" << ml << "\" y2=\"" << top + panel
        << "\" stroke=\"black\"/>\n"
        << "<text x=\"" << ml + 6 << "\" y=\"" << top + 12 << "\">" << label << "</text>\n"
        << absl::StrFormat("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n", ml - 4,
                           sy(hi) + 4, hi)
        << absl::StrFormat("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n", ml - 4,
                           sy(lo) + 4, lo)
        << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (const Sample& s : samples_) {
      if (s.examples == 0) continue;
      svg << absl::StrFormat("%.1f,%.1f ", sx(s.seconds), sy(value(s)));
    }
    svg << "\"/>\n";
  };
  chart(
      mt, "examples/s", [](const Sample& s) { return s.examples_per_second; }, "#1f77b4");
  chart(
      mt + panel + gap, "train NE (running)", [](const Sample& s) { return s.train_ne; },
      "#d62728");
  svg << "<text x=\"" << (ml + w - mr) / 2 << "\" y=\"" << mt + 2 * panel + gap + 30
      << "\" text-anchor=\"middle\">seconds (0 - " << absl::StrFormat("%.0f", t1)
      << ")</text>\n</svg>\n";
  std::ofstream(path) << svg.str();
}

Child Launch::PsChild(int i, const std::string& address, bool join) const {
  Child c{.name = absl::StrCat("ps-", i), .role = Role::kPs};
  c.log = absl::StrCat(run_dir_, "/", c.name, ".log");
  c.ready = absl::StrCat(run_dir_, "/", c.name, ".ready");
  c.argv = {options_.binary};
  for (std::string& a : PsArgs(job_.spec, {.listen = address,
                                          .metrics_listen = "127.0.0.1:0",
                                          .db = absl::StrCat(run_dir_, "/ps-", i),
                                          .peers = ps_addresses_,
                                          .self_index = i,
                                          .join = join,
                                          .ready_file = c.ready})) {
    c.argv.push_back(std::move(a));
  }
  return c;
}

void Launch::WriteLaunchState() const {
  const nlohmann::json state = {{"parameter_servers", ps_addresses_.size()},
                                {"ps_addresses", ps_addresses_}};
  const std::string path = run_dir_ + "/launch.json";
  std::ofstream(path + ".tmp") << state.dump(2) << "\n";
  fs::rename(path + ".tmp", path);
}

absl::StatusOr<nlohmann::json> Launch::ScaleTo(int n, bool pause) {
  const int current = static_cast<int>(ps_addresses_.size());
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--ps: must be >= 1, got ", n));
  }
  if (n == current) {
    return nlohmann::json{{"servers_before", n}, {"servers_after", n}, {"unchanged", true}};
  }
  std::vector<pid_t> paused;
  auto resume = [&paused] {
    for (pid_t pid : paused) kill(pid, SIGCONT);
    paused.clear();
  };
  absl::Cleanup resume_on_return = resume;
  if (pause) {
    for (const Child& c : children_) {
      if (c.role == Role::kTrainer && c.pid > 0 && kill(c.pid, SIGSTOP) == 0) {
        paused.push_back(c.pid);
      }
    }
    // Requests already sent still land: wait until the cluster stops changing.
    std::optional<ps::RowSetChecksum> last;
    for (int i = 0; i < 50; ++i) {
      absl::StatusOr<ps::RowSetChecksum> now =
          ps::ClusterChecksum(ps_addresses_, absl::Seconds(120), security_);
      if (now.ok() && last.has_value() && *now == *last) break;
      if (now.ok()) last = *now;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  const std::vector<std::string> before = ps_addresses_;
  std::vector<std::string> after = before;
  after.resize(std::min(n, current));
  for (int i = current; i < n; ++i) {
    absl::StatusOr<int> port = FreePort();
    if (!port.ok()) return port.status();
    after.push_back(absl::StrCat("127.0.0.1:", *port));
    fs::remove_all(absl::StrCat(run_dir_, "/ps-", i));  // A server scaled away earlier.
    Child c = PsChild(i, after.back(), /*join=*/true);
    absl::Status started = Spawn(c);
    children_.push_back(std::move(c));
    if (started.ok()) started = AwaitReady(children_.back());
    if (!started.ok()) return started;
    std::cerr << "  " << children_.back().name
              << " metrics: http://127.0.0.1:" << children_.back().metrics_port
              << "/metrics  log: " << children_.back().log << "\n";
  }
  std::cerr << (options_.tty ? "\n" : "") << "resharding " << current << " -> " << n
            << " parameter server(s)" << (pause ? " with training paused" : "") << "\n";
  ps::ReshardOptions o;
  o.security = security_;
  o.log = [](const std::string& line) { std::cerr << "  " << line << "\n"; };
  absl::StatusOr<ps::ReshardReport> report = ps::Reshard(before, after, o);

  // Servers from index `first` on leave the job.
  auto stop_from = [&](int first) {
    for (auto it = children_.begin(); it != children_.end();) {
      if (it->role == Role::kPs && std::stoi(it->name.substr(3)) >= first) {
        Stop(*it);
        retired_peak_rss_[it->name] = it->peak_rss_kb * 1024;
        it = children_.erase(it);
      } else {
        ++it;
      }
    }
  };
  if (!report.ok()) {
    // Completed steps stand (a failed one was rolled back): the servers'
    // map says which of them are in the job now.
    absl::StatusOr<ShardMap> map =
        ps::FetchShardMap(ps_addresses_.front(), absl::Seconds(30), security_);
    if (map.ok()) {
      ps_addresses_ = map->addresses();
      stop_from(map->num_servers());
      WriteLaunchState();
    }
    return report.status();
  }
  ps_addresses_ = after;
  if (n < current) {
    // A drained server lingers, answering WRONG_OWNER, until every trainer
    // has learned the new map from it: stopped at once, it would meet
    // trainers (paused ones above all) still routing to it, whose pushes
    // then fail in a way they cannot prove unapplied (CANCELLED, a broken
    // pipe) and must restart.
    resume();
    std::this_thread::sleep_for(kDrainedLinger);
    stop_from(n);
    for (int i = n; i < current; ++i) fs::remove_all(absl::StrCat(run_dir_, "/ps-", i));
  }
  WriteLaunchState();
  nlohmann::json r = ps::ReshardReportToJson(*report);
  r["paused"] = pause;
  reshards_.push_back(r);
  if (pause && !(report->cluster_before == report->cluster_after)) {
    return absl::DataLossError(
        absl::StrCat("with training paused, the cluster's rows changed in the reshard: before ",
                     r["cluster_before"].dump(), ", after ", r["cluster_after"].dump()));
  }
  return r;
}

std::string Launch::ExportsDir() const {
  return job_.spec.export_.path.empty() ? run_dir_ + "/exports" : job_.spec.export_.path;
}

exporter::JobExportRequest Launch::ExportRequest() const {
  return {.job = job_,
          .exports_dir = ExportsDir(),
          .ps_address = ps_addresses_.front(),
          .syncer_addresses = syncer_addresses_,
          .trainer_checkpoints = checkpoints_,
          .security = security_};
}

void Launch::StartExport(const std::string& request_id) {
  last_export_ = Clock::now();
  if (export_.has_value()) {
    if (!request_id.empty()) {
      AnswerControl("export", request_id,
                    {{"ok", false}, {"error", "an export is running already; try again later"}});
    }
    return;
  }
  // Fresh dense parameters: every running trainer writes its checkpoint at
  // its next progress report. Only trainers that are ready (whose SIGUSR1
  // handler is installed) are asked; the others' last checkpoints stand.
  std::vector<std::pair<std::string, fs::file_time_type>> asked;
  for (const Child& c : children_) {
    if (c.role != Role::kTrainer || c.pid <= 0 || c.finished || !fs::exists(c.ready)) continue;
    std::error_code ec;
    asked.emplace_back(c.checkpoint, fs::last_write_time(c.checkpoint, ec));
    kill(c.pid, SIGUSR1);
  }
  // Off the launcher's thread: training, progress and restarts go on.
  export_ = RunningExport{
      .result = std::async(std::launch::async,
                           [asked = std::move(asked), request = ExportRequest()] {
                             // Below the trainers: an export while training
                             // takes spare CPU, not training's.
                             setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
                             const auto deadline = Clock::now() + std::chrono::seconds(30);
                             for (const auto& [path, before] : asked) {
                               std::error_code ec;
                               while (Clock::now() < deadline &&
                                      fs::last_write_time(path, ec) == before) {
                                 std::this_thread::sleep_for(std::chrono::milliseconds(20));
                               }
                             }
                             return exporter::ExportJob(request);
                           }),
      .request_id = request_id,
      .job_seconds = Since(start_)};
}

void Launch::PollExport(bool wait) {
  if (!export_.has_value()) return;
  if (!wait && export_->result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return;
  }
  absl::StatusOr<nlohmann::json> r = export_->result.get();
  nlohmann::json answer;
  if (r.ok()) {
    // When, in the job's time (the progress samples' clock).
    (*r)["job_seconds"] = {export_->job_seconds, Since(start_)};
    LogExport(*r);
    latest_export_ = *r;
    answer = {{"ok", true}, {"report", *r}};
  } else {
    std::cerr << "export failed: " << r.status().message() << "\n";
    answer = {{"ok", false}, {"error", std::string(r.status().message())}};
  }
  if (!export_->request_id.empty()) AnswerControl("export", export_->request_id, answer);
  export_.reset();
}

void Launch::LogExport(const nlohmann::json& summary) const {
  std::cerr << (options_.tty ? "\n" : "") << exporter::DescribeExport(summary) << "\n";
}

absl::StatusOr<nlohmann::json> Launch::FinalExport() {
  PollExport(/*wait=*/true);
  const double job_seconds = Since(start_);
  exporter::JobExportRequest request = ExportRequest();
  request.eval_data = eval_data_;
  SS_ASSIGN_OR_RETURN(nlohmann::json summary, exporter::ExportJob(request));
  summary["job_seconds"] = {job_seconds, Since(start_)};
  LogExport(summary);
  latest_export_ = summary;
  return summary;
}

void Launch::AnswerControl(const std::string& kind, const std::string& id,
                           const nlohmann::json& result) const {
  const std::string path = absl::StrCat(run_dir_, "/control/", kind, "-", id, ".result.json");
  std::ofstream(path + ".tmp") << result.dump(2) << "\n";
  fs::rename(path + ".tmp", path);
}

absl::Status Launch::PollControl() {
  for (const char* kind : {"scale", "export"}) {
    const std::string request_path = absl::StrCat(run_dir_, "/control/", kind, ".json");
    std::ifstream in(request_path);
    if (!in) continue;
    const nlohmann::json request = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    in.close();
    fs::remove(request_path);
    const bool scale = std::string_view(kind) == "scale";
    nlohmann::json result;
    absl::Status fatal;
    if (!request.is_object() || !request.contains("id") || !request["id"].is_string() ||
        (scale && (!request.contains("ps") || !request["ps"].is_number_integer()))) {
      result = {{"ok", false},
                {"error", absl::StrCat("malformed ", kind, " request: ", request.dump())}};
      // Whoever wrote it may not wait for a result (no id): say it here.
      std::cerr << request_path << ": ignored a malformed " << kind << " request (want "
                << (scale ? R"({"id": "...", "ps": N, "pause": false})" : R"({"id": "..."})")
                << "), got " << request.dump() << "\n";
    } else if (!scale) {
      StartExport(request["id"].get<std::string>());  // It answers when done.
      continue;
    } else if (export_.has_value()) {
      // Slots moving under a running export could be read twice or not at all.
      result = {{"ok", false}, {"error", "an export is running; reshard when it is done"}};
    } else {
      absl::StatusOr<nlohmann::json> r =
          ScaleTo(request["ps"].get<int>(), request.value("pause", false));
      if (r.ok()) {
        result = {{"ok", true}, {"report", *r}};
      } else {
        result = {{"ok", false}, {"error", std::string(r.status().message())}};
        std::cerr << kind << " failed: " << r.status().message() << "\n";
        if (scale && r.status().code() == absl::StatusCode::kDataLoss) fatal = r.status();
      }
    }
    if (request.is_object() && request.contains("id") && request["id"].is_string()) {
      AnswerControl(kind, request["id"].get<std::string>(), result);
    }
    SS_RETURN_IF_ERROR(fatal);
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> Launch::Run() {
  SS_ASSIGN_OR_RETURN(job_, LoadJobFile(options_.job_path));
  const JobSpec& spec = job_.spec;
  if (absl::StatusOr<GrpcSecurity> security = LoadGrpcSecurity(SecurityFilesOf(spec.security));
      security.ok()) {
    security_ = *std::move(security);
  } else {
    // Name the job's fields rather than the flags the processes would get.
    return absl::InvalidArgumentError(
        absl::StrReplaceAll(std::string(security.status().message()),
                            {{"--tls-ca-file", "spec.security.tls.caFile"},
                             {"--tls-cert-file", "spec.security.tls.certFile"},
                             {"--tls-key-file", "spec.security.tls.keyFile"},
                             {"--auth-token-file", "spec.security.authToken.file"}}));
  }
  run_dir_ =
      options_.run_dir.empty() ? absl::StrCat("runs/", job_.metadata.name) : options_.run_dir;
  fs::create_directories(run_dir_);
  int num_ps = spec.parameter_server.replicas;
  if (options_.resume) {
    std::ifstream in(run_dir_ + "/launch.json");
    const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!state.is_object()) {
      return absl::FailedPreconditionError(absl::StrCat("--resume: nothing to resume in ", run_dir_,
                                                        " (no launch.json: no job started there)"));
    }
    if (fs::exists(run_dir_ + "/report.json")) {
      return absl::FailedPreconditionError(absl::StrCat("--resume: the job in ", run_dir_,
                                                        " finished (", run_dir_, "/report.json)"));
    }
    num_ps = static_cast<int>(Int(state, "parameter_servers"));
    if (num_ps < 1) {
      return absl::DataLossError(
          absl::StrCat(run_dir_, "/launch.json: parameter_servers = ", num_ps, ", want >= 1"));
    }
    std::cerr << "resuming the job in " << run_dir_ << " with " << num_ps
              << " parameter server(s) and the trainers' checkpoints\n";
  } else {
    // A run starts fresh: a previous run's servers would reopen their state
    // with the shard map of its ports. Generated data (data/) is kept.
    int removed = 0;
    for (const auto& entry : fs::directory_iterator(run_dir_)) {
      const std::string name = entry.path().filename().string();
      if (name == "data") continue;
      if (name.starts_with("ps-") || name.starts_with("syncer-") || name.starts_with("trainer-") ||
          name.starts_with("report.") || name == "job.json" || name == "launch.json" ||
          name == "control") {
        removed += static_cast<int>(fs::remove_all(entry.path()) > 0);
      }
    }
    if (removed > 0) {
      std::cerr << "starting fresh in " << run_dir_ << ": removed the previous run's state\n";
    }
  }
  fs::remove_all(run_dir_ + "/control");  // Requests for a launcher that is gone.
  fs::create_directories(run_dir_ + "/control");
  std::ofstream(run_dir_ + "/control/launcher.pid") << getpid() << "\n";
  // The children read the job as the launcher validated it.
  std::ofstream(run_dir_ + "/job.json") << JobToJson(job_).dump(2) << "\n";
  SS_ASSIGN_OR_RETURN(JobData data, PrepareJobData(spec, run_dir_ + "/data"));
  if (data.train.empty()) return absl::InvalidArgumentError("spec.data.paths: no training files");
  total_examples_ = data.train_examples;
  eval_data_ = data.eval;
  // A warm start's export is checked before anything starts.
  std::optional<model::ExportReader> init_model;
  if (!spec.init.from_model.empty() && !options_.resume) {
    absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(spec.init.from_model);
    if (!reader.ok()) {
      return absl::Status(reader.status().code(),
                          absl::StrCat("spec.init.fromModel: ", reader.status().message()));
    }
    const model::ExportInfo info = exporter::ExportInfoForJob(job_);
    absl::Status checked = reader->CheckShape(info.config, info.embeddings.tables);
    // Every file's checksum too, so that a corrupt export starts nothing.
    if (checked.ok()) checked = reader->Verify();
    if (!checked.ok()) {
      return absl::Status(checked.code(), absl::StrCat("spec.init.fromModel: ", checked.message()));
    }
    init_model = *std::move(reader);
  }

  const std::string& bin = options_.binary;
  std::vector<std::string> ps_addresses;
  for (int i = 0; i < num_ps; ++i) {
    SS_ASSIGN_OR_RETURN(int port, FreePort());
    ps_addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  ps_addresses_ = ps_addresses;
  for (int i = 0; i < num_ps; ++i) children_.push_back(PsChild(i, ps_addresses[i], false));
  // Dense checkpoints: a restarted or resumed trainer continues from its own.
  const std::string checkpoint_dir = spec.checkpoint.path.empty() ? run_dir_ : spec.checkpoint.path;
  fs::create_directories(checkpoint_dir);
  std::vector<std::string> syncer_addresses;
  for (int i = 0; i < spec.syncer.replicas; ++i) {
    SS_ASSIGN_OR_RETURN(int port, FreePort());
    syncer_addresses.push_back(absl::StrCat("127.0.0.1:", port));
    syncer_addresses_.push_back(syncer_addresses.back());
    Child c{.name = absl::StrCat("syncer-", i), .role = Role::kSyncer};
    c.argv = {bin};
    for (std::string& a :
         SyncerArgs(spec, {.listen = syncer_addresses.back(), .metrics_listen = "127.0.0.1:0"})) {
      c.argv.push_back(std::move(a));
    }
    children_.push_back(std::move(c));
  }
  for (int i = 0; i < spec.trainer.replicas; ++i) {
    Child c{.name = absl::StrCat("trainer-", i), .role = Role::kTrainer};
    c.checkpoint = absl::StrCat(checkpoint_dir, "/trainer-", i, ".ckpt");
    checkpoints_.push_back(c.checkpoint);
    c.argv = {bin};
    for (std::string& a : TrainerArgs(
             spec, {.config = run_dir_ + "/job.json",
                   .index = i,
                   .ps = ps_addresses.front(),
                   .syncers = syncer_addresses,
                   .metrics_listen = "127.0.0.1:0",
                   .data = data,
                   .checkpoint = c.checkpoint,
                   .report_json = absl::StrCat(run_dir_, "/trainer-", i, ".json"),
                   .progress_file = absl::StrCat(run_dir_, "/trainer-", i, ".progress.json")})) {
      c.argv.push_back(std::move(a));
    }
    if (options_.resume) {
      // Counted as done from the start, like a restarted trainer's share.
      absl::StatusOr<worker::DenseCheckpoint> checkpoint =
          worker::LoadDenseCheckpoint(c.checkpoint);
      if (checkpoint.ok()) c.skip_examples = checkpoint->examples;
    }
    children_.push_back(std::move(c));
  }
  for (Child& c : children_) {
    if (c.role == Role::kPs) continue;  // PsChild did it.
    c.log = absl::StrCat(run_dir_, "/", c.name, ".log");
    c.ready = absl::StrCat(run_dir_, "/", c.name, ".ready");
    c.argv.insert(c.argv.end(), {"--ready-file", c.ready});
    fs::remove(absl::StrCat(run_dir_, "/", c.name, ".progress.json"));
  }

  std::cerr << absl::StrFormat(
      "job %s: %d trainer(s) x %d threads, %d parameter server(s), %d syncer(s), sync %s; run dir "
      "%s\n",
      job_.metadata.name, spec.trainer.replicas, spec.trainer.threads, num_ps, spec.syncer.replicas,
      EnumName(spec.sync.algorithm), run_dir_);
  // Servers first, each ready before the trainers start.
  for (Child& c : children_) {
    if (c.role == Role::kTrainer) continue;
    SS_RETURN_IF_ERROR(Spawn(c));
    SS_RETURN_IF_ERROR(AwaitReady(c));
  }
  if (options_.resume) {
    // The servers came back on new ports, each knowing only its own.
    SS_RETURN_IF_ERROR(ps::Readdress(ps_addresses_, absl::Seconds(30), security_).status());
  }
  if (init_model.has_value()) {
    // Before launch.json: a launcher killed during the import starts afresh.
    absl::StatusOr<exporter::RowStreamStats> imported = exporter::ImportServerRows(
        *init_model, job_, ps_addresses_.front(), {.security = security_});
    if (!imported.ok()) {
      return absl::Status(imported.status().code(),
                          absl::StrCat("spec.init.fromModel: ", imported.status().message()));
    }
    init_ = {{"from_model", spec.init.from_model},
             {"rows", imported->rows},
             {"seconds", imported->seconds},
             {"rows_per_second", imported->rows / std::max(imported->seconds, 1e-9)},
             {"parameter_servers", imported->servers}};
    std::cerr << absl::StrFormat("loaded %d rows of %s onto %d parameter server(s) in %.1f s\n",
                                 imported->rows, spec.init.from_model, imported->servers,
                                 imported->seconds);
  }
  WriteLaunchState();
  start_ = Clock::now();
  last_export_ = start_;
  for (Child& c : children_) {
    if (c.role == Role::kTrainer) SS_RETURN_IF_ERROR(Spawn(c));
  }
  for (Child& c : children_) {
    if (c.role == Role::kTrainer) SS_RETURN_IF_ERROR(AwaitReady(c));
  }
  for (const Child& c : children_) {
    std::cerr << "  " << c.name << " metrics: http://127.0.0.1:" << c.metrics_port
              << "/metrics  log: " << c.log << "\n";
  }

  auto last_progress = Clock::now();
  while (true) {
    if (options_.stop != nullptr && options_.stop->load()) {
      StopAll();
      return absl::CancelledError("stopped: every child was sent SIGTERM");
    }
    SS_RETURN_IF_ERROR(Reap());
    SS_RETURN_IF_ERROR(PollControl());
    PollExport(/*wait=*/false);
    const bool done = std::all_of(children_.begin(), children_.end(), [](const Child& c) {
      return c.role != Role::kTrainer || c.finished;
    });
    if (done) break;
    if (spec.export_.interval_seconds > 0 &&
        Since(last_export_) >= static_cast<double>(spec.export_.interval_seconds)) {
      // A failed periodic export does not stop training; the next one retries.
      StartExport("");
    }
    if (Since(last_progress) >= options_.progress_interval_seconds) {
      last_progress = Clock::now();
      ShowProgress(false);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds = Since(start_);
  ShowProgress(true);
  // The servers still run: the model leaves the job before they stop.
  absl::StatusOr<nlohmann::json> exported = FinalExport();
  StopAll();
  nlohmann::json report = Report(seconds);
  if (!exported.ok()) {
    report["export_error"] = std::string(exported.status().message());
    std::ofstream(run_dir_ + "/report.json") << report.dump(2) << "\n";
    return absl::Status(exported.status().code(), absl::StrCat("the export at completion failed: ",
                                                               exported.status().message()));
  }
  std::ofstream(run_dir_ + "/report.json") << report.dump(2) << "\n";
  WritePlot(run_dir_ + "/report.svg");
  return report;
}

}  // namespace

namespace {

// Hands `body` to the launcher running in run_dir as control/<kind>.json and
// waits for its answer, control/<kind>-<id>.result.json.
absl::StatusOr<nlohmann::json> ControlRequest(const std::string& run_dir, const std::string& kind,
                                              nlohmann::json body, double timeout_seconds) {
  const std::string control = run_dir + "/control";
  std::ifstream pid_file(control + "/launcher.pid");
  pid_t pid = 0;
  if (!(pid_file >> pid) || pid <= 0 || kill(pid, 0) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("no `shadowsync run` is running in ", run_dir,
                                                      " (", control, "/launcher.pid)"));
  }
  std::random_device random;
  const std::string id = absl::StrFormat("%d-%08x", getpid(), random());
  body["id"] = id;
  const std::string path = absl::StrCat(control, "/", kind, ".json");
  if (fs::exists(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("another ", kind, " request is pending (", path, "); wait for it to finish"));
  }
  // Through a rename: the launcher never reads half a request.
  std::ofstream(path + "." + id) << body.dump() << "\n";
  fs::rename(path + "." + id, path);
  const std::string result_path = absl::StrCat(control, "/", kind, "-", id, ".result.json");
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1e3));
  while (Clock::now() < deadline) {
    std::ifstream in(result_path);
    if (in) {
      const nlohmann::json result = nlohmann::json::parse(in, nullptr, false);
      fs::remove(result_path);
      if (!result.is_object()) return absl::InternalError("unreadable answer " + result_path);
      if (!result.value("ok", false)) {
        return absl::AbortedError(result.value("error", kind + " failed"));
      }
      return result["report"];
    }
    if (kill(pid, 0) != 0) {
      return absl::AbortedError(absl::StrCat("the launcher (pid ", pid, ") exited"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no answer from the launcher after ", timeout_seconds, " s"));
}

}  // namespace

absl::StatusOr<nlohmann::json> RequestScale(const ScaleRequest& request) {
  if (request.parameter_servers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps: must be >= 1, got ", request.parameter_servers));
  }
  return ControlRequest(request.run_dir, "scale",
                        {{"ps", request.parameter_servers}, {"pause", request.pause}},
                        request.timeout_seconds);
}

absl::StatusOr<nlohmann::json> RequestExport(const std::string& run_dir, double timeout_seconds) {
  return ControlRequest(run_dir, "export", nlohmann::json::object(), timeout_seconds);
}

absl::StatusOr<nlohmann::json> RunJob(const LaunchOptions& options) {
  Launch launch(options);
  try {
    return launch.Run();
  } catch (const std::exception& e) {
    // Unwinding stops the children (~Launch); an uncaught exception would not.
    return absl::InternalError(absl::StrCat("launcher failed: ", e.what()));
  }
}

}  // namespace shadowsync::cli
