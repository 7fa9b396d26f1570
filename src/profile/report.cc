#include "profile/report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>

#include "api/client.h"
#include "devices/backend.h"
#include "devices/fake.h"

namespace gpuslice::profile {
namespace {

using Json = nlohmann::json;

double Frac(Nanos part, Nanos whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}
std::string Ms(Nanos ns) { return fmt::format("{:.1f} ms", static_cast<double>(ns) / 1e6); }
std::string Pct(double f) { return fmt::format("{:.1f}%", 100.0 * f); }
std::string Bar(double f, int width = 30) {
  int n = static_cast<int>(f * width + 0.5);
  std::string s;
  for (int i = 0; i < n; ++i) s += "\u2588";
  return s;
}
std::string Base(const std::string& path) { return std::filesystem::path(path).filename().string(); }

std::string XmlEscape(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

constexpr const char* kPhaseColour[kPhaseCount] = {
    "#4e79a7", "#59a14f", "#b07aa1", "#9c755f", "#e15759", "#f28e2b",
    "#edc948", "#ff9da7", "#76b7b2", "#bab0ac", "#e4e4e4"};

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string FindingsText(const std::vector<Finding>& findings) {
  std::string o = "\nWhat to fix first:\n";
  if (findings.empty()) {
    o += "  nothing crossed a threshold (input < 5%, GPU busy >= 50%, communication <= 10%, "
         "tensor cores in use, memory <= 90%).\n";
  }
  int i = 0;
  for (const Finding& f : findings) {
    o += fmt::format("  {}. [{}] {}\n", ++i, SeverityName(f.severity), f.title);
    o += fmt::format("     evidence: {}\n", f.evidence);
    if (f.expected_gain) {
      double g = *f.expected_gain;
      o += fmt::format("     expected gain: up to {} of step time ({:.2f}x faster steps); {}\n", Pct(g),
                       g < 0.999 ? 1.0 / (1.0 - g) : 99.0, f.gain_basis);
    } else {
      o += fmt::format("     expected gain: {}\n", f.gain_basis);
    }
    for (const std::string& a : f.actions) o += fmt::format("     - {}\n", a);
  }
  return o;
}

// Minimal SVG writer shared by both timelines.
struct Svg {
  std::string body;
  int width = 1200;
  int height = 0;
  void Rect(double x, double y, double w, double h, const char* fill, const std::string& title = {}) {
    if (w <= 0 || h <= 0) return;
    if (title.empty()) {
      body += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"/>\n", x, y, w, h, fill);
    } else {
      body += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"><title>{}</title></rect>\n",
                          x, y, w, h, fill, XmlEscape(title));
    }
  }
  void Line(double x1, double y1, double x2, double y2, const char* stroke, double w = 1, bool dash = false) {
    body += fmt::format("<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n",
                        x1, y1, x2, y2, stroke, w, dash ? " stroke-dasharray=\"3,3\"" : "");
  }
  void Text(double x, double y, std::string_view t, int size = 12, const char* anchor = "start") {
    body += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" font-size=\"{}\" text-anchor=\"{}\">{}</text>\n", x, y, size,
                        anchor, XmlEscape(t));
  }
  void Polyline(const std::vector<std::pair<double, double>>& pts, const char* stroke) {
    if (pts.empty()) return;
    body += "<polyline fill=\"none\" stroke=\"";
    body += stroke;
    body += "\" stroke-width=\"1.5\" points=\"";
    for (auto [x, y] : pts) body += fmt::format("{:.1f},{:.1f} ", x, y);
    body += "\"/>\n";
  }
  std::string Finish() const {
    return fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
        "height=\"{}\" viewBox=\"0 0 {} {}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
        "fill=\"white\"/>\n{}</svg>\n",
        width, height, width, height, body);
  }
};

constexpr double kLeft = 100, kPlotW = 1070;

void UtilAxes(Svg& svg, double y, double h, const char* label) {
  svg.Rect(kLeft, y, kPlotW, h, "#fafafa");
  for (int p : {0, 50, 100}) {
    double yy = y + h - h * p / 100.0;
    svg.Line(kLeft, yy, kLeft + kPlotW, yy, "#dddddd");
    svg.Text(kLeft - 5, yy + 4, fmt::format("{}%", p), 10, "end");
  }
  svg.Text(6, y + h / 2 + 4, label, 11);
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return Internal(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  return Status::Ok();
}

}  // namespace

