// Writes a synthetic export of a job's model with N embedding rows (random
// values and Adagrad state, ids spread over every table) for bench/export.sh:
// the model a warm start loads and the servers then export again.
//
//   make_export --config job.yaml --rows 10000000 --out /tmp/model
#include <chrono>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "common/logging.h"
#include "exporter/job_export.h"
#include "glog/logging.h"
#include "jobspec/job_spec.h"
#include "model/dlrm.h"
#include "model/export.h"

int main(int argc, char** argv) {
  shadowsync::InitLogging(argv[0]);
  CLI::App app{"Writes a synthetic export of a job's model (bench/export.sh)."};
  std::string config, out;
  int64_t rows = 10'000'000;
  app.add_option("--config", config, "the job file")->required();
  app.add_option("--rows", rows, "embedding rows")->capture_default_str();
  app.add_option("--out", out, "export directory")->required();
  CLI11_PARSE(app, argc, argv);
  using namespace shadowsync;
  auto fail = [](const absl::Status& s) {
    LOG(ERROR) << "make_export: " << s.message();
    return 1;
  };
  absl::StatusOr<ShadowSyncJob> job = LoadJobFile(config);
  if (!job.ok()) return fail(job.status());
  const auto start = std::chrono::steady_clock::now();
  model::ExportInfo info = exporter::ExportInfoForJob(*job);
  info.dense_source = "synthetic (bench/make_export)";
  const size_t dim = static_cast<size_t>(info.embeddings.dim);
  const size_t tables = info.embeddings.tables.size();
  // Ids 0..per_table-1 of every table, within its hash buckets.
  const uint64_t per_table = static_cast<uint64_t>((rows + tables - 1) / tables);
  if (per_table > info.embeddings.tables.front().hash_buckets) {
    return fail(absl::InvalidArgumentError("--rows: more than the tables' hash buckets"));
  }
  auto writer = model::ExportWriter::Create(out, info);
  if (!writer.ok()) return fail(writer.status());
  const size_t n = static_cast<size_t>(model::Dlrm(info.config).num_params());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  std::vector<float> params(n), state(n, 0.1f);
  for (float& p : params) p = normal(rng);
  if (absl::Status s = (*writer)->WriteDense(params, state); !s.ok()) return fail(s);
  std::vector<float> values(dim), row_state(dim);
  int64_t written = 0;
  // Every part scans the whole key space and keeps its own slots: a few
  // hundred million hashes, no key set held in memory.
  for (int part = 0; part < info.num_parts; ++part) {
    if (absl::Status s = (*writer)->BeginPart(part); !s.ok()) return fail(s);
    const uint32_t begin = (*writer)->PartBegin(part), end = (*writer)->PartBegin(part + 1);
    for (uint64_t id = 0; id < per_table; ++id) {
      for (uint32_t t = 0; t < tables; ++t) {
        if (static_cast<int64_t>(id * tables + t) >= rows) break;
        const uint32_t slot = SlotOf(t, id, info.num_slots);
        if (slot < begin || slot >= end) continue;
        const uint64_t h = HashId(t, id);
        for (size_t k = 0; k < dim; ++k) {
          values[k] = (UniformFromKey(h + k) - 0.5f) * 0.02f;
          row_state[k] = UniformFromKey(~h + k);
        }
        if (absl::Status s = (*writer)->AddRow(t, id, values, row_state); !s.ok()) return fail(s);
        ++written;
      }
    }
    if (absl::Status s = (*writer)->EndPart(); !s.ok()) return fail(s);
  }
  if (absl::Status s = (*writer)->Commit(); !s.ok()) return fail(s);
  std::cout << absl::StrFormat(
      "make_export: %d rows in %.1f s -> %s\n", written,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), out);
  return 0;
}
