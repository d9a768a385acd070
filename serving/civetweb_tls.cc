#include "serving/civetweb_tls.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <string>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/ssl.h"
#include "openssl/x509.h"

namespace shadowsync::serving {

// The stand-ins, embedded at build time (serving/CMakeLists.txt).
extern const unsigned char kOpenSslShimLibssl[];
extern const size_t kOpenSslShimLibssl_size;
extern const unsigned char kOpenSslShimLibcrypto[];
extern const size_t kOpenSslShimLibcrypto_size;

namespace {

// dlopen()s the shared object `bytes` from an anonymous memory file, and
// keeps it loaded for the life of the process. The file stays open too:
// glibc knows a loaded object by its path, and a later load from a reused
// descriptor number would be taken for this one.
absl::Status LoadFromMemory(const char* name, const unsigned char* bytes, size_t size) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("memfd_create for ", name));
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, bytes + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  void* handle = written == size
                     ? dlopen(absl::StrCat("/proc/self/fd/", fd).c_str(), RTLD_NOW | RTLD_LOCAL)
                     : nullptr;
  if (handle == nullptr) {
    const char* error = dlerror();
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("TLS on the HTTP port: cannot load the OpenSSL stand-in ", name,
                     " for civetweb: ", error != nullptr ? error : "short write"));
  }
  return absl::OkStatus();
}

// OpenSSL's oldest queued error, for messages; clears the queue.
std::string OpenSslError() {
  char text[256] = "no detail";
  if (const unsigned long code = ERR_get_error(); code != 0) {
    ERR_error_string_n(code, text, sizeof(text));
  }
  ERR_clear_error();
  return text;
}

// Calls `use` with each certificate in `pem`, in order; how many there were.
template <typename Use>
int ForEachCertificate(const std::string& pem, Use use) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  int count = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    use(cert);
    X509_free(cert);
    ++count;
  }
  ERR_clear_error();  // The end of the input is queued as an error.
  return count;
}

}  // namespace

absl::Status PrepareCivetwebOpenSsl() {
  // libcrypto first: libssl.so's stand-in needs nothing of it, but civetweb
  // loads them in this order.
  static const absl::Status* const loaded = [] {
    absl::Status s =
        LoadFromMemory("libcrypto.so", kOpenSslShimLibcrypto, kOpenSslShimLibcrypto_size);
    if (s.ok()) s = LoadFromMemory("libssl.so", kOpenSslShimLibssl, kOpenSslShimLibssl_size);
    return new absl::Status(std::move(s));
  }();
  return *loaded;
}

void SslCtxFree::operator()(ssl_ctx_st* ctx) const { SSL_CTX_free(ctx); }

absl::StatusOr<SslCtx> MakeMutualTlsServerContext(const GrpcSecurity& security) {
  SslCtx ctx(SSL_CTX_new(TLS_server_method()));
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslError());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  bool leaf_ok = true, chain_ok = true;
  const int certs = ForEachCertificate(security.cert_pem, [&, first = true](X509* cert) mutable {
    if (first) {
      leaf_ok = SSL_CTX_use_certificate(ctx.get(), cert) == 1;
      first = false;
    } else {
      chain_ok = chain_ok && SSL_CTX_add1_chain_cert(ctx.get(), cert) == 1;
    }
  });
  if (certs == 0 || !leaf_ok || !chain_ok) {
    return absl::InvalidArgumentError("--tls-cert-file: not a usable PEM certificate chain: " +
                                      OpenSslError());
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
      BIO_new_mem_buf(security.key_pem.data(), static_cast<int>(security.key_pem.size())),
      &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError("--tls-key-file: not a usable PEM private key: " +
                                      OpenSslError());
  }
  if (SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return absl::InvalidArgumentError(
        "--tls-key-file is not the private key of --tls-cert-file's certificate: " +
        OpenSslError());
  }
  X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
  bool ca_ok = true;
  const int cas = ForEachCertificate(security.ca_pem, [&](X509* cert) {
    ca_ok = ca_ok && X509_STORE_add_cert(store, cert) == 1 &&
            SSL_CTX_add_client_CA(ctx.get(), cert) == 1;
  });
  if (cas == 0 || !ca_ok) {
    return absl::InvalidArgumentError("--tls-ca-file: not a usable PEM CA certificate: " +
                                      OpenSslError());
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return ctx;
}

int ProvideCivetwebTlsContext(void** ssl_ctx, void* user_data) {
  // At start *ssl_ctx is null; at stop it is ours again: 1 keeps civetweb
  // from freeing it.
  if (*ssl_ctx == nullptr) {
    *ssl_ctx = const_cast<void*>(static_cast<CivetServer*>(user_data)->getUserContext());
  }
  return 1;
}

}  // namespace shadowsync::serving
