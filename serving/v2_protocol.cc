#include "serving/v2_protocol.h"

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "data/criteo_reader.h"
#include "serving/infer_json_scanner.h"

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

// The number of values `t`'s shape holds, if each dimension and the total
// are sane.
absl::StatusOr<int64_t> CheckedSize(const InputTensor& t) {
  int64_t values = 1;
  for (const int64_t d : t.shape) {
    if (d < 0 || d > (1 << 30)) {
      return Invalid(t.where + ".shape", absl::StrCat(d, " is not a dimension"));
    }
    values *= d;
    if (values > (int64_t{1} << 30)) return Invalid(t.where + ".shape", "too many values");
  }
  return values;
}

// A JSON input's datatype, shape and data (row-major, flat or nested),
// checked for form; its values read by index.
absl::StatusOr<InputTensor> ReadJsonTensor(const Json& input, std::string name,
                                           const std::string& where) {
  InputTensor t;
  t.name = std::move(name);
  t.where = where;
  if (!input.contains("datatype") || !input["datatype"].is_string()) {
    return Invalid(where + ".datatype", "missing, or not a string");
  }
  t.datatype = input["datatype"].get<std::string>();
  if (!input.contains("shape") || !input["shape"].is_array()) {
    return Invalid(where + ".shape", "missing, or not an array");
  }
  for (const Json& d : input["shape"]) {
    if (!d.is_number_integer()) {
      return Invalid(where + ".shape", absl::StrCat(d.dump(), " is not a dimension"));
    }
    t.shape.push_back(d.get<int64_t>());
  }
  SS_ASSIGN_OR_RETURN(const int64_t values, CheckedSize(t));
  if (!input.contains("data") || !input["data"].is_array()) {
    return Invalid(where + ".data", "missing, or not an array");
  }
  // Row-major, nested arrays allowed (the protocol permits both forms).
  auto data = std::make_shared<std::vector<const Json*>>();
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
      if (static_cast<int64_t>(data->size()) == values) break;
      data->push_back(&item);
    }
  }
  if (static_cast<int64_t>(data->size()) != values || !stack.empty()) {
    return Invalid(where + ".data",
                   absl::StrCat("shape [", absl::StrJoin(t.shape, ","), "] holds ", values,
                                " values; data has ", stack.empty() ? "fewer" : "more"));
  }
  t.integer = [data, where](size_t i, bool int_type) -> absl::StatusOr<int64_t> {
    const Json& v = *(*data)[i];
    if (v.is_number_integer()) return v.get<int64_t>();
    if (!v.is_number_float() || int_type) {
      return Invalid(absl::StrCat(where, ".data[", i, "]"),
                     absl::StrCat(v.dump(), " is not an integer"));
    }
    return IntegerCount(absl::StrCat(where, ".data[", i, "]"), v.get<double>());
  };
  t.bytes = [data, where](size_t i) -> absl::StatusOr<std::string> {
    if (!(*data)[i]->is_string())
      return Invalid(absl::StrCat(where, ".data[", i, "]"), "not a string");
    return (*data)[i]->get<std::string>();
  };
  return t;
}

// The shape the model takes, filled by the values given.
absl::Status CheckShape(const InputTensor& t, std::vector<int64_t> want) {
  if (t.shape != want) {
    return Invalid(t.where + ".shape",
                   absl::StrCat("[", absl::StrJoin(t.shape, ","), "]; the model takes [",
                                absl::StrJoin(want, ","), "]"));
  }
  int64_t size = 1;
  for (const int64_t d : want) size *= d;
  if (t.values >= 0 && t.values != size) {
    return Invalid(t.where + "." + t.values_field,
                   absl::StrCat("shape [", absl::StrJoin(t.shape, ","), "] holds ", size,
                                " values; ", t.values_field, " has ", t.values));
  }
  return absl::OkStatus();
}

absl::Status CheckBatch(int64_t examples, const std::string& where, int64_t max_examples) {
  if (examples > max_examples) {
    return Invalid(where + ".shape",
                   absl::StrCat(examples, " examples; a request may hold at most ", max_examples));
  }
  return absl::OkStatus();
}

