// A KubeClient talking to a fake API server through a kubeconfig, as the
// operator would: for the client-layer tests. Also what those tests share: a
// fixture holding both, ConfigMaps to store, and polling.
#ifndef SHADOWSYNC_TESTS_OPERATOR_FAKE_API_CLIENT_H_
#define SHADOWSYNC_TESTS_OPERATOR_FAKE_API_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "operator/kube_client.h"
#include "operator/kube_config.h"
#include "tests/util/fake_kube_apiserver.h"
#include "tests/util/test_util.h"

namespace shadowsync::kube {

// Writes a kubeconfig for `api` to `kubeconfig_path`, loads it and connects.
inline absl::StatusOr<std::unique_ptr<KubeClient>> ConnectToFake(
    const testing::FakeKubeApiServer& api, const std::string& kubeconfig_path) {
  SS_RETURN_IF_ERROR(api.WriteKubeconfig(kubeconfig_path));
  SS_ASSIGN_OR_RETURN(KubeConfig config, LoadKubeconfig(kubeconfig_path));
  return KubeClient::FromConfig(std::move(config));
}

// Starts a fake API server (with `options`) and connects client_ to it
// before each test.
class FakeApiTest : public ::testing::Test {
 protected:
  explicit FakeApiTest(testing::FakeKubeApiServerOptions options = {})
      : options_(std::move(options)) {}

  void SetUp() override {
    auto api = testing::FakeKubeApiServer::Start(options_);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = *std::move(api);
    auto client = ConnectToFake(*api_, dir_.File("kubeconfig"));
    SS_ASSERT_OK(client);
    client_ = *std::move(client);
  }

  testing::ScratchDir dir_;
  std::unique_ptr<testing::FakeKubeApiServer> api_;
  std::unique_ptr<KubeClient> client_;

 private:
  testing::FakeKubeApiServerOptions options_;
};

inline constexpr char kConfigMaps[] = "/api/v1/namespaces/default/configmaps";

// A ConfigMap `name` holding data {key: `value`}, with `labels`.
inline Json ConfigMap(const std::string& name, const std::string& value = "v",
                      const Json& labels = Json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"data", {{"key", value}}}};
}

// Polls `pred` until it holds or `timeout` passes.
inline bool Eventually(const std::function<bool()>& pred,
                       absl::Duration timeout = absl::Seconds(15)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return pred();
}

}  // namespace shadowsync::kube

#endif  // SHADOWSYNC_TESTS_OPERATOR_FAKE_API_CLIENT_H_
