#include "common/grpc_security.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpc/grpc_security.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace shadowsync {
namespace {

constexpr char kBearerPrefix[] = "Bearer ";

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", path, " (missing or unreadable)"));
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  if (out.str().empty())
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  return out.str();
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path,
                                    const std::string& what) {
  absl::StatusOr<std::string> pem = ReadFile(flag, path);
  if (!pem.ok()) return pem.status();
  if (!absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is not PEM (want ", what, ")"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& flag, const std::string& path) {
  SS_ASSIGN_OR_RETURN(const std::string token, ReadFile(flag, path));
  std::string trimmed(absl::StripAsciiWhitespace(token));
  if (trimmed.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " holds only whitespace"));
  }
  for (const char c : trimmed) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": ", path, " must hold one token of printable ASCII without spaces"));
    }
  }
  return trimmed;
}

namespace {

// Adds the bearer tokens to the initial metadata of every call.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::vector<std::string>* headers) : headers_(headers) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      for (const std::string& header : *headers_) {
        methods->GetSendInitialMetadata()->emplace(kAuthorizationMetadataKey, header);
      }
    }
    methods->Proceed();
  }

 private:
  const std::vector<std::string>* headers_;  // Owned by the factory, which the channel keeps.
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::vector<std::string>& tokens) {
    for (const std::string& token : tokens) headers_.push_back(absl::StrCat(kBearerPrefix, token));
  }
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerTokenInterceptor(&headers_);
  }

 private:
  std::vector<std::string> headers_;
};

std::string_view SliceView(const grpc_slice& slice) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)), GRPC_SLICE_LENGTH(slice)};
}

// What the token check compares against: "Bearer <token>" header values,
// each empty when that token is not configured.
struct ExpectedTokens {
  std::string data;
  std::string admin;
};

// The bearer-token check, as gRPC core's auth-metadata processor
// (grpc/grpc_security.h): gRPC calls it for every call once its initial
// metadata has arrived, before the call is matched to a handler. It answers at
// once (constant-time compares), on gRPC's thread. A call passes with the
// auth token, with the admin token, or with neither when no auth token is
// configured; the admin token also marks it as an admin call, in the call's
// own auth context (which is what ServerContext::auth_context() shows).
void CheckBearerToken(void* state, grpc_auth_context* context, const grpc_metadata* metadata,
                      size_t count, grpc_process_auth_metadata_done_cb done, void* user_data) {
  const ExpectedTokens& expected = *static_cast<const ExpectedTokens*>(state);
  bool data_ok = expected.data.empty();
  bool admin = false;
  for (size_t i = 0; i < count; ++i) {
    if (SliceView(metadata[i].key) != kAuthorizationMetadataKey) continue;
    const std::string value(SliceView(metadata[i].value));
    if (!expected.data.empty()) data_ok |= ConstantTimeEquals(value, expected.data);
    if (!expected.admin.empty()) admin |= ConstantTimeEquals(value, expected.admin);
  }
  if (!data_ok && !admin) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, kUnauthenticatedMessage);
    return;
  }
  if (admin) grpc_auth_context_add_cstring_property(context, kAdminCallProperty, "true");
  done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
}

// grpc::ServerCredentials over gRPC core's credentials, which is how an
// insecure server gets the token check too: in gRPC 1.51 the C++ API's
// InsecureServerCredentials() aborts in SetAuthMetadataProcessor, and a server
// interceptor cannot fail a call (it can only cancel it once a handler has
// been chosen). Core's insecure and TLS credentials both take a processor.
// It overrides ServerCredentials' private AddPortToServer as gRPC 1.51 declares
// it; grpc_security_test calls every RPC of both servers without the token, so
// a gRPC upgrade that changes this fails there.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  // The base class has initialised gRPC by the time the members are built.
  explicit CoreServerCredentials(const GrpcSecurity& security) : creds_(Create(security)) {}
  ~CoreServerCredentials() override { grpc_server_credentials_release(creds_); }

  // gRPC keeps one processor per credentials: another would replace the
  // token check, so refuse loudly, as gRPC's own insecure credentials do.
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {
    LOG(FATAL) << "SetAuthMetadataProcessor would replace the bearer-token check";
  }

 private:
  static grpc_server_credentials* Create(const GrpcSecurity& security) {
    grpc_server_credentials* creds;
    if (security.tls()) {
      grpc_ssl_pem_key_cert_pair pair = {security.key_pem.c_str(), security.cert_pem.c_str()};
      creds = grpc_ssl_server_credentials_create_ex(
          security.ca_pem.c_str(), &pair, 1,
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY, nullptr);
    } else {
      creds = grpc_insecure_server_credentials_create();
    }
    if (security.has_token() || security.has_admin_token()) {
      auto* expected = new ExpectedTokens;
      if (security.has_token()) expected->data = absl::StrCat(kBearerPrefix, security.auth_token);
      if (security.has_admin_token()) {
        expected->admin = absl::StrCat(kBearerPrefix, security.admin_token);
      }
      grpc_server_credentials_set_auth_metadata_processor(
          creds, {.process = CheckBearerToken,
                  .destroy = [](void* state) { delete static_cast<ExpectedTokens*>(state); },
                  .state = expected});
    }
    return creds;
  }

  int AddPortToServer(const std::string& address, grpc_server* server) override {
    return grpc_server_add_http2_port(server, address.c_str(), creds_);
  }

  grpc_server_credentials* const creds_;
};

}  // namespace

