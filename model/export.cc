#include "model/export.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace shadowsync::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kManifest[] = "manifest.json";
constexpr char kDense[] = "dense.bin";
constexpr char kTombstones[] = "tombstones.bin";
constexpr size_t kTombstoneBytes = sizeof(uint32_t) + sizeof(uint64_t);

uint32_t Crc(uint64_t crc, const void* p, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(p), n));
}

std::string PartName(int part) { return absl::StrFormat("embeddings/part-%05d.bin", part); }

// One read of the whole file, not a character at a time, into `bytes`,
// whose storage is reused: a warm start reads every part file, and a fresh
// buffer per part cost more in zero-filling and page faults than the read.
absl::Status ReadWholeInto(const std::string& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": missing"));
  bytes->resize(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  if (!in.read(bytes->data(), static_cast<std::streamsize>(bytes->size()))) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read it whole"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::string bytes;
  SS_RETURN_IF_ERROR(ReadWholeInto(path, &bytes));
  return bytes;
}

json TablesToJson(const std::vector<EmbeddingTableConfig>& tables) {
  json out = json::array();
  for (const auto& t : tables) out.push_back({{"name", t.name}, {"hashBuckets", t.hash_buckets}});
  return out;
}

}  // namespace

// ---------------------------------------------------------------- writer

ExportWriter::ExportWriter(std::string dir, std::string tmp, ExportInfo info)
    : dir_(std::move(dir)),
      tmp_(std::move(tmp)),
      info_(std::move(info)),
      state_floats_(info_.with_optimizer_state
                        ? info_.embeddings.dim *
                              StateFloatsPerParam(info_.embeddings.optimizer.kind)
                        : 0),
      changes_(info_.changes) {}

