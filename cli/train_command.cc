// `shadowsync train` and `shadowsync eval`: single-process training with
// Hogwild threads and an in-process embedding store, and scoring a saved model.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/exit_codes.h"
#include "common/status_macros.h"
#include "data/synthetic.h"
#include "exporter/evaluate_export.h"
#include "glog/logging.h"
#include "jobspec/job_spec.h"
#include "model/export.h"
#include "model/gemm.h"
#include "model/model_io.h"
#include "nlohmann/json.hpp"
#include "worker/model_config.h"
#include "worker/trainer.h"

namespace shadowsync::cli {
namespace {

struct TrainFlags {
  std::string config;
  std::vector<std::string> data;
  std::vector<std::string> eval_data;
  int threads = 2;
  int batch_size = 256;
  double lr = 0.02;
  int64_t lr_warmup_steps = JobSpec{}.trainer.lr_warmup_steps;
  LearningCheckSpec learning_check;  // From --config; --fail-on-divergence sets .fail.
  std::string optimizer = "adagrad";
  int64_t hash_buckets = 1'000'000;
  int embedding_dim = 16;
  std::string bottom_mlp = "512,256,64";
  std::string top_mlp = "512,256";
  std::string interaction = "dot";
  int dcn_layers = DcnSpec{}.layers;
  int dcn_low_rank = DcnSpec{}.low_rank;
  std::string pooling = "sum";                // --pooling: every table's.
  std::vector<model::Pooling> table_pooling;  // The job file's, unless --pooling is given.
  uint64_t seed = 1;
  int64_t max_examples = -1;
  int parse_threads = 1;
  std::string dense_precision = "fp32";
  std::string gemm = "auto";
  bool preload = false;
  double progress_interval = 2.0;
  std::string report_json;
  std::string save_model;
  std::string init_model;
  std::string work_dir = "runs/train";
  // From --config: the export records the job, and divides its slot space.
  nlohmann::json job = nullptr;
  uint32_t slots = 4096;
};

absl::StatusOr<std::vector<int>> ParseWidths(const std::string& flag, const std::string& text) {
  std::vector<int> widths;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int w = 0;
    if (!absl::SimpleAtoi(part, &w) || w < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": bad layer width '", part, "' in '", text, "'"));
    }
    widths.push_back(w);
  }
  return widths;
}

// Fills `flags` from a job file, for every setting not given on the command line.
absl::Status ApplyJobFile(const CLI::App& cmd, TrainFlags& flags) {
  SS_ASSIGN_OR_RETURN(ShadowSyncJob job, LoadJobFile(flags.config));
  const JobSpec& spec = job.spec;
  flags.job = JobToJson(job);
  flags.slots = static_cast<uint32_t>(spec.parameter_server.slots);
  auto given = [&](const char* name) { return cmd.get_option(name)->count() > 0; };
  if (!given("--threads")) flags.threads = spec.trainer.threads;
  if (!given("--batch-size")) flags.batch_size = spec.trainer.batch_size;
  if (!given("--lr")) flags.lr = spec.trainer.learning_rate;
  if (!given("--lr-warmup-steps")) flags.lr_warmup_steps = spec.trainer.lr_warmup_steps;
  const bool fail = flags.learning_check.fail;  // The flag's, if given.
  flags.learning_check = spec.trainer.learning_check;
  flags.learning_check.fail |= fail;
  if (!given("--optimizer")) flags.optimizer = std::string(EnumName(spec.trainer.optimizer));
  if (!given("--dense-precision"))
    flags.dense_precision = std::string(EnumName(spec.trainer.dense_precision));
  if (!given("--embedding-dim")) flags.embedding_dim = spec.model.embedding_dim;
  auto join = [](const std::vector<int>& v) {
    std::string s;
    for (int w : v) absl::StrAppend(&s, s.empty() ? "" : ",", w);
    return s;
  };
  if (!given("--bottom-mlp")) flags.bottom_mlp = join(spec.model.bottom_mlp);
  if (!given("--top-mlp")) flags.top_mlp = join(spec.model.top_mlp);
  if (!given("--interaction")) flags.interaction = std::string(EnumName(spec.model.interaction));
  if (!given("--dcn-layers")) flags.dcn_layers = spec.model.dcn.layers;
  if (!given("--dcn-low-rank")) flags.dcn_low_rank = spec.model.dcn.low_rank;
  if (!given("--pooling")) flags.table_pooling = worker::DlrmConfigFor(spec.model).pooling;
  if (!given("--hash-buckets")) flags.hash_buckets = spec.model.tables.front().hash_buckets;
  if (given("--data")) return absl::OkStatus();
  SS_ASSIGN_OR_RETURN(JobData data, PrepareJobData(spec, flags.work_dir));
  flags.data = data.train;
  if (!given("--eval-data")) flags.eval_data = data.eval;
  return absl::OkStatus();
}