Evidence EvidenceFromTraces(const std::vector<TraceAnalysis>& ranks) {
  Evidence e;
  e.source = "trace";
  PhaseTimes total{};
  Nanos step_time = 0, busy = 0, comm_raw = 0, kernel_time = 0, eligible = 0, tc = 0;
  std::int64_t short_k = 0, with_launch = 0;
  std::vector<double> medians;
  for (const TraceAnalysis& a : ranks) {
    for (int p = 0; p < kPhaseCount; ++p) total[p] += a.total[p];
    step_time += a.total_step_time;
    busy += a.total_gpu_busy;
    comm_raw += a.total_communication_raw;
    kernel_time += a.kernel_time;
    eligible += a.tc_eligible_time;
    tc += a.tensor_core_time;
    short_k += a.short_kernels;
    with_launch += a.kernels_with_launch;
    e.steps += static_cast<std::int64_t>(a.steps.size());
    medians.push_back(static_cast<double>(a.median_kernel));
    if (a.compute_major > e.compute_major) e.compute_major = a.compute_major;
    if (a.peak_memory_reserved > 0 && a.device_memory > 0 &&
        (!e.memory_peak || Frac(a.peak_memory_reserved, a.device_memory) >
                               static_cast<double>(*e.memory_peak) / static_cast<double>(*e.memory_total))) {
      e.memory_peak = a.peak_memory_reserved;
      e.memory_total = a.device_memory;
    }
  }
  auto share = [&](Phase p) { return Frac(total[static_cast<int>(p)], step_time); };
  e.data_loading_share = share(Phase::kDataLoading);
  e.host_to_device_share = share(Phase::kHostToDevice);
  e.communication_share = share(Phase::kCommunication);
  e.communication_raw_share = Frac(comm_raw, step_time);
  e.synchronisation_share = share(Phase::kSynchronisation);
  e.gpu_busy_share = Frac(busy, step_time);
  e.idle_host_bound_share = share(Phase::kIdleHostBound);
  if (with_launch > 0) e.short_kernel_fraction = static_cast<double>(short_k) / static_cast<double>(with_launch);
  if (!medians.empty()) e.median_kernel = static_cast<Micros>(MedianOf(medians) / 1000.0 + 0.5);
  if (kernel_time > 0) {
    e.tc_eligible_share = Frac(eligible, kernel_time);
    e.tensor_core_share = eligible > 0 ? Frac(tc, eligible) : 0.0;
    e.kernel_share = std::min(1.0, Frac(kernel_time, step_time));
  }
  return e;
}

Evidence EvidenceFromRecording(const Recording& rec) {
  Evidence e;
  e.source = "recording";
  // The advice depends on the architecture; a recording knows the device by its name.
  e.compute_major = ComputeMajorOf(rec.gpu_description);
  Micros step_total = 0, wait_total = 0;
  bool any_data = false;
  for (const StepMark& m : rec.steps) {
    if (!m.end || *m.end <= m.start) continue;
    ++e.steps;
    step_total += *m.end - m.start;
    if (m.data_ready) {
      any_data = true;
      wait_total += std::clamp<Micros>(*m.data_ready - m.start, 0, *m.end - m.start);
    }
  }
  if (any_data && step_total > 0) e.data_loading_share = Frac(wait_total, step_total);
  std::int64_t util_sum = 0, util_n = 0, main_n = 0, iowait = 0, running = 0;
  for (const Sample& s : rec.samples) {
    if (s.gpu_util_permille) { util_sum += *s.gpu_util_permille; ++util_n; }
    if (s.gpu_memory_used && (!e.memory_peak || *s.gpu_memory_used > *e.memory_peak)) e.memory_peak = s.gpu_memory_used;
    if (s.gpu_memory_total) e.memory_total = s.gpu_memory_total;
    if (s.main_state != ProcState::kGone) {
      ++main_n;
      if (s.main_state == ProcState::kIoWait) ++iowait;
      if (s.main_state == ProcState::kRunning) ++running;
    }
  }
  if (util_n > 0) e.gpu_busy_share = static_cast<double>(util_sum) / static_cast<double>(util_n) / 1000.0;
  if (main_n > 0) {
    e.main_iowait_share = static_cast<double>(iowait) / static_cast<double>(main_n);
    e.main_running_share = static_cast<double>(running) / static_cast<double>(main_n);
  }
  // Workers while stepping (start-up helpers such as pyenv's are not data-loader workers).
  e.workers = rec.max_workers;
  if (e.steps > 0) {
    Micros lo = rec.steps.front().start, hi = rec.steps.back().end.value_or(rec.end);
    int w = 0;
    for (const Sample& s : rec.samples) {
      if (s.t >= lo && s.t <= hi) w = std::max(w, s.workers);
    }
    e.workers = w;
  }
  if (!e.memory_total) e.memory_peak.reset();
  return e;
}