absl::StatusOr<std::unique_ptr<ExportWriter>> ExportWriter::Create(std::string dir,
                                                                   ExportInfo info) {
  if (info.num_parts < 1 || info.num_slots < static_cast<uint32_t>(info.num_parts)) {
    return absl::InvalidArgumentError(absl::StrCat("export ", dir, ": ", info.num_parts,
                                                   " parts over ", info.num_slots, " slots"));
  }
  if (info.embeddings.dim != info.config.embedding_dim) {
    return absl::InvalidArgumentError(absl::StrCat("export ", dir, ": embedding dim ",
                                                   info.embeddings.dim, " but the model's is ",
                                                   info.config.embedding_dim));
  }
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  const std::string tmp = absl::StrCat(dir, ".tmp-", getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(fs::path(tmp) / "embeddings", ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", ec.message()));
  return std::unique_ptr<ExportWriter>(new ExportWriter(std::move(dir), tmp, std::move(info)));
}

ExportWriter::~ExportWriter() {
  out_.reset();
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
}

absl::Status ExportWriter::WriteFile(const std::string& name, const std::string& bytes,
                                     int64_t rows) {
  SS_RETURN_IF_ERROR(WriteFileAtomically(tmp_ + "/" + name, bytes));
  json entry = {
      {"path", name}, {"bytes", bytes.size()}, {"crc32", Crc(0, bytes.data(), bytes.size())}};
  if (rows >= 0) entry["rows"] = rows;
  files_.push_back(std::move(entry));
  return absl::OkStatus();
}

absl::Status ExportWriter::WriteDense(std::span<const float> params,
                                      std::span<const float> dense_state) {
  if (dense_written_)
    return absl::FailedPreconditionError("export: dense parameters written twice");
  const size_t expected = static_cast<size_t>(Dlrm(info_.config).num_params());
  if (params.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("export ", dir_, ": ", params.size(),
                                                   " dense parameters, the model has ", expected));
  }
  std::string bytes(reinterpret_cast<const char*>(params.data()), params.size_bytes());
  if (info_.with_optimizer_state && !dense_state.empty()) {
    bytes.append(reinterpret_cast<const char*>(dense_state.data()), dense_state.size_bytes());
  }
  SS_RETURN_IF_ERROR(WriteFile(kDense, bytes, -1));
  files_.back()["params"] = params.size();
  files_.back()["optimizerState"] = info_.with_optimizer_state ? dense_state.size() : 0;
  params_.assign(params.begin(), params.end());
  if (info_.with_optimizer_state) dense_state_.assign(dense_state.begin(), dense_state.end());
  dense_written_ = true;
  return absl::OkStatus();
}

absl::Status ExportWriter::KeepRows(RowFilter keep) {
  if (next_part_ > 0 || part_ >= 0) {
    return absl::FailedPreconditionError("export: KeepRows after the first part was begun");
  }
  keep_ = std::move(keep);
  return absl::OkStatus();
}

void ExportWriter::Keep(uint32_t table, uint64_t id, const char* values) {
  if (keep_ == nullptr || !keep_(table, id)) return;
  const LocalStoreOptions& o = info_.embeddings;
  if (kept_ == nullptr) {
    kept_ = std::make_unique<LocalEmbeddingStore>(o);
    values_.resize(o.dim);
    // Zero where the export carries no state, as LoadExportRows puts it.
    state_.assign(static_cast<size_t>(o.dim * StateFloatsPerParam(o.optimizer.kind)), 0.0f);
  }
  std::memcpy(values_.data(), values, values_.size() * sizeof(float));
  if (state_floats_ > 0) {
    std::memcpy(state_.data(), values + values_.size() * sizeof(float),
                state_floats_ * sizeof(float));
  }
  kept_->PutRow(table, id, values_, state_);
}

absl::Status ExportWriter::BeginPart(int part) {
  if (part_ >= 0 || part < next_part_ || part >= info_.num_parts) {
    return absl::FailedPreconditionError(
        absl::StrCat("export: part ", part, " begun out of order (next is ", next_part_, ")"));
  }
  while (next_part_ < part) {  // Parts skipped hold no rows.
    SS_RETURN_IF_ERROR(BeginPart(next_part_));
    SS_RETURN_IF_ERROR(EndPart());
  }
  // Parts bypass the page cache: an export of many GB is read back by
  // another process, if ever, and copying it into the cache took more CPU
  // from training than the rest of the export's client side.
  SS_ASSIGN_OR_RETURN(AtomicFileWriter out,
                      AtomicFileWriter::Open(tmp_ + "/" + PartName(part), {.direct_io = true}));
  out_.emplace(std::move(out));
  part_ = part;
  part_begin_ = PartBegin(part);
  part_end_ = PartBegin(part + 1);
  crc_ = crc32_z(0, nullptr, 0);
  bytes_ = 0;
  rows_ = 0;
  return absl::OkStatus();
}

absl::Status ExportWriter::AddRow(uint32_t table, uint64_t id, std::span<const float> values,
                                  std::span<const float> state) {
  if (part_ < 0) return absl::FailedPreconditionError("export: a row outside any part");
  const uint32_t slot = SlotOf(table, id, info_.num_slots);
  if (slot < part_begin_ || slot >= part_end_ || table >= info_.embeddings.tables.size() ||
      values.size() != static_cast<size_t>(info_.embeddings.dim) ||
      (state_floats_ > 0 && state.size() != static_cast<size_t>(state_floats_))) {
    return absl::InvalidArgumentError(
        absl::StrCat("export: row (table ", table, ", id ", id, ", slot ", slot, ", ",
                     values.size(), " values, ", state.size(), " state) does not belong in part ",
                     part_, " (slots ", part_begin_, "-", part_end_, ")"));
  }
  auto put = [&](const void* p, size_t n) { buffer_.append(static_cast<const char*>(p), n); };
  put(&table, sizeof(table));
  put(&id, sizeof(id));
  put(values.data(), values.size_bytes());
  if (state_floats_ > 0) put(state.data(), state.size_bytes());
  Keep(table, id, buffer_.data() + buffer_.size() - RecordBytes() + sizeof(table) + sizeof(id));
  ++rows_;
  if (buffer_.size() >= kWriteBufferBytes) FlushBuffer();
  return absl::OkStatus();
}

size_t ExportWriter::RecordBytes() const {
  return sizeof(uint32_t) + sizeof(uint64_t) +
         (static_cast<size_t>(info_.embeddings.dim) + state_floats_) * sizeof(float);
}

absl::Status ExportWriter::AddRecords(std::string_view records, uint32_t crc) {
  if (part_ < 0) return absl::FailedPreconditionError("export: a row outside any part");
  const size_t record_bytes = RecordBytes();
  if (records.size() % record_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("export: ", records.size(), " bytes of records of ", record_bytes, " bytes"));
  }
  const size_t n = records.size() / record_bytes;
  // Record i's table and id, and where its floats start.
  auto record = [&](size_t i, uint32_t* table, uint64_t* id) {
    const char* p = records.data() + i * record_bytes;
    std::memcpy(table, p, sizeof(*table));
    std::memcpy(id, p + sizeof(*table), sizeof(*id));
    return p + sizeof(*table) + sizeof(*id);
  };
  for (size_t i = 0; i < n; ++i) {
    uint32_t table;
    uint64_t id;
    record(i, &table, &id);
    const uint32_t slot = SlotOf(table, id, info_.num_slots);
    if (slot < part_begin_ || slot >= part_end_ || table >= info_.embeddings.tables.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "export: row (table ", table, ", id ", id, ", slot ", slot, ") does not belong in part ",
          part_, " (slots ", part_begin_, "-", part_end_, ")"));
    }
  }
  if (keep_ != nullptr) {  // Only once every record is known to belong here.
    for (size_t i = 0; i < n; ++i) {
      uint32_t table;
      uint64_t id;
      const char* values = record(i, &table, &id);
      Keep(table, id, values);
    }
  }
  FlushBuffer();
  out_->Append(records);
  crc_ = crc32_combine(crc_, crc, static_cast<z_off_t>(records.size()));
  bytes_ += records.size();
  rows_ += static_cast<int64_t>(n);
  return absl::OkStatus();
}