void PrintProgress(const worker::Progress& p) {
  std::string bar;
  if (p.total > 0) {
    const double frac = std::min(1.0, static_cast<double>(p.examples) / p.total);
    const int width = 30, filled = static_cast<int>(frac * width);
    const double eta =
        p.examples_per_second > 0 ? (p.total - p.examples) / p.examples_per_second : 0;
    bar = absl::StrFormat("[%s%s] %5.1f%% eta %4.0fs ", std::string(filled, '#'),
                          std::string(width - filled, '.'), 100 * frac, eta);
  }
  const std::string line =
      absl::StrFormat("%s%d examples  %.0f ex/s  loss %.4f  train NE %.4f  %.0fs", bar, p.examples,
                      p.examples_per_second, p.loss, p.train_ne, p.seconds);
  ShowProgress(line, /*redraw=*/isatty(STDERR_FILENO));
}

int Fail(const absl::Status& s) {
  TellUser(absl::StrCat("shadowsync: ", s.message()));
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int RunTrain(const CLI::App& cmd, TrainFlags flags) {
  if (!flags.config.empty()) {
    if (absl::Status s = ApplyJobFile(cmd, flags); !s.ok()) return Fail(s);
  }
  flags.data = SplitList(flags.data);
  flags.eval_data = SplitList(flags.eval_data);
  if (flags.data.empty())
    return Fail(absl::InvalidArgumentError("--data: no training files given"));

  model::DlrmConfig config;
  config.embedding_dim = flags.embedding_dim;
  auto bottom = ParseWidths("--bottom-mlp", flags.bottom_mlp);
  auto top = ParseWidths("--top-mlp", flags.top_mlp);
  if (!bottom.ok()) return Fail(bottom.status());
  if (!top.ok()) return Fail(top.status());
  config.bottom_mlp = *bottom;
  config.top_mlp = *top;
  auto interaction = model::ParseInteraction(flags.interaction, "--interaction");
  if (!interaction.ok()) return Fail(interaction.status());
  config.interaction = *interaction;
  for (auto [flag, value] : {std::pair{"--dcn-layers", flags.dcn_layers},
                             std::pair{"--dcn-low-rank", flags.dcn_low_rank}}) {
    if (value < 1) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(flag, ": must be >= 1, got ", value)));
    }
  }
  config.dcn_layers = flags.dcn_layers;
  config.dcn_low_rank = flags.dcn_low_rank;
  auto pooling = model::ParsePooling(flags.pooling, "--pooling");
  if (!pooling.ok()) return Fail(pooling.status());
  config.pooling = flags.table_pooling;
  if (*pooling == model::Pooling::kMean) config.pooling.assign(config.num_tables, *pooling);
  if (absl::Status s = config.Validate(); !s.ok()) return Fail(s);
  auto kind = model::ParseOptimizerKind(flags.optimizer);
  if (!kind.ok()) return Fail(kind.status());
  if (flags.threads < 1 || flags.batch_size < 1 || !(flags.lr > 0) || flags.hash_buckets < 1) {
    return Fail(absl::InvalidArgumentError(
        "--threads, --batch-size, --lr and --hash-buckets must all be positive"));
  }
  if (flags.lr_warmup_steps < 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--lr-warmup-steps: must be >= 0, got ", flags.lr_warmup_steps)));
  }
  auto precision = model::ParseDensePrecision(flags.dense_precision, "--dense-precision");
  if (!precision.ok()) return Fail(precision.status());
  auto gemm = model::ParseGemmKernel(flags.gemm, "--gemm");
  if (!gemm.ok()) return Fail(gemm.status());

  model::LocalStoreOptions store_options;
  store_options.dim = config.embedding_dim;
  for (int t = 0; t < config.num_tables; ++t) {
    store_options.tables.push_back(
        {absl::StrCat("C", t + 1), static_cast<uint64_t>(flags.hash_buckets)});
  }
  store_options.optimizer = {*kind, static_cast<float>(flags.lr)};
  store_options.seed = flags.seed;
  model::LocalEmbeddingStore store(store_options);
  // A warm start: every row now, the dense parameters once the trainer exists.
  std::optional<model::ExportReader> init;
  if (!flags.init_model.empty()) {
    absl::StatusOr<model::ExportReader> reader = model::ExportReader::Open(flags.init_model);
    absl::Status s = reader.status();
    if (s.ok()) s = reader->CheckShape(config, store_options.tables);
    if (s.ok()) s = reader->Verify();
    if (s.ok()) s = model::LoadExportRows(*reader, &store);
    if (!s.ok()) return Fail(absl::Status(s.code(), absl::StrCat("--init-model: ", s.message())));
    init = *std::move(reader);
  }

  worker::TrainerOptions options;
  options.threads = flags.threads;
  options.batch_size = flags.batch_size;
  options.optimizer = store_options.optimizer;
  options.lr_warmup_steps = flags.lr_warmup_steps;
  options.learning_check = {.after_examples = flags.learning_check.after_examples,
                            .max_train_ne = flags.learning_check.max_train_ne};
  options.stop_when_not_learning = flags.learning_check.fail;
  options.seed = flags.seed;
  options.precision = *precision;
  options.gemm = *gemm;
  options.max_examples = flags.max_examples;
  options.preload = flags.preload;
  options.reader.parse_threads = flags.parse_threads;
  options.progress_interval_seconds = flags.progress_interval;
  options.on_progress = PrintProgress;
  worker::Trainer trainer(config, store_options.tables, options, &store);
  if (init.has_value()) {
    std::vector<float> params, state;
    if (absl::Status s = init->ReadDense(&params, &state); !s.ok()) return Fail(s);
    std::copy(params.begin(), params.end(), trainer.params().begin());
    if (state.size() == trainer.dense_state().size()) {
      std::copy(state.begin(), state.end(), trainer.dense_state().begin());
    }
    LOG(INFO) << "starting from the export " << flags.init_model << " (" << init->num_rows()
              << " rows)";
  }

  LOG(INFO) << absl::StrFormat(
      "training DLRM (%s interaction, %d dense params, %.2f MFLOP/example, %s GEMMs) on %s: %d "
      "threads, batch %d, %s lr %g (warm-up %d steps)",
      model::InteractionName(config.interaction), trainer.model().num_params(),
      trainer.model().FlopsPerExample() / 1e6, model::DensePrecisionName(*precision),
      flags.data.front(), flags.threads, flags.batch_size, flags.optimizer, flags.lr,
      flags.lr_warmup_steps);
  auto report = trainer.Train(flags.data);
  EndProgress();
  if (!report.ok()) return Fail(report.status());
  for (const auto& e : report->first_errors) LOG(WARNING) << "skipped malformed line: " << e;

  nlohmann::json out = {
      {"examples", report->examples},
      {"seconds", report->seconds},
      {"cpu_seconds", report->cpu_seconds},
      {"load_seconds", report->load_seconds},
      {"examples_per_second", report->examples_per_second},
      {"gemm", model::GemmChoiceToJson(report->gemm)},
      {"train_ne", report->train_ne},
      {"train_logloss", report->train_logloss},
      {"malformed_lines", report->malformed_lines},
      {"threads", flags.threads},
      {"dense_precision", model::DensePrecisionName(*precision)},
      {"batch_size", flags.batch_size},
      {"optimizer", flags.optimizer},
      {"learning_rate", flags.lr},
      {"lr_warmup_steps", flags.lr_warmup_steps},
      {"hash_buckets", flags.hash_buckets},
      {"interaction", model::InteractionName(config.interaction)},
      {"dense_params", trainer.model().num_params()},
      {"embedding_rows", store.num_rows()},
      {"flops_per_example", trainer.model().FlopsPerExample()},
      {"learning_problem", report->learning_problem},
  };
  const bool stopped = !report->learning_problem.empty() && flags.learning_check.fail;
  if (!report->learning_problem.empty()) {
    TellUser(absl::StrCat(stopped ? "stopped: " : "WARNING: ", kNotLearningMessagePrefix,
                          report->learning_problem));
  }
  std::cout << absl::StrFormat("trained %d examples in %.2fs: %.0f examples/s, train NE %.4f\n",
                               report->examples, report->seconds, report->examples_per_second,
                               report->train_ne);
  nlohmann::json eval_metrics = nlohmann::json::object();
  if (!flags.eval_data.empty()) {
    auto eval = trainer.Evaluate(flags.eval_data);
    if (!eval.ok()) return Fail(eval.status());
    eval_metrics = exporter::EvalJson({.quality = *eval, .gemm = trainer.gemm().kernel});
    for (const auto& [key, value] : eval_metrics.items()) {
      if (key != "gemm") out[key] = value;  // The report's own `gemm` says more.
    }
    std::cout << absl::StrFormat(
        "eval on %d examples: NE %.4f  AUC %.4f  logloss %.4f  calibration %.3f\n", eval->examples,
        eval->ne, eval->auc, eval->logloss, eval->calibration);
  }
  if (!flags.save_model.empty() && !stopped) {
    model::ExportInfo info;
    info.config = config;
    info.num_slots = flags.slots;
    info.dense_source = "trainer replica (one process)";
    info.examples_trained = report->examples;
    info.eval = eval_metrics;
    info.job = flags.job;
    absl::Status s = model::ExportLocalModel(flags.save_model, std::move(info), trainer.params(),
                                             trainer.dense_state(), store);
    if (!s.ok()) return Fail(s);
    std::cout << "exported the model to " << flags.save_model << "\n";
  }
  if (!flags.report_json.empty()) {
    std::ofstream f(flags.report_json);
    f << out.dump(2) << "\n";
    if (!f) return Fail(absl::UnavailableError(absl::StrCat("cannot write ", flags.report_json)));
  }
  return stopped ? kExitNotLearning : 0;
}

}  // namespace

