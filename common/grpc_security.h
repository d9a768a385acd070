// Optional transport security of every gRPC link (docs/security.md): mutual
// TLS from PEM files, and a shared bearer token that clients attach to every
// call ("authorization: Bearer <token>" metadata) and the server credentials
// check once per call, before any handler runs. A second token, the admin
// token, is the credential of the operator and the launcher: a call carrying
// it passes the check too and is marked as an admin call
// (IsAdminCall), which the parameter server's destructive RPCs require.
//
// A process loads its files once at start; the loaded GrpcSecurity is then
// copied into every server's and client's options. A default-constructed
// GrpcSecurity is plaintext without a token: exactly the behaviour of a job
// without spec.security.
//
//   SS_ASSIGN_OR_RETURN(GrpcSecurity sec, LoadGrpcSecurity(files));
//   builder.AddListeningPort(address, ServerCredentials(sec), &port);
//   auto channel = CreateChannel("ps-0:7000", sec, args);
//
// A client checks the server's certificate for `tls_server_name`, not for
// the address it dials (docs/security.md, "Names"). Thread-safe: the
// structs are plain values and the functions keep no state.
#ifndef SHADOWSYNC_COMMON_GRPC_SECURITY_H_
#define SHADOWSYNC_COMMON_GRPC_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace shadowsync {

// The metadata key carrying the token, and the default server name.
inline constexpr char kAuthorizationMetadataKey[] = "authorization";
inline constexpr char kDefaultTlsServerName[] = "shadowsync";
// The message of every refused call (never includes what was sent).
inline constexpr char kUnauthenticatedMessage[] =
    "missing or invalid bearer token in 'authorization' metadata";
// The auth-context property the server's token check sets on a call that
// carries the admin token.
inline constexpr char kAdminCallProperty[] = "shadowsync.admin";

// Where a process finds its security material: the --tls-* and
// --auth-token-file flags. Empty TLS paths = plaintext; all three or none.
struct GrpcSecurityFiles {
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name = kDefaultTlsServerName;
  std::string auth_token_file;  // Empty = no token.
  // The admin token (--admin-token-file). A server takes admin RPCs only
  // with it; a client sends it too. Empty = none.
  std::string admin_token_file;
};

// Loaded material. Copyable; holds the private key and the token, so never
// log it (Describe() says what is on without the secrets).
struct GrpcSecurity {
  std::string ca_pem;    // Trust anchor for the peer's certificate.
  std::string cert_pem;  // This process's certificate chain (as server and as client).
  std::string key_pem;
  std::string tls_server_name = kDefaultTlsServerName;
  std::string auth_token;  // Empty = no token sent or required.
  // Server: the token that marks a call as an admin call (and passes the
  // auth-token check too). Client: sent beside auth_token. Empty = none.
  std::string admin_token;

  bool tls() const { return !cert_pem.empty(); }
  bool has_token() const { return !auth_token.empty(); }
  bool has_admin_token() const { return !admin_token.empty(); }
  // "tls=mutual token=on admin_token=on" style summary for logs.
  std::string Describe() const;
};

// Reads the files. InvalidArgument naming the flag and path for a missing,
// unreadable, empty or non-PEM file, or a partial TLS triple; a token file
// (either token) is trimmed of surrounding whitespace (a trailing newline) and must not be
// empty. `flag_prefix` names the flags in messages ("--" by default; the
// operator passes "--ps-").
absl::StatusOr<GrpcSecurity> LoadGrpcSecurity(const GrpcSecurityFiles& files,
                                              const std::string& flag_prefix = "--");

// The one token in the file at `path`, trimmed of surrounding whitespace (a
// trailing newline): printable ASCII without spaces. InvalidArgument naming
// `flag` and the path otherwise (never echoing the file).
absl::StatusOr<std::string> ReadTokenFile(const std::string& flag, const std::string& path);

// Mutual TLS (client certificate requested, required and verified against
// ca_pem) when security.tls(), else insecure. With security.has_token(), every
// call must carry "authorization: Bearer <auth_token>" or the admin token
// (compared in constant time): gRPC answers any other call
// UNAUTHENTICATED(kUnauthenticatedMessage) before it is matched to a handler,
// so no service code sees it. With security.has_admin_token(), a call
// carrying "Bearer <admin_token>" gets kAdminCallProperty.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const GrpcSecurity& security);

// Whether the server's token check found the admin token on this call.
bool IsAdminCall(const grpc::ServerContextBase& context);

// A channel to `address`: TLS with this process's certificate when
// security.tls() (and the target-name override), and an interceptor that
// adds the bearer tokens to every call: the admin token and the auth token,
// whichever there are (a server takes a call if either is its own).
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const GrpcSecurity& security,
                                             grpc::ChannelArguments args = {});

// Writes a new random token (256 bits from the kernel's CSPRNG, as 64 hex
// digits) to `path`, atomically, readable by its owner only: the launcher's
// admin token.
absl::Status WriteNewToken(const std::string& path);

// Constant-time equality of two byte strings (time depends only on lengths).
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// The --tls-*, --auth-token-file and --admin-token-file flags that hand
// `files` to a child process (paths only, never a token); empty for an
// insecure job.
std::vector<std::string> GrpcSecurityArgs(const GrpcSecurityFiles& files);

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_GRPC_SECURITY_H_
