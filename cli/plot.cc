#include "cli/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shadowsync::cli {
namespace {

// Layout, in pixels.
constexpr double kMarginLeft = 78;  // y tick labels and the rotated y axis title
constexpr double kMarginRight = 24;
constexpr double kChartTitleHeight = 34;
constexpr double kTopPadding = 10;   // when there is no chart title
constexpr double kPanelHeader = 22;  // the panel's title line
constexpr double kLegendRow = 18;
constexpr double kLegendGap = 6;          // between a legend and its plot
constexpr double kPanelGap = 16;          // below a panel that is not the last
constexpr double kXAxisBlock = 48;        // x tick labels and the x axis title
constexpr double kLegendCharWidth = 6.6;  // estimate at font-size 11
constexpr double kLegendSwatch = 22;

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr const char* kGridColor = "#e4e4e4";
constexpr const char* kAxisColor = "#444444";
constexpr const char* kTextColor = "#222222";

std::string Escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A coordinate, always with one decimal.
std::string Px(double v) { return absl::StrFormat("%.1f", std::isfinite(v) ? v : 0.0); }

std::string ColorOr(const std::string& color, size_t index) {
  return Escape(color.empty() ? kPalette[index % std::size(kPalette)] : color);
}

// An axis: its ticks span [lo, hi] exactly, so no division by zero.
struct Axis {
  std::vector<double> ticks;
  double lo = 0, hi = 1, step = 1;
  double Fraction(double v) const { return (v - lo) / (hi - lo); }
};

// Ticks covering [lo, hi] widened by `pad` of its span on each side.
// `lo > hi` means no data: [0, 1].
Axis MakeAxis(double lo, double hi, double pad, int target) {
  if (lo > hi) lo = 0, hi = 1;
  const double span = hi - lo;
  lo -= span * pad;
  hi += span * pad;
  Axis axis;
  axis.ticks = NiceTicks(lo, hi, target);
  if (axis.ticks.size() < 2 || !(axis.ticks.back() > axis.ticks.front())) {
    axis.ticks = {0, 1};  // only for values near the limits of double
  }
  axis.lo = axis.ticks.front();
  axis.hi = axis.ticks.back();
  axis.step = axis.ticks[1] - axis.ticks[0];
  return axis;
}

struct Range {
  double lo = 1, hi = 0;  // empty
  void Add(double v) {
    if (!std::isfinite(v)) return;
    if (lo > hi) {
      lo = hi = v;
    } else {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
};

bool Finite(double x, double y) { return std::isfinite(x) && std::isfinite(y); }

enum class LegendKind { kLine, kDot, kDashed };
struct LegendItem {
  LegendKind kind;
  std::string label;  // not escaped
  std::string color;  // escaped
};

std::vector<LegendItem> LegendOf(const PlotPanel& panel) {
  std::vector<LegendItem> items;
  for (size_t i = 0; i < panel.series.size(); ++i) {
    items.push_back({LegendKind::kLine, panel.series[i].label, ColorOr(panel.series[i].color, i)});
  }
  for (size_t i = 0; i < panel.markers.size(); ++i) {
    const PlotMarker& m = panel.markers[i];
    if (!Finite(m.x, m.y)) continue;
    items.push_back({LegendKind::kDot, absl::StrCat(m.label, " ", TickLabel(m.y, 0)),
                     ColorOr(m.color, panel.series.size() + i)});
  }
  for (const PlotLevel& l : panel.levels) {
    if (!std::isfinite(l.y)) continue;
    items.push_back({LegendKind::kDashed, absl::StrCat(l.label, " ", TickLabel(l.y, 0)),
                     Escape(l.color.empty() ? "#555555" : l.color)});
  }
  return items;
}

double LegendItemWidth(const LegendItem& item) {
  return kLegendSwatch + 6 + item.label.size() * kLegendCharWidth + 16;
}

// Rows of legend items flowed into `width`; no rows for one item or none.
std::vector<std::vector<LegendItem>> LegendRows(const PlotPanel& panel, double width) {
  std::vector<LegendItem> items = LegendOf(panel);
  std::vector<std::vector<LegendItem>> rows;
  if (items.size() < 2) return rows;
  double used = 0;
  for (LegendItem& item : items) {
    const double w = LegendItemWidth(item);
    if (rows.empty() || (used + w > width && used > 0)) {
      rows.emplace_back();
      used = 0;
    }
    rows.back().push_back(std::move(item));
    used += w;
  }
  return rows;
}

double LegendHeight(const std::vector<std::vector<LegendItem>>& rows) {
  return rows.empty() ? 0 : rows.size() * kLegendRow + kLegendGap;
}

void AppendLegend(const std::vector<std::vector<LegendItem>>& rows, double left, double top,
                  std::string& svg) {
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = top + r * kLegendRow + kLegendRow / 2;
    double x = left;
    for (const LegendItem& item : rows[r]) {
      switch (item.kind) {
        case LegendKind::kLine:
          absl::StrAppend(&svg, "<line x1=\"", Px(x), "\" y1=\"", Px(y), "\" x2=\"",
                          Px(x + kLegendSwatch), "\" y2=\"", Px(y), "\" stroke=\"", item.color,
                          "\" stroke-width=\"2.5\"/>\n");
          break;
        case LegendKind::kDashed:
          absl::StrAppend(&svg, "<line x1=\"", Px(x), "\" y1=\"", Px(y), "\" x2=\"",
                          Px(x + kLegendSwatch), "\" y2=\"", Px(y), "\" stroke=\"", item.color,
                          "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n");
          break;
        case LegendKind::kDot:
          absl::StrAppend(&svg, "<circle cx=\"", Px(x + kLegendSwatch / 2), "\" cy=\"", Px(y),
                          "\" r=\"4.5\" fill=\"", item.color,
                          "\" stroke=\"white\" stroke-width=\"1.5\"/>\n");
          break;
      }
      absl::StrAppend(&svg, "<text x=\"", Px(x + kLegendSwatch + 6), "\" y=\"", Px(y + 4),
                      "\" font-size=\"11\">", Escape(item.label), "</text>\n");
      x += LegendItemWidth(item);
    }
  }
}

// Trailing zeros and a trailing point dropped: "28.900" -> "28.9", "2.0" -> "2".
std::string TrimZeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (lo > hi) std::swap(lo, hi);
  target = std::clamp(target, 2, 50);
  const double magnitude = std::max(std::abs(lo), std::abs(hi));
  if (hi - lo <= magnitude * 1e-9) {  // lo == hi, or too close to tell apart
    const double mid = lo / 2 + hi / 2;
    const double half = magnitude > 0 ? magnitude * 0.1 : 1;
    lo = mid - half;
    hi = mid + half;
  }
  const double span = hi - lo;
  if (!std::isfinite(span) || span <= 0) return {lo, hi};
  const double raw = span / target;
  int exponent = static_cast<int>(std::floor(std::log10(raw)));
  const double fraction = raw / std::pow(10.0, exponent);  // in [1, 10)
  int mantissa = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  if (mantissa == 10) mantissa = 1, ++exponent;
  if (exponent < -300 || exponent > 300) return {lo, hi};
  // k * mantissa * 10^exponent, computed so that e.g. 3 x 0.1 is exactly 0.3.
  const double power = std::pow(10.0, std::abs(exponent));
  auto tick = [&](int64_t k) {
    if (k == 0) return 0.0;
    const double km = static_cast<double>(k) * mantissa;
    return exponent < 0 ? km / power : km * power;
  };
  const double step = tick(1);
  auto first = static_cast<int64_t>(std::floor(lo / step));
  if (tick(first + 1) <= lo) ++first;
  if (tick(first) > lo) --first;
  auto last = static_cast<int64_t>(std::ceil(hi / step));
  if (tick(last - 1) >= hi) --last;
  if (tick(last) < hi) ++last;
  std::vector<double> ticks;
  for (int64_t k = first; k <= last; ++k) ticks.push_back(tick(k));
  return ticks;
}

std::string TickLabel(double value, double step) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  const bool by_step = std::isfinite(step) && step > 0;
  if (value == 0 || (by_step && std::abs(value) < step * 1e-6)) return "0";
  if (!by_step) {  // rounded to 3 significant digits first: 999999 -> "1M", not "1e+03k"
    double rounded = value;
    if (absl::SimpleAtod(absl::StrFormat("%.2e", value), &rounded)) value = rounded;
  }
  struct Unit {
    double scale;
    const char* suffix;
  };
  constexpr Unit kUnits[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  Unit unit = {1, ""};
  for (const Unit& u : kUnits) {
    // With a step, a suffix only where it needs at most 3 decimals.
    if (std::abs(value) >= u.scale && (!by_step || step >= u.scale / 1000)) {
      unit = u;
      break;
    }
  }
  const double scaled = value / unit.scale;
  if (!by_step) return absl::StrCat(TrimZeros(absl::StrFormat("%.3g", scaled)), unit.suffix);
  const int decimals =
      std::max(0, static_cast<int>(std::ceil(-std::log10(step / unit.scale) - 1e-9)));
  if (decimals > 9) {  // tiny values: as many significant digits as the step needs
    const int digits = std::clamp(
        static_cast<int>(std::floor(std::log10(std::abs(value))) - std::floor(std::log10(step))) +
            1,
        1, 15);
    return absl::StrFormat("%.*g", digits, value);
  }
  return absl::StrCat(TrimZeros(absl::StrFormat("%.*f", decimals, scaled)), unit.suffix);
}

std::string RenderSvgChart(const PlotOptions& options, const std::vector<PlotPanel>& panels) {
  const double width = std::max(options.width, 320);
  const double panel_height = std::max(options.panel_height, 80);
  const double left = kMarginLeft, right = width - kMarginRight;
  const double plot_width = right - left;

  // The shared x axis covers every panel's points and markers.
  Range xs;
  for (const PlotPanel& panel : panels) {
    for (const PlotSeries& s : panel.series) {
      for (const auto& [x, y] : s.points) {
        if (Finite(x, y)) xs.Add(x);
      }
    }
    for (const PlotMarker& m : panel.markers) {
      if (Finite(m.x, m.y)) xs.Add(m.x);
    }
  }
  const Axis x_axis =
      MakeAxis(xs.lo, xs.hi, 0, std::clamp(static_cast<int>(plot_width / 90), 3, 12));
  auto sx = [&](double x) { return left + x_axis.Fraction(x) * plot_width; };

  // Vertical layout.
  const double chart_top = options.title.empty() ? kTopPadding : kChartTitleHeight;
  std::vector<std::vector<std::vector<LegendItem>>> legends;
  double height = chart_top;
  for (size_t p = 0; p < panels.size(); ++p) {
    legends.push_back(LegendRows(panels[p], plot_width));
    height += kPanelHeader + LegendHeight(legends.back()) + panel_height;
    height += p + 1 < panels.size() ? kPanelGap : kXAxisBlock;
  }
  if (panels.empty()) height += 40;

  std::string svg;
  absl::StrAppend(&svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", Px(width),
                  "\" height=\"", Px(height), "\" viewBox=\"0 0 ", Px(width), " ", Px(height),
                  "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" fill=\"",
                  kTextColor, "\">\n");
  absl::StrAppend(&svg, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  if (!options.title.empty()) {
    absl::StrAppend(&svg, "<text x=\"", Px(width / 2), "\" y=\"22\" text-anchor=\"middle\"",
                    " font-size=\"15\" font-weight=\"bold\">", Escape(options.title), "</text>\n");
  }
  if (panels.empty()) {
    absl::StrAppend(&svg, "<text x=\"", Px(width / 2), "\" y=\"", Px(chart_top + 24),
                    "\" text-anchor=\"middle\" fill=\"#888888\">no data</text>\n</svg>\n");
    return svg;
  }

  double top = chart_top;
  for (size_t p = 0; p < panels.size(); ++p) {
    const PlotPanel& panel = panels[p];
    const bool last_panel = p + 1 == panels.size();
    absl::StrAppend(&svg, "<g class=\"panel\">\n");
    if (!panel.title.empty()) {
      absl::StrAppend(&svg, "<text x=\"", Px(left), "\" y=\"", Px(top + 15),
                      "\" font-size=\"13\" font-weight=\"bold\">", Escape(panel.title),
                      "</text>\n");
    }
    top += kPanelHeader;
    AppendLegend(legends[p], left, top, svg);
    top += LegendHeight(legends[p]);
    const double bottom = top + panel_height;

    // The y axis covers series, markers and levels, padded by 6% each side.
    Range ys;
    for (const PlotSeries& s : panel.series) {
      for (const auto& [x, y] : s.points) {
        if (Finite(x, y)) ys.Add(y);
      }
    }
    for (const PlotMarker& m : panel.markers) {
      if (Finite(m.x, m.y)) ys.Add(m.y);
    }
    for (const PlotLevel& l : panel.levels) ys.Add(l.y);
    if (ys.lo == ys.hi) {  // constant: widen around the value
      const double half = ys.lo != 0 ? std::abs(ys.lo) * 0.1 : 1;
      ys.lo -= half;
      ys.hi += half;
    }
    const Axis y_axis =
        MakeAxis(ys.lo, ys.hi, 0.06, std::clamp(static_cast<int>(panel_height / 45), 3, 10));
    auto sy = [&](double y) { return bottom - y_axis.Fraction(y) * panel_height; };

    // Gridlines, then the axes over them.
    for (double t : y_axis.ticks) {
      absl::StrAppend(&svg, "<line x1=\"", Px(left), "\" y1=\"", Px(sy(t)), "\" x2=\"", Px(right),
                      "\" y2=\"", Px(sy(t)), "\" stroke=\"", kGridColor, "\"/>\n");
    }
    for (double t : x_axis.ticks) {
      absl::StrAppend(&svg, "<line x1=\"", Px(sx(t)), "\" y1=\"", Px(top), "\" x2=\"", Px(sx(t)),
                      "\" y2=\"", Px(bottom), "\" stroke=\"", kGridColor,
                      "\" stroke-dasharray=\"2 3\"/>\n");
    }
    absl::StrAppend(&svg, "<rect x=\"", Px(left), "\" y=\"", Px(top), "\" width=\"", Px(plot_width),
                    "\" height=\"", Px(panel_height), "\" fill=\"none\" stroke=\"#cccccc\"/>\n");
    absl::StrAppend(&svg, "<line x1=\"", Px(left), "\" y1=\"", Px(top), "\" x2=\"", Px(left),
                    "\" y2=\"", Px(bottom), "\" stroke=\"", kAxisColor, "\"/>\n");
    absl::StrAppend(&svg, "<line x1=\"", Px(left), "\" y1=\"", Px(bottom), "\" x2=\"", Px(right),
                    "\" y2=\"", Px(bottom), "\" stroke=\"", kAxisColor, "\"/>\n");
    for (double t : y_axis.ticks) {
      absl::StrAppend(&svg, "<line x1=\"", Px(left - 4), "\" y1=\"", Px(sy(t)), "\" x2=\"",
                      Px(left), "\" y2=\"", Px(sy(t)), "\" stroke=\"", kAxisColor, "\"/>\n");
      absl::StrAppend(&svg, "<text x=\"", Px(left - 7), "\" y=\"", Px(sy(t) + 4),
                      "\" text-anchor=\"end\" font-size=\"11\">", TickLabel(t, y_axis.step),
                      "</text>\n");
    }
    for (double t : x_axis.ticks) {
      absl::StrAppend(&svg, "<line x1=\"", Px(sx(t)), "\" y1=\"", Px(bottom), "\" x2=\"", Px(sx(t)),
                      "\" y2=\"", Px(bottom + 4), "\" stroke=\"", kAxisColor, "\"/>\n");
    }
    if (!panel.y_unit.empty()) {
      const double cy = (top + bottom) / 2;
      absl::StrAppend(&svg, "<text x=\"16\" y=\"", Px(cy), "\" transform=\"rotate(-90 16 ", Px(cy),
                      ")\" text-anchor=\"middle\">", Escape(panel.y_unit), "</text>\n");
    }

    // Levels under the series, labelled at their left end.
    for (const PlotLevel& l : panel.levels) {
      if (!std::isfinite(l.y)) continue;
      const std::string color = Escape(l.color.empty() ? "#555555" : l.color);
      absl::StrAppend(&svg, "<line x1=\"", Px(left), "\" y1=\"", Px(sy(l.y)), "\" x2=\"", Px(right),
                      "\" y2=\"", Px(sy(l.y)), "\" stroke=\"", color,
                      "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n");
      absl::StrAppend(&svg, "<text x=\"", Px(left + 6), "\" y=\"", Px(sy(l.y) - 5),
                      "\" font-size=\"11\" fill=\"", color, "\">", Escape(l.label), " ",
                      TickLabel(l.y, 0), "</text>\n");
    }
    for (size_t i = 0; i < panel.series.size(); ++i) {
      const PlotSeries& s = panel.series[i];
      const std::string color = ColorOr(s.color, i);
      std::vector<std::pair<double, double>> finite;
      for (const auto& [x, y] : s.points) {
        if (Finite(x, y)) finite.emplace_back(sx(x), sy(y));
      }
      if (finite.size() == 1) {
        absl::StrAppend(&svg, "<circle cx=\"", Px(finite[0].first), "\" cy=\"",
                        Px(finite[0].second), "\" r=\"3\" fill=\"", color, "\"/>\n");
      } else if (finite.size() > 1) {
        absl::StrAppend(&svg, "<polyline fill=\"none\" stroke=\"", color,
                        "\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"");
        for (size_t k = 0; k < finite.size(); ++k) {
          absl::StrAppend(&svg, k > 0 ? " " : "", Px(finite[k].first), ",", Px(finite[k].second));
        }
        absl::StrAppend(&svg, "\"/>\n");
      }
    }
    // Markers on top. Labelled beside the dot (towards the middle) only
    // without a legend: beside the dot the label may cover the series.
    for (size_t i = 0; i < panel.markers.size(); ++i) {
      const PlotMarker& m = panel.markers[i];
      if (!Finite(m.x, m.y)) continue;
      const std::string color = ColorOr(m.color, panel.series.size() + i);
      const double cx = sx(m.x), cy = sy(m.y);
      const bool right_half = cx > left + plot_width / 2;
      const bool top_quarter = cy < top + panel_height / 4;
      absl::StrAppend(&svg, "<circle cx=\"", Px(cx), "\" cy=\"", Px(cy), "\" r=\"5\" fill=\"",
                      color, "\" stroke=\"white\" stroke-width=\"1.5\"/>\n");
      if (!legends[p].empty()) continue;
      absl::StrAppend(&svg, "<text x=\"", Px(right_half ? cx - 9 : cx + 9), "\" y=\"",
                      Px(top_quarter ? cy + 17 : cy - 9), "\" text-anchor=\"",
                      right_half ? "end" : "start", "\" font-size=\"11\" fill=\"", color, "\">",
                      Escape(m.label), " ", TickLabel(m.y, 0), "</text>\n");
    }
    absl::StrAppend(&svg, "</g>\n");
    top = bottom;
    if (!last_panel) {
      top += kPanelGap;
      continue;
    }
    // The shared x axis, under the last panel.
    for (double t : x_axis.ticks) {
      absl::StrAppend(&svg, "<text x=\"", Px(sx(t)), "\" y=\"", Px(bottom + 17),
                      "\" text-anchor=\"middle\" font-size=\"11\">", TickLabel(t, x_axis.step),
                      "</text>\n");
    }
    if (!options.x_label.empty()) {
      absl::StrAppend(&svg, "<text x=\"", Px(left + plot_width / 2), "\" y=\"", Px(bottom + 38),
                      "\" text-anchor=\"middle\">", Escape(options.x_label), "</text>\n");
    }
  }
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

}  // namespace shadowsync::cli
