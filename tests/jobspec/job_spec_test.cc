#include "jobspec/job_spec.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/json_schema.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

using ::shadowsync::testing::ReadFile;
using ::shadowsync::testing::ScratchDir;
using ::shadowsync::testing::SourcePath;
using ::shadowsync::testing::StatusIs;
using ::shadowsync::testing::WalkSchema;
using ::shadowsync::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using json = nlohmann::json;

constexpr char kHeader[] = R"(apiVersion: shadowsync.io/v1alpha1
kind: ShadowSyncJob
metadata:
  name: demo
)";

// A spec that sets almost every field away from its default, in YAML and as
// the equivalent JSON.
constexpr char kFullYaml[] = R"(apiVersion: shadowsync.io/v1alpha1
kind: ShadowSyncJob
metadata:
  name: full-job
  namespace: ml
  labels: {team: ads, "app.kubernetes.io/name": shadowsync}
  annotations:
    note: "quoted: yes"
spec:
  model:
    denseFeatures: 13
    embeddingDim: 8
    bottomMlp: [128, 32]
    topMlp: []
    criteoTables: {hashBuckets: 5000}
  data:
    format: criteo-tsv
    paths: [/data/day0.tsv.gz, "/data/day1.tsv"]
    evalPaths: [/data/eval.tsv]
    synthetic: {examples: 1e7, evalExamples: 0, seed: 7}
  trainer:
    replicas: 4
    threads: 8
    batchSize: 64
    learningRate: 0.01
    optimizer: sgd
    straggler: {count: 1, delayMs: 30, jitterMs: 5}
    template:
      spec:
        containers:
          - name: trainer
            image: "shadowsync:1.0"
            ports: [{containerPort: 8080}]
            env: [{name: FLAG, value: "true"}]
  parameterServer:
    replicas: 3
    slots: 1024
    optimizer: sgd
    learningRate: 0.1
    cacheBytes: 256Mi
    admission: {minCount: 2, probability: 0.5}
    eviction: {ttlSeconds: 3600, maxRows: 1000000}
    storage: {size: 5Gi, storageClassName: fast-ssd}
  syncer:
    replicas: 2
  sync:
    algorithm: ds-sync
    interval: 5
    minIntervalMs: 20
    warmupSteps: 4
    finalAverage: false
    applyMode: overwrite
    replicaLearningRateScale: 0.6
    easgd: {alpha: 0.2}
    bmuf: {blockMomentum: 0.75, blockLearningRate: 1.5, nesterov: false}
    dsSync: {groupSize: 2, schedule: butterfly, seed: 3}
    syncSwitch: {policy: online, switchFraction: 0.05, stragglerFactor: 3, windowSteps: 50}
    psPlus: {lrModulation: exponential, gamma: 0.5}
    ssp: {staleness: 0}
  checkpoint: {path: /ckpt, intervalSeconds: 60}
  export: {path: /exports, intervalSeconds: 900, keep: 2, withOptimizerState: false}
  init: {fromModel: /exports/model-000003}
  runPolicy:
    backoffLimit: 0
    activeDeadlineSeconds: 7200
    ttlSecondsAfterFinished: 600
    suspend: true
    cleanPodPolicy: All
)";

constexpr char kFullJson[] = R"({
  "apiVersion": "shadowsync.io/v1alpha1",
  "kind": "ShadowSyncJob",
  "metadata": {"name": "full-job", "namespace": "ml",
               "labels": {"team": "ads", "app.kubernetes.io/name": "shadowsync"},
               "annotations": {"note": "quoted: yes"}},
  "spec": {
    "model": {"denseFeatures": 13, "embeddingDim": 8, "bottomMlp": [128, 32], "topMlp": [],
              "criteoTables": {"hashBuckets": 5000}},
    "data": {"format": "criteo-tsv", "paths": ["/data/day0.tsv.gz", "/data/day1.tsv"],
             "evalPaths": ["/data/eval.tsv"],
             "synthetic": {"examples": 10000000, "evalExamples": 0, "seed": 7}},
    "trainer": {"replicas": 4, "threads": 8, "batchSize": 64, "learningRate": 0.01,
                "optimizer": "sgd", "straggler": {"count": 1, "delayMs": 30, "jitterMs": 5},
                "template": {"spec": {"containers": [{"name": "trainer", "image": "shadowsync:1.0",
                    "ports": [{"containerPort": 8080}], "env": [{"name": "FLAG", "value": "true"}]}]}}},
    "parameterServer": {"replicas": 3, "slots": 1024, "optimizer": "sgd", "learningRate": 0.1,
                        "cacheBytes": "256Mi", "admission": {"minCount": 2, "probability": 0.5},
                        "eviction": {"ttlSeconds": 3600, "maxRows": 1000000},
                        "storage": {"size": "5Gi", "storageClassName": "fast-ssd"}},
    "syncer": {"replicas": 2},
    "sync": {"algorithm": "ds-sync", "interval": 5, "minIntervalMs": 20, "warmupSteps": 4,
             "finalAverage": false, "applyMode": "overwrite", "replicaLearningRateScale": 0.6,
             "easgd": {"alpha": 0.2},
             "bmuf": {"blockMomentum": 0.75, "blockLearningRate": 1.5, "nesterov": false},
             "dsSync": {"groupSize": 2, "schedule": "butterfly", "seed": 3},
             "syncSwitch": {"policy": "online", "switchFraction": 0.05, "stragglerFactor": 3,
                            "windowSteps": 50},
             "psPlus": {"lrModulation": "exponential", "gamma": 0.5},
             "ssp": {"staleness": 0}},
    "checkpoint": {"path": "/ckpt", "intervalSeconds": 60},
    "export": {"path": "/exports", "intervalSeconds": 900, "keep": 2, "withOptimizerState": false},
    "init": {"fromModel": "/exports/model-000003"},
    "runPolicy": {"backoffLimit": 0, "activeDeadlineSeconds": 7200,
                  "ttlSecondsAfterFinished": 600, "suspend": true, "cleanPodPolicy": "All"}
  }
})";

// A status message as a std::string, so failures print readably.
template <typename T>
std::string Msg(const T& status_or) {
  return std::string(::shadowsync::testing::AsStatus(status_or).message());
}

class JobSpecTest : public ::testing::Test {
 protected:
  static ShadowSyncJob DefaultJob() {
    ShadowSyncJob job;
    job.metadata.name = "demo";
    return job;
  }

  // Parses kHeader + `spec_yaml` (which starts at line 5) as "job.yaml".
  static absl::StatusOr<ShadowSyncJob> ParseSpec(const std::string& spec_yaml) {
    return ParseJobYaml(std::string(kHeader) + spec_yaml, "job.yaml");
  }

  // The message ValidateJob gives for DefaultJob() changed by `mutate`.
  static std::string ValidationError(const std::function<void(ShadowSyncJob&)>& mutate) {
    ShadowSyncJob job = DefaultJob();
    mutate(job);
    absl::Status status = ValidateJob(job);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, ""));
    return std::string(status.message());
  }
};

// --- Defaults -----------------------------------------------------------------

TEST_F(JobSpecTest, MinimalSpecGetsDocumentedDefaults) {
  absl::StatusOr<ShadowSyncJob> job = ParseSpec("spec: {}\n");
  SS_ASSERT_OK(job);
  EXPECT_EQ(*job, DefaultJob());

  const JobSpec& s = job->spec;
  EXPECT_EQ(s.model.dense_features, 13);
  EXPECT_EQ(s.model.embedding_dim, 16);
  EXPECT_THAT(s.model.bottom_mlp, ElementsAre(512, 256, 64));
  EXPECT_THAT(s.model.top_mlp, ElementsAre(512, 256));
  ASSERT_EQ(s.model.tables.size(), 26u);
  EXPECT_EQ(s.model.tables.front().name, "C1");
  EXPECT_EQ(s.model.tables.back().name, "C26");
  EXPECT_EQ(s.model.tables[7].hash_buckets, 1'000'000);
  EXPECT_EQ(s.data.format, DataFormat::kSynthetic);
  EXPECT_EQ(s.trainer.replicas, 2);
  EXPECT_EQ(s.trainer.threads, 2);
  EXPECT_EQ(s.trainer.batch_size, 256);
  EXPECT_DOUBLE_EQ(s.trainer.learning_rate, 0.02);
  EXPECT_EQ(s.trainer.optimizer, Optimizer::kAdagrad);
  EXPECT_FALSE(s.trainer.straggler.has_value());
  EXPECT_TRUE(s.trainer.pod_template.is_null());
  EXPECT_EQ(s.parameter_server.replicas, 2);
  EXPECT_EQ(s.parameter_server.slots, 4096);
  EXPECT_EQ(s.parameter_server.cache_bytes.value, int64_t{1} << 30);
  EXPECT_EQ(s.parameter_server.cache_bytes.text, "1Gi");
  EXPECT_EQ(s.syncer.replicas, 1);
  EXPECT_EQ(s.sync.algorithm, SyncAlgorithm::kShadowEasgd);
  EXPECT_EQ(s.sync.apply_mode, SyncApplyMode::kDelta);
  EXPECT_DOUBLE_EQ(EffectiveEasgdAlpha(s), 0.45);  // 0.9 / 2 trainers.
  EXPECT_DOUBLE_EQ(EffectiveBlockMomentum(s), 0.5);
  EXPECT_DOUBLE_EQ(EffectivePsLearningRate(s), 0.02);
  EXPECT_DOUBLE_EQ(s.sync.sync_switch.switch_fraction, 0.125);
  EXPECT_DOUBLE_EQ(s.sync.sync_switch.straggler_factor, 2.0);
  EXPECT_EQ(s.run_policy.clean_pod_policy, CleanPodPolicy::kRunning);
  SS_EXPECT_OK(ValidateJob(*job));
}