absl::Status ReadDense(const InputTensor& t, int64_t batch, ExampleBlock* out) {
  if (!OneOf(t.datatype, {"FP32", "FP64", "INT32", "INT64"})) {
    return Invalid(t.where + ".datatype",
                   absl::StrCat("'", t.datatype, "' is not one of FP32, FP64, INT32, INT64"));
  }
  SS_RETURN_IF_ERROR(CheckShape(t, {batch, out->num_dense}));
  const bool int_type = t.datatype[0] == 'I';
  out->dense.resize(static_cast<size_t>(batch * out->num_dense));
  for (size_t i = 0; i < out->dense.size(); ++i) {
    SS_ASSIGN_OR_RETURN(const int64_t x, t.integer(i, int_type));
    out->dense[i] = CriteoDenseValue(x);
  }
  return absl::OkStatus();
}

absl::Status ReadSparse(const InputTensor& t, int64_t batch, ExampleBlock* out) {
  if (!OneOf(t.datatype, {"INT64", "INT32"})) {
    return Invalid(t.where + ".datatype",
                   absl::StrCat("'", t.datatype, "' is not one of INT64, INT32"));
  }
  SS_RETURN_IF_ERROR(CheckShape(t, {batch, out->num_sparse}));
  out->sparse.resize(static_cast<size_t>(batch * out->num_sparse));
  for (size_t i = 0; i < out->sparse.size(); ++i) {
    SS_ASSIGN_OR_RETURN(const int64_t id, t.integer(i, /*int_type=*/true));
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

absl::Status ReadLines(const InputTensor& t, int64_t batch, ExampleBlock* out) {
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
  for (size_t i = 0; i < static_cast<size_t>(batch); ++i) {
    const std::string where = absl::StrCat(t.where, ".data[", i, "]");
    SS_ASSIGN_OR_RETURN(std::string line, t.bytes(i));
    // Without the label, the line has one field fewer.
    if (std::count(line.begin(), line.end(), '\t') == kCriteoFields - 2) line = "0\t" + line;
    if (absl::Status s = ParseCriteoLine(line, out); !s.ok())
      return Invalid(where, std::string(s.message()));
  }
  return absl::OkStatus();
}

// A scanned request's examples if every check ParseInferRequest makes
// passes; nullopt sends the body to the full parser, which names the error.
std::optional<InferRequest> FromScanned(ScannedRequest scanned, const model::DlrmConfig& config,
                                        int64_t max_examples) {
  if (!scanned.outputs_ok) return std::nullopt;
  const auto request = std::make_shared<const ScannedRequest>(std::move(scanned));
  std::vector<InputTensor> inputs;
  for (size_t i = 0; i < request->inputs.size(); ++i) {
    const ScannedTensor* s = &request->inputs[i];
    InputTensor t;
    t.name = s->name;
    t.where = absl::StrCat("inputs[", i, "]");
    t.datatype = s->datatype;
    t.shape = s->shape;
    if (!CheckInputName(t.name, t.where, inputs).ok()) return std::nullopt;
    if (!t.shape.empty() && !CheckBatch(t.shape[0], t.where, max_examples).ok()) {
      return std::nullopt;
    }
    const absl::StatusOr<int64_t> values = CheckedSize(t);
    if (!values.ok() || *values != static_cast<int64_t>(s->numbers.size() + s->strings.size())) {
      return std::nullopt;
    }
    // The errors below only send the body to the full parser.
    t.integer = [request, s, where = t.where](size_t i, bool int_type) -> absl::StatusOr<int64_t> {
      if (i >= s->numbers.size()) return Invalid(where, "not a number");
      const ScannedTensor::Number& n = s->numbers[i];
      if (n.is_integer) return n.integer;
      if (int_type) return Invalid(where, "not an integer");
      return IntegerCount(where, n.real);
    };
    t.bytes = [request, s, where = t.where](size_t i) -> absl::StatusOr<std::string> {
      if (i >= s->strings.size()) return Invalid(where, "not a string");
      return s->strings[i];
    };
    inputs.push_back(std::move(t));
  }
  absl::StatusOr<ExampleBlock> examples = ExamplesFromInputs(inputs, config, max_examples);
  if (!examples.ok()) return std::nullopt;
  return InferRequest{.id = request->id, .examples = *std::move(examples)};
}

}  // namespace

// The integer count a float value holds, if it holds one.
absl::StatusOr<int64_t> IntegerCount(const std::string& where, double d) {
  if (!std::isfinite(d)) return Invalid(where, "not a finite number");
  if (d != std::floor(d) || std::fabs(d) > 9.0e18) {
    return Invalid(where, absl::StrCat(d,
                                       " is not an integer count (the dense features are the "
                                       "TSV's integer columns)"));
  }
  return static_cast<int64_t>(d);
}

absl::StatusOr<InferRequest> ParseInferRequest(std::string_view body,
                                               const model::DlrmConfig& config,
                                               int64_t max_examples) {
  if (std::optional<ScannedRequest> scanned = ScanInferRequest(body); scanned.has_value()) {
    if (std::optional<InferRequest> request =
            FromScanned(*std::move(scanned), config, max_examples);
        request.has_value()) {
      return *std::move(request);
    }
  }
  return ParseInferRequestDocument(body, config, max_examples);
}

absl::StatusOr<InferRequest> ParseInferRequestDocument(std::string_view body,
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
  std::vector<InputTensor> inputs;
  for (size_t i = 0; i < root["inputs"].size(); ++i) {
    const Json& input = root["inputs"][i];
    const std::string where = absl::StrCat("inputs[", i, "]");
    if (!input.is_object() || !input.contains("name") || !input["name"].is_string()) {
      return Invalid(where + ".name", "missing, or not a string");
    }
    const std::string name = input["name"].get<std::string>();
    SS_RETURN_IF_ERROR(CheckInputName(name, where, inputs));
    // The batch size first, before the data is walked.
    if (input.contains("shape") && input["shape"].is_array() && !input["shape"].empty() &&
        input["shape"][0].is_number_integer()) {
      SS_RETURN_IF_ERROR(CheckBatch(input["shape"][0].get<int64_t>(), where, max_examples));
    }
    SS_ASSIGN_OR_RETURN(InputTensor tensor, ReadJsonTensor(input, name, where));
    inputs.push_back(std::move(tensor));
  }
  SS_ASSIGN_OR_RETURN(request.examples, ExamplesFromInputs(inputs, config, max_examples));
  return request;
}

absl::Status CheckInputName(const std::string& name, const std::string& where,
                            std::span<const InputTensor> seen) {
  if (!OneOf(name, {"dense", "sparse", "lines"})) {
    return Invalid(
        where + ".name",
        absl::StrCat("'", name, "' is not an input of this model (dense, sparse, lines)"));
  }
  for (const InputTensor& t : seen) {
    if (t.name == name) return Invalid(where + ".name", absl::StrCat("'", name, "' again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExampleBlock> ExamplesFromInputs(std::span<const InputTensor> inputs,
                                                const model::DlrmConfig& config,
                                                int64_t max_examples) {
  const InputTensor* by_name[3] = {nullptr, nullptr, nullptr};  // dense, sparse, lines
  for (const InputTensor& t : inputs) {
    SS_RETURN_IF_ERROR(CheckedSize(t).status());
    if (!t.shape.empty()) SS_RETURN_IF_ERROR(CheckBatch(t.shape[0], t.where, max_examples));
    by_name[t.name == "dense" ? 0 : t.name == "sparse" ? 1 : 2] = &t;
  }
  ExampleBlock out;
  out.num_dense = config.num_dense;
  out.num_sparse = config.num_tables;
  if (const InputTensor* lines = by_name[2]; lines != nullptr) {
    if (inputs.size() > 1) {
      return Invalid("inputs", "give either lines, or dense and sparse, not both");
    }
    SS_RETURN_IF_ERROR(ReadLines(*lines, lines->shape.empty() ? 0 : lines->shape[0], &out));
    return out;
  }
  for (int k = 0; k < 2; ++k) {
    if (by_name[k] == nullptr) {
      return Invalid("inputs", absl::StrCat("no tensor '", k == 0 ? "dense" : "sparse",
                                            "' (give dense and sparse, or lines)"));
    }
  }
  const int64_t batch = by_name[0]->shape.empty() ? 0 : by_name[0]->shape[0];
  SS_RETURN_IF_ERROR(ReadDense(*by_name[0], batch, &out));
  SS_RETURN_IF_ERROR(ReadSparse(*by_name[1], batch, &out));
  out.labels.assign(batch, 0.0f);
  return out;
}

ServedModel Served(std::string name, const Scorer& scorer) {
  return {std::move(name), std::to_string(scorer.info().examples_trained)};
}

absl::Status CheckModel(const ServedModel& served, const std::string& name,
                        const std::string& version) {
  if (name != served.name) {
    return absl::NotFoundError(
        absl::StrCat("model '", name, "' is not served here; '", served.name, "' is"));
  }
  if (!version.empty() && version != served.version) {
    return absl::NotFoundError(absl::StrCat("version '", version, "' of model '", served.name,
                                            "' is not served here; version '", served.version,
                                            "' is"));
  }
  return absl::OkStatus();
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
