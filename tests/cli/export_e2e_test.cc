// The model leaves a `shadowsync run` job and comes back: the export at
// completion, on demand and on an interval, scored by `shadowsync eval`, and
// a warm start on other server and trainer counts. Real binaries, real
// processes on loopback.
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/job_yaml.h"
#include "tests/util/test_util.h"

namespace shadowsync {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::shadowsync::testing::ReadFile;
using ::shadowsync::testing::RunShell;

constexpr char kCluster[] =
    R"(  trainer: {replicas: TRAINERS, threads: 1, batchSize: 64, learningRate: 0.02}
  parameterServer: {replicas: SERVERS, cacheBytes: 16Mi, slots: 512}
  syncer: {replicas: 1}
  sync: {algorithm: shadow-easgd, dutyCycle: 1}
)";

class ExportTest : public ::testing::Test {
 protected:
  std::string Bin() { return testing::BinDir() + "/shadowsync"; }
  // Writes the job (with `extra` appended under spec; a `data:` line there
  // replaces the synthetic data) and returns its path.
  std::string WriteJob(const std::string& name, int examples, int trainers, int servers,
                       std::string extra = "") {
    std::string text =
        testing::TinyJobYaml(name, examples, 3000,
                             absl::StrReplaceAll(kCluster, {{"TRAINERS", std::to_string(trainers)},
                                                            {"SERVERS", std::to_string(servers)}}));
    if (extra.starts_with("  data:")) {
      const size_t data = text.find("  data:");
      text.replace(data, text.find('\n', data) + 1 - data, extra.substr(0, extra.find('\n') + 1));
      extra = extra.substr(extra.find('\n') + 1);
    }
    text += extra;
    const std::string path = dir_.File(name + ".yaml");
    testing::WriteFile(path, text);
    return path;
  }
  // Runs the job to its end into <dir>/<name>; returns its report.
  json Run(const std::string& job, const std::string& name) {
    std::string out;
    const std::string cmd =
        Bin() + " run " + job + " --out " + dir_.File(name) + " --progress-interval 0.1";
    EXPECT_EQ(RunShell(cmd, &out), 0) << cmd << "\n" << out;
    return json::parse(ReadFile(dir_.File(name + "/report.json")), nullptr, false);
  }
  json Eval(const std::string& model, const std::string& data) {
    std::string out;
    const std::string cmd = Bin() + " eval --model " + model + " --data " + data;
    EXPECT_EQ(RunShell(cmd, &out), 0) << cmd << "\n" << out;
    return json::parse(out.substr(out.find('{')), nullptr, false);
  }
  // The progressive train NE of the first progress sample with examples.
  static double FirstTrainNe(const json& report) {
    for (const json& p : report["progress"]) {
      if (p["examples"].get<int64_t>() > 0) return p["train_ne"].get<double>();
    }
    return -1;
  }
  testing::ScratchDir dir_;
};

TEST_F(ExportTest, TheExportAtCompletionScoresAsTheReportSays) {
  const json r = Run(WriteJob("done", 20000, 2, 3), "done");
  ASSERT_TRUE(r.contains("export")) << r.dump(2);
  const std::string model = dir_.File("done/exports/model-000001");
  EXPECT_EQ(r["export"]["path"], model);
  EXPECT_EQ(ReadFile(dir_.File("done/exports/LATEST")), "model-000001\n");
  EXPECT_EQ(r["eval_source"], "the exported model");
  EXPECT_EQ(r["export"]["dense_source"], "mean of the trainers' replicas");
  EXPECT_GT(r["export"]["rows"].get<int64_t>(), 10000);

  const json manifest = json::parse(ReadFile(model + "/manifest.json"));
  EXPECT_EQ(manifest["examplesTrained"], 20000);
  EXPECT_EQ(manifest["embeddings"]["rows"], r["export"]["rows"]);
  EXPECT_EQ(manifest["embeddings"]["numSlots"], 512);
  EXPECT_EQ(manifest["job"]["metadata"]["name"], "done");

  const json eval = Eval(model, dir_.File("done/data/eval.tsv"));
  EXPECT_NEAR(eval["eval_ne"].get<double>(), r["eval_ne"].get<double>(), 1e-6);
  EXPECT_NEAR(eval["eval_auc"].get<double>(), r["eval_auc"].get<double>(), 1e-6);
  EXPECT_EQ(eval["eval_ne"], manifest["eval"]["eval_ne"]);
}

