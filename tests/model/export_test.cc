// The export format (model/export.h): a round trip restores every
// bit; rows land in the part of their slot; nothing is visible before Commit
// and a second export replaces the first, leaving nothing behind (the
// exchange's atomicity itself is renameat2's); a scorer gets the rows kept as
// they were written before the export is committed, and its score is the
// manifest's eval; a load
// keeps the rows asked for; and a truncated, corrupt,
// incomplete, foreign-shaped or future-version export is refused naming the
// file and what is wrong.
#include "model/export.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>

#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace shadowsync::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

DlrmConfig Config() {
  return {.num_dense = 3, .embedding_dim = 4, .bottom_mlp = {8}, .top_mlp = {6}, .num_tables = 3};
}

LocalStoreOptions StoreOptions() {
  LocalStoreOptions o;
  o.dim = 4;
  o.tables = {{"t0", 1000}, {"t1", 1000}, {"t2", 50}};
  o.optimizer.kind = OptimizerKind::kAdagrad;
  o.seed = 7;
  return o;
}

using Row = std::tuple<std::vector<float>, std::vector<float>>;
using Rows = std::map<std::pair<uint32_t, uint64_t>, Row>;

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Rows in every table, each with its own values and optimizer state.
    for (uint32_t t = 0; t < 3; ++t) {
      for (uint64_t id = 0; id < 300; id += 1 + t) {
        std::vector<float> values(4), state(4);
        for (int k = 0; k < 4; ++k) {
          values[k] = static_cast<float>(t * 1000 + id) + 0.25f * k;
          state[k] = 0.5f * static_cast<float>(id + k);
        }
        store_.PutRow(t, id, values, state);
        rows_[{t, id}] = {values, state};
      }
    }
    Dlrm model(Config());
    params_.resize(model.num_params());
    model.InitParams(3, params_);
    dense_state_.assign(params_.size(), 0.125f);
  }

  ExportInfo Info() {
    ExportInfo info;
    info.config = Config();
    info.embeddings = StoreOptions();
    info.num_slots = 64;
    info.num_parts = 4;
    info.dense_source = "trainer replica";
    info.examples_trained = 12345;
    info.eval = {{"eval_ne", 0.8}, {"eval_auc", 0.75}};
    return info;
  }

  std::string Write(const std::string& name, ExportInfo info) {
    const std::string dir = dir_.File(name);
    SS_EXPECT_OK(ExportLocalModel(dir, info, params_, dense_state_, store_));
    return dir;
  }

  static Rows ReadRows(const ExportReader& r) {
    Rows out;
    EXPECT_TRUE(r.ForEachRow([&](uint32_t t, uint64_t id, std::span<const float> v,
                                 std::span<const float> s) {
                   out[{t, id}] = {{v.begin(), v.end()}, {s.begin(), s.end()}};
                   return absl::OkStatus();
                 }).ok());
    return out;
  }

  static json Manifest(const std::string& dir) {
    return json::parse(testing::ReadFile(dir + "/manifest.json"));
  }

  testing::ScratchDir dir_;
  LocalEmbeddingStore store_{StoreOptions()};
  Rows rows_;
  std::vector<float> params_, dense_state_;
};