absl::Status ExportWriter::AddTombstones(std::string_view records) {
  if (info_.delta_base.empty()) {
    return absl::FailedPreconditionError("export: tombstones in a full export");
  }
  if (part_ < 0) return absl::FailedPreconditionError("export: a tombstone outside any part");
  if (records.size() % kTombstoneBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "export: ", records.size(), " bytes of tombstones of ", kTombstoneBytes, " bytes"));
  }
  for (size_t at = 0; at < records.size(); at += kTombstoneBytes) {
    uint32_t table;
    uint64_t id;
    std::memcpy(&table, records.data() + at, sizeof(table));
    std::memcpy(&id, records.data() + at + sizeof(table), sizeof(id));
    const uint32_t slot = SlotOf(table, id, info_.num_slots);
    if (slot < part_begin_ || slot >= part_end_ || table >= info_.embeddings.tables.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "export: tombstone (table ", table, ", id ", id, ", slot ", slot,
          ") does not belong in part ", part_, " (slots ", part_begin_, "-", part_end_, ")"));
    }
  }
  tombstones_.append(records);
  return absl::OkStatus();
}

// The checksum and the write per buffer, not per field of every row: the
// same bytes and the same CRC (it is a running one), at a fraction of the
// calls.
void ExportWriter::FlushBuffer() {
  if (buffer_.empty()) return;
  out_->Append(buffer_);
  crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(buffer_.data()), buffer_.size());
  bytes_ += buffer_.size();
  buffer_.clear();
}

absl::Status ExportWriter::EndPart() {
  if (part_ < 0) return absl::FailedPreconditionError("export: no part is open");
  FlushBuffer();
  const absl::Status committed = out_->Commit();
  out_.reset();
  SS_RETURN_IF_ERROR(committed);
  const std::string name = PartName(part_);
  files_.push_back({{"path", name},
                    {"bytes", bytes_},
                    {"crc32", static_cast<uint32_t>(crc_)},
                    {"rows", rows_},
                    {"slotBegin", part_begin_},
                    {"slotEnd", part_end_}});
  total_rows_ += rows_;
  next_part_ = part_ + 1;
  part_ = -1;
  return absl::OkStatus();
}

