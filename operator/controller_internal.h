// What the controller's files (controller.cc, controller_observe.cc) share:
// the reshard task (see its comment for who may touch what) and three pure,
// thread-safe helpers.
#ifndef SHADOWSYNC_OPERATOR_CONTROLLER_INTERNAL_H_
#define SHADOWSYNC_OPERATOR_CONTROLLER_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "operator/controller.h"
#include "operator/kube_client.h"
#include "operator/reconcile.h"

namespace shadowsync::op {

// A reshard the controller runs in a thread of its own. Written by that
// thread; `moved`, `total` and `done` read by any, the rest after `done`.
struct Controller::ReshardTask {
  ReshardRequest request;
  std::atomic<int64_t> moved{0};
  std::atomic<int64_t> total{0};
  std::atomic<bool> done{false};
  absl::Status status;   // Written before `done`.
  bool stopped = false;  // Stopped between steps (Stop(), the Lease lost); before `done`.
  std::string summary;
  std::thread thread;
};

// Of any object: its namespace, its name, and the job it belongs to.
inline std::string NamespaceOf(const kube::Json& object) {
  return object.value("/metadata/namespace"_json_pointer, std::string());
}
inline std::string NameOf(const kube::Json& object) {
  return object.value("/metadata/name"_json_pointer, std::string());
}
inline std::string JobLabelOf(const kube::Json& object) {
  const kube::Json* labels = nullptr;
  if (object.contains("metadata") && object["metadata"].contains("labels")) {
    labels = &object["metadata"]["labels"];
  }
  if (labels == nullptr || !labels->contains(std::string(kJobNameLabel))) return "";
  const kube::Json& v = (*labels)[std::string(kJobNameLabel)];
  return v.is_string() ? v.get<std::string>() : "";
}

}  // namespace shadowsync::op

#endif  // SHADOWSYNC_OPERATOR_CONTROLLER_INTERNAL_H_