std::string TraceReportText(const std::vector<TraceAnalysis>& ranks, const std::vector<Finding>& findings) {
  std::string o;
  for (const TraceAnalysis& a : ranks) {
    o += fmt::format("gpuslice profile: trace {}\n", Base(a.path));
    std::vector<double> ms;
    for (const StepBreakdown& s : a.steps) ms.push_back(static_cast<double>(s.duration()) / 1e6);
    o += fmt::format("  device: {}{}{}\n", a.device_name.empty() ? "unknown" : a.device_name,
                     a.compute_major >= 0 ? fmt::format(" (compute capability {})", a.compute_major) : "",
                     a.rank >= 0 ? fmt::format(", rank {} of {}", a.rank, a.world_size) : "");
    o += fmt::format("  steps: {} from {}", a.steps.size(), StepSourceName(a.step_source));
    if (a.step_source == StepSource::kProfilerStep && !a.steps.empty()) {
      o += fmt::format(" (#{}..#{})", a.steps.front().number, a.steps.back().number);
    }
    o += fmt::format(", median {:.1f} ms, total {}\n", MedianOf(ms), Ms(a.total_step_time));
    o += "  where step time goes (each instant counted once; GPU work hides CPU-side waiting):\n";
    for (int p = 0; p < kPhaseCount; ++p) {
      double f = Frac(a.total[p], a.total_step_time);
      o += fmt::format("    {:<26} {:>6} {:>11}  {}\n", PhaseLabel(static_cast<Phase>(p)), Pct(f), Ms(a.total[p]), Bar(f));
    }
    o += fmt::format("  GPU busy {} of step time; DataLoader spans {} before overlap; communication kernels {} "
                     "(exposed {})\n",
                     Pct(Frac(a.total_gpu_busy, a.total_step_time)), Pct(Frac(a.total_data_loading_raw, a.total_step_time)),
                     Pct(Frac(a.total_communication_raw, a.total_step_time)),
                     Pct(Frac(a.total[static_cast<int>(Phase::kCommunication)], a.total_step_time)));
    o += fmt::format("  kernels: {} in steps, median {:.1f} µs, {} shorter than their launch; GEMM/conv {} of kernel "
                     "time, {} of that on tensor cores\n",
                     a.kernels, static_cast<double>(a.median_kernel) / 1000.0,
                     Pct(a.kernels_with_launch ? static_cast<double>(a.short_kernels) / static_cast<double>(a.kernels_with_launch) : 0),
                     Pct(Frac(a.tc_eligible_time, a.kernel_time)), Pct(Frac(a.tensor_core_time, a.tc_eligible_time)));
    if (a.peak_memory_reserved > 0) {
      o += fmt::format("  peak memory reserved {} of {}\n", FormatBytes(a.peak_memory_reserved),
                       a.device_memory > 0 ? FormatBytes(a.device_memory) : "unknown");
    }
    if (!a.top_kernels.empty()) {
      o += "  top kernels:\n";
      for (const KernelTotal& k : a.top_kernels) {
        std::string n = k.name.size() > 90 ? k.name.substr(0, 87) + "..." : k.name;
        o += fmt::format("    {:>10} {:>6}x  {}\n", Ms(k.time), k.count, n);
      }
    }
    o += "\n";
  }
  if (ranks.size() > 1) o += fmt::format("Findings below use all {} ranks together.\n", ranks.size());
  o += FindingsText(findings);
  return o;
}

