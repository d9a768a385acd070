// `shadowsync serve` as a user runs it: a model trained and exported by the
// real binary, served over the KServe v2 HTTP protocol, scores the held-out
// examples as `shadowsync eval` does; bad requests are refused naming what is
// wrong while the server goes on serving; gRPC scores as HTTP does; a newer
// export named by LATEST is swapped in; SIGTERM stops it cleanly.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/eval_metrics.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/util/http_get.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json LinesRequest(const std::vector<std::string>& lines, size_t begin, size_t end) {
  return {{"inputs",
           {{{"name", "lines"},
             {"datatype", "BYTES"},
             {"shape", {end - begin}},
             {"data", std::vector<std::string>(lines.begin() + begin, lines.begin() + end)}}}}};
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

  std::vector<std::string> serve_args = {
      bin, "serve", "--model", dir.File("exports"), "--ready-file", dir.File("ready")};
  for (const char* flag :
       {"--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--grpc-listen=127.0.0.1:0",
        "--threads=2", "--max-body-bytes=1000000", "--poll-seconds=0.2", "--gemm=openblas"}) {
    serve_args.push_back(flag);
  }
  absl::StatusOr<pid_t> pid = Spawn(
      serve_args, {.stdout_path = dir.File("serve.log"), .stderr_path = dir.File("serve.log")});
  ASSERT_TRUE(pid.ok()) << pid.status();
  int port = 0, metrics_port = 0, grpc_port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::ifstream ready(dir.File("ready"));
    if (!(ready >> port >> metrics_port >> grpc_port)) port = 0;
    if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(port, 0) << testing::ReadFile(dir.File("serve.log"));

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

  ASSERT_EQ(kill(*pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing::ReadFile(dir.File("serve.log"));
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
}

}  // namespace
}  // namespace shadowsync
