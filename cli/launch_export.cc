// Launch (cli/launch_internal.h): model exports while training and at the end.
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include "cli/cli_util.h"
#include "cli/launch_internal.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shadowsync::cli::internal {

std::string Launch::ExportsDir() const {
  return job_.spec.export_.path.empty() ? run_dir_ + "/exports" : job_.spec.export_.path;
}

exporter::JobExportRequest Launch::ExportRequest() const {
  return {.job = job_,
          .exports_dir = ExportsDir(),
          .ps_address = ps_addresses_.front(),
          .syncer_addresses = syncer_addresses_,
          .trainer_checkpoints = checkpoints_,
          .security = security_};
}

void Launch::StartExport(const std::string& request_id, bool delta) {
  last_delta_ = Clock::now();
  if (delta && export_.has_value()) return;
  if (!delta) last_export_ = last_delta_;
  if (!request_id.empty()) queued_export_requests_.push_back(request_id);
  if (export_.has_value()) return;
  exporter::JobExportRequest request = ExportRequest();
  request.delta = delta;
  // Fresh dense parameters: every running trainer writes its checkpoint at
  // its next progress report. Only trainers that are ready (whose SIGUSR1
  // handler is installed) are asked; the others' last checkpoints stand.
  std::vector<std::pair<std::string, fs::file_time_type>> asked;
  for (const Child& c : children_) {
    if (c.role != Role::kTrainer || c.pid <= 0 || c.finished || !fs::exists(c.ready)) continue;
    std::error_code ec;
    asked.emplace_back(c.checkpoint, fs::last_write_time(c.checkpoint, ec));
    kill(c.pid, SIGUSR1);
  }
  // Off the launcher's thread: training, progress and restarts go on.
  export_ = RunningExport{
      .result = std::async(std::launch::async,
                           [asked = std::move(asked), request = std::move(request)] {
                             // Below the trainers: an export while training
                             // takes spare CPU, not training's.
                             setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
                             const auto deadline = Clock::now() + std::chrono::seconds(30);
                             for (const auto& [path, before] : asked) {
                               std::error_code ec;
                               while (Clock::now() < deadline &&
                                      fs::last_write_time(path, ec) == before) {
                                 std::this_thread::sleep_for(std::chrono::milliseconds(20));
                               }
                             }
                             return exporter::ExportJob(request);
                           }),
      .request_ids = std::exchange(queued_export_requests_, {}),
      .job_seconds = Since(start_)};
}

void Launch::PollExport(bool wait) {
  if (!export_.has_value()) return;
  if (!wait && export_->result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return;
  }
  absl::StatusOr<nlohmann::json> r = export_->result.get();
  nlohmann::json answer;
  if (r.ok()) {
    // When, in the job's time (the progress samples' clock).
    (*r)["job_seconds"] = {export_->job_seconds, Since(start_)};
    LogExport(*r);
    latest_export_ = *r;
    answer = {{"ok", true}, {"report", *r}};
  } else {
    EndProgress();
    LOG(ERROR) << "export failed: " << r.status().message();
    answer = {{"ok", false}, {"error", std::string(r.status().message())}};
  }
  for (const std::string& id : export_->request_ids) AnswerControl("export", id, answer);
  export_.reset();
}

void Launch::AnswerQueuedExports(const absl::StatusOr<nlohmann::json>& summary) {
  const nlohmann::json answer =
      summary.ok()
          ? nlohmann::json{{"ok", true}, {"report", *summary}}
          : nlohmann::json{{"ok", false}, {"error", std::string(summary.status().message())}};
  for (const std::string& id : std::exchange(queued_export_requests_, {})) {
    AnswerControl("export", id, answer);
  }
}

void Launch::LogExport(const nlohmann::json& summary) const {
  EndProgress();
  LOG(INFO) << exporter::DescribeExport(summary);
}

absl::StatusOr<nlohmann::json> Launch::FinalExport() {
  PollExport(/*wait=*/true);
  const double job_seconds = Since(start_);
  exporter::JobExportRequest request = ExportRequest();
  request.eval_data = eval_data_;
  absl::StatusOr<nlohmann::json> summary = exporter::ExportJob(request);
  if (summary.ok()) {
    (*summary)["job_seconds"] = {job_seconds, Since(start_)};
    LogExport(*summary);
    latest_export_ = *summary;
  }
  // Requests that waited for a running export get the final one.
  AnswerQueuedExports(summary);
  return summary;
}

}  // namespace shadowsync::cli::internal
