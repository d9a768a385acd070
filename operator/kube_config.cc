#include "operator/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shadowsync::kube {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return contents.str();
}

// Reads a token file: whitespace around the token (a trailing newline from
// `echo`) is not part of it.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::string token, ReadWholeFile(path));
  token = std::string(absl::StripAsciiWhitespace(token));
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  return token;
}

}  // namespace

// ---------------------------------------------------------------------------
// TokenSource

TokenSource::TokenSource(std::string token, std::string path, absl::Duration reload_period,
                         Clock clock, absl::Time read_at)
    : path_(std::move(path)),
      reload_period_(reload_period),
      clock_(std::move(clock)),
      token_(std::move(token)),
      read_at_(read_at) {}

std::shared_ptr<TokenSource> TokenSource::Static(std::string token) {
  return std::shared_ptr<TokenSource>(new TokenSource(
      std::move(token), "", absl::InfiniteDuration(), &absl::Now, absl::InfinitePast()));
}

absl::StatusOr<std::shared_ptr<TokenSource>> TokenSource::FromFile(std::string path,
                                                                   absl::Duration reload_period,
                                                                   Clock clock) {
  SS_ASSIGN_OR_RETURN(std::string token, ReadTokenFile(path));
  const absl::Time now = clock();
  return std::shared_ptr<TokenSource>(
      new TokenSource(std::move(token), std::move(path), reload_period, std::move(clock), now));
}

std::string TokenSource::Token() {
  MutexLock lock(&mu_);
  if (path_.empty()) return token_;
  const absl::Time now = clock_();
  if (now - read_at_ < reload_period_) return token_;
  absl::StatusOr<std::string> fresh = ReadTokenFile(path_);
  if (fresh.ok()) {
    token_ = *std::move(fresh);
  } else {
    // Keep serving the old token: it is usually still valid for a while, and
    // the next request retries the read.
    LOG(WARNING) << "kube: re-reading the token failed, keeping the old one: " << fresh.status();
  }
  read_at_ = now;
  return token_;
}

// ---------------------------------------------------------------------------
// Kubeconfig

