#include "operator/leader_election.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace shadowsync::kube {

std::string FormatMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<absl::Time> ParseMicroTime(const std::string& s) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, s, &t, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("bad time \"", s, "\": ", error));
  }
  return t;
}

LeaderElector::LeaderElector(KubeClient* client, LeaderElectionConfig config,
                             std::function<void()> on_started_leading,
                             std::function<void()> on_stopped_leading,
                             std::function<void(const std::string&)> on_new_leader)
    : client_(client),
      config_(std::move(config)),
      on_started_leading_(std::move(on_started_leading)),
      on_stopped_leading_(std::move(on_stopped_leading)),
      on_new_leader_(std::move(on_new_leader)) {}

LeaderElector::~LeaderElector() { Stop(); }

std::string LeaderElector::lease_path() const {
  return ResourcePath{"coordination.k8s.io", "v1", "leases", config_.ns, config_.lease_name}
      .ToString();
}

absl::Status LeaderElector::Start() {
  if (config_.lease_name.empty() || config_.identity.empty() || config_.ns.empty()) {
    return absl::InvalidArgumentError(
        "leader election: namespace, lease_name and identity must be set");
  }
  if (config_.lease_duration <= config_.renew_deadline) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leader election: lease_duration (", absl::FormatDuration(config_.lease_duration),
        ") must exceed renew_deadline (", absl::FormatDuration(config_.renew_deadline), ")"));
  }
  if (config_.renew_deadline <= config_.retry_period) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leader election: renew_deadline (", absl::FormatDuration(config_.renew_deadline),
        ") must exceed retry_period (", absl::FormatDuration(config_.retry_period), ")"));
  }
  if (config_.lease_duration < absl::Seconds(1)) {
    return absl::InvalidArgumentError("leader election: lease_duration must be at least 1s");
  }
  // GET + PUT (+ the fast path's PUT) must fit in lease_duration - renew_deadline
  // after the deadline check that just missed.
  KubeClientOptions options;
  options.request_timeout =
      std::max(absl::Seconds(1), (config_.lease_duration - config_.renew_deadline) / 3);
  absl::StatusOr<std::unique_ptr<KubeClient>> own =
      KubeClient::FromConfig(client_->config(), options);
  if (!own.ok()) return own.status();
  own_client_ = *std::move(own);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void LeaderElector::Stop() {
  cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
}

bool LeaderElector::IsLeader() const {
  MutexLock lock(&mu_);
  return leading_ && absl::Now() - renewed_at_ < config_.renew_deadline;
}

void LeaderElector::SetRenewed(absl::Time t) {
  MutexLock lock(&mu_);
  renewed_at_ = t;
}

std::string LeaderElector::leader() const {
  MutexLock lock(&mu_);
  return leader_;
}

void LeaderElector::SetLeading(bool leading) {
  {
    MutexLock lock(&mu_);
    if (leading_ == leading) return;
    leading_ = leading;
  }
  LOG(INFO) << "leader election " << lease_path() << ": " << config_.identity << " "
            << (leading ? "started" : "stopped") << " leading";
  const auto& callback = leading ? on_started_leading_ : on_stopped_leading_;
  if (callback) callback();
}

void LeaderElector::ObserveHolder(const std::string& holder) {
  {
    MutexLock lock(&mu_);
    if (leader_ == holder) return;
    leader_ = holder;
  }
  if (on_new_leader_ && !holder.empty()) on_new_leader_(holder);
}