absl::Status ExportWriter::WriteManifest(const json& eval) {
  const LocalStoreOptions& e = info_.embeddings;
  json manifest = {{"format", "shadowsync-export"},
                   {"formatVersion", kExportFormatVersion},
                   {"model", DlrmConfigToJson(info_.config)},
                   {"embeddings",
                    {{"dim", e.dim},
                     {"tables", TablesToJson(e.tables)},
                     {"optimizer", std::string(OptimizerName(e.optimizer.kind))},
                     {"learningRate", e.optimizer.learning_rate},
                     {"epsilon", e.optimizer.epsilon},
                     {"seed", e.seed},
                     {"withOptimizerState", info_.with_optimizer_state},
                     {"stateFloatsPerRow", state_floats_},
                     {"numSlots", info_.num_slots},
                     {"numParts", info_.num_parts},
                     {"rows", total_rows_}}},
                   {"dense", {{"file", kDense}, {"source", info_.dense_source}}},
                   {"examplesTrained", info_.examples_trained},
                   {"eval", eval},
                   {"job", info_.job},
                   {"files", files_}};
  if (!info_.delta_base.empty()) manifest["delta"] = {{"base", info_.delta_base}};
  if (!changes_.is_null()) manifest["changes"] = changes_;
  return WriteFileAtomically(tmp_ + "/" + kManifest, manifest.dump(1) + "\n");
}

absl::Status ExportWriter::Commit(const Scorer& score) {
  if (!dense_written_) return absl::FailedPreconditionError("export: no dense parameters written");
  if (part_ >= 0) SS_RETURN_IF_ERROR(EndPart());
  if (next_part_ < info_.num_parts) {
    SS_RETURN_IF_ERROR(BeginPart(info_.num_parts - 1));
    SS_RETURN_IF_ERROR(EndPart());
  }
  if (!info_.delta_base.empty()) {
    SS_RETURN_IF_ERROR(WriteFile(kTombstones, tombstones_,
                                 static_cast<int64_t>(tombstones_.size() / kTombstoneBytes)));
  }
  json eval = info_.eval;
  if (score != nullptr) {
    SavedModel model;
    model.config = info_.config;
    model.store_options = info_.embeddings;
    model.params = std::move(params_);
    model.dense_state = std::move(dense_state_);
    model.store = kept_ != nullptr ? std::move(kept_)
                                   : std::make_unique<LocalEmbeddingStore>(info_.embeddings);
    SS_ASSIGN_OR_RETURN(eval, score(model));
  }
  SS_RETURN_IF_ERROR(WriteManifest(eval));
  // Into place: a plain rename, or an atomic exchange with the export there.
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    fs::rename(tmp_, dir_, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot rename ", tmp_, " to ", dir_, ": ", ec.message()));
    }
  } else {
    if (!fs::exists(fs::path(dir_) / kManifest)) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir_, " exists and is not an export: not replacing it"));
    }
    if (renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot replace ", dir_, " with ", tmp_, ": ", std::strerror(errno)));
    }
    fs::remove_all(tmp_, ec);  // The previous export, now under the temporary name.
  }
  committed_ = true;
  return SyncParentDirectory(dir_);  // The rename survives a crash.
}

absl::Status ExportLocalModel(const std::string& dir, ExportInfo info,
                              std::span<const float> params, std::span<const float> dense_state,
                              const LocalEmbeddingStore& store) {
  info.embeddings = store.options();
  SS_ASSIGN_OR_RETURN(std::unique_ptr<ExportWriter> w, ExportWriter::Create(dir, info));
  SS_RETURN_IF_ERROR(w->WriteDense(params, dense_state));
  // One pass over the rows per part: the store is in memory, the parts small.
  for (int part = 0; part < info.num_parts; ++part) {
    SS_RETURN_IF_ERROR(w->BeginPart(part));
    const uint32_t begin = w->PartBegin(part), end = w->PartBegin(part + 1);
    absl::Status status;
    store.ForEachRow([&](uint32_t table, uint64_t id, std::span<const float> values,
                         std::span<const float> state) {
      const uint32_t slot = SlotOf(table, id, info.num_slots);
      if (status.ok() && slot >= begin && slot < end) status = w->AddRow(table, id, values, state);
    });
    SS_RETURN_IF_ERROR(status);
    SS_RETURN_IF_ERROR(w->EndPart());
  }
  return w->Commit();
}

