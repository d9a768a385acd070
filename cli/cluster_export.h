// Exports of a job the operator runs: trainer 0 takes them, on an interval,
// on request and a final one, from the dense checkpoints every trainer
// writes to the export claim, and publishes the newest on its /metrics
// (docs/export.md, "On Kubernetes", has the protocol).
//
//   ClusterExporter exporter(job, options);
//   worker_options.extra_metrics = exporter.registry();
//   exporter.Start();
//   ... train ...
//   SS_ASSIGN_OR_RETURN(nlohmann::json summary, exporter.FinalExport());
//
// A ClusterExporter has one owner thread (Start, Stop, FinalExport) and
// exports on a thread of its own. ExportMetrics is not thread-safe: one of
// them publishes at a time (the export thread, then FinalExport after
// joining it). The free functions are thread-safe.
#ifndef SHADOWSYNC_CLI_CLUSTER_EXPORT_H_
#define SHADOWSYNC_CLI_CLUSTER_EXPORT_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grpc_security.h"
#include "jobspec/job_spec.h"
#include "nlohmann/json.hpp"

namespace prometheus {
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace shadowsync::cli {

// <export_dir>/.trainers/<job_uid>: the trainers' files of one job (a
// claim may outlive the job and serve the next one of the same name).
std::string TrainersDir(const std::string& export_dir, const std::string& job_uid);
std::string TrainerCheckpoint(const std::string& trainers_dir, int index);
// Trainer `index` has trained its share; its checkpoint is final.
absl::Status MarkTrainerDone(const std::string& trainers_dir, int index);

struct ClusterExportOptions {
  std::string export_dir;    // Where the claim is mounted.
  std::string trainers_dir;  // TrainersDir().
  std::string config;        // The job file, re-read for the trainer count.
  std::string request_file;  // The ConfigMap's export-request file.
  std::string ps_address;
  std::vector<std::string> syncer_addresses;
  GrpcSecurity security;
  std::vector<std::string> eval_data;  // For the final export's score.
};

// The shadowsync_export_* metrics of one export `summary` (ExportJob's),
// taken for `request` ("" for none); `final` if it is the job's last.
class ExportMetrics {
 public:
  ExportMetrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  void Publish(const nlohmann::json& summary, const std::string& request, bool final);
  void CountFailure();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>* info_family_;
  prometheus::Gauge* info_ = nullptr;
  prometheus::Gauge *rows_, *eval_ne_, *eval_auc_, *examples_, *seconds_, *timestamp_, *exports_,
      *failures_;
};

class ClusterExporter {
 public:
  ClusterExporter(ShadowSyncJob job, ClusterExportOptions options);
  ~ClusterExporter();  // Stop()s.
  ClusterExporter(const ClusterExporter&) = delete;
  ClusterExporter& operator=(const ClusterExporter&) = delete;

  std::shared_ptr<prometheus::Registry> registry() const { return metrics_.registry(); }
  // Interval and on-demand exports, on a thread of their own at low CPU
  // priority.
  void Start();
  // Ends the thread after the export it may be taking.
  void Stop();
  // Stop()s, waits until every trainer has marked its share done, and
  // takes the final export. The summary's `request` is the last request.
  absl::StatusOr<nlohmann::json> FinalExport();

 private:
  void Loop();
  // The checkpoints of the trainers that have written one.
  std::vector<std::string> Checkpoints(int trainers) const;
  int Trainers() const;
  // `delta`: a delta export over the newest (ExportJob falls back to full).
  absl::StatusOr<nlohmann::json> Export(bool final, bool delta = false);
  std::string ReadRequest() const;
  void SetHandledRequest(const std::string& request);

  const ShadowSyncJob job_;
  const ClusterExportOptions options_;
  ExportMetrics metrics_;
  // Read by Loop() and, after Stop() has joined it, by FinalExport().
  std::string handled_request_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shadowsync::cli

#endif  // SHADOWSYNC_CLI_CLUSTER_EXPORT_H_
