#include "operator/kube_config.h"

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/operator/kubeconfig_yaml.h"
#include "tests/util/test_util.h"

namespace shadowsync::kube {
namespace {

using ::shadowsync::testing::ScratchDir;
using ::shadowsync::testing::StatusIs;
using ::shadowsync::testing::WriteFile;
using ::testing::HasSubstr;

// Saves and restores the environment variables the loaders read.
class KubeConfigTest : public ::testing::Test {
 protected:
  KubeConfigTest() {
    for (const char* name :
         {"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "HOME"}) {
      const char* v = std::getenv(name);
      saved_[name] = v == nullptr ? std::nullopt : std::optional<std::string>(v);
      unsetenv(name);
    }
  }
  ~KubeConfigTest() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

  // A service-account dir with token, ca.crt and namespace.
  std::string MakeServiceAccountDir(const std::string& ns = "ml") {
    const std::string sa = dir_.File("sa");
    std::filesystem::create_directories(sa);
    WriteFile(sa + "/token", "sa-token\n");
    WriteFile(sa + "/ca.crt", "-----BEGIN CERTIFICATE-----\n");
    if (!ns.empty()) WriteFile(sa + "/namespace", ns);
    return sa;
  }

  ScratchDir dir_;
  std::map<std::string, std::optional<std::string>> saved_;
};

constexpr char kKubeconfig[] = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: prod-cluster
  cluster:
    server: https://prod.example:6443
    certificate-authority: certs/ca.pem
- name: dev-cluster
  cluster:
    server: https://dev.example:6443/
    insecure-skip-tls-verify: true
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: team-a}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
users:
- name: dev-user
  user: {token: dev-token}
- name: prod-user
  user:
    client-certificate: certs/client.pem
    client-key: /abs/client-key.pem
)";

TEST_F(KubeConfigTest, CurrentContextGivesServerNamespaceAndToken) {
  const std::string path = dir_.File("config");
  WriteFile(path, kKubeconfig);
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(path);
  SS_ASSERT_OK(c);
  EXPECT_EQ(c->server, "https://dev.example:6443");  // Trailing slash dropped.
  EXPECT_EQ(c->ns, "team-a");
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  ASSERT_NE(c->token, nullptr);
  EXPECT_EQ(c->token->Token(), "dev-token");
  EXPECT_THAT(c->source, HasSubstr("context dev"));
}

TEST_F(KubeConfigTest, ExplicitContextAndRelativePathsResolveAgainstTheFile) {
  const std::string path = dir_.File("config");
  WriteFile(path, kKubeconfig);
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(path, "prod");
  SS_ASSERT_OK(c);
  EXPECT_EQ(c->server, "https://prod.example:6443");
  EXPECT_EQ(c->ns, "default");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->ca_file, (dir_.path() / "certs/ca.pem").string());
  EXPECT_EQ(c->client_cert_file, (dir_.path() / "certs/client.pem").string());
  EXPECT_EQ(c->client_key_file, "/abs/client-key.pem");
  EXPECT_EQ(c->token, nullptr);
}

TEST_F(KubeConfigTest, DataFieldsAreBase64Decoded) {
  const std::string path = dir_.File("config");
  WriteFile(path,
            OneContextKubeconfig("server: 'https://k:443', certificate-authority-data: " +
                                     absl::Base64Escape("CA PEM"),
                                 "client-certificate-data: " + absl::Base64Escape("CERT PEM") +
                                     ", client-key-data: " + absl::Base64Escape("KEY PEM")));
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(path);
  SS_ASSERT_OK(c);
  EXPECT_EQ(c->ca_data, "CA PEM");
  EXPECT_EQ(c->client_cert_data, "CERT PEM");
  EXPECT_EQ(c->client_key_data, "KEY PEM");
  EXPECT_TRUE(c->ca_file.empty());
}

TEST_F(KubeConfigTest, TokenFileIsReadAndReloaded) {
  const std::string token_path = dir_.File("token");
  WriteFile(token_path, "first\n");
  const std::string path = dir_.File("config");
  WriteFile(path, OneContextKubeconfig("server: 'http://127.0.0.1:1'", "tokenFile: token"));
  KubeConfigOptions options;
  options.token_reload_period = absl::ZeroDuration();  // Re-read on every use.
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(path, "", options);
  SS_ASSERT_OK(c);
  ASSERT_NE(c->token, nullptr);
  EXPECT_EQ(c->token->path(), token_path);
  EXPECT_EQ(c->token->Token(), "first");
  WriteFile(token_path, "second");
  EXPECT_EQ(c->token->Token(), "second");
}

