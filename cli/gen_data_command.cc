// `shadowsync gen-data`: synthetic Criteo-layout data from a planted teacher.
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "data/synthetic.h"

namespace shadowsync::cli {
namespace {

// train.tsv -> train.eval.tsv, train.tsv.gz -> train.eval.tsv.gz, other -> other.eval.
std::string DefaultEvalPath(const std::string& out) {
  for (const char* suffix : {".tsv.gz", ".tsv"}) {
    if (absl::EndsWith(out, suffix)) {
      return absl::StrCat(out.substr(0, out.size() - std::string(suffix).size()), ".eval", suffix);
    }
  }
  return absl::EndsWith(out, ".gz") ? absl::StrCat(out.substr(0, out.size() - 3), ".eval.gz")
                                    : absl::StrCat(out, ".eval");
}

}  // namespace

Action AddGenDataCommand(CLI::App& app) {
  auto options = std::make_shared<SyntheticOptions>();
  CLI::App* cmd = app.add_subcommand(
      "gen-data",
      "Write synthetic Criteo-layout data and FILE.teacher.json (the best achievable NE).");
  cmd->add_option("--out", options->out_path, "output TSV (.gz for gzip)")->required();
  cmd->add_option("--examples", options->examples, "examples to write")->capture_default_str();
  cmd->add_option("--eval-examples", options->eval_examples,
                  "also write this many held-out examples from the same teacher (for --eval-data)")
      ->capture_default_str();
  cmd->add_option("--eval-out", options->eval_out_path,
                  "file for the held-out examples (default: --out with .eval before .tsv)");
  cmd->add_option("--seed", options->seed, "generator seed (picks the teacher and the examples)")
      ->capture_default_str();
  cmd->add_option("--multi-hot-columns", options->multi_hot_columns,
                  "the last N categorical columns hold several ids each, comma-separated")
      ->capture_default_str();
  cmd->add_option("--max-ids-per-field", options->max_ids_per_field,
                  "a multi-hot field holds 1 to this many ids")
      ->capture_default_str();
  return [options] {
    if (options->eval_examples > 0 && options->eval_out_path.empty()) {
      options->eval_out_path = DefaultEvalPath(options->out_path);
    }
    TeacherReport eval;
    auto report = GenerateSynthetic(*options, &eval);
    if (!report.ok()) {
      TellUser(absl::StrCat("shadowsync gen-data: ", report.status().message()));
      return report.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::cout << absl::StrFormat("wrote %d examples to %s (ctr %.4f); teacher NE %.4f AUC %.4f\n",
                                 report->examples, options->out_path, report->ctr, report->ne,
                                 report->auc);
    if (options->eval_examples > 0) {
      std::cout << absl::StrFormat(
          "wrote %d held-out examples to %s (ctr %.4f); teacher NE %.4f AUC %.4f\n", eval.examples,
          options->eval_out_path, eval.ctr, eval.ne, eval.auc);
    }
    return 0;
  };
}

}  // namespace shadowsync::cli