TEST_F(ExportTest, RoundTripRestoresEveryBitAndTheManifest) {
  const std::string dir = Write("export", Info());
  auto reader = ExportReader::Open(dir);
  SS_ASSERT_OK(reader);
  EXPECT_EQ(reader->config(), Config());
  EXPECT_EQ(reader->num_rows(), static_cast<int64_t>(rows_.size()));
  EXPECT_EQ(reader->info().examples_trained, 12345);
  EXPECT_EQ(reader->info().dense_source, "trainer replica");
  EXPECT_EQ(reader->info().eval["eval_auc"], 0.75);
  std::vector<float> params, state;
  SS_ASSERT_OK(reader->ReadDense(&params, &state));
  EXPECT_EQ(params, params_);
  EXPECT_EQ(state, dense_state_);
  EXPECT_EQ(ReadRows(*reader), rows_);

  auto loaded = LoadExport(dir);
  SS_ASSERT_OK(loaded);
  EXPECT_EQ(loaded->params, params_);
  EXPECT_EQ(loaded->store->num_rows(), static_cast<int64_t>(rows_.size()));
  Rows reloaded;
  loaded->store->ForEachRow(
      [&](uint32_t t, uint64_t id, std::span<const float> v, std::span<const float> s) {
        reloaded[{t, id}] = {{v.begin(), v.end()}, {s.begin(), s.end()}};
      });
  EXPECT_EQ(reloaded, rows_);

  // The manifest lists every file with its size and checksum.
  const json m = Manifest(dir);
  EXPECT_EQ(m["formatVersion"], kExportFormatVersion);
  EXPECT_EQ(m["files"].size(), 1u + 4u);
  for (const json& f : m["files"]) {
    EXPECT_EQ(fs::file_size(dir + "/" + f["path"].get<std::string>()), f["bytes"].get<uint64_t>());
    EXPECT_TRUE(f.contains("crc32"));
  }
}

TEST_F(ExportTest, RowsLandInThePartOfTheirSlotRange) {
  const std::string dir = Write("export", Info());
  const json m = Manifest(dir);
  int64_t rows = 0;
  for (const json& f : m["files"]) {
    if (!f.contains("slotBegin")) continue;
    const uint32_t begin = f["slotBegin"], end = f["slotEnd"];
    EXPECT_EQ(end - begin, 16u);  // 64 slots in 4 parts.
    int64_t expected = 0;
    for (const auto& [key, row] : rows_) {
      const uint32_t slot = SlotOf(key.first, key.second, 64);
      expected += slot >= begin && slot < end ? 1 : 0;
    }
    EXPECT_EQ(f["rows"].get<int64_t>(), expected) << f.dump();
    rows += expected;
  }
  EXPECT_EQ(rows, static_cast<int64_t>(rows_.size()));

  // The writer refuses a row outside the open part.
  auto w = ExportWriter::Create(dir_.File("other"), Info());
  SS_ASSERT_OK(w);
  SS_ASSERT_OK((*w)->BeginPart(0));
  uint64_t outside = 0;
  while (SlotOf(0, outside, 64) < 16) ++outside;
  const std::vector<float> v(4), s(4);
  EXPECT_THAT((*w)->AddRow(0, outside, v, s),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "does not belong in part 0"));
}

// AddRecords (a model export's rows as the servers send them) writes the
// same part files, CRCs included, as AddRow: here a part's first row goes
// through AddRow and the rest as two blocks of records, so the writer's
// buffer and crc32_combine both meet.
TEST_F(ExportTest, RecordsWrittenAsTheyAreMakeTheSameFilesAsRows) {
  const std::string by_rows = Write("rows", Info());
  const json m = Manifest(by_rows);
  auto w = ExportWriter::Create(dir_.File("records"), Info());
  SS_ASSERT_OK(w);
  const size_t record = (*w)->RecordBytes();
  ASSERT_EQ(record, 4u + 8u + 2u * StoreOptions().dim * 4u);  // Adagrad: values, state
  SS_ASSERT_OK((*w)->WriteDense(params_, dense_state_));      // first, as ExportLocalModel does
  for (int part = 0; part < 4; ++part) {
    const std::string bytes =
        testing::ReadFile(by_rows + absl::StrFormat("/embeddings/part-%05d.bin", part));
    ASSERT_EQ(bytes.size() % record, 0u);
    SS_ASSERT_OK((*w)->BeginPart(part));
    std::string_view rest(bytes);
    if (!rest.empty()) {
      uint32_t table;
      uint64_t id;
      std::memcpy(&table, rest.data(), 4);
      std::memcpy(&id, rest.data() + 4, 8);
      const size_t dim = StoreOptions().dim;
      std::vector<float> floats(2 * dim);
      std::memcpy(floats.data(), rest.data() + 12, floats.size() * 4);
      SS_ASSERT_OK((*w)->AddRow(table, id, std::span<const float>(floats).first(dim),
                                std::span<const float>(floats).subspan(dim)));
      rest.remove_prefix(record);
    }
    const size_t half = rest.size() / record / 2 * record;
    for (std::string_view block : {rest.substr(0, half), rest.substr(half)}) {
      const auto crc = static_cast<uint32_t>(
          crc32_z(0, reinterpret_cast<const Bytef*>(block.data()), block.size()));
      SS_ASSERT_OK((*w)->AddRecords(block, crc));
    }
    SS_ASSERT_OK((*w)->EndPart());
  }
  SS_ASSERT_OK((*w)->Commit());
  EXPECT_EQ(Manifest(dir_.File("records"))["files"], m["files"]);
  for (const json& f : m["files"]) {
    const std::string path = f["path"];
    EXPECT_EQ(testing::ReadFile(dir_.File("records") + "/" + path),
              testing::ReadFile(by_rows + "/" + path))
        << path;
  }

  // Records outside the open part, or not a whole number of them, are refused.
  auto other = ExportWriter::Create(dir_.File("other"), Info());
  SS_ASSERT_OK(other);
  SS_ASSERT_OK((*other)->BeginPart(0));
  std::string outside(record, '\0');
  uint64_t id = 0;
  while (SlotOf(0, id, 64) < 16) ++id;
  std::memcpy(outside.data() + 4, &id, 8);
  EXPECT_THAT((*other)->AddRecords(outside, 0),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "does not belong in part 0"));
  EXPECT_THAT((*other)->AddRecords(outside.substr(1), 0),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "bytes of records of"));
}

