#include "common/grpc_security.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// Adds the bearer token to the initial metadata of every call.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationMetadataKey, *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;  // Owned by the factory, which the channel keeps.
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat(kBearerPrefix, token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

std::string_view SliceView(const grpc_slice& slice) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)), GRPC_SLICE_LENGTH(slice)};
}

// The bearer-token check, as gRPC core's auth-metadata processor
// (grpc/grpc_security.h): gRPC calls it for every call once its initial
// metadata has arrived, before the call is matched to a handler. It answers at
// once (a constant-time compare), on gRPC's thread. `state` is the expected
// "Bearer <token>" header value.
void CheckBearerToken(void* state, grpc_auth_context* /*context*/, const grpc_metadata* metadata,
                      size_t count, grpc_process_auth_metadata_done_cb done, void* user_data) {
  const std::string& expected = *static_cast<const std::string*>(state);
  bool ok = false;
  for (size_t i = 0; i < count; ++i) {
    if (SliceView(metadata[i].key) == kAuthorizationMetadataKey) {
      ok |= ConstantTimeEquals(std::string(SliceView(metadata[i].value)), expected);
    }
  }
  if (ok) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, kUnauthenticatedMessage);
  }
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
    if (security.has_token()) {
      grpc_server_credentials_set_auth_metadata_processor(
          creds, {.process = CheckBearerToken,
                  .destroy = [](void* state) { delete static_cast<std::string*>(state); },
                  .state = new std::string(absl::StrCat(kBearerPrefix, security.auth_token))});
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
      " token=", has_token() ? "on" : "off");
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
    const std::string flag = absl::StrCat(flag_prefix, "auth-token-file");
    absl::StatusOr<std::string> token = ReadFile(flag, files.auth_token_file);
    if (!token.ok()) return token.status();
    std::string trimmed(absl::StripAsciiWhitespace(*token));
    if (trimmed.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": ", files.auth_token_file, " holds only whitespace"));
    }
    for (const char c : trimmed) {
      // Metadata values must be printable ASCII; say so without echoing it.
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": ", files.auth_token_file,
                         " must hold one token of printable ASCII without spaces"));
      }
    }
    out.auth_token = std::move(trimmed);
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
  if (!security.has_token()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerTokenInterceptorFactory>(security.auth_token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
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
  return args;
}

}  // namespace shadowsync
