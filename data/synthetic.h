// Synthetic CTR data in the Criteo TSV layout, with labels drawn from a
// planted teacher model so the best achievable loss is known. Deterministic
// for a seed: the same options always produce the same bytes.
// GenerateSynthetic is thread-safe (no shared state; it runs its own worker
// threads); the structs are plain values.
#ifndef SHADOWSYNC_DATA_SYNTHETIC_H_
#define SHADOWSYNC_DATA_SYNTHETIC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shadowsync {

struct SyntheticOptions {
  std::string out_path;  // TSV output; a ".gz" suffix writes gzip.
  int64_t examples = 1'000'000;
  uint64_t seed = 1;
  // Held-out examples from the same teacher, written after the training ones
  // to eval_out_path (required when eval_examples > 0). The two files
  // together hold exactly the bytes of one file of examples + eval_examples.
  int64_t eval_examples = 0;
  std::string eval_out_path;
  // Generator threads; 0 = one per core. Default: 0. The bytes written do not
  // depend on it.
  int threads = 0;
  // Multi-hot: the last multi_hot_columns categorical columns (C26 first)
  // hold 1 to max_ids_per_field ids each, written comma-separated, drawn from
  // the column's distribution; the teacher sees such a field as the mean of
  // its ids' effects. 0 columns: every field holds one id, and the bytes are
  // those of a generator without the option.
  int multi_hot_columns = 0;
  int max_ids_per_field = 4;
};

// The teacher's own quality on the generated examples: the floor any model
// can reach. Written as `<out_path>.teacher.json`.
struct TeacherReport {
  int64_t examples = 0;
  double ctr = 0;      // Mean label.
  double logloss = 0;  // Mean binary cross-entropy of the teacher's probabilities.
  double ne = 0;       // logloss / entropy(ctr).
  double auc = 0;
};

// Writes options.examples examples to options.out_path and the teacher report
// beside it, and likewise the held-out examples when asked for (their report
// also into *eval_report, if not null). Returns InvalidArgument for bad
// options, an I/O error naming the path otherwise.
absl::StatusOr<TeacherReport> GenerateSynthetic(const SyntheticOptions& options,
                                                TeacherReport* eval_report = nullptr);

}  // namespace shadowsync

#endif  // SHADOWSYNC_DATA_SYNTHETIC_H_