TEST_F(KubeConfigTest, ErrorsNameTheFileAndTheField) {
  const std::string path = dir_.File("config");
  EXPECT_THAT(LoadKubeconfig(path), StatusIs(absl::StatusCode::kNotFound, path));

  WriteFile(path, kKubeconfig);
  EXPECT_THAT(LoadKubeconfig(path, "staging"),
              StatusIs(absl::StatusCode::kInvalidArgument, "context \"staging\" not found"));

  WriteFile(path, "clusters: []\n");
  EXPECT_THAT(LoadKubeconfig(path),
              StatusIs(absl::StatusCode::kInvalidArgument, "current-context"));

  WriteFile(path, OneContextKubeconfig("certificate-authority: x"));
  EXPECT_THAT(LoadKubeconfig(path), StatusIs(absl::StatusCode::kInvalidArgument, "has no server"));
  EXPECT_THAT(LoadKubeconfig(path), StatusIs(absl::StatusCode::kInvalidArgument, path));

  WriteFile(path,
            OneContextKubeconfig("server: 'https://k', certificate-authority-data: '!!notbase64'"));
  EXPECT_THAT(LoadKubeconfig(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             "certificate-authority-data is not valid base64"));

  WriteFile(path, OneContextKubeconfig("server: 'https://k'", "client-certificate: c.pem"));
  EXPECT_THAT(LoadKubeconfig(path), StatusIs(absl::StatusCode::kInvalidArgument, "no client-key"));

  WriteFile(path, OneContextKubeconfig("server: 'https://k'", "tokenFile: /nonexistent/token"));
  EXPECT_THAT(LoadKubeconfig(path),
              StatusIs(absl::StatusCode::kInvalidArgument, "tokenFile: cannot open /nonexistent"));

  WriteFile(path, OneContextKubeconfig("server: 'https://k'", "exec: {command: aws}"));
  EXPECT_THAT(LoadKubeconfig(path), StatusIs(absl::StatusCode::kUnimplemented, "exec"));

  WriteFile(path, "current-context: [unclosed\n");
  EXPECT_THAT(LoadKubeconfig(path), StatusIs(absl::StatusCode::kInvalidArgument, path));
}

TEST_F(KubeConfigTest, MergedFilesFirstSetterWins) {
  const std::string a = dir_.File("a");
  const std::string b = dir_.File("b");
  WriteFile(a,
            "current-context: c\n"
            "users: [{name: u, user: {token: from-a}}]\n");
  WriteFile(b,
            "current-context: other\n"
            "clusters: [{name: k, cluster: {server: 'https://b:443'}}]\n"
            "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
            "users: [{name: u, user: {token: from-b}}]\n");
  absl::StatusOr<KubeConfig> c = LoadKubeconfigs({a, dir_.File("missing"), b});
  SS_ASSERT_OK(c);
  EXPECT_EQ(c->server, "https://b:443");
  EXPECT_EQ(c->token->Token(), "from-a");
  EXPECT_THAT(LoadKubeconfigs({dir_.File("x"), dir_.File("y")}),
              StatusIs(absl::StatusCode::kNotFound, "none of the kubeconfig files"));
}

TEST_F(KubeConfigTest, InClusterReadsEnvironmentAndServiceAccount) {
  KubeConfigOptions options;
  options.service_account_dir = MakeServiceAccountDir();
  EXPECT_THAT(InClusterConfig(options),
              StatusIs(absl::StatusCode::kNotFound, "not running in a pod"));

  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  absl::StatusOr<KubeConfig> c = InClusterConfig(options);
  SS_ASSERT_OK(c);
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->ns, "ml");
  EXPECT_EQ(c->token->Token(), "sa-token");
  EXPECT_EQ(c->ca_file, options.service_account_dir + "/ca.crt");
  EXPECT_EQ(c->source, "in-cluster");

  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  c = InClusterConfig(options);
  SS_ASSERT_OK(c);
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
}

