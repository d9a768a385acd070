#include "jobspec/job_spec.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/example.h"

namespace shadowsync {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------
// Problems: every decoder and validator appends here instead of stopping at
// the first, so a user fixes a file in one round.

struct Problem {
  std::string path;     // "spec.trainer.replicas"; "" for the document itself.
  std::string message;  // "must be >= 1, got 0".
  // Where to look the line up in a YAML source: the path itself, or for a
  // missing field its parent object.
  std::optional<std::string> line_path = std::nullopt;
  // A line known directly (YAML problems found while converting).
  std::optional<int> line = std::nullopt;
};
using Problems = std::vector<Problem>;

// Field path -> 1-based source line, filled while converting YAML.
using LineMap = std::map<std::string, int>;

constexpr size_t kMaxReportedProblems = 20;

// Debian's absl has its own string_view type rather than an alias of
// std::string_view; this bridges our std::string_views into absl calls.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Join(std::string_view parent, std::string_view name) {
  return parent.empty() ? std::string(name) : absl::StrCat(Av(parent), ".", Av(name));
}

std::string Index(std::string_view parent, size_t i) {
  return absl::StrCat(Av(parent), "[", i, "]");
}

// ---------------------------------------------------------------------------
// The field table. One Fields() per struct lists its fields in wire order
// with name, documentation and bounds; defaults come from the member
// initializers in job_spec.h. Every visitor below walks these tables.

struct FieldInfo {
  std::string_view name;  // JSON/YAML key.
  std::string_view doc;   // One or two sentences for the docs and the CRD.
  // Numeric bounds; for lists of numbers they apply to each element. For a
  // Quantity they apply to its value.
  std::optional<double> min = std::nullopt;
  std::optional<double> max = std::nullopt;
  bool exclusive_min = false;
  bool exclusive_max = false;
  bool required = false;
  // For a default the member initializer cannot express (derived from other
  // fields), the text shown instead, e.g. "0.9 / spec.trainer.replicas".
  std::string_view default_doc = {};
  // False keeps the default out of the CRD schema, where API-server
  // defaulting would fill it in and clash with a shorthand.
  bool schema_default = true;
};

// What `model.criteoTables` decodes into before it expands into `tables`.
struct CriteoTablesShorthand {
  int64_t hash_buckets = kDefaultHashBuckets;
};

// Kubernetes ObjectMeta fields the API server fills in; accepted, dropped.
constexpr std::array<std::string_view, 11> kServerMetadataFields = {"uid",
                                                                    "resourceVersion",
                                                                    "generation",
                                                                    "creationTimestamp",
                                                                    "deletionTimestamp",
                                                                    "deletionGracePeriodSeconds",
                                                                    "managedFields",
                                                                    "ownerReferences",
                                                                    "finalizers",
                                                                    "generateName",
                                                                    "selfLink"};

template <typename S, typename T>
concept Is = std::same_as<std::remove_const_t<S>, T>;

static_assert(kMaxJobNameLength == 40, "update the metadata.name doc below");

template <typename V, Is<JobMetadata> S>
void Fields(V& v, S& s) {
  v(s.name,
    {.name = "name",
     .doc = "Job name: a DNS-1035 label (lowercase letters, digits and '-', starting with a "
            "letter) of at most 40 characters, so child names such as "
            "`<name>-trainer-12` stay within Kubernetes limits.",
     .required = true});
  v(s.namespace_name, {.name = "namespace",
                       .doc = "Kubernetes namespace; empty means the current one. Ignored by the "
                              "local launcher."});
  v(s.labels, {.name = "labels", .doc = "Labels, copied onto every child object."});
  v(s.annotations, {.name = "annotations", .doc = "Annotations."});
  v.Ignore(kServerMetadataFields);
}

template <typename V, Is<TableSpec> S>
void Fields(V& v, S& s) {
  v(s.name, {.name = "name", .doc = "Table name, unique within the model.", .required = true});
  v(s.hash_buckets,
    {.name = "hashBuckets",
     .doc = "Rows in the table: raw ids are hashed into [0, hashBuckets). Rows are "
            "created on first use, so this bounds memory rather than allocating it.",
     .min = 1});
}

template <typename V, Is<CriteoTablesShorthand> S>
void Fields(V& v, S& s) {
  v(s.hash_buckets, {.name = "hashBuckets", .doc = "Rows in each of the 26 tables.", .min = 1});
}

template <typename V, Is<ModelSpec> S>
void Fields(V& v, S& s) {
  v(s.dense_features, {.name = "denseFeatures",
                       .doc = "Dense (integer) features per example. The Criteo layout, which both "
                              "data formats produce, has 13.",
                       .min = 1});
  v(s.embedding_dim, {.name = "embeddingDim",
                      .doc = "Embedding row width; also the width of the bottom MLP's implicit "
                             "last layer.",
                      .min = 1,
                      .max = 4096});
  v(s.bottom_mlp, {.name = "bottomMlp",
                   .doc = "Hidden layer widths of the bottom MLP over the dense features. A last "
                          "layer of width embeddingDim is implicit; may be empty.",
                   .min = 1});
  v(s.top_mlp, {.name = "topMlp",
                .doc = "Hidden layer widths of the top MLP over the feature interactions. The "
                       "final 1-wide logit layer is implicit; may be empty.",
                .min = 1});
  v(s.tables, {.name = "tables",
               .doc = "Embedding tables, one per categorical column, in column order (26 for the "
                      "Criteo layout). Give either this or `criteoTables`.",
               .default_doc = "the 26 Criteo tables `C1`..`C26`, 1000000 hash buckets each",
               .schema_default = false});
  v.template Shorthand<CriteoTablesShorthand>(
      {.name = "criteoTables",
       .doc = "Shorthand for `tables`: the 26 Criteo tables `C1`..`C26`, all with the given "
              "hashBuckets, e.g. `criteoTables: {hashBuckets: 100000}`. Cannot be combined with "
              "`tables`; expanded when the spec is read."},
      "tables", s.tables,
      [](const CriteoTablesShorthand& c, auto& tables) { tables = CriteoTables(c.hash_buckets); });
}

template <typename V, Is<SyntheticDataSpec> S>
void Fields(V& v, S& s) {
  v(s.examples, {.name = "examples", .doc = "Training examples to generate.", .min = 1});
  v(s.eval_examples, {.name = "evalExamples",
                      .doc = "Held-out examples from the same teacher model, for NE, AUC and "
                             "logloss; 0 = no evaluation.",
                      .min = 0});
  v(s.seed,
    {.name = "seed", .doc = "Generator seed: the same seed gives the same data.", .min = 0});
}

template <typename V, Is<DataSpec> S>
void Fields(V& v, S& s) {
  v(s.format, {.name = "format",
               .doc = "`criteo-tsv` reads `paths` (Criteo Display Advertising TSV, plain or gzip); "
                      "`synthetic` generates the same layout with labels from a planted teacher "
                      "model, so the best achievable loss is known."});
  v(s.paths, {.name = "paths",
              .doc = "criteo-tsv training files, read in order and split across trainers by line. "
                     "Required for criteo-tsv."});
  v(s.eval_paths, {.name = "evalPaths",
                   .doc = "Held-out files in the same format for NE, AUC and logloss; empty = no "
                          "evaluation for criteo-tsv."});
  v(s.synthetic,
    {.name = "synthetic", .doc = "Generator settings, read when format is synthetic."});
}

template <typename V, Is<StragglerSpec> S>
void Fields(V& v, S& s) {
  v(s.count, {.name = "count", .doc = "Trainers slowed down: indices 0..count-1.", .min = 1});
  v(s.delay_ms, {.name = "delayMs", .doc = "Sleep added after every step, in ms.", .min = 0});
  v(s.jitter_ms, {.name = "jitterMs",
                  .doc = "Extra uniform random sleep in [0, jitterMs] ms per step.",
                  .min = 0});
}

template <typename V, Is<TrainerSpec> S>
void Fields(V& v, S& s) {
  v(s.replicas, {.name = "replicas", .doc = "Trainer processes (pods).", .min = 1});
  v(s.threads, {.name = "threads",
                .doc = "Hogwild threads per trainer, sharing one dense replica without locks.",
                .min = 1,
                .max = 1024});
  v(s.batch_size,
    {.name = "batchSize", .doc = "Examples per step of one thread.", .min = 1, .max = 1 << 20});
  v(s.learning_rate, {.name = "learningRate",
                      .doc = "Step size of the dense optimizer.",
                      .min = 0,
                      .exclusive_min = true});
  v(s.optimizer, {.name = "optimizer", .doc = "Dense optimizer, run by every Hogwild thread."});
  v(s.dense_precision,
    {.name = "densePrecision",
     .doc = "Arithmetic of the MLP GEMMs: fp32; bf16 (inputs rounded to bfloat16, fp32 products, "
            "sums, weights and optimizer: 1.3-1.5x the examples/s of fp32 on DLRM-small with "
            "AVX512-BF16, one thread); or auto, bf16 where the CPU has AVX512-BF16, else fp32."});
  v(s.straggler, {.name = "straggler",
                  .doc = "Injected slowness for straggler experiments; absent = none. Local "
                         "launcher and Kubernetes alike."});
  v(s.pod_template, {.name = "template",
                     .doc = "Pod template for trainer pods (image, resources, ...), kept as "
                            "given. Kubernetes only; the local launcher ignores it."});
}

template <typename V, Is<AdmissionSpec> S>
void Fields(V& v, S& s) {
  v(s.min_count, {.name = "minCount",
                  .doc = "An unseen id gets a row only after this many lookups; 1 = at once.",
                  .min = 1});
  v(s.probability, {.name = "probability",
                    .doc = "Then it is admitted with this probability; 1 = always.",
                    .min = 0,
                    .max = 1,
                    .exclusive_min = true});
}

template <typename V, Is<EvictionSpec> S>
void Fields(V& v, S& s) {
  v(s.ttl_seconds, {.name = "ttlSeconds",
                    .doc = "Rows untouched for this many seconds are dropped; 0 = never.",
                    .min = 0});
  v(s.max_rows, {.name = "maxRows",
                 .doc = "Rows per server, least recently used dropped first; 0 = no cap.",
                 .min = 0});
}

template <typename V, Is<StorageSpec> S>
void Fields(V& v, S& s) {
  v(s.size, {.name = "size", .doc = "PersistentVolumeClaim size. Kubernetes only.", .min = 1});
  v(s.storage_class_name,
    {.name = "storageClassName", .doc = "StorageClass of the claim; empty = the cluster default."});
}

