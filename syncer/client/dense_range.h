// The range partition of a dense vector over the syncer replicas: part of
// the syncer's contract, shared by its client and its service.
//
// Replica i of S holds [i*n/S, (i+1)*n/S) of the n floats (integer division
// on int64), so ranges differ in length by at most one. A plain value and a
// pure function; thread-safe.
#ifndef SHADOWSYNC_SYNCER_CLIENT_DENSE_RANGE_H_
#define SHADOWSYNC_SYNCER_CLIENT_DENSE_RANGE_H_

#include <cstdint>
#include <string>

namespace shadowsync::syncer {

// A slice [offset, offset + length) of a vector of `total` floats.
struct DenseRange {
  int64_t offset = 0;
  int64_t length = 0;
  int64_t total = 0;

  int64_t end() const { return offset + length; }
  bool operator==(const DenseRange&) const = default;
  // "[0, 250000) of 500000"
  std::string ToString() const;
};

// The range replica `replica` of `replicas` holds of `total` floats.
// REQUIRES: 0 <= replica < replicas, total >= 0.
DenseRange ReplicaRange(int replica, int replicas, int64_t total);

}  // namespace shadowsync::syncer

#endif  // SHADOWSYNC_SYNCER_CLIENT_DENSE_RANGE_H_
