// Small helpers shared by the `shadowsync` subcommands.
#ifndef SHADOWSYNC_CLI_CLI_UTIL_H_
#define SHADOWSYNC_CLI_CLI_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/job_spec.h"

namespace shadowsync::cli {

// Writes "grpc_port metrics_port\n" through a rename, so a reader (a
// launcher, a test, a benchmark) never sees a partial file.
bool WriteReadyFile(const std::string& path, int grpc_port, int metrics_port);

// Splits comma-separated lists given as one or several flags.
std::vector<std::string> SplitList(const std::vector<std::string>& flags);

// The training and held-out files of a job. criteo-tsv: the spec's paths.
// synthetic: generates examples + evalExamples from one teacher into `dir`
// (reusing files a previous call left there) and splits them.
struct JobData {
  std::vector<std::string> train, eval;
  int64_t train_examples = -1;  // Known for synthetic data only.
};
absl::StatusOr<JobData> PrepareJobData(const JobSpec& spec, const std::string& dir);

}  // namespace shadowsync::cli

#endif  // SHADOWSYNC_CLI_CLI_UTIL_H_
