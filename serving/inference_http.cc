#include "serving/inference_http.h"

#include <chrono>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "civetweb.h"
#include "common/grpc_security.h"
#include "common/grpc_util.h"
#include "common/metrics_http.h"
#include "common/version.h"
#include "glog/logging.h"
#include "serving/civetweb_tls.h"
#include "serving/inference_metrics.h"

namespace shadowsync::serving {
namespace {

using Json = nlohmann::json;

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 401:
      return "Unauthorized";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

}  // namespace

struct InferenceHttpServer::Handler : public CivetHandler {
  Handler(std::string name, const ModelSource& source, Batcher& batcher,
          InferenceHttpOptions options, prometheus::Registry& registry)
      : name(std::move(name)),
        source(source),
        batcher(batcher),
        options(std::move(options)),
        expected_authorization(absl::StrCat("Bearer ", this->options.security.auth_token)),
        metrics(registry) {}

  bool handleGet(CivetServer*, mg_connection* conn) override { return Handle(conn, false); }
  bool handleHead(CivetServer*, mg_connection* conn) override { return Handle(conn, false); }
  bool handlePost(CivetServer*, mg_connection* conn) override { return Handle(conn, true); }

  bool Handle(mg_connection* conn, bool post) {
    const mg_request_info* info = mg_get_request_info(conn);
    const std::string uri = info->local_uri != nullptr ? info->local_uri : "";
    const std::vector<std::string> path = absl::StrSplit(uri, '/', absl::SkipEmpty());
    // path[0] == "v2" (the handler's prefix).
    if (path.size() == 3 && path[1] == "health" && (path[2] == "live" || path[2] == "ready")) {
      return Reply(conn, post, 200, {{path[2], true}});
    }
    if (options.security.has_token()) {
      const char* header = mg_get_header(conn, "Authorization");
      if (header == nullptr || !ConstantTimeEquals(header, expected_authorization)) {
        if (post) metrics.Answered("http", "401");  // as Reply counts: infer requests
        WriteHttpResponse(
            conn, 401, "Unauthorized", "application/json",
            ErrorBody("missing or invalid bearer token in the Authorization header").dump(),
            /*close=*/false, "WWW-Authenticate: Bearer\r\n");
        return true;
      }
    }
    if (path.size() == 1) return Reply(conn, post, 200, ServerMetadata());
    if (path.size() < 3 || path[1] != "models") {
      return Reply(conn, post, 404, ErrorBody(absl::StrCat("no such endpoint: ", uri)));
    }
    // The model this request is answered with, even if a newer one is
    // swapped in meanwhile.
    const std::shared_ptr<const Scorer> scorer = source.Current();
    const ServedModel model = Served(name, *scorer);
    size_t next = 3;
    std::string version;
    if (path.size() >= 5 && path[3] == "versions") {
      version = path[4];
      next = 5;
    }
    if (absl::Status s = CheckModel(model, path[2], version); !s.ok()) {
      return Reply(conn, post, 404, ErrorBody(std::string(s.message())));
    }
    const std::string action = next < path.size() ? path[next] : "";
    if (next + 1 < path.size() || (action != "" && action != "ready" && action != "infer")) {
      return Reply(conn, post, 404, ErrorBody(absl::StrCat("no such endpoint: ", uri)));
    }
    if (action == "infer") {
      if (!post) return Reply(conn, post, 405, ErrorBody("infer takes POST"));
      return Infer(conn, model, scorer);
    }
    if (action == "ready") return Reply(conn, post, 200, {{"name", model.name}, {"ready", true}});
    return Reply(conn, post, 200, ModelMetadata(model, *scorer));
  }

