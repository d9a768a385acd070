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

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/file_util.h"
#include "common/subprocess.h"
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

// Starts `argv` (searched on PATH) with stdin and stderr on /dev/null, and
// stdout on `stdout_fd` (-1: /dev/null); its pid, or -1. (The child starts
// with no signals blocked: fake_kube_apiserver's main blocks the ones it
// waits for.)
pid_t Start(const std::vector<std::string>& argv, int stdout_fd = -1) {
  absl::StatusOr<pid_t> pid = Spawn(argv, {.stdin_path = "/dev/null",
                                           .stdout_path = stdout_fd < 0 ? "/dev/null" : "",
                                           .stderr_path = "/dev/null",
                                           .stdout_fd = stdout_fd});
  return pid.ok() ? *pid : -1;
}

// Runs `argv` to completion; its exit code, or -1. Its stdout goes to `out`.
int RunCommand(const std::vector<std::string>& argv, std::string* out) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  const pid_t pid = Start(argv, pipe_fds[1]);
  close(pipe_fds[1]);
  char buf[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) {
    out->append(buf, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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
  for (auto& [key, pod] : pods_) StopContainer(pod, /*wait=*/true);
  for (const pid_t pid : stopping_) waitpid(pid, nullptr, 0);
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
  std::erase_if(stopping_, [](pid_t pid) { return waitpid(pid, nullptr, WNOHANG) == pid; });
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
    StopContainer(it->second, /*wait=*/false);
    (void)api_->Delete(
        absl::StrCat("/api/v1/namespaces/", it->second.ns, "/pods/", it->second.name));
    it = pods_.erase(it);
  }
}

void FakeKubelet::SyncPod(Pod& pod, const json& sts) {
  if (!pod.prepared) {
    const json& container = sts["spec"]["template"]["spec"]["containers"][0];
    for (const json& port : container.value("ports", json::array())) {
      if (port.value("name", "") == "metrics") {
        pod.readiness_address = absl::StrCat(pod.ip, ":", port["containerPort"].get<int>());
      }
    }
    if (containers()) {
      PrepareContainer(pod, sts);
    } else {
      PrepareProcess(pod, sts["spec"]["template"]["spec"]);
    }
    pod.prepared = true;
  }
  WriteConfig(pod);
  // Reap a container that ended; restartPolicy Always starts it again.
  if (pod.pid > 0) {
    int status = 0;
    if (waitpid(pod.pid, &status, WNOHANG) == pod.pid) {
      pod.last_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // The kubelet keeps the first 4096 bytes.
      if (!pod.termination_file.empty()) {
        std::ifstream in(pod.termination_file);
        pod.last_message.assign(4096, '\0');
        in.read(pod.last_message.data(), static_cast<std::streamsize>(pod.last_message.size()));
        pod.last_message.resize(static_cast<size_t>(in.gcount()));
      }
      pod.pid = 0;
      pod.ready = false;
      ++pod.restarts;
    }
  }
  if (pod.pid == 0 && !pod.config_rv.empty() && pod.config_error.empty()) StartContainer(pod);
  pod.ready =
      pod.pid > 0 && !pod.readiness_address.empty() && Probe(pod.readiness_address, "/healthz");
  PublishPod(pod, sts);
}

void FakeKubelet::PrepareProcess(Pod& pod, const json& spec) {
  const json& container = spec["containers"][0];
  // Every volume becomes a directory of the pod; args naming a mount path
  // name that directory instead.
  std::map<std::string, std::string> mounts;  // mountPath -> local dir
  for (const json& m : container.value("volumeMounts", json::array())) {
    std::string local = absl::StrCat(pod.dir, "/volumes/", m["name"].get<std::string>());
    for (const json& v : spec.value("volumes", json::array())) {
      if (v["name"] != m["name"]) continue;
      if (v.contains("persistentVolumeClaim")) {
        local = ClaimDir(pod.ns, v["persistentVolumeClaim"]["claimName"]);
      } else {
        AddFilledVolume(pod, v, local);
      }
    }
    fs::create_directories(local);
    mounts[m["mountPath"]] = local;
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
    if (arg.starts_with("--termination-message=")) {
      pod.termination_file = pod.dir + "/termination-log";
      arg = "--termination-message=" + pod.termination_file;
    }
    pod.args.push_back(arg);
  }
}