// 3 -> 2 parameter servers and 2 -> 4 trainers: the warm-started job's model
// scores as the export did before it trains, and its train NE starts where
// the first job's model is, not where a fresh model is.
TEST_F(ExportTest, AWarmStartOnOtherServerAndTrainerCountsContinuesWithoutAJump) {
  // One teacher's examples: the first job trains on one half, the warm-started
  // job continues on the other, as a daily retrain would.
  std::string out;
  ASSERT_EQ(RunShell(Bin() + " gen-data --out " + dir_.File("all.tsv") +
                         " --examples 63000 --seed 4 && cd " + dir_.path().string() +
                         " && head -n 30000 all.tsv > a.tsv && sed -n 30001,60000p all.tsv > b.tsv"
                         " && tail -n 3000 all.tsv > eval.tsv",
                     &out),
            0)
      << out;
  auto criteo = [&](const std::string& file) {
    return "  data: {format: criteo-tsv, paths: [" + dir_.File(file) + "], evalPaths: [" +
           dir_.File("eval.tsv") + "]}\n";
  };
  const json first = Run(WriteJob("first", 30000, 2, 3, criteo("a.tsv")), "first");
  const std::string model = dir_.File("first/exports/model-000001");
  ASSERT_TRUE(fs::exists(model + "/manifest.json")) << first.dump(2);

  const json warm =
      Run(WriteJob("warm", 30000, 4, 2, criteo("b.tsv") + "  init: {fromModel: " + model + "}\n"),
          "warm");
  ASSERT_TRUE(warm.contains("init")) << warm.dump(2);
  EXPECT_EQ(warm["init"]["rows"], first["export"]["rows"]);
  EXPECT_EQ(warm["init"]["parameter_servers"], 2);
  EXPECT_EQ(warm["parameter_servers"], 2);
  EXPECT_EQ(warm["per_trainer"].size(), 4u);
  // The first evaluation after the restart is the last one before it.
  EXPECT_NEAR(warm["init"]["eval"]["eval_ne"].get<double>(), first["eval_ne"].get<double>(), 1e-6);
  EXPECT_NEAR(warm["init"]["eval"]["eval_auc"].get<double>(), first["eval_auc"].get<double>(),
              1e-6);

  // No jump: the warm job's first train NE is at the first job's model
  // quality; a fresh job with the same settings starts far above it.
  const json cold = Run(WriteJob("cold", 30000, 4, 2, criteo("b.tsv")), "cold");
  const double warm_start = FirstTrainNe(warm), cold_start = FirstTrainNe(cold);
  std::cout << "first job eval NE " << first["eval_ne"] << "; first train NE: warm " << warm_start
            << ", cold " << cold_start << "; warm job eval NE " << warm["eval_ne"] << "\n";
  EXPECT_LT(warm_start, first["eval_ne"].get<double>() + 0.03) << warm["progress"].dump();
  EXPECT_GT(cold_start, warm_start + 0.025) << cold["progress"].dump();
  EXPECT_LE(warm["eval_ne"].get<double>(), first["eval_ne"].get<double>() + 0.005);
}

