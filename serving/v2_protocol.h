// The KServe / Open Inference Protocol v2 over HTTP/JSON, as this server
// speaks it: a request's input tensors into examples, the scores into a
// response, and the model's metadata (docs/serving.md lists the tensors).
// Inputs: either `dense` (the 13 integer features as in the TSV, before the
// log transform; FP32, FP64, INT32 or INT64, shape [B, 13]) with `sparse`
// (the categorical ids as the TSV's hex digits read, -1 for a missing one;
// INT64 or INT32, shape [B, 26]), or `lines` (BYTES, shape [B]: Criteo TSV
// lines, with or without the label). Output: `probability`, FP32 [B, 1].
// Pure functions; thread-safe.
#ifndef SHADOWSYNC_SERVING_V2_PROTOCOL_H_
#define SHADOWSYNC_SERVING_V2_PROTOCOL_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/example.h"
#include "nlohmann/json.hpp"
#include "serving/scorer.h"

namespace shadowsync::serving {

// What the server calls the model, and its version: the examples it was
// trained on, which grows from one export to the next.
struct ServedModel {
  std::string name;
  std::string version;
};
// `scorer`'s model served as `name`.
ServedModel Served(std::string name, const Scorer& scorer);
// NotFound naming the model or version served unless a request for model
// `name`, version `version` (empty: any) is for `served`.
absl::Status CheckModel(const ServedModel& served, const std::string& name,
                        const std::string& version);

// One input tensor of a request, in either protocol: its datatype and shape
// as given, and its values (row-major) read by index, as an integer (a float
// value only if integral and `int_type` is false) or as bytes. The readers
// return InvalidArgument naming the value ("inputs[0].data[3]: ...").
struct InputTensor {
  std::string name;
  std::string where;  // "inputs[i]": how errors name it.
  std::string datatype;
  std::vector<int64_t> shape;
  // How many values the request holds (-1: not known), and where ("data",
  // "contents"): checked against the shape after the datatype and shape.
  int64_t values = -1;
  std::string values_field = "data";
  std::function<absl::StatusOr<int64_t>(size_t i, bool int_type)> integer;
  std::function<absl::StatusOr<std::string>(size_t i)> bytes;
};

// The integer count a float value holds; InvalidArgument naming `where` if
// it is not finite or not integral.
absl::StatusOr<int64_t> IntegerCount(const std::string& where, double value);

// InvalidArgument unless `name` is an input of the model not among `seen`.
absl::Status CheckInputName(const std::string& name, const std::string& where,
                            std::span<const InputTensor> seen);
// The examples of a request's inputs (names checked by CheckInputName):
// InvalidArgument naming the tensor or value for a wrong datatype or shape,
// values that do not fill the shape, a value out of range, more than
// `max_examples` examples, or a missing or extra tensor.
absl::StatusOr<ExampleBlock> ExamplesFromInputs(std::span<const InputTensor> inputs,
                                                const model::DlrmConfig& config,
                                                int64_t max_examples);

struct InferRequest {
  std::string id;  // Echoed in the response; may be empty.
  ExampleBlock examples;
};

// InvalidArgument naming the offending part ("inputs[1].shape: ...",
// "malformed JSON at byte 17: ...") for anything this model cannot score:
// malformed or too deeply nested JSON, an unknown or missing tensor, a wrong
// datatype or shape, a value that is not a finite integer in range, an
// output other than `probability`, or more than `max_examples` examples.
// The body is read with ScanInferRequest when it can be, else (and for
// every error) as a document (ParseInferRequestDocument), with the same
// result either way.
absl::StatusOr<InferRequest> ParseInferRequest(std::string_view body,
                                               const model::DlrmConfig& config,
                                               int64_t max_examples);
// The same, always through an nlohmann::json document: the reference the
// scanner is tested against.
absl::StatusOr<InferRequest> ParseInferRequestDocument(std::string_view body,
                                                       const model::DlrmConfig& config,
                                                       int64_t max_examples);

nlohmann::json InferResponse(const ServedModel& model, const std::string& id,
                             std::span<const float> probabilities);

// GET /v2/models/{name}: the tensors above, and in `parameters` the export
// (directory, examples trained, rows, its manifest's eval).
nlohmann::json ModelMetadata(const ServedModel& model, const Scorer& scorer);

// The body of every error response: {"error": message}.
nlohmann::json ErrorBody(std::string_view message);

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_V2_PROTOCOL_H_
