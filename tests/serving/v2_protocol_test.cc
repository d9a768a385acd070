// The KServe v2 JSON codec: tensors read as the TSV reader reads the same
// features, and every malformed request refused naming its field.
#include "serving/v2_protocol.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "data/criteo_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serving/infer_json_scanner.h"
#include "tests/util/test_util.h"

namespace shadowsync::serving {
namespace {

using ::shadowsync::testing::StatusIs;
using Json = nlohmann::json;

model::DlrmConfig Criteo() { return model::DlrmConfig(); }  // 13 dense, 26 tables.

// Two examples' TSV lines, and the same features as v2 tensors.
const std::vector<std::string> kLines = {
    "1\t5\t\t0\t-1\t3\t1000000\t2\t7\t\t1\t4\t0\t9\t" + std::string("68fd1e64\t") +
        "\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504"
        "\t"
        "b2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\t"
        "b1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407",
    "0\t\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t00000001\t00000002\t00000003\t00000004\t"
    "00000005\t00000006\t00000007\t00000008\t00000009\t0000000a\t0000000b\t0000000c\t0000000d\t"
    "0000000e\t0000000f\t00000010\t00000011\t00000012\t00000013\t00000014\t00000015\t00000016\t"
    "00000017\t00000018\t00000019\tffffffff"};

ExampleBlock FromLines() {
  ExampleBlock block;
  for (const std::string& line : kLines) SS_EXPECT_OK(ParseCriteoLine(line, &block));
  return block;
}

// The tensors of kLines: integer fields as written (empty = 0), ids as the
// hex digits read (empty = -1).
Json TensorRequest() {
  Json dense = Json::array(), sparse = Json::array();
  for (const std::string& line : kLines) {
    const std::vector<std::string> f = absl::StrSplit(line, '\t');
    for (int i = 1; i <= 13; ++i) dense.push_back(f[i].empty() ? 0 : std::stoll(f[i]));
    for (int i = 14; i < 40; ++i) {
      sparse.push_back(f[i].empty() ? int64_t{-1}
                                    : static_cast<int64_t>(std::stoull(f[i], nullptr, 16)));
    }
  }
  return {{"id", "r1"},
          {"inputs",
           {{{"name", "dense"}, {"datatype", "FP32"}, {"shape", {2, 13}}, {"data", dense}},
            {{"name", "sparse"}, {"datatype", "INT64"}, {"shape", {2, 26}}, {"data", sparse}}}}};
}

void ExpectSameFeatures(const ExampleBlock& got, const ExampleBlock& want) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got.dense, want.dense);
  for (int64_t e = 0; e < want.size(); ++e) {
    for (int t = 0; t < want.num_sparse; ++t) {
      EXPECT_THAT(std::vector<uint64_t>(got.ids(e, t).begin(), got.ids(e, t).end()),
                  ::testing::ElementsAreArray(want.ids(e, t)))
          << e << " " << t;
    }
  }
}

TEST(V2ProtocolTest, TensorsReadAsTheTsvReaderReadsTheSameFeatures) {
  absl::StatusOr<InferRequest> r = ParseInferRequest(TensorRequest().dump(), Criteo(), 64);
  SS_ASSERT_OK(r);
  EXPECT_EQ(r->id, "r1");
  ExpectSameFeatures(r->examples, FromLines());
  // Nested data is the same values, row-major; integer datatypes too.
  Json nested = TensorRequest();
  Json rows = Json::array();
  for (int e = 0; e < 2; ++e) {
    rows.push_back(Json(std::vector<Json>(nested["inputs"][0]["data"].begin() + 13 * e,
                                          nested["inputs"][0]["data"].begin() + 13 * (e + 1))));
  }
  nested["inputs"][0]["data"] = rows;
  nested["inputs"][0]["datatype"] = "INT64";
  r = ParseInferRequest(nested.dump(), Criteo(), 64);
  SS_ASSERT_OK(r);
  ExpectSameFeatures(r->examples, FromLines());
}

TEST(V2ProtocolTest, LinesParseWithOrWithoutTheLabel) {
  Json data = Json::array();
  data.push_back(kLines[0]);
  data.push_back(kLines[1].substr(kLines[1].find('\t') + 1));  // no label
  const Json request = {
      {"inputs", {{{"name", "lines"}, {"datatype", "BYTES"}, {"shape", {2}}, {"data", data}}}}};
  absl::StatusOr<InferRequest> r = ParseInferRequest(request.dump(), Criteo(), 64);
  SS_ASSERT_OK(r);
  ExpectSameFeatures(r->examples, FromLines());
}

