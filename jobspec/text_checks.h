// Private to jobspec/: checks of the text a job spec holds: well-formed
// UTF-8, digit strings, DNS names and Kubernetes label keys. ParseQuantity
// (declared in job_spec.h: it is public) is defined in text_checks.cc.
// Thread-safe: pure functions.
#ifndef SHADOWSYNC_JOBSPEC_TEXT_CHECKS_H_
#define SHADOWSYNC_JOBSPEC_TEXT_CHECKS_H_

#include <cstddef>
#include <string_view>

namespace shadowsync::job_spec_internal {

// Non-empty and all decimal (or, with `hex`, hexadecimal) digits.
bool IsDigits(std::string_view s, bool hex = false);

// The offset of the first byte of `text` that is not well-formed UTF-8
// (RFC 3629: no overlongs, no surrogates, at most U+10FFFF), or npos.
size_t FirstInvalidUtf8(std::string_view text);

// RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63.
bool IsDns1123Label(std::string_view s);

// RFC 1035 label without its length limit: [a-z]([-a-z0-9]*[a-z0-9])?.
bool HasDns1035Shape(std::string_view s);

// RFC 1123 subdomain: dot-separated RFC 1123 labels, at most 253.
bool IsDns1123Subdomain(std::string_view s);

// Label/annotation name part: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], at most 63.
bool IsQualifiedNamePart(std::string_view s);

// Label/annotation key: [<DNS-1123 subdomain>/]<name part>.
bool IsQualifiedName(std::string_view key);

}  // namespace shadowsync::job_spec_internal

#endif  // SHADOWSYNC_JOBSPEC_TEXT_CHECKS_H_
