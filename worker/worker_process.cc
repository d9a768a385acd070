#include "worker/worker_process.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/metrics_http.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "model/export.h"
#include "model/gemm.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "ps/client/ps_client.h"
#include "syncer/client/syncer_client.h"
#include "worker/checkpoint.h"
#include "worker/model_config.h"
#include "worker/sync/factory.h"
#include "worker/sync/sync_switch.h"

namespace shadowsync::worker {
namespace {

model::OptimizerKind KindOf(Optimizer o) {
  return o == Optimizer::kSgd ? model::OptimizerKind::kSgd : model::OptimizerKind::kAdagrad;
}

// The checkpoint at `path` if there is one, checked against the model's
// dense shape; nullopt when the file does not exist (a first start).
absl::StatusOr<std::optional<DenseCheckpoint>> LoadResumeCheckpoint(
    const std::string& path, int64_t num_params, model::OptimizerKind optimizer) {
  absl::StatusOr<DenseCheckpoint> c = LoadDenseCheckpoint(path);
  if (absl::IsNotFound(c.status())) return std::nullopt;
  if (!c.ok()) return c.status();
  if (static_cast<int64_t>(c->params.size()) != num_params) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", c->params.size(), " dense params, the model has ", num_params));
  }
  const int64_t state = num_params * model::StateFloatsPerParam(optimizer);
  if (static_cast<int64_t>(c->dense_state.size()) != state) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", c->dense_state.size(), " dense optimizer state floats, the model's ",
        std::string(model::OptimizerName(optimizer)), " optimizer has ", state));
  }
  return std::optional<DenseCheckpoint>(std::move(*c));
}

// Examples this run trains: line i of the job's data goes to trainer
// i mod N, max_examples caps the share, and skipped examples count against
// it. 0 when neither the job's size nor a cap is known.
int64_t RunTarget(int64_t job_examples, int64_t max_examples, int trainers, int index,
                  int64_t skip) {
  int64_t share = -1;
  if (job_examples > 0) share = job_examples / trainers + (index < job_examples % trainers ? 1 : 0);
  if (max_examples >= 0) share = share < 0 ? max_examples : std::min(share, max_examples);
  return share < 0 ? 0 : std::max<int64_t>(share - skip, 0);
}

}  // namespace

