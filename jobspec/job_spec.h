// The ShadowSyncJob (docs/job-spec.md): the one job schema shared by the local
// launcher, `shadowsync train --config`, the Kubernetes operator (which gets
// the object as JSON from the API server) and the CRD's OpenAPI schema.
// Plain value types; the functions below are pure and thread-safe.
//
//   SS_ASSIGN_OR_RETURN(ShadowSyncJob job, LoadJobFile("job.yaml"));  // parse + validate
//   LOG(INFO) << JobSummary(job);   // "job=quickstart algorithm=shadow-easgd trainers=2 ..."
//   for (const TableSpec& t : job.spec.model.tables) ...
//
// Single source of truth: a field's default is its member initializer below
// (nowhere else), and its wire name, doc, bounds and enum values are in one
// field table in job_spec_fields.h. The decoder, the range checks of ValidateJob,
// the JSON encoder, the OpenAPI schema and the Markdown reference are all
// driven from that table, so they cannot drift apart.
//
// To add a field: 1) the member (with its default) here, 2) one line in the
// struct's Fields() table in job_spec_fields.h, 3) cross-field checks, if any, in
// ValidateJob, 4) regenerate docs/job-spec.md (SHADOWSYNC_UPDATE_DOCS=1
// job_spec_test), 5) regenerate the CRD from JobSpecOpenApiSchema().
#ifndef SHADOWSYNC_JOBSPEC_JOB_SPEC_H_
#define SHADOWSYNC_JOBSPEC_JOB_SPEC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shadowsync {

inline constexpr std::string_view kJobApiVersion = "shadowsync.io/v1alpha1";
inline constexpr std::string_view kJobKind = "ShadowSyncJob";

// metadata.name is a DNS-1035 label of at most this many characters. Child
// objects append role suffixes: the StatefulSet "<job>-trainer" gets a
// controller-revision-hash label "<sts>-<10-char hash>" that must fit the
// 63-char label limit, so "<job>-trainer" <= 52 and "<job>" <= 44; 40 keeps
// room for a longer future role ("-evaluator") and pod names "<sts>-<index>".
inline constexpr int kMaxJobNameLength = 40;

inline constexpr int64_t kDefaultHashBuckets = 1'000'000;
inline constexpr int kMaxSlots = 1 << 20;
// The parameter servers' row initialisation seed: a row never pushed reads
// as its initial value from it, in a job and in an export of the job.
inline constexpr uint64_t kEmbeddingInitSeed = 1;

// ---------------------------------------------------------------------------
// Enumerations. Wire names are EnumTraits<E>::kNames, indexed by the
// enumerator's value, so enumerators must stay 0..N-1 in table order.

enum class DataFormat { kCriteoTsv, kSynthetic };
enum class Optimizer { kSgd, kAdagrad };
// The trainers' MLP GEMM arithmetic (model::DensePrecision); auto = bf16 on
// CPUs with AVX512-BF16, else fp32. fp32 by default: the same numbers on every CPU.
enum class GemmPrecision { kAuto, kFp32, kBf16 };
// The feature interaction (model::Interaction): DLRM's pairwise dots, or
// DCN-v2's low-rank cross layers.
enum class ModelInteraction { kDot, kDcn };
// How a table's rows for one field's ids become one embedding (model::Pooling).
enum class TablePooling { kSum, kMean };

// To add an algorithm: 1) the enumerator, 2) its name in EnumTraits below
// (same position), 3) per-algorithm checks in ValidateJob and a parameter
// block in SyncSpec if it has knobs, 4) the trainer's strategy factory,
// 5) regenerate docs and the CRD.
enum class SyncAlgorithm {
  kNone,
  kShadowEasgd,
  kShadowMa,
  kShadowBmuf,
  kFgEasgd,
  kFgMa,
  kFgBmuf,
  kBsp,
  kAsp,
  kSsp,
  kDsSync,
  kSyncSwitch,
  kPsPlus,
};