TEST_F(JobSpecTest, QuantityDefaultsMatchTheirParsedText) {
  ShadowSyncJob job;
  for (const Quantity& q :
       {job.spec.parameter_server.cache_bytes, job.spec.parameter_server.storage.size}) {
    absl::StatusOr<Quantity> parsed = ParseQuantity(q.text);
    SS_ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, q);
  }
}

TEST_F(JobSpecTest, NullIsTheSameAsAbsent) {
  absl::StatusOr<ShadowSyncJob> job = ParseSpec("spec:\n  trainer:\n    replicas: null\n  sync:\n");
  SS_ASSERT_OK(job);
  EXPECT_EQ(*job, DefaultJob());
}

TEST_F(JobSpecTest, DerivedDefaultsFollowTheTrainerCount) {
  ShadowSyncJob job = DefaultJob();
  job.spec.trainer.replicas = 9;
  EXPECT_DOUBLE_EQ(EffectiveEasgdAlpha(job.spec), 0.1);
  EXPECT_DOUBLE_EQ(EffectiveBlockMomentum(job.spec), 0.5);  // Not derived: docs/sync.md.
  job.spec.sync.easgd.alpha = 0.3;
  job.spec.parameter_server.learning_rate = 0.2;
  EXPECT_DOUBLE_EQ(EffectiveEasgdAlpha(job.spec), 0.3);
  EXPECT_DOUBLE_EQ(EffectivePsLearningRate(job.spec), 0.2);
}

// sync-switch's phase settings (sync-algorithms.md §5.3: BSP at lr 0.8 with
// global batch 8 x 128, then ASP at lr 0.1 with batch 128).
TEST_F(JobSpecTest, SyncSwitchPhaseSettingsDecodeAndDefault) {
  absl::StatusOr<ShadowSyncJob> job = ParseSpec(
      "spec:\n  trainer: {replicas: 8, batchSize: 128, learningRate: 0.8}\n  sync:\n"
      "    algorithm: sync-switch\n"
      "    syncSwitch: {switchStep: 400, aspLearningRateScale: 0.25, aspBatchSize: 64}\n");
  SS_ASSERT_OK(job);
  EXPECT_EQ(job->spec.sync.sync_switch.switch_step, 400);
  EXPECT_DOUBLE_EQ(EffectiveAspLearningRateScale(job->spec), 0.25);
  EXPECT_EQ(EffectiveAspBatchSize(job->spec), 64);
  EXPECT_THAT(JobSummary(*job),
              HasSubstr("algorithm=sync-switch policy=offline switch_step=400 asp_lr_scale=0.25"));

  ShadowSyncJob d = DefaultJob();
  d.spec.trainer.replicas = 8;
  d.spec.trainer.batch_size = 128;
  EXPECT_DOUBLE_EQ(0.8 * EffectiveAspLearningRateScale(d.spec), 0.1);
  EXPECT_EQ(EffectiveAspBatchSize(d.spec), 128);
  EXPECT_THAT(ValidationError([](ShadowSyncJob& j) { j.spec.sync.sync_switch.asp_batch_size = 0; }),
              HasSubstr("spec.sync.syncSwitch.aspBatchSize: must be >= 1, got 0"));
  EXPECT_THAT(ValidationError(
                  [](ShadowSyncJob& j) { j.spec.sync.sync_switch.asp_learning_rate_scale = 0; }),
              HasSubstr("spec.sync.syncSwitch.aspLearningRateScale: must be > 0, got 0"));
  EXPECT_THAT(ValidationError([](ShadowSyncJob& j) { j.spec.sync.sync_switch.switch_step = -1; }),
              HasSubstr("spec.sync.syncSwitch.switchStep: must be >= 0, got -1"));
}

// shadow-* and fg-*: 1/sqrt(N) with Adagrad (each replica's accumulator holds about
// 1/N of a single trainer's), 1 with SGD; an explicit value wins.
TEST_F(JobSpecTest, ReplicaLearningRateScaleDefaultsByOptimizerAndTrainers) {
  ShadowSyncJob j = DefaultJob();
  j.spec.trainer.replicas = 4;
  EXPECT_DOUBLE_EQ(EffectiveReplicaLearningRateScale(j.spec), 0.5);
  EXPECT_THAT(JobSummary(j), HasSubstr("final_average=true lr_scale=0.5 trainers=4"));
  j.spec.trainer.replicas = 1;
  EXPECT_DOUBLE_EQ(EffectiveReplicaLearningRateScale(j.spec), 1.0);
  j.spec.trainer.replicas = 4;
  j.spec.trainer.optimizer = Optimizer::kSgd;
  EXPECT_DOUBLE_EQ(EffectiveReplicaLearningRateScale(j.spec), 1.0);
  j.spec.sync.replica_learning_rate_scale = 0.7;
  EXPECT_DOUBLE_EQ(EffectiveReplicaLearningRateScale(j.spec), 0.7);
  EXPECT_THAT(
      ValidationError([](ShadowSyncJob& j) { j.spec.sync.replica_learning_rate_scale = 0; }),
      HasSubstr("spec.sync.replicaLearningRateScale: must be > 0, got 0"));
}

// --- One decoding path, YAML and JSON ------------------------------------------

TEST_F(JobSpecTest, YamlAndJsonGiveEqualJobs) {
  absl::StatusOr<ShadowSyncJob> from_yaml = ParseJobYaml(kFullYaml, "full.yaml");
  absl::StatusOr<ShadowSyncJob> from_json = ParseJobJson(kFullJson, "full.json");
  SS_ASSERT_OK(from_yaml);
  SS_ASSERT_OK(from_json);
  EXPECT_EQ(*from_yaml, *from_json);
  EXPECT_NE(*from_yaml, ShadowSyncJob{});
  SS_EXPECT_OK(ValidateJob(*from_yaml));

  const JobSpec& s = from_yaml->spec;
  EXPECT_EQ(from_yaml->metadata.labels.at("app.kubernetes.io/name"), "shadowsync");
  EXPECT_EQ(from_yaml->metadata.annotations.at("note"), "quoted: yes");
  EXPECT_EQ(s.data.synthetic.examples, 10'000'000);  // 1e7 is an integer.
  EXPECT_EQ(s.trainer.straggler, (StragglerSpec{1, 30, 5}));
  EXPECT_EQ(s.parameter_server.cache_bytes.value, 256 << 20);
  EXPECT_EQ(s.sync.algorithm, SyncAlgorithm::kDsSync);
  EXPECT_EQ(s.sync.ds_sync.schedule, DsSyncSchedule::kButterfly);
  EXPECT_EQ(s.sync.sync_switch.policy, SyncSwitchPolicy::kOnline);
  EXPECT_DOUBLE_EQ(s.sync.sync_switch.straggler_factor, 3.0);  // An integer for a double field.
  EXPECT_EQ(s.sync.ps_plus.lr_modulation, StalenessLrRule::kExponential);
  EXPECT_EQ(s.sync.bmuf.block_momentum, 0.75);
  EXPECT_EQ(s.sync.replica_learning_rate_scale, 0.6);
  EXPECT_EQ(s.run_policy.active_deadline_seconds, 7200);
  EXPECT_EQ(s.run_policy.clean_pod_policy, CleanPodPolicy::kAll);
  // Pod templates keep YAML's scalar types: ints stay ints, quoted stay strings.
  const json& container = s.trainer.pod_template["spec"]["containers"][0];
  EXPECT_EQ(container["ports"][0]["containerPort"], json(8080));
  EXPECT_EQ(container["env"][0]["value"], json("true"));
  EXPECT_EQ(container["image"], json("shadowsync:1.0"));
}

