// `shadowsync serve` as a user runs it: a model trained and exported by the
// real binary, served over the KServe v2 HTTP protocol, scores the held-out
// examples as `shadowsync eval` does; bad requests are refused naming what is
// wrong while the server goes on serving; gRPC scores as HTTP does; a newer
// export named by LATEST is swapped in; SIGTERM stops it cleanly.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/eval_metrics.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/util/http_get.h"
#include "tests/util/https_exchange.h"
#include "tests/util/job_yaml.h"
#include "tests/util/serve_requests.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using testing::LinesRequest;

// A `shadowsync serve` process on loopback ports, logging to <dir>/serve.log.
struct Served {
  pid_t pid = -1;
  int port = 0, metrics_port = 0, grpc_port = 0;  // port 0: it did not start
};

// Starts `shadowsync serve --model MODEL FLAGS...` and waits for its ready file.
Served StartServe(const testing::ScratchDir& dir, const std::string& model,
                  const std::vector<std::string>& flags) {
  std::vector<std::string> args = {testing::BinDir() + "/shadowsync",
                                   "serve",
                                   "--model",
                                   model,
                                   "--ready-file",
                                   dir.File("ready"),
                                   "--listen=127.0.0.1:0",
                                   "--metrics-listen=127.0.0.1:0",
                                   "--grpc-listen=127.0.0.1:0"};
  args.insert(args.end(), flags.begin(), flags.end());
  Served served;
  absl::StatusOr<pid_t> pid =
      Spawn(args, {.stdout_path = dir.File("serve.log"), .stderr_path = dir.File("serve.log")});
  if (!pid.ok()) {
    ADD_FAILURE() << pid.status();
    return served;
  }
  served.pid = *pid;
  for (int i = 0; i < 600 && served.port == 0; ++i) {
    std::ifstream ready(dir.File("ready"));
    if (!(ready >> served.port >> served.metrics_port >> served.grpc_port)) served.port = 0;
    if (served.port != 0) break;
    int status = 0;
    if (waitpid(served.pid, &status, WNOHANG) == served.pid) break;  // It stopped at start.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return served;
}

TEST(ServeE2eTest, ServesAnExportAsEvalScoresItAndRefusesBadRequests) {
  testing::ScratchDir dir;
  const std::string bin = testing::BinDir() + "/shadowsync";
  std::string out;
  ASSERT_EQ(testing::RunShell(bin + " gen-data --out " + dir.File("t.tsv") +
                                  " --examples 8000 --eval-examples 1000 --seed 4",
                              &out),
            0)
      << out;
  // A directory of exports, as a job writes them: LATEST names the newest.
  const std::string model = dir.File("exports/model-000001");
  const std::string model_flags =
      " --batch-size 256 --bottom-mlp 32,16 --top-mlp 32 --hash-buckets 5000";
  ASSERT_EQ(testing::RunShell(
                bin + " train --data " + dir.File("t.tsv") + model_flags + " --save-model " + model,
                &out),
            0)
      << out;
  // One GEMM kernel for eval and serve: without an eval.gemm in the manifest
  // each process would time both and pick the faster, which on a loaded
  // machine can differ (scores then differ in the 6th digit).
  ASSERT_EQ(testing::RunShell(bin + " eval --gemm openblas --model " + model + " --data " +
                                  dir.File("t.eval.tsv") + " --report-json " + dir.File("e.json"),
                              &out),
            0)
      << out;
  const Json eval = Json::parse(testing::ReadFile(dir.File("e.json")));
  testing::WriteFile(dir.File("exports/LATEST"), "model-000001\n");

  const Served serve = StartServe(
      dir, dir.File("exports"),
      {"--threads=2", "--max-body-bytes=1000000", "--poll-seconds=0.2", "--gemm=openblas"});
  ASSERT_NE(serve.port, 0) << testing::ReadFile(dir.File("serve.log"));
  const int port = serve.port, metrics_port = serve.metrics_port, grpc_port = serve.grpc_port;

  std::string body;
  EXPECT_EQ(testing::HttpGet(port, "/v2/health/ready", &body), 200);
  ASSERT_EQ(testing::HttpGet(port, "/v2/models/ctr", &body), 200);
  const Json metadata = Json::parse(body);
  EXPECT_EQ(metadata["versions"], Json({"8000"}));
  EXPECT_EQ(metadata["parameters"]["examples_trained"], 8000);
  EXPECT_EQ(testing::HttpGet(port, "/v2/models/ctr/versions/8000/ready", &body), 200);

  // The held-out lines, scored by 4 concurrent clients in requests of 50.
  // (A function: scored again after the swap below.)
  std::vector<std::string> lines;
  std::vector<float> labels;
  {
    std::ifstream in(dir.File("t.eval.tsv"));
    for (std::string line; std::getline(in, line);) {
      lines.push_back(line);
      labels.push_back(line[0] == '1' ? 1.0f : 0.0f);
    }
  }
  ASSERT_EQ(lines.size(), 1000u);
  const auto score_lines = [&](std::atomic<int>& failures) {
    std::vector<float> probs(lines.size(), -1);
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c) {
      clients.emplace_back([&, c] {
        for (size_t begin = 50 * c; begin < lines.size(); begin += 200) {
          std::string answer;
          const int code = testing::HttpPost(
              port, "/v2/models/ctr/infer", LinesRequest(lines, begin, begin + 50).dump(), &answer);
          if (code != 200) {
            ++failures;
            continue;
          }
          const Json data = Json::parse(answer)["outputs"][0]["data"];
          for (size_t i = 0; i < 50; ++i) probs[begin + i] = data[i].get<float>();
        }
      });
    }
    for (std::thread& t : clients) t.join();
    return probs;
  };
  std::atomic<int> failures{0};
  const std::vector<float> probs = score_lines(failures);
  ASSERT_EQ(failures, 0);
  const QualityReport served = Evaluate(probs, labels);
  EXPECT_NEAR(served.logloss, eval["eval_logloss"].get<double>(), 1e-6);
  EXPECT_NEAR(served.auc, eval["eval_auc"].get<double>(), 1e-6);

  // The same examples as dense and sparse tensors score the same.
  {
    Json dense = Json::array(), sparse = Json::array();
    for (int e = 0; e < 3; ++e) {
      std::vector<std::string> f;
      std::stringstream fields(lines[e]);
      for (std::string x; std::getline(fields, x, '\t');) f.push_back(x);
      f.resize(40);
      for (int i = 1; i <= 13; ++i) dense.push_back(f[i].empty() ? 0 : std::stoll(f[i]));
      for (int i = 14; i < 40; ++i) {
        sparse.push_back(f[i].empty() ? -1 : static_cast<int64_t>(std::stoull(f[i], nullptr, 16)));
      }
    }
    const Json request = {
        {"id", "tensors"},
        {"inputs",
         {{{"name", "dense"}, {"datatype", "FP32"}, {"shape", {3, 13}}, {"data", dense}},
          {{"name", "sparse"}, {"datatype", "INT64"}, {"shape", {3, 26}}, {"data", sparse}}}}};
    ASSERT_EQ(testing::HttpPost(port, "/v2/models/ctr/infer", request.dump(), &body), 200) << body;
    const Json response = Json::parse(body);
    EXPECT_EQ(response["id"], "tensors");
    EXPECT_EQ(response["model_version"], "8000");
    for (int e = 0; e < 3; ++e) {
      EXPECT_NEAR(response["outputs"][0]["data"][e].get<float>(), probs[e], 1e-6) << e;
    }

    // And over gRPC (inference.GRPCInferenceService), as raw tensors.
    inference::ModelInferRequest grpc_request;
    grpc_request.set_model_name("ctr");
    std::vector<float> dense_values;
    std::vector<int64_t> sparse_values;
    for (const Json& v : dense) dense_values.push_back(v.get<float>());
    for (const Json& v : sparse) sparse_values.push_back(v.get<int64_t>());
    for (const auto& [name, datatype, width] :
         {std::tuple{"dense", "FP32", 13}, std::tuple{"sparse", "INT64", 26}}) {
      auto* input = grpc_request.add_inputs();
      input->set_name(name);
      input->set_datatype(datatype);
      input->add_shape(3);
      input->add_shape(width);
    }
    grpc_request.add_raw_input_contents(reinterpret_cast<const char*>(dense_values.data()),
                                        dense_values.size() * sizeof(float));
    grpc_request.add_raw_input_contents(reinterpret_cast<const char*>(sparse_values.data()),
                                        sparse_values.size() * sizeof(int64_t));
    auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", grpc_port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    inference::ModelInferResponse grpc_response;
    const grpc::Status status = stub->ModelInfer(&context, grpc_request, &grpc_response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(grpc_response.model_version(), "8000");
    ASSERT_EQ(grpc_response.raw_output_contents_size(), 1);
    ASSERT_EQ(grpc_response.raw_output_contents(0).size(), 3 * sizeof(float));
    float grpc_probs[3];
    std::memcpy(grpc_probs, grpc_response.raw_output_contents(0).data(), sizeof(grpc_probs));
    for (int e = 0; e < 3; ++e) EXPECT_NEAR(grpc_probs[e], probs[e], 1e-6) << e;
  }

  // Bad requests: each answered with what is wrong; the server keeps serving.
  const std::vector<std::tuple<std::string, std::string, int, std::string>> bad = {
      {"/v2/models/ctr/infer", "{\"inputs\": [", 400, "malformed JSON"},
      {"/v2/models/ctr/infer",
       Json({{"inputs", {{{"name", "ids"}, {"datatype", "INT64"}, {"shape", {1}}, {"data", {1}}}}}})
           .dump(),
       400, "inputs[0].name: 'ids' is not an input"},
      {"/v2/models/ctr/infer", std::string(1'200'000, ' '), 400, "exceeds the limit"},
      {"/v2/models/other/infer", LinesRequest(lines, 0, 1).dump(), 404,
       "model 'other' is not served here"},
      {"/v2/models/ctr/versions/7/infer", LinesRequest(lines, 0, 1).dump(), 404,
       "version '7' of model 'ctr' is not served here; version '8000' is"},
  };
  for (const auto& [path, request, code, message] : bad) {
    EXPECT_EQ(testing::HttpPost(port, path, request, &body), code) << message;
    EXPECT_THAT(Json::parse(body)["error"].get<std::string>(), HasSubstr(message));
    ASSERT_EQ(
        testing::HttpPost(port, "/v2/models/ctr/infer", LinesRequest(lines, 0, 1).dump(), &body),
        200)
        << "after: " << message;
  }

  EXPECT_EQ(testing::HttpGet(port, "/v2/models/ctr/infer", &body), 405);
  EXPECT_THAT(body, HasSubstr("infer takes POST"));

  ASSERT_EQ(testing::HttpGet(metrics_port, "/metrics", &body), 200);
  EXPECT_THAT(body, HasSubstr("shadowsync_serve_model_examples_trained 8000"));
  EXPECT_THAT(body, HasSubstr("shadowsync_serve_requests_total{code=\"400\",protocol=\"http\"} 3"));
  EXPECT_THAT(body, HasSubstr("shadowsync_serve_batch_examples_count"));

  // A newer export (trained further from this one), named by LATEST while
  // clients score: swapped in within the poll, with no request failing.
  const std::string newer = dir.File("exports/model-000002");
  ASSERT_EQ(testing::RunShell(bin + " train --data " + dir.File("t.tsv") + model_flags +
                                  " --init-model " + model + " --max-examples 3000 --save-model " +
                                  newer + " && " + bin + " eval --gemm openblas --model " + newer +
                                  " --data " + dir.File("t.eval.tsv") + " --report-json " +
                                  dir.File("e2.json"),
                              &out),
            0)
      << out;
  const Json eval2 = Json::parse(testing::ReadFile(dir.File("e2.json")));
  std::atomic<bool> swapped{false};
  std::atomic<int> during_swap_failures{0};
  std::thread during_swap([&] {
    while (!swapped) score_lines(during_swap_failures);
  });
  testing::WriteFile(dir.File("exports/LATEST.tmp"), "model-000002\n");
  std::filesystem::rename(dir.File("exports/LATEST.tmp"), dir.File("exports/LATEST"));
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(testing::HttpGet(port, "/v2/models/ctr", &body), 200);
    if (Json::parse(body)["versions"] == Json({"3000"})) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  swapped = true;
  during_swap.join();
  EXPECT_EQ(Json::parse(body)["versions"], Json({"3000"})) << body;
  EXPECT_EQ(during_swap_failures, 0);
  const QualityReport served2 = Evaluate(score_lines(failures), labels);
  ASSERT_EQ(failures, 0);
  EXPECT_NEAR(served2.logloss, eval2["eval_logloss"].get<double>(), 1e-6);
  EXPECT_NEAR(served2.auc, eval2["eval_auc"].get<double>(), 1e-6);
  EXPECT_GT(std::abs(served2.logloss - served.logloss), 1e-6);  // Another model scored them.
  EXPECT_EQ(testing::HttpGet(port, "/v2/models/ctr/versions/8000/ready", &body), 404);
  ASSERT_EQ(testing::HttpGet(metrics_port, "/metrics", &body), 200);
  EXPECT_THAT(body, HasSubstr("shadowsync_serve_model_examples_trained 3000"));
  EXPECT_THAT(body, HasSubstr("shadowsync_serve_model_loads_total 2"));

  ASSERT_EQ(kill(serve.pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(serve.pid, &status, 0), serve.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing::ReadFile(dir.File("serve.log"));
}

// Seconds since the export `dir` was committed (its manifest written).
double AgeOf(const std::string& dir) {
  const auto written = std::filesystem::last_write_time(dir + "/manifest.json");
  return std::chrono::duration<double>(std::filesystem::file_time_type::clock::now() - written)
      .count();
}

// The "done when": a job still training writes a delta export every
// deltaIntervalSeconds; serve, watching its exports directory, applies each
// over the model it serves within its poll plus the load, and the scores
// change to those `shadowsync eval` gives the delta.
TEST(ServeE2eTest, DeltasFromARunningJobReachTheServerAndChangeItsScores) {
  testing::ScratchDir dir;
  const std::string bin = testing::BinDir() + "/shadowsync";
  constexpr int kDeltaSeconds = 2;
  const std::string job = dir.File("live.yaml");
  testing::WriteFile(job,
                     testing::TinyJobYaml(
                         "live", 1'000'000, 1000,
                         "  trainer: {replicas: 2, threads: 1, batchSize: 64, learningRate: 0.02}\n"
                         "  parameterServer: {replicas: 2, cacheBytes: 16Mi, slots: 512}\n"
                         "  syncer: {replicas: 1}\n"
                         "  sync: {algorithm: shadow-easgd, dutyCycle: 1}\n"
                         "  export: {deltaIntervalSeconds: " +
                             std::to_string(kDeltaSeconds) + "}\n"));
  const std::string run = dir.File("live");
  const pid_t launcher = testing::StartLauncher(bin, job, run);
  const std::string exports = run + "/exports";
  // The first one is a full export (there is nothing to go over yet).
  for (int i = 0; i < 600 && !std::filesystem::exists(exports + "/LATEST"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(std::filesystem::exists(exports + "/LATEST")) << testing::ReadFile(run + ".log");

  const Served serve = StartServe(
      dir, exports,
      {"--threads=2", "--max-body-bytes=4000000", "--poll-seconds=0.2", "--gemm=openblas"});
  ASSERT_NE(serve.port, 0) << testing::ReadFile(dir.File("serve.log"));
  const int port = serve.port;

  std::vector<std::string> lines;
  std::vector<float> labels;
  {
    std::ifstream in(run + "/data/eval.tsv");
    for (std::string line; std::getline(in, line);) {
      lines.push_back(line);
      labels.push_back(line[0] == '1' ? 1.0f : 0.0f);
    }
  }
  ASSERT_EQ(lines.size(), 1000u);
  // Every eval line in one request, so one model scores them all; the
  // export that model is, read before and after (a swap in between: again).
  const std::string request = LinesRequest(lines, 0, lines.size()).dump();
  std::string error;
  std::vector<float> first_probs;
  const std::string first = testing::ScoreWithOneExport(port, request, &first_probs, &error);
  ASSERT_FALSE(first.empty()) << error;

  // Two deltas in turn reach the server; each is served within the poll
  // (0.2 s) plus the load of its commit, and the exporter writes them
  // deltaIntervalSeconds apart (plus the export's own time).
  std::string served = first;
  std::vector<std::string> deltas;
  for (int i = 0; i < 1200 && deltas.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string body;
    ASSERT_EQ(testing::HttpGet(port, "/v2/models/ctr", &body), 200);
    const std::string now = Json::parse(body)["parameters"]["export"].get<std::string>();
    if (now == served) continue;
    served = now;
    const Json manifest = Json::parse(testing::ReadFile(now + "/manifest.json"));
    if (!manifest.contains("delta")) continue;  // a full export (at the end)
    EXPECT_LT(AgeOf(now), 3.0) << now << " was served late";
    deltas.push_back(now);
  }
  ASSERT_EQ(deltas.size(), 2u) << testing::ReadFile(run + ".log")
                               << testing::ReadFile(dir.File("serve.log"));
  // Committed this far apart: a delta starts deltaIntervalSeconds after the
  // last one started, and takes its own time. The exporter runs niced below
  // training, so on two cores shared with other tests (ctest -j2) one took
  // 9 s: the bound leaves room for that, not for a missed interval.
  const double apart = AgeOf(deltas[0]) - AgeOf(deltas[1]);
  EXPECT_LT(apart, 2 * kDeltaSeconds + 10.0);

  std::vector<float> probs;
  const std::string later = testing::ScoreWithOneExport(port, request, &probs, &error);
  ASSERT_FALSE(later.empty()) << error;
  EXPECT_NE(later, first);
  EXPECT_NE(probs, first_probs) << "the deltas did not change the scores";
  std::string out;
  ASSERT_EQ(testing::RunShell(bin + " eval --gemm openblas --model " + later + " --data " + run +
                                  "/data/eval.tsv --report-json " + dir.File("e.json"),
                              &out),
            0)
      << out;
  const Json eval = Json::parse(testing::ReadFile(dir.File("e.json")));
  const QualityReport quality = Evaluate(probs, labels);
  EXPECT_NEAR(quality.logloss, eval["eval_logloss"].get<double>(), 1e-6) << later;
  EXPECT_NEAR(quality.auc, eval["eval_auc"].get<double>(), 1e-6) << later;

  ASSERT_EQ(kill(serve.pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(serve.pid, &status, 0), serve.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing::ReadFile(dir.File("serve.log"));
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::ReadFile(run + ".log");
}

// --auth-token-file guards the HTTP port as it does the gRPC one: every
// endpoint but the probes' answers 401 without "Authorization: Bearer
// <token>", and serving goes on.
TEST(ServeE2eTest, WithATokenHttpRequestsWithoutItAreRefusedAndTheProbesStayOpen) {
  testing::ScratchDir dir;
  const std::string bin = testing::BinDir() + "/shadowsync";
  std::string out;
  ASSERT_EQ(testing::RunShell(bin + " gen-data --out " + dir.File("t.tsv") +
                                  " --examples 2000 --eval-examples 10 --seed 4 && " + bin +
                                  " train --data " + dir.File("t.tsv") +
                                  " --bottom-mlp 16 --top-mlp 16 --hash-buckets 500 --save-model " +
                                  dir.File("model"),
                              &out),
            0)
      << out;
  testing::WriteFile(dir.File("token"), "s3cret-token\n");
  const Served serve = StartServe(dir, dir.File("model"), {"--auth-token-file", dir.File("token")});
  ASSERT_NE(serve.port, 0) << testing::ReadFile(dir.File("serve.log"));
  const int port = serve.port, metrics_port = serve.metrics_port;
  const auto get = [&](const std::string& path, const std::string& authorization) {
    return testing::HttpExchange(
        "127.0.0.1", port,
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" +
            (authorization.empty() ? "" : "Authorization: " + authorization + "\r\n") + "\r\n");
  };
  std::string body;
  EXPECT_EQ(testing::HttpStatus(get("/v2/health/ready", ""), &body), 200);
  EXPECT_EQ(testing::HttpStatus(get("/v2/health/live", ""), &body), 200);
  const std::string refused = get("/v2/models/ctr", "");
  EXPECT_EQ(testing::HttpStatus(refused, &body), 401) << refused;
  EXPECT_THAT(refused, HasSubstr("WWW-Authenticate: Bearer"));
  EXPECT_THAT(body, HasSubstr("bearer token"));
  EXPECT_EQ(testing::HttpStatus(get("/v2/models/ctr", "Bearer wrong"), &body), 401);
  EXPECT_EQ(testing::HttpStatus(get("/v2", ""), &body), 401);
  EXPECT_EQ(testing::HttpStatus(get("/v2/models/ctr", "Bearer s3cret-token"), &body), 200) << body;
  EXPECT_EQ(testing::HttpPost(port, "/v2/models/ctr/infer", "{}", &body), 401);
  const std::string data = testing::ReadFile(dir.File("t.tsv"));
  const std::string line = data.substr(0, data.find('\n'));
  const std::string request = LinesRequest({line}, 0, 1).dump();
  const std::string scored = testing::HttpExchange(
      "127.0.0.1", port,
      "POST /v2/models/ctr/infer HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
      "s3cret-token\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(request.size()) + "\r\n\r\n" + request);
  EXPECT_EQ(testing::HttpStatus(scored, &body), 200) << scored;
  ASSERT_EQ(testing::HttpGet(metrics_port, "/metrics", &body), 200);
  EXPECT_THAT(body, HasSubstr("shadowsync_serve_requests_total{code=\"401\",protocol=\"http\"} 1"));

  ASSERT_EQ(kill(serve.pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(serve.pid, &status, 0), serve.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing::ReadFile(dir.File("serve.log"));
}

// The TLS options every ShadowSync server takes (--tls-*): the HTTP port
// speaks HTTPS only, and only to clients with a certificate of the CA, as
// the gRPC port; /metrics and the probes stay plain HTTP on the metrics
// port. A key that is not the certificate's stops serve at start.
TEST(ServeE2eTest, WithTlsTheHttpPortServesOnlyClientsWithACertificateOfTheCa) {
  testing::ScratchDir dir;
  const std::string bin = testing::BinDir() + "/shadowsync";
  std::string out;
  ASSERT_EQ(
      testing::RunShell("bash " + testing::SourceDir() + "/tests/util/gen_test_certs.sh " +
                            dir.File("certs") + " && " + bin + " gen-data --out " +
                            dir.File("t.tsv") + " --examples 2000 --eval-examples 10 --seed 4 && " +
                            bin + " train --data " + dir.File("t.tsv") +
                            " --bottom-mlp 16 --top-mlp 16 --hash-buckets 500 --save-model " +
                            dir.File("model"),
                        &out),
      0)
      << out;
  const std::string certs = dir.File("certs") + "/";
  const std::vector<std::string> tls_flags = {"--tls-ca-file",   certs + "ca.crt",
                                              "--tls-cert-file", certs + "tls.crt",
                                              "--tls-key-file",  certs + "tls.key"};
  const Served serve = StartServe(dir, dir.File("model"), tls_flags);
  ASSERT_NE(serve.port, 0) << testing::ReadFile(dir.File("serve.log"));
  EXPECT_THAT(testing::ReadFile(dir.File("serve.log")), HasSubstr("(KServe v2 HTTPS)"));

  const testing::TlsClientFiles client = {
      .ca_file = certs + "ca.crt", .cert_file = certs + "tls.crt", .key_file = certs + "tls.key"};
  std::string body, error;
  const std::string metadata =
      testing::HttpsExchange(serve.port, "GET /v2/models/ctr HTTP/1.0\r\n\r\n", client, &error);
  ASSERT_EQ(testing::HttpStatus(metadata, &body), 200) << error << metadata;
  EXPECT_THAT(body, HasSubstr("\"name\":\"ctr\""));
  const std::string data = testing::ReadFile(dir.File("t.tsv"));
  const std::string request = LinesRequest({data.substr(0, data.find('\n'))}, 0, 1).dump();
  const std::string scored = testing::HttpsExchange(
      serve.port,
      "POST /v2/models/ctr/infer HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(request.size()) + "\r\n\r\n" + request,
      client, &error);
  ASSERT_EQ(testing::HttpStatus(scored, &body), 200) << error << scored;
  const double p = Json::parse(body)["outputs"][0]["data"][0].get<double>();
  EXPECT_TRUE(p > 0 && p < 1) << body;

  const std::string ready = "GET /v2/health/ready HTTP/1.0\r\n\r\n";
  testing::TlsClientFiles anonymous = client;
  anonymous.cert_file = anonymous.key_file = "";
  EXPECT_EQ(testing::HttpsExchange(serve.port, ready, anonymous, &error), "")
      << "no client certificate";
  testing::TlsClientFiles stranger = client;
  stranger.cert_file = certs + "other.crt";
  stranger.key_file = certs + "other.key";
  EXPECT_EQ(testing::HttpsExchange(serve.port, ready, stranger, &error), "")
      << "a client certificate of another CA";
  testing::TlsClientFiles doubting = client;
  doubting.ca_file = certs + "other-ca.crt";
  EXPECT_EQ(testing::HttpsExchange(serve.port, ready, doubting, &error), "")
      << "a client that does not trust the server's CA";
  EXPECT_THAT(error, HasSubstr("handshake"));
  EXPECT_EQ(testing::HttpStatus(testing::HttpExchange("127.0.0.1", serve.port, ready), &body), -1)
      << "plain HTTP on the HTTPS port";
  // Still serving after the refusals; the metrics port stays plain HTTP.
  EXPECT_EQ(testing::HttpStatus(testing::HttpsExchange(serve.port, ready, client), &body), 200);
  EXPECT_EQ(testing::HttpGet(serve.metrics_port, "/readyz", &body), 200);

  ASSERT_EQ(kill(serve.pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(serve.pid, &status, 0), serve.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing::ReadFile(dir.File("serve.log"));

  out.clear();
  EXPECT_EQ(testing::RunShell(bin + " serve --model " + dir.File("model") +
                                  " --listen=127.0.0.1:0 --metrics-listen=127.0.0.1:0 "
                                  "--grpc-listen=127.0.0.1:0 --tls-ca-file " +
                                  certs + "ca.crt --tls-cert-file " + certs +
                                  "tls.crt --tls-key-file " + certs + "other.key",
                              &out),
            2);
  EXPECT_THAT(out, HasSubstr("--tls-key-file is not the private key of --tls-cert-file"));
}

// The counter shadowsync_serve_rows_total{source="SOURCE"} in a /metrics body.
double RowsFrom(const std::string& metrics, const std::string& source) {
  const std::string name = "shadowsync_serve_rows_total{source=\"" + source + "\"} ";
  const size_t at = metrics.find(name);
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + name.size()));
}

// `--cache-bytes`: the rows live on disk behind a RAM cache far smaller
// than them, the answers are those of the model in RAM, the metrics say
// where the rows came from, and the store goes when serve does.
TEST(ServeE2eTest, WithCacheBytesRowsComeFromDiskAndScoreAsInMemory) {
  testing::ScratchDir dir, ram_dir, disk_dir;
  const std::string bin = testing::BinDir() + "/shadowsync";
  std::string out;
  ASSERT_EQ(
      testing::RunShell(bin + " gen-data --out " + dir.File("t.tsv") +
                            " --examples 3000 --eval-examples 10 --seed 4 && " + bin +
                            " train --data " + dir.File("t.tsv") +
                            " --bottom-mlp 16 --top-mlp 16 --hash-buckets 5000 --save-model " +
                            dir.File("model"),
                        &out),
      0)
      << out;
  // One GEMM kernel for both: each would otherwise measure and pick its own,
  // and two kernels' sums differ in the last bits.
  const Served ram = StartServe(ram_dir, dir.File("model"), {"--gemm=openblas"});
  const Served disk =
      StartServe(disk_dir, dir.File("model"),
                 {"--gemm=openblas", "--cache-bytes=16384", "--cache-dir=" + dir.File("stores")});
  ASSERT_NE(ram.port, 0) << testing::ReadFile(ram_dir.File("serve.log"));
  ASSERT_NE(disk.port, 0) << testing::ReadFile(disk_dir.File("serve.log"));
  std::vector<std::string> lines = absl::StrSplit(testing::ReadFile(dir.File("t.tsv")), '\n');
  const std::string request = LinesRequest(lines, 0, 200).dump();
  std::string want, got;
  ASSERT_EQ(testing::HttpPost(ram.port, "/v2/models/ctr/infer", request, &want), 200) << want;
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_EQ(testing::HttpPost(disk.port, "/v2/models/ctr/infer", request, &got), 200) << got;
    EXPECT_EQ(Json::parse(got)["outputs"], Json::parse(want)["outputs"]);
  }
  std::string metrics;
  ASSERT_EQ(testing::HttpGet(ram.metrics_port, "/metrics", &metrics), 200);
  const double in_ram = RowsFrom(metrics, "memory");
  EXPECT_GT(in_ram, 0) << metrics;
  ASSERT_EQ(testing::HttpGet(disk.metrics_port, "/metrics", &metrics), 200);
  EXPECT_EQ(RowsFrom(metrics, "memory"), 0) << metrics;
  EXPECT_GT(RowsFrom(metrics, "disk"), 0) << metrics;
  EXPECT_EQ(RowsFrom(metrics, "disk") + RowsFrom(metrics, "cache"), 2 * in_ram) << metrics;
  EXPECT_FALSE(std::filesystem::is_empty(dir.File("stores")));

  for (const Served& s : {ram, disk}) {
    ASSERT_EQ(kill(s.pid, SIGTERM), 0);
    int status = 0;
    ASSERT_EQ(waitpid(s.pid, &status, 0), s.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.File("stores")));

  // A --cache-dir that cannot hold a store stops serve at start, naming it.
  testing::WriteFile(dir.File("a-file"), "x");
  out.clear();
  EXPECT_EQ(testing::RunShell(bin + " serve --model " + dir.File("model") +
                                  " --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0" +
                                  " --grpc-listen 127.0.0.1:0 --cache-bytes=16384 --cache-dir " +
                                  dir.File("a-file") + "/stores",
                              &out),
            1);
  EXPECT_THAT(out, HasSubstr(dir.File("a-file") + "/stores"));
}

// A model that cannot be served stops serve at start, naming the file or flag.
TEST(ServeE2eTest, AnExportThatCannotBeReadOrABadFlagStopsItAtStart) {
  testing::ScratchDir dir;
  const std::string bin = testing::BinDir() + "/shadowsync";
  std::string out;
  EXPECT_EQ(testing::RunShell(bin + " serve --model " + dir.File("none") +
                                  " --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0",
                              &out),
            2);
  EXPECT_THAT(out, HasSubstr(dir.File("none")));
  out.clear();
  EXPECT_EQ(testing::RunShell(bin + " serve --model " + dir.File("none") + " --gemm mkl", &out), 2);
  EXPECT_THAT(out, HasSubstr("--gemm: 'mkl' is not one of auto, openblas, onednn"));
  out.clear();
  EXPECT_EQ(
      testing::RunShell(bin + " serve --model " + dir.File("none") + " --cache-bytes=-1", &out), 2);
  EXPECT_THAT(out, HasSubstr("--cache-bytes must be >= 0"));
}

}  // namespace
}  // namespace shadowsync
