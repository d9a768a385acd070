#include "serving/v2_protocol.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "data/criteo_reader.h"

namespace shadowsync::serving {
namespace {

using Json = nlohmann::json;

// Deeper JSON than any valid request needs is refused before it is built.
constexpr int kMaxDepth = 16;

absl::Status Invalid(const std::string& where, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", std::string(what)));
}

bool OneOf(const std::string& value, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed) {
    if (value == a) return true;
  }
  return false;
}

// One input tensor, checked for form: its datatype, shape and data, the
// data flattened in row-major order.
struct Tensor {
  std::string where;  // "inputs[i]"
  std::string datatype;
  std::vector<int64_t> shape;
  std::vector<const Json*> data;
};

absl::StatusOr<Tensor> ReadTensor(const Json& input, const std::string& where) {
  Tensor t;
  t.where = where;
  if (!input.contains("datatype") || !input["datatype"].is_string()) {
    return Invalid(where + ".datatype", "missing, or not a string");
  }
  t.datatype = input["datatype"].get<std::string>();
  if (!input.contains("shape") || !input["shape"].is_array()) {
    return Invalid(where + ".shape", "missing, or not an array");
  }
  int64_t values = 1;
  for (const Json& d : input["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (1 << 30)) {
      return Invalid(where + ".shape", absl::StrCat(d.dump(), " is not a dimension"));
    }
    t.shape.push_back(d.get<int64_t>());
    values *= t.shape.back();
    if (values > (int64_t{1} << 30)) return Invalid(where + ".shape", "too many values");
  }
  if (!input.contains("data") || !input["data"].is_array()) {
    return Invalid(where + ".data", "missing, or not an array");
  }
  // Row-major, nested arrays allowed (the protocol permits both forms).
  std::vector<std::pair<const Json*, size_t>> stack = {{&input["data"], 0}};
  while (!stack.empty()) {
    auto& [array, next] = stack.back();
    if (next == array->size()) {
      stack.pop_back();
      continue;
    }
    const Json& item = (*array)[next++];
    if (item.is_array()) {
      stack.emplace_back(&item, 0);
    } else {
      if (static_cast<int64_t>(t.data.size()) == values) break;
      t.data.push_back(&item);
    }
  }
  if (static_cast<int64_t>(t.data.size()) != values || !stack.empty()) {
    return Invalid(where + ".data",
                   absl::StrCat("shape [", absl::StrJoin(t.shape, ","), "] holds ", values,
                                " values; data has ", stack.empty() ? "fewer" : "more"));
  }
  return t;
}

absl::Status CheckShape(const Tensor& t, std::vector<int64_t> want) {
  if (t.shape != want) {
    return Invalid(t.where + ".shape",
                   absl::StrCat("[", absl::StrJoin(t.shape, ","), "]; the model takes [",
                                absl::StrJoin(want, ","), "]"));
  }
  return absl::OkStatus();
}

// An integer JSON number (a float one only if integral), for value i.
absl::StatusOr<int64_t> IntegerAt(const Tensor& t, size_t i, bool int_type) {
  const Json& v = *t.data[i];
  const std::string where = absl::StrCat(t.where, ".data[", i, "]");
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_number_float() || int_type) {
    return Invalid(where, absl::StrCat(v.dump(), " is not an integer"));
  }
  const double d = v.get<double>();
  if (!std::isfinite(d)) return Invalid(where, "not a finite number");
  if (d != std::floor(d) || std::fabs(d) > 9.0e18) {
    return Invalid(where, absl::StrCat(v.dump(),
                                       " is not an integer count (the dense features are the "
                                       "TSV's integer columns)"));
  }
  return static_cast<int64_t>(d);
}

absl::Status ReadDense(const Tensor& t, int64_t batch, ExampleBlock* out) {
  if (!OneOf(t.datatype, {"FP32", "FP64", "INT32", "INT64"})) {
    return Invalid(t.where + ".datatype",
                   absl::StrCat("'", t.datatype, "' is not one of FP32, FP64, INT32, INT64"));
  }
  SS_RETURN_IF_ERROR(CheckShape(t, {batch, out->num_dense}));
  const bool int_type = t.datatype[0] == 'I';
  out->dense.resize(t.data.size());
  for (size_t i = 0; i < t.data.size(); ++i) {
    SS_ASSIGN_OR_RETURN(const int64_t x, IntegerAt(t, i, int_type));
    out->dense[i] = CriteoDenseValue(x);
  }
  return absl::OkStatus();
}