std::string RecordingReportText(const Recording& rec, const Evidence& e, const std::vector<Finding>& findings) {
  std::string o = fmt::format("gpuslice profile: recorded pid {}{} for {:.1f} s, {} samples", rec.pid,
                              rec.main_pid != 0 && rec.main_pid != rec.pid ? fmt::format(" (main process {})", rec.main_pid) : "",
                              static_cast<double>(rec.end - rec.start) / 1e6, rec.samples.size());
  if (rec.exit_code) o += fmt::format(" (exit code {})", *rec.exit_code);
  o += "\n";
  if (rec.gpu_description.empty()) {
    o += "  GPU: not sampled\n";
  } else {
    o += fmt::format("  GPU: {}: mean utilisation {}", rec.gpu_description,
                     e.gpu_busy_share ? Pct(*e.gpu_busy_share) : "n/a");
    if (e.memory_peak && e.memory_total) o += fmt::format(", peak memory {} of {}", FormatBytes(*e.memory_peak), FormatBytes(*e.memory_total));
    o += "\n";
    if (!rec.gpu_error.empty()) o += fmt::format("  GPU read error: {}\n", rec.gpu_error);
  }
  std::int64_t n = 0, sleeping = 0, main_cpu = 0, worker_cpu = 0, rd = 0, net = 0;
  for (const Sample& s : rec.samples) {
    ++n;
    if (s.main_state == ProcState::kSleeping) ++sleeping;
    main_cpu += s.main_cpu_permille;
    worker_cpu += s.workers_cpu_permille;
    rd += s.read_bytes_per_s;
    net += s.net_rx_bytes_per_s;
  }
  if (n > 0) {
    o += fmt::format("  main process: running {}, I/O wait {}, sleeping {} of samples; {:.2f} cores mean\n",
                     Pct(e.main_running_share.value_or(0)), Pct(e.main_iowait_share.value_or(0)),
                     Pct(static_cast<double>(sleeping) / static_cast<double>(n)),
                     static_cast<double>(main_cpu) / static_cast<double>(n) / 1000.0);
    o += fmt::format("  workers (child processes): up to {}, {:.2f} cores mean\n", rec.max_workers,
                     static_cast<double>(worker_cpu) / static_cast<double>(n) / 1000.0);
    o += fmt::format("  storage reads {}/s mean, network received {}/s mean\n", FormatBytes(rd / n), FormatBytes(net / n));
  }
  if (e.steps > 0) {
    o += fmt::format("  steps marked: {}", e.steps);
    if (e.data_loading_share) o += fmt::format(", waiting for data {} of step time", Pct(*e.data_loading_share));
    o += "\n";
  } else {
    o += "  no step markers (wrap the DataLoader with gpuslice_steps.steps() to measure data wait)\n";
  }
  o += FindingsText(findings);
  return o;
}

Json FindingsJson(const std::vector<Finding>& findings) {
  Json arr = Json::array();
  for (const Finding& f : findings) {
    Json j = {{"id", f.id}, {"severity", SeverityName(f.severity)}, {"title", f.title},
              {"evidence", f.evidence}, {"actions", f.actions}, {"gain_basis", f.gain_basis}};
    j["expected_gain"] = f.expected_gain ? Json(*f.expected_gain) : Json(nullptr);
    arr.push_back(std::move(j));
  }
  return arr;
}

Json TraceReportJson(const std::vector<TraceAnalysis>& ranks, const std::vector<Finding>& findings) {
  Json out = {{"kind", "trace"}, {"findings", FindingsJson(findings)}};
  Json rs = Json::array();
  for (const TraceAnalysis& a : ranks) {
    Json r = {{"path", a.path}, {"device", a.device_name}, {"compute_major", a.compute_major},
              {"rank", a.rank}, {"world_size", a.world_size}, {"step_source", StepSourceName(a.step_source)},
              {"total_step_ns", a.total_step_time}, {"gpu_busy_ns", a.total_gpu_busy},
              {"data_loading_raw_ns", a.total_data_loading_raw}, {"communication_raw_ns", a.total_communication_raw},
              {"kernels", a.kernels}, {"kernel_ns", a.kernel_time}, {"tc_eligible_ns", a.tc_eligible_time},
              {"tensor_core_ns", a.tensor_core_time}, {"short_kernels", a.short_kernels},
              {"median_kernel_ns", a.median_kernel}, {"peak_memory_reserved", a.peak_memory_reserved},
              {"device_memory", a.device_memory}};
    Json totals = Json::object();
    for (int p = 0; p < kPhaseCount; ++p) totals[std::string(PhaseName(static_cast<Phase>(p)))] = a.total[p];
    r["phases_ns"] = totals;
    Json steps = Json::array();
    for (const StepBreakdown& s : a.steps) {
      Json ph = Json::object();
      for (int p = 0; p < kPhaseCount; ++p) ph[std::string(PhaseName(static_cast<Phase>(p)))] = s.phases[p];
      steps.push_back({{"step", s.number}, {"start_ns", s.start}, {"duration_ns", s.duration()},
                       {"gpu_busy_ns", s.gpu_busy}, {"phases_ns", ph}});
    }
    r["steps"] = steps;
    Json tk = Json::array();
    for (const KernelTotal& k : a.top_kernels) tk.push_back({{"name", k.name}, {"ns", k.time}, {"count", k.count}});
    r["top_kernels"] = tk;
    rs.push_back(std::move(r));
  }
  out["ranks"] = rs;
  return out;
}