template <typename V, Is<ParameterServerSpec> S>
void Fields(V& v, S& s) {
  v(s.replicas, {.name = "replicas", .doc = "Embedding parameter servers.", .min = 1});
  v(s.slots, {.name = "slots",
              .doc = "Hash slots the embedding rows are spread over (slot = H(table, id) mod "
                     "slots); the unit of resharding. Fixed for the life of the job.",
              .min = 1,
              .max = kMaxSlots});
  v(s.optimizer, {.name = "optimizer", .doc = "Sparse optimizer, run on the servers."});
  v(s.learning_rate, {.name = "learningRate",
                      .doc = "Step size of the sparse optimizer.",
                      .min = 0,
                      .exclusive_min = true,
                      .default_doc = "`spec.trainer.learningRate`"});
  v(s.cache_bytes, {.name = "cacheBytes",
                    .doc = "RAM row cache in front of RocksDB per server, as a quantity (`1Gi`); "
                           "0 = every lookup reads RocksDB.",
                    .min = 0});
  v(s.admission, {.name = "admission", .doc = "Feature admission for ids never seen before."});
  v(s.eviction, {.name = "eviction", .doc = "Row eviction."});
  v(s.storage, {.name = "storage", .doc = "Persistent storage per server, for RocksDB."});
  v(s.pod_template,
    {.name = "template", .doc = "Pod template for parameter-server pods. Kubernetes only."});
}

template <typename V, Is<SyncerSpec> S>
void Fields(V& v, S& s) {
  v(s.replicas, {.name = "replicas",
                 .doc = "Sync servers; dense parameters are split by range over them. 0 only "
                        "with algorithm none.",
                 .min = 0});
  v(s.pod_template, {.name = "template", .doc = "Pod template for syncer pods. Kubernetes only."});
}

template <typename V, Is<EasgdSpec> S>
void Fields(V& v, S& s) {
  v(s.alpha, {.name = "alpha",
              .doc = "Elastic moving rate: each round moves the replica and the centre "
                     "alpha * (replica - centre) towards each other.",
              .min = 0,
              .max = 1,
              .exclusive_min = true,
              .default_doc = "`0.9 / spec.trainer.replicas` (EASGD's beta = 0.9 split over the "
                             "trainers)"});
}

template <typename V, Is<BmufSpec> S>
void Fields(V& v, S& s) {
  v(s.block_momentum, {.name = "blockMomentum",
                       .doc = "Block momentum applied to the averaged block update.",
                       .min = 0,
                       .max = 1,
                       .exclusive_max = true,
                       .default_doc = "`0.5`"});
  v(s.block_learning_rate, {.name = "blockLearningRate",
                            .doc = "Block learning rate (zeta), mean convention: 1 with momentum "
                                   "0 is plain model averaging. The default keeps the filter's "
                                   "gain zeta / (1 - blockMomentum) at 1; the paper's zeta = 1 "
                                   "multiplies the averaged update by the trainer count, which "
                                   "diverged with Adagrad (docs/sync.md).",
                            .min = 0,
                            .exclusive_min = true,
                            .default_doc = "`1 - blockMomentum`"});
  v(s.nesterov,
    {.name = "nesterov", .doc = "Start each block from the Nesterov look-ahead point."});
}

template <typename V, Is<DsSyncSpec> S>
void Fields(V& v, S& s) {
  v(s.group_size, {.name = "groupSize",
                   .doc = "Trainers per all-reduce group; must divide spec.trainer.replicas.",
                   .min = 2});
  v(s.schedule, {.name = "schedule",
                 .doc = "Regrouping each round: `random` draws groups from a permutation every "
                        "trainer derives from the shared seed (repeating after 16 rounds); "
                        "`butterfly` groups the trainers that differ in one base-g digit of "
                        "their index, digit (round mod m), m = ceil(log_g N), which gives every "
                        "replica the exact global average every m rounds (N = g x r_1 x ... x "
                        "r_{m-1} with every r <= g; e.g. g = 2 needs a power of two)."});
  v(s.seed, {.name = "seed", .doc = "Shared seed of the random schedule.", .min = 0});
}

template <typename V, Is<SyncSwitchSpec> S>
void Fields(V& v, S& s) {
  v(s.policy, {.name = "policy",
               .doc = "`offline`: BSP for the first switchFraction of the run, then ASP. "
                      "`online`: additionally leaves BSP while a straggler is detected and "
                      "returns to finish the BSP share once it recovers."});
  v(s.switch_fraction, {.name = "switchFraction",
                        .doc = "Share of the run's examples trained under BSP before switching to "
                               "ASP.",
                        .min = 0,
                        .max = 1});
  v(s.straggler_factor, {.name = "stragglerFactor",
                         .doc = "Online policy: a trainer is a straggler while its step time "
                                "exceeds this multiple of the median.",
                         .min = 1,
                         .exclusive_min = true});
  v(s.window_steps,
    {.name = "windowSteps", .doc = "Online policy: steps per step-time measurement.", .min = 1});
  v(s.switch_step, {.name = "switchStep",
                    .doc = "BSP rounds (steps of each trainer thread) trained before switching "
                           "to ASP; overrides switchFraction.",
                    .min = 0,
                    .default_doc = "`switchFraction` of the run's steps"});
  v(s.asp_learning_rate_scale,
    {.name = "aspLearningRateScale",
     .doc = "The ASP phases' dense learning rate is spec.trainer.learningRate times this: BSP "
            "averages N trainers' gradients, ASP applies each one (the paper rescales 0.8 -> "
            "0.1 on 8 workers).",
     .min = 0,
     .exclusive_min = true,
     .default_doc = "`1 / spec.trainer.replicas`"});
  v(s.asp_batch_size, {.name = "aspBatchSize",
                       .doc = "Examples per thread step in the ASP phases.",
                       .min = 1,
                       .default_doc = "`spec.trainer.batchSize`"});
}

template <typename V, Is<PsPlusSpec> S>
void Fields(V& v, S& s) {
  v(s.lr_modulation, {.name = "lrModulation",
                      .doc = "Learning-rate modulation by the staleness tau of a gradient: "
                             "`none` (eta), `inverse` (eta / max(1, tau)), `inverse-plus-one` "
                             "(eta / (1 + tau)), `exponential` (eta * gamma^tau)."});
  v(s.gamma, {.name = "gamma",
              .doc = "Base of the exponential rule.",
              .min = 0,
              .max = 1,
              .exclusive_min = true});
}

template <typename V, Is<SspSpec> S>
void Fields(V& v, S& s) {
  v(s.staleness, {.name = "staleness",
                  .doc = "Steps a trainer may run ahead of the slowest one; 0 = BSP.",
                  .min = 0});
}

template <typename V, Is<SyncSpec> S>
void Fields(V& v, S& s) {
  v(s.algorithm, {.name = "algorithm",
                  .doc = "Dense synchronization strategy (DESIGN.md §5). `shadow-*` run in a "
                         "background thread, `fg-*` inline every `interval` steps."});
  v(s.interval, {.name = "interval",
                 .doc = "fg-easgd, fg-ma, fg-bmuf: trainer steps between two syncs (the "
                        "papers' k).",
                 .min = 1});
  v(s.min_interval_ms, {.name = "minIntervalMs",
                        .doc = "shadow-*: least pause between two rounds of the shadow thread, "
                               "in ms (see dutyCycle); 0 = no minimum.",
                        .min = 0});
  v(s.duty_cycle, {.name = "dutyCycle",
                   .doc = "shadow-*: share of wall time the shadow thread may spend in sync "
                          "rounds; after a round of latency L (less its waits for the other "
                          "trainers and for a training step to end) it pauses L * (1 - d) / d "
                          "(at least minIntervalMs). 1 = back to back. Keeps sync off the "
                          "training threads' cores when the machine has none to spare.",
                   .min = 0,
                   .max = 1,
                   .exclusive_min = true});
  v(s.warmup_steps, {.name = "warmupSteps",
                     .doc = "shadow-*: steps of each trainer thread at the start that average "
                            "the replicas in the foreground after every step (all trainers "
                            "wait for each other) before the shadow thread takes over. 0 = "
                            "none.",
                     .min = 0});
  v(s.final_average, {.name = "finalAverage",
                      .doc = "shadow-*: once a trainer is done it waits (up to the syncer's "
                             "member timeout) for the others, and every replica ends at "
                             "their mean."});
  v(s.apply_mode, {.name = "applyMode",
                   .doc = "How a round's result reaches the live replica: `delta` applies it "
                          "as a delta on the round's snapshot, keeping Hogwild progress made "
                          "meanwhile; `overwrite` replaces the replica (ablation)."});
  v(s.learning_rate_scale,
    {.name = "learningRateScale",
     .doc = "asp, ssp, ps-plus: the dense learning rate is spec.trainer.learningRate times this. "
            "Each trainer's update goes straight to the shared weights, so N trainers move them "
            "N times per round of batches where bsp moves them once by the mean.",
     .min = 0,
     .exclusive_min = true,
     .default_doc = "`1 / spec.trainer.replicas`"});
  v(s.replica_learning_rate_scale,
    {.name = "replicaLearningRateScale",
     .doc = "shadow-* and fg-*: each trainer's dense learning rate is spec.trainer.learningRate "
            "times this. With Adagrad a replica's accumulator sums only its own share of the "
            "gradients (about 1/N of a single trainer's at the same point in the data), so its "
            "steps are about sqrt(N) times as large.",
     .min = 0,
     .exclusive_min = true,
     .default_doc = "`1 / sqrt(spec.trainer.replicas)` with adagrad, 1 with sgd"});
  v(s.easgd, {.name = "easgd", .doc = "Parameters of shadow-easgd and fg-easgd."});
  v(s.bmuf, {.name = "bmuf", .doc = "Parameters of shadow-bmuf and fg-bmuf."});
  v(s.ds_sync, {.name = "dsSync", .doc = "Parameters of ds-sync."});
  v(s.sync_switch, {.name = "syncSwitch", .doc = "Parameters of sync-switch."});
  v(s.ps_plus, {.name = "psPlus", .doc = "Parameters of ps-plus."});
  v(s.ssp, {.name = "ssp", .doc = "Parameters of ssp."});
}

template <typename V, Is<CheckpointSpec> S>
void Fields(V& v, S& s) {
  v(s.path, {.name = "path",
             .doc = "Directory the trainers write their dense checkpoints under; empty = the run "
                    "directory of `shadowsync run` (docs/resharding.md)."});
  v(s.interval_seconds,
    {.name = "intervalSeconds", .doc = "Seconds between two checkpoints.", .min = 1});
}

template <typename V, Is<ExportSpec> S>
void Fields(V& v, S& s) {
  v(s.path, {.name = "path",
             .doc = "Directory the exports go under, each in its own subdirectory; empty = "
                    "`exports/` in the run directory of `shadowsync run`. On Kubernetes: where "
                    "the trainer pods mount the claim (docs/export.md)."});
  v(s.interval_seconds, {.name = "intervalSeconds",
                         .doc = "Seconds between two exports while training runs; 0 = only at "
                                "completion and on demand.",
                         .min = 0});
  v(s.keep, {.name = "keep", .doc = "Newest exports kept; older ones are deleted.", .min = 1});
  v(s.with_optimizer_state,
    {.name = "withOptimizerState",
     .doc = "Export the optimizer state (Adagrad's accumulators) with the weights, so that a "
            "warm-started job continues training where this one stopped."});
  v(s.volume_claim_name,
    {.name = "volumeClaimName",
     .doc = "Kubernetes only: the PersistentVolumeClaim the exports go to; every trainer pod "
            "mounts it. Empty = the operator creates `<job>-exports` (ReadWriteMany, of "
            "`storage`), which outlives the job."});
  v(s.storage,
    {.name = "storage", .doc = "The claim the operator creates when `volumeClaimName` is empty."});
}

