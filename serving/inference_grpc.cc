#include "serving/inference_grpc.h"

#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "serving/inference_metrics.h"
#include "serving/v2_protocol.h"

namespace shadowsync::serving {
namespace {

using ::inference::ModelInferRequest;
using ::inference::ModelInferResponse;

absl::Status Invalid(const std::string& where, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", std::string(what)));
}

// Little-endian fixed-width values, as raw_input_contents carries them.
template <typename T>
T LoadLe(const std::string& raw, size_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
  return v;
}

// The values of a float datatype as integer counts, of an integer one as is.
template <typename T>
absl::StatusOr<int64_t> AsInteger(T v, const std::string& where, size_t i, bool int_type) {
  if constexpr (std::is_floating_point_v<T>) {
    if (int_type) return Invalid(absl::StrCat(where, ".data[", i, "]"), "not an integer");
    return IntegerCount(absl::StrCat(where, ".data[", i, "]"), static_cast<double>(v));
  } else {
    return static_cast<int64_t>(v);
  }
}

// `in` as an InputTensor whose values are read from its contents or, when
// `raw` is given, from those bytes. Datatypes no input takes get no
// readers; ExamplesFromInputs refuses them by name before reading.
absl::StatusOr<InputTensor> FromProto(const ModelInferRequest::InferInputTensor& in,
                                      const std::string* raw, const std::string& where) {
  InputTensor t;
  t.name = in.name();
  t.where = where;
  t.datatype = in.datatype();
  t.shape.assign(in.shape().begin(), in.shape().end());
  int64_t want = 1;
  for (const int64_t d : t.shape) {
    if (d < 0 || d > (1 << 30))
      return Invalid(where + ".shape", absl::StrCat(d, " is not a dimension"));
    want *= d;
    if (want > (int64_t{1} << 30)) return Invalid(where + ".shape", "too many values");
  }
  int64_t have = -1;  // -1: a datatype no input takes.
  const ::inference::InferTensorContents& c = in.contents();
  auto fixed = [&](auto zero, auto repeated) {
    using T = decltype(zero);
    if (raw != nullptr) {
      if (raw->size() % sizeof(T) != 0) return int64_t{-2};
      t.integer = [raw, where](size_t i, bool int_type) {
        return AsInteger(LoadLe<T>(*raw, i), where, i, int_type);
      };
      return static_cast<int64_t>(raw->size() / sizeof(T));
    }
    t.integer = [repeated, where](size_t i, bool int_type) {
      return AsInteger(static_cast<T>((*repeated)[static_cast<int>(i)]), where, i, int_type);
    };
    return static_cast<int64_t>(repeated->size());
  };
  if (t.datatype == "FP32") {
    have = fixed(float{}, &c.fp32_contents());
  } else if (t.datatype == "FP64") {
    have = fixed(double{}, &c.fp64_contents());
  } else if (t.datatype == "INT32") {
    have = fixed(int32_t{}, &c.int_contents());
  } else if (t.datatype == "INT64") {
    have = fixed(int64_t{}, &c.int64_contents());
  } else if (t.datatype == "BYTES") {
    auto elements = std::make_shared<std::vector<std::string>>();
    if (raw != nullptr) {
      // Each element: a 4-byte little-endian length, then its bytes.
      for (size_t at = 0; at < raw->size();) {
        if (raw->size() - at < 4) return Invalid(where, "raw BYTES contents end inside a length");
        const uint32_t n = LoadLe<uint32_t>(raw->substr(at, 4), 0);
        at += 4;
        if (raw->size() - at < n) return Invalid(where, "raw BYTES contents end inside an element");
        elements->push_back(raw->substr(at, n));
        at += n;
      }
    } else {
      elements->assign(c.bytes_contents().begin(), c.bytes_contents().end());
    }
    have = static_cast<int64_t>(elements->size());
    t.bytes = [elements](size_t i) -> absl::StatusOr<std::string> { return (*elements)[i]; };
  }
  if (have == -2) {
    return Invalid(where, absl::StrCat("raw contents of ", raw->size(), " bytes are not whole ",
                                       t.datatype, " values"));
  }
  if (have >= 0) t.values = have;
  t.values_field = raw != nullptr ? "raw_input_contents" : "contents";
  return t;
}

grpc::Status NotFound(const absl::Status& s) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, std::string(s.message()));
}

}  // namespace

class InferenceGrpcServer::Service final : public ::inference::GRPCInferenceService::Service {
 public:
  Service(std::string name, const ModelSource& source, Batcher& batcher,
          InferenceGrpcOptions options, prometheus::Registry& registry)
      : name_(std::move(name)),
        source_(source),
        batcher_(batcher),
        options_(std::move(options)),
        metrics_(registry) {}

