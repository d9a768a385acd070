#include "syncer/client/dense_range.h"

#include "absl/strings/str_cat.h"

namespace shadowsync::syncer {

std::string DenseRange::ToString() const {
  return absl::StrCat("[", offset, ", ", end(), ") of ", total);
}

DenseRange ReplicaRange(int replica, int replicas, int64_t total) {
  const int64_t begin = static_cast<int64_t>(replica) * total / replicas;
  const int64_t end = static_cast<int64_t>(replica + 1) * total / replicas;
  return DenseRange{.offset = begin, .length = end - begin, .total = total};
}

}  // namespace shadowsync::syncer
