// Optional transport security of every gRPC link (docs/security.md): mutual
// TLS from PEM files, and a shared bearer token that clients attach to every
// call ("authorization: Bearer <token>" metadata) and the server credentials
// check once per call, before any handler runs.
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

// Where a process finds its security material: the --tls-* and
// --auth-token-file flags. Empty TLS paths = plaintext; all three or none.
struct GrpcSecurityFiles {
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name = kDefaultTlsServerName;
  std::string auth_token_file;  // Empty = no token.
};

// Loaded material. Copyable; holds the private key and the token, so never
// log it (Describe() says what is on without the secrets).
struct GrpcSecurity {
  std::string ca_pem;    // Trust anchor for the peer's certificate.
  std::string cert_pem;  // This process's certificate chain (as server and as client).
  std::string key_pem;
  std::string tls_server_name = kDefaultTlsServerName;
  std::string auth_token;  // Empty = no token sent or required.

  bool tls() const { return !cert_pem.empty(); }
  bool has_token() const { return !auth_token.empty(); }
  // "tls=mutual token=on" style summary for logs.
  std::string Describe() const;
};

// Reads the files. InvalidArgument naming the flag and path for a missing,
// unreadable, empty or non-PEM file, or a partial TLS triple; a token file
// is trimmed of surrounding whitespace (a trailing newline) and must not be
// empty. `flag_prefix` names the flags in messages ("--" by default; the
// operator passes "--ps-").
absl::StatusOr<GrpcSecurity> LoadGrpcSecurity(const GrpcSecurityFiles& files,
                                              const std::string& flag_prefix = "--");

// Mutual TLS (client certificate requested, required and verified against
// ca_pem) when security.tls(), else insecure. With security.has_token(), every
// call must carry "authorization: Bearer <auth_token>" (compared in constant
// time): gRPC answers any other call UNAUTHENTICATED(kUnauthenticatedMessage)
// before it is matched to a handler, so no service code sees it.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const GrpcSecurity& security);

// A channel to `address`: TLS with this process's certificate when
// security.tls() (and the target-name override), and an interceptor that
// adds the bearer token to every call when security.has_token().
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const GrpcSecurity& security,
                                             grpc::ChannelArguments args = {});

// Constant-time equality of two byte strings (time depends only on lengths).
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// The --tls-* and --auth-token-file flags that hand `files` to a child
// process (paths only, never the token); empty for an insecure job.
std::vector<std::string> GrpcSecurityArgs(const GrpcSecurityFiles& files);

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_GRPC_SECURITY_H_
