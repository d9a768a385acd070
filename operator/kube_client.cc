#include "operator/kube_client.h"

#include <cpprest/http_client.h>

#include <chrono>
#include <exception>
#include <fstream>
#include <mutex>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shadowsync::kube {
namespace {

// Debian's absl has its own string_view type; std::string_view does not
// convert implicitly.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

// ---------------------------------------------------------------------------
// Paths

std::string ResourcePath::Collection() const {
  std::string path =
      group.empty() ? absl::StrCat("/api/", version) : absl::StrCat("/apis/", group, "/", version);
  if (!ns.empty()) absl::StrAppend(&path, "/namespaces/", ns);
  absl::StrAppend(&path, "/", plural);
  return path;
}

std::string ResourcePath::ToString() const {
  std::string path = Collection();
  if (!name.empty()) {
    absl::StrAppend(&path, "/", name);
    if (!subresource.empty()) absl::StrAppend(&path, "/", subresource);
  }
  return path;
}

std::string ObjectPath(std::string_view collection_path, const Json& object) {
  return absl::StrCat(Av(collection_path), "/", object.value("/metadata/name"_json_pointer, ""));
}

std::string ObjectKey(const Json& object) {
  const std::string ns = object.value("/metadata/namespace"_json_pointer, "");
  const std::string name = object.value("/metadata/name"_json_pointer, "");
  return ns.empty() ? name : absl::StrCat(ns, "/", name);
}

std::pair<std::string, std::string> SplitObjectKey(std::string_view key) {
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return {"", std::string(key)};
  return {std::string(key.substr(0, slash)), std::string(key.substr(slash + 1))};
}

std::string ResourceVersionOf(const Json& object) {
  return object.value("/metadata/resourceVersion"_json_pointer, "");
}

std::string QueryEscape(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out.push_back(c);
    } else {
      const auto u = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xF]);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Errors

absl::Status StatusFromHttp(std::string_view method, std::string_view path, int code,
                            std::string_view body) {
  std::string reason;
  std::string server_message;
  const Json status = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status.is_object()) {
    reason = status.value("reason", "");
    server_message = status.value("message", "");
  }
  if (server_message.empty()) {
    // Not a metav1.Status: show the start of whatever came back.
    server_message = std::string(absl::StripAsciiWhitespace(Av(body.substr(0, 200))));
  }
  const std::string message =
      absl::StrCat(Av(method), " ", Av(path), ": HTTP ", code, reason.empty() ? "" : " ", reason,
                   server_message.empty() ? "" : ": ", server_message);
  if (code == 404) return absl::NotFoundError(message);
  if (code == 409) {
    return reason == "AlreadyExists" ? absl::AlreadyExistsError(message)
                                     : absl::AbortedError(message);
  }
  if (code == 410) return absl::OutOfRangeError(message);
  if (code == 400 || code == 422) return absl::InvalidArgumentError(message);
  if (code == 401) return absl::UnauthenticatedError(message);
  if (code == 403) return absl::PermissionDeniedError(message);
  if (code == 429) return absl::ResourceExhaustedError(message);
  if (code >= 500 && code < 600) return absl::UnavailableError(message);
  return absl::UnknownError(message);
}

absl::StatusOr<WatchEvent> ParseWatchLine(std::string_view line) {
  Json frame = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (frame.is_discarded()) return absl::InvalidArgumentError("watch line is not JSON");
  if (!frame.is_object()) return absl::InvalidArgumentError("watch line is not a JSON object");
  auto type = frame.find("type");
  if (type == frame.end() || !type->is_string()) {
    return absl::InvalidArgumentError("watch line: \"type\" is missing or not a string");
  }
  auto object = frame.find("object");
  if (object == frame.end() || !object->is_object()) {
    return absl::InvalidArgumentError("watch line: \"object\" is missing or not an object");
  }
  WatchEvent event;
  event.type = type->get<std::string>();
  event.object = std::move(*object);
  return event;
}

