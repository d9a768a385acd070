#include "jobspec/job_spec_internal.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shadowsync::job_spec_internal {
namespace {

constexpr size_t kMaxReportedProblems = 20;

std::string FormatBound(double b, bool integral) {
  return integral ? absl::StrCat(static_cast<int64_t>(b)) : absl::StrCat(b);
}

std::optional<int> LineOf(const Problem& p, const LineMap* lines) {
  if (lines == nullptr) {
    return std::nullopt;
  }
  if (p.line) {
    return p.line;
  }
  const std::string& key = p.line_path ? *p.line_path : p.path;
  auto it = lines->find(key);
  if (it == lines->end()) {
    return std::nullopt;
  }
  return it->second;
}

}  // namespace

std::string Join(std::string_view parent, std::string_view name) {
  return parent.empty() ? std::string(name) : absl::StrCat(Av(parent), ".", Av(name));
}

std::string Index(std::string_view parent, size_t i) {
  return absl::StrCat(Av(parent), "[", i, "]");
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string RangeText(const FieldInfo& f, bool integral) {
  if (f.min && f.max) {
    return absl::StrCat("in ", f.exclusive_min ? "(" : "[", FormatBound(*f.min, integral), ", ",
                        FormatBound(*f.max, integral), f.exclusive_max ? ")" : "]");
  }
  if (f.min) {
    return absl::StrCat(f.exclusive_min ? "> " : ">= ", FormatBound(*f.min, integral));
  }
  if (f.max) {
    return absl::StrCat(f.exclusive_max ? "< " : "<= ", FormatBound(*f.max, integral));
  }
  return "";
}

std::string FormatProblems(const Problems& problems, std::string_view source,
                           const LineMap* lines) {
  std::vector<std::pair<std::optional<int>, const Problem*>> sorted;
  for (const Problem& p : problems) {
    sorted.emplace_back(LineOf(p, lines), &p);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.first.value_or(std::numeric_limits<int>::max()) <
           b.first.value_or(std::numeric_limits<int>::max());
  });
  std::vector<std::string> out;
  for (const auto& [line, p] : sorted) {
    if (out.size() == kMaxReportedProblems) {
      out.push_back(
          absl::StrCat("... and ", sorted.size() - kMaxReportedProblems, " more problems"));
      break;
    }
    std::string prefix;
    if (line) {
      prefix = absl::StrCat(Av(source), ":", *line, ": ");
    } else if (!source.empty()) {
      prefix = absl::StrCat(Av(source), ": ");
    }
    out.push_back(p->path.empty() ? absl::StrCat(prefix, p->message)
                                  : absl::StrCat(prefix, p->path, ": ", p->message));
  }
  return absl::StrJoin(out, "\n");
}

}  // namespace shadowsync::job_spec_internal