// ---------------------------------------------------------------- reader

absl::StatusOr<ExportReader> ExportReader::Open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": not an export directory"));
    }
    return absl::NotFoundError(absl::StrCat(dir, ": no such export"));
  }
  const std::string manifest_path = dir + "/" + kManifest;
  SS_ASSIGN_OR_RETURN(const std::string text, ReadWhole(manifest_path));
  ExportReader r;
  r.dir_ = dir;
  r.manifest_ = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const json& m = r.manifest_;
  if (!m.is_object() || m.value("format", "") != "shadowsync-export") {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest_path, ": not a ShadowSync export manifest"));
  }
  const json version = m.value("formatVersion", json());
  if (version != kExportFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(manifest_path, ": formatVersion ",
                                                   version.dump(), " is not supported (this ",
                                                   "build reads ", kExportFormatVersion, ")"));
  }
  std::string field;  // The field being read, for the error message.
  try {
    ExportInfo& info = r.info_;
    field = "model";
    SS_RETURN_IF_ERROR(DlrmConfigFromJson(m.at("model"), &info.config));
    const json& e = m.at("embeddings");
    field = "embeddings";
    info.embeddings.dim = e.at("dim").get<int>();
    for (const json& t : e.at("tables")) {
      info.embeddings.tables.push_back(
          {t.at("name").get<std::string>(), t.at("hashBuckets").get<uint64_t>()});
    }
    SS_ASSIGN_OR_RETURN(info.embeddings.optimizer.kind,
                        ParseOptimizerKind(e.at("optimizer").get<std::string>()));
    info.embeddings.optimizer.learning_rate = e.at("learningRate").get<float>();
    info.embeddings.optimizer.epsilon = e.at("epsilon").get<float>();
    info.embeddings.seed = e.at("seed").get<uint64_t>();
    info.with_optimizer_state = e.at("withOptimizerState").get<bool>();
    info.num_slots = e.at("numSlots").get<uint32_t>();
    info.num_parts = e.at("numParts").get<int>();
    const int state_floats = e.at("stateFloatsPerRow").get<int>();
    const int expected_state =
        info.with_optimizer_state
            ? info.embeddings.dim * StateFloatsPerParam(info.embeddings.optimizer.kind)
            : 0;
    if (state_floats != expected_state || info.embeddings.dim != info.config.embedding_dim ||
        info.num_slots == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          manifest_path, ": embeddings: dim ", info.embeddings.dim, ", stateFloatsPerRow ",
          state_floats, ", numSlots ", info.num_slots, " do not fit the model"));
    }
    field = "dense";
    info.dense_source = m.at("dense").value("source", "");
    info.examples_trained = m.value("examplesTrained", int64_t{0});
    info.eval = m.value("eval", json::object());
    info.job = m.value("job", json());
    field = "delta";
    if (m.contains("delta")) {
      info.delta_base = m["delta"].at("base").get<std::string>();
      if (info.delta_base.empty() || info.delta_base.find('/') != std::string::npos ||
          info.delta_base == "." || info.delta_base == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(manifest_path, ": delta.base \"", info.delta_base,
                         "\" is not the name of an export beside it"));
      }
    }
    info.changes = m.value("changes", json());
    field = "files";
    for (const json& f : m.at("files")) {
      const std::string path = dir + "/" + f.at("path").get<std::string>();
      const uint64_t want = f.at("bytes").get<uint64_t>();
      if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": missing"));
      const uint64_t have = fs::file_size(path, ec);
      if (have != want) {
        return absl::DataLossError(absl::StrCat(path, ": ", have, " bytes, the manifest says ",
                                                want, have < want ? " (truncated)" : ""));
      }
    }
  } catch (const json::exception& ex) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest_path, ": field ", field, ": ", ex.what()));
  }
  return r;
}

int64_t ExportReader::num_rows() const { return manifest_["embeddings"].value("rows", int64_t{0}); }