absl::Status RetryOnConflict(const std::function<absl::Status()>& fn, int attempts) {
  absl::BitGen gen;
  absl::Status status;
  for (int attempt = 0; attempt < std::max(attempts, 1); ++attempt) {
    if (attempt > 0) absl::SleepFor(absl::Milliseconds(absl::Uniform(gen, 10.0, 11.0)));
    status = fn();
    if (!absl::IsAborted(status)) return status;
  }
  return status;
}

// ---------------------------------------------------------------------------
// Cancellation

void Cancellation::Cancel() {
  {
    MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
  }
  // Run callbacks outside the lock, one at a time; each stays findable by
  // Unregister (through running_) until it has returned.
  while (true) {
    std::function<void()> fn;
    {
      MutexLock lock(&mu_);
      if (callbacks_.empty()) return;
      running_ = callbacks_.front().first;
      fn = std::move(callbacks_.front().second);
      callbacks_.erase(callbacks_.begin());
    }
    fn();
    MutexLock lock(&mu_);
    running_ = -1;
  }
}

bool Cancellation::cancelled() const {
  MutexLock lock(&mu_);
  return cancelled_;
}

bool Cancellation::SleepFor(absl::Duration d) {
  MutexLock lock(&mu_);
  mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_; }, d);
  return !cancelled_;
}

int Cancellation::Register(std::function<void()> fn) {
  {
    MutexLock lock(&mu_);
    if (!cancelled_) {
      const int id = next_id_++;
      callbacks_.emplace_back(id, std::move(fn));
      return id;
    }
  }
  fn();
  return -1;
}

void Cancellation::Unregister(int id) {
  if (id < 0) return;
  MutexLock lock(&mu_);
  mu_.Await([this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ != id; });
  for (auto it = callbacks_.begin(); it != callbacks_.end(); ++it) {
    if (it->first == id) {
      callbacks_.erase(it);
      return;
    }
  }
}

// ---------------------------------------------------------------------------
// LineSplitter

std::vector<std::string> LineSplitter::Feed(std::string_view bytes) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (true) {
    const size_t newline = bytes.find('\n', start);
    if (newline == std::string_view::npos) break;
    tail_.append(bytes.substr(start, newline - start));
    if (!tail_.empty() && tail_.back() == '\r') tail_.pop_back();
    if (!tail_.empty()) lines.push_back(std::move(tail_));
    tail_.clear();
    start = newline + 1;
  }
  tail_.append(bytes.substr(start));
  return lines;
}

// ---------------------------------------------------------------------------
// KubeClient

namespace {

namespace http = web::http;
using web::http::client::http_client;
using web::http::client::http_client_config;

const char* PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kJsonPatch:
      return "application/json-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
  }
  return "application/merge-patch+json";
}

const char* PropagationName(PropagationPolicy p) {
  switch (p) {
    case PropagationPolicy::kBackground:
      return "Background";
    case PropagationPolicy::kForeground:
      return "Foreground";
    case PropagationPolicy::kOrphan:
      return "Orphan";
  }
  return "Background";
}

// Appends "&key=escaped(value)" (or "?..." for the first) if value is set.
void AddQuery(std::string* url, std::string_view key, std::string_view value) {
  if (value.empty()) return;
  absl::StrAppend(url, absl::StrContains(*url, '?') ? "&" : "?", Av(key), "=", QueryEscape(value));
}

bool Is2xx(int code) { return code >= 200 && code < 300; }

}  // namespace

class KubeClient::Impl {
 public:
  Impl(KubeConfig config, KubeClientOptions options)
      : config_(std::move(config)), options_(std::move(options)) {}

