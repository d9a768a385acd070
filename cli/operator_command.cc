// `shadowsync operator`: the Kubernetes operator (operator/controller.h)
// until SIGTERM or SIGINT, with /healthz, /readyz and /metrics.
#include <unistd.h>

#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/metrics_http.h"
#include "common/version.h"
#include "glog/logging.h"
#include "operator/controller.h"
#include "operator/kube_client.h"
#include "operator/kube_config.h"
#include "prometheus/registry.h"

namespace shadowsync::cli {
namespace {

struct OperatorFlags {
  std::string kubeconfig;
  std::string ns;
  bool all_namespaces = false;
  std::string metrics_listen = "0.0.0.0:8080";
  bool leader_elect = true;
  std::string lease_namespace;
  std::string lease_name = "shadowsync-operator";
  std::string identity;
  double lease_duration_seconds = 15;
  int workers = 2;
  std::string image = "shadowsync:" + std::string(kReleaseVersion);
  std::string image_pull_policy = "IfNotPresent";
  std::string image_pull_secrets;
  std::string gang_scheduler = "none";
  std::string gang_scheduler_name;
  int ps_port = 7000;
  int syncer_port = 7100;
  int pod_metrics_port = 9100;
  std::string address_template = std::string(op::kDefaultAddressTemplate);
  int reshard_slots_per_step = 256;
  bool network_policy = true;
  std::string self_selector = "app.kubernetes.io/name=shadowsync-operator";
  GrpcSecurityFiles security;
  std::string credentials_key_file;
};

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "shadowsync-operator";
  return buf;
}

int RunOperator(const OperatorFlags& f) {
  if (!InstallStopSignals()) {
    LOG(ERROR) << "operator: cannot create the signal pipe";
    return 1;
  }
  // Checked first: a bad path is a bad flag, whatever the cluster.
  absl::StatusOr<GrpcSecurity> security = LoadGrpcSecurity(f.security);
  if (!security.ok()) {
    LOG(ERROR) << "operator: " << security.status().message();
    return 2;
  }
  std::string credentials_key;
  if (!f.credentials_key_file.empty()) {
    absl::StatusOr<std::string> key =
        ReadTokenFile("--credentials-key-file", f.credentials_key_file);
    if (key.ok() && key->size() < 32) {
      key = absl::InvalidArgumentError(
          absl::StrCat("--credentials-key-file: ", f.credentials_key_file, " holds ", key->size(),
                       " characters; want at least 32"));
    }
    if (!key.ok()) {
      LOG(ERROR) << "operator: " << key.status().message();
      return 2;
    }
    credentials_key = *std::move(key);
  }
  absl::StatusOr<kube::KubeConfig> config = kube::ResolveConfig(f.kubeconfig);
  if (!config.ok()) {
    LOG(ERROR) << "operator: " << config.status().message();
    return 2;
  }
  absl::StatusOr<std::unique_ptr<kube::KubeClient>> client = kube::KubeClient::FromConfig(*config);
  if (!client.ok()) {
    LOG(ERROR) << "operator: " << client.status().message();
    return 2;
  }
  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<MetricsHttpServer> http;
  if (!f.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
        MetricsHttpServer::Start(f.metrics_listen);
    if (!started.ok()) {
      LOG(ERROR) << "operator: --metrics-listen: " << started.status().message();
      return 1;
    }
    http = *std::move(started);
    http->RegisterCollectable(registry);
    http->set_ready(false);
    http->set_serving(true);
  }

  op::ControllerOptions options;
  if (!f.all_namespaces) {
    for (absl::string_view ns : absl::StrSplit(f.ns.empty() ? config->ns : f.ns, ',')) {
      if (ns.empty()) {
        LOG(ERROR) << "operator: --namespace: an empty name in \"" << f.ns << "\"";
        return 2;
      }
      options.namespaces.emplace_back(ns);
    }
  }
  options.workers = f.workers;
  options.leader_election = f.leader_elect;
  options.election.ns = f.lease_namespace.empty() ? config->ns : f.lease_namespace;
  options.election.lease_name = f.lease_name;
  options.election.identity = f.identity.empty() ? Hostname() : f.identity;
  options.election.lease_duration = absl::Seconds(f.lease_duration_seconds);
  options.election.renew_deadline = absl::Seconds(f.lease_duration_seconds * 2 / 3);
  options.election.retry_period = absl::Seconds(f.lease_duration_seconds / 7.5);
  // Losing the Lease ends the process: its restart comes back as a standby,
  // with no half-done work of the old term in memory.
  options.on_lost_leadership = [] {
    LOG(ERROR) << "operator: lost the Lease; exiting";
    std::_Exit(1);
  };
  options.reconcile.image = f.image;
  options.reconcile.image_pull_policy = f.image_pull_policy;
  if (!f.image_pull_secrets.empty()) {
    for (absl::string_view name : absl::StrSplit(f.image_pull_secrets, ',')) {
      if (name.empty()) {
        LOG(ERROR) << "operator: --image-pull-secrets: an empty name in \"" << f.image_pull_secrets
                   << "\"";
        return 2;
      }
      options.reconcile.image_pull_secrets.emplace_back(name);
    }
  }
  absl::StatusOr<op::GangScheduler> gang =
      op::ParseGangScheduler(f.gang_scheduler, "--gang-scheduler");
  if (!gang.ok()) {
    LOG(ERROR) << "operator: " << gang.status().message();
    return 2;
  }
  options.reconcile.gang_scheduler = *gang;
  options.reconcile.gang_scheduler_name = f.gang_scheduler_name;
  options.reconcile.ps_port = f.ps_port;
  options.reconcile.syncer_port = f.syncer_port;
  options.reconcile.metrics_port = f.pod_metrics_port;
  options.reconcile.address_template = f.address_template;
  options.reconcile.network_policy = f.network_policy;
  // The operator runs in its Lease's namespace ($(POD_NAMESPACE) in deploy/
  // and the chart).
  options.reconcile.operator_namespace = options.election.ns;
  options.reconcile.operator_pod_labels.clear();
  for (absl::string_view pair : absl::StrSplit(f.self_selector, ',', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.second.empty()) {
      LOG(ERROR) << "operator: --self-selector: want key=value[,key=value...], got \""
                 << f.self_selector << "\"";
      return 2;
    }
    options.reconcile.operator_pod_labels[kv.first] = kv.second;
  }
  options.reshard_slots_per_step = f.reshard_slots_per_step;
  options.ps_security = *std::move(security);
  options.credentials_key = std::move(credentials_key);
  options.registry = registry.get();
  absl::StatusOr<std::unique_ptr<op::Controller>> controller =
      op::Controller::Create(client->get(), options);
  if (!controller.ok()) {
    LOG(ERROR) << "operator: " << controller.status().message();
    return 2;
  }
  LOG(INFO) << "operator: " << config->source << ", server " << config->server << ", "
            << (options.namespaces.empty()
                    ? std::string("all namespaces")
                    : "namespace(s) " + absl::StrJoin(options.namespaces, ","))
            << (f.leader_elect ? ", leader election as " + options.election.identity : "")
            << (http != nullptr ? absl::StrCat(", http :", http->port()) : "");
  if (absl::Status s = (*controller)->Start(); !s.ok()) {
    LOG(ERROR) << "operator: " << s.message();
    return 1;
  }
  std::atomic<bool> stopping{false};
  std::thread readiness([&] {
    while (!stopping.load()) {
      if (http != nullptr) http->set_ready((*controller)->ready());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const int sig = AwaitStopSignal();
  LOG(INFO) << "operator: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ": stopping";
  if (http != nullptr) http->set_ready(false);
  stopping.store(true);
  readiness.join();
  (*controller)->Stop();
  LOG(INFO) << "operator: stopped";
  return 0;
}

}  // namespace

Action AddOperatorCommand(CLI::App& app) {
  auto f = std::make_shared<OperatorFlags>();
  CLI::App* cmd = app.add_subcommand(
      "operator", "Run the Kubernetes operator for ShadowSyncJobs until SIGTERM/SIGINT.");
  cmd->add_option("--kubeconfig", f->kubeconfig,
                  "kubeconfig file (default: $KUBECONFIG, then the in-cluster service account, "
                  "then ~/.kube/config)");
  cmd->add_option("--namespace", f->ns,
                  "namespace(s) to manage, comma-separated (default: the config's); the operator "
                  "then needs its Role in each, no ClusterRole");
  cmd->add_flag("--all-namespaces", f->all_namespaces, "manage jobs in every namespace");
  cmd->add_option("--metrics-listen", f->metrics_listen,
                  "HTTP host:port for /metrics, /healthz and /readyz (empty: off)")
      ->capture_default_str();
  cmd->add_option("--leader-elect", f->leader_elect,
                  "elect a leader through a Lease (for more than one replica)")
      ->capture_default_str();
  cmd->add_option("--lease-namespace", f->lease_namespace, "the Lease's namespace");
  cmd->add_option("--lease-name", f->lease_name, "the Lease's name")->capture_default_str();
  cmd->add_option("--identity", f->identity, "this replica's name in the Lease (default: host)");
  cmd->add_option("--lease-duration-seconds", f->lease_duration_seconds,
                  "how long a silent leader keeps the Lease")
      ->capture_default_str();
  cmd->add_option("--workers", f->workers, "concurrent reconciles")->capture_default_str();
  cmd->add_option("--image", f->image, "image of the job pods unless their template sets one")
      ->capture_default_str();
  cmd->add_option("--image-pull-policy", f->image_pull_policy, "the job pods' imagePullPolicy")
      ->check(CLI::IsMember({"Always", "IfNotPresent", "Never"}))
      ->capture_default_str();
  cmd->add_option("--image-pull-secrets", f->image_pull_secrets,
                  "the job pods' imagePullSecrets (a,b), unless their template sets some: Secrets "
                  "in each job's namespace");
  cmd->add_option("--gang-scheduler", f->gang_scheduler,
                  "none, volcano or scheduler-plugins: each job gets a PodGroup of that "
                  "scheduler (spec.runPolicy.schedulingPolicy), its pods the scheduler's name")
      ->capture_default_str();
  cmd->add_option("--gang-scheduler-name", f->gang_scheduler_name,
                  "the job pods' schedulerName (default: volcano, or "
                  "scheduler-plugins-scheduler)");
  cmd->add_option("--ps-port", f->ps_port, "parameter servers' gRPC port")->capture_default_str();
  cmd->add_option("--syncer-port", f->syncer_port, "syncers' gRPC port")->capture_default_str();
  cmd->add_option("--pod-metrics-port", f->pod_metrics_port, "job pods' /metrics port")
      ->capture_default_str();
  cmd->add_option("--address-template", f->address_template,
                  "how pods are reached: {job} {role} {role_index} {index} {namespace} {port}")
      ->capture_default_str();
  cmd->add_option("--reshard-slots-per-step", f->reshard_slots_per_step,
                  "slots moved per shard-map epoch")
      ->capture_default_str();
  cmd->add_option("--network-policy", f->network_policy,
                  "give each job a NetworkPolicy: only its own pods and this operator's reach "
                  "its servers' gRPC ports")
      ->capture_default_str();
  cmd->add_option("--self-selector", f->self_selector,
                  "labels of this operator's pods (key=value,...), which the jobs' "
                  "NetworkPolicies let in; its namespace is the Lease's")
      ->capture_default_str();
  cmd->add_option("--credentials-key-file", f->credentials_key_file,
                  "file holding the secret key (at least 32 characters) each job's admin and "
                  "auth tokens are derived from: every job gets a Secret <job>-credentials, "
                  "with this operator's TLS files when it has them (docs/security.md)");
  // The operator's own certificate and token for its calls to the parameter
  // servers while resharding (used for jobs whose spec.security asks).
  AddSecurityFlags(*cmd, f->security);
  return [f] { return RunOperator(*f); };
}

}  // namespace shadowsync::cli
