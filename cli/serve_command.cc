// `shadowsync serve`: online scoring of a model export over the KServe /
// Open Inference Protocol v2 (serving/), with Prometheus metrics and health
// on a second port, until SIGTERM or SIGINT (docs/serving.md).
#include <memory>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/metrics_http.h"
#include "glog/logging.h"
#include "model/gemm.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "serving/batcher.h"
#include "serving/inference_http.h"
#include "serving/scorer.h"

namespace shadowsync::cli {
namespace {

struct ServeFlags {
  std::string model_dir;
  std::string name = "ctr";
  std::string metrics_listen = "0.0.0.0:8002";
  std::string ready_file;
  std::string gemm = "auto";
  serving::InferenceHttpOptions http;
  serving::BatcherOptions batcher;
  double max_delay_ms = 1;
  int max_forward_examples = serving::ScorerOptions().max_batch;
};

// Gauges of the model served.
void ExportModelGauges(const serving::Scorer& scorer, prometheus::Registry& registry) {
  auto gauge = [&](const char* name, const char* help, double value) {
    prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({}).Set(value);
  };
  gauge("shadowsync_serve_model_examples_trained",
        "Examples the served model was trained on (also its version).",
        static_cast<double>(scorer.info().examples_trained));
  gauge("shadowsync_serve_model_rows", "Embedding rows the served model holds in memory.",
        static_cast<double>(scorer.num_rows()));
  gauge("shadowsync_serve_model_loaded_timestamp_seconds",
        "When the served model was loaded (Unix seconds).", absl::ToUnixSeconds(absl::Now()));
}

int RunServe(ServeFlags f) {
  absl::StatusOr<std::optional<model::GemmKernel>> gemm = model::ParseGemmKernel(f.gemm, "--gemm");
  if (!gemm.ok()) {
    LOG(ERROR) << "serve: " << gemm.status().message();
    return 2;
  }
  if (!(f.max_delay_ms >= 0) || f.batcher.threads < 1 || f.batcher.max_batch_examples < 1 ||
      f.http.threads < 1 || f.http.max_request_examples < 1 || f.max_forward_examples < 1) {
    LOG(ERROR) << "serve: --max-delay-ms must be >= 0, and the thread and example counts >= 1";
    return 2;
  }
  if (!InstallStopSignals()) {
    LOG(ERROR) << "serve: cannot create the signal pipe";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<serving::Scorer>> scorer =
      serving::Scorer::Load(f.model_dir, {.max_batch = f.max_forward_examples, .gemm = *gemm});
  if (!scorer.ok()) {
    LOG(ERROR) << "serve: " << scorer.status();
    return scorer.status().code() == absl::StatusCode::kInvalidArgument ||
                   scorer.status().code() == absl::StatusCode::kNotFound
               ? 2
               : 1;
  }
  auto registry = std::make_shared<prometheus::Registry>();
  ExportModelGauges(**scorer, *registry);
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
  auto batcher = std::make_unique<serving::Batcher>(**scorer, f.batcher);
  const serving::ServedModel served{f.name, std::to_string((*scorer)->info().examples_trained)};
  absl::StatusOr<std::unique_ptr<serving::InferenceHttpServer>> http =
      serving::InferenceHttpServer::Start(served, **scorer, *batcher, f.http, *registry);
  if (!http.ok()) {
    LOG(ERROR) << "serve: " << http.status().message();
    return 1;
  }
  (*metrics)->set_serving(true);
  LOG(INFO) << "serving model '" << served.name << "' version " << served.version << " from "
            << f.model_dir << " on port " << (*http)->port() << " (KServe v2 HTTP); metrics on "
            << (*metrics)->port();
  if (!f.ready_file.empty() && !WriteReadyFile(f.ready_file, (*http)->port(), (*metrics)->port())) {
    LOG(ERROR) << "serve: cannot write --ready-file " << f.ready_file;
    return 1;
  }
  if (const int sig = AwaitStopSignal(); sig != 0) {
    LOG(INFO) << "serve received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  (*metrics)->set_serving(false);
  http->reset();  // Answers what is in flight.
  batcher.reset();
  return 0;
}

}  // namespace

Action AddServeCommand(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Score a model export online over the KServe v2 HTTP protocol until SIGTERM/SIGINT.");
  cmd->add_option("--model", f->model_dir, "the export directory to serve")->required();
  cmd->add_option("--name", f->name, "the model's name in /v2/models/{name}")
      ->capture_default_str();
  cmd->add_option("--listen", f->http.listen, "HTTP host:port of the v2 endpoints")
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
  cmd->add_option("--ready-file", f->ready_file,
                  "write \"HTTP_PORT METRICS_PORT\" here once serving");
  return [f] { return RunServe(*f); };
}

}  // namespace shadowsync::cli