// A warm start reads parts in an order of its choosing: the same rows, each
// part's together, in that order; an order that is not one of every part is
// refused.
TEST_F(ExportTest, PartsAreReadInTheOrderGiven) {
  const std::string dir = Write("export", Info());
  auto reader = ExportReader::Open(dir);
  SS_ASSERT_OK(reader);
  const std::vector<int> order = {2, 0, 3, 1};
  std::vector<int> parts_seen;
  Rows rows;
  SS_ASSERT_OK(reader->ForEachRow(
      [&](uint32_t t, uint64_t id, std::span<const float> v, std::span<const float> s) {
        const int part = static_cast<int>(SlotOf(t, id, 64) / 16);  // 64 slots in 4 parts
        if (parts_seen.empty() || parts_seen.back() != part) parts_seen.push_back(part);
        rows[{t, id}] = {{v.begin(), v.end()}, {s.begin(), s.end()}};
        return absl::OkStatus();
      },
      order));
  EXPECT_EQ(parts_seen, order);
  EXPECT_EQ(rows, rows_);
  const auto none = [](uint32_t, uint64_t, std::span<const float>, std::span<const float>) {
    return absl::OkStatus();
  };
  for (const std::vector<int>& bad : std::vector<std::vector<int>>{{0, 1, 2}, {0, 1, 2, 2}}) {
    EXPECT_THAT(reader->ForEachRow(none, bad),
                testing::StatusIs(absl::StatusCode::kInvalidArgument, "not a permutation"));
  }
}

TEST_F(ExportTest, WithoutOptimizerStateRowsLoadWithZeroState) {
  ExportInfo info = Info();
  info.with_optimizer_state = false;
  const std::string dir = Write("weights-only", info);
  auto loaded = LoadExport(dir);
  SS_ASSERT_OK(loaded);
  EXPECT_TRUE(loaded->dense_state.empty());
  loaded->store->ForEachRow(
      [&](uint32_t t, uint64_t id, std::span<const float> v, std::span<const float> s) {
        EXPECT_EQ(std::vector<float>(v.begin(), v.end()), std::get<0>(rows_[{t, id}]));
        EXPECT_EQ(std::vector<float>(s.begin(), s.end()), std::vector<float>(4, 0.0f));
      });
  // Smaller than with state: 12 + 16 bytes a row, not 12 + 32.
  EXPECT_LT(fs::file_size(dir + "/embeddings/part-00000.bin"),
            fs::file_size(Write("full", Info()) + "/embeddings/part-00000.bin"));
}