Json RecordingReportJson(const Recording& rec, const Evidence& e, const std::vector<Finding>& findings) {
  Json out = {{"kind", "recording"}, {"pid", rec.pid}, {"main_pid", rec.main_pid}, {"start_us", rec.start}, {"end_us", rec.end},
              {"gpu", rec.gpu_description}, {"gpu_error", rec.gpu_error}, {"max_workers", rec.max_workers},
              {"findings", FindingsJson(findings)}};
  out["exit_code"] = rec.exit_code ? Json(*rec.exit_code) : Json(nullptr);
  out["data_loading_share"] = e.data_loading_share ? Json(*e.data_loading_share) : Json(nullptr);
  out["gpu_busy_share"] = e.gpu_busy_share ? Json(*e.gpu_busy_share) : Json(nullptr);
  Json samples = Json::array();
  for (const Sample& s : rec.samples) {
    Json j = {{"t_us", s.t}, {"main_state", ProcStateName(s.main_state)}, {"main_cpu_permille", s.main_cpu_permille},
              {"workers", s.workers}, {"workers_running", s.workers_running}, {"workers_iowait", s.workers_iowait},
              {"workers_cpu_permille", s.workers_cpu_permille}, {"read_bytes_per_s", s.read_bytes_per_s},
              {"net_rx_bytes_per_s", s.net_rx_bytes_per_s}};
    j["gpu_util_permille"] = s.gpu_util_permille ? Json(*s.gpu_util_permille) : Json(nullptr);
    j["gpu_memory_used"] = s.gpu_memory_used ? Json(*s.gpu_memory_used) : Json(nullptr);
    samples.push_back(std::move(j));
  }
  out["samples"] = samples;
  Json steps = Json::array();
  for (const StepMark& m : rec.steps) {
    Json j = {{"step", m.step}, {"start_us", m.start}};
    j["data_ready_us"] = m.data_ready ? Json(*m.data_ready) : Json(nullptr);
    j["end_us"] = m.end ? Json(*m.end) : Json(nullptr);
    steps.push_back(std::move(j));
  }
  out["steps"] = steps;
  return out;
}

std::string TraceTimelineSvg(const std::vector<TraceAnalysis>& ranks) {
  Svg svg;
  const double util_h = 110, band_h = 36, row_h = 30 + util_h + 8 + band_h + 30;
  double y0 = 10;
  for (const TraceAnalysis& a : ranks) {
    const TimelineBins& tl = a.timeline;
    const double nbins = static_cast<double>(std::max<std::size_t>(1, tl.bins.size()));
    const double span = nbins * static_cast<double>(tl.bin_width);
    auto x_of = [&](Nanos t) { return kLeft + kPlotW * static_cast<double>(t - tl.start) / span; };
    svg.Text(kLeft, y0 + 14,
             fmt::format("{}{} - GPU busy per {:.2f} ms bin, step boundaries, phases", Base(a.path),
                         a.rank >= 0 ? fmt::format(" (rank {})", a.rank) : "", static_cast<double>(tl.bin_width) / 1e6),
             13);
    double uy = y0 + 24;
    UtilAxes(svg, uy, util_h, "GPU busy");
    std::vector<std::pair<double, double>> pts;
    double by = uy + util_h + 8;
    for (std::size_t b = 0; b < tl.bins.size(); ++b) {
      Nanos busy = 0, total = 0;
      for (int p = 0; p < kPhaseCount; ++p) {
        total += tl.bins[b][p];
        if (PhaseIsGpuActive(static_cast<Phase>(p))) busy += tl.bins[b][p];
      }
      double x = kLeft + kPlotW * static_cast<double>(b) / nbins, w = kPlotW / nbins;
      pts.emplace_back(x + w / 2, uy + util_h - util_h * Frac(busy, tl.bin_width));
      // Phase band: the bin's time stacked by phase (gaps between steps stay white).
      double yy = by;
      for (int p = 0; p < kPhaseCount; ++p) {
        double h = band_h * Frac(tl.bins[b][p], tl.bin_width);
        svg.Rect(x, yy, w + 0.3, h, kPhaseColour[p]);
        yy += h;
      }
      (void)total;
    }
    svg.Polyline(pts, "#1f3b73");
    svg.Text(6, by + 22, "phases", 11);
    for (const StepBreakdown& s : a.steps) {
      double x = x_of(s.start);
      svg.Line(x, uy, x, by + band_h, "#333333", 1, true);
      if (s.number >= 0) svg.Text(x + 3, uy + 10, fmt::format("#{}", s.number), 10);
    }
    if (!a.steps.empty()) {
      double x = x_of(a.steps.back().end);
      svg.Line(x, uy, x, by + band_h, "#333333", 1, true);
    }
    svg.Text(kLeft, by + band_h + 14, "0 ms", 10);
    svg.Text(kLeft + kPlotW, by + band_h + 14, fmt::format("{:.1f} ms", span / 1e6), 10, "end");
    y0 += row_h;
  }
  // Legend.
  double lx = kLeft, ly = y0 + 4;
  for (int p = 0; p < kPhaseCount; ++p) {
    std::string label(PhaseLabel(static_cast<Phase>(p)));
    double w = 18 + 6.5 * static_cast<double>(label.size()) + 14;
    if (lx + w > kLeft + kPlotW) { lx = kLeft; ly += 18; }
    svg.Rect(lx, ly, 12, 12, kPhaseColour[p]);
    svg.Text(lx + 16, ly + 10, label, 11);
    lx += w;
  }
  svg.height = static_cast<int>(ly + 26);
  return svg.Finish();
}