  grpc::Status ServerLive(grpc::ServerContext*, const ::inference::ServerLiveRequest*,
                          ::inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerReady(grpc::ServerContext*, const ::inference::ServerReadyRequest*,
                           ::inference::ServerReadyResponse* response) override {
    response->set_ready(true);
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext*, const ::inference::ModelReadyRequest* request,
                          ::inference::ModelReadyResponse* response) override {
    const ServedModel served = Served(name_, *source_.Current());
    if (absl::Status s = CheckModel(served, request->name(), request->version()); !s.ok()) {
      return NotFound(s);
    }
    response->set_ready(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerMetadata(grpc::ServerContext*, const ::inference::ServerMetadataRequest*,
                              ::inference::ServerMetadataResponse* response) override {
    response->set_name("shadowsync");
    response->set_version(std::string(kReleaseVersion));
    return grpc::Status::OK;
  }
  grpc::Status ModelMetadata(grpc::ServerContext*, const ::inference::ModelMetadataRequest* request,
                             ::inference::ModelMetadataResponse* response) override {
    const std::shared_ptr<const Scorer> scorer = source_.Current();
    const ServedModel served = Served(name_, *scorer);
    if (absl::Status s = CheckModel(served, request->name(), request->version()); !s.ok()) {
      return NotFound(s);
    }
    // The HTTP endpoint's metadata, the one description of the tensors.
    const nlohmann::json metadata = serving::ModelMetadata(served, *scorer);
    response->set_name(served.name);
    response->add_versions(served.version);
    response->set_platform(metadata["platform"].get<std::string>());
    for (const char* side : {"inputs", "outputs"}) {
      for (const nlohmann::json& tensor : metadata[side]) {
        auto* out =
            std::string_view(side) == "inputs" ? response->add_inputs() : response->add_outputs();
        out->set_name(tensor["name"].get<std::string>());
        out->set_datatype(tensor["datatype"].get<std::string>());
        for (const nlohmann::json& d : tensor["shape"]) out->add_shape(d.get<int64_t>());
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status ModelInfer(grpc::ServerContext*, const ModelInferRequest* request,
                          ModelInferResponse* response) override {
    const grpc::Status status = Infer(*request, response);
    // gRPC's codes are absl's, number for number.
    metrics_.Answered("grpc",
                      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
    return status;
  }

 private:
  grpc::Status Infer(const ModelInferRequest& request, ModelInferResponse* response) {
    // The model this call is answered with, even if a newer one is swapped
    // in meanwhile.
    const std::shared_ptr<const Scorer> scorer = source_.Current();
    const ServedModel served = Served(name_, *scorer);
    if (absl::Status s = CheckModel(served, request.model_name(), request.model_version());
        !s.ok()) {
      return NotFound(s);
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ExampleBlock> examples = Examples(request, scorer->config());
    if (!examples.ok()) return ToGrpcStatus(examples.status());
    const int64_t n = examples->size();
    absl::StatusOr<std::vector<float>> probs = batcher_.Score(scorer, *std::move(examples));
    if (!probs.ok()) return ToGrpcStatus(probs.status());
    response->set_model_name(served.name);
    response->set_model_version(served.version);
    response->set_id(request.id());
    auto* out = response->add_outputs();
    out->set_name("probability");
    out->set_datatype("FP32");
    out->add_shape(n);
    out->add_shape(1);
    // Raw in, raw out: clients that send raw tensors read raw ones.
    if (request.raw_input_contents_size() > 0) {
      response->add_raw_output_contents(reinterpret_cast<const char*>(probs->data()),
                                        probs->size() * sizeof(float));
    } else {
      out->mutable_contents()->mutable_fp32_contents()->Add(probs->begin(), probs->end());
    }
    metrics_.Scored(
        n, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return grpc::Status::OK;
  }

  absl::StatusOr<ExampleBlock> Examples(const ModelInferRequest& request,
                                        const model::DlrmConfig& config) const {
    for (int i = 0; i < request.outputs_size(); ++i) {
      if (request.outputs(i).name() != "probability") {
        return Invalid(absl::StrCat("outputs[", i, "].name"),
                       absl::StrCat("'", request.outputs(i).name(),
                                    "' is not an output of this model (probability)"));
      }
    }
    const bool raw = request.raw_input_contents_size() > 0;
    if (raw && request.raw_input_contents_size() != request.inputs_size()) {
      return Invalid("raw_input_contents",
                     absl::StrCat(request.raw_input_contents_size(), " entries for ",
                                  request.inputs_size(), " inputs"));
    }
    std::vector<InputTensor> inputs;
    for (int i = 0; i < request.inputs_size(); ++i) {
      const auto& in = request.inputs(i);
      const std::string where = absl::StrCat("inputs[", i, "]");
      SS_RETURN_IF_ERROR(CheckInputName(in.name(), where, inputs));
      if (raw && in.has_contents()) {
        return Invalid(where + ".contents", "given with raw_input_contents");
      }
      SS_ASSIGN_OR_RETURN(InputTensor t,
                          FromProto(in, raw ? &request.raw_input_contents(i) : nullptr, where));
      inputs.push_back(std::move(t));
    }
    return ExamplesFromInputs(inputs, config, options_.max_request_examples);
  }

  const std::string name_;
  const ModelSource& source_;
  Batcher& batcher_;
  const InferenceGrpcOptions options_;
  InferenceMetrics metrics_;
};

absl::StatusOr<std::unique_ptr<InferenceGrpcServer>> InferenceGrpcServer::Start(
    std::string name, const ModelSource& source, Batcher& batcher, InferenceGrpcOptions options,
    prometheus::Registry& registry) {
  SS_RETURN_IF_ERROR(ValidateServerLimits(options.limits));
  std::unique_ptr<InferenceGrpcServer> server(new InferenceGrpcServer());
  const std::string listen = options.listen;
  const GrpcServerLimits limits = options.limits;
  const GrpcSecurity security = options.security;
  server->service_ =
      std::make_unique<Service>(std::move(name), source, batcher, std::move(options), registry);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, ServerCredentials(security), &server->port_);
  ApplyServerLimits(limits, builder);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind the gRPC inference address ", listen));
  }
  return server;
}

InferenceGrpcServer::~InferenceGrpcServer() {
  if (server_ != nullptr) server_->Shutdown(DeadlineFromNow(absl::Seconds(5)));
}

}  // namespace shadowsync::serving
