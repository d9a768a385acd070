#include "ps/change_log.h"

#include <algorithm>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace shadowsync::ps {

uint64_t ChangeLog::NewIncarnation() {
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

ChangeLog::ChangeLog(uint64_t incarnation, uint32_t num_slots, int64_t max_keys)
    : incarnation_(incarnation), num_slots_(num_slots), max_keys_(max_keys) {}

void ChangeLog::Record(uint32_t table, uint64_t id) {
  if (!active_.load(std::memory_order_relaxed)) return;
  MutexLock lock(&mu_);
  keys_[Key{table, id}] = generation_;
  if (static_cast<int64_t>(keys_.size()) > max_keys_) {
    // Every cursor up to the open generation now misses a change.
    keys_.clear();
    forgotten_through_ = generation_;
  }
}

absl::StatusOr<ChangeCursor> ChangeLog::Close(const ChangeCursor* since,
                                              std::vector<ChangedRow>* changed) {
  MutexLock lock(&mu_);
  if (since != nullptr) {
    if (since->incarnation != incarnation_) {
      return absl::FailedPreconditionError(
          absl::StrCat("changes since generation ", since->generation, " of incarnation ",
                       since->incarnation, ": this server is incarnation ", incarnation_,
                       " (it restarted since), and does not know them"));
    }
    if (since->generation >= generation_ || since->generation < forgotten_through_ ||
        !active_.load(std::memory_order_relaxed)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "changes since generation ", since->generation,
          ": this server no longer knows them (it forgot those through generation ",
          forgotten_through_, ", having been asked for a later cursor or having reached its ",
          max_keys_, " changed keys; the open generation is ", generation_, ")"));
    }
    // One reader: an older cursor's changes are gone from here on.
    forgotten_through_ = since->generation;
    changed->clear();
    for (auto it = keys_.begin(); it != keys_.end();) {
      if (it->second <= since->generation) {
        keys_.erase(it++);
        continue;
      }
      changed->push_back(
          {SlotOf(it->first.table, it->first.id, num_slots_), it->first.table, it->first.id});
      ++it;
    }
    std::sort(changed->begin(), changed->end(), [](const ChangedRow& a, const ChangedRow& b) {
      return std::tie(a.slot, a.table, a.id) < std::tie(b.slot, b.table, b.id);
    });
  }
  active_.store(true, std::memory_order_relaxed);
  return ChangeCursor{incarnation_, generation_++};
}

int64_t ChangeLog::keys() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(keys_.size());
}

}  // namespace shadowsync::ps