std::string RecordingTimelineSvg(const Recording& rec) {
  Svg svg;
  const Micros t0 = rec.start, span = std::max<Micros>(1, rec.end - rec.start);
  auto x_of = [&](Micros t) { return kLeft + kPlotW * static_cast<double>(std::clamp<Micros>(t - t0, 0, span)) / static_cast<double>(span); };
  svg.Text(kLeft, 24, fmt::format("pid {}: GPU utilisation, main-process state, step phases ({} samples)", rec.pid, rec.samples.size()), 13);
  const double uy = 34, uh = 110;
  UtilAxes(svg, uy, uh, "GPU util");
  std::vector<std::pair<double, double>> gpu_pts, cpu_pts;
  for (const Sample& s : rec.samples) {
    if (s.gpu_util_permille) gpu_pts.emplace_back(x_of(s.t), uy + uh - uh * *s.gpu_util_permille / 1000.0);
    cpu_pts.emplace_back(x_of(s.t), uy + uh - uh * std::min(1000, s.main_cpu_permille) / 1000.0);
  }
  svg.Polyline(gpu_pts, "#1f3b73");
  svg.Polyline(cpu_pts, "#e15759");
  // Main-process state band.
  const double sy = uy + uh + 10, sh = 18;
  svg.Text(6, sy + 13, "main proc", 11);
  Micros prev = t0;
  for (const Sample& s : rec.samples) {
    const char* c = s.main_state == ProcState::kRunning ? "#59a14f"
                    : s.main_state == ProcState::kIoWait ? "#f28e2b"
                    : s.main_state == ProcState::kSleeping ? "#d4d4d4" : "#ffffff";
    svg.Rect(x_of(prev), sy, x_of(s.t) - x_of(prev), sh, c, std::string(ProcStateName(s.main_state)));
    prev = s.t;
  }
  // Step phases from markers.
  const double py = sy + sh + 6, ph = 18;
  svg.Text(6, py + 13, "steps", 11);
  for (const StepMark& m : rec.steps) {
    Micros end = m.end.value_or(rec.end);
    Micros ready = m.data_ready.value_or(m.start);
    svg.Rect(x_of(m.start), py, x_of(ready) - x_of(m.start), ph, kPhaseColour[static_cast<int>(Phase::kDataLoading)],
             fmt::format("step {}: waiting for data", m.step));
    svg.Rect(x_of(ready), py, x_of(end) - x_of(ready), ph, kPhaseColour[static_cast<int>(Phase::kForward)],
             fmt::format("step {}: compute", m.step));
    svg.Line(x_of(m.start), uy, x_of(m.start), py + ph, "#333333", 0.6, true);
  }
  svg.Text(kLeft, py + ph + 14, "0 s", 10);
  svg.Text(kLeft + kPlotW, py + ph + 14, fmt::format("{:.1f} s", static_cast<double>(span) / 1e6), 10, "end");
  double ly = py + ph + 28, lx = kLeft;
  const std::pair<const char*, const char*> legend[] = {
      {"#1f3b73", "GPU utilisation"}, {"#e15759", "main-process CPU"}, {"#59a14f", "running"},
      {"#f28e2b", "I/O wait"}, {"#d4d4d4", "sleeping"}, {kPhaseColour[static_cast<int>(Phase::kDataLoading)], "waiting for data"},
      {kPhaseColour[static_cast<int>(Phase::kForward)], "step compute"}};
  for (auto [c, l] : legend) {
    svg.Rect(lx, ly, 12, 12, c);
    svg.Text(lx + 16, ly + 10, l, 11);
    lx += 30 + 6.5 * static_cast<double>(std::strlen(l));
  }
  svg.height = static_cast<int>(ly + 24);
  return svg.Finish();
}