absl::Status ExportReader::CheckShape(const DlrmConfig& config,
                                      const std::vector<EmbeddingTableConfig>& tables) const {
  if (is_delta()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir_, " is a delta export (the changes since ", info_.delta_base,
                     "); a warm start needs a full export"));
  }
  const json want = DlrmConfigToJson(config);
  // The manifest's model as read, so a field an older export lacks compares
  // as its default (an export from before DCN-v2 is a dot model).
  const json have_model = DlrmConfigToJson(info_.config);
  // Every key of either: a key only one side writes (pooling) differs too.
  json keys = json::object();
  for (const auto& [key, value] : want.items()) keys[key] = true;
  for (const auto& [key, value] : have_model.items()) keys[key] = true;
  std::string differences;  // Every one: a dcn model differs in "dcn" and "interaction".
  for (const auto& [key, unused] : keys.items()) {
    const json have = have_model.value(key, json()), value = want.value(key, json());
    if (have == value) continue;
    absl::StrAppend(&differences, differences.empty() ? "" : "; ", "model.", key, " is ",
                    have.dump(), ", the job's is ", value.dump());
  }
  if (!differences.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, "/", kManifest, ": ", differences));
  }
  const json have_tables = manifest_["embeddings"]["tables"], want_tables = TablesToJson(tables);
  if (have_tables.size() != want_tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, "/", kManifest, ": ", have_tables.size(),
                                                   " embedding tables, the job has ",
                                                   want_tables.size()));
  }
  for (size_t i = 0; i < want_tables.size(); ++i) {
    if (have_tables[i]["hashBuckets"] != want_tables[i]["hashBuckets"]) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir_, "/", kManifest, ": embeddings.tables[", i, "].hashBuckets is ",
                       have_tables[i]["hashBuckets"].dump(), ", the job's is ",
                       want_tables[i]["hashBuckets"].dump()));
    }
  }
  return absl::OkStatus();
}

absl::Status ExportReader::ReadDense(std::vector<float>* params,
                                     std::vector<float>* dense_state) const {
  for (const json& f : manifest_["files"]) {
    if (f["path"] != kDense) continue;
    const std::string path = dir_ + "/" + kDense;
    SS_ASSIGN_OR_RETURN(const std::string bytes, ReadWhole(path));
    if (Crc(0, bytes.data(), bytes.size()) != f["crc32"].get<uint32_t>()) {
      return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (corrupt)"));
    }
    const size_t n = f.value("params", size_t{0}), s = f.value("optimizerState", size_t{0});
    if (n != static_cast<size_t>(Dlrm(info_.config).num_params()) ||
        bytes.size() != (n + s) * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(path, ": ", bytes.size(), " bytes for ", n,
                                              " parameters and ", s, " state floats"));
    }
    params->resize(n);
    dense_state->resize(s);
    std::memcpy(params->data(), bytes.data(), n * sizeof(float));
    if (s > 0)
      std::memcpy(dense_state->data(), bytes.data() + n * sizeof(float), s * sizeof(float));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(dir_, "/", kManifest, ": no ", kDense, " listed"));
}

size_t ExportReader::RecordBytes() const {
  const int state_floats = manifest_["embeddings"]["stateFloatsPerRow"].get<int>();
  return sizeof(uint32_t) + sizeof(uint64_t) +
         (info_.embeddings.dim + state_floats) * sizeof(float);
}