// How a sync result reaches the live replica: as a delta on the snapshot the
// round started from (keeps Hogwild progress made during the round), or by
// overwriting it (ablation; sync-algorithms.md §2.3).
enum class SyncApplyMode { kDelta, kOverwrite };
enum class DsSyncSchedule { kRandom, kButterfly };
enum class SyncSwitchPolicy { kOffline, kOnline };
// PS+ learning-rate modulation by staleness tau: none (eta0), inverse
// (eta0 / max(1, tau)), inverse-plus-one (eta0 / (1 + tau)), exponential
// (eta0 * gamma^tau).
enum class StalenessLrRule { kNone, kInverse, kInversePlusOne, kExponential };
enum class CleanPodPolicy { kNone, kRunning, kAll };

template <typename E>
struct EnumTraits;
template <>
struct EnumTraits<DataFormat> {
  static constexpr std::array<std::string_view, 2> kNames = {"criteo-tsv", "synthetic"};
};
template <>
struct EnumTraits<Optimizer> {
  static constexpr std::array<std::string_view, 2> kNames = {"sgd", "adagrad"};
};
template <>
struct EnumTraits<GemmPrecision> {
  static constexpr std::array<std::string_view, 3> kNames = {"auto", "fp32", "bf16"};
};
template <>
struct EnumTraits<ModelInteraction> {
  static constexpr std::array<std::string_view, 2> kNames = {"dot", "dcn"};
};
template <>
struct EnumTraits<TablePooling> {
  static constexpr std::array<std::string_view, 2> kNames = {"sum", "mean"};
};
template <>
struct EnumTraits<SyncAlgorithm> {
  static constexpr std::array<std::string_view, 13> kNames = {
      "none", "shadow-easgd", "shadow-ma", "shadow-bmuf", "fg-easgd",    "fg-ma",  "fg-bmuf",
      "bsp",  "asp",          "ssp",       "ds-sync",     "sync-switch", "ps-plus"};
};
template <>
struct EnumTraits<SyncApplyMode> {
  static constexpr std::array<std::string_view, 2> kNames = {"delta", "overwrite"};
};
template <>
struct EnumTraits<DsSyncSchedule> {
  static constexpr std::array<std::string_view, 2> kNames = {"random", "butterfly"};
};
template <>
struct EnumTraits<SyncSwitchPolicy> {
  static constexpr std::array<std::string_view, 2> kNames = {"offline", "online"};
};
template <>
struct EnumTraits<StalenessLrRule> {
  static constexpr std::array<std::string_view, 4> kNames = {"none", "inverse", "inverse-plus-one",
                                                             "exponential"};
};
template <>
struct EnumTraits<CleanPodPolicy> {
  static constexpr std::array<std::string_view, 3> kNames = {"None", "Running", "All"};
};

// The wire name of `value`, e.g. EnumName(SyncAlgorithm::kShadowEasgd) == "shadow-easgd".
template <typename E>
constexpr std::string_view EnumName(E value) {
  return EnumTraits<E>::kNames[static_cast<size_t>(value)];
}

