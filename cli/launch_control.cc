// The control directory of a running `shadowsync run`: requests from
// `shadowsync scale|export` and the launcher's answers, both sides.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cli_util.h"
#include "cli/launch_internal.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shadowsync::cli {
namespace internal {

void Launch::AnswerControl(const std::string& kind, const std::string& id,
                           const nlohmann::json& result) const {
  const std::string path = absl::StrCat(run_dir_, "/control/", kind, "-", id, ".result.json");
  if (absl::Status s = WriteFileAtomically(path, result.dump(2) + "\n"); !s.ok()) {
    EndProgress();
    LOG(WARNING) << s.message();
  }
}

absl::Status Launch::PollControl() {
  for (const char* kind : {"scale", "export"}) {
    const std::string request_path = absl::StrCat(run_dir_, "/control/", kind, ".json");
    std::ifstream in(request_path);
    if (!in) continue;
    const nlohmann::json request = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    in.close();
    fs::remove(request_path);
    const bool scale = std::string_view(kind) == "scale";
    nlohmann::json result;
    absl::Status fatal;
    if (!request.is_object() || !request.contains("id") || !request["id"].is_string() ||
        (scale && (!request.contains("ps") || !request["ps"].is_number_integer()))) {
      result = {{"ok", false},
                {"error", absl::StrCat("malformed ", kind, " request: ", request.dump())}};
      // Whoever wrote it may not wait for a result (no id): say it here.
      EndProgress();
      LOG(WARNING) << request_path << ": ignored a malformed " << kind << " request (want "
                   << (scale ? R"({"id": "...", "ps": N, "pause": false})" : R"({"id": "..."})")
                   << "), got " << request.dump();
    } else if (!scale) {
      StartExport(request["id"].get<std::string>());  // It answers when done.
      continue;
    } else if (export_.has_value()) {
      // Slots moving under a running export could be read twice or not at all.
      result = {{"ok", false}, {"error", "an export is running; reshard when it is done"}};
    } else {
      absl::StatusOr<nlohmann::json> r =
          ScaleTo(request["ps"].get<int>(), request.value("pause", false));
      if (r.ok()) {
        result = {{"ok", true}, {"report", *r}};
      } else {
        result = {{"ok", false}, {"error", std::string(r.status().message())}};
        EndProgress();
        LOG(ERROR) << kind << " failed: " << r.status().message();
        if (scale && r.status().code() == absl::StatusCode::kDataLoss) fatal = r.status();
      }
    }
    if (request.is_object() && request.contains("id") && request["id"].is_string()) {
      AnswerControl(kind, request["id"].get<std::string>(), result);
    }
    SS_RETURN_IF_ERROR(fatal);
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace {

using internal::Clock;
namespace fs = std::filesystem;

// Hands `body` to the launcher running in run_dir as control/<kind>.json and
// waits for its answer, control/<kind>-<id>.result.json.
absl::StatusOr<nlohmann::json> ControlRequest(const std::string& run_dir, const std::string& kind,
                                              nlohmann::json body, double timeout_seconds) {
  const std::string control = run_dir + "/control";
  std::ifstream pid_file(control + "/launcher.pid");
  pid_t pid = 0;
  if (!(pid_file >> pid) || pid <= 0 || kill(pid, 0) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("no `shadowsync run` is running in ", run_dir,
                                                      " (", control, "/launcher.pid)"));
  }
  std::random_device random;
  const std::string id = absl::StrFormat("%d-%08x", getpid(), random());
  body["id"] = id;
  const std::string path = absl::StrCat(control, "/", kind, ".json");
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1e3));
  // The request is written whole under its own name, then linked to the one
  // request slot, which fails while another client's request sits there:
  // the launcher never reads half a request, and no request replaces
  // another. A request waits for the slot, within the same deadline.
  const std::string staged = absl::StrCat(control, "/", kind, "-", id, ".request.json");
  SS_RETURN_IF_ERROR(WriteFileAtomically(staged, body.dump() + "\n"));
  while (link(staged.c_str(), path.c_str()) != 0) {
    const int error = errno;
    if (error != EEXIST || Clock::now() >= deadline) {
      fs::remove(staged);
      return error == EEXIST ? absl::DeadlineExceededError(
                                   absl::StrCat("another ", kind, " request stayed pending (", path,
                                                ") for ", timeout_seconds, " s"))
                             : absl::UnavailableError(
                                   absl::StrCat("cannot write ", path, ": ", std::strerror(error)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  fs::remove(staged);
  const std::string result_path = absl::StrCat(control, "/", kind, "-", id, ".result.json");
  while (Clock::now() < deadline) {
    std::ifstream in(result_path);
    if (in) {
      const nlohmann::json result = nlohmann::json::parse(in, nullptr, false);
      fs::remove(result_path);
      if (!result.is_object()) return absl::InternalError("unreadable answer " + result_path);
      if (!result.value("ok", false)) {
        return absl::AbortedError(result.value("error", kind + " failed"));
      }
      return result["report"];
    }
    if (kill(pid, 0) != 0) {
      return absl::AbortedError(absl::StrCat("the launcher (pid ", pid, ") exited"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no answer from the launcher after ", timeout_seconds, " s"));
}

}  // namespace

absl::StatusOr<nlohmann::json> RequestScale(const ScaleRequest& request) {
  if (request.parameter_servers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps: must be >= 1, got ", request.parameter_servers));
  }
  return ControlRequest(request.run_dir, "scale",
                        {{"ps", request.parameter_servers}, {"pause", request.pause}},
                        request.timeout_seconds);
}

absl::StatusOr<nlohmann::json> RequestExport(const std::string& run_dir, double timeout_seconds) {
  return ControlRequest(run_dir, "export", nlohmann::json::object(), timeout_seconds);
}

}  // namespace shadowsync::cli