template <typename V, Is<InitSpec> S>
void Fields(V& v, S& s) {
  v(s.from_model, {.name = "fromModel",
                   .doc = "An export directory to start from (dense parameters and every "
                          "embedding row, loaded onto however many servers this job has); "
                          "empty = a fresh model. On Kubernetes: a path inside "
                          "`volumeClaimName`, e.g. `model-000003`."});
  v(s.volume_claim_name,
    {.name = "volumeClaimName",
     .doc = "Kubernetes only: the PersistentVolumeClaim holding the export (e.g. an earlier "
            "job's `<job>-exports`); the trainer pods mount it read-only."});
}

template <typename V, Is<RunPolicySpec> S>
void Fields(V& v, S& s) {
  v(s.backoff_limit, {.name = "backoffLimit",
                      .doc = "Pod restarts tolerated before the job is marked Failed.",
                      .min = 0});
  v(s.active_deadline_seconds, {.name = "activeDeadlineSeconds",
                                .doc = "Seconds the job may run before it is stopped and marked "
                                       "Failed; absent = no limit.",
                                .min = 1});
  v(s.ttl_seconds_after_finished, {.name = "ttlSecondsAfterFinished",
                                   .doc = "Seconds after finishing before the job is deleted; "
                                          "absent = never.",
                                   .min = 0});
  v(s.suspend,
    {.name = "suspend", .doc = "True stops all pods but keeps the job; false resumes it."});
  v(s.clean_pod_policy, {.name = "cleanPodPolicy",
                         .doc = "Pods deleted when the job finishes. `Running` (default) stops "
                                "the servers, which never exit on their own, and keeps finished "
                                "trainer pods for their logs."});
}

template <typename V, Is<TlsSpec> S>
void Fields(V& v, S& s) {
  v(s.ca_file, {.name = "caFile",
                .doc = "PEM CA certificate(s) a peer's certificate must chain to (path as the "
                       "processes see it)."});
  v(s.cert_file, {.name = "certFile",
                  .doc = "PEM certificate every process presents, as server and as client; its "
                         "SANs must include serverName."});
  v(s.key_file, {.name = "keyFile", .doc = "PEM private key of certFile."});
  v(s.server_name, {.name = "serverName",
                    .doc = "DNS name clients verify the servers' certificate for, whatever "
                           "address they dial; empty = the dialled host."});
  v(s.secret_name, {.name = "secretName",
                    .doc = "Kubernetes only: a Secret with ca.crt, tls.crt and tls.key that the "
                           "operator mounts read-only at /etc/shadowsync/tls in every pod."});
}

template <typename V, Is<AuthTokenSpec> S>
void Fields(V& v, S& s) {
  v(s.file, {.name = "file",
             .doc = "File holding the shared bearer token (surrounding whitespace is "
                    "ignored). The token itself never appears in the spec, flags or logs."});
  v(s.secret_name, {.name = "secretName",
                    .doc = "Kubernetes only: a Secret with the key `token` that the operator "
                           "mounts read-only at /etc/shadowsync/auth in every pod."});
}

template <typename V, Is<SecuritySpec> S>
void Fields(V& v, S& s) {
  v(s.tls, {.name = "tls",
            .doc = "Mutual TLS on every gRPC link (docs/security.md); absent = plaintext."});
  v(s.auth_token,
    {.name = "authToken",
     .doc = "Shared bearer token every gRPC call carries and parameter servers and syncers "
            "check; absent = none."});
}

template <typename V, Is<JobSpec> S>
void Fields(V& v, S& s) {
  v(s.model, {.name = "model", .doc = "The DLRM model. Default: DLRM-small."});
  v(s.data, {.name = "data", .doc = "Training and evaluation data."});
  v(s.trainer, {.name = "trainer", .doc = "Trainers: data-parallel replicas of the dense model."});
  v(s.parameter_server,
    {.name = "parameterServer", .doc = "Embedding parameter servers (sharded tables)."});
  v(s.syncer, {.name = "syncer", .doc = "Sync servers for the dense parameters."});
  v(s.sync, {.name = "sync", .doc = "Dense synchronization strategy and its parameters."});
  v(s.checkpoint, {.name = "checkpoint", .doc = "Periodic checkpoints."});
  v(s.export_, {.name = "export", .doc = "Exports of the trained model (docs/export.md)."});
  v(s.init, {.name = "init", .doc = "Where the model starts from: fresh, or a previous export."});
  v(s.run_policy,
    {.name = "runPolicy", .doc = "Lifecycle policy, as in Kubeflow's TFJob/PyTorchJob."});
  v(s.security, {.name = "security",
                 .doc = "Transport security: mutual TLS and a bearer token (docs/security.md)."});
}

template <typename V, Is<ShadowSyncJob> S>
void Fields(V& v, S& s) {
  v(s.metadata,
    {.name = "metadata", .doc = "Object metadata (a subset of Kubernetes ObjectMeta)."});
  v(s.spec, {.name = "spec", .doc = "The job's desired state."});
}

// ---------------------------------------------------------------------------
// Type classification shared by the visitors.

template <typename T>
struct IsOptionalT : std::false_type {};
template <typename T>
struct IsOptionalT<std::optional<T>> : std::true_type {};
template <typename T>
struct IsVectorT : std::false_type {};
template <typename T>
struct IsVectorT<std::vector<T>> : std::true_type {};

template <typename T>
constexpr bool kIsOptional = IsOptionalT<T>::value;
template <typename T>
constexpr bool kIsVector = IsVectorT<T>::value;
template <typename T>
constexpr bool kIsStringMap = std::is_same_v<T, std::map<std::string, std::string>>;
template <typename T>
constexpr bool kIsInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

struct AnyVisitor {};
template <typename T>
concept HasFields = requires(AnyVisitor& v, T& t) {
  Fields(v, t);
};

// ---------------------------------------------------------------------------
// Small formatting helpers.

// JSON text of `j` for a message: user strings may hold invalid UTF-8, which
// dump() throws on; it is shown replaced (U+FFFD) instead.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A JSON value as shown after "got": strings quoted (and shortened),
// containers by kind.
std::string Got(const json& j) {
  switch (j.type()) {
    case json::value_t::string: {
      std::string s = j.get<std::string>();
      if (s.size() > 40) {
        size_t cut = 37;  // Not inside a UTF-8 sequence: JSON could not hold half of one.
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
        s = s.substr(0, cut) + "...";
      }
      return Dump(json(s));
    }
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "a list";
    case json::value_t::null:
      return "null";
    case json::value_t::number_float: {
      double d = j.get<double>();
      return std::isfinite(d) ? absl::StrCat(d) : (std::isnan(d) ? ".nan" : ".inf");
    }
    default:
      return Dump(j);
  }
}

std::string QuotedList(auto names) {
  std::vector<std::string> quoted;
  for (std::string_view n : names) {
    quoted.push_back(absl::StrCat("\"", Av(n), "\""));
  }
  return absl::StrJoin(quoted, ", ");
}

std::string FormatBound(double b, bool integral) {
  return integral ? absl::StrCat(static_cast<int64_t>(b)) : absl::StrCat(b);
}

// "must be >= 1", "must be in (0, 1]".
std::string RangeText(const FieldInfo& f, bool integral) {
  if (f.min && f.max) {
    return absl::StrCat("in ", f.exclusive_min ? "(" : "[", FormatBound(*f.min, integral), ", ",
                        FormatBound(*f.max, integral), f.exclusive_max ? ")" : "]");
  }
  if (f.min) {
    return absl::StrCat(f.exclusive_min ? "> " : ">= ", FormatBound(*f.min, integral));
  }
  if (f.max) {
    return absl::StrCat(f.exclusive_max ? "< " : "<= ", FormatBound(*f.max, integral));
  }
  return "";
}

// Edit distance on names normalised for case and '_'/'-', so "batch_size"
// and "BatchSize" both find "batchSize".
std::string NormalizeName(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '-') {
      continue;
    }
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// Optimal-string-alignment distance: insertions, deletions, substitutions
// and adjacent transpositions ("nmae" -> "name") each cost 1.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) {
    d[i][0] = i;
  }
  for (size_t j = 0; j <= b.size(); ++j) {
    d[0][j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string_view> Suggest(std::string_view wrong,
                                        const std::vector<std::string_view>& candidates) {
  const std::string w = NormalizeName(wrong);
  const size_t limit = std::clamp<size_t>(w.size() / 3, 1, 3);
  std::optional<std::string_view> best;
  size_t best_distance = limit + 1;
  for (std::string_view c : candidates) {
    size_t d = EditDistance(w, NormalizeName(c));
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------
// Range checks: the bounds of the field table applied to values. Used by
// ValidateJob and, for shorthands, by the decoder.

class RangeChecker {
 public:
  RangeChecker(std::string path, Problems& problems)
      : path_(std::move(path)), problems_(problems) {}

  template <typename T>
  void operator()(const T& value, const FieldInfo& f) {
    Check(value, Join(path_, f.name), f);
  }
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo&, std::string_view, const Target&, Apply) {}
  void Ignore(const auto&) {}

 private:
  template <typename T>
  void Check(const T& value, const std::string& path, const FieldInfo& f) {
    if constexpr (kIsInteger<T>) {
      CheckNumber(static_cast<double>(value), absl::StrCat(value), path, f, true);
    } else if constexpr (std::is_floating_point_v<T>) {
      CheckNumber(value, absl::StrCat(value), path, f, false);
    } else if constexpr (std::is_same_v<T, Quantity>) {
      CheckNumber(static_cast<double>(value.value), value.text, path, f, true);
    } else if constexpr (kIsOptional<T>) {
      if (value) {
        Check(*value, path, f);
      }
    } else if constexpr (kIsVector<T>) {
      for (size_t i = 0; i < value.size(); ++i) {
        Check(value[i], Index(path, i), f);
      }
    } else if constexpr (HasFields<T>) {
      RangeChecker sub(path, problems_);
      Fields(sub, value);
    }
  }

  void CheckNumber(double v, const std::string& shown, const std::string& path, const FieldInfo& f,
                   bool integral) {
    // Every comparison with NaN is false, so NaN fails any bound.
    bool ok = true;
    if (f.min) {
      ok &= f.exclusive_min ? v > *f.min : v >= *f.min;
    }
    if (f.max) {
      ok &= f.exclusive_max ? v < *f.max : v <= *f.max;
    }
    if (!ok) {
      problems_.push_back(
          {path, absl::StrCat("must be ", RangeText(f, integral), ", got ", shown)});
    }
  }

  std::string path_;
  Problems& problems_;
};

// ---------------------------------------------------------------------------
// Decoding: JSON value -> struct, collecting type errors and unknown fields.

template <typename T>
void DecodeValue(const json& j, const std::string& path, T& out, Problems& problems);

class ObjectDecoder {
 public:
  ObjectDecoder(const json& object, std::string path, Problems& problems)
      : object_(object), path_(std::move(path)), problems_(problems) {}

  template <typename T>
  void operator()(T& value, const FieldInfo& f) {
    known_.push_back(f.name);
    const json* j = Find(f.name);
    if (j == nullptr) {
      if (f.required) {
        problems_.push_back({Join(path_, f.name), "required field is missing", path_});
      }
      return;
    }
    DecodeValue(*j, Join(path_, f.name), value, problems_);
  }

  // A field that exists only on the wire and is folded into `target`.
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo& f, std::string_view replaces, Target& target, Apply apply) {
    known_.push_back(f.name);
    const json* j = Find(f.name);
    if (j == nullptr) {
      return;
    }
    const std::string path = Join(path_, f.name);
    if (Find(replaces) != nullptr) {
      problems_.push_back(
          {path, absl::StrCat("cannot be combined with ", Join(path_, replaces), "; give one")});
      return;
    }
    T shorthand;
    const size_t before = problems_.size();
    DecodeValue(*j, path, shorthand, problems_);
    RangeChecker checker(path, problems_);
    Fields(checker, shorthand);
    if (problems_.size() == before) {
      apply(shorthand, target);
    }
  }

  // Keys accepted and dropped.
  void Ignore(const auto& names) { ignored_.insert(ignored_.end(), names.begin(), names.end()); }

  // Reports every key no field claimed.
  void Finish() {
    for (const auto& [key, value] : object_.items()) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end() ||
          std::find(ignored_.begin(), ignored_.end(), key) != ignored_.end()) {
        continue;
      }
      std::string message = "unknown field";
      if (std::optional<std::string_view> s = Suggest(key, known_)) {
        absl::StrAppend(&message, " (did you mean \"", Av(*s), "\"?)");
      } else {
        absl::StrAppend(&message, "; known fields: ",
                        absl::StrJoin(known_, ", ", [](std::string* out, std::string_view n) {
                          out->append(n);
                        }));
      }
      problems_.push_back({Join(path_, key), std::move(message)});
    }
  }

 private:
  const json* Find(std::string_view name) const {
    auto it = object_.find(std::string(name));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  const json& object_;
  std::string path_;
  Problems& problems_;
  std::vector<std::string_view> known_;
  std::vector<std::string_view> ignored_;
};

template <typename T>
std::optional<T> AsInteger(const json& j) {
  using Limits = std::numeric_limits<T>;
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u <= static_cast<uint64_t>(Limits::max())) {
      return static_cast<T>(u);
    }
  } else if (j.is_number_integer()) {
    int64_t i = j.get<int64_t>();
    if (i >= static_cast<int64_t>(Limits::min()) && i <= static_cast<int64_t>(Limits::max())) {
      return static_cast<T>(i);
    }
  } else if (j.is_number_float()) {
    // 3.0 and 1e7 are integers; Kubernetes' schema validation agrees.
    double d = j.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && d >= static_cast<double>(Limits::min()) &&
        d < std::ldexp(1.0, Limits::digits)) {
      return static_cast<T>(d);
    }
  }
  return std::nullopt;
}