  absl::Status Init() {
    try {
      base_uri_ = web::uri(config_.server);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("Kubernetes server URL \"", config_.server, "\": ", e.what()));
    }
    if ((base_uri_.scheme() != "http" && base_uri_.scheme() != "https") ||
        base_uri_.host().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("Kubernetes server URL \"", config_.server,
                                                     "\" is not http(s)://host[:port]"));
    }
    for (const std::string* file :
         {&config_.ca_file, &config_.client_cert_file, &config_.client_key_file}) {
      if (!file->empty() && !std::ifstream(*file).good()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot read ", *file, " (from ", config_.source, ")"));
      }
    }
    MutexLock lock(&mu_);
    client_ = MakeClient(options_.request_timeout);
    return absl::OkStatus();
  }

  const KubeConfig& config() const { return config_; }

  // One request/response with a JSON (or empty) answer.
  absl::StatusOr<Json> Do(const std::string& method, const std::string& path_and_query,
                          const Json* body, const std::string& content_type) {
    http::http_request request = NewRequest(method, path_and_query);
    if (body != nullptr) request.set_body(body->dump(), content_type);
    std::shared_ptr<http_client> client = Client();
    int code = 0;
    std::string text;
    try {
      http::http_response response = client->request(request).get();
      code = response.status_code();
      text = response.extract_utf8string(/*ignore_content_type=*/true).get();
    } catch (const std::exception& e) {
      // After "Failed to read HTTP status line" and similar, a cpprestsdk
      // client can stay unusable (cpprestsdk#660): start over with a new one.
      ResetClient(client);
      return absl::UnavailableError(absl::StrCat(method, " ", path_and_query, ": ", e.what()));
    }
    if (!Is2xx(code)) return StatusFromHttp(method, path_and_query, code, text);
    if (absl::StripAsciiWhitespace(text).empty()) return Json();
    Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return absl::InternalError(absl::StrCat(method, " ", path_and_query, ": HTTP ", code,
                                              ": the answer is not JSON: ", text.substr(0, 200)));
    }
    return parsed;
  }

  absl::Status Watch(const std::string& collection_path, const WatchOptions& options,
                     const std::function<bool(const WatchEvent&)>& on_event, Cancellation* cancel) {
    std::string url = absl::StrCat(collection_path, "?watch=1");
    AddQuery(&url, "resourceVersion", options.resource_version);
    AddQuery(&url, "labelSelector", options.label_selector);
    AddQuery(&url, "fieldSelector", options.field_selector);
    if (options.timeout_seconds > 0)
      AddQuery(&url, "timeoutSeconds", absl::StrCat(options.timeout_seconds));
    if (options.allow_bookmarks) AddQuery(&url, "allowWatchBookmarks", "true");
    const std::string method = "WATCH";

    // A client of its own: cpprestsdk's timeout is an idle timer per request
    // leg, so a quiet watch on the short-timeout client would be cut.
    const absl::Duration idle_timeout =
        absl::Seconds(options.timeout_seconds > 0 ? options.timeout_seconds : 1800) +
        options_.watch_timeout_margin;
    auto client = MakeClient(idle_timeout);

    // Shared with the cancel callback, which may outlive this frame's locals
    // until Unregister returns.
    struct StreamState {
      std::mutex mu;
      pplx::cancellation_token_source cts;
      std::optional<concurrency::streams::streambuf<uint8_t>> body;
      bool cancelled = false;
    };
    auto state = std::make_shared<StreamState>();
    const int registration = cancel == nullptr ? -1 : cancel->Register([state] {
      std::lock_guard<std::mutex> lock(state->mu);
      state->cancelled = true;
      state->cts.cancel();  // Closes the connection of a request in flight.
      // Closing the write side wakes a reader blocked in bumpc() with EOF.
      if (state->body) state->body->close(std::ios_base::out).wait();
    });
    struct Unregisterer {
      Cancellation* cancel;
      int id;
      ~Unregisterer() {
        if (cancel != nullptr) cancel->Unregister(id);
      }
    } unregister{cancel, registration};
    auto was_cancelled = [&state] {
      std::lock_guard<std::mutex> lock(state->mu);
      return state->cancelled;
    };
    auto cancelled_status = [&] {
      return absl::CancelledError(absl::StrCat(method, " ", collection_path, ": cancelled"));
    };
    if (was_cancelled()) return cancelled_status();

    http::http_request request = NewRequest("GET", url);
    http::http_response response;
    try {
      response = client->request(request, state->cts.get_token()).get();
    } catch (const std::exception& e) {
      if (was_cancelled()) return cancelled_status();
      return absl::UnavailableError(absl::StrCat(method, " ", url, ": ", e.what()));
    }
    if (!Is2xx(response.status_code())) {
      std::string text;
      try {
        text = response.extract_utf8string(true).get();
      } catch (const std::exception&) {
      }
      return StatusFromHttp(method, url, response.status_code(), text);
    }

    concurrency::streams::streambuf<uint8_t> body = response.body().streambuf();
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->cancelled) return cancelled_status();
      state->body = body;
    }
    LineSplitter splitter;
    std::string chunk;
    while (true) {
      try {
        // Wait for one byte, then take whatever else has arrived without
        // blocking: events are delivered as soon as their line is complete.
        const auto first = body.bumpc().get();
        if (first == concurrency::streams::streambuf<uint8_t>::traits::eof()) break;
        chunk.assign(1, static_cast<char>(first));
        const size_t available = body.in_avail();
        if (available > 0) {
          chunk.resize(1 + available);
          const size_t got =
              body.getn(reinterpret_cast<uint8_t*>(chunk.data()) + 1, available).get();
          chunk.resize(1 + got);
        }
      } catch (const std::exception& e) {
        if (was_cancelled()) return cancelled_status();
        return absl::UnavailableError(
            absl::StrCat(method, " ", url, ": stream broken: ", e.what()));
      }
      for (std::string& line : splitter.Feed(chunk)) {
        absl::StatusOr<WatchEvent> parsed = ParseWatchLine(line);
        if (!parsed.ok()) {
          // One bad line must not stall the stream; the next event or the
          // re-watch carries the state forward.
          LOG(WARNING) << "kube: " << method << " " << collection_path
                       << ": skipping a malformed watch line (" << parsed.status().message()
                       << "): " << line.substr(0, 200);
          continue;
        }
        WatchEvent& event = *parsed;
        if (event.type == "ERROR") {
          const int code = event.object.is_object() ? event.object.value("code", 500) : 500;
          return StatusFromHttp(method, url, code, event.object.dump());
        }
        if (!on_event(event)) return absl::OkStatus();
      }
    }
    if (was_cancelled()) return cancelled_status();
    return absl::OkStatus();  // The server ended the stream (timeoutSeconds).
  }

 private:
  http::http_request NewRequest(const std::string& method, const std::string& path_and_query) {
    http::http_request request(method);
    request.set_request_uri(web::uri(path_and_query));
    request.headers().add("Accept", "application/json");
    request.headers().add("User-Agent", options_.user_agent);
    if (config_.token != nullptr) {
      request.headers().add("Authorization", "Bearer " + config_.token->Token());
    }
    return request;
  }

  std::shared_ptr<http_client> MakeClient(absl::Duration timeout) const {
    http_client_config cfg;
    cfg.set_timeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    cfg.set_validate_certificates(!config_.insecure_skip_tls_verify);
    if (base_uri_.scheme() == "https") {
      const KubeConfig c = config_;
      cfg.set_ssl_context_callback([c](boost::asio::ssl::context& ctx) {
        if (!c.ca_data.empty()) {
          ctx.add_certificate_authority(boost::asio::buffer(c.ca_data));
        } else if (!c.ca_file.empty()) {
          ctx.load_verify_file(c.ca_file);
        }
        if (!c.client_cert_data.empty()) {
          ctx.use_certificate_chain(boost::asio::buffer(c.client_cert_data));
        } else if (!c.client_cert_file.empty()) {
          ctx.use_certificate_chain_file(c.client_cert_file);
        }
        if (!c.client_key_data.empty()) {
          ctx.use_private_key(boost::asio::buffer(c.client_key_data),
                              boost::asio::ssl::context::pem);
        } else if (!c.client_key_file.empty()) {
          ctx.use_private_key_file(c.client_key_file, boost::asio::ssl::context::pem);
        }
      });
    }
    return std::make_shared<http_client>(base_uri_, cfg);
  }

  std::shared_ptr<http_client> Client() {
    MutexLock lock(&mu_);
    return client_;
  }

  // Replaces `broken` unless another thread already did.
  void ResetClient(const std::shared_ptr<http_client>& broken) {
    MutexLock lock(&mu_);
    if (client_ == broken) client_ = MakeClient(options_.request_timeout);
  }

  // Constant after Init():
  const KubeConfig config_;
  const KubeClientOptions options_;
  web::uri base_uri_;

  Mutex mu_;
  // In-flight calls hold their own reference, so a reset never pulls a client
  // from under them.
  std::shared_ptr<http_client> client_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::FromConfig(KubeConfig config,
                                                                   KubeClientOptions options) {
  auto impl = std::make_unique<Impl>(std::move(config), std::move(options));
  SS_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<KubeClient>(new KubeClient(std::move(impl)));
}

