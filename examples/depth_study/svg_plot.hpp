// svg_plot.hpp — a small line-plot writer producing standalone SVG 1.1 text.
//
// One plot: a title, axis labels, linear or log10 scales on x and y, ticks with labels, any
// number of series (one <polyline> each, with a colour and an optional dash pattern), dashed
// reference lines at fixed y (horizontal) or fixed x (vertical), and a legend naming every series
// and reference line. No dependency beyond the standard library.
//
// Points that cannot be drawn (NaN, ±Inf, or <= 0 on a log axis) are left out of their polyline;
// the series keeps its legend entry. Ranges: linear axes round outward to "nice" tick steps
// (1, 2 or 5 · 10^k); log axes round outward to whole decades.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace depth_study {

struct plot_series {
  std::string label;
  std::vector<double> x, y;
  std::string colour;  // any SVG colour; empty: the next one of the palette
  std::string dash;    // SVG stroke-dasharray, e.g. "6 4"; empty: solid
  bool markers = false;
};

struct reference_line {
  double value = 0;
  std::string label;
  std::string colour = "#7f7f7f";
};

namespace detail {

inline const char* palette(std::size_t k) {
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                  "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  return colours[k % (sizeof colours / sizeof colours[0])];
}

// & < > " are the characters that cannot appear raw in SVG text or attribute values.
inline std::string escape_xml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
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
      default:
        out += c;
    }
  }
  return out;
}

inline std::string number(double v, int digits = 4) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*g", digits, v);
  return buffer;
}

// A tick label for 10^k: plain digits near 1, "1e-6" style elsewhere.
inline std::string decade_label(int k) {
  if (k >= -3 && k <= 3) return number(std::pow(10.0, k), 6);
  return "1e" + std::to_string(k);
}

// An axis maps data values to pixel positions [pixel_lo, pixel_hi].
struct axis {
  bool log = false;
  double lo = 0, hi = 1;  // in data units for linear, in log10 units for log
  std::vector<std::pair<double, std::string>> ticks;  // positions in the same units as lo/hi

  double transform(double v) const { return log ? std::log10(v) : v; }
  bool drawable(double v) const { return std::isfinite(v) && (!log || v > 0); }

  double to_pixel(double v, double pixel_lo, double pixel_hi) const {
    const double t = (transform(v) - lo) / (hi - lo);
    return pixel_lo + t * (pixel_hi - pixel_lo);
  }
  double tick_to_pixel(double u, double pixel_lo, double pixel_hi) const {
    return pixel_lo + (u - lo) / (hi - lo) * (pixel_hi - pixel_lo);
  }
};

// Nice step: 1, 2 or 5 · 10^k, giving about `target` intervals over span.
inline double nice_step(double span, int target) {
  const double raw = span / target;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / decade;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * decade;
}

inline axis make_axis(bool log, double min_value, double max_value) {
  axis a;
  a.log = log;
  if (!(min_value <= max_value)) {  // nothing drawable: a default range
    min_value = log ? 1 : 0;
    max_value = log ? 10 : 1;
  }
  if (log) {
    double lo = std::floor(std::log10(min_value)), hi = std::ceil(std::log10(max_value));
    if (hi <= lo) hi = lo + 1;
    a.lo = lo;
    a.hi = hi;
    const int decades = static_cast<int>(hi - lo);
    const int every = std::max(1, (decades + 7) / 8);  // at most ~8 labelled decades
    for (int k = static_cast<int>(lo); k <= static_cast<int>(hi); k += every) {
      a.ticks.emplace_back(k, decade_label(k));
      // Over at most two decades, 2 and 5 within each decade as well.
      if (decades > 2 || k == static_cast<int>(hi)) continue;
      for (const double m : {2.0, 5.0})
        a.ticks.emplace_back(k + std::log10(m), number(m * std::pow(10.0, k)));
    }
    return a;
  }
  if (max_value == min_value) {
    const double pad = min_value == 0 ? 1 : 0.1 * std::abs(min_value);
    min_value -= pad;
    max_value += pad;
  }
  const double step = nice_step(max_value - min_value, 6);
  a.lo = std::floor(min_value / step) * step;
  a.hi = std::ceil(max_value / step) * step;
  for (double u = a.lo; u <= a.hi + 0.5 * step; u += step) {
    const double v = std::abs(u) < 1e-9 * step ? 0.0 : u;  // no "-0" or "1e-17" labels
    a.ticks.emplace_back(v, number(v));
  }
  return a;
}

}  // namespace detail

