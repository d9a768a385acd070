#include "operator/credentials.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "operator/reconcile.h"

namespace shadowsync::op {

std::string DeriveJobToken(const std::string& key, std::string_view purpose,
                           const nlohmann::json& job) {
  const nlohmann::json& meta = job.value("metadata", nlohmann::json::object());
  // Newline-separated: no name, namespace or uid holds one, so no two jobs
  // give the same message.
  const std::string message =
      absl::StrCat("shadowsync/v1/", std::string(purpose), "\n", meta.value("namespace", ""), "\n",
                   meta.value("name", ""), "\n", meta.value("uid", ""));
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
             reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
             &length) != nullptr)
      << "HMAC-SHA256 failed";
  return absl::BytesToHexString(std::string(reinterpret_cast<const char*>(mac), length));
}

std::map<std::string, std::string> JobCredentials(const std::string& key, const nlohmann::json& job,
                                                  const GrpcSecurity& tls) {
  std::map<std::string, std::string> data = {
      {std::string(kAdminTokenKey), DeriveJobToken(key, kAdminTokenKey, job)},
      {std::string(kAuthTokenKey), DeriveJobToken(key, kAuthTokenKey, job)}};
  if (tls.tls()) {
    data[std::string(kTlsCaKey)] = tls.ca_pem;
    data[std::string(kTlsCertKey)] = tls.cert_pem;
    data[std::string(kTlsKeyKey)] = tls.key_pem;
  }
  return data;
}

}  // namespace shadowsync::op