namespace {

// One parsed kubeconfig file.
struct KubeconfigFile {
  std::string path;
  fs::path dir;  // Relative paths inside the file are relative to this.
  YAML::Node root;
};

// The named entry `name` of the list `list_key` ("clusters", "contexts",
// "users"): its inner map (e.g. the value of `cluster:`) and its file.
struct Entry {
  YAML::Node node;
  const KubeconfigFile* file = nullptr;
};

std::optional<Entry> FindNamed(const std::vector<KubeconfigFile>& files,
                               const std::string& list_key, const std::string& inner_key,
                               const std::string& name) {
  for (const KubeconfigFile& f : files) {
    const YAML::Node list = f.root[list_key];
    if (!list || !list.IsSequence()) continue;
    for (const YAML::Node& item : list) {
      if (item.IsMap() && item["name"] && item["name"].as<std::string>() == name) {
        return Entry{item[inner_key] ? item[inner_key] : YAML::Node(YAML::NodeType::Map), &f};
      }
    }
  }
  return std::nullopt;
}

std::string Str(const YAML::Node& map, const char* key) {
  const YAML::Node v = map[key];
  return v && v.IsScalar() ? v.as<std::string>() : "";
}

std::string Resolve(const KubeconfigFile& file, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (file.dir / p).lexically_normal().string();
}

absl::StatusOr<std::string> DecodeData(const KubeconfigFile& file, const std::string& field,
                                       const std::string& encoded) {
  std::string decoded;
  if (!absl::Base64Unescape(absl::StripAsciiWhitespace(encoded), &decoded)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", file.path, ": ", field, " is not valid base64"));
  }
  return decoded;
}

// Fills `*file_out` or `*data_out` from "<field>" (a path) or "<field>-data".
absl::Status FileOrData(const Entry& e, const std::string& field, std::string* file_out,
                        std::string* data_out) {
  const std::string data = Str(e.node, (field + "-data").c_str());
  if (!data.empty()) {
    SS_ASSIGN_OR_RETURN(*data_out, DecodeData(*e.file, field + "-data", data));
    return absl::OkStatus();
  }
  *file_out = Resolve(*e.file, Str(e.node, field.c_str()));
  return absl::OkStatus();
}

absl::StatusOr<KubeConfig> BuildFromFiles(const std::vector<KubeconfigFile>& files,
                                          const std::string& context,
                                          const KubeConfigOptions& options) {
  const std::string where =
      files.size() == 1 ? files[0].path
                        : absl::StrJoin(files, ":", [](std::string* out, const KubeconfigFile& f) {
                            out->append(f.path);
                          });
  std::string context_name = context;
  if (context_name.empty()) {
    for (const KubeconfigFile& f : files) {
      context_name = Str(f.root, "current-context");
      if (!context_name.empty()) break;
    }
  }
  if (context_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", where, ": no context given and no current-context set"));
  }
  const std::optional<Entry> ctx = FindNamed(files, "contexts", "context", context_name);
  if (!ctx) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", where, ": context \"",
                                                   context_name, "\" not found in contexts"));
  }
  const std::string cluster_name = Str(ctx->node, "cluster");
  if (cluster_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", ctx->file->path, ": context \"",
                                                   context_name, "\" has no cluster"));
  }
  const std::optional<Entry> cluster = FindNamed(files, "clusters", "cluster", cluster_name);
  if (!cluster) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", where, ": cluster \"",
                                                   cluster_name, "\" not found in clusters"));
  }

  KubeConfig config;
  config.source = absl::StrCat("kubeconfig ", where, " (context ", context_name, ")");
  config.server = Str(cluster->node, "server");
  if (config.server.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kubeconfig ", cluster->file->path, ": cluster \"", cluster_name, "\" has no server"));
  }
  while (absl::EndsWith(config.server, "/")) config.server.pop_back();
  if (!absl::StartsWith(config.server, "https://") && !absl::StartsWith(config.server, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", cluster->file->path,
                                                   ": cluster \"", cluster_name, "\" server \"",
                                                   config.server, "\" is not an http(s) URL"));
  }
  const std::string ns = Str(ctx->node, "namespace");
  if (!ns.empty()) config.ns = ns;
  config.insecure_skip_tls_verify = Str(cluster->node, "insecure-skip-tls-verify") == "true";
  SS_RETURN_IF_ERROR(
      FileOrData(*cluster, "certificate-authority", &config.ca_file, &config.ca_data));

  const std::string user_name = Str(ctx->node, "user");
  if (user_name.empty()) return config;  // Anonymous.
  const std::optional<Entry> user = FindNamed(files, "users", "user", user_name);
  if (!user) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", where, ": user \"", user_name, "\" not found in users"));
  }
  for (const char* unsupported : {"exec", "auth-provider"}) {
    if (user->node[unsupported]) {
      return absl::UnimplementedError(absl::StrCat("kubeconfig ", user->file->path, ": user \"",
                                                   user_name, "\" uses ", unsupported,
                                                   ", which is not supported; use a token"));
    }
  }
  SS_RETURN_IF_ERROR(
      FileOrData(*user, "client-certificate", &config.client_cert_file, &config.client_cert_data));
  SS_RETURN_IF_ERROR(
      FileOrData(*user, "client-key", &config.client_key_file, &config.client_key_data));
  const bool has_cert = !config.client_cert_file.empty() || !config.client_cert_data.empty();
  const bool has_key = !config.client_key_file.empty() || !config.client_key_data.empty();
  if (has_cert != has_key) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", user->file->path, ": user \"", user_name, "\" has ",
                     has_cert ? "client-certificate but no client-key"
                              : "client-key but no client-certificate"));
  }
  const std::string token = Str(user->node, "token");
  const std::string token_file = Resolve(*user->file, Str(user->node, "tokenFile"));
  if (!token.empty()) {
    config.token = TokenSource::Static(token);
  } else if (!token_file.empty()) {
    absl::StatusOr<std::shared_ptr<TokenSource>> source =
        TokenSource::FromFile(token_file, options.token_reload_period);
    if (!source.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", user->file->path, ": user \"",
                                                     user_name,
                                                     "\" tokenFile: ", source.status().message()));
    }
    config.token = *std::move(source);
  }
  return config;
}

