// HTTPS on civetweb for serve's HTTP port: the server's OpenSSL context
// (mutual TLS from the process's PEM material), and what civetweb needs to
// load OpenSSL at all on Debian 12.
//
// civetweb loads OpenSSL at run time, dlopen("libcrypto.so") and
// dlopen("libssl.so"), then each function by name. On Debian 12 that fails
// twice: the unversioned names come only with libssl-dev, and civetweb 1.15
// (built for the OpenSSL 1.1 API) asks for SSL_get_peer_certificate, which
// OpenSSL 3 keeps only as a macro (civetweb issue #1334), so TLS cannot
// start. PrepareCivetwebOpenSsl loads two stand-ins first, libcrypto.so over
// libcrypto.so.3 and libssl.so over libssl.so.3 plus that one function
// (serving/openssl_shim/): glibc's dlopen returns an object already loaded
// whose soname is the name asked for, and civetweb's lookups reach the real
// libraries through the stand-ins' dependencies. They are embedded in the
// binary and loaded from memory, so nothing is installed for them.
#ifndef SHADOWSYNC_SERVING_CIVETWEB_TLS_H_
#define SHADOWSYNC_SERVING_CIVETWEB_TLS_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grpc_security.h"

struct ssl_ctx_st;

namespace shadowsync::serving {

// Loads the stand-ins, once per process (later calls return the first
// call's result). FailedPrecondition if they cannot be loaded.
absl::Status PrepareCivetwebOpenSsl();

struct SslCtxFree {
  void operator()(ssl_ctx_st* ctx) const;
};
using SslCtx = std::unique_ptr<ssl_ctx_st, SslCtxFree>;

// A server context from `security`'s PEM material (security.tls() must be
// true): TLS 1.2 or later, its certificate chain and key, and a client
// certificate required and verified against its CA, as the gRPC servers do.
// InvalidArgument naming the --tls-* flag whose material is unusable, or a
// key that is not the certificate's.
absl::StatusOr<SslCtx> MakeMutualTlsServerContext(const GrpcSecurity& security);

// civetweb's external_ssl_ctx callback for a CivetServer whose user context
// is the SSL_CTX: civetweb uses it as it is and leaves it to its owner.
int ProvideCivetwebTlsContext(void** ssl_ctx, void* user_data);

}  // namespace shadowsync::serving

#endif  // SHADOWSYNC_SERVING_CIVETWEB_TLS_H_