TEST_F(JobSpecTest, RoundTripThroughJsonIsLossless) {
  const std::string minimal = std::string(kHeader) + "spec: {}\n";
  for (const char* yaml : {kFullYaml, minimal.c_str()}) {
    absl::StatusOr<ShadowSyncJob> job = ParseJobYaml(yaml);
    SS_ASSERT_OK(job);
    json encoded = JobToJson(*job);
    absl::StatusOr<ShadowSyncJob> decoded = JobFromJson(encoded);
    SS_ASSERT_OK(decoded);
    EXPECT_EQ(*decoded, *job);
    absl::StatusOr<ShadowSyncJob> reparsed = ParseJobJson(encoded.dump(2));
    SS_ASSERT_OK(reparsed);
    EXPECT_EQ(*reparsed, *job);
    EXPECT_EQ(JobToJson(*reparsed), encoded);
  }
}

TEST_F(JobSpecTest, EncodingMakesEveryDefaultExplicit) {
  json j = JobToJson(DefaultJob());
  EXPECT_EQ(j["apiVersion"], "shadowsync.io/v1alpha1");
  EXPECT_EQ(j["kind"], "ShadowSyncJob");
  EXPECT_EQ(j["metadata"]["name"], "demo");
  EXPECT_EQ(j["spec"]["trainer"]["replicas"], 2);
  EXPECT_EQ(j["spec"]["sync"]["algorithm"], "shadow-easgd");
  EXPECT_EQ(j["spec"]["parameterServer"]["cacheBytes"], "1Gi");
  EXPECT_EQ(j["spec"]["model"]["tables"].size(), 26u);
  EXPECT_EQ(j["spec"]["model"]["tables"][25],
            (json{{"name", "C26"}, {"hashBuckets", 1000000}, {"pooling", "sum"}}));
  EXPECT_EQ(j["spec"]["model"]["interaction"], "dot");
  EXPECT_FALSE(j["spec"]["model"].contains("criteoTables"));  // Only ever expanded.
  EXPECT_FALSE(j["spec"]["trainer"].contains("straggler"));   // Unset optionals stay absent.
  EXPECT_FALSE(j["spec"]["trainer"].contains("template"));
  EXPECT_FALSE(j["spec"]["sync"]["easgd"].contains("alpha"));  // Derived, so not frozen.
}

TEST_F(JobSpecTest, OperatorObjectWithServerFieldsDecodes) {
  json object = JobToJson(DefaultJob());
  object["metadata"]["uid"] = "0b6f...";
  object["metadata"]["resourceVersion"] = "12345";
  object["metadata"]["generation"] = 3;
  object["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z";
  object["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  object["status"] = {{"phase", "Running"}};
  absl::StatusOr<ShadowSyncJob> job = JobFromJson(object);
  SS_ASSERT_OK(job);
  EXPECT_EQ(*job, DefaultJob());
}

// --- Shorthand -------------------------------------------------------------------

TEST_F(JobSpecTest, CriteoTablesShorthandExpands) {
  absl::StatusOr<ShadowSyncJob> job =
      ParseSpec("spec:\n  model:\n    criteoTables: {hashBuckets: 5000}\n");
  SS_ASSERT_OK(job);
  const std::vector<TableSpec>& tables = job->spec.model.tables;
  ASSERT_EQ(tables.size(), 26u);
  for (int i = 0; i < 26; ++i) {
    EXPECT_EQ(tables[i], (TableSpec{"C" + std::to_string(i + 1), 5000}));
  }
  EXPECT_EQ(tables, CriteoTables(5000));
}

TEST_F(JobSpecTest, CriteoTablesShorthandDefaultsItsBuckets) {
  absl::StatusOr<ShadowSyncJob> job = ParseSpec("spec:\n  model:\n    criteoTables: {}\n");
  SS_ASSERT_OK(job);
  EXPECT_EQ(job->spec.model.tables, CriteoTables(kDefaultHashBuckets));
}

TEST_F(JobSpecTest, CriteoTablesShorthandCannotBeCombinedWithTables) {
  EXPECT_EQ(Msg(ParseSpec("spec:\n"
                          "  model:\n"
                          "    tables: [{name: a, hashBuckets: 10}]\n"
                          "    criteoTables: {hashBuckets: 5000}\n")),
            "job.yaml:8: spec.model.criteoTables: cannot be combined with spec.model.tables; "
            "give one");
}

TEST_F(JobSpecTest, CriteoTablesShorthandIsRangeCheckedWhenRead) {
  EXPECT_EQ(Msg(ParseSpec("spec:\n  model:\n    criteoTables:\n      hashBuckets: 0\n")),
            "job.yaml:8: spec.model.criteoTables.hashBuckets: must be >= 1, got 0");
}

TEST_F(JobSpecTest, ExplicitTablesReplaceTheDefault) {
  absl::StatusOr<ShadowSyncJob> job = ParseSpec(
      "spec:\n  model:\n    tables:\n      - {name: user, hashBuckets: 10}\n"
      "      - name: item\n");
  SS_ASSERT_OK(job);
  EXPECT_THAT(job->spec.model.tables,
              ElementsAre(TableSpec{"user", 10}, TableSpec{"item", kDefaultHashBuckets}));
}

// --- Decoding errors ---------------------------------------------------------------

TEST_F(JobSpecTest, UnknownFieldNamesPathLineAndSuggestion) {
  absl::StatusOr<ShadowSyncJob> job = ParseSpec(
      "spec:\n"
      "  trainer:\n"
      "    replica: 3\n");
  EXPECT_THAT(job, StatusIs(absl::StatusCode::kInvalidArgument, ""));
  EXPECT_EQ(Msg(job),
            "job.yaml:7: spec.trainer.replica: unknown field (did you mean \"replicas\"?)");
}

TEST_F(JobSpecTest, UnknownFieldSuggestsAcrossCaseAndSnakeCase) {
  EXPECT_EQ(Msg(ParseSpec("spec:\n  trainer:\n    batch_size: 3\n")),
            "job.yaml:7: spec.trainer.batch_size: unknown field (did you mean \"batchSize\"?)");
  EXPECT_EQ(Msg(ParseSpec("spec:\n  ParameterServer: {}\n")),
            "job.yaml:6: spec.ParameterServer: unknown field (did you mean \"parameterServer\"?)");
}

TEST_F(JobSpecTest, UnknownFieldWithoutCloseMatchListsKnownFields) {
  EXPECT_EQ(Msg(ParseSpec("spec:\n  syncer:\n    zzz: 1\n")),
            "job.yaml:7: spec.syncer.zzz: unknown field; known fields: replicas, template");
}

TEST_F(JobSpecTest, UnknownMetadataAndTopLevelFieldsAreRejected) {
  EXPECT_EQ(Msg(ParseJobYaml(std::string(kHeader) + "  nmae: x\nspce: {}\n", "job.yaml")),
            "job.yaml:5: metadata.nmae: unknown field (did you mean \"name\"?)\n"
            "job.yaml:6: spce: unknown field (did you mean \"spec\"?)\n"
            "job.yaml: spec: required field is missing");
}

TEST_F(JobSpecTest, TypeErrorNamesPathAndLine) {
  EXPECT_EQ(Msg(ParseSpec("spec:\n"
                          "  trainer:\n"
                          "    threads: 4\n"
                          "    replicas: two\n")),
            "job.yaml:8: spec.trainer.replicas: expected an integer, got \"two\"");
}

// Found by fuzz_job_spec: shortening a long value cut a UTF-8 character in
// half, and quoting the half threw.
TEST_F(JobSpecTest, LongValuesAreShortenedOnCharacterBoundaries) {
  // 36 ASCII bytes, then "é" (2 bytes) straddling the 37-byte cut.
  const std::string value = std::string(36, 'a') + "\xC3\xA9" + "bbbbbbbb";
  EXPECT_EQ(Msg(ParseSpec("spec:\n  trainer:\n    replicas: \"" + value + "\"\n")),
            "job.yaml:7: spec.trainer.replicas: expected an integer, got \"" +
                std::string(36, 'a') + "...\"");
}

// Every input fuzz_job_spec once crashed on goes through what the fuzzer
// does without an exception: parse, validate, the JSON round trip, the
// summary. (invalid-utf8-in-name.yaml: metadata.name came out of the parser
// holding a byte that is not UTF-8, and quoting it in the validation message
// threw.)
TEST_F(JobSpecTest, FuzzRegressionsNeitherThrowNorCrash) {
  const std::filesystem::path dir = SourcePath("tests/fuzz/regressions/fuzz_job_spec");
  int inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++inputs;
    SCOPED_TRACE(entry.path().string());
    const std::string text = testing::ReadFile(entry.path().string());
    EXPECT_NO_THROW({
      absl::StatusOr<ShadowSyncJob> job = ParseJobYaml(text, "fuzz.yaml");
      if (job.ok() && ValidateJob(*job).ok()) {
        EXPECT_TRUE(JobFromJson(JobToJson(*job)).ok());
        (void)JobSummary(*job);
      }
    });
  }
  EXPECT_GE(inputs, 4);
}

TEST_F(JobSpecTest, TypeErrorsByKind) {
  struct Case {
    std::string spec;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"spec: {trainer: {replicas: \"2\"}}",  // Quoted scalars stay strings.
       "spec.trainer.replicas: expected an integer, got \"2\""},
      {"spec: {trainer: {replicas: 2.5}}", "spec.trainer.replicas: expected an integer, got 2.5"},
      {"spec: {trainer: {replicas: 1e10}}",
       "spec.trainer.replicas: expected an integer in [-2147483648, 2147483647], got 1e+10"},
      {"spec: {trainer: {learningRate: fast}}",
       "spec.trainer.learningRate: expected a finite number, got \"fast\""},
      {"spec: {trainer: {learningRate: .inf}}",
       "spec.trainer.learningRate: expected a finite number, got .inf"},
      {"spec: {runPolicy: {suspend: yes}}",  // YAML 1.2: yes is a string.
       "spec.runPolicy.suspend: expected a boolean (true or false), got \"yes\""},
      {"spec: {model: {bottomMlp: 5}}", "spec.model.bottomMlp: expected a list, got 5"},
      {"spec: {model: {bottomMlp: [64, x]}}",
       "spec.model.bottomMlp[1]: expected an integer, got \"x\""},
      {"spec: {trainer: {template: [1]}}", "spec.trainer.template: expected an object, got a list"},
      {"spec: {trainer: 3}", "spec.trainer: expected an object, got 3"},
      {"spec: {parameterServer: {cacheBytes: 1GB}}",
       "spec.parameterServer.cacheBytes: expected a Kubernetes quantity such as \"1Gi\" or "
       "\"500M\", got \"1GB\""},
      {"spec: {model: {tables: [{hashBuckets: 3}]}}",
       "spec.model.tables[0].name: required field is missing"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec);
    absl::StatusOr<ShadowSyncJob> job = ParseSpec(c.spec + "\n");
    EXPECT_EQ(Msg(job), "job.yaml:5: " + c.message);
  }
}