KubeClient::KubeClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KubeClient::~KubeClient() = default;

const KubeConfig& KubeClient::config() const { return impl_->config(); }

absl::StatusOr<Json> KubeClient::Request(const std::string& method,
                                         const std::string& path_and_query, const Json* body,
                                         const std::string& content_type) {
  return impl_->Do(method, path_and_query, body, content_type);
}

absl::StatusOr<Json> KubeClient::Get(const std::string& path) {
  return Request("GET", path, nullptr);
}

absl::StatusOr<ListResult> KubeClient::List(const std::string& collection_path,
                                            const ListOptions& options) {
  ListResult result;
  std::string continue_token;
  do {
    std::string url = collection_path;
    AddQuery(&url, "labelSelector", options.label_selector);
    AddQuery(&url, "fieldSelector", options.field_selector);
    if (options.limit > 0) AddQuery(&url, "limit", absl::StrCat(options.limit));
    if (continue_token.empty()) {
      // The continue token pins the first page's version; the server rejects both.
      AddQuery(&url, "resourceVersion", options.resource_version);
    } else {
      AddQuery(&url, "continue", continue_token);
    }
    SS_ASSIGN_OR_RETURN(Json page, Request("GET", url, nullptr));
    if (!page.is_object()) {
      return absl::InternalError(absl::StrCat("GET ", url, ": the answer is not a list"));
    }
    if (page.contains("items") && page["items"].is_array()) {
      for (Json& item : page["items"]) result.items.push_back(std::move(item));
    }
    const Json metadata = page.value("metadata", Json::object());
    if (result.resource_version.empty() || continue_token.empty()) {
      result.resource_version = metadata.value("resourceVersion", "");
    }
    continue_token = metadata.value("continue", "");
  } while (!continue_token.empty());
  return result;
}