  bool Infer(mg_connection* conn, const ServedModel& model,
             const std::shared_ptr<const Scorer>& scorer) {
    const mg_request_info* info = mg_get_request_info(conn);
    if (info->content_length > options.max_body_bytes) {
      return Reply(conn, true, 400,
                   ErrorBody(absl::StrCat("the request body of ", info->content_length,
                                          " bytes exceeds the limit of ", options.max_body_bytes)),
                   /*close=*/true);
    }
    // Read straight into the string: civetweb's threads have small stacks.
    std::string body;
    constexpr size_t kChunk = 1 << 16;
    size_t size = 0;
    while (true) {
      body.resize(size + kChunk);
      const int n = mg_read(conn, body.data() + size, kChunk);
      if (n <= 0) break;
      size += static_cast<size_t>(n);
      if (static_cast<int64_t>(size) > options.max_body_bytes) {
        return Reply(conn, true, 400,
                     ErrorBody(absl::StrCat("the request body exceeds the limit of ",
                                            options.max_body_bytes, " bytes")),
                     /*close=*/true);
      }
    }
    body.resize(size);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<InferRequest> request =
        ParseInferRequest(body, scorer->config(), options.max_request_examples);
    if (!request.ok())
      return Reply(conn, true, 400, ErrorBody(std::string(request.status().message())));
    const int64_t n_examples = request->examples.size();
    absl::StatusOr<std::vector<float>> probs = batcher.Score(scorer, std::move(request->examples));
    if (!probs.ok()) {
      const int code = probs.status().code() == absl::StatusCode::kInvalidArgument ? 400 : 500;
      return Reply(conn, true, code, ErrorBody(std::string(probs.status().message())));
    }
    const bool ok = Reply(conn, true, 200, InferResponse(model, request->id, *probs));
    metrics.Scored(n_examples,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return ok;
  }

  Json ServerMetadata() const {
    return {{"name", "shadowsync"}, {"version", kReleaseVersion}, {"extensions", Json::array()}};
  }

  bool Reply(mg_connection* conn, bool counted, int code, const Json& body, bool close = false) {
    if (counted) metrics.Answered("http", std::to_string(code));
    const std::string text = body.dump(-1, ' ', false, Json::error_handler_t::replace);
    WriteHttpResponse(conn, code, Reason(code), "application/json", text, close);
    return true;
  }

  const std::string name;
  const ModelSource& source;
  Batcher& batcher;
  const InferenceHttpOptions options;
  const std::string expected_authorization;
  InferenceMetrics metrics;
};

absl::StatusOr<std::unique_ptr<InferenceHttpServer>> InferenceHttpServer::Start(
    std::string name, const ModelSource& source, Batcher& batcher, InferenceHttpOptions options,
    prometheus::Registry& registry) {
  std::unique_ptr<InferenceHttpServer> server(new InferenceHttpServer());
  server->address_ = options.listen;
  CivetCallbacks callbacks = {};
  // civetweb's own errors (a failed start, a refused TLS handshake) say why.
  callbacks.log_message = [](const mg_connection*, const char* message) {
    LOG(WARNING) << "inference HTTP server: " << message;
    return 1;
  };
  if (options.security.tls()) {
    absl::StatusOr<SslCtx> tls = MakeMutualTlsServerContext(options.security);
    if (!tls.ok()) return tls.status();
    if (absl::Status s = PrepareCivetwebOpenSsl(); !s.ok()) return s;
    server->tls_ = *std::move(tls);
    callbacks.external_ssl_ctx = &ProvideCivetwebTlsContext;
  }
  // civetweb's "s" suffix: this port speaks TLS only.
  const std::vector<std::string> civet_options = {
      "listening_ports",       options.listen + (options.security.tls() ? "s" : ""),
      "num_threads",           std::to_string(options.threads),
      "enable_keep_alive",     "yes",
      "keep_alive_timeout_ms", "30000",
      "request_timeout_ms",    "30000",
      "tcp_nodelay",           "1"};
  try {
    StartCivetweb([&] {
      server->server_ =
          std::make_unique<CivetServer>(civet_options, &callbacks, server->tls_.get());
    });
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the inference address ", options.listen, ": ", e.what()));
  }
  const std::vector<int> ports = server->server_->getListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  server->handler_ =
      std::make_unique<Handler>(std::move(name), source, batcher, std::move(options), registry);
  server->server_->addHandler("/v2", server->handler_.get());
  return server;
}

InferenceHttpServer::~InferenceHttpServer() {
  if (server_ == nullptr) return;
  StopCivetweb([this] { server_.reset(); }, DialableAddress(address_, port_));
}

}  // namespace shadowsync::serving