TEST_F(ExportTest, NothingIsVisibleBeforeCommitAndASecondExportReplacesTheFirst) {
  const std::string dir = dir_.File("export");
  {
    auto w = ExportWriter::Create(dir, Info());
    SS_ASSERT_OK(w);
    SS_ASSERT_OK((*w)->WriteDense(params_, dense_state_));
    EXPECT_FALSE(fs::exists(dir)) << "visible before Commit";
  }  // Abandoned: nothing left behind.
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 0);

  Write("export", Info());
  ExportInfo second = Info();
  second.examples_trained = 99;
  Write("export", second);
  auto reader = ExportReader::Open(dir);
  SS_ASSERT_OK(reader);
  EXPECT_EQ(reader->info().examples_trained, 99);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 1)
      << "the previous export is removed";

  // What is not an export is never replaced.
  testing::WriteFile(dir_.File("precious"), "not an export");
  EXPECT_THAT(ExportLocalModel(dir_.File("precious"), Info(), params_, dense_state_, store_),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "is not an export"));
  EXPECT_EQ(testing::ReadFile(dir_.File("precious")), "not an export");
}

// The scorer gets, before the export is in place, the model LoadExport(dir,
// keep) returns once it is: the dense parameters and exactly the rows kept,
// whether they came as rows (AddRow) or as records (AddRecords). Its result
// is the committed manifest's eval; its error commits nothing and leaves
// nothing behind.
TEST_F(ExportTest, CommitScoresTheRowsKeptAsWrittenBeforeItIsInPlace) {
  const std::string dir = dir_.File("export");
  auto keep = [](uint32_t table, uint64_t id) { return table >= 1 && id % 2 == 0; };
  auto rows_of = [](const LocalEmbeddingStore& store) {
    Rows out;
    store.ForEachRow(
        [&](uint32_t t, uint64_t id, std::span<const float> v, std::span<const float> s) {
          out[{t, id}] = {{v.begin(), v.end()}, {s.begin(), s.end()}};
        });
    return out;
  };
  auto write = [&](const ExportWriter::Scorer& score) -> absl::Status {
    SS_ASSIGN_OR_RETURN(auto w, ExportWriter::Create(dir, Info()));
    SS_RETURN_IF_ERROR(w->WriteDense(params_, dense_state_));
    SS_RETURN_IF_ERROR(w->KeepRows(keep));
    for (int part = 0; part < 4; ++part) {
      SS_RETURN_IF_ERROR(w->BeginPart(part));
      std::string records;  // table 2's rows, as a server sends them
      for (const auto& [key, row] : rows_) {
        const auto& [t, id] = key;
        const uint32_t slot = SlotOf(t, id, 64);
        if (slot < w->PartBegin(part) || slot >= w->PartBegin(part + 1)) continue;
        const auto& [values, state] = row;
        if (t < 2) {
          SS_RETURN_IF_ERROR(w->AddRow(t, id, values, state));
          continue;
        }
        records.append(reinterpret_cast<const char*>(&t), sizeof(t));
        records.append(reinterpret_cast<const char*>(&id), sizeof(id));
        records.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
        records.append(reinterpret_cast<const char*>(state.data()), state.size() * 4);
      }
      const uint32_t crc = static_cast<uint32_t>(
          crc32_z(0, reinterpret_cast<const Bytef*>(records.data()), records.size()));
      SS_RETURN_IF_ERROR(w->AddRecords(records, crc));
      SS_RETURN_IF_ERROR(w->EndPart());
    }
    return w->Commit(score);
  };
  Rows scored;
  std::vector<float> scored_params, scored_state;
  SS_ASSERT_OK(write([&](SavedModel& m) -> absl::StatusOr<json> {
    EXPECT_FALSE(fs::exists(dir)) << "in place before it is scored";
    scored = rows_of(*m.store);
    scored_params = m.params;
    scored_state = m.dense_state;
    EXPECT_EQ(m.config, Config());
    return json{{"eval_ne", 0.5}, {"eval_auc", 0.625}};
  }));
  Rows want;
  for (const auto& [key, row] : rows_) {
    if (keep(key.first, key.second)) want[key] = row;
  }
  ASSERT_TRUE(std::any_of(want.begin(), want.end(), [](auto& r) { return r.first.first == 1; }));
  ASSERT_TRUE(std::any_of(want.begin(), want.end(), [](auto& r) { return r.first.first == 2; }));
  EXPECT_EQ(scored, want);
  EXPECT_EQ(scored_params, params_);
  EXPECT_EQ(scored_state, dense_state_);
  auto loaded = LoadExport(dir, keep);
  SS_ASSERT_OK(loaded);
  EXPECT_EQ(rows_of(*loaded->store), scored);
  EXPECT_EQ(loaded->params, scored_params);
  EXPECT_EQ(loaded->dense_state, scored_state);
  auto reader = ExportReader::Open(dir);
  SS_ASSERT_OK(reader);
  EXPECT_EQ(reader->info().eval, (json{{"eval_ne", 0.5}, {"eval_auc", 0.625}}));
  SS_EXPECT_OK(reader->Verify());

  fs::remove_all(dir);
  EXPECT_THAT(write([](SavedModel&) -> absl::StatusOr<json> {
                return absl::DataLossError("cannot score");
              }),
              testing::StatusIs(absl::StatusCode::kDataLoss, "cannot score"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 0);

  // Rows already written could not be kept.
  auto late = ExportWriter::Create(dir, Info());
  SS_ASSERT_OK(late);
  SS_ASSERT_OK((*late)->BeginPart(0));
  EXPECT_THAT((*late)->KeepRows(keep),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "KeepRows after"));
}

