// A child process that answers one JSON line on stdout for each JSON line it
// reads on stdin: how the fake API server asks tests/util/crd_validate.mjs
// (a Node program, for its CEL evaluator) to validate custom resources.
// Thread-safe: calls are serialized.
//
//   SS_ASSIGN_OR_RETURN(auto child, JsonLineProcess::Start({"node", "x.mjs", "--serve"}));
//   SS_ASSIGN_OR_RETURN(json reply, child->Call({{"op", "validate"}, ...}));
#ifndef SHADOWSYNC_TESTS_UTIL_JSON_LINE_PROCESS_H_
#define SHADOWSYNC_TESTS_UTIL_JSON_LINE_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace shadowsync::testing {

class JsonLineProcess {
 public:
  // Starts `argv`; its stderr stays this process's.
  static absl::StatusOr<std::unique_ptr<JsonLineProcess>> Start(std::vector<std::string> argv);
  ~JsonLineProcess();  // Closes its stdin and reaps it.

  JsonLineProcess(const JsonLineProcess&) = delete;
  JsonLineProcess& operator=(const JsonLineProcess&) = delete;

  // Sends `request` as one line and returns the line that answers it.
  // Unavailable once the child has exited or its reply is not JSON.
  absl::StatusOr<nlohmann::json> Call(const nlohmann::json& request);

 private:
  JsonLineProcess(std::string name, pid_t pid, int fd)
      : name_(std::move(name)), pid_(pid), fd_(fd) {}

  const std::string name_;
  const pid_t pid_;
  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);                // The child's stdin and stdout.
  std::string buffered_ ABSL_GUARDED_BY(mu_);  // Read past the last reply.
};

}  // namespace shadowsync::testing

#endif  // SHADOWSYNC_TESTS_UTIL_JSON_LINE_PROCESS_H_