// The enumerator named `name` (exact, case-sensitive match), or nullopt.
template <typename E>
constexpr std::optional<E> ParseEnumName(std::string_view name) {
  for (size_t i = 0; i < EnumTraits<E>::kNames.size(); ++i) {
    if (EnumTraits<E>::kNames[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// A Kubernetes resource quantity ("1Gi", "500M", "1.5e9", 1073741824). The
// text is kept as written so the spec round-trips unchanged.
struct Quantity {
  std::string text;   // As written, e.g. "1Gi".
  int64_t value = 0;  // In base units (bytes here); fractions round up, as in Kubernetes.

  // "<n>Gi" without parsing; for defaults.
  static Quantity Gi(int64_t n) { return {std::to_string(n) + "Gi", n << 30}; }
  bool operator==(const Quantity&) const = default;
};

// Parses a Kubernetes quantity: [+-]<decimal>[Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|e<int>].
// Returns InvalidArgument for any other text or a value outside int64.
absl::StatusOr<Quantity> ParseQuantity(std::string_view text);

// ---------------------------------------------------------------------------
// The job. Field comments give the wire name where it differs from the
// member's, the unit and the default; docs/job-spec.md has the full text.

// The subset of Kubernetes ObjectMeta the job uses. Server-populated fields
// (uid, resourceVersion, generation, managedFields, ...) are accepted and
// dropped by the decoder; the operator reads them from the raw object.
struct JobMetadata {
  std::string name;                           // Required; see kMaxJobNameLength.
  std::string namespace_name;                 // "namespace". "" = the current namespace.
  std::map<std::string, std::string> labels;  // Copied onto every child object.
  std::map<std::string, std::string> annotations;
  bool operator==(const JobMetadata&) const = default;
};

// One embedding table: raw categorical ids are hashed into `hash_buckets` rows.
struct TableSpec {
  std::string name;                            // Required, unique within the model.
  int64_t hash_buckets = kDefaultHashBuckets;  // "hashBuckets". Rows in the hashed id space.
  TablePooling pooling = TablePooling::kSum;
  bool operator==(const TableSpec&) const = default;
};

// The 26 tables of the Criteo layout, "C1".."C26", each with `hash_buckets`
// rows: what the shorthand `model.criteoTables: {hashBuckets: N}` expands to.
std::vector<TableSpec> CriteoTables(int64_t hash_buckets);

// "dcn": the cross layers of interaction dcn.
struct DcnSpec {
  int layers = 3;      // Cross layers.
  int low_rank = 512;  // "lowRank". Inner width r of each layer's U V factorisation.
  bool operator==(const DcnSpec&) const = default;
};

// DLRM-small by default (docs/architecture.md). The last bottom layer (width
// embedding_dim) and the final top layer (width 1) are implicit.
struct ModelSpec {
  int dense_features = 13;                       // "denseFeatures".
  int embedding_dim = 16;                        // "embeddingDim".
  std::vector<int> bottom_mlp = {512, 256, 64};  // "bottomMlp". Hidden widths.
  std::vector<int> top_mlp = {512, 256};         // "topMlp". Hidden widths.
  ModelInteraction interaction = ModelInteraction::kDot;
  DcnSpec dcn;  // Read only when interaction is dcn.
  // Always the expanded list, also when the input used `criteoTables`.
  // Default: CriteoTables(kDefaultHashBuckets).
  std::vector<TableSpec> tables = CriteoTables(kDefaultHashBuckets);
  bool operator==(const ModelSpec&) const = default;
};

struct SyntheticDataSpec {
  int64_t examples = 1'000'000;     // Training examples generated.
  int64_t eval_examples = 100'000;  // "evalExamples". Held-out examples, same teacher.
  int64_t seed = 1;                 // Generator seed; same seed, same bytes.
  int multi_hot_columns = 0;        // "multiHotColumns". The last N columns are multi-hot.
  int max_ids_per_field = 4;        // "maxIdsPerField".
  bool operator==(const SyntheticDataSpec&) const = default;
};

struct DataSpec {
  DataFormat format = DataFormat::kSynthetic;
  std::vector<std::string> paths;       // criteo-tsv training files, read in order.
  std::vector<std::string> eval_paths;  // "evalPaths". Held-out files for NE/AUC/logloss.
  SyntheticDataSpec synthetic;          // Read only when format is synthetic.
  bool operator==(const DataSpec&) const = default;
};

// Artificial slowness for straggler experiments (Sync-Switch §5.2): trainers
// 0..count-1 sleep delay_ms + U[0, jitter_ms] ms after every step.
struct StragglerSpec {
  int count = 1;          // Trainers slowed down.
  int64_t delay_ms = 10;  // "delayMs".
  int64_t jitter_ms = 0;  // "jitterMs".
  bool operator==(const StragglerSpec&) const = default;
};

// "learningCheck": whether each trainer's run is learning (a finite loss,
// and a train NE below max_train_ne once after_examples are trained).
struct LearningCheckSpec {
  int64_t after_examples = 100'000;  // "afterExamples". 0: the loss's finiteness only.
  double max_train_ne = 0.99;        // "maxTrainNe".
  bool fail = false;                 // Fail the job at a problem, instead of a warning.
  bool operator==(const LearningCheckSpec&) const = default;
};

struct TrainerSpec {
  int replicas = 2;
  int threads = 2;                            // Hogwild threads per trainer.
  int batch_size = 256;                       // "batchSize". Examples per thread step.
  double learning_rate = 0.02;                // "learningRate". Dense optimizer step size.
  Optimizer optimizer = Optimizer::kAdagrad;  // Dense optimizer.
  // "lrWarmupSteps". The dense learning rate's linear warm-up, in steps.
  int64_t lr_warmup_steps = 100;
  LearningCheckSpec learning_check;  // "learningCheck".
  // "densePrecision". Of the MLP GEMMs; weights and optimizer stay fp32.
  GemmPrecision dense_precision = GemmPrecision::kFp32;
  std::optional<StragglerSpec> straggler;  // Absent: no injected slowness.
  nlohmann::json pod_template;             // "template". Opaque pod template; null = none.
  bool operator==(const TrainerSpec&) const = default;
};

// Feature admission: an unseen id gets a row only once seen min_count times,
// and then only with `probability`. Defaults admit everything.
struct AdmissionSpec {
  int64_t min_count = 1;  // "minCount".
  double probability = 1.0;
  bool operator==(const AdmissionSpec&) const = default;
};

struct EvictionSpec {
  int64_t ttl_seconds = 0;  // "ttlSeconds". Drop rows untouched this long; 0 = never.
  int64_t max_rows = 0;     // "maxRows". Per server, least recently used first; 0 = no cap.
  bool operator==(const EvictionSpec&) const = default;
};

struct StorageSpec {
  Quantity size = Quantity::Gi(20);  // PersistentVolumeClaim size (Kubernetes only).
  std::string storage_class_name;    // "storageClassName". "" = the cluster default.
  bool operator==(const StorageSpec&) const = default;
};

struct ParameterServerSpec {
  int replicas = 2;
  int slots = 4096;                           // Hash slots (docs/resharding.md); fixed per job.
  Optimizer optimizer = Optimizer::kAdagrad;  // Sparse optimizer, run on the server.
  // "learningRate". Default: trainer.learning_rate (see EffectivePsLearningRate).
  std::optional<double> learning_rate;
  Quantity cache_bytes = Quantity::Gi(1);  // "cacheBytes". RAM row cache per server.
  AdmissionSpec admission;
  EvictionSpec eviction;
  StorageSpec storage;
  nlohmann::json pod_template;  // "template".
  bool operator==(const ParameterServerSpec&) const = default;
};

struct SyncerSpec {
  int replicas = 1;             // May be 0 only with algorithm none.
  nlohmann::json pod_template;  // "template".
  bool operator==(const SyncerSpec&) const = default;
};

struct EasgdSpec {
  // Elastic moving rate. Default: 0.9 / trainer.replicas (EASGD's beta = 0.9
  // split over N trainers; see EffectiveEasgdAlpha).
  std::optional<double> alpha;
  bool operator==(const EasgdSpec&) const = default;
};

// Mean convention: block learning rate 1 with momentum 0 is plain averaging.
struct BmufSpec {
  // "blockMomentum". Default: 0.5 (EffectiveBlockMomentum).
  std::optional<double> block_momentum;
  // "blockLearningRate". Default: 1 - blockMomentum (EffectiveBlockLearningRate):
  // a constant block update then moves the model once, not 1 / (1 - bm) times.
  std::optional<double> block_learning_rate;
  bool nesterov = true;  // Nesterov-style look-ahead (fairseq use_nbm).
  bool operator==(const BmufSpec&) const = default;
};

struct DsSyncSpec {
  int group_size = 2;                                 // "groupSize". Must divide trainer.replicas.
  DsSyncSchedule schedule = DsSyncSchedule::kRandom;  // Regrouping rule per round.
  int64_t seed = 1;                                   // Shared seed of the random schedule.
  bool operator==(const DsSyncSpec&) const = default;
};

struct SyncSwitchSpec {
  SyncSwitchPolicy policy = SyncSwitchPolicy::kOffline;
  double switch_fraction = 0.125;  // "switchFraction". Share of the run trained under BSP.
  double straggler_factor = 2.0;   // "stragglerFactor". Online: slow = step time > factor * median.
  int window_steps = 20;           // "windowSteps". Online: steps per step-time measurement.
  // "switchStep". BSP rounds (steps of each trainer thread) before the
  // switch. Absent: switchFraction of the run's steps, which the trainer
  // passes to the strategy (SyncSwitchStrategy::SetTotalSteps).
  std::optional<int64_t> switch_step;
  // "aspLearningRateScale". The ASP phases' dense learning rate is
  // trainer.learningRate times this (the paper's linear rescaling, 0.8 ->
  // 0.1 on 8 workers). Default: 1 / trainer.replicas
  // (EffectiveAspLearningRateScale).
  std::optional<double> asp_learning_rate_scale;
  // "aspBatchSize". Examples per thread step in the ASP phases. Default:
  // trainer.batchSize (EffectiveAspBatchSize).
  std::optional<int> asp_batch_size;
  bool operator==(const SyncSwitchSpec&) const = default;
};

struct PsPlusSpec {
  StalenessLrRule lr_modulation = StalenessLrRule::kInverse;  // "lrModulation".
  double gamma = 0.9;                                         // Base of the exponential rule.
  bool operator==(const PsPlusSpec&) const = default;
};

struct SspSpec {
  int staleness = 4;  // Max steps a trainer may run ahead of the slowest.
  bool operator==(const SspSpec&) const = default;
};

struct SyncSpec {
  SyncAlgorithm algorithm = SyncAlgorithm::kShadowEasgd;
  int interval = 10;            // fg-*: trainer steps between two syncs (the papers' k).
  int64_t min_interval_ms = 0;  // "minIntervalMs". shadow-*: least pause between rounds.
  // "dutyCycle". shadow-*: the share of wall time the shadow thread may spend
  // in rounds; it pauses cost * (1 - d) / d after each (1 = back to back).
  double duty_cycle = 0.02;
  // "warmupSteps". shadow-*: the first steps of each trainer average the
  // replicas in the foreground after every step before the shadow thread
  // starts (post-local SGD's warm-up): replicas that leave one starting point
  // at once drift furthest apart while the dense weights move fastest.
  int64_t warmup_steps = 8;
  // "finalAverage". shadow-*: one last round, once every trainer is done,
  // leaves every replica at their mean, so the job ends with one model.
  bool final_average = true;
  SyncApplyMode apply_mode = SyncApplyMode::kDelta;  // "applyMode".
  // "learningRateScale". asp, ssp, ps-plus: every trainer's update goes
  // straight to the shared weights, so N trainers move them N times per
  // round of batches where BSP moves them once; their dense learning rate is
  // trainer.learningRate times this. Default: 1 / trainer.replicas
  // (EffectiveSharedLearningRateScale).
  std::optional<double> learning_rate_scale;
  // "replicaLearningRateScale". shadow-* and fg-*: each trainer's dense
  // learning rate is trainer.learningRate times this. With Adagrad a replica's accumulator
  // sums only its own share of the gradients, about 1/N of what a single
  // trainer's holds at the same point in the data, so its steps are about
  // sqrt(N) times as large. Default: 1 / sqrt(trainer.replicas) with Adagrad,
  // 1 with SGD (EffectiveReplicaLearningRateScale).
  std::optional<double> replica_learning_rate_scale;
  EasgdSpec easgd;             // shadow-easgd, fg-easgd.
  BmufSpec bmuf;               // shadow-bmuf, fg-bmuf.
  DsSyncSpec ds_sync;          // "dsSync".
  SyncSwitchSpec sync_switch;  // "syncSwitch".
  PsPlusSpec ps_plus;          // "psPlus".
  SspSpec ssp;
  bool operator==(const SyncSpec&) const = default;
};

struct CheckpointSpec {
  std::string path;                // Directory (or volume path) for checkpoints; "" = none.
  int64_t interval_seconds = 600;  // "intervalSeconds".
  bool operator==(const CheckpointSpec&) const = default;
};

// The trained model's exports (docs/export.md).
struct ExportSpec {
  // Directory the exports go under, each in its own subdirectory; "" = the
  // run directory's exports/ (shadowsync run).
  std::string path;
  int64_t interval_seconds = 0;  // "intervalSeconds". 0 = at completion and on demand only.
  // "deltaIntervalSeconds": between two delta exports while training runs;
  // 0 = none.
  int64_t delta_interval_seconds = 0;
  int keep = 3;                      // Newest exports kept; older ones are deleted.
  bool with_optimizer_state = true;  // "withOptimizerState".
  // Kubernetes only: the claim the exports go to ("volumeClaimName"); ""
  // = one the operator creates as <job>-exports, of `storage`.
  std::string volume_claim_name;
  StorageSpec storage;
  bool operator==(const ExportSpec&) const = default;
};

// Where the model starts from.
struct InitSpec {
  std::string from_model;  // "fromModel": an export directory; "" = a fresh model.
  // Kubernetes only: the claim holding it ("volumeClaimName"); fromModel is
  // then a path inside the claim.
  std::string volume_claim_name;
  bool operator==(const InitSpec&) const = default;
};

// Kubeflow's runPolicy (operator-anchors.md §6).
// "schedulingPolicy": gang scheduling and queueing through the PodGroup the
// operator creates when it runs with a gang scheduler (docs/operator.md).
struct SchedulingPolicySpec {
  std::optional<int> min_available;  // "minAvailable". Absent: every pod of the job.
  std::string queue;                 // Volcano's queue; "" = its default.
  std::string priority_class;        // "priorityClass". Of the PodGroup and every pod.
  bool operator==(const SchedulingPolicySpec&) const = default;
};

struct RunPolicySpec {
  int backoff_limit = 3;                              // "backoffLimit". Restarts before Failed.
  std::optional<int64_t> active_deadline_seconds;     // "activeDeadlineSeconds". Absent: none.
  std::optional<int64_t> ttl_seconds_after_finished;  // "ttlSecondsAfterFinished". Absent: keep.
  bool suspend = false;
  // "cleanPodPolicy". Running, because ps and syncer pods never exit on their
  // own: None would leave them holding resources after the trainers finish.
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::kRunning;
  std::optional<SchedulingPolicySpec> scheduling_policy;  // "schedulingPolicy".
  bool operator==(const RunPolicySpec&) const = default;
};

// Transport security (docs/security.md). The paths are where the processes
// read the files: in pods, where the operator mounts the Secrets.
inline constexpr std::string_view kTlsMountPath = "/etc/shadowsync/tls";
inline constexpr std::string_view kAuthMountPath = "/etc/shadowsync/auth";

// Mutual TLS on every gRPC link: each process presents cert_file (as server
// and as client) and trusts peers signed by ca_file.
struct TlsSpec {
  std::string ca_file = "/etc/shadowsync/tls/ca.crt";     // "caFile".
  std::string cert_file = "/etc/shadowsync/tls/tls.crt";  // "certFile".
  std::string key_file = "/etc/shadowsync/tls/tls.key";   // "keyFile".
  // "serverName". The name clients check the servers' certificate for
  // (a DNS SAN); "" = the host each client dials.
  std::string server_name = "shadowsync";
  // "secretName". Kubernetes: the Secret (ca.crt, tls.crt, tls.key) the
  // operator mounts read-only at kTlsMountPath; "" = none mounted.
  std::string secret_name;
  bool operator==(const TlsSpec&) const = default;
};

// A shared bearer token on every gRPC call, checked by parameter servers
// and syncers.
struct AuthTokenSpec {
  std::string file = "/etc/shadowsync/auth/token";
  // "secretName". Kubernetes: the Secret (key `token`) the operator mounts
  // read-only at kAuthMountPath; "" = none mounted.
  std::string secret_name;
  bool operator==(const AuthTokenSpec&) const = default;
};

struct SecuritySpec {
  std::optional<TlsSpec> tls;               // Absent: plaintext gRPC.
  std::optional<AuthTokenSpec> auth_token;  // "authToken". Absent: no token.
  bool operator==(const SecuritySpec&) const = default;
};

struct JobSpec {
  ModelSpec model;
  DataSpec data;
  TrainerSpec trainer;
  ParameterServerSpec parameter_server;  // "parameterServer".
  SyncerSpec syncer;
  SyncSpec sync;
  CheckpointSpec checkpoint;
  ExportSpec export_;  // "export".
  InitSpec init;
  RunPolicySpec run_policy;  // "runPolicy".
  SecuritySpec security;
  bool operator==(const JobSpec&) const = default;
};

// The whole object. apiVersion and kind are implied (kJobApiVersion,
// kJobKind); status belongs to the operator and is not modelled here.
struct ShadowSyncJob {
  JobMetadata metadata;
  JobSpec spec;
  bool operator==(const ShadowSyncJob&) const = default;
};

// Derived defaults, resolved against the current trainer count.
double EffectiveEasgdAlpha(const JobSpec& spec);
double EffectiveBlockMomentum(const JobSpec& spec);
double EffectiveBlockLearningRate(const JobSpec& spec);
double EffectivePsLearningRate(const JobSpec& spec);
double EffectiveAspLearningRateScale(const JobSpec& spec);
double EffectiveSharedLearningRateScale(const JobSpec& spec);
double EffectiveReplicaLearningRateScale(const JobSpec& spec);
int EffectiveAspBatchSize(const JobSpec& spec);

// ---------------------------------------------------------------------------
// Decoding. Every decoder rejects: wrong apiVersion or kind; unknown fields
// (with a "did you mean" hint); values of the wrong type (an integer field
// takes 3 or 3.0 or 1e7, never "3" or 2.5); unknown enum values; duplicate
// keys. null counts as absent. Decoding collects ALL problems and returns
// InvalidArgument with one line per problem, "<path>: <what>", prefixed
// with "<source>:<line>: " when the input was YAML. It does not run
// ValidateJob (range and cross-field checks), except that the criteoTables
// shorthand is range-checked here because it does not survive decoding.

// YAML (one document). Scalars resolve by the YAML 1.2 core schema:
// quoted scalars are strings; yes/no/on/off are strings, not booleans.
// A syntax error reads "<source>:<line>:<col>: YAML syntax error: <reason>".
absl::StatusOr<ShadowSyncJob> ParseJobYaml(std::string_view text,
                                           std::string_view source_name = "<yaml>");

// JSON text. A syntax error reads "<source>:<line>:<col>: JSON syntax error: ...".
absl::StatusOr<ShadowSyncJob> ParseJobJson(std::string_view text,
                                           std::string_view source_name = "<json>");

// An already-parsed object, e.g. from the API server (status is ignored).
// YAML and JSON text both end up here: this is the one decoding code path.
absl::StatusOr<ShadowSyncJob> JobFromJson(const nlohmann::json& object);

// Reads `path` (JSON if it ends in ".json", YAML otherwise), decodes it and
// runs ValidateJob, prefixing validation problems with "<path>:<line>: "
// where the field appears in the file. Returns NotFound if the file cannot
// be read, InvalidArgument for any problem.
absl::StatusOr<ShadowSyncJob> LoadJobFile(const std::string& path);

// Range checks from the field table plus cross-field rules (names, Criteo
// layout, slots vs servers, per-algorithm rules for the selected algorithm).
// Returns OK or InvalidArgument listing ALL problems, one per line in field
// order, each "<path>: <what>, got <value>", e.g.
// "spec.trainer.replicas: must be >= 1, got 0".
absl::Status ValidateJob(const ShadowSyncJob& job);

// ---------------------------------------------------------------------------
// Encoding and generated artefacts.

// The full object (apiVersion, kind, metadata, spec) with every default made
// explicit; JobFromJson(JobToJson(job)) == job. For the operator's ConfigMap
// and for run reports.
nlohmann::json JobToJson(const ShadowSyncJob& job);

// One log line of the settings that matter, flags style:
// "job=quickstart algorithm=shadow-easgd alpha=0.45 trainers=2 threads=2 ...".
std::string JobSummary(const ShadowSyncJob& job);

// The OpenAPI v3 structural schema of `spec`, for the CRD's
// openAPIV3Schema.properties.spec: types, formats, minimum/maximum, enums,
// defaults (except derived ones and `tables`, which conflicts with the
// criteoTables shorthand), descriptions; pod templates as their allow-list.
// The cross-field rules are added as CEL by the CRD (operator/crd.cc).
nlohmann::json JobSpecOpenApiSchema();

// The field reference in Markdown (the generated part of docs/job-spec.md).
std::string JobSpecReferenceMarkdown();

// Every documented field path, e.g. "spec.trainer.replicas",
// "spec.model.tables[].hashBuckets", in table order.
std::vector<std::string> JobFieldPaths();

// DS-Sync's butterfly shape rule (worker/sync/ds_sync.h), shared with job
// validation.

// The smallest m with g^m >= n. REQUIRES: g >= 2, n >= 1.
int DsSyncButterflyRounds(int n, int g);

// The butterfly's digit radices r_0 = g, r_1, ..., r_{m-1} (non-increasing
// after r_0; 1s pad when fewer factors suffice), or INVALID_ARGUMENT naming
// sync.dsSync.schedule.
absl::StatusOr<std::vector<int>> DsSyncButterflyRadices(int n, int g);

}  // namespace shadowsync

#endif  // SHADOWSYNC_JOBSPEC_JOB_SPEC_H_
