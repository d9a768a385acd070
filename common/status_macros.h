// Status propagation macros. absl at the version Debian 12 ships (20220623)
// has no ABSL_RETURN_IF_ERROR / ABSL_ASSIGN_OR_RETURN, so we define our own.
#ifndef SHADOWSYNC_COMMON_STATUS_MACROS_H_
#define SHADOWSYNC_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SHADOWSYNC_CONCAT_INNER_(a, b) a##b
#define SHADOWSYNC_CONCAT_(a, b) SHADOWSYNC_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define SS_RETURN_IF_ERROR(expr)                              \
  do {                                                        \
    if (absl::Status ss_status_ = (expr); !ss_status_.ok()) { \
      return ss_status_;                                      \
    }                                                         \
  } while (0)

// SS_ASSIGN_OR_RETURN(auto x, Foo()); assigns the value of an
// absl::StatusOr<T> or returns its error.
#define SS_ASSIGN_OR_RETURN(lhs, expr) \
  SS_ASSIGN_OR_RETURN_IMPL_(SHADOWSYNC_CONCAT_(ss_statusor_, __LINE__), lhs, expr)
#define SS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#endif  // SHADOWSYNC_COMMON_STATUS_MACROS_H_