TEST_F(ExportTest, ExportsOnDemandAndOnAnIntervalKeepTheNewest) {
  const std::string run = dir_.File("live");
  const pid_t launcher = testing::StartLauncher(
      Bin(), WriteJob("live", 400000, 2, 2, "  export: {intervalSeconds: 1, keep: 2}\n"), run);
  ASSERT_TRUE(fs::exists(run + "/trainer-1.ready")) << ReadFile(run + ".log");
  // Two requests at once, while interval exports run: whichever finds an
  // export running waits for the next one instead of failing.
  const std::string second = dir_.File("second-export.out");
  std::string out;
  ASSERT_EQ(RunShell(Bin() + " export " + run + " >" + second + " 2>&1 & second=$!; " + Bin() +
                         " export " + run + "; mine=$?; wait $second && exit $mine",
                     &out),
            0)
      << out << "\n"
      << ReadFile(second) << ReadFile(run + ".log");
  EXPECT_NE(out.find("exported " + run + "/exports/model-"), std::string::npos) << out;
  EXPECT_NE(ReadFile(second).find("exported " + run + "/exports/model-"), std::string::npos)
      << ReadFile(second);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(run + ".log");

  const json r = json::parse(ReadFile(run + "/report.json"));
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(run + "/exports")) {
    if (entry.path().filename().string().starts_with("model-")) {
      kept.push_back(entry.path().filename().string());
    }
  }
  std::sort(kept.begin(), kept.end());
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_GE(kept.back(), "model-000003");  // The demand and at least one interval before the end.
  EXPECT_EQ(ReadFile(run + "/exports/LATEST"), kept.back() + "\n");
  EXPECT_EQ(r["export"]["path"], run + "/exports/" + kept.back());
  // Exports taken while training ran carry no evaluation; the last one does.
  const json older = json::parse(ReadFile(run + "/exports/" + kept.front() + "/manifest.json"));
  EXPECT_TRUE(older["eval"].empty()) << older["eval"];
  EXPECT_LT(Eval(run + "/exports/" + kept.front(), run + "/data/eval.tsv")["eval_ne"].get<double>(),
            1.0);
  const json last = json::parse(ReadFile(run + "/exports/" + kept.back() + "/manifest.json"));
  EXPECT_EQ(last["examplesTrained"], 400000);
  EXPECT_FALSE(last["eval"].empty());
  // The on-demand export was taken mid-training: its dense parameters are
  // the trainers' checkpoints of that moment.
  const size_t at = out.find(" examples trained");
  ASSERT_NE(at, std::string::npos) << out;
  const int64_t trained = std::stoll(out.substr(out.rfind(", ", at) + 2));
  EXPECT_GT(trained, 0) << out;
  EXPECT_LT(trained, 400000) << out;
}

// A DCN-v2 job over parameter servers: its export is a dcn model that scores
// as the report says, `train --init-model` continues it on one machine, and a
// dot job refuses it naming the field.
TEST_F(ExportTest, ADcnJobsExportScoresAndWarmStartsAsADcnModel) {
  const std::string job = WriteJob("dcn", 12000, 2, 2);
  testing::WriteFile(job, absl::StrReplaceAll(ReadFile(job), {{"topMlp: [32],",
                                                               "topMlp: [32], interaction: dcn, "
                                                               "dcn: {layers: 2, lowRank: 24},"}}));
  const json r = Run(job, "dcn");
  const std::string model = dir_.File("dcn/exports/model-000001");
  const json manifest = json::parse(ReadFile(model + "/manifest.json"));
  EXPECT_EQ(manifest["model"]["interaction"], "dcn");
  EXPECT_EQ(manifest["model"]["dcn"], json({{"layers", 2}, {"lowRank", 24}}));
  EXPECT_LT(r["eval_ne"].get<double>(), 0.99) << r.dump(2);
  const json eval = Eval(model, dir_.File("dcn/data/eval.tsv"));
  EXPECT_NEAR(eval["eval_ne"].get<double>(), r["eval_ne"].get<double>(), 1e-6);
  EXPECT_NEAR(eval["eval_auc"].get<double>(), r["eval_auc"].get<double>(), 1e-6);

  std::string out;
  const std::string more = Bin() + " train --config " + job + " --work-dir " + dir_.File("more") +
                           " --threads 1 --init-model " + model + " --report-json " +
                           dir_.File("more.json");
  ASSERT_EQ(RunShell(more, &out), 0) << more << "\n" << out;
  EXPECT_EQ(json::parse(ReadFile(dir_.File("more.json")))["interaction"], "dcn");

  const std::string dot = Bin() + " train --config " + job + " --work-dir " + dir_.File("dot") +
                          " --interaction dot --init-model " + model;
  EXPECT_EQ(RunShell(dot, &out), 2) << out;
  EXPECT_NE(out.find("model.interaction is \"dcn\", the job's is \"dot\""), std::string::npos)
      << out;
}

