// Launch (cli/launch_internal.h): the progress line, the report and its chart.

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cli_util.h"
#include "cli/launch_internal.h"
#include "cli/plot.h"
#include "glog/logging.h"

namespace shadowsync::cli::internal {

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
  cli::ShowProgress(line, /*redraw=*/options_.tty);
  if (final) EndProgress();
}

void Launch::LogEndpoints(const Child& c) const {
  LOG(INFO) << c.name << " metrics: http://127.0.0.1:" << c.metrics_port
            << "/metrics  log: " << c.log;
}

nlohmann::json Launch::Report(double seconds) {
  nlohmann::json trainers = nlohmann::json::array();
  int64_t examples = 0, rounds = 0, sent = 0, received = 0;
  double ne = 0, logloss = 0, blocked = 0, round_seconds = 0, gap = 0;
  double eval_ne = 0, eval_auc = 0, eval_logloss = 0, eval_calibration = 0;
  int evaluated = 0, n = 0;
  nlohmann::json learning_problems = nlohmann::json::array();
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
    if (!r.value("learning_problem", "").empty()) {
      learning_problems.push_back({{"trainer", c.name}, {"problem", r["learning_problem"]}});
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
  // LearningCheck's findings (worker/learning_check.h), which the trainers
  // also logged as they happened.
  if (!learning_problems.empty()) out["learning_problems"] = std::move(learning_problems);
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
  // Synthetic data: the planted teacher's own quality on the held-out
  // examples, the best eval any model can reach.
  std::ifstream teacher_file(run_dir_ + "/data/eval.tsv.teacher.json");
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

// Two panels over the run's time: throughput, and the running train NE with
// the final eval NE and, on synthetic data, the teacher's NE (the floor).
void Launch::WritePlot(const std::string& path, const nlohmann::json& report) const {
  PlotSeries throughput{.label = "examples/s", .color = "#1f77b4"};
  PlotSeries train_ne{.label = "train NE (running)", .color = "#d62728"};
  double end = 0;
  for (const Sample& s : samples_) {
    end = std::max(end, s.seconds);
    if (s.examples == 0) continue;
    throughput.points.emplace_back(s.seconds, s.examples_per_second);
    train_ne.points.emplace_back(s.seconds, s.train_ne);
  }
  PlotPanel quality{.title = "normalized entropy", .y_unit = "NE", .series = {train_ne}};
  if (report.contains("eval_ne") && report["eval_ne"].is_number()) {
    quality.markers.push_back(
        {.label = "eval NE", .color = "#2ca02c", .x = end, .y = report["eval_ne"].get<double>()});
  }
  if (report.contains("teacher") && report["teacher"].is_object()) {
    const double floor = Num(report["teacher"], "ne");
    if (floor > 0) quality.levels.push_back({.label = "teacher", .color = "#7f7f7f", .y = floor});
  }
  const std::vector<PlotPanel> panels = {
      {.title = "throughput", .y_unit = "examples/s", .series = {throughput}}, quality};
  const PlotOptions options{.title = absl::StrCat(job_.metadata.name, ": ",
                                                  std::string(EnumName(job_.spec.sync.algorithm)),
                                                  ", ", job_.spec.trainer.replicas, " trainers"),
                            .x_label = "seconds"};
  std::ofstream(path) << RenderSvgChart(options, panels);
}

}  // namespace shadowsync::cli::internal