// A filtered load keeps the rows asked for; the others read as their
// initial value, as rows never trained do. Every part is still verified.
TEST_F(ExportTest, ALoadKeepsTheRowsItIsAskedFor) {
  const std::string dir = Write("export", Info());
  auto keep = [](uint32_t table, uint64_t id) { return table == 1 && id % 2 == 0; };
  auto loaded = LoadExport(dir, keep);
  SS_ASSERT_OK(loaded);
  EXPECT_EQ(loaded->params, params_);
  Rows kept, want;
  for (const auto& [key, row] : rows_) {
    if (keep(key.first, key.second)) want[key] = row;
  }
  loaded->store->ForEachRow(
      [&](uint32_t t, uint64_t id, std::span<const float> v, std::span<const float> s) {
        kept[{t, id}] = {{v.begin(), v.end()}, {s.begin(), s.end()}};
      });
  EXPECT_EQ(kept, want);
  ASSERT_FALSE(want.empty());
  std::vector<TableRows> lookup(3);
  lookup[0].ids = {0};
  SS_ASSERT_OK(loaded->store->Lookup(lookup));
  std::vector<float> initial(4);
  InitEmbeddingRow(7, 0, 0, 1000, initial);
  EXPECT_EQ(lookup[0].values, initial);

  // A corrupt part fails the load even when it holds no row kept.
  std::string part = testing::ReadFile(dir + "/embeddings/part-00003.bin");
  part[part.size() / 2] ^= 1;
  testing::WriteFile(dir + "/embeddings/part-00003.bin", part);
  EXPECT_THAT(LoadExport(dir, [](uint32_t, uint64_t) { return false; }),
              testing::StatusIs(absl::StatusCode::kDataLoss, "part-00003.bin"));
}

// A delta whose base chain comes back to itself (a corrupt or hand-edited
// manifest) is refused naming the cycle; it does not recurse until the
// stack runs out; so is a delta naming itself as its base.
TEST_F(ExportTest, DeltaBasesThatFormACycleAreRefused) {
  Write("model-000001", Info());
  auto delta = [&](const std::string& name, const std::string& base) {
    ExportInfo info = Info();
    info.delta_base = base;
    auto writer = ExportWriter::Create(dir_.File(name), info);
    SS_ASSERT_OK(writer.status());
    SS_ASSERT_OK((*writer)->WriteDense(params_, dense_state_));
    SS_ASSERT_OK((*writer)->Commit());
  };
  delta("model-000002", "model-000001");
  SS_ASSERT_OK(LoadExport(dir_.File("model-000002")).status());
  delta("model-000003", "model-000004");
  delta("model-000004", "model-000003");
  EXPECT_THAT(LoadExport(dir_.File("model-000004")).status(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "form a cycle"));
  delta("model-000005", "model-000005");
  EXPECT_THAT(LoadExport(dir_.File("model-000005")).status(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, "form a cycle"));
}