TEST(V2ProtocolTest, EachBadRequestIsRefusedNamingWhatIsWrong) {
  auto with = [](const std::function<void(Json&)>& edit) {
    Json r = TensorRequest();
    edit(r);
    return r.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"inputs\": [", "malformed JSON"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper than"},
      {"[1, 2]", "not a JSON object"},
      {"{}", "inputs: missing"},
      {with([](Json& r) { r["inputs"][1]["name"] = "ids"; }),
       "inputs[1].name: 'ids' is not an input of this model"},
      {with([](Json& r) { r["inputs"][1]["name"] = "dense"; }), "inputs[1].name: 'dense' again"},
      {with([](Json& r) { r["inputs"].erase(1); }), "no tensor 'sparse'"},
      {with([](Json& r) { r["inputs"][0]["datatype"] = "BYTES"; }),
       "inputs[0].datatype: 'BYTES' is not one of FP32"},
      {with([](Json& r) { r["inputs"][1]["datatype"] = "FP32"; }),
       "inputs[1].datatype: 'FP32' is not one of INT64, INT32"},
      {with([](Json& r) {
         r["inputs"][0]["shape"] = {2, 12};
       }),
       "inputs[0].data: shape [2,12]"},
      {with([](Json& r) {
         r["inputs"][0]["shape"] = {1, 26};
       }),
       "inputs[0].shape: [1,26]; the model takes [1,13]"},
      {with([](Json& r) {
         r["inputs"][1]["shape"] = {1, 52};
       }),
       "inputs[1].shape: [1,52]; the model takes [2,26]"},
      {with([](Json& r) { r["inputs"][0]["data"][5] = 3.5; }),
       "inputs[0].data[5]: 3.5 is not an integer count"},
      {with([](Json& r) { r["inputs"][0]["data"][7] = "x"; }), "inputs[0].data[7]: \"x\""},
      {with([](Json& r) { r["inputs"][1]["data"][3] = int64_t{1} << 32; }),
       "inputs[1].data[3]: 4294967296 is not a categorical id"},
      {with([](Json& r) { r["inputs"][1]["data"][4] = -2; }), "inputs[1].data[4]: -2"},
      {with([](Json& r) {
         r["inputs"][0]["shape"] = {65, 13};
       }),
       "inputs[0].shape: 65 examples; a request may hold at most 64"},
      {with([](Json& r) {
         r["outputs"] = {{{"name", "logit"}}};
       }),
       "outputs[0].name: \"logit\" is not an output of this model"},
      {with([](Json& r) {
         r["inputs"].push_back(
             {{"name", "lines"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"x"}}});
       }),
       "either lines, or dense and sparse"},
      {Json({{"inputs",
              {{{"name", "lines"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"1\t2"}}}}}})
           .dump(),
       "inputs[0].data[0]: "},
  };
  for (const auto& [body, message] : cases) {
    EXPECT_THAT(ParseInferRequest(body, Criteo(), 64),
                StatusIs(absl::StatusCode::kInvalidArgument, message))
        << body.substr(0, 200);
  }
  // A non-finite value cannot be written in JSON but as an overflowing
  // number, which the parser refuses (it threw out_of_range, not parse_error).
  std::string body = TensorRequest().dump();
  body.replace(body.find("\"data\":[") + 8, 1, "1e999");
  EXPECT_THAT(ParseInferRequest(body, Criteo(), 64),
              StatusIs(absl::StatusCode::kInvalidArgument, "malformed JSON"));
  EXPECT_THAT(ParseInferRequest(body, Criteo(), 64),
              StatusIs(absl::StatusCode::kInvalidArgument, "number overflow"));
}

// ParseInferRequest (the scanner, else the document) against
// ParseInferRequestDocument alone: the same request, or the same error.
void ExpectSameAsDocument(const std::string& body) {
  const absl::StatusOr<InferRequest> got = ParseInferRequest(body, Criteo(), 64);
  const absl::StatusOr<InferRequest> want = ParseInferRequestDocument(body, Criteo(), 64);
  ASSERT_EQ(got.status(), want.status()) << body.substr(0, 300);
  if (!want.ok()) return;
  EXPECT_EQ(got->id, want->id) << body.substr(0, 300);
  ExpectSameFeatures(got->examples, want->examples);
}