// As the CRD requires it: a job without a spec is refused, one with an empty
// spec takes every default.
TEST_F(JobSpecTest, ASpecIsRequiredAndMayBeEmpty) {
  EXPECT_EQ(Msg(ParseJobYaml(kHeader, "job.yaml")), "job.yaml: spec: required field is missing");
  absl::StatusOr<ShadowSyncJob> empty = ParseSpec("spec: {}\n");
  SS_ASSERT_OK(empty);
  EXPECT_EQ(empty->spec, JobSpec{});
}

TEST_F(JobSpecTest, UnknownEnumValueSuggestsAndListsValues) {
  EXPECT_EQ(Msg(ParseSpec("spec:\n  sync:\n    algorithm: shadow-easgdd\n")),
            "job.yaml:7: spec.sync.algorithm: unknown value \"shadow-easgdd\" (did you mean "
            "\"shadow-easgd\"?); expected one of \"none\", \"shadow-easgd\", \"shadow-ma\", "
            "\"shadow-bmuf\", \"fg-easgd\", \"fg-ma\", \"fg-bmuf\", \"bsp\", \"asp\", \"ssp\", "
            "\"ds-sync\", \"sync-switch\", \"ps-plus\"");
}

TEST_F(JobSpecTest, LabelValuesMustBeStrings) {
  EXPECT_EQ(
      Msg(ParseJobYaml(std::string(kHeader) + "  labels: {version: 1}\nspec: {}\n", "job.yaml")),
      "job.yaml:5: metadata.labels.version: expected a string, got 1");
}

TEST_F(JobSpecTest, AllDecodingProblemsAreReportedInLineOrder) {
  EXPECT_EQ(Msg(ParseSpec("spec:\n"
                          "  trainer:\n"
                          "    replicas: two\n"
                          "    thread: 4\n"
                          "  sync: {algorithm: fast}\n")),
            "job.yaml:7: spec.trainer.replicas: expected an integer, got \"two\"\n"
            "job.yaml:8: spec.trainer.thread: unknown field (did you mean \"threads\"?)\n"
            "job.yaml:9: spec.sync.algorithm: unknown value \"fast\"; expected one of \"none\", "
            "\"shadow-easgd\", \"shadow-ma\", \"shadow-bmuf\", \"fg-easgd\", \"fg-ma\", "
            "\"fg-bmuf\", \"bsp\", \"asp\", \"ssp\", \"ds-sync\", \"sync-switch\", \"ps-plus\"");
}

TEST_F(JobSpecTest, DuplicateYamlKeyIsRejected) {
  EXPECT_EQ(Msg(ParseSpec("spec:\n"
                          "  trainer:\n"
                          "    replicas: 2\n"
                          "    replicas: 3\n")),
            "job.yaml:8: spec.trainer.replicas: duplicate key (first given on line 7)");
}

TEST_F(JobSpecTest, YamlSyntaxErrorHasLineAndColumn) {
  absl::StatusOr<ShadowSyncJob> job = ParseSpec(
      "spec:\n"
      "  trainer: {replicas: 2\n"
      "  sync: {}\n");
  EXPECT_THAT(job, StatusIs(absl::StatusCode::kInvalidArgument, "YAML syntax error"));
  EXPECT_THAT(std::string(job.status().message()), StartsWith("job.yaml:7:7: YAML syntax error: "));

  job = ParseJobYaml("a: b: c\n", "bad.yaml");
  EXPECT_EQ(Msg(job), "bad.yaml:1:5: YAML syntax error: illegal map value");
}

// Found by fuzz_job_spec: a stray byte in the name made ValidateJob's
// message formatting throw (JSON cannot hold it) and ended the process.
TEST_F(JobSpecTest, YamlThatIsNotUtf8IsRefusedWithItsPosition) {
  EXPECT_EQ(Msg(ParseJobYaml("apiVersion: shadowsync.io/v1alpha1\nkind: ShadowSyncJob\n"
                             "metadata: {name: ab\xE9m}\n",
                             "job.yaml")),
            "job.yaml:3:20: not valid UTF-8 (a YAML file must be UTF-8)");
  // Overlong, surrogate and truncated sequences too; real UTF-8 passes.
  for (const char* bad : {"a: \xC0\xAF\n", "a: \xED\xA0\x80\n", "a: \xF0\x9F\x98\n"}) {
    EXPECT_THAT(ParseJobYaml(bad, "x.yaml"),
                StatusIs(absl::StatusCode::kInvalidArgument, "x.yaml:1:4: not valid UTF-8"));
  }
  EXPECT_THAT(ParseJobYaml("a: \"caf\xC3\xA9 \xF0\x9F\x98\x80\"\n", "x.yaml"),
              Not(StatusIs(absl::StatusCode::kInvalidArgument, "UTF-8")));
}

// Found by fuzz_job_spec: yaml-cpp's LoadAll allocated without bound on
// these; they are now refused at once.
TEST_F(JobSpecTest, YamlThatNeverEndsIsRefused) {
  for (const char* text : {",*\n", ",*#\n\n# x"}) {
    EXPECT_THAT(ParseJobYaml(text, "x.yaml"),
                StatusIs(absl::StatusCode::kInvalidArgument, "x.yaml: expected exactly one YAML"));
  }
}

TEST_F(JobSpecTest, ExactlyOneYamlDocumentIsAccepted) {
  EXPECT_EQ(Msg(ParseJobYaml(std::string(kHeader) + "---\n" + kHeader, "job.yaml")),
            "job.yaml: expected exactly one YAML document (one ShadowSyncJob), found 2");
  EXPECT_EQ(Msg(ParseJobYaml("# nothing\n", "job.yaml")),
            "job.yaml: expected exactly one YAML document (one ShadowSyncJob), found 0");
  EXPECT_EQ(Msg(ParseJobYaml("[1, 2]\n", "job.yaml")),
            "job.yaml: expected an object with apiVersion, kind, metadata and spec, got a list");
}

TEST_F(JobSpecTest, WrongApiVersionOrKindIsRejected) {
  EXPECT_EQ(
      Msg(ParseJobYaml("apiVersion: shadowsync.io/v1\nkind: ShadowSyncJob\n", "job.yaml")),
      "job.yaml:1: apiVersion: expected \"shadowsync.io/v1alpha1\", got \"shadowsync.io/v1\"");
  // Another kind's fields are not reported: they would only be noise.
  EXPECT_EQ(Msg(ParseJobYaml(
                "apiVersion: shadowsync.io/v1alpha1\nkind: TFJob\nspec: {tfReplicaSpecs: {}}\n",
                "job.yaml")),
            "job.yaml:2: kind: expected \"ShadowSyncJob\", got \"TFJob\"");
  EXPECT_EQ(Msg(JobFromJson(json{{"kind", "ShadowSyncJob"}})),
            "apiVersion: required field is missing; expected \"shadowsync.io/v1alpha1\"");
}

TEST_F(JobSpecTest, JsonSyntaxErrorHasLineAndColumn) {
  absl::StatusOr<ShadowSyncJob> job = ParseJobJson(
      "{\n"
      "  \"apiVersion\": \"shadowsync.io/v1alpha1\",\n"
      "  \"kind\" \"ShadowSyncJob\"\n"
      "}\n",
      "job.json");
  EXPECT_THAT(job, StatusIs(absl::StatusCode::kInvalidArgument, "JSON syntax error"));
  EXPECT_THAT(std::string(job.status().message()),
              StartsWith("job.json:3:24: JSON syntax error: "));
}

