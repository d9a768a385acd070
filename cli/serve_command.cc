// `shadowsync serve`: online scoring of a model export over the KServe /
// Open Inference Protocol v2 (serving/), with Prometheus metrics and health
// on a second port, until SIGTERM or SIGINT (docs/serving.md).
#include <memory>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/grpc_security.h"
#include "common/metrics_http.h"
#include "glog/logging.h"
#include "model/gemm.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "serving/batcher.h"
#include "serving/inference_grpc.h"
#include "serving/inference_http.h"
#include "serving/model_source.h"

namespace shadowsync::cli {
namespace {

struct ServeFlags {
  std::string model_dir;
  std::string name = "ctr";
  std::string metrics_listen = "0.0.0.0:8002";
  std::string ready_file;
  std::string gemm = "auto";
  serving::InferenceHttpOptions http;
  serving::InferenceGrpcOptions grpc;
  GrpcSecurityFiles security;
  serving::BatcherOptions batcher;
  double max_delay_ms = 1;
  int max_forward_examples = serving::ScorerOptions().max_batch;
  int64_t cache_bytes = 0;
  std::string cache_dir;
  double poll_seconds = 2;
};

// Gauges of the model served, set at each load.
class ModelGauges {
 public:
  explicit ModelGauges(prometheus::Registry& registry)
      : examples_(Gauge(registry, "shadowsync_serve_model_examples_trained",
                        "Examples the served model was trained on (also its version).")),
        rows_(Gauge(registry, "shadowsync_serve_model_rows",
                    "Embedding rows the served model holds.")),
        rows_memory_(Gauge(registry, "shadowsync_serve_model_rows_memory_bytes",
                           "RAM the served model's rows take (with --cache-bytes: the cache "
                           "and the on-disk store's index).")),
        loaded_(Gauge(registry, "shadowsync_serve_model_loaded_timestamp_seconds",
                      "When the served model was loaded (Unix seconds).")),
        exported_(Gauge(registry, "shadowsync_serve_model_exported_timestamp_seconds",
                        "When the served model's export was committed (Unix seconds); "
                        "time() minus this is the model's age.")),
        loads_(prometheus::BuildCounter()
                   .Name("shadowsync_serve_model_loads_total")
                   .Help("Exports loaded and swapped in, the first included.")
                   .Register(registry)
                   .Add({})),
        failures_(prometheus::BuildCounter()
                      .Name("shadowsync_serve_model_load_failures_total")
                      .Help("Newer exports that could not be loaded (the served model stayed).")
                      .Register(registry)
                      .Add({})) {}

  void Loaded(const serving::Scorer& scorer, absl::Time exported) {
    examples_.Set(static_cast<double>(scorer.info().examples_trained));
    rows_.Set(static_cast<double>(scorer.num_rows()));
    rows_memory_.Set(static_cast<double>(scorer.rows_memory_bytes()));
    loaded_.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
    exported_.Set(absl::ToDoubleSeconds(exported - absl::UnixEpoch()));
    loads_.Increment();
  }
  void Failed() { failures_.Increment(); }

 private:
  static prometheus::Gauge& Gauge(prometheus::Registry& registry, const char* name,
                                  const char* help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
  }

