#include "jobspec/text_checks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_internal.h"

namespace shadowsync {
namespace job_spec_internal {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

}  // namespace

bool IsDigits(std::string_view s, bool hex) {
  if (s.empty()) {
    return false;
  }
  for (char c : s) {
    if (!(hex ? std::isxdigit(static_cast<unsigned char>(c))
              : std::isdigit(static_cast<unsigned char>(c)))) {
      return false;
    }
  }
  return true;
}

size_t FirstInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // Range of the second byte.
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= text.size()) return i;
      const auto b = static_cast<unsigned char>(text[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return i;
    }
    i += n + 1;
  }
  return std::string_view::npos;
}
bool IsDns1123Label(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLowerAlnum(c) || c == '-'; });
}

bool HasDns1035Shape(std::string_view s) {
  if (s.empty() || !(s.front() >= 'a' && s.front() <= 'z') || !IsLowerAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLowerAlnum(c) || c == '-'; });
}

bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) {
    return false;
  }
  for (absl::string_view part : absl::StrSplit(Av(s), '.')) {
    if (!IsDns1123Label(std::string_view(part.data(), part.size()))) {
      return false;
    }
  }
  return true;
}

bool IsQualifiedNamePart(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool IsQualifiedName(std::string_view key) {
  size_t slash = key.find('/');
  if (slash == std::string_view::npos) {
    return IsQualifiedNamePart(key);
  }
  return IsDns1123Subdomain(key.substr(0, slash)) && IsQualifiedNamePart(key.substr(slash + 1));
}

}  // namespace job_spec_internal

using job_spec_internal::Av;
using job_spec_internal::IsDigits;

absl::StatusOr<Quantity> ParseQuantity(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("not a Kubernetes quantity: \"", Av(text), "\" (examples: 1Gi, 500M, 1.5e9)"));
  };
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    negative = text[i++] == '-';
  }
  const size_t number_start = i;
  size_t digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    ++i, ++digits;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i, ++digits;
    }
  }
  if (digits == 0) {
    return bad();
  }
  const long double number =
      std::strtold(std::string(text.substr(number_start, i - number_start)).c_str(), nullptr);
  const std::string_view suffix = text.substr(i);
  static const std::map<std::string_view, long double> kSuffixes = {
      {"", 1.0L},      {"Ki", 0x1p10L}, {"Mi", 0x1p20L}, {"Gi", 0x1p30L},
      {"Ti", 0x1p40L}, {"Pi", 0x1p50L}, {"Ei", 0x1p60L}, {"n", 1e-9L},
      {"u", 1e-6L},    {"m", 1e-3L},    {"k", 1e3L},     {"M", 1e6L},
      {"G", 1e9L},     {"T", 1e12L},    {"P", 1e15L},    {"E", 1e18L}};
  long double multiplier;
  if (auto it = kSuffixes.find(suffix); it != kSuffixes.end()) {
    multiplier = it->second;
  } else if (suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    std::string_view exponent = suffix.substr(1);
    bool exp_negative = false;
    if (exponent[0] == '+' || exponent[0] == '-') {
      exp_negative = exponent[0] == '-';
      exponent.remove_prefix(1);
    }
    if (!IsDigits(exponent) || exponent.size() > 3) {
      return bad();
    }
    int e = std::stoi(std::string(exponent));
    multiplier = std::pow(10.0L, exp_negative ? -e : e);
  } else {
    return bad();
  }
  // Kubernetes rounds fractional base units up.
  long double value = std::ceil(number * multiplier);
  if (!(value <= 0x1p63L - 1)) {  // Also rejects inf and nan.
    return absl::InvalidArgumentError(absl::StrCat("quantity \"", Av(text), "\" is too large"));
  }
  return Quantity{std::string(text), static_cast<int64_t>(negative ? -value : value)};
}

}  // namespace shadowsync