void FakeKubelet::PrepareContainer(Pod& pod, const json& sts) {
  const json& spec = sts["spec"]["template"]["spec"];
  const json& container = spec["containers"][0];
  const std::string image = container.value("image", "");
  // Container settings override the pod's, key by key.
  const json pod_security = spec.value("securityContext", json::object());
  const json security = container.value("securityContext", json::object());
  auto setting = [&](const char* key) {
    return security.contains(key) ? security[key] : pod_security.value(key, json());
  };
  auto fail = [&](const std::string& message) {
    if (pod.config_error.empty()) pod.config_error = message;
  };

  pod.container_name = absl::StrCat("k8s_", pod.ns, "_", pod.name);
  std::vector<std::string>& a = pod.args;
  a = {options_.container_engine,
       "run",
       "--rm",
       "--replace",
       "--name",
       pod.container_name,
       "--hostname",
       pod.name,
       "--network",
       options_.network,
       "--ip",
       pod.ip};
  // The headless Service's per-pod DNS names.
  const std::string service = sts["spec"].value("serviceName", "");
  if (!service.empty()) {
    for (const char* domain : {".svc", ".svc.cluster.local"}) {
      a.insert(a.end(),
               {"--network-alias", absl::StrCat(pod.name, ".", service, ".", pod.ns, domain)});
    }
  }

  const json uid = setting("runAsUser"), gid = setting("runAsGroup"), fs_group = setting("fsGroup");
  if (setting("runAsNonRoot") == true) {
    // As the kubelet: the numeric uid that will run, from the spec or the image.
    std::string user = uid.is_number() ? std::to_string(uid.get<int64_t>()) : "";
    if (user.empty()) {
      RunCommand(
          {options_.container_engine, "image", "inspect", "--format", "{{.Config.User}}", image},
          &user);
      user = user.substr(0, user.find_first_of(":\n"));
    }
    if (user.empty() || user == "0" || user == "root") {
      fail("container has runAsNonRoot and image will run as root");
    } else if (user.find_first_not_of("0123456789") != std::string::npos) {
      fail(absl::StrCat("container has runAsNonRoot and image has non-numeric user (", user,
                        "), cannot verify user is non-root"));
    }
  }
  if (uid.is_number()) {
    a.insert(a.end(), {"--user",
                       absl::StrCat(uid.get<int64_t>(),
                                    gid.is_number() ? absl::StrCat(":", gid.get<int64_t>()) : "")});
  }
  if (fs_group.is_number()) {
    a.insert(a.end(), {"--group-add", std::to_string(fs_group.get<int64_t>())});
  }
  if (setting("readOnlyRootFilesystem") == true) {
    // Writable only where a volume is mounted: no engine-provided tmpfs.
    a.insert(a.end(), {"--read-only", "--read-only-tmpfs=false"});
  }
  if (setting("allowPrivilegeEscalation") == false) {
    a.insert(a.end(), {"--security-opt", "no-new-privileges"});
  }
  const json capabilities = security.value("capabilities", json::object());
  for (const json& c : capabilities.value("drop", json::array())) {
    a.insert(a.end(), {"--cap-drop", absl::AsciiStrToLower(c.get<std::string>())});
  }
  for (const json& c : capabilities.value("add", json::array())) {
    a.insert(a.end(), {"--cap-add", absl::AsciiStrToLower(c.get<std::string>())});
  }
  const json seccomp_profile = setting("seccompProfile");
  const std::string seccomp = seccomp_profile.is_object()
                                  ? seccomp_profile.value("type", "RuntimeDefault")
                                  : "RuntimeDefault";
  if (seccomp == "Unconfined") {
    a.insert(a.end(), {"--security-opt", "seccomp=unconfined"});
  } else if (seccomp != "RuntimeDefault") {
    fail(absl::StrCat("seccompProfile type ", seccomp, " is not supported by this kubelet"));
  }

  for (const json& e : container.value("env", json::array())) {
    const std::string name = e["name"];
    std::string value = e.value("value", "");
    if (e.contains("valueFrom")) {
      const std::string field =
          e["valueFrom"].value("/fieldRef/fieldPath"_json_pointer, std::string());
      if (field == "metadata.name") {
        value = pod.name;
      } else if (field == "metadata.namespace") {
        value = pod.ns;
      } else if (field == "status.podIP") {
        value = pod.ip;
      } else {
        fail(absl::StrCat("env ", name, ": valueFrom ", e["valueFrom"].dump(),
                          " is not supported by this kubelet"));
      }
    }
    a.insert(a.end(), {"--env", absl::StrCat(name, "=", value)});
  }
  for (const json& p : container.value("ports", json::array())) {
    a.insert(a.end(),
             {"--expose", absl::StrCat(p["containerPort"].get<int>(), "/",
                                       absl::AsciiStrToLower(p.value("protocol", "TCP")))});
  }

  // Volumes: host directories of the pod, so that emptyDirs and claims
  // survive container restarts, as in Kubernetes.
  std::set<std::string> claims;
  for (const json& t : sts["spec"].value("volumeClaimTemplates", json::array())) {
    claims.insert(t["metadata"]["name"].get<std::string>());
  }
  for (const json& m : container.value("volumeMounts", json::array())) {
    const std::string name = m["name"];
    const json* volume = nullptr;
    if (spec.contains("volumes")) {
      for (const json& v : spec["volumes"]) {
        if (v["name"] == name) volume = &v;
      }
    }
    const bool claim = volume != nullptr && volume->contains("persistentVolumeClaim");
    const std::string local =
        claim ? ClaimDir(pod.ns, (*volume)["persistentVolumeClaim"]["claimName"])
              : absl::StrCat(pod.dir, "/volumes/", name);
    fs::create_directories(local);
    if (volume != nullptr && AddFilledVolume(pod, *volume, local)) {
      if (fs_group.is_number()) pod.fs_group = fs_group.get<int64_t>();
    } else if ((volume != nullptr && volume->contains("emptyDir")) || claim ||
               (volume == nullptr && claims.count(name))) {
      // fsGroup: the group owns the volume and what is created in it.
      if (fs_group.is_number()) {
        (void)chown(local.c_str(), 0, static_cast<gid_t>(fs_group.get<int64_t>()));
        fs::permissions(local, fs::perms::owner_all | fs::perms::group_all |
                                   fs::perms::others_read | fs::perms::others_exec |
                                   fs::perms::set_gid);
      }
    } else {
      fail(absl::StrCat("volume ", name,
                        ": only configMap, secret, projected, emptyDir, persistentVolumeClaim and "
                        "claim templates "
                        "are supported by this kubelet"));
    }
    a.insert(a.end(), {"--volume", absl::StrCat(local, ":", m["mountPath"].get<std::string>(),
                                                m.value("readOnly", false) ? ":ro" : "")});
  }
  if (container.contains("command")) {
    a.insert(a.end(), {"--entrypoint", container["command"].dump()});
  }
  a.push_back(image);
  for (const json& arg : container.value("args", json::array())) a.push_back(arg);
}