  prometheus::Gauge& examples_;
  prometheus::Gauge& rows_;
  prometheus::Gauge& rows_memory_;
  prometheus::Gauge& loaded_;
  prometheus::Gauge& exported_;
  prometheus::Counter& loads_;
  prometheus::Counter& failures_;
};

int RunServe(ServeFlags f) {
  absl::StatusOr<std::optional<model::GemmKernel>> gemm = model::ParseGemmKernel(f.gemm, "--gemm");
  if (!gemm.ok()) {
    LOG(ERROR) << "serve: " << gemm.status().message();
    return 2;
  }
  if (!(f.max_delay_ms >= 0) || !(f.poll_seconds >= 0) || f.batcher.threads < 1 ||
      f.batcher.max_batch_examples < 1 || f.http.threads < 1 || f.http.max_request_examples < 1 ||
      f.max_forward_examples < 1 || f.cache_bytes < 0) {
    LOG(ERROR) << "serve: --max-delay-ms, --poll-seconds and --cache-bytes must be >= 0, and "
                  "the thread and example counts >= 1";
    return 2;
  }
  absl::StatusOr<GrpcSecurity> security = LoadGrpcSecurity(f.security);
  if (!security.ok()) {
    LOG(ERROR) << "serve: " << security.status().message();
    return 2;
  }
  f.grpc.security = *security;
  f.http.security = *security;
  if (!InstallStopSignals()) {
    LOG(ERROR) << "serve: cannot create the signal pipe";
    return 1;
  }
  auto registry = std::make_shared<prometheus::Registry>();
  ModelGauges gauges(*registry);
  auto& rows_read = prometheus::BuildCounter()
                        .Name("shadowsync_serve_rows_total")
                        .Help(
                            "Embedding rows looked up, by where they were found: memory (all "
                            "rows in RAM), cache or disk (--cache-bytes), initial (not "
                            "stored: the row's initial value).")
                        .Register(*registry);
  prometheus::Counter& from_memory = rows_read.Add({{"source", "memory"}});
  prometheus::Counter& from_cache = rows_read.Add({{"source", "cache"}});
  prometheus::Counter& from_disk = rows_read.Add({{"source", "disk"}});
  prometheus::Counter& initial = rows_read.Add({{"source", "initial"}});
  absl::StatusOr<std::unique_ptr<serving::ModelSource>> source = serving::ModelSource::Open(
      f.model_dir,
      {.scorer = {.max_batch = f.max_forward_examples,
                  .gemm = *gemm,
                  .cache_bytes = f.cache_bytes,
                  .cache_dir = f.cache_dir,
                  .on_rows =
                      [&](const serving::RowCounts& c) {
                        from_memory.Increment(static_cast<double>(c.memory));
                        from_cache.Increment(static_cast<double>(c.cache));
                        from_disk.Increment(static_cast<double>(c.disk));
                        initial.Increment(static_cast<double>(c.initial));
                      }},
       .poll = absl::Seconds(f.poll_seconds),
       .on_load = [&gauges](const serving::Scorer& s, absl::Time t) { gauges.Loaded(s, t); },
       .on_load_failure = [&gauges](const absl::Status&) { gauges.Failed(); }});
  if (!source.ok()) {
    LOG(ERROR) << "serve: " << source.status();
    return source.status().code() == absl::StatusCode::kInvalidArgument ||
                   source.status().code() == absl::StatusCode::kNotFound ||
                   source.status().code() == absl::StatusCode::kDataLoss
               ? 2
               : 1;
  }
  prometheus::Histogram& batches =
      prometheus::BuildHistogram()
          .Name("shadowsync_serve_batch_examples")
          .Help("Examples per forward pass, after dynamic batching.")
          .Register(*registry)
          .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
                                                           1024, 2048, 4096});
  f.batcher.max_delay = absl::Milliseconds(f.max_delay_ms);
  f.batcher.on_batch = [&batches](int64_t n) { batches.Observe(static_cast<double>(n)); };

  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> metrics =
      MetricsHttpServer::Start(f.metrics_listen);
  if (!metrics.ok()) {
    LOG(ERROR) << "serve: " << metrics.status().message();
    return 1;
  }
  (*metrics)->RegisterCollectable(registry);
  auto batcher = std::make_unique<serving::Batcher>(f.batcher);
  absl::StatusOr<std::unique_ptr<serving::InferenceHttpServer>> http =
      serving::InferenceHttpServer::Start(f.name, **source, *batcher, f.http, *registry);
  if (!http.ok()) {
    LOG(ERROR) << "serve: " << http.status().message();
    return absl::IsInvalidArgument(http.status()) ? 2 : 1;  // 2: a bad --tls-* file
  }
  f.grpc.max_request_examples = f.http.max_request_examples;
  absl::StatusOr<std::unique_ptr<serving::InferenceGrpcServer>> grpc =
      serving::InferenceGrpcServer::Start(f.name, **source, *batcher, f.grpc, *registry);
  if (!grpc.ok()) {
    LOG(ERROR) << "serve: " << grpc.status().message();
    return 1;
  }
  (*metrics)->set_serving(true);
  const serving::ServedModel served = serving::Served(f.name, *(*source)->Current());
  LOG(INFO) << "serving model '" << served.name << "' version " << served.version << " from "
            << f.model_dir << (f.poll_seconds > 0 ? " (watched)" : "") << " on port "
            << (*http)->port() << " (KServe v2 " << (security->tls() ? "HTTPS" : "HTTP") << ") and "
            << (*grpc)->port() << " (gRPC" << (security->tls() ? ", TLS" : "") << "); "
            << (security->has_token() ? "token required; " : "") << "metrics on "
            << (*metrics)->port();
  if (!f.ready_file.empty() &&
      !WriteReadyFile(f.ready_file, {(*http)->port(), (*metrics)->port(), (*grpc)->port()})) {
    LOG(ERROR) << "serve: cannot write --ready-file " << f.ready_file;
    return 1;
  }
  if (const int sig = AwaitStopSignal(); sig != 0) {
    LOG(INFO) << "serve received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  (*metrics)->set_serving(false);
  http->reset();  // Answers what is in flight.
  grpc->reset();
  batcher.reset();
  source->reset();
  return 0;
}

}  // namespace