absl::Status ExportReader::ForEachPart(const PartVisitor& visit,
                                       std::span<const int> part_order) const {
  const size_t record = RecordBytes();
  std::vector<const json*> parts;
  for (const json& f : manifest_["files"]) {
    if (f.contains("slotBegin")) parts.push_back(&f);
  }
  std::vector<int> order(part_order.begin(), part_order.end());
  if (order.empty()) {
    for (size_t p = 0; p < parts.size(); ++p) order.push_back(static_cast<int>(p));
  }
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t p = 0; p < sorted.size(); ++p) {
    if (sorted.size() != parts.size() || sorted[p] != static_cast<int>(p)) {
      return absl::InvalidArgumentError(absl::StrCat(dir_, ": a part order of ", order.size(),
                                                     " parts that is not a permutation of its ",
                                                     parts.size(), " parts"));
    }
  }
  std::string bytes;
  for (const int part : order) {
    const json& f = *parts[part];
    const std::string path = dir_ + "/" + f["path"].get<std::string>();
    SS_RETURN_IF_ERROR(ReadWholeInto(path, &bytes));
    if (Crc(0, bytes.data(), bytes.size()) != f["crc32"].get<uint32_t>()) {
      return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (corrupt)"));
    }
    if (bytes.size() % record != 0 || bytes.size() / record != f.value("rows", uint64_t{0})) {
      return absl::DataLossError(absl::StrCat(path, ": ", bytes.size(), " bytes is not ",
                                              f.value("rows", 0), " rows of ", record, " bytes"));
    }
    for (size_t at = 0; at < bytes.size(); at += record) {
      uint32_t table;
      std::memcpy(&table, bytes.data() + at, sizeof(table));
      if (table >= info_.embeddings.tables.size()) {
        return absl::DataLossError(absl::StrCat(path, ": a row of table ", table,
                                                " (the export has ", info_.embeddings.tables.size(),
                                                ")"));
      }
    }
    SS_RETURN_IF_ERROR(visit(part, bytes));
  }
  return absl::OkStatus();
}

absl::Status ExportReader::ForEachRow(const RowVisitor& visit,
                                      std::span<const int> part_order) const {
  const size_t dim = static_cast<size_t>(info_.embeddings.dim);
  const size_t record = RecordBytes();
  const size_t state_floats = (record - sizeof(uint32_t) - sizeof(uint64_t)) / sizeof(float) - dim;
  std::vector<float> values(dim), state(state_floats);
  return ForEachPart(
      [&](int, std::string_view records) -> absl::Status {
        for (const char* p = records.data(); p < records.data() + records.size(); p += record) {
          uint32_t table;
          uint64_t id;
          std::memcpy(&table, p, sizeof(table));
          std::memcpy(&id, p + sizeof(table), sizeof(id));
          std::memcpy(values.data(), p + sizeof(table) + sizeof(id), dim * sizeof(float));
          if (state_floats > 0) {  // memcpy to an empty vector's null data() is undefined
            std::memcpy(state.data(), p + sizeof(table) + sizeof(id) + dim * sizeof(float),
                        state_floats * sizeof(float));
          }
          SS_RETURN_IF_ERROR(visit(table, id, values, state));
        }
        return absl::OkStatus();
      },
      part_order);
}

absl::Status ExportReader::ForEachTombstone(
    const std::function<absl::Status(uint32_t table, uint64_t id)>& visit) const {
  for (const json& f : manifest_["files"]) {
    if (f["path"] != kTombstones) continue;
    const std::string path = dir_ + "/" + kTombstones;
    SS_ASSIGN_OR_RETURN(const std::string bytes, ReadWhole(path));
    if (Crc(0, bytes.data(), bytes.size()) != f["crc32"].get<uint32_t>()) {
      return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (corrupt)"));
    }
    if (bytes.size() % kTombstoneBytes != 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": ", bytes.size(), " bytes is not whole tombstones"));
    }
    for (size_t at = 0; at < bytes.size(); at += kTombstoneBytes) {
      uint32_t table;
      uint64_t id;
      std::memcpy(&table, bytes.data() + at, sizeof(table));
      std::memcpy(&id, bytes.data() + at + sizeof(table), sizeof(id));
      if (table >= info_.embeddings.tables.size()) {
        return absl::DataLossError(absl::StrCat(path, ": a tombstone of table ", table,
                                                " (the export has ", info_.embeddings.tables.size(),
                                                ")"));
      }
      SS_RETURN_IF_ERROR(visit(table, id));
    }
  }
  return absl::OkStatus();
}

std::string ExportReader::BaseDir() const {
  return (fs::path(dir_).parent_path() / info_.delta_base).string();
}

absl::Status ExportReader::Verify() const {
  std::vector<float> params, state;
  SS_RETURN_IF_ERROR(ReadDense(&params, &state));
  SS_RETURN_IF_ERROR(ForEachTombstone([](uint32_t, uint64_t) { return absl::OkStatus(); }));
  return ForEachRow([](uint32_t, uint64_t, std::span<const float>, std::span<const float>) {
    return absl::OkStatus();
  });
}

