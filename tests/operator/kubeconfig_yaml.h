// Minimal kubeconfig files for the client-layer tests.
#ifndef SHADOWSYNC_TESTS_OPERATOR_KUBECONFIG_YAML_H_
#define SHADOWSYNC_TESTS_OPERATOR_KUBECONFIG_YAML_H_

#include <string>
#include <string_view>

namespace shadowsync::kube {

// A kubeconfig whose one context "c" joins cluster "k", given by the flow-map
// entries `cluster` (e.g. "server: 'https://k'"), and, when `user` is not
// empty, user "u", given by `user` (e.g. "tokenFile: token").
inline std::string OneContextKubeconfig(std::string_view cluster, std::string_view user = "") {
  std::string yaml = "current-context: c\nclusters: [{name: k, cluster: {";
  yaml += cluster;
  yaml += "}}]\n";
  if (user.empty()) return yaml + "contexts: [{name: c, context: {cluster: k}}]\n";
  yaml += "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {";
  yaml += user;
  return yaml + "}}]\n";
}

}  // namespace shadowsync::kube

#endif  // SHADOWSYNC_TESTS_OPERATOR_KUBECONFIG_YAML_H_