template <typename T>
void DecodeValue(const json& j, const std::string& path, T& out, Problems& problems) {
  auto fail = [&](std::string_view expected) {
    problems.push_back({path, absl::StrCat("expected ", Av(expected), ", got ", Got(j))});
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) {
      return fail("a boolean (true or false)");
    }
    out = j.get<bool>();
  } else if constexpr (kIsInteger<T>) {
    if (std::optional<T> v = AsInteger<T>(j)) {
      out = *v;
    } else if (j.is_number() && std::isfinite(j.get<double>()) &&
               j.get<double>() == std::trunc(j.get<double>())) {
      fail(absl::StrCat("an integer in [", std::numeric_limits<T>::min(), ", ",
                        std::numeric_limits<T>::max(), "]"));
    } else {
      fail("an integer");
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number() || !std::isfinite(j.get<double>())) {
      return fail("a finite number");
    }
    out = j.get<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) {
      return fail("a string");
    }
    out = j.get<std::string>();
  } else if constexpr (std::is_enum_v<T>) {
    constexpr auto& kNames = EnumTraits<T>::kNames;
    if (!j.is_string()) {
      return fail(absl::StrCat("one of ", QuotedList(kNames)));
    }
    const std::string name = j.get<std::string>();
    if (std::optional<T> e = ParseEnumName<T>(name)) {
      out = *e;
      return;
    }
    std::string message = absl::StrCat("unknown value ", Got(j));
    if (std::optional<std::string_view> s =
            Suggest(name, std::vector<std::string_view>(kNames.begin(), kNames.end()))) {
      absl::StrAppend(&message, " (did you mean \"", Av(*s), "\"?)");
    }
    absl::StrAppend(&message, "; expected one of ", QuotedList(kNames));
    problems.push_back({path, std::move(message)});
  } else if constexpr (std::is_same_v<T, Quantity>) {
    std::string text;
    if (j.is_string()) {
      text = j.get<std::string>();
    } else if (j.is_number_integer()) {
      text = Dump(j);
    } else if (j.is_number_float() && std::isfinite(j.get<double>())) {
      text = absl::StrCat(j.get<double>());
    }
    absl::StatusOr<Quantity> q = ParseQuantity(text);
    if (text.empty() || !q.ok()) {
      return fail("a Kubernetes quantity such as \"1Gi\" or \"500M\"");
    }
    out = *std::move(q);
  } else if constexpr (std::is_same_v<T, json>) {
    if (!j.is_object()) {
      return fail("an object");
    }
    out = j;
  } else if constexpr (kIsOptional<T>) {
    typename T::value_type inner{};
    DecodeValue(j, path, inner, problems);
    out = std::move(inner);
  } else if constexpr (kIsVector<T>) {
    if (!j.is_array()) {
      return fail("a list");
    }
    out.clear();
    for (size_t i = 0; i < j.size(); ++i) {
      typename T::value_type item{};
      DecodeValue(j[i], Index(path, i), item, problems);
      out.push_back(std::move(item));
    }
  } else if constexpr (kIsStringMap<T>) {
    if (!j.is_object()) {
      return fail("a map of strings");
    }
    out.clear();
    for (const auto& [key, value] : j.items()) {
      if (!value.is_string()) {
        problems.push_back({Join(path, key), absl::StrCat("expected a string, got ", Got(value))});
        continue;
      }
      out[key] = value.template get<std::string>();
    }
  } else {
    static_assert(HasFields<T>, "no decoder for this field type");
    if (!j.is_object()) {
      return fail("an object");
    }
    ObjectDecoder decoder(j, path, problems);
    Fields(decoder, out);
    decoder.Finish();
  }
}

void DecodeJob(const json& root, ShadowSyncJob& job, Problems& problems) {
  if (!root.is_object()) {
    problems.push_back(
        {"", absl::StrCat("expected an object with apiVersion, kind, metadata and spec, got ",
                          Got(root))});
    return;
  }
  bool header_ok = true;
  auto check = [&](std::string_view key, std::string_view expected) {
    auto it = root.find(std::string(key));
    if (it == root.end() || it->is_null()) {
      problems.push_back(
          {std::string(key),
           absl::StrCat("required field is missing; expected \"", Av(expected), "\""), ""});
      header_ok = false;
    } else if (!it->is_string() || it->get<std::string>() != expected) {
      problems.push_back(
          {std::string(key), absl::StrCat("expected \"", Av(expected), "\", got ", Got(*it))});
      header_ok = false;
    }
  };
  check("apiVersion", kJobApiVersion);
  check("kind", kJobKind);
  // Another kind of object would only add noise about its fields.
  if (!header_ok) {
    return;
  }
  ObjectDecoder decoder(root, "", problems);
  constexpr std::array<std::string_view, 3> kHeader = {"apiVersion", "kind", "status"};
  decoder.Ignore(kHeader);
  Fields(decoder, job);
  decoder.Finish();
}

// ---------------------------------------------------------------------------
// Encoding: struct -> JSON, every field explicit.

template <typename T>
std::optional<json> EncodeValue(const T& value);

class ObjectEncoder {
 public:
  explicit ObjectEncoder(json& out) : out_(out) {}
  template <typename T>
  void operator()(const T& value, const FieldInfo& f) {
    if (std::optional<json> j = EncodeValue(value)) {
      out_[std::string(f.name)] = *std::move(j);
    }
  }
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo&, std::string_view, const Target&, Apply) {}
  void Ignore(const auto&) {}

 private:
  json& out_;
};

// nullopt for "absent": an unset optional or an empty pod template.
template <typename T>
std::optional<json> EncodeValue(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return json(std::string(EnumName(value)));
  } else if constexpr (std::is_same_v<T, Quantity>) {
    return json(value.text);
  } else if constexpr (std::is_same_v<T, json>) {
    if (value.is_null()) {
      return std::nullopt;
    }
    return value;
  } else if constexpr (kIsOptional<T>) {
    if (!value) {
      return std::nullopt;
    }
    return EncodeValue(*value);
  } else if constexpr (kIsVector<T>) {
    json a = json::array();
    for (const auto& item : value) {
      a.push_back(EncodeValue(item).value_or(json()));
    }
    return a;
  } else if constexpr (HasFields<T>) {
    json o = json::object();
    ObjectEncoder encoder(o);
    Fields(encoder, value);
    return o;
  } else {
    return json(value);  // bool, numbers, strings, string maps.
  }
}

// ---------------------------------------------------------------------------
// OpenAPI v3 structural schema.

// A default worth publishing: scalars and non-empty lists of scalars.
template <typename T>
std::optional<json> SchemaDefault(const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (value.empty()) {
      return std::nullopt;
    }
    return json(value);
  } else if constexpr (kIsVector<T>) {
    if constexpr (HasFields<typename T::value_type>) {
      return std::nullopt;
    } else {
      if (value.empty()) {
        return std::nullopt;
      }
      return EncodeValue(value);
    }
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T> ||
                       std::is_same_v<T, Quantity>) {
    return EncodeValue(value);
  } else {
    return std::nullopt;  // Optionals, objects, maps, templates.
  }
}

std::string Description(const FieldInfo& f) {
  std::string d(f.doc);
  if (!f.default_doc.empty()) {
    absl::StrAppend(&d, " Default: ", absl::StrReplaceAll(Av(f.default_doc), {{"`", ""}}), ".");
  }
  return d;
}

void AddBounds(json& s, const FieldInfo& f, bool integral) {
  auto bound = [integral](double b) { return integral ? json(static_cast<int64_t>(b)) : json(b); };
  if (f.min) {
    s["minimum"] = bound(*f.min);
    if (f.exclusive_min) {
      s["exclusiveMinimum"] = true;
    }
  }
  if (f.max) {
    s["maximum"] = bound(*f.max);
    if (f.exclusive_max) {
      s["exclusiveMaximum"] = true;
    }
  }
}

template <typename T>
json TypeSchema(const T& def, const FieldInfo& f);

class SchemaBuilder {
 public:
  template <typename T>
  void operator()(const T& def, const FieldInfo& f) {
    json s = TypeSchema(def, f);
    s["description"] = Description(f);
    if (f.schema_default && !f.required) {
      if (std::optional<json> d = SchemaDefault(def)) {
        s["default"] = *std::move(d);
      }
    }
    properties_[std::string(f.name)] = std::move(s);
    if (f.required) {
      required_.push_back(f.name);
    }
  }
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo& f, std::string_view, const Target&, Apply) {
    json s = TypeSchema(T{}, f);
    s["description"] = Description(f);
    properties_[std::string(f.name)] = std::move(s);
  }
  void Ignore(const auto&) {}

  json Object() const {
    json o = {{"type", "object"}, {"properties", properties_}};
    if (!required_.empty()) {
      o["required"] = required_;
    }
    return o;
  }

 private:
  json properties_ = json::object();
  json required_ = json::array();
};