absl::Status ReadSparse(const Tensor& t, int64_t batch, ExampleBlock* out) {
  if (!OneOf(t.datatype, {"INT64", "INT32"})) {
    return Invalid(t.where + ".datatype",
                   absl::StrCat("'", t.datatype, "' is not one of INT64, INT32"));
  }
  SS_RETURN_IF_ERROR(CheckShape(t, {batch, out->num_sparse}));
  out->sparse.resize(t.data.size());
  for (size_t i = 0; i < t.data.size(); ++i) {
    SS_ASSIGN_OR_RETURN(const int64_t id, IntegerAt(t, i, /*int_type=*/true));
    if (id == -1) {
      out->sparse[i] = kMissingId;
    } else if (id < 0 || id >= (int64_t{1} << 32)) {
      return Invalid(absl::StrCat(t.where, ".data[", i, "]"),
                     absl::StrCat(id,
                                  " is not a categorical id: one in [0, 2^32), or -1 for "
                                  "a missing one"));
    } else {
      out->sparse[i] = static_cast<uint64_t>(id);
    }
  }
  return absl::OkStatus();
}

absl::Status ReadLines(const Tensor& t, int64_t batch, ExampleBlock* out) {
  if (out->num_dense != kCriteoDense || out->num_sparse != kCriteoSparse) {
    return Invalid(t.where,
                   absl::StrCat("'lines' needs a model of the Criteo layout (", kCriteoDense,
                                " dense, ", kCriteoSparse, " categorical); this one reads ",
                                out->num_dense, " and ", out->num_sparse));
  }
  if (t.datatype != "BYTES") {
    return Invalid(t.where + ".datatype", absl::StrCat("'", t.datatype, "' is not BYTES"));
  }
  SS_RETURN_IF_ERROR(CheckShape(t, {batch}));
  out->clear();
  for (size_t i = 0; i < t.data.size(); ++i) {
    const std::string where = absl::StrCat(t.where, ".data[", i, "]");
    if (!t.data[i]->is_string()) return Invalid(where, "not a string");
    std::string line = t.data[i]->get<std::string>();
    // Without the label, the line has one field fewer.
    if (std::count(line.begin(), line.end(), '\t') == kCriteoFields - 2) line = "0\t" + line;
    if (absl::Status s = ParseCriteoLine(line, out); !s.ok())
      return Invalid(where, std::string(s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<InferRequest> ParseInferRequest(std::string_view body,
                                               const model::DlrmConfig& config,
                                               int64_t max_examples) {
  bool too_deep = false;
  Json root;
  try {
    root = Json::parse(body, [&](int depth, Json::parse_event_t, Json&) {
      if (depth <= kMaxDepth) return true;
      too_deep = true;
      return false;
    });
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for 1e999
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON: ", e.what()));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON nested deeper than ", kMaxDepth, " levels"));
  }
  if (!root.is_object()) return absl::InvalidArgumentError("the request is not a JSON object");
  InferRequest request;
  if (root.contains("id")) {
    if (!root["id"].is_string()) return Invalid("id", "not a string");
    request.id = root["id"].get<std::string>();
  }
  if (root.contains("outputs")) {
    if (!root["outputs"].is_array()) return Invalid("outputs", "not an array");
    for (size_t i = 0; i < root["outputs"].size(); ++i) {
      const Json& o = root["outputs"][i];
      if (!o.is_object() || !o.contains("name") || o["name"] != "probability") {
        return Invalid(absl::StrCat("outputs[", i, "].name"),
                       absl::StrCat(o.is_object() ? o.value("name", Json()).dump() : o.dump(),
                                    " is not an output of this model (probability)"));
      }
    }
  }
  if (!root.contains("inputs") || !root["inputs"].is_array()) {
    return Invalid("inputs", "missing, or not an array");
  }
  absl::flat_hash_map<std::string, Tensor> inputs;
  for (size_t i = 0; i < root["inputs"].size(); ++i) {
    const Json& input = root["inputs"][i];
    const std::string where = absl::StrCat("inputs[", i, "]");
    if (!input.is_object() || !input.contains("name") || !input["name"].is_string()) {
      return Invalid(where + ".name", "missing, or not a string");
    }
    const std::string name = input["name"].get<std::string>();
    if (!OneOf(name, {"dense", "sparse", "lines"})) {
      return Invalid(where + ".name",
                     absl::StrCat("'", name,
                                  "' is not an input of this model (dense, sparse, "
                                  "lines)"));
    }
    if (inputs.contains(name)) return Invalid(where + ".name", absl::StrCat("'", name, "' again"));
    // The batch size first, before the data is walked.
    if (input.contains("shape") && input["shape"].is_array() && !input["shape"].empty() &&
        input["shape"][0].is_number_integer() && input["shape"][0].get<int64_t>() > max_examples) {
      return Invalid(where + ".shape", absl::StrCat(input["shape"][0].dump(),
                                                    " examples; a request may hold at "
                                                    "most ",
                                                    max_examples));
    }
    SS_ASSIGN_OR_RETURN(Tensor tensor, ReadTensor(input, where));
    inputs.emplace(name, std::move(tensor));
  }
  ExampleBlock& out = request.examples;
  out.num_dense = config.num_dense;
  out.num_sparse = config.num_tables;
  if (auto lines = inputs.find("lines"); lines != inputs.end()) {
    if (inputs.size() > 1) {
      return Invalid("inputs", "give either lines, or dense and sparse, not both");
    }
    const Tensor& t = lines->second;
    SS_RETURN_IF_ERROR(ReadLines(t, t.shape.empty() ? 0 : t.shape[0], &out));
    return request;
  }
  for (const char* name : {"dense", "sparse"}) {
    if (!inputs.contains(name)) {
      return Invalid("inputs",
                     absl::StrCat("no tensor '", name, "' (give dense and sparse, or lines)"));
    }
  }
  const Tensor& dense = inputs.at("dense");
  const int64_t batch = dense.shape.empty() ? 0 : dense.shape[0];
  SS_RETURN_IF_ERROR(ReadDense(dense, batch, &out));
  SS_RETURN_IF_ERROR(ReadSparse(inputs.at("sparse"), batch, &out));
  out.labels.assign(batch, 0.0f);
  return request;
}

ServedModel Served(std::string name, const Scorer& scorer) {
  return {std::move(name), std::to_string(scorer.info().examples_trained)};
}

nlohmann::json InferResponse(const ServedModel& model, const std::string& id,
                             std::span<const float> probabilities) {
  Json response = {{"model_name", model.name},
                   {"model_version", model.version},
                   {"outputs",
                    {{{"name", "probability"},
                      {"datatype", "FP32"},
                      {"shape", {probabilities.size(), 1}},
                      {"data", std::vector<float>(probabilities.begin(), probabilities.end())}}}}};
  if (!id.empty()) response["id"] = id;
  return response;
}

nlohmann::json ModelMetadata(const ServedModel& model, const Scorer& scorer) {
  const model::DlrmConfig& config = scorer.config();
  const model::ExportInfo& info = scorer.info();
  return {{"name", model.name},
          {"versions", {model.version}},
          {"platform", "shadowsync"},
          {"inputs",
           {{{"name", "dense"}, {"datatype", "FP32"}, {"shape", {-1, config.num_dense}}},
            {{"name", "sparse"}, {"datatype", "INT64"}, {"shape", {-1, config.num_tables}}},
            {{"name", "lines"}, {"datatype", "BYTES"}, {"shape", {-1}}}}},
          {"outputs", {{{"name", "probability"}, {"datatype", "FP32"}, {"shape", {-1, 1}}}}},
          {"parameters",
           {{"export", scorer.dir()},
            {"examples_trained", info.examples_trained},
            {"rows", scorer.num_rows()},
            {"eval", info.eval}}}};
}

nlohmann::json ErrorBody(std::string_view message) { return {{"error", std::string(message)}}; }

}  // namespace shadowsync::serving