// Multi-hot synthetic data (C23..C26 hold 1 to 3 ids) through parameter
// servers, those four tables mean-pooled: the job learns, and its export
// keeps the pooling and scores as the report says.
TEST_F(ExportTest, AMultiHotJobTrainsOverServersAndItsExportKeepsThePooling) {
  std::string tables = "tables: [";
  for (int t = 1; t <= 26; ++t) {
    absl::StrAppend(&tables, t > 1 ? ", " : "", "{name: C", t, ", hashBuckets: 5000",
                    t > 22 ? ", pooling: mean}" : "}");
  }
  tables += "]";
  const std::string job = WriteJob("mh", 12000, 2, 2);
  testing::WriteFile(
      job, absl::StrReplaceAll(ReadFile(job), {{"criteoTables: {hashBuckets: 5000}", tables},
                                               {"seed: 4}",
                                                "seed: 4, multiHotColumns: 4, "
                                                "maxIdsPerField: 3}"}}));
  const json r = Run(job, "mh");
  EXPECT_LT(r["eval_ne"].get<double>(), 0.99) << r.dump(2);
  std::string data;
  ASSERT_EQ(RunShell("cut -f40 " + dir_.File("mh/data/train.tsv") + " | grep -c ,", &data), 0);
  EXPECT_GT(std::stoi(data), 3000) << "the generated data is multi-hot";
  const std::string model = dir_.File("mh/exports/model-000001");
  const json manifest = json::parse(ReadFile(model + "/manifest.json"));
  ASSERT_EQ(manifest["model"]["pooling"].size(), 26u);
  EXPECT_EQ(manifest["model"]["pooling"][0], "sum");
  EXPECT_EQ(manifest["model"]["pooling"][25], "mean");
  const json eval = Eval(model, dir_.File("mh/data/eval.tsv"));
  EXPECT_NEAR(eval["eval_ne"].get<double>(), r["eval_ne"].get<double>(), 1e-6);
  EXPECT_NEAR(eval["eval_auc"].get<double>(), r["eval_auc"].get<double>(), 1e-6);
}

TEST_F(ExportTest, ABadInitModelIsRefusedNamingTheFileBeforeAnythingStarts) {
  Run(WriteJob("src", 5000, 1, 1), "src");
  const std::string model = dir_.File("src/exports/model-000001");
  auto refused = [&](const std::string& from, const std::string& extra_spec) {
    std::string out;
    const std::string job =
        WriteJob("bad", 5000, 1, 2, "  init: {fromModel: " + from + "}\n" + extra_spec);
    EXPECT_NE(RunShell(Bin() + " run " + job + " --out " + dir_.File("bad"), &out), 0) << out;
    EXPECT_FALSE(fs::exists(dir_.File("bad/ps-0"))) << out;  // no server started
    return out;
  };
  EXPECT_NE(refused(dir_.File("nothing"), "")
                .find("spec.init.fromModel: " + dir_.File("nothing") + ": no such export"),
            std::string::npos);

  const std::string truncated = dir_.File("truncated");
  fs::copy(model, truncated, fs::copy_options::recursive);
  fs::resize_file(truncated + "/embeddings/part-00003.bin",
                  fs::file_size(truncated + "/embeddings/part-00003.bin") - 7);
  EXPECT_NE(refused(truncated, "").find(truncated + "/embeddings/part-00003.bin: "),
            std::string::npos);

  const std::string corrupt = dir_.File("corrupt");
  fs::copy(model, corrupt, fs::copy_options::recursive);
  std::string bytes = ReadFile(corrupt + "/embeddings/part-00005.bin");
  bytes[bytes.size() / 2] ^= 0x40;
  testing::WriteFile(corrupt + "/embeddings/part-00005.bin", bytes);
  EXPECT_NE(refused(corrupt, "")
                .find(corrupt + "/embeddings/part-00005.bin: checksum mismatch (corrupt)"),
            std::string::npos);

  // Another shape: the message names the field.
  std::string out;
  const std::string wide = WriteJob("wide", 5000, 1, 1, "  init: {fromModel: " + model + "}\n");
  testing::WriteFile(wide,
                     absl::StrReplaceAll(ReadFile(wide), {{"bottomMlp: [32]", "bottomMlp: [48]"}}));
  EXPECT_NE(RunShell(Bin() + " run " + wide + " --out " + dir_.File("wide"), &out), 0);
  EXPECT_NE(out.find("spec.init.fromModel: "), std::string::npos) << out;
  EXPECT_NE(out.find("model.bottomMlp"), std::string::npos) << out;
  // The export itself is untouched by all this.
  EXPECT_EQ(Eval(model, dir_.File("src/data/eval.tsv"))["eval_ne"],
            json::parse(ReadFile(model + "/manifest.json"))["eval"]["eval_ne"]);
}

}  // namespace
}  // namespace shadowsync