TEST(V2ProtocolTest, TheScannerReadsCommonBodiesAsTheDocumentParserDoes) {
  Json lines = {{"id", "l"},
                {"inputs",
                 {{{"name", "lines"},
                   {"datatype", "BYTES"},
                   {"shape", {2}},
                   {"data", {kLines[0], kLines[1]}}}}}};
  Json nested = TensorRequest();
  nested["inputs"][1]["data"] = Json::array({Json::array(), nested["inputs"][1]["data"]});
  nested["inputs"][0]["parameters"] = {{"binary_data_size", nullptr}, {"x", {true, false, 1.5}}};
  nested["parameters"] = {{"content_type", "pb"}};
  nested["outputs"] = {{{"name", "probability"}, {"parameters", Json::object()}}};
  // Each is read by the scanner (it is not a test of the fallback alone)
  // and agrees with the document parser.
  for (const std::string& body : {TensorRequest().dump(), TensorRequest().dump(2), lines.dump(),
                                  nested.dump(), nested.dump(1, '\t')}) {
    EXPECT_TRUE(ScanInferRequest(body).has_value()) << body.substr(0, 300);
    ExpectSameAsDocument(body);
  }
  // What it read: the strings decoded, the numbers as written.
  const std::optional<ScannedRequest> scanned_lines = ScanInferRequest(lines.dump());
  ASSERT_TRUE(scanned_lines.has_value());
  EXPECT_EQ(scanned_lines->id, "l");
  EXPECT_EQ(scanned_lines->inputs[0].strings, kLines);
  EXPECT_EQ(scanned_lines->inputs[0].shape, std::vector<int64_t>{2});
  const std::optional<ScannedRequest> scanned_nested = ScanInferRequest(nested.dump());
  ASSERT_TRUE(scanned_nested.has_value());
  std::vector<int64_t> ids;
  for (const ScannedTensor::Number& n : scanned_nested->inputs[1].numbers) {
    EXPECT_TRUE(n.is_integer);
    ids.push_back(n.integer);
  }
  EXPECT_EQ(Json(ids), TensorRequest()["inputs"][1]["data"]);
  // Bodies the scanner leaves to the document parser, which reads them.
  std::string escaped = lines.dump();
  escaped.replace(escaped.find("\\t"), 2, "\\u0009");
  std::string duplicate = TensorRequest().dump();
  duplicate.replace(duplicate.find("\"id\""), 4, "\"id\":\"x\",\"id\"");
  Json unsigned_id = TensorRequest();
  unsigned_id["inputs"][1]["data"][0] = uint64_t{1} << 63;
  Json floats = TensorRequest();
  floats["inputs"][0]["data"][0] = 2.0;
  floats["inputs"][0]["data"][1] = -0.0;
  floats["inputs"][0]["data"][2] = 1e3;
  for (const std::string& body : {escaped, duplicate, unsigned_id.dump(), floats.dump()}) {
    ExpectSameAsDocument(body);
  }
  EXPECT_FALSE(ScanInferRequest(escaped).has_value());
  EXPECT_FALSE(ScanInferRequest(duplicate).has_value());
  EXPECT_TRUE(ScanInferRequest(floats.dump()).has_value());
  SS_EXPECT_OK(ParseInferRequest(floats.dump(), Criteo(), 64));
}

// Thousands of bodies one edit away from valid ones (a byte dropped,
// replaced or inserted, JSON's own characters likeliest): whatever the
// scanner makes of each, the result is the document parser's.
TEST(V2ProtocolTest, MutatedBodiesGetTheDocumentParsersAnswer) {
  const std::vector<std::string> seeds = {
      TensorRequest().dump(), TensorRequest().dump(1),
      Json({{"inputs",
             {{{"name", "lines"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {kLines[1]}}}}},
            {"outputs", {{{"name", "probability"}}}}})
          .dump()};
  const std::string alphabet = "{}[]\",:0123456789-+.eE \\tnu";
  std::mt19937_64 rng(11);
  int scanned = 0;
  for (int i = 0; i < 6000; ++i) {
    std::string body = seeds[rng() % seeds.size()];
    const size_t at = rng() % body.size();
    const char c = alphabet[rng() % alphabet.size()];
    switch (rng() % 3) {
      case 0:
        body.erase(at, 1);
        break;
      case 1:
        body[at] = c;
        break;
      default:
        body.insert(at, 1, c);
        break;
    }
    scanned += ScanInferRequest(body).has_value() ? 1 : 0;
    ExpectSameAsDocument(body);
    if (HasFailure()) break;
  }
  // Many edits leave a body the scanner reads (inside a string or a number).
  EXPECT_GT(scanned, 500);
}

TEST(V2ProtocolTest, TheResponseCarriesTheModelTheIdAndOneProbabilityPerExample) {
  const Json r = InferResponse({"ctr", "4000"}, "r1", std::vector<float>{0.25f, 0.5f});
  EXPECT_EQ(r["model_name"], "ctr");
  EXPECT_EQ(r["model_version"], "4000");
  EXPECT_EQ(r["id"], "r1");
  EXPECT_EQ(r["outputs"][0]["name"], "probability");
  EXPECT_EQ(r["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(r["outputs"][0]["shape"], Json({2, 1}));
  EXPECT_EQ(r["outputs"][0]["data"], Json({0.25, 0.5}));
  EXPECT_FALSE(InferResponse({"ctr", "4000"}, "", std::vector<float>{}).contains("id"));
  EXPECT_EQ(ErrorBody("bad")["error"], "bad");
}

}  // namespace
}  // namespace shadowsync::serving
