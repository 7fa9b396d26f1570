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
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
      kW, kH, kLeft + pw / 2, Escape(spec.title));
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
