// A small SVG line-chart renderer for run reports (`shadowsync run` writes
// report.svg). Panels are stacked vertically and share one x axis; each has
// labelled "nice" ticks, light gridlines, axis titles with units, its series
// (polylines), markers (points, e.g. the eval NE at the end), levels (dashed
// horizontal lines, e.g. the teacher NE floor) and a legend when it shows
// more than one item.
//
// Contract: any input gives a well-formed SVG document. Non-finite points,
// markers and levels are skipped; empty, single-point and constant data get a
// padded range instead of a division by zero. The y range of a panel covers
// its series, markers and levels with a little padding. All text (titles,
// labels, colours) is XML-escaped, so job names may be anything. Output is
// deterministic: fixed number formatting, independent of locale and clock.
//
// Thread-safe: pure functions.
#ifndef SHADOWSYNC_CLI_PLOT_H_
#define SHADOWSYNC_CLI_PLOT_H_

#include <string>
#include <utility>
#include <vector>

namespace shadowsync::cli {

// A line through (x, y) points in the order given. An empty colour picks one
// from a fixed palette by the series' index in its panel.
struct PlotSeries {
  std::string label;
  std::string color;
  std::vector<std::pair<double, double>> points;
};

// A single point drawn as a dot and labelled "label value" (e.g. "eval NE 0.807").
struct PlotMarker {
  std::string label;
  std::string color;
  double x = 0;
  double y = 0;
};

// A dashed horizontal line across the panel, labelled "label value"
// (e.g. "teacher 0.812").
struct PlotLevel {
  std::string label;
  std::string color;
  double y = 0;
};

struct PlotPanel {
  std::string title;   // Above the panel, e.g. "throughput".
  std::string y_unit;  // The y axis title, e.g. "examples/s".
  std::vector<PlotSeries> series;
  std::vector<PlotMarker> markers;
  std::vector<PlotLevel> levels;
};

struct PlotOptions {
  std::string title;                // Above the chart, e.g. the job's name.
  std::string x_label = "seconds";  // The shared x axis title, with its unit.
  int width = 760;                  // Pixels; at least 320 is used.
  int panel_height = 220;           // Pixels of each panel's plot area; at least 80.
};

// Renders the panels stacked vertically, sharing the x axis, and returns the
// SVG document. No panels gives a chart with the title and "no data".
std::string RenderSvgChart(const PlotOptions& options, const std::vector<PlotPanel>& panels);

// "Nice" tick values, all multiples of one step of 1, 2 or 5 x 10^k, with
// front() <= min(lo, hi) and back() >= max(lo, hi), about `target` of them
// (clamped to [2, 50]). lo == hi (or a range too small to tell apart from its
// magnitude) is widened around its centre first, so there are always at
// least two ticks, strictly increasing. Non-finite input gives {}; a span
// that overflows a double gives just {lo, hi}.
std::vector<double> NiceTicks(double lo, double hi, int target);

// A short label for a tick value, with k/M/G/T suffixes and trailing zeros
// dropped: TickLabel(28900, 100) == "28.9k", TickLabel(1.5e6, 5e5) == "1.5M",
// TickLabel(0.8123, 0.001) == "0.812", TickLabel(0, step) == "0". With a
// positive step it shows as many decimals as the step needs, so the ticks of
// one axis stay distinct; with step <= 0 it shows 3 significant digits.
std::string TickLabel(double value, double step);

}  // namespace shadowsync::cli

#endif  // SHADOWSYNC_CLI_PLOT_H_