template <typename T>
json TypeSchema(const T& def, const FieldInfo& f) {
  if constexpr (std::is_same_v<T, bool>) {
    return {{"type", "boolean"}};
  } else if constexpr (kIsInteger<T>) {
    json s = {{"type", "integer"}, {"format", sizeof(T) <= 4 ? "int32" : "int64"}};
    AddBounds(s, f, true);
    return s;
  } else if constexpr (std::is_floating_point_v<T>) {
    json s = {{"type", "number"}, {"format", "double"}};
    AddBounds(s, f, false);
    return s;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return {{"type", "string"}};
  } else if constexpr (std::is_enum_v<T>) {
    const auto& names = EnumTraits<T>::kNames;
    return {{"type", "string"}, {"enum", std::vector<std::string>(names.begin(), names.end())}};
  } else if constexpr (std::is_same_v<T, Quantity>) {
    // Exactly what controller-gen emits for resource.Quantity.
    return {
        {"anyOf", {{{"type", "integer"}}, {{"type", "string"}}}},
        {"pattern",
         R"(^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$)"},
        {"x-kubernetes-int-or-string", true}};
  } else if constexpr (std::is_same_v<T, json>) {
    return {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
  } else if constexpr (kIsOptional<T>) {
    return TypeSchema(typename T::value_type{}, f);
  } else if constexpr (kIsVector<T>) {
    return {{"type", "array"}, {"items", TypeSchema(typename T::value_type{}, f)}};
  } else if constexpr (kIsStringMap<T>) {
    return {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}};
  } else {
    static_assert(HasFields<T>, "no schema for this field type");
    SchemaBuilder builder;
    Fields(builder, def);
    return builder.Object();
  }
}

// ---------------------------------------------------------------------------
// Markdown reference.

struct DocRow {
  std::string path;  // "spec.model.tables[].hashBuckets".
  std::string type;
  std::string default_text;
  std::string doc;
};

template <typename T>
std::string DocType(const FieldInfo& f) {
  if constexpr (std::is_same_v<T, bool>) {
    return "boolean";
  } else if constexpr (kIsInteger<T> || std::is_floating_point_v<T>) {
    std::string range = RangeText(f, kIsInteger<T>);
    return absl::StrCat(kIsInteger<T> ? "integer" : "number", range.empty() ? "" : ", ", range);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "string";
  } else if constexpr (std::is_enum_v<T>) {
    std::vector<std::string> names;
    for (std::string_view n : EnumTraits<T>::kNames) {
      names.push_back(absl::StrCat("`", Av(n), "`"));
    }
    return absl::StrCat("enum: ", absl::StrJoin(names, ", "));
  } else if constexpr (std::is_same_v<T, Quantity>) {
    std::string range = RangeText(f, true);
    return absl::StrCat("quantity", range.empty() ? "" : ", ", range);
  } else if constexpr (std::is_same_v<T, json>) {
    return "object (pod template, kept as given)";
  } else if constexpr (kIsOptional<T>) {
    return absl::StrCat(DocType<typename T::value_type>(f), " (optional)");
  } else if constexpr (kIsVector<T>) {
    using Item = typename T::value_type;
    if constexpr (HasFields<Item>) {
      return "list of objects";
    } else {
      std::string range = RangeText(f, kIsInteger<Item>);
      return absl::StrCat("list of ", kIsInteger<Item> ? "integers" : "strings",
                          range.empty() ? "" : ", each ", range);
    }
  } else if constexpr (kIsStringMap<T>) {
    return "map of string to string";
  } else {
    return "object";
  }
}

template <typename T>
std::string DocDefault(const T& def, const FieldInfo& f) {
  if (!f.default_doc.empty()) {
    return std::string(f.default_doc);
  }
  if (f.required) {
    return "required";
  }
  if constexpr (kIsOptional<T>) {
    return "unset";
  } else if constexpr (HasFields<T>) {
    return "";
  } else if constexpr (std::is_same_v<T, json>) {
    return "none";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return def.empty() ? "empty" : absl::StrCat("`", def, "`");
  } else {
    json j = EncodeValue(def).value_or(json());
    std::string text = j.is_string() ? j.get<std::string>() : Dump(j);
    if (j.is_array()) {
      text = absl::StrReplaceAll(text, {{",", ", "}});
    }
    return absl::StrCat("`", text, "`");
  }
}

class DocWriter {
 public:
  DocWriter(std::string path, std::vector<DocRow>& rows) : path_(std::move(path)), rows_(rows) {}

  template <typename T>
  void operator()(const T& def, const FieldInfo& f) {
    Emit(def, Join(path_, f.name), f);
  }
  template <typename T, typename Target, typename Apply>
  void Shorthand(const FieldInfo& f, std::string_view, const Target&, Apply) {
    Emit(T{}, Join(path_, f.name), f);
  }
  void Ignore(const auto&) {}

 private:
  template <typename T>
  void Emit(const T& def, const std::string& path, const FieldInfo& f) {
    std::string doc(f.doc);
    rows_.push_back({path, DocType<T>(f), DocDefault(def, f), std::move(doc)});
    Recurse(def, path);
  }

  template <typename T>
  void Recurse(const T& def, const std::string& path) {
    if constexpr (kIsOptional<T>) {
      Recurse(typename T::value_type{}, path);
    } else if constexpr (kIsVector<T>) {
      if constexpr (HasFields<typename T::value_type>) {
        Recurse(typename T::value_type{}, path + "[]");
      }
    } else if constexpr (HasFields<T>) {
      DocWriter sub(path, rows_);
      Fields(sub, def);
    }
  }

  std::string path_;
  std::vector<DocRow>& rows_;
};

std::vector<DocRow> AllDocRows() {
  std::vector<DocRow> rows = {
      {"apiVersion", "string", absl::StrCat("required: `", Av(kJobApiVersion), "`"),
       "API group and version."},
      {"kind", "string", absl::StrCat("required: `", Av(kJobKind), "`"), "Object kind."},
  };
  DocWriter writer("", rows);
  const ShadowSyncJob defaults;
  Fields(writer, defaults);
  return rows;
}

std::string EscapeCell(std::string_view s) { return absl::StrReplaceAll(Av(s), {{"|", "\\|"}}); }

// ---------------------------------------------------------------------------
// YAML -> JSON, recording the line of every field path.

bool IsDigits(std::string_view s, bool hex = false) {
  if (s.empty()) {
    return false;
  }
  for (char c : s) {
    if (!(hex ? std::isxdigit(static_cast<unsigned char>(c))
              : std::isdigit(static_cast<unsigned char>(c)))) {
      return false;
    }
  }
  return true;
}

// YAML 1.2 core schema float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsCoreFloat(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    ++i;
  }
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    ++i, ++int_digits;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      ++i, ++frac_digits;
    }
  }
  if (int_digits + frac_digits == 0) {
    return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      ++i;
    }
    if (!IsDigits(s.substr(i))) {
      return false;
    }
    i = s.size();
  }
  return i == s.size();
}

std::optional<json> ParseCoreInt(std::string_view s) {
  int base = 10;
  std::string_view digits = s;
  bool negative = false;
  if (absl::StartsWith(Av(s), "0x")) {
    base = 16;
    digits = s.substr(2);
    if (!IsDigits(digits, true)) {
      return std::nullopt;
    }
  } else if (absl::StartsWith(Av(s), "0o")) {
    base = 8;
    digits = s.substr(2);
    if (!IsDigits(digits) || digits.find_first_of("89") != std::string_view::npos) {
      return std::nullopt;
    }
  } else {
    if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
      negative = digits[0] == '-';
      digits.remove_prefix(1);
    }
    if (!IsDigits(digits)) {
      return std::nullopt;
    }
  }
  uint64_t u = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), u, base);
  if (ec == std::errc() && end == digits.data() + digits.size()) {
    if (!negative) {
      return json(u);
    }
    if (u <= uint64_t{1} << 63) {
      return json(static_cast<int64_t>(0 - u));
    }
  }
  // Too large for 64 bits: keep it as a number so the field reports a range error.
  return json(std::strtod(std::string(s).c_str(), nullptr));
}

json ResolvePlainScalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    return nullptr;
  }
  if (s == "true" || s == "True" || s == "TRUE") {
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    return false;
  }
  if (std::optional<json> i = ParseCoreInt(s)) {
    return *i;
  }
  if (IsCoreFloat(s)) {
    return std::strtod(s.c_str(), nullptr);
  }
  std::string_view v = s;
  bool negative = false;
  if (!v.empty() && (v[0] == '+' || v[0] == '-')) {
    negative = v[0] == '-';
    v.remove_prefix(1);
  }
  if (v == ".inf" || v == ".Inf" || v == ".INF") {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return s;
}

class YamlConverter {
 public:
  YamlConverter(LineMap& lines, Problems& problems) : lines_(lines), problems_(problems) {}

  json Convert(const YAML::Node& node, const std::string& path) {
    switch (node.Type()) {
      case YAML::NodeType::Scalar:
        return Scalar(node, path);
      case YAML::NodeType::Sequence: {
        json a = json::array();
        for (size_t i = 0; i < node.size(); ++i) {
          const std::string child = Index(path, i);
          lines_.emplace(child, node[i].Mark().line + 1);
          a.push_back(Convert(node[i], child));
        }
        return a;
      }
      case YAML::NodeType::Map: {
        json o = json::object();
        for (auto it = node.begin(); it != node.end(); ++it) {
          const int line = it->first.Mark().line + 1;
          if (!it->first.IsScalar()) {
            problems_.push_back({path, "keys must be strings", std::nullopt, line});
            continue;
          }
          const std::string& key = it->first.Scalar();
          const std::string child = Join(path, key);
          if (o.contains(key)) {
            problems_.push_back(
                {child, absl::StrCat("duplicate key (first given on line ", lines_[child], ")"),
                 std::nullopt, line});
            continue;
          }
          lines_.emplace(child, line);
          o[key] = Convert(it->second, child);
        }
        return o;
      }
      default:  // Null, Undefined.
        return nullptr;
    }
  }

 private:
  json Scalar(const YAML::Node& node, const std::string& path) {
    const std::string& tag = node.Tag();
    const std::string& text = node.Scalar();
    if (tag == "!" || tag == "tag:yaml.org,2002:str") {
      return text;  // Quoted or block scalars.
    }
    if (tag == "?" || tag.empty()) {
      return ResolvePlainScalar(text);
    }
    json resolved = ResolvePlainScalar(text);
    if ((tag == "tag:yaml.org,2002:int" && resolved.is_number_integer()) ||
        (tag == "tag:yaml.org,2002:float" && resolved.is_number()) ||
        (tag == "tag:yaml.org,2002:bool" && resolved.is_boolean()) ||
        (tag == "tag:yaml.org,2002:null" && resolved.is_null())) {
      return tag == "tag:yaml.org,2002:float" ? json(resolved.get<double>()) : resolved;
    }
    problems_.push_back(
        {path, absl::StrCat("unsupported or mismatched YAML tag ", tag, " on \"", text, "\"")});
    return text;
  }