Result<Recording> RecordingFromJobSamples(const Json& body) {
  // Exceptions stop at this parsing edge: any type mismatch is a clear error.
  try {
    const Json& job = body.at("job");
    Recording rec;
    rec.pid = job.value("pid", 0);
    rec.main_pid = rec.pid;
    std::string model = body.value("device_model", "");
    const Json& slices = body.at("slices");
    std::string where;
    for (const Json& s : slices) {
      if (!where.empty()) where += ", ";
      where += fmt::format("slice {} ({})", s.at("id").get<std::int64_t>(), s.at("kind").get<std::string>());
    }
    rec.gpu_description = fmt::format("job {} {}{}{}", job.at("id").get<std::int64_t>(),
                                      where.empty() ? "(never placed)" : "on " + where,
                                      model.empty() ? "" : ", " + model,
                                      body.value("simulated", false) ? " -- SIMULATED devices" : "");
    // null or absent: the slice's memory is unknown (no percentage is made up from it).
    const Bytes total = body.contains("memory_total") && body["memory_total"].is_number_integer()
                            ? body["memory_total"].get<Bytes>()
                            : 0;
    for (const Json& p : body.at("samples")) {
      Sample smp;
      smp.t = p.at("t").get<Micros>();
      // null: the daemon could not measure the slice's utilisation then (unknown, not 0).
      if (!p.at("util_permille").is_null()) smp.gpu_util_permille = p.at("util_permille").get<int>();
      if (!p.at("memory_used").is_null()) smp.gpu_memory_used = p.at("memory_used").get<Bytes>();
      if (total > 0) smp.gpu_memory_total = total;
      rec.samples.push_back(smp);
    }
    if (!rec.samples.empty()) {
      rec.start = rec.samples.front().t;
      rec.end = rec.samples.back().t;
    }
    return rec;
  } catch (const Json::exception& ex) {
    return Internal(fmt::format("daemon's job samples: unexpected answer ({})", ex.what()));
  }
}

std::string JobReportText(const Json& body, const Recording& rec, const Evidence& e,
                          const std::vector<Finding>& findings) {
  const Json& job = body.at("job");
  std::string o = fmt::format("gpuslice profile: job {} ({}, queue {}, {}) as the daemon recorded it: {} samples over {:.1f} s\n",
                              job.value("id", 0), job.value("user", std::string("?")), job.value("queue", std::string("?")),
                              job.value("state", std::string("?")), rec.samples.size(),
                              static_cast<double>(rec.end - rec.start) / 1e6);
  if (rec.samples.empty()) {
    o += "  no samples recorded yet (the daemon samples every second; try again once the job has run a while)\n";
  } else {
    o += fmt::format("  GPU: {}: mean utilisation {}", rec.gpu_description, e.gpu_busy_share ? Pct(*e.gpu_busy_share) : "n/a");
    if (e.memory_peak && e.memory_total) o += fmt::format(", peak memory {} of {}", FormatBytes(*e.memory_peak), FormatBytes(*e.memory_total));
    o += "\n";
  }
  o += "  GPU figures only: the daemon records no per-process CPU, I/O or step markers (run under `gpuslice profile -- CMD` for those)\n";
  o += FindingsText(findings);
  return o;
}

namespace {

// --job: fetch the daemon's record and turn it into the same evidence as a recording.
Status ProfileJob(const ProfileOptions& o, std::string* text, Json* report, std::string* svg) {
  std::uint64_t id = 0;
  auto [p, ec] = std::from_chars(o.job.data(), o.job.data() + o.job.size(), id);
  if (ec != std::errc() || p != o.job.data() + o.job.size() || id == 0) {
    return InvalidArgument(fmt::format("--job '{}': expected a positive job id", o.job));
  }
  api::ApiClient client(o.socket.empty() ? api::DefaultSocket() : o.socket);
  GPUSLICE_ASSIGN_OR_RETURN(Json body, client.Get(fmt::format("/v1/jobs/{}/samples", id)));
  GPUSLICE_ASSIGN_OR_RETURN(Recording rec, RecordingFromJobSamples(body));
  Evidence e = EvidenceFromRecording(rec);
  std::vector<Finding> findings = Diagnose(e);
  *text = JobReportText(body, rec, e, findings);
  *report = RecordingReportJson(rec, e, findings);
  (*report)["kind"] = "job";
  (*report)["job"] = body.at("job");
  *svg = RecordingTimelineSvg(rec);
  return Status::Ok();
}

}  // namespace

