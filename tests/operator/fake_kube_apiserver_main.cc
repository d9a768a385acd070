// fake_kube_apiserver: the in-process fake Kubernetes API server
// (tests/util/fake_kube_apiserver.h) as a standalone process, for poking at
// it with kubectl or helm by hand.
//
//   bin/fake_kube_apiserver --port 6443 --kubeconfig /tmp/fake.kubeconfig &
//   KUBECONFIG=/tmp/fake.kubeconfig .tools/bin/kubectl apply -f deploy/
//
// Prints its URL on stdout, then serves until SIGTERM or SIGINT.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
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
  CLI11_PARSE(app, argc, argv);

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
  std::cout << (*server)->url() << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << "fake_kube_apiserver: signal " << sig << ", stopping\n";
  server->reset();
  return 0;
}