absl::StatusOr<std::optional<GemmKernel>> ScoredGemmKernel(const ExportReader& reader) {
  const nlohmann::json& scored = reader.info().eval;
  if (!scored.contains("gemm")) return std::nullopt;
  const std::string field = absl::StrCat(reader.dir(), "/manifest.json: eval.gemm");
  if (!scored["gemm"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be a string, got ", scored["gemm"].dump()));
  }
  return ParseGemmKernel(scored["gemm"].get<std::string>(), field);
}

namespace {

// Applies one export's dense parameters, rows and tombstones to `m`.
absl::Status ApplyExport(const ExportReader& reader, const RowFilter& keep, SavedModel& m) {
  SS_RETURN_IF_ERROR(reader.ReadDense(&m.params, &m.dense_state));
  SS_RETURN_IF_ERROR(LoadExportRows(reader, m.store.get(), keep));
  return reader.ForEachTombstone([&](uint32_t table, uint64_t id) {
    m.store->EraseRow(table, id);
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<std::vector<ExportReader>> OpenExportChain(const std::string& dir) {
  // Walked without recursion: corrupt bases naming each other are a cycle
  // to refuse, not a stack to overflow.
  std::vector<ExportReader> chain;
  std::set<std::string> seen;
  for (std::string at = dir;;) {
    if (!seen.insert(fs::path(at).lexically_normal().string()).second) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, ": its delta exports' bases form a cycle at ", at));
    }
    SS_ASSIGN_OR_RETURN(ExportReader reader, ExportReader::Open(at));
    const bool delta = reader.is_delta();
    at = reader.BaseDir();
    chain.push_back(std::move(reader));
    if (!delta) break;
  }
  std::reverse(chain.begin(), chain.end());
  const ExportInfo& full = chain.front().info();
  for (size_t i = 1; i < chain.size(); ++i) {
    const ExportReader& delta = chain[i];
    if (DlrmConfigToJson(delta.config()) != DlrmConfigToJson(full.config) ||
        TablesToJson(delta.info().embeddings.tables) != TablesToJson(full.embeddings.tables) ||
        delta.info().embeddings.dim != full.embeddings.dim) {
      return absl::FailedPreconditionError(absl::StrCat(
          delta.dir(), ": its model is not that of ", delta.BaseDir(), ", the export it changes"));
    }
  }
  return chain;
}

absl::StatusOr<SavedModel> LoadExport(const std::string& dir, const RowFilter& keep) {
  SS_ASSIGN_OR_RETURN(std::vector<ExportReader> chain, OpenExportChain(dir));
  // No Verify() first: ReadDense and ForEachRow check every file's checksum
  // before using it, and a failure returns no model, so a second read of
  // every part (an export can be many GB) would check nothing more.
  SavedModel m;
  m.config = chain.front().config();
  m.store_options = chain.front().info().embeddings;
  m.store = std::make_unique<LocalEmbeddingStore>(m.store_options);
  for (const ExportReader& reader : chain) SS_RETURN_IF_ERROR(ApplyExport(reader, keep, m));
  return m;
}

absl::Status LoadExportRows(const ExportReader& reader, LocalEmbeddingStore* store,
                            const RowFilter& keep) {
  const LocalStoreOptions& o = store->options();
  const size_t state_floats = static_cast<size_t>(o.dim * StateFloatsPerParam(o.optimizer.kind));
  const bool same_optimizer = reader.info().embeddings.optimizer.kind == o.optimizer.kind;
  const std::vector<float> zero_state(state_floats, 0.0f);
  return reader.ForEachRow([&](uint32_t table, uint64_t id, std::span<const float> values,
                               std::span<const float> state) {
    if (keep != nullptr && !keep(table, id)) return absl::OkStatus();
    store->PutRow(table, id, values,
                  same_optimizer && state.size() == state_floats
                      ? state
                      : std::span<const float>(zero_state));
    return absl::OkStatus();
  });
}

}  // namespace shadowsync::model