  LineMap& lines_;
  Problems& problems_;
};

std::optional<int> LineOf(const Problem& p, const LineMap* lines) {
  if (lines == nullptr) {
    return std::nullopt;
  }
  if (p.line) {
    return p.line;
  }
  const std::string& key = p.line_path ? *p.line_path : p.path;
  auto it = lines->find(key);
  if (it == lines->end()) {
    return std::nullopt;
  }
  return it->second;
}

// One line per problem: "<source>:<line>: <path>: <message>". With a line
// map, sorted by line (problems without a line last, in field order).
std::string FormatProblems(const Problems& problems, std::string_view source,
                           const LineMap* lines) {
  std::vector<std::pair<std::optional<int>, const Problem*>> sorted;
  for (const Problem& p : problems) {
    sorted.emplace_back(LineOf(p, lines), &p);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.first.value_or(std::numeric_limits<int>::max()) <
           b.first.value_or(std::numeric_limits<int>::max());
  });
  std::vector<std::string> out;
  for (const auto& [line, p] : sorted) {
    if (out.size() == kMaxReportedProblems) {
      out.push_back(
          absl::StrCat("... and ", sorted.size() - kMaxReportedProblems, " more problems"));
      break;
    }
    std::string prefix;
    if (line) {
      prefix = absl::StrCat(Av(source), ":", *line, ": ");
    } else if (!source.empty()) {
      prefix = absl::StrCat(Av(source), ": ");
    }
    out.push_back(p->path.empty() ? absl::StrCat(prefix, p->message)
                                  : absl::StrCat(prefix, p->path, ": ", p->message));
  }
  return absl::StrJoin(out, "\n");
}

// Parses YAML events and drops them: only the number of documents matters.
class DocumentCounter final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};
constexpr int kMaxYamlDocuments = 16;

// The offset of the first byte of `text` that is not well-formed UTF-8
// (RFC 3629: no overlongs, no surrogates, at most U+10FFFF), or npos.
size_t FirstInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // Range of the second byte.
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= text.size()) return i;
      const auto b = static_cast<unsigned char>(text[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return i;
    }
    i += n + 1;
  }
  return std::string_view::npos;
}

// Text -> JSON value. YAML keeps lines for later messages; JSON has none.
absl::StatusOr<json> YamlToJson(std::string_view text, std::string_view source, LineMap& lines,
                                Problems& problems) {
  // YAML streams are Unicode; and every string we keep is later written as
  // JSON (status, ConfigMap, job.json), which cannot hold stray bytes.
  if (const size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    const std::string_view before = text.substr(0, bad);
    const size_t line = std::count(before.begin(), before.end(), '\n') + 1;
    const size_t line_start = before.rfind('\n');
    const size_t column = bad - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    return absl::InvalidArgumentError(absl::StrCat(
        Av(source), ":", line, ":", column, ": not valid UTF-8 (a YAML file must be UTF-8)"));
  }
  YAML::Node doc;
  int docs = 0;
  try {
    // Not YAML::LoadAll: on some malformed inputs (e.g. ",*") yaml-cpp 0.7's
    // parser yields empty documents forever and LoadAll allocates until the
    // process dies (jbeder/yaml-cpp#1319, found by fuzz_job_spec). Count
    // documents up to a cap, then load the first.
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (docs < kMaxYamlDocuments && parser.HandleNextDocument(counter)) ++docs;
    if (docs == 1) doc = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        Av(source), ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
  if (docs != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(source), ": expected exactly one YAML document (one ShadowSyncJob), found ",
                     docs, docs == kMaxYamlDocuments ? " or more" : ""));
  }
  YamlConverter converter(lines, problems);
  return converter.Convert(doc, "");
}

// Duplicate keys are legal JSON that nlohmann would silently collapse; this
// parser callback reports them with their path.
class DuplicateKeyFinder {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames_.push_back({event == json::parse_event_t::object_start, ChildPath()});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) {
          duplicates_.push_back({Join(f.path, f.key), "duplicate key"});
        }
        break;
      }
      case json::parse_event_t::value:
        ChildPath();
        break;
    }
    return true;
  }
  Problems& duplicates() { return duplicates_; }

 private:
  struct Frame {
    bool is_object;
    std::string path;
    std::set<std::string> keys = {};
    std::string key = {};
    size_t next_index = 0;
  };
  // The path of the element now starting in the innermost container.
  std::string ChildPath() {
    if (frames_.empty()) {
      return "";
    }
    Frame& f = frames_.back();
    return f.is_object ? Join(f.path, f.key) : Index(f.path, f.next_index++);
  }
  std::vector<Frame> frames_;
  Problems duplicates_;
};

absl::StatusOr<json> JsonTextToJson(std::string_view text, std::string_view source,
                                    Problems& problems) {
  try {
    DuplicateKeyFinder finder;
    json j = json::parse(text.begin(), text.end(), std::ref(finder));
    problems = std::move(finder.duplicates());
    return j;
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based offset of the offending character.
    size_t end = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    size_t line = 1 + std::count(text.begin(), text.begin() + end, '\n');
    size_t line_start = text.rfind('\n', end == 0 ? 0 : end - 1);
    size_t column = line_start == std::string_view::npos || end == 0 ? end + 1 : end - line_start;
    std::string what = e.what();
    size_t detail = what.find("syntax error");
    return absl::InvalidArgumentError(absl::StrCat(
        Av(source), ":", line, ":", column,
        ": JSON syntax error: ", detail == std::string::npos ? what : what.substr(detail)));
  }
}

// ---------------------------------------------------------------------------
// Validation beyond per-field ranges.

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

// RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63.
bool IsDns1123Label(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLowerAlnum(c) || c == '-'; });
}

// RFC 1035 label without its length limit: [a-z]([-a-z0-9]*[a-z0-9])?.
bool HasDns1035Shape(std::string_view s) {
  if (s.empty() || !(s.front() >= 'a' && s.front() <= 'z') || !IsLowerAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLowerAlnum(c) || c == '-'; });
}

bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) {
    return false;
  }
  for (absl::string_view part : absl::StrSplit(Av(s), '.')) {
    if (!IsDns1123Label(std::string_view(part.data(), part.size()))) {
      return false;
    }
  }
  return true;
}