absl::StatusOr<KubeconfigFile> ParseKubeconfigFile(const std::string& path) {
  if (!fs::exists(path))
    return absl::NotFoundError(absl::StrCat("kubeconfig ", path, " not found"));
  KubeconfigFile file;
  file.path = path;
  file.dir = fs::absolute(path).parent_path();
  try {
    file.root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
  if (!file.root.IsMap() && !file.root.IsNull()) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": not a YAML map"));
  }
  return file;
}

absl::StatusOr<KubeConfig> LoadParsed(const std::vector<std::string>& paths,
                                      const std::string& context,
                                      const KubeConfigOptions& options) {
  std::vector<KubeconfigFile> files;
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    absl::StatusOr<KubeconfigFile> file = ParseKubeconfigFile(path);
    if (absl::IsNotFound(file.status()) && paths.size() > 1) continue;
    if (!file.ok()) return file.status();
    files.push_back(*std::move(file));
  }
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat("none of the kubeconfig files exists: ", absl::StrJoin(paths, ":")));
  }
  try {
    return BuildFromFiles(files, context, options);
  } catch (const YAML::Exception& e) {  // A field of the wrong shape.
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", absl::StrJoin(paths, ":"), ": ", e.what()));
  }
}

const char* Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context,
                                          const KubeConfigOptions& options) {
  return LoadParsed({path}, context, options);
}

absl::StatusOr<KubeConfig> LoadKubeconfigs(const std::vector<std::string>& paths,
                                           const std::string& context,
                                           const KubeConfigOptions& options) {
  return LoadParsed(paths, context, options);
}

absl::StatusOr<KubeConfig> InClusterConfig(const KubeConfigOptions& options) {
  const std::string host = Getenv("KUBERNETES_SERVICE_HOST");
  const std::string port = Getenv("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return absl::NotFoundError(
        "not running in a pod: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is unset");
  }
  const fs::path dir = options.service_account_dir;
  KubeConfig config;
  config.source = "in-cluster";
  // An IPv6 literal needs brackets in a URL (client-go uses net.JoinHostPort).
  const bool ipv6 = absl::StrContains(host, ':') && !absl::StartsWith(host, "[");
  config.server = absl::StrCat("https://", ipv6 ? "[" : "", host, ipv6 ? "]" : "", ":", port);
  absl::StatusOr<std::shared_ptr<TokenSource>> token =
      TokenSource::FromFile((dir / "token").string(), options.token_reload_period);
  if (!token.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("in-cluster config: service account token: ", token.status().message()));
  }
  config.token = *std::move(token);
  config.ca_file = (dir / "ca.crt").string();
  if (!fs::exists(config.ca_file)) {
    return absl::FailedPreconditionError(
        absl::StrCat("in-cluster config: CA bundle ", config.ca_file, " not found"));
  }
  // The namespace file is optional (client-go falls back to "default").
  if (absl::StatusOr<std::string> ns = ReadWholeFile((dir / "namespace").string()); ns.ok()) {
    const std::string trimmed(absl::StripAsciiWhitespace(*ns));
    if (!trimmed.empty()) config.ns = trimmed;
  }
  return config;
}

absl::StatusOr<KubeConfig> ResolveConfig(const std::string& kubeconfig_flag,
                                         const KubeConfigOptions& options) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(kubeconfig_flag, "", options);
  const std::string env = Getenv("KUBECONFIG");
  if (!env.empty()) {
    return LoadKubeconfigs(absl::StrSplit(env, ':', absl::SkipEmpty()), "", options);
  }
  absl::StatusOr<KubeConfig> in_cluster = InClusterConfig(options);
  if (!absl::IsNotFound(in_cluster.status())) return in_cluster;
  const std::string home = Getenv("HOME");
  const std::string default_path = home.empty() ? "" : home + "/.kube/config";
  if (!default_path.empty() && fs::exists(default_path))
    return LoadKubeconfig(default_path, "", options);
  return absl::NotFoundError(absl::StrCat(
      "no Kubernetes configuration: no --kubeconfig, $KUBECONFIG unset, not in a pod (",
      in_cluster.status().message(), "), and ",
      default_path.empty() ? "$HOME unset" : default_path + " not found"));
}

}  // namespace shadowsync::kube