std::string FindPythonHelperDir() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("GPUSLICE_PYTHON_DIR")) candidates.emplace_back(env);
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
#ifdef GPUSLICE_INSTALL_PYTHONDIR
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / GPUSLICE_INSTALL_PYTHONDIR);
#endif
#ifdef GPUSLICE_PYTHON_SOURCE_DIR
  candidates.emplace_back(GPUSLICE_PYTHON_SOURCE_DIR);
#endif
  for (const auto& c : candidates) {
    if (std::filesystem::exists(c / "gpuslice_steps.py", ec)) return c.string();
  }
  return {};
}

Status RunProfile(const ProfileOptions& o, std::ostream& out) {
  int modes = (o.traces.empty() ? 0 : 1) + (o.command.empty() ? 0 : 1) + (o.pid != 0 ? 1 : 0) + (o.job.empty() ? 0 : 1);
  if (modes != 1) {
    return InvalidArgument("profile: give exactly one of --trace FILE[,FILE...], --pid PID, --job ID or -- CMD...");
  }
  if (!o.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir, ec);
    if (ec) return InvalidArgument(fmt::format("--out {}: {}", o.out_dir, ec.message()));
  }
  Json report;
  std::string svg, text;
  if (!o.job.empty()) {
    GPUSLICE_RETURN_IF_ERROR(ProfileJob(o, &text, &report, &svg));
  } else if (!o.traces.empty()) {
    std::vector<TraceAnalysis> ranks;
    for (const std::string& path : o.traces) {
      GPUSLICE_ASSIGN_OR_RETURN(ParsedTrace parsed, ParseTraceFile(path));
      GPUSLICE_ASSIGN_OR_RETURN(TraceAnalysis a, AnalyseTrace(parsed));
      ranks.push_back(std::move(a));
    }
    std::vector<Finding> findings = Diagnose(EvidenceFromTraces(ranks));
    text = TraceReportText(ranks, findings);
    report = TraceReportJson(ranks, findings);
    svg = TraceTimelineSvg(ranks);
  } else {
    std::unique_ptr<devices::DeviceBackend> backend;
    std::unique_ptr<GpuSampler> sampler;
    if (!o.simulate.empty()) {
      GPUSLICE_ASSIGN_OR_RETURN(auto fake, devices::FakeBackend::Create(o.simulate));
      if (o.simulate_util_permille >= 0) {
        devices::FakeStep step;
        step.gpu_util = o.simulate_util_permille;
        fake->SetState(DeviceIndex(static_cast<std::uint32_t>(o.device)), step);
      }
      backend = std::move(fake);
    } else {
      devices::BackendOptions bo;
      bo.kind = o.backend;
      auto b = devices::OpenBackend(bo);
      if (b.ok()) backend = std::move(b).value();
      else out << "note: no GPU figures: " << b.status().ToString() << "\n";
    }
    if (backend) sampler = MakeBackendSampler(backend.get(), o.device);
    RecordOptions ro;
    ro.command = o.command;
    ro.attach_pid = o.pid;
    ro.interval = o.interval;
    ro.max_duration = o.duration;
    std::string step_file;
    if (!o.out_dir.empty()) {
      step_file = (std::filesystem::path(o.out_dir) / "steps.jsonl").string();
    } else {
      step_file = (std::filesystem::temp_directory_path() / fmt::format("gpuslice-steps-{}.jsonl", getpid())).string();
    }
    std::filesystem::remove(step_file);
    if (!o.command.empty()) ro.step_file = step_file;
    ro.python_dir = FindPythonHelperDir();  // an attached process cannot be given env
    GPUSLICE_ASSIGN_OR_RETURN(Recording rec, Record(ro, sampler.get()));
    if (o.out_dir.empty()) std::filesystem::remove(step_file);
    Evidence e = EvidenceFromRecording(rec);
    std::vector<Finding> findings = Diagnose(e);
    text = RecordingReportText(rec, e, findings);
    report = RecordingReportJson(rec, e, findings);
    svg = RecordingTimelineSvg(rec);
  }
  if (o.json_to_stdout) out << report.dump(2) << "\n";
  else out << text;
  if (!o.out_dir.empty()) {
    auto dir = std::filesystem::path(o.out_dir);
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "report.json").string(), report.dump(2) + "\n"));
    GPUSLICE_RETURN_IF_ERROR(WriteFile((dir / "timeline.svg").string(), svg));
    if (!o.json_to_stdout) out << fmt::format("\nwrote {}/report.json and {}/timeline.svg\n", o.out_dir, o.out_dir);
  }
  return Status::Ok();
}

}  // namespace gpuslice::profile
