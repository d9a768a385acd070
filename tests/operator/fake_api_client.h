// A KubeClient talking to a fake API server through a kubeconfig, as the
// operator would: for the client-layer tests.
#ifndef SHADOWSYNC_TESTS_OPERATOR_FAKE_API_CLIENT_H_
#define SHADOWSYNC_TESTS_OPERATOR_FAKE_API_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "operator/kube_client.h"
#include "operator/kube_config.h"
#include "tests/util/fake_kube_apiserver.h"

namespace shadowsync::kube {

// Writes a kubeconfig for `api` to `kubeconfig_path`, loads it and connects.
inline absl::StatusOr<std::unique_ptr<KubeClient>> ConnectToFake(
    const testing::FakeKubeApiServer& api, const std::string& kubeconfig_path) {
  SS_RETURN_IF_ERROR(api.WriteKubeconfig(kubeconfig_path));
  SS_ASSIGN_OR_RETURN(KubeConfig config, LoadKubeconfig(kubeconfig_path));
  return KubeClient::FromConfig(std::move(config));
}

}  // namespace shadowsync::kube

#endif  // SHADOWSYNC_TESTS_OPERATOR_FAKE_API_CLIENT_H_
