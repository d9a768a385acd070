// The stand-ins for libssl.so and libcrypto.so that serving/civetweb_tls.cc
// loads before civetweb does (see there for why). Built twice: with
// SHADOWSYNC_SHIM_LIBSSL as "libssl.so", over libssl.so.3, and without it as
// "libcrypto.so", over libcrypto.so.3; every other symbol comes from those.
#include "openssl/ssl.h"

#if defined(SHADOWSYNC_SHIM_LIBSSL)
// OpenSSL 3 keeps this name only as a macro for SSL_get1_peer_certificate
// (the same reference counting); civetweb 1.15 looks it up by name.
#undef SSL_get_peer_certificate
extern "C" __attribute__((visibility("default"))) X509* SSL_get_peer_certificate(const SSL* ssl) {
  return SSL_get1_peer_certificate(ssl);
}
#endif