absl::StatusOr<WorkerReport> RunWorker(const WorkerOptions& options) {
  const JobSpec& spec = options.spec;
  const int trainers = spec.trainer.replicas;
  if (options.index < 0 || options.index >= trainers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--index: ", options.index, " is outside [0, trainer.replicas = ", trainers, ")"));
  }
  if (options.data.empty()) return absl::InvalidArgumentError("--data: no training files given");
  if (options.ps_address.empty()) {
    return absl::InvalidArgumentError("--ps: no parameter-server address given");
  }

  const model::DlrmConfig config = DlrmConfigFor(spec.model);
  SS_RETURN_IF_ERROR(config.Validate());
  std::vector<model::EmbeddingTableConfig> tables;
  for (const TableSpec& t : spec.model.tables) {
    tables.push_back({t.name, static_cast<uint64_t>(t.hash_buckets)});
  }
  const model::OptimizerConfig optimizer{KindOf(spec.trainer.optimizer),
                                         static_cast<float>(spec.trainer.learning_rate)};
  const int64_t num_params = model::Dlrm(config).num_params();

  if (options.step_delay < absl::ZeroDuration() || options.step_jitter < absl::ZeroDuration() ||
      !(options.slowdown >= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "straggler settings: delay and jitter must be >= 0 and slowdown >= 1, got delay ",
        absl::FormatDuration(options.step_delay), ", jitter ",
        absl::FormatDuration(options.step_jitter), ", slowdown ", options.slowdown));
  }
  // Before connecting anywhere: a bad checkpoint fails fast.
  std::optional<DenseCheckpoint> resume;
  if (!options.checkpoint_path.empty()) {
    if (!(options.checkpoint_interval_seconds >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--checkpoint-interval-seconds: ", options.checkpoint_interval_seconds, " is negative"));
    }
    SS_ASSIGN_OR_RETURN(resume,
                        LoadResumeCheckpoint(options.checkpoint_path, num_params, optimizer.kind));
  }
  // A warm start (spec.init.fromModel) when there is no checkpoint of this
  // job to resume from: the export's dense parameters, and its optimizer
  // state where it has the trainer's.
  std::optional<DenseCheckpoint> init;
  if (!resume.has_value() && !spec.init.from_model.empty()) {
    SS_ASSIGN_OR_RETURN(model::ExportReader reader,
                        model::ExportReader::Open(spec.init.from_model));
    SS_RETURN_IF_ERROR(reader.CheckShape(config, tables));
    init.emplace();
    SS_RETURN_IF_ERROR(reader.ReadDense(&init->params, &init->dense_state));
  }
  // The checkpoint counts from the start of the share, like skip_examples.
  const int64_t skip = std::max(options.skip_examples, resume ? resume->examples : 0);

  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<MetricsHttpServer> http;
  if (!options.metrics_address.empty()) {
    SS_ASSIGN_OR_RETURN(http, MetricsHttpServer::Start(options.metrics_address));
    http->RegisterCollectable(registry);
    for (const auto& metrics : options.extra_metrics) http->RegisterCollectable(metrics);
  }
  const std::map<std::string, std::string> labels = {{"trainer", std::to_string(options.index)}};
  prometheus::Counter& examples_total = prometheus::BuildCounter()
                                            .Name("shadowsync_trainer_examples_total")
                                            .Help("Examples this trainer has trained on.")
                                            .Register(*registry)
                                            .Add(labels);
  // examples_total counts this run; a restarted trainer resumes part-way
  // through its share, and the share done so far is the sum of the two.
  prometheus::Gauge& examples_resumed =
      prometheus::BuildGauge()
          .Name("shadowsync_trainer_examples_resumed")
          .Help("Examples of this trainer's share trained before this run (from its checkpoint).")
          .Register(*registry)
          .Add(labels);
  examples_resumed.Set(static_cast<double>(skip));
  prometheus::Gauge& train_ne = prometheus::BuildGauge()
                                    .Name("shadowsync_trainer_train_ne")
                                    .Help("Progressive normalized entropy since the start.")
                                    .Register(*registry)
                                    .Add(labels);
  prometheus::Gauge& train_logloss = prometheus::BuildGauge()
                                         .Name("shadowsync_trainer_train_logloss")
                                         .Help("Progressive training log loss since the start.")
                                         .Register(*registry)
                                         .Add(labels);
  // The latest evaluation on the held-out data (the starting model's, each
  // of the curve's, then the final one). Added at the first evaluation: a
  // 0 before any would read as a perfect model.
  struct EvalGauge {
    prometheus::Family<prometheus::Gauge>* family;
    prometheus::Gauge* gauge = nullptr;
  };
  auto eval_gauge = [&](const std::string& name, const std::string& help) {
    return EvalGauge{&prometheus::BuildGauge().Name(name).Help(help).Register(*registry)};
  };
  EvalGauge eval_ne =
      eval_gauge("shadowsync_trainer_eval_ne",
                 "Normalized entropy on the held-out data at the latest evaluation.");
  EvalGauge eval_auc = eval_gauge("shadowsync_trainer_eval_auc",
                                  "AUC on the held-out data at the latest evaluation.");
  EvalGauge eval_calibration = eval_gauge(
      "shadowsync_trainer_eval_calibration",
      "Predicted over observed click rate on the held-out data at the latest evaluation.");
  auto publish_eval = [&](const QualityReport& q) {
    for (auto [g, v] : {std::pair{&eval_ne, q.ne}, std::pair{&eval_auc, q.auc},
                        std::pair{&eval_calibration, q.calibration}}) {
      if (g->gauge == nullptr) g->gauge = &g->family->Add(labels);
      g->gauge->Set(v);
    }
  };
  // 1 once LearningCheck finds the run is not learning (the log and the
  // report say why), for an alert.
  prometheus::Gauge& not_learning =
      prometheus::BuildGauge()
          .Name("shadowsync_trainer_not_learning")
          .Help(
              "1 when this trainer's run is not learning: a non-finite loss, or a train NE at "
              "the base rate's (spec.trainer.learningCheck).")
          .Register(*registry)
          .Add(labels);
  // Job progress on a dashboard is examples_total / examples_target.
  prometheus::Gauge& examples_target =
      prometheus::BuildGauge()
          .Name("shadowsync_trainer_examples_target")
          .Help(
              "Examples this trainer is to train in this run (its share of the job, capped by "
              "--max-examples, less those skipped on resume); 0 = not known.")
          .Register(*registry)
          .Add(labels);
  examples_target.Set(static_cast<double>(
      RunTarget(options.job_examples, options.max_examples, trainers, options.index, skip)));

  ps::PsClientOptions ps_options;
  ps_options.security = options.security;
  SS_ASSIGN_OR_RETURN(auto store, ps::PsClient::Connect(options.ps_address, config.embedding_dim,
                                                        config.num_tables, ps_options));

  std::unique_ptr<syncer::SyncerClient> syncer_client;
  SyncConfig sync_config = SyncConfigFromJob(spec);
  sync_config.trainer_index = options.index;
  // A trainer resuming its share is one restarted into a running job.
  sync_config.resumed = skip > 0;
  if (sync_config.algorithm != SyncAlgorithm::kNone) {
    if (options.syncer_addresses.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--syncer: sync.algorithm ",
                                                     std::string(EnumName(sync_config.algorithm)),
                                                     " needs the syncer addresses"));
    }
    syncer::SyncerClientOptions co;
    co.addresses = options.syncer_addresses;
    co.member = absl::StrCat("trainer-", options.index);
    co.security = options.security;
    SS_ASSIGN_OR_RETURN(syncer_client, syncer::SyncerClient::Connect(co, num_params));
  }
  SS_ASSIGN_OR_RETURN(auto sync,
                      MakeSyncStrategy(sync_config, syncer_client.get(), registry.get()));
  if (auto* sw = dynamic_cast<SyncSwitchStrategy*>(sync.get()); sw != nullptr) {
    // The switch round must be the same on every trainer: from job-wide numbers.
    const int64_t job_examples = options.job_examples > 0   ? options.job_examples
                                 : options.max_examples > 0 ? options.max_examples * trainers
                                                            : -1;
    if (job_examples > 0) {
      const int64_t per_step = int64_t{trainers} * spec.trainer.threads * spec.trainer.batch_size;
      sw->SetTotalSteps((job_examples + per_step - 1) / per_step);
    }
  }

  TrainerOptions to;
  SS_ASSIGN_OR_RETURN(to.precision,
                      model::ParseDensePrecision(EnumName(spec.trainer.dense_precision),
                                                 "spec.trainer.densePrecision"));
  to.threads = spec.trainer.threads;
  to.batch_size = spec.trainer.batch_size;
  to.optimizer = optimizer;
  to.lr_warmup_steps = spec.trainer.lr_warmup_steps;
  to.learning_check = {.after_examples = spec.trainer.learning_check.after_examples,
                       .max_train_ne = spec.trainer.learning_check.max_train_ne};
  to.stop_when_not_learning = spec.trainer.learning_check.fail;
  to.seed = 1;  // Every trainer starts from the same dense weights.
  to.max_examples = options.max_examples;
  to.skip_examples = skip;
  to.preload = options.preload;
  to.step_delay = options.step_delay;
  to.step_jitter = options.step_jitter;
  to.slowdown = options.slowdown;
  to.reader.shard_index = options.index;
  to.reader.num_shards = trainers;
  to.reader.parse_threads = 1;
  to.prefetch = true;
  to.sync = sync.get();
  int64_t reported = 0;
  Trainer* trainer_ptr = nullptr;
  WorkerReport report;
  absl::Status curve_status;
  std::vector<float> checkpoint_params, checkpoint_state;  // Reused by every save.
  // `trained`: examples of this run whose updates are all in the replica.
  auto save_checkpoint = [&](int64_t trained) -> absl::Status {
    trainer_ptr->SnapshotDense(&checkpoint_params, &checkpoint_state);
    SS_RETURN_IF_ERROR(SaveDenseCheckpoint(options.checkpoint_path,
                                           {skip + trained, checkpoint_params, checkpoint_state}));
    ++report.checkpoints_written;
    return absl::OkStatus();
  };
  double last_checkpoint_seconds = 0;
  to.on_progress = [&](const Progress& p) {
    examples_total.Increment(static_cast<double>(p.examples - reported));
    reported = p.examples;
    train_ne.Set(p.train_ne);
    train_logloss.Set(p.train_logloss);
    not_learning.Set(p.learning_problem.empty() ? 0 : 1);
    // The durability promise: p.examples counts finished batches, and the
    // snapshot is copied after they were counted (while the Hogwild threads
    // run on, which races benignly as EvaluateSnapshot does), so it holds
    // all their updates. A restarted trainer therefore repeats at most the
    // work since the last checkpoint: one checkpoint interval, rounded up to
    // the next progress report. Hogwild fuzz: finished batches need not be a
    // prefix of the share, so up to threads - 1 batches still in flight
    // when the count was taken can be skipped on resume (and as many
    // repeated) - noise next to Hogwild's own lost updates.
    const bool requested =
        options.checkpoint_requested != nullptr && options.checkpoint_requested->exchange(false);
    if (!options.checkpoint_path.empty() &&
        (requested || p.seconds - last_checkpoint_seconds >= options.checkpoint_interval_seconds)) {
      last_checkpoint_seconds = p.seconds;
      // A failed periodic save does not stop training; the next one retries
      // and the final one must succeed.
      if (absl::Status s = save_checkpoint(p.examples); !s.ok()) {
        LOG(WARNING) << absl::StrFormat("trainer %d/%d: checkpoint not written: %s", options.index,
                                        trainers, std::string(s.message()));
      }
    }
    const int64_t next = (static_cast<int64_t>(report.curve.size()) + 1) * options.eval_every;
    if (options.eval_every > 0 && !options.eval_data.empty() && p.examples >= next &&
        curve_status.ok()) {
      auto q = trainer_ptr->EvaluateSnapshot(options.eval_data, options.eval_curve_examples);
      if (q.ok()) {
        report.curve.push_back({p.examples, p.seconds, q->ne, q->auc});
        publish_eval(*q);
      } else {
        curve_status = q.status();
      }
    }
    // Last, so that what the caller then reads (/metrics) holds this
    // report's evaluation.
    if (options.on_progress) {
      Progress with_sync = p;
      with_sync.sync_details = sync->Details();
      options.on_progress(with_sync);
    }
  };
  to.progress_interval_seconds = options.progress_interval_seconds;
  Trainer trainer(config, tables, to, store.get());
  trainer_ptr = &trainer;
  if (http != nullptr) {
    http->set_serving(true);
    if (options.on_ready) options.on_ready(http->port());
  }
  LOG(INFO) << absl::StrFormat(
      "trainer %d/%d: %d threads, batch %d, sync %s, %d dense params, ps %s", options.index,
      trainers, to.threads, to.batch_size, std::string(EnumName(sync_config.algorithm)), num_params,
      options.ps_address);
  if (resume.has_value()) {
    // Sizes were checked against the model when the file was loaded.
    std::copy(resume->params.begin(), resume->params.end(), trainer.params().begin());
    std::copy(resume->dense_state.begin(), resume->dense_state.end(),
              trainer.dense_state().begin());
    report.resumed_from_examples = resume->examples;
    LOG(INFO) << absl::StrFormat("trainer %d/%d: resumed from %s at %d examples", options.index,
                                 trainers, options.checkpoint_path, resume->examples);
    resume.reset();  // The trainer holds the weights now.
  }

  if (init.has_value()) {
    std::copy(init->params.begin(), init->params.end(), trainer.params().begin());
    if (init->dense_state.size() == trainer.dense_state().size()) {
      std::copy(init->dense_state.begin(), init->dense_state.end(), trainer.dense_state().begin());
    }
    LOG(INFO) << absl::StrFormat("trainer %d/%d: starting from the export %s", options.index,
                                 trainers, spec.init.from_model);
    init.reset();
    if (!options.eval_data.empty()) {
      SS_ASSIGN_OR_RETURN(report.init_eval, trainer.Evaluate(options.eval_data));
      publish_eval(*report.init_eval);
    }
  }

  report.dense_params = num_params;
  report.skipped_examples = skip;
  SS_ASSIGN_OR_RETURN(report.train, trainer.Train(options.data));
  not_learning.Set(report.train.learning_problem.empty() ? 0 : 1);
  if (!options.checkpoint_path.empty()) SS_RETURN_IF_ERROR(save_checkpoint(report.train.examples));
  SS_RETURN_IF_ERROR(curve_status);
  if (options.eval_every > 0 && !options.eval_data.empty()) {
    SS_ASSIGN_OR_RETURN(QualityReport q,
                        trainer.EvaluateSnapshot(options.eval_data, options.eval_curve_examples));
    report.curve.push_back({report.train.examples, report.train.seconds, q.ne, q.auc});
    publish_eval(q);
  }
  examples_total.Increment(static_cast<double>(report.train.examples - reported));
  report.sync = sync->stats();
  report.sync_details = sync->Details();
  if (!options.eval_data.empty()) {
    SS_ASSIGN_OR_RETURN(report.eval, trainer.Evaluate(options.eval_data));
    publish_eval(*report.eval);
  }
  return report;
}

