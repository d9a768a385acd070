// HttpExchange over TLS, with OpenSSL as a client such as curl uses it: for
// the tests of `shadowsync serve`'s HTTPS port.
#ifndef SHADOWSYNC_TESTS_UTIL_HTTPS_EXCHANGE_H_
#define SHADOWSYNC_TESTS_UTIL_HTTPS_EXCHANGE_H_

#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "openssl/err.h"
#include "openssl/ssl.h"
#include "tests/util/http_get.h"

namespace shadowsync::testing {

struct TlsClientFiles {
  std::string ca_file;                     // The server's certificate must chain to it...
  std::string server_name = "shadowsync";  // ...and name this host.
  std::string cert_file;                   // Empty: no client certificate.
  std::string key_file;
};

// Sends `request` to 127.0.0.1:`port` over TLS and returns what the server
// sends until it closes the connection. "" when the handshake fails or the
// server drops the connection (a refused client certificate), with
// OpenSSL's reason in *error.
inline std::string HttpsExchange(int port, const std::string& request, const TlsClientFiles& tls,
                                 std::string* error = nullptr, int timeout_seconds = 5) {
  const auto fail = [&](const std::string& what) {
    if (error != nullptr) {
      char text[256] = "";
      ERR_error_string_n(ERR_get_error(), text, sizeof(text));
      *error = what + ": " + text;
    }
    ERR_clear_error();
    return std::string();
  };
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        &SSL_CTX_free);
  if (SSL_CTX_load_verify_locations(ctx.get(), tls.ca_file.c_str(), nullptr) != 1) {
    return fail("CA file " + tls.ca_file);
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (!tls.cert_file.empty() &&
      (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert_file.c_str()) != 1 ||
       SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1)) {
    return fail("client certificate " + tls.cert_file);
  }
  // A server that refuses the client certificate closes the connection under
  // the client's write: an error, not SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  const int fd = ConnectTcp("127.0.0.1", port, timeout_seconds);
  if (fd < 0) return fail("connect");
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), &SSL_free);
  SSL_set_fd(ssl.get(), fd);
  SSL_set_tlsext_host_name(ssl.get(), tls.server_name.c_str());
  SSL_set1_host(ssl.get(), tls.server_name.c_str());
  std::string response;
  if (SSL_connect(ssl.get()) != 1) {
    close(fd);
    return fail("handshake");
  }
  // With TLS 1.3 the server checks a client certificate after the client's
  // handshake is done: a refusal shows as a failed write or read.
  if (SSL_write(ssl.get(), request.data(), static_cast<int>(request.size())) !=
      static_cast<int>(request.size())) {
    close(fd);
    return fail("write");
  }
  char buf[4096];
  int n;
  while ((n = SSL_read(ssl.get(), buf, sizeof(buf))) > 0) response.append(buf, n);
  if (response.empty()) {
    close(fd);
    return fail("read");
  }
  SSL_shutdown(ssl.get());
  close(fd);
  return response;
}

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_HTTPS_EXCHANGE_H_
