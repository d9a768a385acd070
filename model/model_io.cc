#include "model/model_io.h"

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace shadowsync::model {
namespace {

constexpr char kMagic[8] = {'S', 'S', 'M', 'O', 'D', 'E', 'L', '1'};

// Appends raw bytes to the file and keeps a running CRC.
class Writer {
 public:
  explicit Writer(AtomicFileWriter& out) : out_(out) {}
  void Bytes(const void* p, size_t n) {
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(p), n);
    out_.Append(std::string_view(static_cast<const char*>(p), n));
  }
  template <typename T>
  void Pod(const T& v) {
    Bytes(&v, sizeof(v));
  }
  void Floats(std::span<const float> v) { Bytes(v.data(), v.size_bytes()); }
  uLong crc() const { return crc_; }

 private:
  AtomicFileWriter& out_;
  uLong crc_ = crc32_z(0, nullptr, 0);
};

class Reader {
 public:
  Reader(const std::string& data, std::string path) : data_(data), path_(std::move(path)) {}
  absl::Status Bytes(void* p, size_t n) {
    if (pos_ + n > end_) {
      return absl::DataLossError(absl::StrCat(path_, ": truncated at byte ", pos_));
    }
    std::memcpy(p, data_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Pod(T* v) {
    return Bytes(v, sizeof(*v));
  }
  absl::Status Floats(std::vector<float>* v, size_t n) {
    if (n > (end_ - pos_) / sizeof(float)) {
      return absl::DataLossError(absl::StrCat(path_, ": truncated at byte ", pos_));
    }
    v->resize(n);
    return Bytes(v->data(), n * sizeof(float));
  }
  void set_end(size_t end) { end_ = end; }
  size_t pos() const { return pos_; }

 private:
  const std::string& data_;
  std::string path_;
  size_t pos_ = 0;
  size_t end_ = data_.size();
};

}  // namespace

absl::Status SaveModel(const std::string& path, const DlrmConfig& config,
                       std::span<const float> params, std::span<const float> dense_state,
                       const LocalEmbeddingStore& store) {
  const LocalStoreOptions& so = store.options();
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& t : so.tables)
    tables.push_back({{"name", t.name}, {"hashBuckets", t.hash_buckets}});
  const int state_floats = so.dim * StateFloatsPerParam(so.optimizer.kind);
  const nlohmann::json header = {{"format", "shadowsync-model"},
                                 {"version", 1},
                                 {"model", DlrmConfigToJson(config)},
                                 {"tables", tables},
                                 {"optimizer", std::string(OptimizerName(so.optimizer.kind))},
                                 {"learningRate", so.optimizer.learning_rate},
                                 {"epsilon", so.optimizer.epsilon},
                                 {"seed", so.seed},
                                 {"numParams", params.size()},
                                 {"denseState", dense_state.size()},
                                 {"rowStateFloats", state_floats},
                                 {"numRows", store.num_rows()}};
  const std::string header_text = header.dump();

  SS_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Open(path));
  Writer w(out);
  w.Bytes(kMagic, sizeof(kMagic));
  w.Pod<uint64_t>(header_text.size());
  w.Bytes(header_text.data(), header_text.size());
  w.Floats(params);
  w.Floats(dense_state);
  store.ForEachRow([&](uint32_t table, uint64_t id, std::span<const float> values,
                       std::span<const float> state) {
    w.Pod(table);
    w.Pod(id);
    w.Floats(values);
    w.Floats(state);
  });
  const uint32_t crc = static_cast<uint32_t>(w.crc());
  out.Append(std::string_view(reinterpret_cast<const char*>(&crc), sizeof(crc)));
  return out.Commit();
}

absl::StatusOr<SavedModel> LoadModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open model file ", path));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < sizeof(kMagic) + sizeof(uint32_t) ||
      std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a ShadowSync model file"));
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, data.data() + data.size() - sizeof(stored_crc), sizeof(stored_crc));
  const uLong crc =
      crc32_z(0, reinterpret_cast<const Bytef*>(data.data()), data.size() - sizeof(stored_crc));
  if (static_cast<uint32_t>(crc) != stored_crc) {
    return absl::DataLossError(
        absl::StrCat(path, ": checksum mismatch (file corrupt or truncated)"));
  }

  Reader r(data, path);
  r.set_end(data.size() - sizeof(stored_crc));
  char magic[sizeof(kMagic)];
  SS_RETURN_IF_ERROR(r.Bytes(magic, sizeof(magic)));
  uint64_t header_len;
  SS_RETURN_IF_ERROR(r.Pod(&header_len));
  if (header_len > data.size())
    return absl::DataLossError(absl::StrCat(path, ": bad header length"));
  std::string header_text(header_len, '\0');
  SS_RETURN_IF_ERROR(r.Bytes(header_text.data(), header_len));

  SavedModel m;
  try {
    const nlohmann::json header = nlohmann::json::parse(header_text);
    SS_RETURN_IF_ERROR(DlrmConfigFromJson(header.at("model"), &m.config));
    for (const auto& t : header.at("tables")) {
      m.store_options.tables.push_back(
          {t.at("name").get<std::string>(), t.at("hashBuckets").get<uint64_t>()});
    }
    m.store_options.dim = m.config.embedding_dim;
    SS_ASSIGN_OR_RETURN(m.store_options.optimizer.kind,
                        ParseOptimizerKind(header.at("optimizer").get<std::string>()));
    m.store_options.optimizer.learning_rate = header.at("learningRate").get<float>();
    m.store_options.optimizer.epsilon = header.at("epsilon").get<float>();
    m.store_options.seed = header.at("seed").get<uint64_t>();
    SS_RETURN_IF_ERROR(r.Floats(&m.params, header.at("numParams").get<size_t>()));
    SS_RETURN_IF_ERROR(r.Floats(&m.dense_state, header.at("denseState").get<size_t>()));
    const int state_floats = header.at("rowStateFloats").get<int>();
    const int64_t num_rows = header.at("numRows").get<int64_t>();
    if (m.params.size() != static_cast<size_t>(Dlrm(m.config).num_params())) {
      return absl::DataLossError(
          absl::StrCat(path, ": parameter count does not match the model shape"));
    }
    m.store = std::make_unique<LocalEmbeddingStore>(m.store_options);
    std::vector<float> values, state;
    for (int64_t i = 0; i < num_rows; ++i) {
      uint32_t table;
      uint64_t id;
      SS_RETURN_IF_ERROR(r.Pod(&table));
      SS_RETURN_IF_ERROR(r.Pod(&id));
      SS_RETURN_IF_ERROR(r.Floats(&values, m.store_options.dim));
      SS_RETURN_IF_ERROR(r.Floats(&state, state_floats));
      if (table >= m.store_options.tables.size()) {
        return absl::DataLossError(absl::StrCat(path, ": row ", i, " names table ", table));
      }
      m.store->PutRow(table, id, values, state);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad header: ", e.what()));
  }
  if (r.pos() != data.size() - sizeof(stored_crc)) {
    return absl::DataLossError(absl::StrCat(path, ": trailing bytes after the last row"));
  }
  return m;
}

}  // namespace shadowsync::model