TEST_F(JobSpecTest, JsonDuplicateKeyIsRejected) {
  json base = JobToJson(DefaultJob());
  std::string text = base.dump();
  // Insert a second "replicas" into spec.trainer.
  const std::string needle = "\"replicas\":2";
  size_t at = text.find(needle, text.find("\"trainer\""));
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"replicas\":5,");
  EXPECT_EQ(Msg(ParseJobJson(text, "job.json")), "job.json: spec.trainer.replicas: duplicate key");
}

TEST_F(JobSpecTest, JsonErrorsNameThePath) {
  json object = JobToJson(DefaultJob());
  object["spec"]["trainer"]["replicas"] = "two";
  object["spec"]["model"]["tables"][3]["hashBuckets"] = true;
  object["spec"]["sync"]["ssp"]["stalness"] = 3;
  EXPECT_EQ(Msg(JobFromJson(object)),
            "spec.model.tables[3].hashBuckets: expected an integer, got true\n"
            "spec.trainer.replicas: expected an integer, got \"two\"\n"
            "spec.sync.ssp.stalness: unknown field (did you mean \"staleness\"?)");
}

// --- Validation --------------------------------------------------------------------

TEST_F(JobSpecTest, DefaultJobIsValid) { SS_EXPECT_OK(ValidateJob(DefaultJob())); }

TEST_F(JobSpecTest, ValidationMessagesAreExact) {
  struct Case {
    std::function<void(ShadowSyncJob&)> mutate;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ShadowSyncJob& j) { j.spec.trainer.replicas = 0; },
       "spec.trainer.replicas: must be >= 1, got 0"},
      {[](ShadowSyncJob& j) { j.spec.trainer.threads = 0; },
       "spec.trainer.threads: must be in [1, 1024], got 0"},
      {[](ShadowSyncJob& j) { j.spec.trainer.batch_size = 0; },
       "spec.trainer.batchSize: must be in [1, 1048576], got 0"},
      {[](ShadowSyncJob& j) { j.spec.trainer.learning_rate = 0; },
       "spec.trainer.learningRate: must be > 0, got 0"},
      {[](ShadowSyncJob& j) {
         j.spec.trainer.learning_rate = std::numeric_limits<double>::quiet_NaN();
       },
       "spec.trainer.learningRate: must be > 0, got nan"},
      {[](ShadowSyncJob& j) { j.spec.model.tables[3].hash_buckets = 0; },
       "spec.model.tables[3].hashBuckets: must be >= 1, got 0"},
      {[](ShadowSyncJob& j) { j.spec.model.embedding_dim = 0; },
       "spec.model.embeddingDim: must be in [1, 4096], got 0"},
      {[](ShadowSyncJob& j) {
         j.spec.model.bottom_mlp = {512, 0};
       },
       "spec.model.bottomMlp[1]: must be >= 1, got 0"},
      {[](ShadowSyncJob& j) { j.spec.model.dense_features = 12; },
       "spec.model.denseFeatures: must be 13, the dense columns of the Criteo layout both data "
       "formats produce, got 12"},
      {[](ShadowSyncJob& j) { j.spec.model.tables.resize(3); },
       "spec.model.tables: must list 26 tables, one per categorical column of the Criteo "
       "layout, got 3"},
      {[](ShadowSyncJob& j) { j.spec.model.tables[5].name = "C1"; },
       "spec.model.tables[5].name: duplicate table name \"C1\" (also spec.model.tables[0])"},
      {[](ShadowSyncJob& j) { j.spec.parameter_server.replicas = 0; },
       "spec.parameterServer.replicas: must be >= 1, got 0"},
      {[](ShadowSyncJob& j) { j.spec.parameter_server.slots = 0; },
       "spec.parameterServer.slots: must be in [1, 1048576], got 0"},
      {[](ShadowSyncJob& j) { j.spec.parameter_server.slots = (1 << 20) + 1; },
       "spec.parameterServer.slots: must be in [1, 1048576], got 1048577"},
      {[](ShadowSyncJob& j) {
         j.spec.parameter_server.replicas = 4;
         j.spec.parameter_server.slots = 2;
       },
       "spec.parameterServer.slots: must be >= spec.parameterServer.replicas (4) so every "
       "server owns a slot, got 2"},
      {[](ShadowSyncJob& j) { j.spec.parameter_server.cache_bytes = *ParseQuantity("-1Gi"); },
       "spec.parameterServer.cacheBytes: must be >= 0, got -1Gi"},
      {[](ShadowSyncJob& j) { j.spec.parameter_server.admission.probability = 0; },
       "spec.parameterServer.admission.probability: must be in (0, 1], got 0"},
      {[](ShadowSyncJob& j) { j.spec.syncer.replicas = 0; },
       "spec.syncer.replicas: must be >= 1 for algorithm shadow-easgd (only none runs without "
       "a syncer), got 0"},
      {[](ShadowSyncJob& j) { j.spec.sync.interval = 0; },
       "spec.sync.interval: must be >= 1, got 0"},
      {[](ShadowSyncJob& j) { j.spec.sync.warmup_steps = -1; },
       "spec.sync.warmupSteps: must be >= 0, got -1"},
      {[](ShadowSyncJob& j) { j.spec.sync.easgd.alpha = 0; },
       "spec.sync.easgd.alpha: must be in (0, 1], got 0"},
      {[](ShadowSyncJob& j) { j.spec.sync.easgd.alpha = 1.5; },
       "spec.sync.easgd.alpha: must be in (0, 1], got 1.5"},
      {[](ShadowSyncJob& j) { j.spec.sync.bmuf.block_momentum = 1; },
       "spec.sync.bmuf.blockMomentum: must be in [0, 1), got 1"},
      {[](ShadowSyncJob& j) {
         j.spec.data.format = DataFormat::kSynthetic;
         j.spec.data.synthetic.examples = 3;
         j.spec.trainer.replicas = 4;
       },
       "spec.trainer.replicas: 4 trainers for 3 examples (spec.data.synthetic.examples): every "
       "trainer needs at least one"},
      {[](ShadowSyncJob& j) { j.spec.sync.ssp.staleness = -1; },
       "spec.sync.ssp.staleness: must be >= 0, got -1"},
      {[](ShadowSyncJob& j) { j.spec.sync.sync_switch.switch_fraction = 1.5; },
       "spec.sync.syncSwitch.switchFraction: must be in [0, 1], got 1.5"},
      {[](ShadowSyncJob& j) { j.spec.sync.sync_switch.straggler_factor = 1; },
       "spec.sync.syncSwitch.stragglerFactor: must be > 1, got 1"},
      {[](ShadowSyncJob& j) {
         j.spec.sync.algorithm = SyncAlgorithm::kDsSync;
         j.spec.sync.ds_sync.group_size = 1;
       },
       "spec.sync.dsSync.groupSize: must be >= 2, got 1"},
      {[](ShadowSyncJob& j) {
         j.spec.run_policy.scheduling_policy = SchedulingPolicySpec{.min_available = 9};
       },
       "spec.runPolicy.schedulingPolicy.minAvailable: must be <= the job's 5 pods (trainers + "
       "parameter servers + syncers), got 9"},
      {[](ShadowSyncJob& j) {
         j.spec.run_policy.scheduling_policy = SchedulingPolicySpec{.priority_class = "High_Prio"};
       },
       "spec.runPolicy.schedulingPolicy.priorityClass: must be a DNS-1123 subdomain, got "
       "\"High_Prio\""},
      {[](ShadowSyncJob& j) {
         j.spec.sync.algorithm = SyncAlgorithm::kDsSync;
         j.spec.sync.ds_sync.group_size = 4;
       },
       "spec.sync.dsSync.groupSize: must be <= spec.trainer.replicas (2), got 4"},
      {[](ShadowSyncJob& j) {
         j.spec.sync.algorithm = SyncAlgorithm::kDsSync;
         j.spec.trainer.replicas = 6;
         j.spec.sync.ds_sync.group_size = 4;
       },
       "spec.sync.dsSync.groupSize: must divide spec.trainer.replicas (6) into equal groups, "
       "got 4"},
      {[](ShadowSyncJob& j) {
         j.spec.sync.algorithm = SyncAlgorithm::kDsSync;
         j.spec.trainer.replicas = 6;
         j.spec.sync.ds_sync.schedule = DsSyncSchedule::kButterfly;
       },
       "spec.sync.dsSync.schedule: butterfly cannot give every one of 6 trainers the exact mean "
       "in groups of 2 within ceil(log_2 6) = 3 rounds: it needs 6 / 2 = 3 to be a product of 2 "
       "factors of at most 2 (use the random schedule or another trainer count)"},
      {[](ShadowSyncJob& j) { j.spec.data.format = DataFormat::kCriteoTsv; },
       "spec.data.paths: must list at least one file when spec.data.format is criteo-tsv"},
      {[](ShadowSyncJob& j) {
         j.spec.data.format = DataFormat::kCriteoTsv;
         j.spec.data.paths = {"a.tsv", ""};
       },
       "spec.data.paths[1]: must not be empty"},
      {[](ShadowSyncJob& j) { j.spec.data.synthetic.examples = 0; },
       "spec.data.synthetic.examples: must be >= 1, got 0"},
      {[](ShadowSyncJob& j) { j.spec.trainer.straggler = StragglerSpec{.count = 3}; },
       "spec.trainer.straggler.count: must be <= spec.trainer.replicas (2), got 3"},
      {[](ShadowSyncJob& j) { j.spec.checkpoint.interval_seconds = 0; },
       "spec.checkpoint.intervalSeconds: must be >= 1, got 0"},
      {[](ShadowSyncJob& j) { j.spec.run_policy.backoff_limit = -1; },
       "spec.runPolicy.backoffLimit: must be >= 0, got -1"},
      {[](ShadowSyncJob& j) { j.spec.run_policy.active_deadline_seconds = 0; },
       "spec.runPolicy.activeDeadlineSeconds: must be >= 1, got 0"},
      {[](ShadowSyncJob& j) { j.metadata.name = ""; }, "metadata.name: required field is missing"},
      {[](ShadowSyncJob& j) { j.metadata.name = "My_Job"; },
       "metadata.name: must be a DNS-1035 label: lowercase letters, digits and '-', starting "
       "with a letter and ending with a letter or digit, got \"My_Job\""},
      {[](ShadowSyncJob& j) { j.metadata.name = "1job"; },
       "metadata.name: must be a DNS-1035 label: lowercase letters, digits and '-', starting "
       "with a letter and ending with a letter or digit, got \"1job\""},
      {[](ShadowSyncJob& j) { j.metadata.name = std::string(41, 'a'); },
       "metadata.name: must be at most 40 characters so child names such as "
       "\"<name>-trainer-12\" stay within Kubernetes limits, got 41"},
      {[](ShadowSyncJob& j) { j.metadata.namespace_name = "Team_A"; },
       "metadata.namespace: must be a DNS-1123 label (lowercase letters, digits and '-'), got "
       "\"Team_A\""},
      {[](ShadowSyncJob& j) { j.metadata.labels["bad key!"] = "x"; },
       "metadata.labels.bad key!: invalid label key: [prefix/]name, name at most 63 characters "
       "of [A-Za-z0-9-_.] starting and ending alphanumeric"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_EQ(ValidationError(c.mutate), c.message);
  }
}