class svg_plot {
 public:
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<plot_series> series;
  std::vector<reference_line> y_references;  // horizontal lines y = value
  std::vector<reference_line> x_references;  // vertical lines x = value

  svg_plot(std::string plot_title, std::string x_axis_label, std::string y_axis_label)
      : title(std::move(plot_title)),
        x_label(std::move(x_axis_label)),
        y_label(std::move(y_axis_label)) {}

  svg_plot& add(plot_series s) {
    if (s.x.size() != s.y.size()) {
      throw std::invalid_argument("svg_plot::add: series \"" + s.label + "\" has " +
                                  std::to_string(s.x.size()) + " x values and " +
                                  std::to_string(s.y.size()) + " y values");
    }
    if (s.colour.empty()) s.colour = detail::palette(series.size());
    series.push_back(std::move(s));
    return *this;
  }

  std::string render() const {
    using detail::escape_xml;
    using detail::number;
    // Canvas: plot area on the left, legend column on the right.
    constexpr double width = 860, height = 480;
    constexpr double left = 78, right = 580, top = 44, bottom = 410;
    constexpr double legend_x = 598, legend_row = 18;

    double x_min = inf(), x_max = -inf(), y_min = inf(), y_max = -inf();
    const detail::axis probe_x{log_x, 0, 1, {}}, probe_y{log_y, 0, 1, {}};
    for (const auto& s : series) {
      for (std::size_t k = 0; k < s.x.size(); ++k) {
        if (!probe_x.drawable(s.x[k]) || !probe_y.drawable(s.y[k])) continue;
        x_min = std::min(x_min, s.x[k]);
        x_max = std::max(x_max, s.x[k]);
        y_min = std::min(y_min, s.y[k]);
        y_max = std::max(y_max, s.y[k]);
      }
    }
    for (const auto& r : y_references) {
      if (!probe_y.drawable(r.value)) continue;
      y_min = std::min(y_min, r.value);
      y_max = std::max(y_max, r.value);
    }
    for (const auto& r : x_references) {
      if (!probe_x.drawable(r.value)) continue;
      x_min = std::min(x_min, r.value);
      x_max = std::max(x_max, r.value);
    }
    const detail::axis ax = detail::make_axis(log_x, x_min, x_max);
    const detail::axis ay = detail::make_axis(log_y, y_min, y_max);
    auto px = [&](double v) { return ax.to_pixel(v, left, right); };
    auto py = [&](double v) { return ay.to_pixel(v, bottom, top); };

    std::string out;
    out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + number(width) +
           "\" height=\"" + number(height) + "\" viewBox=\"0 0 " + number(width) + " " +
           number(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    out += "<rect x=\"0\" y=\"0\" width=\"" + number(width) + "\" height=\"" + number(height) +
           "\" fill=\"white\"/>\n";
    out += "<text x=\"" + number((left + right) / 2) +
           "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" +
           escape_xml(title) + "</text>\n";

    // Grid, ticks and tick labels.
    out += "<g stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
    for (const auto& [u, label] : ax.ticks) {
      const double x = ax.tick_to_pixel(u, left, right);
      out += "<line x1=\"" + number(x, 6) + "\" y1=\"" + number(top) + "\" x2=\"" + number(x, 6) +
             "\" y2=\"" + number(bottom) + "\"/>\n";
    }
    for (const auto& [u, label] : ay.ticks) {
      const double y = ay.tick_to_pixel(u, bottom, top);
      out += "<line x1=\"" + number(left) + "\" y1=\"" + number(y, 6) + "\" x2=\"" + number(right) +
             "\" y2=\"" + number(y, 6) + "\"/>\n";
    }
    out += "</g>\n";
    out += "<g font-size=\"11\" fill=\"#333333\">\n";
    for (const auto& [u, label] : ax.ticks) {
      const double x = ax.tick_to_pixel(u, left, right);
      out += "<line x1=\"" + number(x, 6) + "\" y1=\"" + number(bottom) + "\" x2=\"" +
             number(x, 6) + "\" y2=\"" + number(bottom + 5) + "\" stroke=\"#333333\"/>\n";
      out += "<text x=\"" + number(x, 6) + "\" y=\"" + number(bottom + 18) +
             "\" text-anchor=\"middle\">" + escape_xml(label) + "</text>\n";
    }
    for (const auto& [u, label] : ay.ticks) {
      const double y = ay.tick_to_pixel(u, bottom, top);
      out += "<line x1=\"" + number(left - 5) + "\" y1=\"" + number(y, 6) + "\" x2=\"" +
             number(left) + "\" y2=\"" + number(y, 6) + "\" stroke=\"#333333\"/>\n";
      out += "<text x=\"" + number(left - 8) + "\" y=\"" + number(y + 4, 6) +
             "\" text-anchor=\"end\">" + escape_xml(label) + "</text>\n";
    }
    out += "</g>\n";
    out += "<rect x=\"" + number(left) + "\" y=\"" + number(top) + "\" width=\"" +
           number(right - left) + "\" height=\"" + number(bottom - top) +
           "\" fill=\"none\" stroke=\"#333333\"/>\n";
    out += "<text x=\"" + number((left + right) / 2) + "\" y=\"" + number(bottom + 40) +
           "\" text-anchor=\"middle\">" + escape_xml(x_label) + "</text>\n";
    out += "<text x=\"18\" y=\"" + number((top + bottom) / 2) +
           "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " + number((top + bottom) / 2) +
           ")\">" + escape_xml(y_label) + "</text>\n";

    // Reference lines (<line>, so that <polyline> counts series), clipped to the plot area.
    for (const auto& r : y_references) {
      if (!ay.drawable(r.value)) continue;
      out += "<line x1=\"" + number(left) + "\" y1=\"" + number(py(r.value), 6) + "\" x2=\"" +
             number(right) + "\" y2=\"" + number(py(r.value), 6) + "\" stroke=\"" +
             escape_xml(r.colour) + "\" stroke-width=\"1.2\" stroke-dasharray=\"2 3\"/>\n";
    }
    for (const auto& r : x_references) {
      if (!ax.drawable(r.value)) continue;
      out += "<line x1=\"" + number(px(r.value), 6) + "\" y1=\"" + number(top) + "\" x2=\"" +
             number(px(r.value), 6) + "\" y2=\"" + number(bottom) + "\" stroke=\"" +
             escape_xml(r.colour) + "\" stroke-width=\"1.2\" stroke-dasharray=\"2 3\"/>\n";
    }

    // Series: one polyline each, plus optional markers.
    for (const auto& s : series) {
      std::string points;
      std::string marks;
      for (std::size_t k = 0; k < s.x.size(); ++k) {
        if (!ax.drawable(s.x[k]) || !ay.drawable(s.y[k])) continue;
        const std::string x = number(px(s.x[k]), 6), y = number(py(s.y[k]), 6);
        points += (points.empty() ? "" : " ") + x + "," + y;
        if (s.markers) marks += "<circle cx=\"" + x + "\" cy=\"" + y + "\" r=\"2.5\"/>";
      }
      out += "<polyline fill=\"none\" stroke=\"" + escape_xml(s.colour) +
             "\" stroke-width=\"1.8\"" +
             (s.dash.empty() ? "" : " stroke-dasharray=\"" + escape_xml(s.dash) + "\"") +
             " points=\"" + points + "\"/>\n";
      if (!marks.empty()) out += "<g fill=\"" + escape_xml(s.colour) + "\">" + marks + "</g>\n";
    }

    // Legend: series first, then reference lines.
    double y = top + 8;
    out += "<g font-size=\"12\">\n";
    auto legend_entry = [&](const std::string& label, const std::string& colour,
                            const std::string& dash, double stroke_width) {
      out += "<line x1=\"" + number(legend_x) + "\" y1=\"" + number(y, 6) + "\" x2=\"" +
             number(legend_x + 28) + "\" y2=\"" + number(y, 6) + "\" stroke=\"" +
             escape_xml(colour) + "\" stroke-width=\"" + number(stroke_width) + "\"" +
             (dash.empty() ? "" : " stroke-dasharray=\"" + escape_xml(dash) + "\"") + "/>\n";
      out += "<text x=\"" + number(legend_x + 34) + "\" y=\"" + number(y + 4, 6) + "\">" +
             escape_xml(label) + "</text>\n";
      y += legend_row;
    };
    for (const auto& s : series) legend_entry(s.label, s.colour, s.dash, 1.8);
    for (const auto& r : y_references) legend_entry(r.label, r.colour, "2 3", 1.2);
    for (const auto& r : x_references) legend_entry(r.label, r.colour, "2 3", 1.2);
    out += "</g>\n";
    out += "</svg>\n";
    return out;
  }

  void write(const std::filesystem::path& path) const {
    std::ofstream file(path, std::ios::binary);
    if (!file) throw std::runtime_error("svg_plot::write: cannot open " + path.string());
    file << render();
    if (!file) throw std::runtime_error("svg_plot::write: failed writing " + path.string());
  }

 private:
  static double inf() { return std::numeric_limits<double>::infinity(); }
};

}  // namespace depth_study
