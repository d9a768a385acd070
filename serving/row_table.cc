#include "serving/row_table.h"

#include <algorithm>
#include <utility>

#include "common/hash.h"
#include "glog/logging.h"

namespace shadowsync::serving {

RowTable::RowTable(model::LocalStoreOptions options)
    : options_(std::move(options)),
      dim_(static_cast<size_t>(options_.dim)),
      tables_(options_.tables.size()) {
  for (Table& t : tables_) t.slots.assign(16, Slot{0, -1});
}

size_t RowTable::Probe(const Table& t, uint64_t id) {
  const size_t mask = t.slots.size() - 1;
  for (size_t i = Mix64(id) & mask;; i = (i + 1) & mask) {
    const Slot& s = t.slots[i];
    if (s.row < 0 || s.id == id) return i;
  }
}

void RowTable::Grow(Table& t) {
  std::vector<Slot> old(t.slots.size() * 2, Slot{0, -1});
  old.swap(t.slots);
  for (const Slot& s : old) {
    if (s.row >= 0) t.slots[Probe(t, s.id)] = s;
  }
}

absl::Status RowTable::Put(uint32_t table, uint64_t id, std::span<const float> values) {
  CHECK_LT(table, tables_.size());
  CHECK_EQ(values.size(), dim_);
  Table& t = tables_[table];
  Slot* s = &t.slots[Probe(t, id)];
  if (s->row < 0) {
    if (static_cast<size_t>(t.size + 1) * 2 > t.slots.size()) {
      Grow(t);
      s = &t.slots[Probe(t, id)];
    }
    if (!t.free_rows.empty()) {
      s->row = t.free_rows.back();
      t.free_rows.pop_back();
    } else {
      if (t.next_row % kChunkRows == 0) {
        t.chunks.push_back(std::make_unique_for_overwrite<float[]>(kChunkRows * dim_));
      }
      s->row = t.next_row++;
    }
    s->id = id;
    ++t.size;
  }
  std::copy(values.begin(), values.end(), Row(t, s->row));
  return absl::OkStatus();
}

absl::Status RowTable::Erase(uint32_t table, uint64_t id) {
  CHECK_LT(table, tables_.size());
  Table& t = tables_[table];
  const size_t mask = t.slots.size() - 1;
  size_t hole = Probe(t, id);
  if (t.slots[hole].row < 0) return absl::OkStatus();
  t.free_rows.push_back(t.slots[hole].row);
  --t.size;
  // Backward-shift deletion: move later entries of the run into the hole
  // when their home slot allows, so probes never stop early.
  for (size_t i = (hole + 1) & mask; t.slots[i].row >= 0; i = (i + 1) & mask) {
    const size_t home = Mix64(t.slots[i].id) & mask;
    // Movable iff `home` does not lie cyclically in (hole, i].
    const bool home_after_hole = ((i - home) & mask) < ((i - hole) & mask);
    if (!home_after_hole) {
      t.slots[hole] = t.slots[i];
      hole = i;
    }
  }
  t.slots[hole] = Slot{0, -1};
  return absl::OkStatus();
}

const float* RowTable::Find(uint32_t table, uint64_t id) const {
  const Table& t = tables_[table];
  const Slot& s = t.slots[Probe(t, id)];
  return s.row < 0 ? nullptr : Row(t, s.row);
}

absl::Status RowTable::Lookup(std::span<model::TableRows> rows, RowCounts* counts) const {
  CHECK_EQ(rows.size(), tables_.size());
  int64_t found = 0, initial = 0;
  for (uint32_t t = 0; t < rows.size(); ++t) {
    model::TableRows& r = rows[t];
    r.values.resize(r.ids.size() * dim_);
    for (size_t i = 0; i < r.ids.size(); ++i) {
      const std::span<float> out(r.values.data() + i * dim_, dim_);
      if (const float* row = Find(t, r.ids[i]); row != nullptr) {
        std::copy_n(row, dim_, out.data());
        ++found;
      } else {
        model::InitEmbeddingRow(options_.seed, t, r.ids[i], options_.tables[t].hash_buckets, out);
        ++initial;
      }
    }
  }
  counts->memory += found;
  counts->initial += initial;
  return absl::OkStatus();
}

int64_t RowTable::num_rows() const {
  int64_t n = 0;
  for (const Table& t : tables_) n += t.size;
  return n;
}

int64_t RowTable::memory_bytes() const {
  int64_t n = 0;
  for (const Table& t : tables_) {
    n += static_cast<int64_t>(t.slots.capacity() * sizeof(Slot) +
                              t.chunks.size() * kChunkRows * dim_ * sizeof(float) +
                              t.free_rows.capacity() * sizeof(int64_t));
  }
  return n;
}

}  // namespace shadowsync::serving