TEST_F(JobSpecTest, ValidCornerCasesPass) {
  const std::vector<std::function<void(ShadowSyncJob&)>> valid = {
      [](ShadowSyncJob& j) {
        j.spec.sync.algorithm = SyncAlgorithm::kNone;
        j.spec.syncer.replicas = 0;  // "none" needs no syncer.
      },
      [](ShadowSyncJob& j) {
        j.spec.sync.algorithm = SyncAlgorithm::kDsSync;
        j.spec.trainer.replicas = 8;
        j.spec.sync.ds_sync.schedule = DsSyncSchedule::kButterfly;
      },
      [](ShadowSyncJob& j) {
        // Not a power of the group size, but 6 = 3 x 2: mixed-radix butterfly.
        j.spec.sync.algorithm = SyncAlgorithm::kDsSync;
        j.spec.trainer.replicas = 6;
        j.spec.sync.ds_sync.group_size = 3;
        j.spec.sync.ds_sync.schedule = DsSyncSchedule::kButterfly;
      },
      [](ShadowSyncJob& j) {
        // ds-sync's rules only apply when it is selected.
        j.spec.trainer.replicas = 1;
        j.spec.sync.ds_sync.group_size = 4;
      },
      [](ShadowSyncJob& j) { j.metadata.name = std::string(40, 'a'); },
      [](ShadowSyncJob& j) { j.spec.model.bottom_mlp.clear(); },
      [](ShadowSyncJob& j) { j.metadata.labels["app.kubernetes.io/name"] = "shadowsync"; },
      [](ShadowSyncJob& j) { j.spec.sync.ssp.staleness = 0; },
      [](ShadowSyncJob& j) { j.spec.sync.easgd.alpha = 1.0; },
  };
  for (size_t i = 0; i < valid.size(); ++i) {
    SCOPED_TRACE(i);
    ShadowSyncJob job = DefaultJob();
    valid[i](job);
    SS_EXPECT_OK(ValidateJob(job));
  }
}

TEST_F(JobSpecTest, ValidationReportsAllProblemsInFieldOrder) {
  EXPECT_EQ(ValidationError([](ShadowSyncJob& j) {
              j.spec.parameter_server.slots = 0;
              j.spec.trainer.replicas = 0;
              j.metadata.name = "Bad";
            }),
            "metadata.name: must be a DNS-1035 label: lowercase letters, digits and '-', "
            "starting with a letter and ending with a letter or digit, got \"Bad\"\n"
            "spec.trainer.replicas: must be >= 1, got 0\n"
            "spec.parameterServer.slots: must be in [1, 1048576], got 0");
}

// spec.<role>.template shapes where and how pods run, never what they may
// reach: every field outside the allow-list is named, with where it stands.
TEST_F(JobSpecTest, PodTemplatesAllowOnlyListedFields) {
  const std::string message = ValidationError([](ShadowSyncJob& j) {
    j.spec.trainer.pod_template = nlohmann::json::parse(R"({
      "metadata": {"labels": {"a": "b"}},
      "spec": {
        "nodeSelector": {"pool": "cpu"},
        "serviceAccountName": "cluster-admin",
        "hostNetwork": true,
        "securityContext": {"runAsUser": 0, "sysctls": []},
        "volumes": [{"name": "ok", "emptyDir": {}}, {"name": "root", "hostPath": {"path": "/"}}],
        "containers": [
          {"name": "trainer", "resources": {"requests": {"cpu": "4"}},
           "securityContext": {"privileged": true},
           "ports": [{"containerPort": 80, "hostPort": 80}]}]}})");
    j.spec.parameter_server.pod_template =
        nlohmann::json::parse(R"({"spec": {"initContainers": [{"name": "i", "stdin": true}]}})");
    j.spec.syncer.pod_template = nlohmann::json::parse(R"({"kind": "Pod"})");
  });
  for (const std::string path :
       {"spec.trainer.template.spec.serviceAccountName", "spec.trainer.template.spec.hostNetwork",
        "spec.trainer.template.spec.securityContext.sysctls",
        "spec.trainer.template.spec.volumes[1].hostPath",
        "spec.trainer.template.spec.containers[0].securityContext.privileged",
        "spec.trainer.template.spec.containers[0].ports[0].hostPort",
        "spec.parameterServer.template.spec.initContainers[0].stdin",
        "spec.syncer.template.kind"}) {
    EXPECT_THAT(message, HasSubstr(path + ": not allowed in a pod template; allowed here: "))
        << path;
  }
  EXPECT_THAT(message, HasSubstr("spec.trainer.template.spec.securityContext.runAsUser: must not "
                                 "be 0: job pods never run as root"));
  EXPECT_THAT(message, Not(HasSubstr("template.spec.nodeSelector:")));
  EXPECT_THAT(message, Not(HasSubstr("volumes[0]")));
  EXPECT_THAT(message, Not(HasSubstr("containers[0].resources:")));
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 8) << message;  // 9 problems.
}

TEST_F(JobSpecTest, LoadJobFileValidatesWithLines) {
  ScratchDir dir;
  const std::string path = dir.File("job.yaml");
  WriteFile(path, std::string(kHeader) +
                      "spec:\n"
                      "  trainer:\n"
                      "    replicas: 1\n"
                      "    threads: 0\n"
                      "  sync: {algorithm: ds-sync}\n");
  absl::StatusOr<ShadowSyncJob> job = LoadJobFile(path);
  EXPECT_THAT(job, StatusIs(absl::StatusCode::kInvalidArgument, ""));
  // The defaulted groupSize is not in the file, so it has no line.
  EXPECT_EQ(Msg(job),
            path + ":8: spec.trainer.threads: must be in [1, 1024], got 0\n" + path +
                ": spec.sync.dsSync.groupSize: must be <= spec.trainer.replicas (1), got 2");
}

TEST_F(JobSpecTest, LoadJobFileReadsJsonAndReportsMissingFiles) {
  ScratchDir dir;
  const std::string path = dir.File("job.json");
  WriteFile(path, kFullJson);
  absl::StatusOr<ShadowSyncJob> job = LoadJobFile(path);
  SS_ASSERT_OK(job);
  EXPECT_EQ(job->metadata.name, "full-job");
  EXPECT_THAT(LoadJobFile(dir.File("missing.yaml")),
              StatusIs(absl::StatusCode::kNotFound, "missing.yaml"));
}

