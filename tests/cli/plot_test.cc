#include "cli/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shadowsync::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Empty when `svg` is well-formed in the subset the renderer writes: every
// <tag> is closed in order or self-closing, attribute values are quoted, and
// '&' only starts one of the five XML entities; else what is wrong.
std::string XmlProblem(const std::string& svg) {
  std::vector<std::string> open;
  size_t i = 0;
  bool root_seen = false;
  while (i < svg.size()) {
    const char c = svg[i];
    if (c == '&') {
      const size_t semi = svg.find(';', i);
      const std::string entity = semi == std::string::npos ? "" : svg.substr(i, semi - i + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" &&
          entity != "&apos;") {
        return "bad entity at " + std::to_string(i);
      }
      i = semi + 1;
      continue;
    }
    if (c == '>') return "stray '>' at " + std::to_string(i);
    if (c != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(c))) {
        return "text outside the root at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    // A tag: scan to its '>' outside quotes.
    size_t j = i + 1;
    char quote = 0;
    for (; j < svg.size(); ++j) {
      if (quote != 0) {
        if (svg[j] == quote) quote = 0;
        if (svg[j] == '<') return "'<' in an attribute at " + std::to_string(j);
      } else if (svg[j] == '"' || svg[j] == '\'') {
        quote = svg[j];
      } else if (svg[j] == '<') {
        return "'<' inside a tag at " + std::to_string(j);
      } else if (svg[j] == '>') {
        break;
      }
    }
    if (j >= svg.size()) return "unterminated tag at " + std::to_string(i);
    const std::string body = svg.substr(i + 1, j - i - 1);
    i = j + 1;
    if (body.empty()) return "empty tag";
    if (body[0] == '/') {
      const std::string name = body.substr(1);
      if (open.empty() || open.back() != name) return "unmatched </" + name + ">";
      open.pop_back();
      continue;
    }
    const size_t name_end = body.find_first_of(" \t\n/");
    const std::string name = body.substr(0, name_end);
    if (name.empty() || !std::isalpha(static_cast<unsigned char>(name[0]))) {
      return "bad tag name in <" + body + ">";
    }
    if (open.empty()) {
      if (root_seen) return "second root <" + name + ">";
      root_seen = true;
    }
    if (body.back() != '/') open.push_back(name);
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (!root_seen) return "no root element";
  return "";
}

bool IsNiceStep(double step) {
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  for (double m : {1.0, 2.0, 5.0}) {
    if (std::abs(mantissa - m) < 1e-6) return true;
  }
  return false;
}

// The properties every NiceTicks answer must have.
void ExpectNiceTicks(double lo, double hi, int target) {
  SCOPED_TRACE(::testing::Message() << "NiceTicks(" << lo << ", " << hi << ", " << target << ")");
  const std::vector<double> ticks = NiceTicks(lo, hi, target);
  ASSERT_GE(ticks.size(), 2u);
  EXPECT_LE(ticks.size(), static_cast<size_t>(2 * target + 3));
  EXPECT_LE(ticks.front(), std::min(lo, hi));
  EXPECT_GE(ticks.back(), std::max(lo, hi));
  const double step = ticks[1] - ticks[0];
  ASSERT_GT(step, 0);
  EXPECT_TRUE(IsNiceStep(step)) << "step " << step;
  for (size_t i = 1; i < ticks.size(); ++i) {
    EXPECT_NEAR(ticks[i] - ticks[i - 1], step, step * 1e-6) << "at " << i;
    // Every tick is a multiple of the step (the step itself, a difference, is
    // only good to a few ulps of the ticks).
    const double k = ticks[i] / step;
    EXPECT_NEAR(k, std::round(k), 1e-6 * std::max(1.0, std::abs(k))) << ticks[i];
  }
  // Covering without a whole spare step at either end.
  EXPECT_GT(ticks[1], std::min(lo, hi));
  EXPECT_LT(ticks[ticks.size() - 2], std::max(lo, hi));
}

TEST(NiceTicksTest, ExactValuesForCommonRanges) {
  EXPECT_EQ(NiceTicks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(NiceTicks(0, 100, 4), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(NiceTicks(27950, 29050, 5),
            (std::vector<double>{27800, 28000, 28200, 28400, 28600, 28800, 29000, 29200}));
  // Decimal steps come out exact: 0.3, not 0.30000000000000004.
  EXPECT_EQ(NiceTicks(0.3, 0.6, 3), (std::vector<double>{0.3, 0.4, 0.5, 0.6}));
  EXPECT_EQ(NiceTicks(0.79, 0.87, 4), (std::vector<double>{0.78, 0.8, 0.82, 0.84, 0.86, 0.88}));
}

TEST(NiceTicksTest, CoversWithNiceStepsAndSensibleCounts) {
  for (int target : {2, 3, 5, 8, 12}) {
    ExpectNiceTicks(0, 1, target);
    ExpectNiceTicks(0, 63.4, target);
    ExpectNiceTicks(1234.5, 98765.4, target);
    ExpectNiceTicks(0.8012, 0.8657, target);
    ExpectNiceTicks(3e-7, 9e-6, target);
    ExpectNiceTicks(1e9, 3.7e12, target);
  }
  EXPECT_GE(NiceTicks(0, 63.4, 6).size(), 4u);
  EXPECT_LE(NiceTicks(0, 63.4, 6).size(), 9u);
}

TEST(NiceTicksTest, NegativeAndReversedRanges) {
  ExpectNiceTicks(-7.3, -0.2, 5);
  ExpectNiceTicks(-150, 420, 5);
  EXPECT_EQ(NiceTicks(-1, 1, 4), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(NiceTicks(10, 0, 5), NiceTicks(0, 10, 5));
  for (double t : NiceTicks(-0.3, 0.3, 6)) EXPECT_FALSE(std::signbit(t) && t == 0) << "-0";
}

TEST(NiceTicksTest, TinyRanges) {
  ExpectNiceTicks(1.0, 1.0 + 1e-6, 5);
  ExpectNiceTicks(0, 1e-12, 5);
  ExpectNiceTicks(0.812, 0.8121, 5);
}

TEST(NiceTicksTest, EqualEndsAreWidened) {
  for (double v : {0.0, 1.0, -3.5, 28900.0, 1e-9}) {
    SCOPED_TRACE(v);
    const std::vector<double> ticks = NiceTicks(v, v, 5);
    ASSERT_GE(ticks.size(), 2u);
    EXPECT_LT(ticks.front(), v);
    EXPECT_GT(ticks.back(), v);
  }
  EXPECT_EQ(NiceTicks(0, 0, 4), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
}

TEST(NiceTicksTest, NonFiniteGivesNothing) {
  EXPECT_TRUE(NiceTicks(std::nan(""), 1, 5).empty());
  EXPECT_TRUE(NiceTicks(0, std::numeric_limits<double>::infinity(), 5).empty());
}

struct LabelCase {
  double value;
  double step;
  std::string want;
};

// Expects TickLabel(value, step) to be `want` in each case.
void ExpectTickLabels(std::initializer_list<LabelCase> cases) {
  for (const LabelCase& c : cases) {
    EXPECT_EQ(TickLabel(c.value, c.step), c.want)
        << std::setprecision(17) << "value " << c.value << ", step " << c.step;
  }
}

TEST(TickLabelTest, Examples) {
  ExpectTickLabels({
      {28900, 100, "28.9k"},
      {1.5e6, 5e5, "1.5M"},
      {0.8123, 0.001, "0.812"},
      {0, 0.001, "0"},
      {0, 0, "0"},
  });
}

TEST(TickLabelTest, StepDecidesDecimalsAndSuffix) {
  ExpectTickLabels({
      {28000, 200, "28k"},
      {28200, 200, "28.2k"},
      {500, 500, "500"},
      {1500, 500, "1.5k"},
      {0.8, 0.02, "0.8"},
      {0.82, 0.02, "0.82"},
      {-0.5, 0.5, "-0.5"},
      {-28900, 100, "-28.9k"},
      {2.5e9, 5e8, "2.5G"},
      {60, 10, "60"},
      // A fine step on a large value keeps the digits rather than "1.0001k".
      {1000.1, 0.1, "1000.1"},
      // Rounding noise in a tick is not shown.
      {0.30000000000000004, 0.1, "0.3"},
      {1e-17, 0.1, "0"},
      {3e-11, 1e-11, "3e-11"},
  });
}

TEST(TickLabelTest, WithoutStepThreeSignificantDigits) {
  ExpectTickLabels({
      {0.8123, 0, "0.812"},
      {28912, 0, "28.9k"},
      {999999, 0, "1M"},
      {1.5, -1, "1.5"},
      {std::nan(""), 0, "NaN"},
  });
}

PlotPanel ThroughputPanel() {
  PlotPanel panel{.title = "throughput", .y_unit = "examples/s"};
  PlotSeries series{.label = "examples/s", .color = "#1f77b4"};
  for (int t = 0; t <= 60; t += 5) series.points.emplace_back(t, 27900 + 90 * (t % 15));
  panel.series.push_back(series);
  return panel;
}

PlotPanel NePanel() {
  PlotPanel panel{.title = "normalized entropy", .y_unit = "NE"};
  PlotSeries series{.label = "train NE (running)", .color = "#d62728"};
  for (int t = 0; t <= 60; t += 5) series.points.emplace_back(t, 0.95 - 0.002 * t);
  panel.series.push_back(series);
  panel.markers.push_back({.label = "eval NE", .color = "#2ca02c", .x = 60, .y = 0.8234});
  panel.levels.push_back({.label = "teacher", .color = "#555555", .y = 0.8123});
  return panel;
}

TEST(RenderSvgChartTest, WellFormedWithTicksLegendAndLevel) {
  const std::string svg = RenderSvgChart({.title = "job a<b&c \"x\": shadow-ssp, 2 trainers"},
                                         {ThroughputPanel(), NePanel()});
  EXPECT_EQ(XmlProblem(svg), "") << svg;
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  // The job name, escaped.
  EXPECT_THAT(svg, HasSubstr("job a&lt;b&amp;c &quot;x&quot;: shadow-ssp"));
  EXPECT_THAT(svg, Not(HasSubstr("a<b")));
  // y tick labels of both panels (k-scale and NE) and the x ticks.
  EXPECT_THAT(svg, HasSubstr(">28k</text>"));
  EXPECT_THAT(svg, HasSubstr(">29k</text>"));
  EXPECT_THAT(svg, HasSubstr(">0.85</text>"));
  EXPECT_THAT(svg, HasSubstr(">0.9</text>"));
  EXPECT_THAT(svg, HasSubstr(">0</text>"));
  EXPECT_THAT(svg, HasSubstr(">60</text>"));
  // Axis titles with units.
  EXPECT_THAT(svg, HasSubstr(">seconds</text>"));
  EXPECT_THAT(svg, HasSubstr("rotate(-90"));
  EXPECT_THAT(svg, HasSubstr(">examples/s</text>"));
  // The NE panel has three items, so a legend; the marker and level carry their values.
  EXPECT_THAT(svg, HasSubstr(">train NE (running)</text>"));
  EXPECT_THAT(svg, HasSubstr(">eval NE 0.823</text>"));
  EXPECT_THAT(svg, HasSubstr(">teacher 0.812</text>"));
  EXPECT_THAT(svg, HasSubstr("<circle"));
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray=\"6 4\""));
  // Gridlines.
  EXPECT_THAT(svg, HasSubstr("stroke=\"#e4e4e4\""));
  // Deterministic.
  EXPECT_EQ(svg, RenderSvgChart({.title = "job a<b&c \"x\": shadow-ssp, 2 trainers"},
                                {ThroughputPanel(), NePanel()}));

  if (const char* out = std::getenv("PLOT_SAMPLE_SVG")) std::ofstream(out) << svg;
}

TEST(RenderSvgChartTest, NoLegendForASingleItem) {
  const std::string svg = RenderSvgChart({}, {ThroughputPanel()});
  EXPECT_EQ(XmlProblem(svg), "");
  // The series label appears as the axis title only, not as a legend entry.
  EXPECT_THAT(svg, Not(HasSubstr("font-size=\"11\">examples/s</text>")));
  EXPECT_THAT(svg, HasSubstr("<polyline"));
}

TEST(RenderSvgChartTest, LevelAndMarkersWidenTheRange) {
  PlotPanel panel{.y_unit = "NE"};
  panel.series.push_back({.label = "train", .points = {{0, 0.90}, {10, 0.91}}});
  panel.levels.push_back({.label = "teacher", .y = 0.5});
  panel.markers.push_back({.label = "eval", .x = 10, .y = 1.3});
  const std::string svg = RenderSvgChart({}, {panel});
  EXPECT_EQ(XmlProblem(svg), "");
  // y ticks from below the level to above the marker (the series alone: 0.9 to 0.91).
  EXPECT_THAT(svg, HasSubstr(">0.4</text>"));
  EXPECT_THAT(svg, HasSubstr(">1.4</text>"));
  EXPECT_THAT(svg, HasSubstr(">teacher 0.5</text>"));
  EXPECT_THAT(svg, HasSubstr(">eval 1.3</text>"));
}

// The value of attribute `name` in the first `<tag` at or after `from`.
double Attribute(const std::string& svg, const std::string& tag, const std::string& name,
                 size_t from = 0) {
  const size_t at = svg.find("<" + tag + " ", from);
  const size_t value = svg.find(" " + name + "=\"", at);
  if (at == std::string::npos || value == std::string::npos) return std::nan("");
  return std::stod(svg.substr(value + name.size() + 3));
}

TEST(RenderSvgChartTest, LinesDoNotSitOnTheFrame) {
  PlotPanel panel{.y_unit = "u"};
  panel.series.push_back({.label = "s", .points = {{0, 0}, {5, 10}, {10, 0}}});
  const std::string svg = RenderSvgChart({}, {panel});
  // The plot frame is the first rect with a position; the background has none.
  const double top = Attribute(svg, "rect", "y", svg.find("<rect x="));
  const double height = Attribute(svg, "rect", "height", svg.find("<rect x="));
  ASSERT_GT(height, 0);
  const size_t points = svg.find("points=\"");
  ASSERT_NE(points, std::string::npos);
  std::string list = svg.substr(points + 8, svg.find('"', points + 8) - points - 8);
  std::replace(list.begin(), list.end(), ',', ' ');
  std::istringstream in(list);
  double x, y;
  int n = 0;
  while (in >> x >> y) {
    ++n;
    EXPECT_GT(y, top + 2) << list;
    EXPECT_LT(y, top + height - 2) << list;
  }
  EXPECT_EQ(n, 3);
}

TEST(RenderSvgChartTest, EscapesEveryText) {
  PlotPanel panel{.title = "<p>", .y_unit = "a&b"};
  panel.series.push_back({.label = "s\"1", .color = "red\"/><x", .points = {{0, 1}, {1, 2}}});
  panel.levels.push_back({.label = "l<", .y = 1.5});
  const std::string svg = RenderSvgChart({.title = "a<b&c", .x_label = "t>0"}, {panel});
  EXPECT_EQ(XmlProblem(svg), "") << svg;
  EXPECT_THAT(svg, HasSubstr("a&lt;b&amp;c"));
  EXPECT_THAT(svg, HasSubstr("&lt;p&gt;"));
  EXPECT_THAT(svg, HasSubstr(">a&amp;b</text>"));
  EXPECT_THAT(svg, HasSubstr(">s&quot;1</text>"));
  EXPECT_THAT(svg, HasSubstr("t&gt;0"));
  EXPECT_THAT(svg, HasSubstr("red&quot;/&gt;&lt;x"));
}

TEST(RenderSvgChartTest, DegenerateInputsStayWellFormed) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<PlotPanel>> cases;
  cases.push_back({});                                          // no panels
  cases.push_back({PlotPanel{}});                               // empty panel
  cases.push_back({PlotPanel{.series = {{.label = "none"}}}});  // series without points
  cases.push_back({PlotPanel{.series = {{.label = "one", .points = {{5, 3}}}}}});
  cases.push_back({PlotPanel{.series = {{.label = "flat", .points = {{0, 2}, {1, 2}, {2, 2}}}}}});
  cases.push_back({PlotPanel{.series = {{.label = "zero", .points = {{0, 0}, {0, 0}}}}}});
  cases.push_back({PlotPanel{
      .series = {{.label = "gaps", .points = {{0, 1}, {1, nan}, {nan, 2}, {2, inf}, {3, 4}}}},
      .markers = {{.label = "m", .x = nan, .y = 1}},
      .levels = {{.label = "l", .y = -inf}}}});
  cases.push_back({PlotPanel{.series = {{.label = "all bad", .points = {{nan, nan}}}}}});
  cases.push_back({PlotPanel{.levels = {{.label = "only a level", .y = 0.8}}}});
  cases.push_back({PlotPanel{.markers = {{.label = "only a marker", .x = 3, .y = 0.8}}}});
  cases.push_back({PlotPanel{.series = {{.label = "huge", .points = {{0, -1e300}, {1, 1e300}}}}}});
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string svg =
        RenderSvgChart({.title = "t", .width = 10, .panel_height = 1}, cases[i]);
    EXPECT_EQ(XmlProblem(svg), "") << svg;
    EXPECT_THAT(svg, Not(HasSubstr("nan")));
    EXPECT_THAT(svg, Not(HasSubstr("inf")));
  }
  // The NaN points are skipped, the finite ones drawn: 2 points -> a polyline of 2.
  const std::string svg = RenderSvgChart({}, cases[6]);
  EXPECT_THAT(svg, HasSubstr("<polyline"));
  EXPECT_THAT(svg, Not(HasSubstr("m NaN")));
  // A single point is still visible.
  EXPECT_THAT(RenderSvgChart({}, cases[3]), HasSubstr("<circle"));
  // A lone marker, without a legend, is labelled beside its dot.
  EXPECT_THAT(RenderSvgChart({}, cases[9]), HasSubstr(">only a marker 0.8</text>"));
  // A constant series gets a range around its value.
  const std::string flat = RenderSvgChart({}, cases[4]);
  EXPECT_THAT(flat, HasSubstr(">2</text>"));
  EXPECT_THAT(flat, HasSubstr(">1.8</text>"));
  EXPECT_THAT(flat, HasSubstr(">2.2</text>"));
}

TEST(XmlProblemTest, CatchesMalformedDocuments) {
  EXPECT_EQ(XmlProblem("<svg><g></g><line/></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><g></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a<b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a&b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text x=\"1>2</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg></svg><svg></svg>"), "");
  EXPECT_NE(XmlProblem("<svg>"), "");
}

}  // namespace
}  // namespace shadowsync::cli
