#include "sim/output.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>

#include <fmt/format.h>

namespace gpuslice::sim {

Progress::Progress(std::ostream& err, bool enabled, std::string label)
    : err_(err), enabled_(enabled), label_(std::move(label)), start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { Done(); }

void Progress::Update(double fraction) {
  if (!enabled_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (elapsed < 1.0 && !shown_) return;
  const int percent = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 100);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  shown_ = true;
  constexpr int kWidth = 30;
  const int filled = percent * kWidth / 100;
  err_ << fmt::format("\r{} [{}{}] {:3d}% {:.0f}s", label_, std::string(filled, '#'),
                      std::string(kWidth - filled, '.'), percent, elapsed)
       << std::flush;
}

void Progress::Done() {
  if (shown_) err_ << "\r\033[K" << std::flush;
  shown_ = false;
}

bool StderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

namespace {
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// The document, a white background and the title centred at x.
std::string SvgOpen(double w, double h, double title_x, const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
      w, h, title_x, Escape(title));
}

// "Nice" tick step for a range.
double TickStep(double range) {
  const double raw = range / 6;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}
}  // namespace

std::string SvgLinePlot(const PlotSpec& spec, const std::vector<Series>& series) {
  constexpr double kW = 760, kH = 460, kLeft = 70, kRight = 190, kTop = 40, kBottom = 55;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  auto tx = [&](double x) { return spec.log_x ? std::log10(std::max(x, 1e-12)) : x; };
  for (const Series& s : series) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, tx(x));
      x1 = std::max(x1, tx(x));
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (tx(x) - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  std::string svg = SvgOpen(kW, kH, kLeft + pw / 2, spec.title);
  // Axes, grid and ticks.
  const double ystep = TickStep(y1 - y0);
  for (double y = std::ceil(y0 / ystep) * ystep; y <= y1; y += ystep) {
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
                       kLeft, py(y), kLeft + pw, py(y), kLeft - 6, py(y) + 4, std::abs(y) < 1e-9 ? 0.0 : y);
  }
  const double xstep = spec.log_x ? 1 : TickStep(x1 - x0);
  for (double x = std::ceil(x0 / xstep) * xstep; x <= x1 + 1e-9; x += xstep) {
    const double sx = kLeft + (x - x0) / (x1 - x0) * pw;
    const double label = spec.log_x ? std::pow(10, x) : x;
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n",
                       sx, kTop, sx, kTop + ph, sx, kTop + ph + 18, label);
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n",
                     kLeft, kTop, pw, ph);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2,
                     kH - 12, Escape(spec.x_label));
  svg += fmt::format("<text x=\"16\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1f})\">{}</text>\n",
                     kTop + ph / 2, kTop + ph / 2, Escape(spec.y_label));
  for (std::size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    std::string pts;
    for (auto [x, y] : series[i].points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    }
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>\n", color, pts);
    const double ly = kTop + 14 + 18 * static_cast<double>(i);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                       kLeft + pw + 12, ly, kLeft + pw + 32, ly, color, kLeft + pw + 38, ly + 4,
                       Escape(series[i].name));
  }
  svg += "</svg>\n";
  return svg;
}

std::string SvgBarPlot(const PlotSpec& spec, const std::vector<std::string>& segments, const std::vector<BarRow>& rows,
                       bool stacked) {
  constexpr double kW = 760, kLeft = 170, kRight = 170, kTop = 40, kBottom = 50;
  const double row_h = stacked ? 22 : std::max(22.0, 9.0 * static_cast<double>(segments.size()) + 6);
  const double ph = row_h * static_cast<double>(std::max<std::size_t>(rows.size(), 1));
  const double kH = kTop + ph + kBottom, pw = kW - kLeft - kRight;
  double x1 = 0;
  for (const BarRow& r : rows) {
    double sum = 0;
    for (double v : r.values) {
      if (!std::isfinite(v) || v <= 0) continue;
      sum += v;
      x1 = std::max(x1, v);
    }
    if (stacked) x1 = std::max(x1, sum);
  }
  if (x1 <= 0) x1 = 1;
  x1 *= 1.05;
  auto px = [&](double x) { return kLeft + x / x1 * pw; };
  std::string svg = SvgOpen(kW, kH, kLeft + pw / 2, spec.title);
  const double step = TickStep(x1);
  for (double x = 0; x <= x1 + 1e-9; x += step) {
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n",
                       px(x), kTop, px(x), kTop + ph, px(x), kTop + ph + 18, x);
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double y = kTop + row_h * static_cast<double>(i);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6,
                       y + row_h / 2 + 4, Escape(rows[i].label));
    double at = 0;
    for (std::size_t k = 0; k < rows[i].values.size() && k < segments.size(); ++k) {
      const double v = std::isfinite(rows[i].values[k]) ? std::max(0.0, rows[i].values[k]) : 0;
      const double bar_h = stacked ? row_h - 6 : (row_h - 6) / static_cast<double>(segments.size());
      const double by = stacked ? y + 3 : y + 3 + bar_h * static_cast<double>(k);
      const double bx = stacked ? at : 0;
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n",
                         px(bx), by, px(bx + v) - px(bx), bar_h, kColors[k % std::size(kColors)]);
      if (stacked) at += v;
    }
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n",
                     kLeft, kTop, pw, ph);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2, kH - 12,
                     Escape(spec.y_label));
  for (std::size_t k = 0; k < segments.size(); ++k) {
    const double ly = kTop + 14 + 18 * static_cast<double>(k);
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"10\" fill=\"{}\"/>"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                       kLeft + pw + 12, ly - 5, kColors[k % std::size(kColors)], kLeft + pw + 32, ly + 4,
                       Escape(segments[k]));
  }
  svg += "</svg>\n";
  return svg;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return Unavailable(fmt::format("{}: cannot create directory: {}", p.parent_path().string(), ec.message()));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Unavailable(fmt::format("{}: cannot open for writing", path));
  f << text;
  if (!f) return Unavailable(fmt::format("{}: write failed", path));
  return Status::Ok();
}

}  // namespace gpuslice::sim
