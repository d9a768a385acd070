// Private to jobspec/: the job spec's field table, and the type traits its
// visitors share. The decoder, the range checks, the encoder, the OpenAPI
// schema and the Markdown reference are all visitors of these tables (see
// job_spec_internal.h for which file holds which), so they cannot drift apart.
//
// A visitor provides
//   template <typename T> void operator()(T& member, const FieldInfo& f);
//   template <typename T, typename Target, typename Apply>
//   void Shorthand(const FieldInfo& f, std::string_view replaces, Target& target, Apply apply);
//   void Ignore(const auto& names);  // Keys accepted and dropped.
//
// Thread-safe: constant tables; Fields() only calls the visitor.
#ifndef SHADOWSYNC_JOBSPEC_JOB_SPEC_FIELDS_H_
#define SHADOWSYNC_JOBSPEC_JOB_SPEC_FIELDS_H_

#include <array>
#include <concepts>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "jobspec/job_spec.h"

namespace shadowsync::job_spec_internal {

// ---------------------------------------------------------------------------
// The field table. One Fields() per struct lists its fields in wire order
// with name, documentation and bounds; defaults come from the member
// initializers in job_spec.h. Every visitor walks these tables.

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
inline constexpr std::array<std::string_view, 11> kServerMetadataFields = {
    "uid",
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
  v(s.pooling,
    {.name = "pooling",
     .doc = "How the rows of a field's ids become its one embedding: their `sum` or their "
            "`mean`. It matters for multi-hot fields, whose ids the TSV layout writes "
            "comma-separated (`id,id,...`); a single id is the same either way."});
}

template <typename V, Is<CriteoTablesShorthand> S>
void Fields(V& v, S& s) {
  v(s.hash_buckets, {.name = "hashBuckets", .doc = "Rows in each of the 26 tables.", .min = 1});
}

template <typename V, Is<DcnSpec> S>
void Fields(V& v, S& s) {
  v(s.layers, {.name = "layers", .doc = "Cross layers.", .min = 1, .max = 64});
  v(s.low_rank,
    {.name = "lowRank",
     .doc = "Inner width r of each cross layer's low-rank matrix U V (U n x r, V r x n, n = "
            "(1 + tables) x embeddingDim). DLRMv2 uses 512.",
     .min = 1,
     .max = 65536});
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
  v(s.interaction,
    {.name = "interaction",
     .doc = "How the bottom MLP's output and the pooled embeddings meet before the top MLP. "
            "`dot`: DLRM's, the bottom output followed by every pairwise dot product. `dcn`: "
            "DCN-v2's (DLRMv2, TorchRec's DLRM_DCN), low-rank cross layers x_{l+1} = x0 * "
            "(U (V x_l) + b) + x_l over x0, the concatenated bottom output and embeddings; the "
            "top MLP reads the last layer's output."});
  v(s.dcn, {.name = "dcn", .doc = "The cross layers of interaction `dcn`; ignored for `dot`."});
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
  v(s.multi_hot_columns,
    {.name = "multiHotColumns",
     .doc = "Multi-hot data: the last N categorical columns (C26 first) hold 1 to "
            "maxIdsPerField ids each, comma-separated; the teacher scores such a field as the "
            "mean of its ids' effects (tables[].pooling: mean matches it). 0: one id per field.",
     .min = 0,
     .max = 26});
  v(s.max_ids_per_field, {.name = "maxIdsPerField",
                          .doc = "Most ids in a multi-hot field; each holds 1 to this many.",
                          .min = 1,
                          .max = 16});
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

template <typename V, Is<LearningCheckSpec> S>
void Fields(V& v, S& s) {
  v(s.after_examples,
    {.name = "afterExamples",
     .doc = "The train NE (each example scored before its update) is judged over windows of "
            "afterExamples/2 examples, each one that ends at or after afterExamples examples of a "
            "trainer (raised to twice the warm-up's examples, lrWarmupSteps x batchSize, if "
            "smaller). 0: only a non-finite loss counts.",
     .min = 0});
  v(s.max_train_ne,
    {.name = "maxTrainNe",
     .doc = "A window whose train NE is at or above this has not learned (1.0 is predicting the "
            "base rate).",
     .min = 0,
     .exclusive_min = true});
  v(s.fail, {.name = "fail",
             .doc = "A problem fails the job (phase Failed, reason NotLearning, no restarts) "
                    "instead of a warning in the log, the report, the trainer's metrics and the "
                    "job's conditions."});
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
  v(s.lr_warmup_steps,
    {.name = "lrWarmupSteps",
     .doc = "The dense learning rate rises linearly from learningRate/lrWarmupSteps to "
            "learningRate over each trainer's first lrWarmupSteps steps (every thread's steps "
            "counted). Without it, Adagrad's first full-size steps can leave the bottom MLP's "
            "output dead and the run stalls near the base rate (docs/decisions.md). Skipped when "
            "a trainer starts from saved dense Adagrad state (a resume, or spec.init with "
            "optimizer state). 0: none.",
     .min = 0});
  v(s.learning_check,
    {.name = "learningCheck",
     .doc = "Whether each trainer's run is learning: a non-finite loss, or a train NE still at "
            "the base rate's after many examples, is reported (docs/decisions.md)."});
  v(s.dense_precision,
    {.name = "densePrecision",
     .doc = "Arithmetic of the MLP GEMMs: fp32; bf16 (inputs rounded to bfloat16, fp32 products, "
            "sums, weights and optimizer: 1.3-1.5x the examples/s of fp32 on DLRM-small with "
            "AVX512-BF16, one thread); or auto, bf16 where the CPU has AVX512-BF16, else fp32."});
  v(s.straggler, {.name = "straggler",
                  .doc = "Injected slowness for straggler experiments; absent = none. Local "
                         "launcher and Kubernetes alike."});
  v(s.pod_template, {.name = "template",
                     .doc = "Pod template for trainer pods (image, resources, ...), limited to "
                            "an allow-list of fields (docs/operator.md). Kubernetes only; the "
                            "local launcher checks it and ignores it."});
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
    {.name = "template",
     .doc = "Pod template for parameter-server pods, limited to an allow-list of fields "
            "(docs/operator.md). Kubernetes only."});
}

template <typename V, Is<SyncerSpec> S>
void Fields(V& v, S& s) {
  v(s.replicas, {.name = "replicas",
                 .doc = "Sync servers; dense parameters are split by range over them. 0 only "
                        "with algorithm none.",
                 .min = 0});
  v(s.pod_template, {.name = "template",
                     .doc = "Pod template for syncer pods, limited to an allow-list of fields "
                            "(docs/operator.md). Kubernetes only."});
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
                  .doc = "Dense synchronization strategy (docs/sync.md). `shadow-*` run in a "
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
  v(s.delta_interval_seconds,
    {.name = "deltaIntervalSeconds",
     .doc = "Seconds between two delta exports while training runs: the rows changed since the "
            "previous export and tombstones for rows evicted since, which `shadowsync serve` "
            "applies to the model it serves; 0 = none. The parameter servers then remember "
            "which rows changed (docs/export.md, \"Delta exports\").",
     .min = 0});
  v(s.keep, {.name = "keep",
             .doc = "Newest full exports kept, with the deltas over them; older ones are deleted.",
             .min = 1});
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

template <typename V, Is<SchedulingPolicySpec> S>
void Fields(V& v, S& s) {
  v(s.min_available,
    {.name = "minAvailable",
     .doc = "Pods that must be schedulable together before any starts (the PodGroup's "
            "minMember); absent = every pod of the job: trainers, parameter servers and syncers.",
     .min = 1});
  v(s.queue, {.name = "queue", .doc = "Volcano queue of the PodGroup; empty = Volcano's default."});
  v(s.priority_class,
    {.name = "priorityClass",
     .doc = "PriorityClass of the PodGroup and of every pod (priorityClassName); empty = none."});
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
  v(s.scheduling_policy,
    {.name = "schedulingPolicy",
     .doc = "Gang scheduling: with an operator run with --gang-scheduler (volcano or "
            "scheduler-plugins), the job's PodGroup admits its pods all at once or not at all, so "
            "servers never hold resources while the trainers cannot be placed. absent = a "
            "PodGroup of every pod, when the operator has a gang scheduler."});
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
            .doc = "Mutual TLS on every gRPC link (docs/security.md); absent = plaintext, or on "
                   "Kubernetes the operator's certificate when it gives jobs credentials (the "
                   "Helm chart's default)."});
  v(s.auth_token,
    {.name = "authToken",
     .doc = "Shared bearer token every gRPC call carries and parameter servers and syncers "
            "check; absent = none, or on Kubernetes a token of the job's own when the operator "
            "gives jobs credentials (the Helm chart's default)."});
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
  // Required, as in the CRD: a document without one is more likely a mistake
  // than a wish for every default, which `spec: {}` states.
  v(s.spec, {.name = "spec", .doc = "The job's desired state.", .required = true});
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

}  // namespace shadowsync::job_spec_internal

#endif  // SHADOWSYNC_JOBSPEC_JOB_SPEC_FIELDS_H_
