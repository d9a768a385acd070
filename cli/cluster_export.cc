#include "cli/cluster_export.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "exporter/job_export.h"
#include "glog/logging.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace shadowsync::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string DoneMarker(const std::string& trainers_dir, int index) {
  return absl::StrCat(trainers_dir, "/trainer-", index, ".done");
}

std::string ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(s.str()));
}

}  // namespace

std::string TrainersDir(const std::string& export_dir, const std::string& job_uid) {
  return absl::StrCat(export_dir, "/.trainers/", job_uid);
}

std::string TrainerCheckpoint(const std::string& trainers_dir, int index) {
  return absl::StrCat(trainers_dir, "/trainer-", index, ".ckpt");
}

absl::Status MarkTrainerDone(const std::string& trainers_dir, int index) {
  return WriteFileAtomically(DoneMarker(trainers_dir, index), "done\n");
}

ExportMetrics::ExportMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  info_family_ = &prometheus::BuildGauge()
                      .Name("shadowsync_export_info")
                      .Help(
                          "The newest export: model (its directory in the export claim), the "
                          "on-demand request it answered, and whether it is the final one.")
                      .Register(*registry_);
  auto gauge = [this](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_).Add({});
  };
  rows_ = gauge("shadowsync_export_rows", "Embedding rows in the newest export.");
  eval_ne_ = gauge("shadowsync_export_eval_ne", "Eval NE of the newest scored export.");
  eval_auc_ = gauge("shadowsync_export_eval_auc", "Eval AUC of the newest scored export.");
  examples_ = gauge("shadowsync_export_examples_trained",
                    "Examples trained into the newest export's dense parameters.");
  seconds_ = gauge("shadowsync_export_seconds", "How long the newest export took.");
  timestamp_ = gauge("shadowsync_export_timestamp_seconds", "When the newest export was taken.");
  exports_ = gauge("shadowsync_exports", "Exports taken by this trainer.");
  failures_ = gauge("shadowsync_export_failures", "Exports that failed on this trainer.");
}

void ExportMetrics::Publish(const nlohmann::json& summary, const std::string& request, bool final) {
  if (info_ != nullptr) info_family_->Remove(info_);
  info_ = &info_family_->Add({{"model", fs::path(summary.value("path", "")).filename().string()},
                              {"request", request},
                              {"final", final ? "true" : "false"}});
  info_->Set(1);
  rows_->Set(summary.value("rows", 0.0));
  examples_->Set(summary.value("examples_trained", 0.0));
  seconds_->Set(summary.value("seconds", 0.0));
  const nlohmann::json eval = summary.value("eval", nlohmann::json::object());
  if (eval.is_object() && eval.contains("eval_ne")) {
    eval_ne_->Set(eval["eval_ne"].get<double>());
    eval_auc_->Set(eval["eval_auc"].get<double>());
  }
  timestamp_->Set(
      summary.value("unix_seconds", absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())));
  exports_->Increment();
}

void ExportMetrics::CountFailure() { failures_->Increment(); }

// The answered request is kept on the claim: a restarted trainer 0 does
// not answer a request twice.
ClusterExporter::ClusterExporter(ShadowSyncJob job, ClusterExportOptions options)
    : job_(std::move(job)),
      options_(std::move(options)),
      handled_request_(ReadTrimmed(options_.trainers_dir + "/export-request.handled")) {}

ClusterExporter::~ClusterExporter() { Stop(); }

void ClusterExporter::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ClusterExporter::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

int ClusterExporter::Trainers() const {
  // Trainers scale live: the ConfigMap's job has the count now.
  absl::StatusOr<ShadowSyncJob> job = LoadJobFile(options_.config);
  return job.ok() ? job->spec.trainer.replicas : job_.spec.trainer.replicas;
}