TEST_F(KubeConfigTest, InClusterWithoutTokenFails) {
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  KubeConfigOptions options;
  options.service_account_dir = MakeServiceAccountDir("");
  std::filesystem::remove(options.service_account_dir + "/token");
  EXPECT_THAT(InClusterConfig(options),
              StatusIs(absl::StatusCode::kFailedPrecondition, "service account token"));
  WriteFile(options.service_account_dir + "/token", "t");
  absl::StatusOr<KubeConfig> c = InClusterConfig(options);
  SS_ASSERT_OK(c);
  EXPECT_EQ(c->ns, "default");  // No namespace file.
}

TEST_F(KubeConfigTest, ResolveOrderIsFlagEnvInClusterHome) {
  const auto write = [&](const std::string& path, const std::string& server) {
    WriteFile(path,
              "current-context: c\n"
              "clusters: [{name: k, cluster: {server: '" +
                  server +
                  "'}}]\n"
                  "contexts: [{name: c, context: {cluster: k}}]\n");
  };
  std::filesystem::create_directories(dir_.File("home/.kube"));
  write(dir_.File("flag"), "https://flag:1");
  write(dir_.File("env"), "https://env:1");
  write(dir_.File("home/.kube/config"), "https://home:1");
  KubeConfigOptions options;
  options.service_account_dir = MakeServiceAccountDir();

  EXPECT_THAT(ResolveConfig("", options), StatusIs(absl::StatusCode::kNotFound, "$HOME unset"));
  setenv("HOME", dir_.File("home").c_str(), 1);
  EXPECT_EQ(ResolveConfig("", options)->server, "https://home:1");
  setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  EXPECT_EQ(ResolveConfig("", options)->server, "https://10.0.0.1:6443");
  setenv("KUBECONFIG", dir_.File("env").c_str(), 1);
  EXPECT_EQ(ResolveConfig("", options)->server, "https://env:1");
  EXPECT_EQ(ResolveConfig(dir_.File("flag"), options)->server, "https://flag:1");
  EXPECT_THAT(ResolveConfig(dir_.File("nope"), options),
              StatusIs(absl::StatusCode::kNotFound, "nope"));
}

// ---------------------------------------------------------------------------
// TokenSource

TEST(TokenSourceTest, StaticTokenNeverChanges) {
  auto source = TokenSource::Static("abc");
  EXPECT_EQ(source->Token(), "abc");
  EXPECT_EQ(source->path(), "");
}

TEST(TokenSourceTest, FileIsReReadOncePerPeriod) {
  ScratchDir dir;
  const std::string path = dir.File("token");
  WriteFile(path, "  one \n");
  absl::Time now = absl::UnixEpoch();
  absl::StatusOr<std::shared_ptr<TokenSource>> source =
      TokenSource::FromFile(path, absl::Minutes(1), [&now] { return now; });
  SS_ASSERT_OK(source);
  EXPECT_EQ((*source)->Token(), "one");

  WriteFile(path, "two");
  now += absl::Seconds(59);
  EXPECT_EQ((*source)->Token(), "one");  // Cached until the period passes.
  now += absl::Seconds(1);
  EXPECT_EQ((*source)->Token(), "two");

  // A failed re-read keeps the old token, and the next period tries again.
  std::filesystem::remove(path);
  now += absl::Minutes(1);
  EXPECT_EQ((*source)->Token(), "two");
  WriteFile(path, "three");
  now += absl::Seconds(30);
  EXPECT_EQ((*source)->Token(), "two");
  now += absl::Seconds(30);
  EXPECT_EQ((*source)->Token(), "three");
}

TEST(TokenSourceTest, MissingOrEmptyFileIsAnError) {
  ScratchDir dir;
  EXPECT_THAT(TokenSource::FromFile(dir.File("none")),
              StatusIs(absl::StatusCode::kNotFound, dir.File("none")));
  WriteFile(dir.File("empty"), "\n");
  EXPECT_THAT(TokenSource::FromFile(dir.File("empty")),
              StatusIs(absl::StatusCode::kInvalidArgument, "is empty"));
}

}  // namespace
}  // namespace shadowsync::kube