bool LeaderElector::TryAcquireOrRenew() {
  const absl::Time now = absl::Now();
  const std::string now_text = FormatMicroTime(now);
  const std::string path = lease_path();
  const int64_t duration_s = absl::ToInt64Seconds(config_.lease_duration);
  auto record = [&](const Json& lease) {
    SetRenewed(now);
    observed_lease_ = lease;
    observed_spec_ = lease.value("spec", Json::object());
    observed_time_ = now;
    ObserveHolder(config_.identity);
  };

  // 1. The leader's fast path: renew the object we wrote last time. A 409
  //    means it changed under us; fall back to reading it.
  bool leading;
  {
    MutexLock lock(&mu_);
    leading = leading_;
  }
  if (leading && observed_lease_) {
    Json lease = *observed_lease_;
    lease["spec"]["holderIdentity"] = config_.identity;
    lease["spec"]["leaseDurationSeconds"] = duration_s;
    lease["spec"]["renewTime"] = now_text;
    if (absl::StatusOr<Json> renewed = client()->Update(path, lease); renewed.ok()) {
      record(*renewed);
      return true;
    }
  }

  // 2. Read the lease; create it if there is none.
  absl::StatusOr<Json> current = client()->Get(path);
  if (absl::IsNotFound(current.status())) {
    const Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                        {"kind", "Lease"},
                        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.ns}}},
                        {"spec",
                         {{"holderIdentity", config_.identity},
                          {"leaseDurationSeconds", duration_s},
                          {"acquireTime", now_text},
                          {"renewTime", now_text},
                          {"leaseTransitions", 0}}}};
    const std::string collection =
        ResourcePath{"coordination.k8s.io", "v1", "leases", config_.ns}.Collection();
    absl::StatusOr<Json> created = client()->Create(collection, lease);
    if (!created.ok()) return false;  // AlreadyExists: another replica was faster.
    record(*created);
    return true;
  }
  if (!current.ok()) {
    LOG(WARNING) << "leader election " << path << ": " << current.status();
    return false;
  }

  // 3. Someone else's valid lease: stand by. Validity counts from when we saw
  //    the record change, not from its renewTime, so skewed clocks do not matter.
  const Json spec = current->value("spec", Json::object());
  if (!observed_spec_ || *observed_spec_ != spec) {
    observed_spec_ = spec;
    observed_time_ = now;
  }
  observed_lease_ = *current;
  const std::string holder = spec.value("holderIdentity", "");
  ObserveHolder(holder);
  const int64_t holder_duration_s = spec.value("leaseDurationSeconds", duration_s);
  if (!holder.empty() && holder != config_.identity &&
      observed_time_ + absl::Seconds(holder_duration_s) > now) {
    return false;
  }

  // 4. Take it over (or renew our own). The resourceVersion we read makes a
  //    concurrent taker fail with 409.
  Json lease = *current;
  Json& new_spec = lease["spec"];
  new_spec["holderIdentity"] = config_.identity;
  new_spec["leaseDurationSeconds"] = duration_s;
  new_spec["renewTime"] = now_text;
  if (holder != config_.identity) {
    new_spec["acquireTime"] = now_text;
    new_spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
  }
  absl::StatusOr<Json> updated = client()->Update(path, lease);
  if (!updated.ok()) {
    if (!absl::IsAborted(updated.status())) {
      LOG(WARNING) << "leader election " << path << ": " << updated.status();
    }
    return false;
  }
  record(*updated);
  return true;
}

void LeaderElector::Release() {
  if (!observed_lease_) return;
  const std::string now_text = FormatMicroTime(absl::Now());
  Json lease = *observed_lease_;
  if (lease.value("/spec/holderIdentity"_json_pointer, "") != config_.identity) return;
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["acquireTime"] = now_text;
  lease["spec"]["renewTime"] = now_text;
  if (absl::Status s = client()->Update(lease_path(), lease).status(); !s.ok()) {
    LOG(WARNING) << "leader election " << lease_path() << ": release failed: " << s;
  }
}

void LeaderElector::Run() {
  absl::BitGen gen;
  // client-go jitters the acquire retries by up to 1.2x.
  auto jittered = [&](absl::Duration d) { return d * absl::Uniform(gen, 1.0, 1.2); };
  while (!cancel_.cancelled()) {
    if (!TryAcquireOrRenew()) {
      cancel_.SleepFor(jittered(config_.retry_period));
      continue;
    }
    SetLeading(true);
    absl::Time renewed_at = absl::Now();
    while (cancel_.SleepFor(config_.retry_period)) {
      if (TryAcquireOrRenew()) {
        renewed_at = absl::Now();
        continue;
      }
      const std::string holder = leader();
      if (!holder.empty() && holder != config_.identity) {
        LOG(WARNING) << "leader election " << lease_path() << ": " << holder
                     << " took the lease over";
        break;
      }
      if (absl::Now() - renewed_at >= config_.renew_deadline) {
        LOG(WARNING) << "leader election " << lease_path() << ": failed to renew for "
                     << absl::FormatDuration(absl::Now() - renewed_at);
        break;
      }
    }
    if (cancel_.cancelled()) break;
    SetLeading(false);
  }
  bool leading;
  {
    MutexLock lock(&mu_);
    leading = leading_;
  }
  if (leading) {
    if (config_.release_on_stop) Release();
    SetLeading(false);
  }
}

}  // namespace shadowsync::kube
