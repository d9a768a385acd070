// fake_kube_apiserver: the in-process fake Kubernetes API server
// (tests/util/fake_kube_apiserver.h) as a standalone process, for poking at
// it with kubectl or helm by hand, optionally with a kubelet that runs its
// StatefulSets' pods as containers (tests/operator/fake_kubelet.h; used by
// bench/containers.mjs).
//
//   bin/fake_kube_apiserver --port 6443 --kubeconfig /tmp/fake.kubeconfig &
//   KUBECONFIG=/tmp/fake.kubeconfig .tools/bin/kubectl apply -f deploy/
//
//   bin/fake_kube_apiserver --host 0.0.0.0 --kubelet-engine podman --kubelet-network NET
//     --kubelet-ip-prefix 10.213.7 --kubelet-root /tmp/nodes ...   (one command line)
//   pod i of role r (trainer 0, ps 1, syncer 2) runs at 10.213.7.(10 + 40 r + i)
//
// Prints its URL on stdout, then serves until SIGTERM or SIGINT.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "tests/operator/fake_kubelet.h"
#include "tests/util/fake_kube_apiserver.h"

int main(int argc, char** argv) {
  CLI::App app{"In-memory fake Kubernetes API server for tests"};
  shadowsync::testing::FakeKubeApiServerOptions options;
  std::string kubeconfig;
  std::string ns = "default";
  app.add_option("--host", options.host, "IPv4 address to bind")->capture_default_str();
  app.add_option("--port", options.port, "port to bind (0: any free port)")->capture_default_str();
  app.add_option("--kubeconfig", kubeconfig, "write a kubeconfig pointing at the server here");
  app.add_option("--namespace", ns, "namespace of the kubeconfig's context")->capture_default_str();
  app.add_option("--watch-history", options.watch_history, "events kept for watch replay")
      ->capture_default_str();
  app.add_flag("--log-requests", options.log_requests, "print every request to stderr");
  shadowsync::testing::FakeKubeletOptions kubelet;
  std::string ip_prefix;
  app.add_option("--kubelet-engine", kubelet.container_engine,
                 "run the StatefulSets' pods as containers with this engine (podman)");
  app.add_option("--kubelet-network", kubelet.network, "the containers' network (with DNS)");
  app.add_option("--kubelet-ip-prefix", ip_prefix,
                 "first three octets of the pods' IPs, in the network's /24");
  app.add_option("--kubelet-root", kubelet.root_dir, "pod volumes and logs: ROOT/NAMESPACE/POD/");
  CLI11_PARSE(app, argc, argv);
  if (!kubelet.container_engine.empty() &&
      (kubelet.network.empty() || ip_prefix.empty() || kubelet.root_dir.empty())) {
    std::cerr << "fake_kube_apiserver: --kubelet-engine needs --kubelet-network, "
                 "--kubelet-ip-prefix and --kubelet-root\n";
    return 2;
  }
  kubelet.pod_ip = [ip_prefix](int role, int index) {
    return absl::StrCat(ip_prefix, ".", 10 + 40 * role + index);
  };

  // Block the signals before any thread starts, then wait for one.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = shadowsync::testing::FakeKubeApiServer::Start(options);
  if (!server.ok()) {
    std::cerr << "fake_kube_apiserver: " << server.status() << "\n";
    return 1;
  }
  if (!kubeconfig.empty()) {
    if (absl::Status s = (*server)->WriteKubeconfig(kubeconfig, ns); !s.ok()) {
      std::cerr << "fake_kube_apiserver: " << s << "\n";
      return 1;
    }
  }
  std::unique_ptr<shadowsync::testing::FakeKubelet> node;
  if (!kubelet.container_engine.empty()) {
    node = std::make_unique<shadowsync::testing::FakeKubelet>(server->get(), kubelet);
  }
  std::cout << (*server)->url() << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << "fake_kube_apiserver: signal " << sig << ", stopping\n";
  node.reset();  // Stops every pod.
  server->reset();
  return 0;
}
