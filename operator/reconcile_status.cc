// Reconcile (operator/reconcile_internal.h): what the pods say
// (status.replicaStatuses) and the status conditions with their events.

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "operator/crd.h"
#include "operator/reconcile_internal.h"

namespace shadowsync::op::internal {
namespace {

std::optional<int> PodIndex(const std::string& pod_name, const std::string& prefix) {
  if (!pod_name.starts_with(prefix)) return std::nullopt;
  int index = 0;
  if (!absl::SimpleAtoi(Av(std::string_view(pod_name).substr(prefix.size())), &index) ||
      index < 0) {
    return std::nullopt;
  }
  return index;
}

const json& MainContainerStatus(const json& pod, Role role) {
  const json& statuses = Field(Field(pod, "status"), "containerStatuses");
  static const json kNone = json::object();
  if (!statuses.is_array() || statuses.empty()) return kNone;
  for (const json& c : statuses) {
    if (StringField(c, "name") == RoleName(role)) return c;
  }
  return statuses[0];
}

constexpr int64_t kNotTerminated = std::numeric_limits<int64_t>::min();

// The exit code of a terminated container state, else kNotTerminated.
int64_t ExitCode(const json& container_state) {
  const json& terminated = Field(container_state, "terminated");
  if (!terminated.is_object()) return kNotTerminated;
  return IntField(terminated, "exitCode", -1);
}

// A terminated container state's message if it says the run was not
// learning (cli/pod_command.cc writes it), else empty.
std::string NotLearningMessage(const json& container_state) {
  std::string message = StringField(Field(container_state, "terminated"), "message");
  return message.starts_with(kNotLearningMessagePrefix) ? message : "";
}

bool PodReady(const json& pod) {
  const json& conditions = Field(Field(pod, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const json& c : conditions) {
    if (StringField(c, "type") == "Ready") return StringField(c, "status") == "True";
  }
  return false;
}

}  // namespace

RoleCounts CountPods(const Observed& o, const JobRef& ref, Role role) {
  RoleCounts counts;
  const std::string prefix = ChildName(ref.name, role) + "-";
  for (const json& pod : o.pods) {
    const json& meta = Field(pod, "metadata");
    const json& labels = Field(meta, "labels");
    if (StringField(labels, kJobNameLabel) != ref.name ||
        StringField(labels, kRoleLabel) != RoleName(role)) {
      continue;
    }
    std::optional<int> index = PodIndex(StringField(meta, "name"), prefix);
    if (!index) continue;
    const bool deleting = !Field(meta, "deletionTimestamp").is_null();
    const std::string phase = StringField(Field(pod, "status"), "phase");
    const json& main = MainContainerStatus(pod, role);
    const json& state = Field(main, "state");
    const int64_t exit_now = ExitCode(state);
    const int64_t exit_last = ExitCode(Field(main, "lastState"));
    // The kubelet counts an instance in restartCount once the next one
    // starts; until then the dead one shows as state.terminated, or as
    // state.waiting (back-off) with lastState.terminated.
    const int64_t exit_latest_dead = exit_now != kNotTerminated            ? exit_now
                                     : Field(state, "waiting").is_object() ? exit_last
                                                                           : kNotTerminated;
    const bool latest_dead = exit_latest_dead != kNotTerminated;
    const int dead = static_cast<int>(IntField(main, "restartCount")) + (latest_dead ? 1 : 0);
    // A trainer exits 0 once its share is done; the StatefulSet restarts it
    // (restartPolicy Always) and the pod command then idles (docs/operator.md).
    const bool latest_exit_zero = latest_dead ? exit_latest_dead == 0 : exit_last == 0;
    const bool succeeded = !deleting && (phase == "Succeeded" || latest_exit_zero);
    const bool failing = phase == "Failed" || (latest_dead && exit_latest_dead != 0);
    const int failures =
        std::max(0, dead - (latest_exit_zero ? 1 : 0)) + (phase == "Failed" && dead == 0 ? 1 : 0);

    if (!deleting && PodReady(pod)) {
      ++counts.ready;
      counts.ready_indices.insert(*index);
    }
    if (!deleting && (phase.empty() || phase == "Pending" || phase == "Running")) ++counts.active;
    if (succeeded) {
      ++counts.succeeded;
      counts.succeeded_indices.insert(*index);
    }
    if (failing) ++counts.failed;
    counts.restarts += failures;
    if (role == Role::kTrainer) {
      std::string problem = NotLearningMessage(state);
      if (problem.empty()) problem = NotLearningMessage(Field(main, "lastState"));
      if (!problem.empty()) {
        counts.learning_problem = absl::StrCat(StringField(meta, "name"), ": ", problem);
      }
      // Whether or not the container was started again since.
      counts.stopped_not_learning |=
          exit_latest_dead == kExitNotLearning || exit_last == kExitNotLearning;
    }
  }
  return counts;
}

json ReplicaStatus(const RoleCounts& c, int desired) {
  return {{"desired", desired},       {"readyOfDesired", absl::StrCat(c.ready, "/", desired)},
          {"ready", c.ready},         {"active", c.active},
          {"succeeded", c.succeeded}, {"failed", c.failed},
          {"restarts", c.restarts}};
}

namespace {

const json* FindCondition(const json& status, std::string_view type) {
  const json& conditions = Field(status, "conditions");
  if (!conditions.is_array()) return nullptr;
  for (const json& c : conditions) {
    if (StringField(c, "type") == type) return &c;
  }
  return nullptr;
}

}  // namespace

bool ConditionTrue(const json& status, std::string_view type) {
  const json* c = FindCondition(status, type);
  return c != nullptr && StringField(*c, "status") == "True";
}

std::string ConditionMessage(const json& status, std::string_view type) {
  const json* c = FindCondition(status, type);
  return c != nullptr ? StringField(*c, "message") : "";
}

json BuildConditions(const json& previous, const std::vector<Condition>& conditions,
                     int64_t generation, absl::Time now) {
  json out = json::array();
  for (std::string_view type : kConditionTypes) {
    auto it = std::find_if(conditions.begin(), conditions.end(),
                           [&](const Condition& c) { return c.type == type; });
    if (it == conditions.end()) continue;
    const std::string status = it->status ? "True" : "False";
    std::string transition = Rfc3339(now);
    if (const json* old = FindCondition(previous, type);
        old != nullptr && StringField(*old, "status") == status &&
        Field(*old, "lastTransitionTime").is_string()) {
      transition = StringField(*old, "lastTransitionTime");
    }
    out.push_back({{"type", type},
                   {"status", status},
                   {"reason", it->reason},
                   {"message", it->message},
                   {"lastTransitionTime", transition},
                   {"observedGeneration", generation}});
  }
  return out;
}

void ConditionEvents(const json& before, const json& after, std::vector<EventSpec>& events) {
  for (std::string_view type : kConditionTypes) {
    const json* now = FindCondition(after, type);
    if (now == nullptr) continue;
    const bool was = ConditionTrue(before, type);
    const bool is = StringField(*now, "status") == "True";
    if (was == is) continue;
    const std::string reason = StringField(*now, "reason");
    const std::string message = StringField(*now, "message");
    if (is) {
      if (type == "Failed") {
        events.push_back({"Warning", reason, message});
      } else if (type == "NotLearning") {
        events.push_back({"Warning", "NotLearning", message});
      } else if (type == "Created" || type == "Running" || type == "Suspended" ||
                 type == "Succeeded" || type == "Resharding") {
        events.push_back({"Normal", std::string(type), message});
      }
    } else if (type == "Suspended") {
      events.push_back({"Normal", "Resumed", message});
    } else if (type == "Resharding" && FindCondition(before, type) != nullptr) {
      events.push_back({"Normal", "ReshardComplete", message});
    }
  }
}

}  // namespace shadowsync::op::internal