std::string GrpcSecurity::Describe() const {
  return absl::StrCat(
      "tls=", tls() ? "mutual" : "off",
      tls() ? absl::StrCat(" tls_server_name=",
                           tls_server_name.empty() ? "(dialled host)" : tls_server_name)
            : "",
      " token=", has_token() ? "on" : "off", " admin_token=", has_admin_token() ? "on" : "off");
}

absl::StatusOr<GrpcSecurity> LoadGrpcSecurity(const GrpcSecurityFiles& files,
                                              const std::string& flag_prefix) {
  GrpcSecurity out;
  const std::string ca_flag = absl::StrCat(flag_prefix, "tls-ca-file");
  const std::string cert_flag = absl::StrCat(flag_prefix, "tls-cert-file");
  const std::string key_flag = absl::StrCat(flag_prefix, "tls-key-file");
  const int tls_given =
      !files.tls_ca_file.empty() + !files.tls_cert_file.empty() + !files.tls_key_file.empty();
  if (tls_given != 0 && tls_given != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("mutual TLS needs all of ", ca_flag, ", ", cert_flag, " and ", key_flag,
                     "; missing:", files.tls_ca_file.empty() ? " " + ca_flag : "",
                     files.tls_cert_file.empty() ? " " + cert_flag : "",
                     files.tls_key_file.empty() ? " " + key_flag : ""));
  }
  if (tls_given == 3) {
    absl::StatusOr<std::string> ca = ReadPem(ca_flag, files.tls_ca_file, "CA certificates");
    if (!ca.ok()) return ca.status();
    absl::StatusOr<std::string> cert = ReadPem(cert_flag, files.tls_cert_file, "a certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(key_flag, files.tls_key_file, "a private key");
    if (!key.ok()) return key.status();
    out.ca_pem = *std::move(ca);
    out.cert_pem = *std::move(cert);
    out.key_pem = *std::move(key);
    out.tls_server_name = files.tls_server_name;
  }
  if (!files.auth_token_file.empty()) {
    SS_ASSIGN_OR_RETURN(out.auth_token, ReadTokenFile(absl::StrCat(flag_prefix, "auth-token-file"),
                                                      files.auth_token_file));
  }
  if (!files.admin_token_file.empty()) {
    SS_ASSIGN_OR_RETURN(
        out.admin_token,
        ReadTokenFile(absl::StrCat(flag_prefix, "admin-token-file"), files.admin_token_file));
  }
  return out;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const GrpcSecurity& security) {
  return std::make_shared<CoreServerCredentials>(security);
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const GrpcSecurity& security,
                                             grpc::ChannelArguments args) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (security.tls()) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = security.ca_pem;
    options.pem_private_key = security.key_pem;
    options.pem_cert_chain = security.cert_pem;
    credentials = grpc::SslCredentials(options);
    if (!security.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(security.tls_server_name);
    }
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  // Both tokens when there are both: a server that has no admin token (one
  // started before its job had one) still takes the auth token.
  std::vector<std::string> tokens;
  if (security.has_admin_token()) tokens.push_back(security.admin_token);
  if (security.has_token()) tokens.push_back(security.auth_token);
  if (tokens.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerTokenInterceptorFactory>(tokens));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

absl::Status WriteNewToken(const std::string& path) {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  const std::string token =
      absl::BytesToHexString(std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  SS_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Open(path, {.mode = 0600}));
  out.Append(token + "\n");
  return out.Commit();
}

bool IsAdminCall(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return auth != nullptr && !auth->FindPropertyValues(kAdminCallProperty).empty();
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  // Every byte of the longer string is visited; only the lengths leak.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::vector<std::string> GrpcSecurityArgs(const GrpcSecurityFiles& files) {
  std::vector<std::string> args;
  if (!files.tls_cert_file.empty()) {
    args.insert(args.end(),
                {"--tls-ca-file", files.tls_ca_file, "--tls-cert-file", files.tls_cert_file,
                 "--tls-key-file", files.tls_key_file, "--tls-server-name", files.tls_server_name});
  }
  if (!files.auth_token_file.empty()) {
    args.insert(args.end(), {"--auth-token-file", files.auth_token_file});
  }
  if (!files.admin_token_file.empty()) {
    args.insert(args.end(), {"--admin-token-file", files.admin_token_file});
  }
  return args;
}

}  // namespace shadowsync