Action AddServeCommand(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Score a model export online over the KServe v2 HTTP protocol until SIGTERM/SIGINT.");
  cmd->add_option("--model", f->model_dir,
                  "an export, or a directory of exports whose LATEST names the one to serve")
      ->required();
  cmd->add_option("--poll-seconds", f->poll_seconds,
                  "how often --model is checked for a newer export to swap in (0: never)")
      ->capture_default_str();
  cmd->add_option("--name", f->name, "the model's name in /v2/models/{name}")
      ->capture_default_str();
  cmd->add_option("--listen", f->http.listen, "HTTP host:port of the v2 endpoints")
      ->capture_default_str();
  cmd->add_option("--grpc-listen", f->grpc.listen,
                  "gRPC host:port of inference.GRPCInferenceService")
      ->capture_default_str();
  cmd->add_option("--metrics-listen", f->metrics_listen, "HTTP host:port for /metrics, /healthz")
      ->capture_default_str();
  cmd->add_option("--http-threads", f->http.threads,
                  "connections served at once (a keep-alive connection holds one)")
      ->capture_default_str();
  cmd->add_option("--threads", f->batcher.threads, "scoring threads")->capture_default_str();
  cmd->add_option("--max-batch-examples", f->batcher.max_batch_examples,
                  "dynamic batching: examples of concurrent requests scored together, at most")
      ->capture_default_str();
  cmd->add_option("--max-delay-ms", f->max_delay_ms,
                  "dynamic batching: how long a request may wait for others to join its batch")
      ->capture_default_str();
  cmd->add_option("--max-request-examples", f->http.max_request_examples,
                  "examples one request may hold")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", f->http.max_body_bytes, "a request body's size limit")
      ->capture_default_str();
  cmd->add_option("--gemm", f->gemm,
                  "fp32 GEMM kernel: auto (the one that scored the export), openblas or onednn")
      ->capture_default_str();
  cmd->add_option("--cache-bytes", f->cache_bytes,
                  "0: every embedding row in RAM. Else the rows go to an on-disk store under "
                  "--cache-dir, read through a RAM cache of this many bytes")
      ->capture_default_str();
  cmd->add_option("--cache-dir", f->cache_dir,
                  "where --cache-bytes builds each loaded model's row store (default: $TMPDIR, "
                  "else /tmp); removed when the model is")
      ->capture_default_str();
  cmd->add_option("--ready-file", f->ready_file,
                  "write \"HTTP_PORT METRICS_PORT GRPC_PORT\" here once serving");
  AddSecurityFlags(*cmd, f->security);
  return [f] { return RunServe(*f); };
}

}  // namespace shadowsync::cli