// Label/annotation name part: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], at most 63.
bool IsQualifiedNamePart(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool IsQualifiedName(std::string_view key) {
  size_t slash = key.find('/');
  if (slash == std::string_view::npos) {
    return IsQualifiedNamePart(key);
  }
  return IsDns1123Subdomain(key.substr(0, slash)) && IsQualifiedNamePart(key.substr(slash + 1));
}

void ValidateMetadata(const JobMetadata& m, Problems& p) {
  if (m.name.empty()) {
    p.push_back({"metadata.name", "required field is missing"});
  }
  if (!m.name.empty() && !HasDns1035Shape(m.name)) {
    p.push_back({"metadata.name",
                 absl::StrCat("must be a DNS-1035 label: lowercase letters, digits and '-', "
                              "starting with a letter and ending with a letter or digit, got ",
                              Dump(json(m.name)))});
  }
  if (m.name.size() > static_cast<size_t>(kMaxJobNameLength)) {
    p.push_back({"metadata.name",
                 absl::StrCat("must be at most ", kMaxJobNameLength,
                              " characters so child names such as \"<name>-trainer-12\" stay "
                              "within Kubernetes limits, got ",
                              m.name.size())});
  }
  if (!m.namespace_name.empty() && !IsDns1123Label(m.namespace_name)) {
    p.push_back({"metadata.namespace",
                 absl::StrCat("must be a DNS-1123 label (lowercase letters, digits and '-'), got ",
                              Dump(json(m.namespace_name)))});
  }
  for (const auto& [key, value] : m.labels) {
    if (!IsQualifiedName(key)) {
      p.push_back({Join("metadata.labels", key),
                   "invalid label key: [prefix/]name, name at most 63 characters of "
                   "[A-Za-z0-9-_.] starting and ending alphanumeric"});
    } else if (!value.empty() && !IsQualifiedNamePart(value)) {
      p.push_back({Join("metadata.labels", key),
                   absl::StrCat("invalid label value: at most 63 characters of [A-Za-z0-9-_.] "
                                "starting and ending alphanumeric, got ",
                                Dump(json(value)))});
    }
  }
  for (const auto& [key, value] : m.annotations) {
    if (!IsQualifiedName(key)) {
      p.push_back({Join("metadata.annotations", key), "invalid annotation key"});
    }
  }
}

// A path the pods read from a Secret mounted at `mount` must lie under it.
void CheckMountedFile(const std::string& path, const std::string& field, std::string_view mount,
                      std::string_view secret_field, Problems& p) {
  if (path.empty()) {
    p.push_back({field, "must not be empty"});
  } else if (!secret_field.empty() && !absl::StartsWith(path, absl::StrCat(Av(mount), "/"))) {
    p.push_back(
        {field, absl::StrCat("with ", Av(secret_field), " set the Secret is mounted at ", Av(mount),
                             ", so the file must be under it, got ", Dump(json(path)))});
  }
}

void SecurityProblems(const SecuritySpec& sec, Problems& p) {
  if (sec.tls) {
    const TlsSpec& tls = *sec.tls;
    const std::string_view secret = tls.secret_name.empty() ? "" : "spec.security.tls.secretName";
    CheckMountedFile(tls.ca_file, "spec.security.tls.caFile", kTlsMountPath, secret, p);
    CheckMountedFile(tls.cert_file, "spec.security.tls.certFile", kTlsMountPath, secret, p);
    CheckMountedFile(tls.key_file, "spec.security.tls.keyFile", kTlsMountPath, secret, p);
    if (!tls.server_name.empty() && !IsDns1123Subdomain(tls.server_name)) {
      p.push_back({"spec.security.tls.serverName",
                   absl::StrCat("must be a DNS name (a DNS-1123 subdomain) or empty, got ",
                                Dump(json(tls.server_name)))});
    }
    if (!tls.secret_name.empty() && !IsDns1123Subdomain(tls.secret_name)) {
      p.push_back({"spec.security.tls.secretName",
                   absl::StrCat("must be a Secret name (a DNS-1123 subdomain), got ",
                                Dump(json(tls.secret_name)))});
    }
  }
  if (sec.auth_token) {
    const AuthTokenSpec& token = *sec.auth_token;
    CheckMountedFile(token.file, "spec.security.authToken.file", kAuthMountPath,
                     token.secret_name.empty() ? "" : "spec.security.authToken.secretName", p);
    if (!token.secret_name.empty() && !IsDns1123Subdomain(token.secret_name)) {
      p.push_back({"spec.security.authToken.secretName",
                   absl::StrCat("must be a Secret name (a DNS-1123 subdomain), got ",
                                Dump(json(token.secret_name)))});
    }
  }
}

void ValidateSpec(const JobSpec& s, Problems& p) {
  const ModelSpec& model = s.model;
  if (model.dense_features != kCriteoDense) {
    p.push_back({"spec.model.denseFeatures",
                 absl::StrCat("must be ", kCriteoDense,
                              ", the dense columns of the Criteo layout both data formats "
                              "produce, got ",
                              model.dense_features)});
  }
  if (model.tables.size() != static_cast<size_t>(kCriteoSparse)) {
    p.push_back({"spec.model.tables",
                 absl::StrCat("must list ", kCriteoSparse,
                              " tables, one per categorical column of the Criteo layout, got ",
                              model.tables.size())});
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < model.tables.size(); ++i) {
    const std::string path = Index("spec.model.tables", i) + ".name";
    const std::string& name = model.tables[i].name;
    if (name.empty()) {
      p.push_back({path, "must not be empty"});
    } else if (auto [it, inserted] = seen.emplace(name, i); !inserted) {
      p.push_back({path, absl::StrCat("duplicate table name ", Dump(json(name)), " (also ",
                                      Index("spec.model.tables", it->second), ")")});
    }
  }

  const DataSpec& data = s.data;
  if (data.format == DataFormat::kCriteoTsv && data.paths.empty()) {
    p.push_back(
        {"spec.data.paths", "must list at least one file when spec.data.format is criteo-tsv"});
  }
  for (size_t i = 0; i < data.paths.size(); ++i) {
    if (data.paths[i].empty()) {
      p.push_back({Index("spec.data.paths", i), "must not be empty"});
    }
  }
  for (size_t i = 0; i < data.eval_paths.size(); ++i) {
    if (data.eval_paths[i].empty()) {
      p.push_back({Index("spec.data.evalPaths", i), "must not be empty"});
    }
  }
  // Each trainer reads its own share: a trainer without an example would
  // never take a step (and hold every synchronous strategy back).
  if (data.format == DataFormat::kSynthetic && data.synthetic.examples >= 1 &&
      data.synthetic.examples < s.trainer.replicas) {
    p.push_back({"spec.trainer.replicas",
                 absl::StrCat(s.trainer.replicas, " trainers for ", data.synthetic.examples,
                              " examples (spec.data.synthetic.examples): every trainer needs at "
                              "least one")});
  }

  const TrainerSpec& trainer = s.trainer;
  if (trainer.straggler && trainer.straggler->count > trainer.replicas) {
    p.push_back({"spec.trainer.straggler.count",
                 absl::StrCat("must be <= spec.trainer.replicas (", trainer.replicas, "), got ",
                              trainer.straggler->count)});
  }

  const ParameterServerSpec& ps = s.parameter_server;
  if (ps.replicas >= 1 && ps.slots >= 1 && ps.slots < ps.replicas) {
    p.push_back({"spec.parameterServer.slots",
                 absl::StrCat("must be >= spec.parameterServer.replicas (", ps.replicas,
                              ") so every server owns a slot, got ", ps.slots)});
  }
  auto dns_name = [&p](std::string_view path, const std::string& value) {
    if (!value.empty() && !IsDns1123Subdomain(value)) {
      p.push_back({std::string(path),
                   absl::StrCat("must be a DNS-1123 subdomain, got ", Dump(json(value)))});
    }
  };
  dns_name("spec.parameterServer.storage.storageClassName", ps.storage.storage_class_name);
  dns_name("spec.export.volumeClaimName", s.export_.volume_claim_name);
  dns_name("spec.export.storage.storageClassName", s.export_.storage.storage_class_name);
  dns_name("spec.init.volumeClaimName", s.init.volume_claim_name);

  SecurityProblems(s.security, p);

  const SyncSpec& sync = s.sync;
  if (sync.algorithm != SyncAlgorithm::kNone && s.syncer.replicas == 0) {
    p.push_back({"spec.syncer.replicas",
                 absl::StrCat("must be >= 1 for algorithm ", Av(EnumName(sync.algorithm)),
                              " (only none runs without a syncer), got 0")});
  }
  if (sync.algorithm == SyncAlgorithm::kDsSync && trainer.replicas >= 1) {
    const int g = sync.ds_sync.group_size;
    const int n = trainer.replicas;
    if (g > n) {
      p.push_back({"spec.sync.dsSync.groupSize",
                   absl::StrCat("must be <= spec.trainer.replicas (", n, "), got ", g)});
    } else if (g >= 2 && n % g != 0) {
      p.push_back({"spec.sync.dsSync.groupSize", absl::StrCat("must divide spec.trainer.replicas (",
                                                              n, ") into equal groups, got ", g)});
    }
    if (sync.ds_sync.schedule == DsSyncSchedule::kButterfly && g >= 2 && g <= n && n % g == 0) {
      if (absl::Status s = DsSyncButterflyRadices(n, g).status(); !s.ok()) {
        // The message starts with the field path; keep only the reason.
        std::string reason(s.message());
        const std::string prefix = "sync.dsSync.schedule: ";
        if (reason.starts_with(prefix)) reason = reason.substr(prefix.size());
        p.push_back({"spec.sync.dsSync.schedule", reason});
      }
    }
  }
}

// Problems in field-table order, whatever check found them.
void SortByFieldOrder(Problems& problems) {
  std::map<std::string, size_t> order;
  std::vector<std::string> paths = JobFieldPaths();
  for (size_t i = 0; i < paths.size(); ++i) {
    order.emplace(paths[i], i);
  }
  auto rank = [&](const std::string& path) {
    // "spec.model.tables[3].name" -> "spec.model.tables[].name"; map keys
    // ("metadata.labels.app") rank with their map.
    std::string generic;
    for (size_t i = 0; i < path.size(); ++i) {
      generic.push_back(path[i]);
      if (path[i] == '[') {
        while (i + 1 < path.size() && path[i + 1] != ']') {
          ++i;
        }
      }
    }
    while (!generic.empty()) {
      if (auto it = order.find(generic); it != order.end()) {
        return it->second;
      }
      size_t dot = generic.rfind('.');
      generic = dot == std::string::npos ? "" : generic.substr(0, dot);
    }
    return paths.size();
  };
  std::stable_sort(problems.begin(), problems.end(),
                   [&](const Problem& a, const Problem& b) { return rank(a.path) < rank(b.path); });
}

Problems JobProblems(const ShadowSyncJob& job) {
  Problems problems;
  RangeChecker checker("", problems);
  Fields(checker, job);
  ValidateMetadata(job.metadata, problems);
  ValidateSpec(job.spec, problems);
  SortByFieldOrder(problems);
  return problems;
}

absl::StatusOr<ShadowSyncJob> DecodeOrError(const json& root, Problems problems,
                                            std::string_view source, const LineMap* lines) {
  ShadowSyncJob job;
  DecodeJob(root, job, problems);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(FormatProblems(problems, source, lines));
  }
  return job;
}

}  // namespace

// ---------------------------------------------------------------------------
// Public API.

std::vector<TableSpec> CriteoTables(int64_t hash_buckets) {
  std::vector<TableSpec> tables;
  for (int i = 1; i <= kCriteoSparse; ++i) {
    tables.push_back({absl::StrCat("C", i), hash_buckets});
  }
  return tables;
}

absl::StatusOr<Quantity> ParseQuantity(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("not a Kubernetes quantity: \"", Av(text), "\" (examples: 1Gi, 500M, 1.5e9)"));
  };
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    negative = text[i++] == '-';
  }
  const size_t number_start = i;
  size_t digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    ++i, ++digits;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i, ++digits;
    }
  }
  if (digits == 0) {
    return bad();
  }
  const long double number =
      std::strtold(std::string(text.substr(number_start, i - number_start)).c_str(), nullptr);
  const std::string_view suffix = text.substr(i);
  static const std::map<std::string_view, long double> kSuffixes = {
      {"", 1.0L},      {"Ki", 0x1p10L}, {"Mi", 0x1p20L}, {"Gi", 0x1p30L},
      {"Ti", 0x1p40L}, {"Pi", 0x1p50L}, {"Ei", 0x1p60L}, {"n", 1e-9L},
      {"u", 1e-6L},    {"m", 1e-3L},    {"k", 1e3L},     {"M", 1e6L},
      {"G", 1e9L},     {"T", 1e12L},    {"P", 1e15L},    {"E", 1e18L}};
  long double multiplier;
  if (auto it = kSuffixes.find(suffix); it != kSuffixes.end()) {
    multiplier = it->second;
  } else if (suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    std::string_view exponent = suffix.substr(1);
    bool exp_negative = false;
    if (exponent[0] == '+' || exponent[0] == '-') {
      exp_negative = exponent[0] == '-';
      exponent.remove_prefix(1);
    }
    if (!IsDigits(exponent) || exponent.size() > 3) {
      return bad();
    }
    int e = std::stoi(std::string(exponent));
    multiplier = std::pow(10.0L, exp_negative ? -e : e);
  } else {
    return bad();
  }
  // Kubernetes rounds fractional base units up.
  long double value = std::ceil(number * multiplier);
  if (!(value <= 0x1p63L - 1)) {  // Also rejects inf and nan.
    return absl::InvalidArgumentError(absl::StrCat("quantity \"", Av(text), "\" is too large"));
  }
  return Quantity{std::string(text), static_cast<int64_t>(negative ? -value : value)};
}

double EffectiveEasgdAlpha(const JobSpec& spec) {
  return spec.sync.easgd.alpha.value_or(0.9 / std::max(1, spec.trainer.replicas));
}

double EffectiveBlockMomentum(const JobSpec& spec) {
  // With the block learning rate at its default (a filter gain of 1), the
  // momentum only smooths the block updates, lagging bm / (1 - bm) rounds.
  // The paper's 1 - 1/N made the lag grow with the trainer count; on the
  // Criteo excerpt with 4 trainers it cost shadow-bmuf 0.5% NE (docs/sync.md).
  return spec.sync.bmuf.block_momentum.value_or(0.5);
}

double EffectiveBlockLearningRate(const JobSpec& spec) {
  return spec.sync.bmuf.block_learning_rate.value_or(1.0 - EffectiveBlockMomentum(spec));
}

double EffectivePsLearningRate(const JobSpec& spec) {
  return spec.parameter_server.learning_rate.value_or(spec.trainer.learning_rate);
}

double EffectiveAspLearningRateScale(const JobSpec& spec) {
  return spec.sync.sync_switch.asp_learning_rate_scale.value_or(1.0 /
                                                                std::max(1, spec.trainer.replicas));
}

double EffectiveSharedLearningRateScale(const JobSpec& spec) {
  return spec.sync.learning_rate_scale.value_or(1.0 / std::max(1, spec.trainer.replicas));
}

double EffectiveReplicaLearningRateScale(const JobSpec& spec) {
  if (spec.sync.replica_learning_rate_scale.has_value()) {
    return *spec.sync.replica_learning_rate_scale;
  }
  if (spec.trainer.optimizer != Optimizer::kAdagrad) return 1.0;
  return 1.0 / std::sqrt(static_cast<double>(std::max(1, spec.trainer.replicas)));
}

int EffectiveAspBatchSize(const JobSpec& spec) {
  return spec.sync.sync_switch.asp_batch_size.value_or(spec.trainer.batch_size);
}