std::vector<std::string> ClusterExporter::Checkpoints(int trainers) const {
  std::vector<std::string> out;
  for (int i = 0; i < trainers; ++i) {
    const std::string path = TrainerCheckpoint(options_.trainers_dir, i);
    if (fs::exists(path)) out.push_back(path);
  }
  return out;
}

std::string ClusterExporter::ReadRequest() const { return ReadTrimmed(options_.request_file); }

void ClusterExporter::SetHandledRequest(const std::string& request) {
  handled_request_ = request;
  const std::string path = options_.trainers_dir + "/export-request.handled";
  if (absl::Status s = WriteFileAtomically(path, request + "\n"); !s.ok()) {
    LOG(WARNING) << s.message();
  }
}

absl::StatusOr<nlohmann::json> ClusterExporter::Export(bool final, bool delta) {
  const std::vector<std::string> checkpoints = Checkpoints(Trainers());
  if (checkpoints.empty()) {
    return absl::UnavailableError("no trainer has written a checkpoint yet");
  }
  exporter::JobExportRequest request{.job = job_,
                                     .exports_dir = options_.export_dir,
                                     .ps_address = options_.ps_address,
                                     .syncer_addresses = options_.syncer_addresses,
                                     .trainer_checkpoints = checkpoints,
                                     .security = options_.security};
  if (final) request.eval_data = options_.eval_data;
  request.delta = delta && !final;
  absl::StatusOr<nlohmann::json> summary = exporter::ExportJob(request);
  if (!summary.ok()) {
    metrics_.CountFailure();
    return summary.status();
  }
  (*summary)["unix_seconds"] = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  LOG(INFO) << exporter::DescribeExport(*summary);
  return summary;
}

void ClusterExporter::Loop() {
  // Below training: an export takes spare CPU, not the trainer's.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  const int64_t interval = job_.spec.export_.interval_seconds;
  const int64_t delta_interval = job_.spec.export_.delta_interval_seconds;
  Clock::time_point last = Clock::now(), last_delta = last;
  while (!stop_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string request = ReadRequest();
    const bool asked = !request.empty() && request != handled_request_;
    const bool due = interval > 0 && Clock::now() - last >= std::chrono::seconds(interval);
    const bool delta_due =
        delta_interval > 0 && Clock::now() - last_delta >= std::chrono::seconds(delta_interval);
    if (!asked && !due && !delta_due) continue;
    // Nothing to export before the first checkpoint: the request waits.
    if (Checkpoints(Trainers()).empty()) continue;
    const bool delta = !asked && !due;
    last_delta = Clock::now();
    if (!delta) last = last_delta;
    absl::StatusOr<nlohmann::json> summary = Export(/*final=*/false, delta);
    if (summary.ok()) {
      metrics_.Publish(*summary, asked ? request : "", /*final=*/false);
    } else {
      LOG(ERROR) << "export failed: " << summary.status().message();
    }
    // Answered either way: a request is not retried forever; the failure
    // is on /metrics and in this log.
    if (asked) SetHandledRequest(request);
  }
}

absl::StatusOr<nlohmann::json> ClusterExporter::FinalExport() {
  Stop();
  for (int waited = 0;; ++waited) {
    const int trainers = Trainers();
    int done = 0;
    for (int i = 0; i < trainers; ++i) {
      done += fs::exists(DoneMarker(options_.trainers_dir, i)) ? 1 : 0;
    }
    if (done == trainers) break;
    if (waited % 30 == 0) {
      LOG(INFO) << "final export: " << done << " of " << trainers
                << " trainers have finished; waiting for the rest";
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  SS_ASSIGN_OR_RETURN(nlohmann::json summary, Export(/*final=*/true));
  // A request still open is answered by this export, taken after it.
  const std::string request = ReadRequest();
  if (!request.empty() && request != handled_request_) SetHandledRequest(request);
  summary["request"] = handled_request_;
  metrics_.Publish(summary, handled_request_, /*final=*/true);
  return summary;
}

}  // namespace shadowsync::cli