std::string FakeKubelet::ClaimDir(const std::string& ns, const std::string& claim) const {
  return absl::StrCat(options_.root_dir, "/", ns, "/claims/", claim);
}

bool FakeKubelet::AddFilledVolume(Pod& pod, const json& volume, const std::string& local) {
  auto add_secret = [&](const json& source, const std::string& name) {
    SecretVolume sv{.secret = name, .dir = local};
    for (const json& item : source.value("items", json::array())) {
      sv.items[item["key"].get<std::string>()] = item["path"].get<std::string>();
    }
    pod.secrets.push_back(std::move(sv));
  };
  if (volume.contains("configMap")) {
    pod.config_map = volume["configMap"]["name"];
    pod.config_dir = local;
    return true;
  }
  if (volume.contains("secret")) {
    add_secret(volume["secret"], volume["secret"]["secretName"]);
    return true;
  }
  if (!volume.contains("projected")) return false;
  for (const json& source : volume["projected"].value("sources", json::array())) {
    if (source.contains("configMap")) {
      pod.config_map = source["configMap"]["name"];
      pod.config_dir = local;
    } else if (source.contains("secret")) {
      add_secret(source["secret"], source["secret"]["name"]);
    } else {
      return false;
    }
  }
  return true;
}

void FakeKubelet::WriteSecrets(Pod& pod) {
  if (pod.secrets_written) return;
  std::vector<json> secrets;
  for (const SecretVolume& sv : pod.secrets) {
    absl::StatusOr<json> secret =
        api_->Get(absl::StrCat("/api/v1/namespaces/", pod.ns, "/secrets/", sv.secret));
    if (!secret.ok()) return;  // Not created yet: the pod waits, as ContainerCreating.
    secrets.push_back(*std::move(secret));
  }
  for (size_t i = 0; i < pod.secrets.size(); ++i) {
    const SecretVolume& sv = pod.secrets[i];
    const json data = secrets[i].value("data", json::object());  // Outlives the loop.
    for (const auto& [key, value] : data.items()) {
      std::string path = key;
      if (!sv.items.empty()) {
        auto it = sv.items.find(key);
        if (it == sv.items.end()) continue;
        path = it->second;
      }
      std::string content;
      if (!absl::Base64Unescape(value.get<std::string>(), &content)) return;
      const std::string file = sv.dir + "/" + path;
      fs::create_directories(fs::path(file).parent_path());
      if (!WriteFileAtomically(file, content).ok()) return;
      if (pod.fs_group >= 0) (void)chown(file.c_str(), 0, static_cast<gid_t>(pod.fs_group));
      fs::permissions(file, fs::perms::owner_read | fs::perms::group_read);
    }
  }
  pod.secrets_written = true;
}

