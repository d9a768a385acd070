// Fuzzes the job-spec YAML parser and validator (jobspec/job_spec.h), which
// reads what users and the API server hand us. Invariants: no crash or
// sanitizer report; a decoding error names the source, a validation error
// the field; a valid job survives the JSON round trip the operator's
// ConfigMap relies on, and summarises.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "jobspec/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<shadowsync::ShadowSyncJob> job = shadowsync::ParseJobYaml(text, "fuzz.yaml");
  if (!job.ok()) {
    if (std::string(job.status().message()).find("fuzz.yaml") == std::string::npos) {
      std::fprintf(stderr, "error does not name its source: %s\n", job.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  // Decoding does not range-check; ValidateJob does, naming field paths.
  if (const absl::Status valid = shadowsync::ValidateJob(*job); !valid.ok()) {
    if (std::string(valid.message()).find("spec.") == std::string::npos &&
        std::string(valid.message()).find("metadata.") == std::string::npos) {
      std::fprintf(stderr, "validation error names no field: %s\n", valid.ToString().c_str());
      std::abort();
    }
    return 0;
  }
  absl::StatusOr<shadowsync::ShadowSyncJob> again =
      shadowsync::JobFromJson(shadowsync::JobToJson(*job));
  if (!again.ok()) {
    std::fprintf(stderr, "JSON round trip refused: %s\n", again.status().ToString().c_str());
    std::abort();
  }
  if (!(*again == *job)) {
    std::fprintf(stderr, "JSON round trip changed the job\n");
    std::abort();
  }
  (void)shadowsync::JobSummary(*job);
  return 0;
}