Action AddTrainCommand(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd =
      app.add_subcommand("train", "Train a DLRM model in this process (Hogwild threads).");
  cmd->add_option("--config", flags->config, "ShadowSyncJob YAML/JSON; flags override its fields");
  cmd->add_option("--data", flags->data,
                  "training files (Criteo TSV, plain or .gz; comma-separated)");
  cmd->add_option("--eval-data", flags->eval_data, "held-out files for NE/AUC/logloss");
  cmd->add_option("--threads", flags->threads, "Hogwild threads")->capture_default_str();
  cmd->add_option("--batch-size", flags->batch_size, "examples per thread step")
      ->capture_default_str();
  cmd->add_option("--lr", flags->lr, "learning rate")->capture_default_str();
  cmd->add_option("--lr-warmup-steps", flags->lr_warmup_steps,
                  "dense learning-rate warm-up, in steps (0: none)")
      ->capture_default_str();
  cmd->add_option("--optimizer", flags->optimizer, "sgd or adagrad")->capture_default_str();
  cmd->add_option("--hash-buckets", flags->hash_buckets, "rows per embedding table")
      ->capture_default_str();
  cmd->add_option("--embedding-dim", flags->embedding_dim, "embedding width")
      ->capture_default_str();
  cmd->add_option("--bottom-mlp", flags->bottom_mlp, "bottom MLP hidden widths")
      ->capture_default_str();
  cmd->add_option("--top-mlp", flags->top_mlp, "top MLP hidden widths")->capture_default_str();
  cmd->add_option("--interaction", flags->interaction,
                  "feature interaction: dot (DLRM) or dcn (DCN-v2 cross layers, DLRMv2)")
      ->capture_default_str();
  cmd->add_option("--pooling", flags->pooling,
                  "every table's pooling of a multi-hot field's rows: sum or mean")
      ->capture_default_str();
  cmd->add_option("--dcn-layers", flags->dcn_layers, "cross layers of --interaction dcn")
      ->capture_default_str();
  cmd->add_option("--dcn-low-rank", flags->dcn_low_rank,
                  "inner width r of each cross layer's U V (--interaction dcn)")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "initialisation seed")->capture_default_str();
  cmd->add_option("--max-examples", flags->max_examples, "stop after N examples (-1: one pass)");
  cmd->add_option("--parse-threads", flags->parse_threads, "reader threads")->capture_default_str();
  cmd->add_option("--dense-precision", flags->dense_precision,
                  "MLP GEMM arithmetic: fp32, bf16 (fp32 accumulation), or auto (bf16 where the "
                  "CPU has AVX512-BF16)")
      ->capture_default_str();
  cmd->add_option("--gemm", flags->gemm,
                  "fp32 GEMM kernel: openblas, onednn, or auto (the fastest here, timed at start)")
      ->capture_default_str();
  cmd->add_flag("--preload", flags->preload, "parse all data before timing (benchmarks)");
  cmd->add_flag("--fail-on-divergence", flags->learning_check.fail,
                "stop, write no model and exit 3 when the run is not learning: a non-finite loss, "
                "or a train NE still at the base rate's (spec.trainer.learningCheck)");
  cmd->add_option("--progress-interval", flags->progress_interval,
                  "seconds between progress lines");
  cmd->add_option("--report-json", flags->report_json, "write the final report as JSON here");
  cmd->add_option("--save-model", flags->save_model,
                  "export the trained model to this directory (docs/export.md)");
  cmd->add_option("--init-model", flags->init_model,
                  "start from this export (dense parameters, rows and optimizer state)");
  cmd->add_option("--work-dir", flags->work_dir, "where generated data goes")
      ->capture_default_str();
  return [cmd, flags] { return RunTrain(*cmd, *flags); };
}