absl::StatusOr<Json> KubeClient::Create(const std::string& collection_path, const Json& object) {
  return Request("POST", collection_path, &object);
}

absl::StatusOr<Json> KubeClient::Update(const std::string& path, const Json& object) {
  return Request("PUT", path, &object);
}

absl::StatusOr<Json> KubeClient::UpdateStatus(const std::string& path, const Json& object) {
  return Request("PUT", path + "/status", &object);
}

absl::StatusOr<Json> KubeClient::Patch(const std::string& path, const Json& patch, PatchType type) {
  return Request("PATCH", path, &patch, PatchContentType(type));
}

absl::StatusOr<Json> KubeClient::PatchStatus(const std::string& path, const Json& patch,
                                             PatchType type) {
  return Request("PATCH", path + "/status", &patch, PatchContentType(type));
}

absl::Status KubeClient::Delete(const std::string& path, PropagationPolicy propagation) {
  const Json options = {{"kind", "DeleteOptions"},
                        {"apiVersion", "v1"},
                        {"propagationPolicy", PropagationName(propagation)}};
  return Request("DELETE", path, &options).status();
}

absl::StatusOr<Json> KubeClient::GetScale(const std::string& path) {
  return Request("GET", path + "/scale", nullptr);
}

absl::StatusOr<Json> KubeClient::UpdateScale(const std::string& path, const Json& scale) {
  return Request("PUT", path + "/scale", &scale);
}

absl::Status KubeClient::Watch(const std::string& collection_path, const WatchOptions& options,
                               const std::function<bool(const WatchEvent&)>& on_event,
                               Cancellation* cancel) {
  return impl_->Watch(collection_path, options, on_event, cancel);
}

}  // namespace shadowsync::kube
