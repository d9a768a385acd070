// The shard map: which parameter server owns each hash slot, plus an epoch
// that increases with every change. It is the single routing truth
// (docs/resharding.md): clients route by it, servers reject rows of slots they do
// not own, resharding moves slots by publishing new epochs. Immutable value
// type; safe to share.
#ifndef SHADOWSYNC_COMMON_SHARD_MAP_H_
#define SHADOWSYNC_COMMON_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/hash.h"
#include "shadowsync/v1/ps.pb.h"

namespace shadowsync {

// One slot changing owner.
struct SlotMove {
  uint32_t slot = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  bool operator==(const SlotMove&) const = default;
};

class ShardMap {
 public:
  // The largest epoch: exact as a JSON number, and never near overflow
  // (every reshard step adds one).
  static constexpr uint64_t kMaxEpoch = uint64_t{1} << 53;

  // Validates: epoch <= kMaxEpoch, num_slots >= 1, owner.size() == num_slots,
  // every owner index < addresses.size(), and at least one address.
  // InvalidArgument names the offending field ("shard map: owner[17] = 5 but
  // only 3 servers").
  static absl::StatusOr<ShardMap> Create(uint64_t epoch, uint32_t num_slots,
                                         std::vector<uint32_t> owner,
                                         std::vector<std::string> addresses);
  // Contiguous, balanced ranges: slot s belongs to server s * P / num_slots.
  static ShardMap Balanced(uint32_t num_slots, std::vector<std::string> addresses,
                           uint64_t epoch = 1);
  static absl::StatusOr<ShardMap> FromProto(const v1::ShardMap& proto);
  v1::ShardMap ToProto() const;

  uint64_t epoch() const { return epoch_; }
  uint32_t num_slots() const { return static_cast<uint32_t>(owner_.size()); }
  int num_servers() const { return static_cast<int>(addresses_.size()); }
  const std::vector<std::string>& addresses() const { return addresses_; }
  uint32_t owner_of_slot(uint32_t slot) const { return owner_[slot]; }
  uint32_t OwnerOf(uint32_t table, uint64_t id) const {
    return owner_[SlotOf(table, id, num_slots())];
  }
  std::vector<uint32_t> SlotsOwnedBy(uint32_t server) const;

  // The moves that take this map to `num_servers` servers with every server
  // owning floor or ceil of num_slots / num_servers slots, moving as few
  // slots as possible: scale-out moves slots only onto the new servers,
  // scale-in only off the removed (highest-index) ones.
  std::vector<SlotMove> PlanRebalance(int num_servers) const;
  // This map with `moves` applied, `addresses` as the server list and the
  // epoch advanced by one.
  absl::StatusOr<ShardMap> WithMoves(const std::vector<SlotMove>& moves,
                                     std::vector<std::string> addresses) const;

  bool operator==(const ShardMap&) const = default;

 private:
  ShardMap() = default;
  uint64_t epoch_ = 0;
  std::vector<uint32_t> owner_;
  std::vector<std::string> addresses_;
};

}  // namespace shadowsync

#endif  // SHADOWSYNC_COMMON_SHARD_MAP_H_