void FakeKubelet::WriteConfig(Pod& pod) {
  WriteSecrets(pod);
  if (!pod.secrets_written) return;
  if (pod.config_map.empty()) return;
  absl::StatusOr<json> cm =
      api_->Get(absl::StrCat("/api/v1/namespaces/", pod.ns, "/configmaps/", pod.config_map));
  if (!cm.ok()) return;  // Not created yet: the pod waits, as ContainerCreating.
  const std::string rv = (*cm)["metadata"]["resourceVersion"];
  if (rv == pod.config_rv) return;
  const json data = cm->value("data", json::object());
  for (const auto& [file, content] : data.items()) {
    const std::string path = pod.config_dir + "/" + file;
    // Atomic, like the kubelet's symlink swap.
    if (!WriteFileAtomically(path, content.get<std::string>()).ok()) return;
  }
  pod.config_rv = rv;
}

void FakeKubelet::StartContainer(Pod& pod) {
  const std::string log = pod.dir + "/container.log";
  std::vector<std::string> argv;
  if (!containers()) argv.push_back(options_.binary);
  if (!pod.termination_file.empty()) std::ofstream(pod.termination_file, std::ios::trunc);
  argv.insert(argv.end(), pod.args.begin(), pod.args.end());
  // Its own process group: a stop reaches the pod command and its child.
  absl::StatusOr<pid_t> pid = Spawn(
      argv, {.env = {"POD_NAME=" + pod.name, "POD_NAMESPACE=" + pod.ns, "HOSTNAME=" + pod.name},
             .stdout_path = log,
             .stderr_path = log,
             .new_process_group = true});
  if (pid.ok()) {
    pod.pid = *pid;
    return;
  }
  // As a container that cannot start: it "exits" 127, and is tried again.
  std::ofstream(log, std::ios::app) << pid.status() << "\n";
  pod.last_exit = 127;
  ++pod.restarts;
}

void FakeKubelet::StopContainer(Pod& pod, bool wait) {
  if (pod.pid <= 0) return;
  if (containers()) {
    // The engine sends SIGTERM, then SIGKILL after the grace period, and the
    // waiting `run --rm` exits. Without `wait` both are reaped later, so that
    // a slow stop does not hold up the other pods.
    const pid_t stop =
        Start({options_.container_engine, "stop", "--time", "10", pod.container_name});
    if (wait) {
      if (stop > 0) waitpid(stop, nullptr, 0);
      waitpid(pod.pid, nullptr, 0);
    } else {
      if (stop > 0) stopping_.push_back(stop);
      stopping_.push_back(pod.pid);
    }
    pod.pid = 0;
    return;
  }
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
    if (!pod.last_message.empty()) {
      container_status["lastState"]["terminated"]["message"] = pod.last_message;
    }
  }
  if (!pod.config_error.empty()) {
    container_status["state"] = {
        {"waiting", {{"reason", "CreateContainerConfigError"}, {"message", pod.config_error}}}};
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
    if (pod.ns != ns || pod.job != job || pod.role != role || pod.pid <= 0) continue;
    if (containers()) {
      const pid_t killer = Start(
          {options_.container_engine, "kill", "--signal", std::to_string(sig), pod.container_name});
      if (killer > 0) waitpid(killer, nullptr, 0);
    } else {
      kill(-pod.pid, sig);  // The pod command and the process it runs.
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