TEST_F(ExportTest, BadExportsAreRefusedNamingTheFileAndTheProblem) {
  const std::string good = Write("good", Info());
  auto copy = [&](const std::string& name) {
    const std::string dir = dir_.File(name);
    fs::copy(good, dir, fs::copy_options::recursive);
    return dir;
  };
  const std::string part = "/embeddings/part-00002.bin";

  const std::string truncated = copy("truncated");
  fs::resize_file(truncated + part, fs::file_size(truncated + part) - 7);
  EXPECT_THAT(LoadExport(truncated),
              testing::StatusIs(absl::StatusCode::kDataLoss, truncated + part + ": "));
  EXPECT_THAT(LoadExport(truncated), testing::StatusIs(absl::StatusCode::kDataLoss, "truncated"));

  const std::string corrupt = copy("corrupt");
  std::string bytes = testing::ReadFile(corrupt + part);
  bytes[bytes.size() / 2] ^= 0x10;
  testing::WriteFile(corrupt + part, bytes);
  EXPECT_TRUE(ExportReader::Open(corrupt).ok()) << "sizes still match";
  EXPECT_THAT(LoadExport(corrupt), testing::StatusIs(absl::StatusCode::kDataLoss,
                                                     corrupt + part + ": checksum mismatch"));

  // A part whose checksum holds but whose first record names a table the
  // export does not have: refused before any record is handed on, by the
  // record visitor and by the part visitor a warm start sends from.
  const std::string foreign = copy("foreign-table");
  bytes = testing::ReadFile(foreign + part);
  const uint32_t table = 999;
  std::memcpy(bytes.data(), &table, sizeof(table));
  testing::WriteFile(foreign + part, bytes);
  json fm = Manifest(foreign);
  for (json& f : fm["files"]) {
    if ("/" + f["path"].get<std::string>() == part) {
      f["crc32"] = static_cast<uint32_t>(
          crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
    }
  }
  testing::WriteFile(foreign + "/manifest.json", fm.dump());
  EXPECT_THAT(LoadExport(foreign), testing::StatusIs(absl::StatusCode::kDataLoss,
                                                     foreign + part + ": a row of table 999"));
  auto foreign_reader = ExportReader::Open(foreign);
  SS_ASSERT_OK(foreign_reader);
  int visited = 0;
  EXPECT_THAT(foreign_reader->ForEachPart([&](int p, std::string_view) {
    visited += p == 2;
    return absl::OkStatus();
  }),
              testing::StatusIs(absl::StatusCode::kDataLoss, "a row of table 999"));
  EXPECT_EQ(visited, 0);

  const std::string missing = copy("missing");
  fs::remove(missing + "/dense.bin");
  EXPECT_THAT(LoadExport(missing),
              testing::StatusIs(absl::StatusCode::kNotFound, missing + "/dense.bin: missing"));

  const std::string future = copy("future");
  json m = Manifest(future);
  m["formatVersion"] = 7;
  testing::WriteFile(future + "/manifest.json", m.dump());
  EXPECT_THAT(LoadExport(future), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                    "formatVersion 7 is not supported"));

  EXPECT_THAT(LoadExport(dir_.File("nowhere")),
              testing::StatusIs(absl::StatusCode::kNotFound, "no such export"));

  // Another model's shape: the field is named.
  auto reader = ExportReader::Open(good);
  SS_ASSERT_OK(reader);
  SS_EXPECT_OK(reader->CheckShape(Config(), StoreOptions().tables));
  DlrmConfig wider = Config();
  wider.bottom_mlp = {16};
  EXPECT_THAT(reader->CheckShape(wider, StoreOptions().tables),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "model.bottomMlp is [8]"));
  std::vector<EmbeddingTableConfig> tables = StoreOptions().tables;
  tables[2].hash_buckets = 60;
  EXPECT_THAT(reader->CheckShape(Config(), tables),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "embeddings.tables[2].hashBuckets is 50"));
}

}  // namespace
}  // namespace shadowsync::model