// --- Quantities --------------------------------------------------------------------

TEST_F(JobSpecTest, QuantitiesParseLikeKubernetes) {
  const std::vector<std::pair<std::string, int64_t>> good = {{"0", 0},
                                                             {"1Gi", int64_t{1} << 30},
                                                             {"256Mi", 256 << 20},
                                                             {"500M", 500'000'000},
                                                             {"1.5e9", 1'500'000'000},
                                                             {"0.5Ki", 512},
                                                             {"100m", 1},  // Fractions round up.
                                                             {"2k", 2000},
                                                             {"1E", 1'000'000'000'000'000'000},
                                                             {"+3", 3},
                                                             {".5Ki", 512},
                                                             {"-1Gi", -(int64_t{1} << 30)}};
  for (const auto& [text, value] : good) {
    SCOPED_TRACE(text);
    absl::StatusOr<Quantity> q = ParseQuantity(text);
    SS_ASSERT_OK(q);
    EXPECT_EQ(q->value, value);
    EXPECT_EQ(q->text, text);
  }
  for (const char* bad : {"", "Gi", "1GB", "1 Gi", "1e", "1.2.3", "8Ei", "1e999", "abc"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseQuantity(bad), StatusIs(absl::StatusCode::kInvalidArgument, ""));
  }
}

TEST_F(JobSpecTest, QuantityAcceptsJsonNumbers) {
  json object = JobToJson(DefaultJob());
  object["spec"]["parameterServer"]["cacheBytes"] = 1048576;
  absl::StatusOr<ShadowSyncJob> job = JobFromJson(object);
  SS_ASSERT_OK(job);
  EXPECT_EQ(job->spec.parameter_server.cache_bytes, (Quantity{"1048576", 1048576}));
}

// --- Enums and summary -----------------------------------------------------------------

TEST_F(JobSpecTest, EnumNamesRoundTrip) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < EnumTraits<SyncAlgorithm>::kNames.size(); ++i) {
    auto algorithm = static_cast<SyncAlgorithm>(i);
    names.insert(EnumName(algorithm));
    EXPECT_EQ(ParseEnumName<SyncAlgorithm>(EnumName(algorithm)), algorithm);
  }
  EXPECT_EQ(names.size(), 13u);
  EXPECT_EQ(EnumName(SyncAlgorithm::kPsPlus), "ps-plus");
  EXPECT_EQ(ParseEnumName<SyncAlgorithm>("Shadow-EASGD"), std::nullopt);
}

TEST_F(JobSpecTest, SummaryNamesTheSettingsThatMatter) {
  EXPECT_EQ(JobSummary(DefaultJob()),
            "job=demo algorithm=shadow-easgd alpha=0.45 apply=delta duty_cycle=0.02 warmup_steps=8 "
            "final_average=true lr_scale=0.707107 trainers=2 threads=2 "
            "batch=256 lr=0.02 optimizer=adagrad ps=2 slots=4096 ps_optimizer=adagrad ps_lr=0.02 "
            "cache=1Gi syncers=1 data=synthetic examples=1000000 eval_examples=100000 seed=1 "
            "model=13d-26t-16e bottom=512-256-64 top=512-256");
  ShadowSyncJob job = DefaultJob();
  job.spec.sync.algorithm = SyncAlgorithm::kFgBmuf;
  job.spec.trainer.replicas = 4;
  EXPECT_THAT(JobSummary(job), HasSubstr("algorithm=fg-bmuf block_momentum=0.5 block_lr=0.5 "
                                         "nesterov=true interval=10 lr_scale=0.5 trainers=4"));
}

// --- Generated artefacts -----------------------------------------------------------------

TEST_F(JobSpecTest, OpenApiSchemaHasEnumsMinimumsAndDefaults) {
  const json schema = JobSpecOpenApiSchema();
  EXPECT_EQ(schema["type"], "object");
  const json& props = schema["properties"];

  const json& algorithm = props["sync"]["properties"]["algorithm"];
  EXPECT_EQ(algorithm["type"], "string");
  EXPECT_EQ(algorithm["enum"],
            json({"none", "shadow-easgd", "shadow-ma", "shadow-bmuf", "fg-easgd", "fg-ma",
                  "fg-bmuf", "bsp", "asp", "ssp", "ds-sync", "sync-switch", "ps-plus"}));
  EXPECT_EQ(algorithm["default"], "shadow-easgd");

  const json& replicas = props["trainer"]["properties"]["replicas"];
  EXPECT_EQ(replicas["type"], "integer");
  EXPECT_EQ(replicas["format"], "int32");
  EXPECT_EQ(replicas["minimum"], 1);
  EXPECT_EQ(replicas["default"], 2);
  EXPECT_EQ(props["parameterServer"]["properties"]["replicas"]["minimum"], 1);
  EXPECT_EQ(props["parameterServer"]["properties"]["slots"]["maximum"], 1 << 20);

  const json& lr = props["trainer"]["properties"]["learningRate"];
  EXPECT_EQ(lr["type"], "number");
  EXPECT_EQ(lr["minimum"], 0);
  EXPECT_EQ(lr["exclusiveMinimum"], true);

  EXPECT_EQ(props["trainer"]["properties"]["optimizer"]["enum"], json({"sgd", "adagrad"}));
  EXPECT_EQ(props["data"]["properties"]["format"]["enum"], json({"criteo-tsv", "synthetic"}));
  EXPECT_EQ(props["runPolicy"]["properties"]["cleanPodPolicy"]["enum"],
            json({"None", "Running", "All"}));
  EXPECT_EQ(props["model"]["properties"]["bottomMlp"]["default"], json({512, 256, 64}));
  EXPECT_EQ(props["model"]["properties"]["bottomMlp"]["items"]["minimum"], 1);
  EXPECT_EQ(props["parameterServer"]["properties"]["cacheBytes"]["x-kubernetes-int-or-string"],
            true);
  EXPECT_EQ(props["parameterServer"]["properties"]["cacheBytes"]["default"], "1Gi");
  EXPECT_EQ(props["model"]["properties"]["tables"]["items"]["required"], json({"name"}));

  // Derived defaults and `tables` (which would clash with criteoTables once
  // the API server filled it in) have no schema default.
  EXPECT_FALSE(props["model"]["properties"]["tables"].contains("default"));
  EXPECT_TRUE(props["model"]["properties"].contains("criteoTables"));
  const json& alpha = props["sync"]["properties"]["easgd"]["properties"]["alpha"];
  EXPECT_FALSE(alpha.contains("default"));
  EXPECT_THAT(alpha["description"].get<std::string>(),
              HasSubstr("Default: 0.9 / spec.trainer.replicas"));
}

TEST_F(JobSpecTest, OpenApiSchemaIsStructural) {
  std::vector<std::string> preserved;
  WalkSchema(JobSpecOpenApiSchema(), "", [&](const std::string& path, const json& node) {
    SCOPED_TRACE(path);
    // Structural: every node has a type, or is int-or-string.
    EXPECT_TRUE(node.contains("type") || node.value("x-kubernetes-int-or-string", false));
    // Inside a pod template the fields are Kubernetes' own, documented there.
    if (!path.empty() && !absl::EndsWith(path, "[]") && !absl::StrContains(path, ".template.")) {
      EXPECT_TRUE(node.contains("description"));
    }
    if (node.value("x-kubernetes-preserve-unknown-fields", false)) {
      preserved.push_back(path);
    }
  });
  // Unknown fields survive only inside the allowed fields of pod templates:
  // the allow-list itself is typed, so the API server refuses or drops the rest.
  EXPECT_THAT(preserved, ::testing::Contains("trainer.template.spec.affinity"));
  EXPECT_THAT(preserved, ::testing::Not(::testing::Contains("trainer.template")));
  EXPECT_THAT(preserved, ::testing::Not(::testing::Contains("trainer.template.spec")));
  for (const std::string& path : preserved) {
    EXPECT_THAT(path, ::testing::AnyOf(::testing::StartsWith("trainer.template.spec."),
                                       ::testing::StartsWith("parameterServer.template.spec."),
                                       ::testing::StartsWith("syncer.template.spec.")));
  }
}

TEST_F(JobSpecTest, OpenApiDefaultsAgreeWithTheDecoder) {
  // Every schema default equals what the decoder fills in for an empty spec.
  const json decoded = JobToJson(DefaultJob())["spec"];
  int checked = 0;
  WalkSchema(JobSpecOpenApiSchema(), "", [&](const std::string& path, const json& node) {
    if (!node.contains("default") || path.find("[]") != std::string::npos) {
      return;
    }
    json::json_pointer pointer("/" + absl::StrReplaceAll(path, {{".", "/"}}));
    // Inside optional objects (straggler) and shorthands there is nothing
    // decoded to compare with.
    if (!decoded.contains(pointer.parent_pointer())) {
      return;
    }
    SCOPED_TRACE(path);
    ASSERT_TRUE(decoded.contains(pointer));
    EXPECT_EQ(node["default"], decoded[pointer]);
    ++checked;
  });
  EXPECT_GT(checked, 40);
}