absl::StatusOr<ShadowSyncJob> ParseJobYaml(std::string_view text, std::string_view source_name) {
  LineMap lines;
  Problems problems;
  absl::StatusOr<json> root = YamlToJson(text, source_name, lines, problems);
  if (!root.ok()) {
    return root.status();
  }
  return DecodeOrError(*root, std::move(problems), source_name, &lines);
}

absl::StatusOr<ShadowSyncJob> ParseJobJson(std::string_view text, std::string_view source_name) {
  Problems problems;
  absl::StatusOr<json> root = JsonTextToJson(text, source_name, problems);
  if (!root.ok()) {
    return root.status();
  }
  return DecodeOrError(*root, std::move(problems), source_name, nullptr);
}

absl::StatusOr<ShadowSyncJob> JobFromJson(const nlohmann::json& object) {
  return DecodeOrError(object, {}, "", nullptr);
}

absl::StatusOr<ShadowSyncJob> LoadJobFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read job file ", path, ": ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  LineMap lines;
  Problems problems;
  const bool is_json = absl::EndsWith(path, ".json");
  absl::StatusOr<json> root =
      is_json ? JsonTextToJson(text, path, problems) : YamlToJson(text, path, lines, problems);
  if (!root.ok()) {
    return root.status();
  }
  const LineMap* line_map = is_json ? nullptr : &lines;
  absl::StatusOr<ShadowSyncJob> job = DecodeOrError(*root, std::move(problems), path, line_map);
  if (!job.ok()) {
    return job.status();
  }
  Problems invalid = JobProblems(*job);
  if (!invalid.empty()) {
    return absl::InvalidArgumentError(FormatProblems(invalid, path, line_map));
  }
  return job;
}

absl::Status ValidateJob(const ShadowSyncJob& job) {
  Problems problems = JobProblems(job);
  if (problems.empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(FormatProblems(problems, "", nullptr));
}

nlohmann::json JobToJson(const ShadowSyncJob& job) {
  json out = {{"apiVersion", kJobApiVersion}, {"kind", kJobKind}};
  ObjectEncoder encoder(out);
  Fields(encoder, job);
  return out;
}

std::string JobSummary(const ShadowSyncJob& job) {
  const JobSpec& s = job.spec;
  const SyncSpec& sync = s.sync;
  std::vector<std::string> parts = {absl::StrCat("job=", job.metadata.name),
                                    absl::StrCat("algorithm=", Av(EnumName(sync.algorithm)))};
  // Values are numbers, strings, or enum names (std::string_view).
  auto add = [&](const char* key, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string_view>) {
      parts.push_back(absl::StrCat(key, "=", Av(value)));
    } else {
      parts.push_back(absl::StrCat(key, "=", value));
    }
  };
  switch (sync.algorithm) {
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kFgEasgd:
      add("alpha", EffectiveEasgdAlpha(s));
      break;
    case SyncAlgorithm::kShadowBmuf:
    case SyncAlgorithm::kFgBmuf:
      add("block_momentum", EffectiveBlockMomentum(s));
      add("block_lr", EffectiveBlockLearningRate(s));
      add("nesterov", sync.bmuf.nesterov ? "true" : "false");
      break;
    case SyncAlgorithm::kAsp:
      add("lr_scale", EffectiveSharedLearningRateScale(s));
      break;
    case SyncAlgorithm::kSsp:
      add("staleness", sync.ssp.staleness);
      add("lr_scale", EffectiveSharedLearningRateScale(s));
      break;
    case SyncAlgorithm::kDsSync:
      add("group_size", sync.ds_sync.group_size);
      add("schedule", EnumName(sync.ds_sync.schedule));
      break;
    case SyncAlgorithm::kSyncSwitch:
      add("policy", EnumName(sync.sync_switch.policy));
      if (sync.sync_switch.switch_step.has_value()) {
        add("switch_step", *sync.sync_switch.switch_step);
      } else {
        add("switch_fraction", sync.sync_switch.switch_fraction);
      }
      add("asp_lr_scale", EffectiveAspLearningRateScale(s));
      if (sync.sync_switch.policy == SyncSwitchPolicy::kOnline) {
        add("straggler_factor", sync.sync_switch.straggler_factor);
        add("window_steps", sync.sync_switch.window_steps);
      }
      break;
    case SyncAlgorithm::kPsPlus:
      add("lr_scale", EffectiveSharedLearningRateScale(s));
      add("lr_modulation", EnumName(sync.ps_plus.lr_modulation));
      if (sync.ps_plus.lr_modulation == StalenessLrRule::kExponential) {
        add("gamma", sync.ps_plus.gamma);
      }
      break;
    default:
      break;
  }
  switch (sync.algorithm) {
    case SyncAlgorithm::kFgEasgd:
    case SyncAlgorithm::kFgMa:
    case SyncAlgorithm::kFgBmuf:
      add("interval", sync.interval);
      add("lr_scale", EffectiveReplicaLearningRateScale(s));
      break;
    case SyncAlgorithm::kShadowEasgd:
    case SyncAlgorithm::kShadowMa:
    case SyncAlgorithm::kShadowBmuf:
      add("apply", EnumName(sync.apply_mode));
      if (sync.min_interval_ms > 0) {
        add("min_interval_ms", sync.min_interval_ms);
      }
      add("duty_cycle", sync.duty_cycle);
      if (sync.warmup_steps > 0) add("warmup_steps", sync.warmup_steps);
      if (sync.final_average) add("final_average", "true");
      add("lr_scale", EffectiveReplicaLearningRateScale(s));
      break;
    default:
      break;
  }
  add("trainers", s.trainer.replicas);
  add("threads", s.trainer.threads);
  add("batch", s.trainer.batch_size);
  add("lr", s.trainer.learning_rate);
  add("optimizer", EnumName(s.trainer.optimizer));
  if (s.trainer.dense_precision != GemmPrecision::kFp32)
    add("precision", EnumName(s.trainer.dense_precision));
  if (s.trainer.straggler) {
    add("stragglers", absl::StrCat(s.trainer.straggler->count, "x", s.trainer.straggler->delay_ms,
                                   "ms+", s.trainer.straggler->jitter_ms, "ms"));
  }
  add("ps", s.parameter_server.replicas);
  add("slots", s.parameter_server.slots);
  add("ps_optimizer", EnumName(s.parameter_server.optimizer));
  add("ps_lr", EffectivePsLearningRate(s));
  add("cache", s.parameter_server.cache_bytes.text);
  add("syncers", s.syncer.replicas);
  add("data", EnumName(s.data.format));
  if (s.data.format == DataFormat::kSynthetic) {
    add("examples", s.data.synthetic.examples);
    add("eval_examples", s.data.synthetic.eval_examples);
    add("seed", s.data.synthetic.seed);
  } else {
    add("files", s.data.paths.size());
    add("eval_files", s.data.eval_paths.size());
  }
  add("model", absl::StrCat(s.model.dense_features, "d-", s.model.tables.size(), "t-",
                            s.model.embedding_dim, "e"));
  add("bottom", s.model.bottom_mlp.empty() ? "-" : absl::StrJoin(s.model.bottom_mlp, "-"));
  add("top", s.model.top_mlp.empty() ? "-" : absl::StrJoin(s.model.top_mlp, "-"));
  if (!s.checkpoint.path.empty()) {
    add("checkpoint", absl::StrCat(s.checkpoint.path, "@", s.checkpoint.interval_seconds, "s"));
  }
  if (!s.init.from_model.empty()) add("init", s.init.from_model);
  return absl::StrJoin(parts, " ");
}

nlohmann::json JobSpecOpenApiSchema() {
  json schema = TypeSchema(JobSpec{}, FieldInfo{.name = "spec"});
  schema["description"] = absl::StrCat("Spec of a ", Av(kJobKind),
                                       ". Generated by JobSpecOpenApiSchema() in "
                                       "jobspec/job_spec.cc; do not edit by hand.");
  return schema;
}

std::string JobSpecReferenceMarkdown() {
  // A "Top level" table (apiVersion, kind, metadata, spec), then one section
  // per object below them: metadata and each spec.<section>.
  auto section_of = [](const std::string& path) -> std::string {
    size_t dot = path.find('.');
    if (dot == std::string::npos) {
      return "";
    }
    if (!absl::StartsWith(path, "spec.")) {
      return path.substr(0, dot);
    }
    dot = path.find('.', dot + 1);
    return dot == std::string::npos ? path : path.substr(0, dot);
  };
  std::vector<DocRow> rows = AllDocRows();
  std::stable_partition(rows.begin(), rows.end(),
                        [&](const DocRow& row) { return section_of(row.path).empty(); });
  std::string out;
  std::optional<std::string> current;
  for (const DocRow& row : rows) {
    const std::string section = section_of(row.path);
    const bool intro = row.path == section;  // The row of the section's own object.
    if (section != current) {
      current = section;
      absl::StrAppend(&out, out.empty() ? "" : "\n", "### ",
                      section.empty() ? "Top level" : absl::StrCat("`", section, "`"), "\n\n");
      if (intro) {
        absl::StrAppend(&out, row.doc, "\n\n");
      }
      absl::StrAppend(&out, "| Field | Type | Default | Description |\n|---|---|---|---|\n");
    }
    if (intro) {
      continue;
    }
    absl::StrAppend(&out, "| `", row.path, "` | ", EscapeCell(row.type), " | ",
                    EscapeCell(row.default_text), " | ", EscapeCell(row.doc), " |\n");
  }
  return out;
}

std::vector<std::string> JobFieldPaths() {
  std::vector<std::string> paths;
  for (const DocRow& row : AllDocRows()) {
    paths.push_back(row.path);
  }
  return paths;
}

namespace {

// q as `slots` factors, non-increasing, each <= cap (1s pad), if possible.
std::optional<std::vector<int>> FactorInto(int q, int slots, int cap) {
  if (q == 1) return std::vector<int>(slots, 1);
  if (slots == 0) return std::nullopt;
  for (int d = std::min(cap, q); d >= 2; --d) {
    if (q % d != 0) continue;
    std::optional<std::vector<int>> rest = FactorInto(q / d, slots - 1, d);
    if (!rest.has_value()) continue;
    rest->insert(rest->begin(), d);
    return rest;
  }
  return std::nullopt;
}

}  // namespace

int DsSyncButterflyRounds(int n, int g) {
  int m = 0;
  for (int64_t reach = 1; reach < n; reach *= g) ++m;
  return m;
}

absl::StatusOr<std::vector<int>> DsSyncButterflyRadices(int n, int g) {
  if (g < 2 || n < g || n % g != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.dsSync.groupSize: butterfly needs groups of >= 2 dividing the ", n,
                     " trainers, got ", g));
  }
  const int m = DsSyncButterflyRounds(n, g);
  std::optional<std::vector<int>> rest = FactorInto(n / g, m - 1, g);
  if (!rest.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync.dsSync.schedule: butterfly cannot give every one of ", n,
        " trainers the exact mean in groups of ", g, " within ceil(log_", g, " ", n, ") = ", m,
        " rounds: it needs ", n, " / ", g, " = ", n / g, " to be a product of ", m - 1,
        " factors of at most ", g, " (use the random schedule or another trainer count)"));
  }
  rest->insert(rest->begin(), g);
  return *std::move(rest);
}

}  // namespace shadowsync
