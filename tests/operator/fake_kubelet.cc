#include "tests/operator/fake_kubelet.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/util/http_get.h"

namespace shadowsync::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int RoleIndex(const std::string& role) { return role == "trainer" ? 0 : role == "ps" ? 1 : 2; }

std::string Label(const json& o, const std::string& key) {
  const json* labels = o.contains("metadata") && o["metadata"].contains("labels")
                           ? &o["metadata"]["labels"]
                           : nullptr;
  if (labels == nullptr || !labels->contains(key)) return "";
  return (*labels)[key].get<std::string>();
}

// The readiness probe: GET http://`address``path` answers 200.
bool Probe(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  std::string body;
  return colon != std::string::npos &&
         HttpGet(address.substr(0, colon), std::stoi(address.substr(colon + 1)), path, &body,
                 /*timeout_seconds=*/1) == 200;
}

}  // namespace

FakeKubelet::FakeKubelet(FakeKubeApiServer* api, FakeKubeletOptions options)
    : api_(api), options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

FakeKubelet::~FakeKubelet() {
  stop_.store(true);
  thread_.join();
  MutexLock l(&mu_);
  for (auto& [key, pod] : pods_) StopContainer(pod);
}

void FakeKubelet::Loop() {
  while (!stop_.load()) {
    SyncOnce();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void FakeKubelet::SyncOnce() {
  absl::StatusOr<std::vector<json>> sets = api_->List("/apis/apps/v1/statefulsets");
  if (!sets.ok()) return;
  MutexLock l(&mu_);
  std::set<std::string> wanted;
  for (const json& sts : *sets) {
    const std::string ns = sts["metadata"]["namespace"], name = sts["metadata"]["name"];
    const int replicas = sts["spec"].value("replicas", 1);
    for (int i = 0; i < replicas; ++i) {
      const std::string pod_name = absl::StrCat(name, "-", i);
      const std::string key = ns + "/" + pod_name;
      wanted.insert(key);
      auto [it, added] = pods_.try_emplace(key);
      Pod& pod = it->second;
      if (added) {
        pod.ns = ns;
        pod.name = pod_name;
        pod.sts = name;
        pod.job = Label(sts["spec"]["template"], "shadowsync.io/job-name");
        pod.role = Label(sts["spec"]["template"], "shadowsync.io/role");
        pod.role_index = RoleIndex(pod.role);
        pod.index = i;
        pod.dir = absl::StrCat(options_.root_dir, "/", ns, "/", pod_name);
        pod.ip = options_.pod_ip(pod.role_index, i);
      }
      SyncPod(pod, sts);
    }
    // The StatefulSet's status, as its controller would write it.
    int ready = 0, current = 0;
    for (auto& [key, pod] : pods_) {
      if (pod.ns != ns || pod.sts != name || !wanted.count(key)) continue;
      ++current;
      ready += pod.ready ? 1 : 0;
    }
    const json status = {{"observedGeneration", sts["metadata"].value("generation", 1)},
                         {"replicas", current},
                         {"currentReplicas", current},
                         {"updatedReplicas", current},
                         {"readyReplicas", ready},
                         {"availableReplicas", ready}};
    if (sts.value("status", json::object()) != status) {
      json updated = sts;
      updated["status"] = status;
      (void)api_->UpdateStatus(
          absl::StrCat("/apis/apps/v1/namespaces/", ns, "/statefulsets/", name), updated);
    }
  }
  for (auto it = pods_.begin(); it != pods_.end();) {
    if (wanted.count(it->first)) {
      ++it;
      continue;
    }
    StopContainer(it->second);
    (void)api_->Delete(
        absl::StrCat("/api/v1/namespaces/", it->second.ns, "/pods/", it->second.name));
    it = pods_.erase(it);
  }
}

void FakeKubelet::SyncPod(Pod& pod, const json& sts) {
  const json& spec = sts["spec"]["template"]["spec"];
  const json& container = spec["containers"][0];
  if (pod.args.empty()) {
    // Every volume becomes a directory of the pod; args naming a mount
    // path name that directory instead.
    std::map<std::string, std::string> mounts;  // mountPath -> local dir
    for (const json& m : container.value("volumeMounts", json::array())) {
      const std::string local = absl::StrCat(pod.dir, "/volumes/", m["name"].get<std::string>());
      fs::create_directories(local);
      mounts[m["mountPath"]] = local;
      for (const json& v : spec.value("volumes", json::array())) {
        if (v["name"] == m["name"] && v.contains("configMap")) {
          pod.config_map = v["configMap"]["name"];
          pod.config_dir = local;
        }
      }
    }
    for (const json& a : container.value("args", json::array())) {
      std::string arg = a.get<std::string>();
      for (const auto& [path, local] : mounts) {
        // One mount per argument: the rewritten path lies under the pod's
        // directory, which another mount path (e.g. /tmp) may prefix.
        if (arg.find("=" + path + "/") != std::string::npos) {
          arg = absl::StrReplaceAll(arg, {{"=" + path + "/", "=" + local + "/"}});
          break;
        }
        if (arg.ends_with("=" + path)) {
          arg = arg.substr(0, arg.size() - path.size()) + local;
          break;
        }
      }
      arg = absl::StrReplaceAll(arg, {{"0.0.0.0:", pod.ip + ":"}});
      pod.args.push_back(arg);
    }
    for (const json& port : container.value("ports", json::array())) {
      if (port.value("name", "") == "metrics") {
        pod.readiness_address = absl::StrCat(pod.ip, ":", port["containerPort"].get<int>());
      }
    }
  }
  WriteConfig(pod);
  // Reap a container that ended; restartPolicy Always starts it again.
  if (pod.pid > 0) {
    int status = 0;
    if (waitpid(pod.pid, &status, WNOHANG) == pod.pid) {
      pod.last_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pod.pid = 0;
      pod.ready = false;
      ++pod.restarts;
    }
  }
  if (pod.pid == 0 && !pod.config_rv.empty()) StartContainer(pod);
  pod.ready =
      pod.pid > 0 && !pod.readiness_address.empty() && Probe(pod.readiness_address, "/healthz");
  PublishPod(pod, sts);
}

void FakeKubelet::WriteConfig(Pod& pod) {
  if (pod.config_map.empty()) return;
  absl::StatusOr<json> cm =
      api_->Get(absl::StrCat("/api/v1/namespaces/", pod.ns, "/configmaps/", pod.config_map));
  if (!cm.ok()) return;  // Not created yet: the pod waits, as ContainerCreating.
  const std::string rv = (*cm)["metadata"]["resourceVersion"];
  if (rv == pod.config_rv) return;
  const json data = cm->value("data", json::object());
  for (const auto& [file, content] : data.items()) {
    const std::string path = pod.config_dir + "/" + file;
    std::ofstream(path + ".tmp") << content.get<std::string>();
    fs::rename(path + ".tmp", path);  // Atomic, like the kubelet's symlink swap.
  }
  pod.config_rv = rv;
}

void FakeKubelet::StartContainer(Pod& pod) {
  const std::string log = pod.dir + "/container.log";
  std::vector<std::string> argv = {options_.binary};
  argv.insert(argv.end(), pod.args.begin(), pod.args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setpgid(0, 0);
    setenv("POD_NAME", pod.name.c_str(), 1);
    setenv("POD_NAMESPACE", pod.ns.c_str(), 1);
    setenv("HOSTNAME", pod.name.c_str(), 1);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  pod.pid = pid;
}

void FakeKubelet::StopContainer(Pod& pod) {
  if (pod.pid <= 0) return;
  kill(pod.pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pod.pid, nullptr, WNOHANG) == pod.pid) {
      pod.pid = 0;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  kill(-pod.pid, SIGKILL);
  kill(pod.pid, SIGKILL);
  waitpid(pod.pid, nullptr, 0);
  pod.pid = 0;
}

void FakeKubelet::PublishPod(const Pod& pod, const json& sts) {
  json container_status = {{"name", sts["spec"]["template"]["spec"]["containers"][0]["name"]},
                           {"ready", pod.ready},
                           {"restartCount", pod.restarts},
                           {"state", pod.pid > 0 ? json{{"running", json::object()}}
                                                 : json{{"waiting", {{"reason", "Restarting"}}}}}};
  if (pod.last_exit >= 0) {
    container_status["lastState"] = {{"terminated", {{"exitCode", pod.last_exit}}}};
  }
  const json status = {
      {"phase", "Running"},
      {"podIP", pod.ip},
      {"conditions", {{{"type", "Ready"}, {"status", pod.ready ? "True" : "False"}}}},
      {"containerStatuses", {container_status}}};
  const std::string collection = absl::StrCat("/api/v1/namespaces/", pod.ns, "/pods");
  absl::StatusOr<json> existing = api_->Get(collection + "/" + pod.name);
  if (!existing.ok()) {
    json object = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata",
         {{"name", pod.name},
          {"namespace", pod.ns},
          {"labels", sts["spec"]["template"]["metadata"].value("labels", json::object())},
          {"ownerReferences",
           {{{"apiVersion", "apps/v1"},
             {"kind", "StatefulSet"},
             {"name", pod.sts},
             {"uid", sts["metadata"]["uid"]},
             {"controller", true}}}}}},
        {"spec", sts["spec"]["template"]["spec"]}};
    absl::StatusOr<json> created = api_->Create(collection, object);
    if (!created.ok()) return;
    existing = *created;
  }
  if (existing->value("status", json::object()) == status) return;
  json updated = *existing;
  updated["status"] = status;
  (void)api_->UpdateStatus(collection + "/" + pod.name, updated);
}

pid_t FakeKubelet::Pid(const std::string& ns, const std::string& pod) const {
  MutexLock l(&mu_);
  auto it = pods_.find(ns + "/" + pod);
  return it == pods_.end() ? 0 : it->second.pid;
}

void FakeKubelet::Signal(const std::string& ns, const std::string& job, const std::string& role,
                         int sig) {
  MutexLock l(&mu_);
  for (auto& [key, pod] : pods_) {
    if (pod.ns == ns && pod.job == job && pod.role == role && pod.pid > 0) {
      // The pod command and the process it runs.
      kill(-pod.pid, sig);
    }
  }
}

std::string FakeKubelet::Log(const std::string& ns, const std::string& pod) const {
  std::ifstream in(absl::StrCat(options_.root_dir, "/", ns, "/", pod, "/container.log"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string FakeKubelet::AllLogs() const {
  std::string out;
  MutexLock l(&mu_);
  for (const auto& [key, pod] : pods_) {
    absl::StrAppend(&out, "==== ", key, " ====\n", Log(pod.ns, pod.name));
  }
  return out;
}

}  // namespace shadowsync::testing
