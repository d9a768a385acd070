// Which rows a parameter server changed since a moment: what a delta export
// (docs/export.md, "Delta exports") streams instead of every row. A write
// (push, import) or an eviction records its row's key, tagged with the open
// generation; Close ends that generation and names the moment by a cursor,
// and a later Close given that cursor returns the keys recorded since.
//
//   ChangeCursor base = *log.Close(nullptr, nullptr);   // with a full export
//   ... pushes call log.Record(table, id) ...
//   std::vector<ChangedRow> rows;
//   ChangeCursor next = *log.Close(&base, &rows);       // with the delta
//
// Nothing is recorded until the first Close, so a server nobody asks for
// deltas pays one relaxed load per write. Memory is bounded: past max_keys
// distinct keys the log forgets them all, and every cursor handed out
// before then fails (the exporter then writes a full export). The log is in
// RAM only, so a restarted server has a new incarnation and the same
// answer. One reader: a Close given a cursor forgets what was recorded up
// to it.
// Thread-safe.
#ifndef SHADOWSYNC_PS_CHANGE_LOG_H_
#define SHADOWSYNC_PS_CHANGE_LOG_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/hash.h"
#include "common/mutex.h"

namespace shadowsync::ps {

// Names the moment a Close ended: the changes up to and including
// `generation` of the log started as `incarnation`.
struct ChangeCursor {
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  bool operator==(const ChangeCursor&) const = default;
};

struct ChangedRow {
  uint32_t slot = 0;
  uint32_t table = 0;
  uint64_t id = 0;
};

class ChangeLog {
 public:
  // `incarnation` must differ between runs of a server: NewIncarnation().
  static uint64_t NewIncarnation();
  ChangeLog(uint64_t incarnation, uint32_t num_slots, int64_t max_keys);

  void Record(uint32_t table, uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // Closes the open generation; the cursor returned names every change
  // recorded before. With `since`, also fills `changed` with every key
  // recorded after it, in (slot, table, id) order, and forgets those up to
  // it. FailedPrecondition naming the cursor if it is not this log's
  // (another incarnation) or its changes were forgotten (max_keys).
  absl::StatusOr<ChangeCursor> Close(const ChangeCursor* since, std::vector<ChangedRow>* changed)
      ABSL_LOCKS_EXCLUDED(mu_);

  int64_t keys() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t incarnation_;
  const uint32_t num_slots_;
  const int64_t max_keys_;
  std::atomic<bool> active_{false};
  mutable Mutex mu_;
  // The open generation; closed ones are below it.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  // Changes in generations up to this one were forgotten: on overflow, or
  // by a Close given a cursor (one reader).
  uint64_t forgotten_through_ ABSL_GUARDED_BY(mu_) = 0;
  struct Key {
    uint32_t table;
    uint64_t id;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return HashId(k.table, k.id); }
  };
  // Each key's newest generation.
  absl::flat_hash_map<Key, uint64_t, KeyHash> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shadowsync::ps

#endif  // SHADOWSYNC_PS_CHANGE_LOG_H_
