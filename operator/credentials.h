// Each job's credentials (docs/security.md, "Credentials by default"). The
// operator derives a job's admin token and auth token from its own secret
// key, HMAC-SHA256(key, purpose, namespace, name, uid), so that it never has
// to store them or read them back: it needs only `create` on Secrets, never
// `get`. It writes them once into the job's Secret "<job>-credentials"
// (owned by the job, so deleted with it), together with its own TLS files
// when it has them; the pods mount what ReconcileOptions::credentials says.
//
// A new job (new uid) gets new tokens; a job's tokens change only with the
// key. Thread-safe: pure functions.
#ifndef SHADOWSYNC_OPERATOR_CREDENTIALS_H_
#define SHADOWSYNC_OPERATOR_CREDENTIALS_H_

#include <map>
#include <string>
#include <string_view>

#include "common/grpc_security.h"
#include "nlohmann/json.hpp"

namespace shadowsync::op {

// 64 hex digits: HMAC-SHA256 under `key` of `purpose` and the job's
// namespace, name and uid. `purpose` is "admin-token" or "token".
std::string DeriveJobToken(const std::string& key, std::string_view purpose,
                           const nlohmann::json& job);

// The contents of the job's credentials Secret, by key: kAdminTokenKey and
// kAuthTokenKey derived under `key`, and with `tls.tls()` the operator's CA,
// certificate and private key (kTlsCaKey, kTlsCertKey, kTlsKeyKey).
std::map<std::string, std::string> JobCredentials(const std::string& key, const nlohmann::json& job,
                                                  const GrpcSecurity& tls);

}  // namespace shadowsync::op

#endif  // SHADOWSYNC_OPERATOR_CREDENTIALS_H_