TEST_F(JobSpecTest, FieldPathsCoverEveryWireField) {
  const std::vector<std::string> paths = JobFieldPaths();
  const std::set<std::string> set(paths.begin(), paths.end());
  EXPECT_EQ(set.size(), paths.size());
  for (const char* p : {"apiVersion", "kind", "metadata.name", "spec.trainer.replicas",
                        "spec.model.tables[].hashBuckets", "spec.model.criteoTables.hashBuckets",
                        "spec.trainer.straggler.jitterMs", "spec.parameterServer.storage.size",
                        "spec.sync.dsSync.groupSize", "spec.sync.syncSwitch.switchFraction",
                        "spec.sync.psPlus.lrModulation", "spec.runPolicy.cleanPodPolicy"}) {
    EXPECT_TRUE(set.count(p)) << p;
  }
  // Every key JobToJson writes is a documented path.
  std::function<void(const json&, const std::string&)> walk = [&](const json& j,
                                                                  const std::string& path) {
    if (path.ends_with(".template") || path == "metadata.labels" ||
        path == "metadata.annotations") {
      return;
    }
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        walk(v, path.empty() ? k : path + "." + k);
      }
    } else if (j.is_array() && !j.empty() && j[0].is_object()) {
      walk(j[0], path + "[]");
    }
    if (!path.empty() && !path.ends_with("[]")) {
      EXPECT_TRUE(set.count(path)) << path;
    }
  };
  absl::StatusOr<ShadowSyncJob> full = ParseJobYaml(kFullYaml);
  SS_ASSERT_OK(full);
  walk(JobToJson(*full), "");
}

TEST_F(JobSpecTest, DocsAreGeneratedFromTheFieldTable) {
  const std::string path = SourcePath("docs/job-spec.md");
  const std::string doc = ReadFile(path);
  const std::string begin_marker = "<!-- BEGIN GENERATED";
  const std::string end_marker = "<!-- END GENERATED -->";
  size_t begin = doc.find(begin_marker);
  size_t end = doc.find(end_marker);
  ASSERT_NE(begin, std::string::npos) << path;
  ASSERT_NE(end, std::string::npos) << path;
  begin = doc.find('\n', begin) + 1;
  if (testing::RewriteOrExpectGenerated(path, JobSpecReferenceMarkdown(),
                                        "SHADOWSYNC_UPDATE_DOCS=1 job_spec_test", begin,
                                        end - begin)) {
    GTEST_SKIP() << "rewrote " << path;
  }
}

TEST_F(JobSpecTest, DocsMentionEveryFieldPath) {
  const std::string doc = ReadFile(SourcePath("docs/job-spec.md"));
  ASSERT_FALSE(doc.empty());
  for (const std::string& path : JobFieldPaths()) {
    EXPECT_THAT(doc, HasSubstr("`" + path + "`"));
  }
}

TEST_F(JobSpecTest, QuickstartParsesAndValidates) {
  const std::string path = SourcePath("deploy/examples/quickstart.yaml");
  absl::StatusOr<ShadowSyncJob> job = LoadJobFile(path);
  SS_ASSERT_OK(job);
  const JobSpec& s = job->spec;
  EXPECT_EQ(s.data.format, DataFormat::kSynthetic);
  EXPECT_EQ(s.data.synthetic.examples, 200'000);
  EXPECT_EQ(s.parameter_server.replicas, 2);
  EXPECT_EQ(s.syncer.replicas, 1);
  EXPECT_EQ(s.trainer.replicas, 2);
  EXPECT_EQ(s.sync.algorithm, SyncAlgorithm::kShadowEasgd);
  EXPECT_EQ(s.model.tables.size(), 26u);
}

// --- Security ------------------------------------------------------------------

TEST_F(JobSpecTest, SecurityIsAbsentByDefaultAndDecodesWithDefaults) {
  EXPECT_FALSE(DefaultJob().spec.security.tls.has_value());
  EXPECT_FALSE(DefaultJob().spec.security.auth_token.has_value());
  absl::StatusOr<ShadowSyncJob> job = ParseSpec(
      "spec:\n  security:\n    tls: {secretName: my-tls}\n"
      "    authToken: {secretName: my-token}\n");
  SS_ASSERT_OK(job);
  const SecuritySpec& sec = job->spec.security;
  ASSERT_TRUE(sec.tls.has_value());
  EXPECT_EQ(sec.tls->ca_file, "/etc/shadowsync/tls/ca.crt");
  EXPECT_EQ(sec.tls->cert_file, "/etc/shadowsync/tls/tls.crt");
  EXPECT_EQ(sec.tls->key_file, "/etc/shadowsync/tls/tls.key");
  EXPECT_EQ(sec.tls->server_name, "shadowsync");
  EXPECT_EQ(sec.tls->secret_name, "my-tls");
  ASSERT_TRUE(sec.auth_token.has_value());
  EXPECT_EQ(sec.auth_token->file, "/etc/shadowsync/auth/token");
  EXPECT_EQ(sec.auth_token->secret_name, "my-token");
  // Round trip through the JSON the operator's ConfigMap carries.
  absl::StatusOr<ShadowSyncJob> again = JobFromJson(JobToJson(*job));
  SS_ASSERT_OK(again);
  EXPECT_EQ(*again, *job);
}

TEST_F(JobSpecTest, SecurityLocalPathsAreFree) {
  absl::StatusOr<ShadowSyncJob> job = ParseSpec(
      "spec:\n  security:\n    tls: {caFile: /x/ca.pem, certFile: /x/c.pem, keyFile: /x/k.pem, "
      "serverName: \"\"}\n    authToken: {file: /x/token}\n");
  SS_ASSERT_OK(job);
  EXPECT_EQ(job->spec.security.tls->server_name, "");
  EXPECT_EQ(job->spec.security.auth_token->file, "/x/token");
}

TEST_F(JobSpecTest, SecurityValidationNamesTheField) {
  EXPECT_THAT(ValidationError([](ShadowSyncJob& j) {
                j.spec.security.tls = TlsSpec{};
                j.spec.security.tls->cert_file = "";
              }),
              HasSubstr("spec.security.tls.certFile: must not be empty"));
  EXPECT_THAT(ValidationError([](ShadowSyncJob& j) {
                j.spec.security.tls = TlsSpec{.secret_name = "my-tls"};
                j.spec.security.tls->key_file = "/elsewhere/tls.key";
              }),
              HasSubstr("spec.security.tls.keyFile: with spec.security.tls.secretName set the "
                        "Secret is mounted at /etc/shadowsync/tls, so the file must be under it, "
                        "got \"/elsewhere/tls.key\""));
  EXPECT_THAT(ValidationError([](ShadowSyncJob& j) {
                j.spec.security.tls = TlsSpec{.secret_name = "My_Secret"};
              }),
              HasSubstr("spec.security.tls.secretName: must be a Secret name (a DNS-1123 "
                        "subdomain), got \"My_Secret\""));
  EXPECT_THAT(ValidationError([](ShadowSyncJob& j) {
                j.spec.security.tls = TlsSpec{.server_name = "bad name"};
              }),
              HasSubstr("spec.security.tls.serverName: must be a DNS name"));
  EXPECT_THAT(ValidationError(
                  [](ShadowSyncJob& j) { j.spec.security.auth_token = AuthTokenSpec{.file = ""}; }),
              HasSubstr("spec.security.authToken.file: must not be empty"));
  EXPECT_THAT(ValidationError([](ShadowSyncJob& j) {
                j.spec.security.auth_token =
                    AuthTokenSpec{.file = "/tmp/token", .secret_name = "tok"};
              }),
              HasSubstr("spec.security.authToken.file: with spec.security.authToken.secretName "
                        "set the Secret is mounted at /etc/shadowsync/auth"));
  EXPECT_THAT(ValidationError([](ShadowSyncJob& j) {
                j.spec.security.auth_token = AuthTokenSpec{.secret_name = "-bad"};
              }),
              HasSubstr("spec.security.authToken.secretName: must be a Secret name"));
}

TEST_F(JobSpecTest, SecurityTypeErrorsAndUnknownFieldsNameThePath) {
  EXPECT_THAT(Msg(ParseSpec("spec:\n  security:\n    tls: {certfile: /a}\n")),
              HasSubstr("spec.security.tls.certfile"));
  EXPECT_THAT(Msg(ParseSpec("spec:\n  security:\n    authToken: {file: [1]}\n")),
              HasSubstr("spec.security.authToken.file"));
  EXPECT_THAT(Msg(ParseSpec("spec:\n  security:\n    token: {file: /a}\n")),
              HasSubstr("spec.security.token"));
}

}  // namespace
}  // namespace shadowsync