Action AddEvalCommand(CLI::App& app) {
  struct EvalFlags {
    std::string model, report_json;
    std::vector<std::string> data;
    // The defaults of an export's own score (its manifest's eval), which
    // this repeats.
    int threads = exporter::ModelEvalOptions{}.threads;
    int batch_size = exporter::ModelEvalOptions{}.batch_size;
    std::string dense_precision = "fp32";
    // auto: an export's own kernel (its manifest's eval.gemm), else the
    // fastest here.
    std::string gemm = "auto";
  };
  auto flags = std::make_shared<EvalFlags>();
  CLI::App* cmd = app.add_subcommand("eval", "Score a saved model on held-out data.");
  cmd->add_option("--model", flags->model,
                  "an export (train --save-model; docs/export.md), or a model file of the "
                  "format before it")
      ->required();
  cmd->add_option("--data", flags->data, "Criteo TSV files")->required();
  cmd->add_option("--threads", flags->threads)->capture_default_str();
  cmd->add_option("--batch-size", flags->batch_size)->capture_default_str();
  cmd->add_option("--report-json", flags->report_json, "write the metrics as JSON here");
  cmd->add_option("--dense-precision", flags->dense_precision, "fp32, bf16 or auto, as for train")
      ->capture_default_str();
  cmd->add_option("--gemm", flags->gemm,
                  "fp32 GEMM kernel: openblas, onednn, or auto (an export's, as its manifest's "
                  "eval.gemm names, else the fastest here)")
      ->capture_default_str();
  return [flags] {
    auto precision = model::ParseDensePrecision(flags->dense_precision, "--dense-precision");
    if (!precision.ok()) return Fail(precision.status());
    auto gemm = model::ParseGemmKernel(flags->gemm, "--gemm");
    if (!gemm.ok()) return Fail(gemm.status());
    const exporter::ModelEvalOptions options{.threads = flags->threads,
                                             .batch_size = flags->batch_size,
                                             .precision = *precision,
                                             .gemm = *gemm};
    const std::vector<std::string> data = SplitList(flags->data);
    absl::StatusOr<exporter::ModelScore> eval;
    if (std::filesystem::is_directory(flags->model)) {
      eval = exporter::EvaluateExport(flags->model, data, options);
    } else {
      absl::StatusOr<model::SavedModel> saved = model::LoadModel(flags->model);
      if (!saved.ok()) return Fail(saved.status());
      eval = exporter::EvaluateModel(*saved, data, options);
    }
    if (!eval.ok()) return Fail(eval.status());
    const nlohmann::json out = exporter::EvalJson(*eval);
    std::cout << out.dump(2) << "\n";
    if (!flags->report_json.empty()) std::ofstream(flags->report_json) << out.dump(2) << "\n";
    return 0;
  };
}

}  // namespace shadowsync::cli
