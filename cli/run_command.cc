// `shadowsync run job.yaml`: the whole job as local processes (cli/launcher.h).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/launcher.h"

namespace shadowsync::cli {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

std::string SelfPath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "shadowsync";
}

void PrintReport(const nlohmann::json& r) {
  std::cout << absl::StrFormat(
      "job %s (%s): %d examples in %.1f s = %.0f examples/s, %d trainers x %d threads\n",
      r["job"].get<std::string>(), r["algorithm"].get<std::string>(), r["examples"].get<int64_t>(),
      r["seconds"].get<double>(), r["examples_per_second"].get<double>(), r["trainers"].get<int>(),
      r["threads"].get<int>());
  std::cout << absl::StrFormat("train NE %.4f  logloss %.4f", r["train_ne"].get<double>(),
                               r["train_logloss"].get<double>());
  if (r.contains("eval_ne")) {
    std::cout << absl::StrFormat("   eval NE %.4f  AUC %.4f  logloss %.4f  calibration %.3f",
                                 r["eval_ne"].get<double>(), r["eval_auc"].get<double>(),
                                 r["eval_logloss"].get<double>(), r.value("eval_calibration", 0.0));
  }
  std::cout << "\n";
  if (r.contains("teacher") && r["teacher"].contains("ne")) {
    std::cout << absl::StrFormat("teacher (the best achievable on this data): NE %.4f  AUC %.4f\n",
                                 r["teacher"]["ne"].get<double>(), r["teacher"].value("auc", 0.0));
  }
  const nlohmann::json& s = r["sync"];
  std::cout << absl::StrFormat(
      "sync: %d rounds, %.1f MB sent, %.1f MB received, mean round %.1f ms, mean gap %.1f "
      "steps, training blocked %.2f s\n",
      s["rounds"].get<int64_t>(), s["bytes_sent"].get<int64_t>() / 1e6,
      s["bytes_received"].get<int64_t>() / 1e6, 1000 * s["mean_round_seconds"].get<double>(),
      s["mean_gap_steps"].get<double>(), s["blocked_seconds"].get<double>());
  std::cout << "peak memory:";
  for (const auto& [name, bytes] : r["peak_rss_bytes"].items()) {
    std::cout << absl::StrFormat(" %s %.0f MiB", name, bytes.get<int64_t>() / 1048576.0);
  }
  std::cout << "\nrestarts: " << r["restarts"].get<int>() << "\n";
  for (const auto& p : r.value("learning_problems", nlohmann::json::array())) {
    std::cout << "WARNING: " << p["trainer"].get<std::string>() << ": "
              << p["problem"].get<std::string>() << "\n";
  }
  const std::string dir = r["run_dir"].get<std::string>();
  std::cout << "report: " << dir << "/report.json  plot: " << dir << "/report.svg\n";
}

}  // namespace

Action AddRunCommand(CLI::App& app) {
  auto options = std::make_shared<LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a ShadowSyncJob (the same YAML kubectl takes) as local processes.");
  cmd->add_option("job", options->job_path, "ShadowSyncJob YAML or JSON")->required();
  cmd->add_option("--out", options->run_dir, "run directory (default: runs/<job name>)");
  cmd->add_option("--progress-interval", options->progress_interval_seconds,
                  "seconds between progress updates")
      ->capture_default_str();
  cmd->add_flag("--resume", options->resume,
                "continue the job in the run directory (after the launcher was killed) from its "
                "servers' state and the trainers' checkpoints");
  cmd->add_flag("--fail-on-divergence", options->fail_on_divergence,
                "fail the job (exit 1) when a trainer's run is not learning "
                "(spec.trainer.learningCheck.fail)");
  return [options] {
    options->binary = SelfPath();
    options->tty = isatty(STDERR_FILENO);
    options->stop = &g_stop;
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    auto report = RunJob(*options);
    if (!report.ok()) {
      TellUser(absl::StrCat("shadowsync run: ", report.status().message()));
      switch (report.status().code()) {
        case absl::StatusCode::kInvalidArgument:
        case absl::StatusCode::kFailedPrecondition:
          return 2;
        case absl::StatusCode::kCancelled:
          return 130;
        default:
          return 1;
      }
    }
    PrintReport(*report);
    return 0;
  };
}

}  // namespace shadowsync::cli
