#include "common/shard_map.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shadowsync {

absl::StatusOr<ShardMap> ShardMap::Create(uint64_t epoch, uint32_t num_slots,
                                          std::vector<uint32_t> owner,
                                          std::vector<std::string> addresses) {
  if (epoch > kMaxEpoch) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard map: epoch = ", epoch, ", must be <= 2^53 (", kMaxEpoch, ")"));
  }
  if (num_slots < 1) {
    return absl::InvalidArgumentError("shard map: num_slots = 0, must be >= 1");
  }
  if (addresses.empty()) {
    return absl::InvalidArgumentError("shard map: addresses is empty, need at least one server");
  }
  if (owner.size() != num_slots) {
    return absl::InvalidArgumentError(absl::StrCat("shard map: owner has ", owner.size(),
                                                   " entries but num_slots = ", num_slots));
  }
  for (size_t s = 0; s < owner.size(); ++s) {
    if (owner[s] >= addresses.size()) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: owner[", s, "] = ", owner[s],
                                                     " but only ", addresses.size(), " servers"));
    }
  }
  ShardMap map;
  map.epoch_ = epoch;
  map.owner_ = std::move(owner);
  map.addresses_ = std::move(addresses);
  return map;
}

ShardMap ShardMap::Balanced(uint32_t num_slots, std::vector<std::string> addresses,
                            uint64_t epoch) {
  ShardMap map;
  map.epoch_ = epoch;
  map.owner_.resize(num_slots);
  const uint64_t p = addresses.size();
  for (uint32_t s = 0; s < num_slots; ++s) {
    map.owner_[s] = static_cast<uint32_t>(uint64_t{s} * p / num_slots);
  }
  map.addresses_ = std::move(addresses);
  return map;
}

absl::StatusOr<ShardMap> ShardMap::FromProto(const v1::ShardMap& proto) {
  return Create(proto.epoch(), proto.num_slots(),
                std::vector<uint32_t>(proto.owner().begin(), proto.owner().end()),
                std::vector<std::string>(proto.addresses().begin(), proto.addresses().end()));
}

v1::ShardMap ShardMap::ToProto() const {
  v1::ShardMap proto;
  proto.set_epoch(epoch_);
  proto.set_num_slots(num_slots());
  proto.mutable_owner()->Add(owner_.begin(), owner_.end());
  for (const std::string& a : addresses_) proto.add_addresses(a);
  return proto;
}

std::vector<uint32_t> ShardMap::SlotsOwnedBy(uint32_t server) const {
  std::vector<uint32_t> slots;
  for (uint32_t s = 0; s < owner_.size(); ++s) {
    if (owner_[s] == server) slots.push_back(s);
  }
  return slots;
}

// Target counts: every server of [0, num_servers) gets floor = S / P slots,
// and r = S mod P of them one more. Moves = sum over servers of the slots they
// hold beyond their target, so the extra slots go first to servers already
// holding more than floor (each saves one move), highest count first; the rest
// go to the servers holding fewest (new servers on scale-out), which would
// receive slots anyway. Donors give away their highest-numbered slots;
// receivers take them in server order.
std::vector<SlotMove> ShardMap::PlanRebalance(int num_servers) const {
  if (num_servers < 1) return {};
  const uint32_t p = static_cast<uint32_t>(num_servers);
  const uint32_t total = num_slots();
  const uint32_t servers = std::max<uint32_t>(p, static_cast<uint32_t>(addresses_.size()));
  std::vector<std::vector<uint32_t>> held(servers);
  for (uint32_t s = 0; s < total; ++s) held[owner_[s]].push_back(s);

  const uint32_t floor = total / p;
  const uint32_t extra = total % p;
  std::vector<uint32_t> target(servers, 0);
  std::vector<uint32_t> order(p);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const bool a_over = held[a].size() > floor;
    const bool b_over = held[b].size() > floor;
    if (a_over != b_over) return a_over;
    return a_over ? held[a].size() > held[b].size() : held[a].size() < held[b].size();
  });
  for (uint32_t i = 0; i < p; ++i) target[order[i]] = floor + (i < extra ? 1 : 0);

  // Slots leaving their owner, in donor order; each donor's highest slots first.
  std::vector<std::pair<uint32_t, uint32_t>> leaving;  // (slot, from)
  for (uint32_t server = 0; server < servers; ++server) {
    const std::vector<uint32_t>& slots = held[server];
    for (size_t k = target[server]; k < slots.size(); ++k) {
      leaving.emplace_back(slots[slots.size() - 1 - (k - target[server])], server);
    }
  }
  std::vector<SlotMove> moves;
  moves.reserve(leaving.size());
  size_t next = 0;
  for (uint32_t server = 0; server < p; ++server) {
    for (size_t k = held[server].size(); k < target[server]; ++k) {
      const auto [slot, from] = leaving[next++];
      moves.push_back(SlotMove{.slot = slot, .from = from, .to = server});
    }
  }
  return moves;
}

absl::StatusOr<ShardMap> ShardMap::WithMoves(const std::vector<SlotMove>& moves,
                                             std::vector<std::string> addresses) const {
  std::vector<uint32_t> owner = owner_;
  for (size_t i = 0; i < moves.size(); ++i) {
    const SlotMove& m = moves[i];
    if (m.slot >= owner.size()) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: moves[", i, "].slot = ", m.slot,
                                                     " but num_slots = ", owner.size()));
    }
    if (owner[m.slot] != m.from) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map: moves[", i, "].from = ", m.from, " but slot ", m.slot,
                       " is owned by ", owner[m.slot], i > 0 ? " (after earlier moves)" : ""));
    }
    if (m.to >= addresses.size()) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: moves[", i, "].to = ", m.to,
                                                     " but only ", addresses.size(), " servers"));
    }
    owner[m.slot] = m.to;
  }
  return Create(epoch_ + 1, num_slots(), std::move(owner), std::move(addresses));
}

}  // namespace shadowsync