nlohmann::json WorkerReportToJson(const WorkerOptions& options, const WorkerReport& r) {
  nlohmann::json out = {
      {"trainer", options.index},
      {"trainers", options.spec.trainer.replicas},
      {"algorithm", std::string(EnumName(options.spec.sync.algorithm))},
      {"threads", options.spec.trainer.threads},
      {"batch_size", options.spec.trainer.batch_size},
      {"dense_params", r.dense_params},
      {"examples", r.train.examples},
      {"skipped_examples", r.skipped_examples},
      {"resumed_from_examples", r.resumed_from_examples},
      {"checkpoints_written", r.checkpoints_written},
      {"seconds", r.train.seconds},
      {"cpu_seconds", r.train.cpu_seconds},
      {"examples_per_second", r.train.examples_per_second},
      {"gemm", model::GemmChoiceToJson(r.train.gemm)},
      {"train_ne", r.train.train_ne},
      {"train_logloss", r.train.train_logloss},
      {"malformed_lines", r.train.malformed_lines},
      {"learning_problem", r.train.learning_problem},
      {"sync_rounds", r.sync.rounds},
      {"sync_bytes_sent", r.sync.bytes_sent},
      {"sync_bytes_received", r.sync.bytes_received},
      {"sync_mean_round_seconds", r.sync.mean_round_seconds()},
      {"sync_mean_gap_steps", r.sync.mean_gap_steps()},
      {"sync_blocked_seconds", r.sync.blocked_seconds},
      {"sync_finish_seconds", r.train.sync_finish_seconds},
      {"sync_details", r.sync_details.is_null() ? nlohmann::json::object() : r.sync_details},
  };
  nlohmann::json curve = nlohmann::json::array();
  for (const CurvePoint& c : r.curve) {
    curve.push_back({{"examples", c.examples},
                     {"seconds", c.seconds},
                     {"eval_ne", c.eval_ne},
                     {"eval_auc", c.eval_auc}});
  }
  out["curve"] = std::move(curve);
  if (r.init_eval.has_value()) {
    out["init_eval"] = {{"eval_ne", r.init_eval->ne}, {"eval_auc", r.init_eval->auc}};
  }
  if (r.eval.has_value()) {
    out["eval_examples"] = r.eval->examples;
    out["eval_ne"] = r.eval->ne;
    out["eval_auc"] = r.eval->auc;
    out["eval_logloss"] = r.eval->logloss;
    out["eval_calibration"] = r.eval->calibration;
  }
  return out;
}

}  // namespace shadowsync::worker
