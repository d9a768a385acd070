// A kubelet for the fake API server: it runs the pods of every StatefulSet
// as real local processes, the way a node would.
//
// For pod i of a StatefulSet it writes the ConfigMap volume's files (and
// rewrites them when the ConfigMap changes, as the kubelet does), gives the
// pod its own loopback IP from `pod_ip` (so every pod listens on the same
// ports, as in a cluster), starts the container's args with the image's
// binary, and keeps the Pod object current: phase, podIP, Ready from the
// readiness probe's HTTP GET, restartCount and lastState.terminated.exitCode
// (restartPolicy Always: a container that ends is started again). It scales
// pods up and down with spec.replicas, updates the StatefulSet's status, and
// stops the pods of a deleted StatefulSet.
#ifndef SHADOWSYNC_TESTS_OPERATOR_FAKE_KUBELET_H_
#define SHADOWSYNC_TESTS_OPERATOR_FAKE_KUBELET_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "nlohmann/json.hpp"
#include "tests/util/fake_kube_apiserver.h"

namespace shadowsync::testing {

struct FakeKubeletOptions {
  std::string binary;    // Runs the container's args (the image's entrypoint).
  std::string root_dir;  // Pod volumes and logs: <root>/<namespace>/<pod>/.
  // The IP of pod `index` of role `role_index` (shadowsync.io/role: trainer
  // 0, ps 1, syncer 2); must match the operator's address template.
  std::function<std::string(int role_index, int index)> pod_ip;
};

class FakeKubelet {
 public:
  FakeKubelet(FakeKubeApiServer* api, FakeKubeletOptions options);
  ~FakeKubelet();  // Stops every pod (SIGTERM, then SIGKILL).

  // The pid of a pod's running container, or 0.
  pid_t Pid(const std::string& ns, const std::string& pod) const;
  // Sends `sig` to every running container of `role` ("trainer", "ps",
  // "syncer") of `job`.
  void Signal(const std::string& ns, const std::string& job, const std::string& role, int sig);
  // The log of a pod's container (all its runs).
  std::string Log(const std::string& ns, const std::string& pod) const;
  // Every pod's log, for failure messages.
  std::string AllLogs() const;

 private:
  struct Pod {
    std::string ns, name, job, role, sts;
    int role_index = 0, index = 0;
    std::string dir, ip, config_dir, config_map, config_rv;
    std::vector<std::string> args;
    std::string readiness_address;  // host:port of the HTTP readiness probe
    pid_t pid = 0;
    int restarts = 0;
    int last_exit = -1;
    bool ready = false;
    bool created = false;  // the Pod object exists
  };
  void Loop();
  void SyncOnce();
  void SyncPod(Pod& pod, const nlohmann::json& sts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteConfig(Pod& pod) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartContainer(Pod& pod) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopContainer(Pod& pod) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishPod(const Pod& pod, const nlohmann::json& sts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  FakeKubeApiServer* const api_;
  const FakeKubeletOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Pod> pods_ ABSL_GUARDED_BY(mu_);  // by "ns/name"
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_OPERATOR_FAKE_KUBELET_H_
