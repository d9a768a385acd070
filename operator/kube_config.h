// Where the operator's Kubernetes API server is and how to authenticate to
// it: a kubeconfig file outside the cluster, the pod's service account inside
// it (docs/operator.md). The loaders are pure functions; a TokenSource is
// thread-safe and shared by every request of a KubeClient.
//
//   SS_ASSIGN_OR_RETURN(KubeConfig config, ResolveConfig(absl::GetFlag(FLAGS_kubeconfig)));
//   SS_ASSIGN_OR_RETURN(auto client, KubeClient::FromConfig(config));
#ifndef SHADOWSYNC_OPERATOR_KUBE_CONFIG_H_
#define SHADOWSYNC_OPERATOR_KUBE_CONFIG_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace shadowsync::kube {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// Supplies the bearer token of every request. A file-backed source re-reads
// its file once `reload_period` has passed since the last read, because bound
// service-account tokens expire (1 h by default) and the kubelet rotates the
// file at 80 % of their life; client-go's cached file token source does the
// same every minute. A failed re-read keeps the previous token (the file may
// be mid-rotation). Thread-safe.
class TokenSource {
 public:
  using Clock = std::function<absl::Time()>;

  // A fixed token (kubeconfig `token:`).
  static std::shared_ptr<TokenSource> Static(std::string token);
  // Reads `path` now and again once `reload_period` has passed. Returns
  // NotFound / InvalidArgument naming the file if the first read fails or the
  // file is empty. `clock` is for tests.
  static absl::StatusOr<std::shared_ptr<TokenSource>> FromFile(
      std::string path, absl::Duration reload_period = absl::Minutes(1), Clock clock = &absl::Now);

  // The current token, re-reading the file when it is due.
  std::string Token();
  // The file the token comes from, "" for a static token.
  const std::string& path() const { return path_; }

 private:
  TokenSource(std::string token, std::string path, absl::Duration reload_period, Clock clock,
              absl::Time read_at);

  // Constant after construction:
  const std::string path_;
  const absl::Duration reload_period_;
  const Clock clock_;

  Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  absl::Time read_at_ ABSL_GUARDED_BY(mu_);
};

// Everything a KubeClient needs to reach the API server. PEM material comes
// either as a file (`*_file`) or inline (`*_data`, already base64-decoded);
// cpprestsdk's TLS context takes both, so inline data is never written out.
struct KubeConfig {
  std::string server;                  // "https://10.0.0.1:443"; http:// for the fake server.
  std::string ns = "default";          // The default namespace ("namespace" is a keyword).
  std::shared_ptr<TokenSource> token;  // Null: no Authorization header.
  std::string ca_file;                 // Trust roots; "" (and no ca_data): the system's.
  std::string ca_data;
  std::string client_cert_file;  // Client certificate (mutual TLS), PEM.
  std::string client_cert_data;
  std::string client_key_file;  // Its private key, PEM.
  std::string client_key_data;
  bool insecure_skip_tls_verify = false;
  std::string source;  // Where this came from, for logs: "kubeconfig /x (context c)", "in-cluster".
};

struct KubeConfigOptions {
  // How often a token file is re-read. Default: 1 minute (as client-go).
  absl::Duration token_reload_period = absl::Minutes(1);
  // The service-account mount InClusterConfig reads token, ca.crt and
  // namespace from. Overridable for tests.
  std::string service_account_dir = kServiceAccountDir;
};

// Parses a kubeconfig file: the context `context` (default: current-context),
// its cluster (server, certificate-authority[-data], insecure-skip-tls-verify)
// and user (token, tokenFile, client-certificate[-data], client-key[-data]).
// Relative file paths are resolved against the kubeconfig's directory, as
// kubectl does. Returns NotFound if the file is missing and InvalidArgument
// naming the file and the missing or bad field otherwise. exec and
// auth-provider users are rejected as Unimplemented.
absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context = "",
                                          const KubeConfigOptions& options = {});

// As LoadKubeconfig over a $KUBECONFIG-style list: for every named cluster,
// context and user and for current-context, the first file that sets it wins.
// Missing files in the list are skipped; NotFound if none exists.
absl::StatusOr<KubeConfig> LoadKubeconfigs(const std::vector<std::string>& paths,
                                           const std::string& context = "",
                                           const KubeConfigOptions& options = {});

// The pod's service account: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
// (IPv6 bracketed), <dir>/token (re-read), <dir>/ca.crt, <dir>/namespace.
// Returns NotFound if the environment variables are unset (not in a pod).
absl::StatusOr<KubeConfig> InClusterConfig(const KubeConfigOptions& options = {});

// The operator's lookup order: `kubeconfig_flag` if set, else $KUBECONFIG,
// else the in-cluster config, else ~/.kube/config. NotFound lists what was tried.
absl::StatusOr<KubeConfig> ResolveConfig(const std::string& kubeconfig_flag,
                                         const KubeConfigOptions& options = {});

}  // namespace shadowsync::kube

#endif  // SHADOWSYNC_OPERATOR_KUBE_CONFIG_H_
