// A kubelet for the fake API server: it runs the pods of every StatefulSet
// the way a node would, with one of two runtimes:
//  - processes (the default): the container's args run with `binary`, each
//    pod on its own loopback IP from `pod_ip` (so every pod listens on the
//    same ports, as in a cluster), volume paths in the args rewritten to the
//    pod's directories;
//  - containers (`container_engine`, e.g. "podman"): the pod spec's image runs
//    as a container with the spec's command, args, env, volumes (ConfigMap,
//    emptyDir, PVCs and the claim template's PVC as host directories), security
//    context (runAsNonRoot, runAsUser/Group, fsGroup, readOnlyRootFilesystem,
//    capabilities, allowPrivilegeEscalation, seccomp) and ports, on
//    `network` at the fixed IP `pod_ip`, reachable by the DNS names the
//    StatefulSet's headless Service gives it ("<pod>.<service>.<ns>.svc").
// Either way it writes the ConfigMap volume's files (and rewrites them when
// the ConfigMap changes, as the kubelet does) and keeps the Pod object
// current: phase, podIP, Ready from the readiness probe's HTTP GET,
// restartCount and lastState.terminated.exitCode and (processes) .message
// (restartPolicy Always: a container that ends is started again). It scales pods up and down with
// spec.replicas, updates the StatefulSet's status, and stops the pods of a
// deleted StatefulSet.
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
  std::string binary;    // Processes: runs the container's args (the image's entrypoint).
  std::string root_dir;  // Pod volumes and logs: <root>/<namespace>/<pod>/.
  // The IP of pod `index` of role `role_index` (shadowsync.io/role: trainer
  // 0, ps 1, syncer 2). Processes: must match the operator's address
  // template. Containers: an address of `network`'s subnet.
  std::function<std::string(int role_index, int index)> pod_ip;
  // Containers: the engine's command ("" runs processes) and the network,
  // which needs DNS (podman's dnsname plugin) for the Service names.
  std::string container_engine;
  std::string network;
};

class FakeKubelet {
 public:
  FakeKubelet(FakeKubeApiServer* api, FakeKubeletOptions options);
  ~FakeKubelet();  // Stops every pod (SIGTERM, then SIGKILL).

  // The pid of a pod's running container (with containers: of the engine's
  // `run` that waits for it), or 0. A restart changes it.
  pid_t Pid(const std::string& ns, const std::string& pod) const;
  // Sends `sig` to every running container of `role` ("trainer", "ps",
  // "syncer") of `job`.
  void Signal(const std::string& ns, const std::string& job, const std::string& role, int sig);
  // The log of a pod's container (all its runs).
  std::string Log(const std::string& ns, const std::string& pod) const;
  // Every pod's log, for failure messages.
  std::string AllLogs() const;
  // The host directory of a PersistentVolumeClaim: one per claim name, shared
  // by every pod that mounts it (as a ReadWriteMany volume would be).
  std::string ClaimDir(const std::string& ns, const std::string& claim) const;

 private:
  // A Secret (or a projected volume's Secret source) to write into `dir`:
  // `items` maps its keys to paths under dir; empty = every key, by name.
  struct SecretVolume {
    std::string secret, dir;
    std::map<std::string, std::string> items;
  };
  struct Pod {
    std::string ns, name, job, role, sts;
    int role_index = 0, index = 0;
    std::string dir, ip, config_dir, config_map, config_rv;
    std::vector<std::string> args;  // Processes: argv after the binary. Containers: the engine's.
    std::string container_name;     // Containers: the engine's name for it.
    std::string readiness_address;  // host:port of the HTTP readiness probe
    pid_t pid = 0;
    int restarts = 0;
    int last_exit = -1;
    // Processes: the file --termination-message names (the container's
    // terminationMessagePath, fresh for each start) and what the last run
    // left in it, published as lastState.terminated.message.
    std::string termination_file, last_message;
    bool ready = false;
    bool created = false;      // the Pod object exists
    bool prepared = false;     // args and volumes set up from the pod spec
    std::string config_error;  // Why the spec cannot run (CreateContainerConfigError)
    std::vector<SecretVolume> secrets;
    bool secrets_written = false;  // The container waits for its Secrets, as ContainerCreating.
    int64_t fs_group = -1;         // Group of the Secret files (containers); -1: none.
  };
  // A volume the kubelet fills: a configMap or secret, or a projected
  // volume of those. Records it in `pod`; false for any other kind.
  static bool AddFilledVolume(Pod& pod, const nlohmann::json& volume, const std::string& local);
  // The pod's Secrets into their directories (mode 0440), once all exist.
  void WriteSecrets(Pod& pod) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();
  void SyncOnce();
  void SyncPod(Pod& pod, const nlohmann::json& sts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteConfig(Pod& pod) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills pod.args (and the volume directories) from the pod spec, once.
  void PrepareProcess(Pod& pod, const nlohmann::json& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PrepareContainer(Pod& pod, const nlohmann::json& sts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartContainer(Pod& pod) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Without `wait` (containers only) the stop completes in the background.
  void StopContainer(Pod& pod, bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishPod(const Pod& pod, const nlohmann::json& sts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  bool containers() const { return !options_.container_engine.empty(); }

  FakeKubeApiServer* const api_;
  const FakeKubeletOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Pod> pods_ ABSL_GUARDED_BY(mu_);  // by "ns/name"
  std::vector<pid_t> stopping_ ABSL_GUARDED_BY(mu_);      // engine processes to reap
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_OPERATOR_FAKE_KUBELET_H_
