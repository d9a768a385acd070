#include "jobspec/yaml_scalar.h"

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "absl/strings/match.h"
#include "jobspec/job_spec_internal.h"
#include "jobspec/text_checks.h"

namespace shadowsync::job_spec_internal {
namespace {

// YAML 1.2 core schema float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsCoreFloat(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    ++i;
  }
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    ++i, ++int_digits;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      ++i, ++frac_digits;
    }
  }
  if (int_digits + frac_digits == 0) {
    return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      ++i;
    }
    if (!IsDigits(s.substr(i))) {
      return false;
    }
    i = s.size();
  }
  return i == s.size();
}

std::optional<json> ParseCoreInt(std::string_view s) {
  int base = 10;
  std::string_view digits = s;
  bool negative = false;
  if (absl::StartsWith(Av(s), "0x")) {
    base = 16;
    digits = s.substr(2);
    if (!IsDigits(digits, true)) {
      return std::nullopt;
    }
  } else if (absl::StartsWith(Av(s), "0o")) {
    base = 8;
    digits = s.substr(2);
    if (!IsDigits(digits) || digits.find_first_of("89") != std::string_view::npos) {
      return std::nullopt;
    }
  } else {
    if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
      negative = digits[0] == '-';
      digits.remove_prefix(1);
    }
    if (!IsDigits(digits)) {
      return std::nullopt;
    }
  }
  uint64_t u = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), u, base);
  if (ec == std::errc() && end == digits.data() + digits.size()) {
    if (!negative) {
      return json(u);
    }
    if (u <= uint64_t{1} << 63) {
      return json(static_cast<int64_t>(0 - u));
    }
  }
  // Too large for 64 bits: keep it as a number so the field reports a range error.
  return json(std::strtod(std::string(s).c_str(), nullptr));
}

}  // namespace

json ResolvePlainScalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    return nullptr;
  }
  if (s == "true" || s == "True" || s == "TRUE") {
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    return false;
  }
  if (std::optional<json> i = ParseCoreInt(s)) {
    return *i;
  }
  if (IsCoreFloat(s)) {
    return std::strtod(s.c_str(), nullptr);
  }
  std::string_view v = s;
  bool negative = false;
  if (!v.empty() && (v[0] == '+' || v[0] == '-')) {
    negative = v[0] == '-';
    v.remove_prefix(1);
  }
  if (v == ".inf" || v == ".Inf" || v == ".INF") {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return s;
}

}  // namespace shadowsync::job_spec_internal
