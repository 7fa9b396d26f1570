// The report's renderings: a terminal table, CSV, and two hand-written SVG plots (no
// library: a few rectangles, a polyline and text). Every string that came from a user (keys:
// user names, queue names) goes through ForTerminal for the terminal, is quoted for CSV and
// XML-escaped for SVG.
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/text.h"
#include "report/report.h"

namespace gpuslice::report {
namespace {

using Json = nlohmann::json;

std::string Num(const Json& v, const char* unit = "") {
  if (v.is_null()) return "unknown";
  if (v.is_number_integer()) return fmt::format("{}{}", v.get<std::int64_t>(), unit);
  return fmt::format("{:.1f}{}", v.get<double>(), unit);
}

std::string Dur(const Json& v) {
  if (v.is_null()) return "-";
  const std::int64_t us = v.get<std::int64_t>();
  return us == 0 ? "0s" : FormatDuration(us);
}

std::string Table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(head.size(), 0);
  for (std::size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      out += r[i];
      if (i + 1 < r.size()) out += std::string(w[i] - r[i].size() + 2, ' ');
    }
    out += "\n";
  };
  line(head);
  for (const auto& r : rows) line(r);
  return out;
}

std::vector<std::string> FigureCells(const Json& f) {
  return {Num(f["held_gpu_hours"]),  Num(f["used_gpu_hours"]), Num(f["coverage_percent"], "%"),
          Num(f["idle_gpu_hours"]),  Num(f["reclaim_returned_gpu_hours"]),
          Num(f["jobs"]),            Num(f["timed_out"]),     Num(f["reclaimed"])};
}

std::string Xml(std::string_view s) {
  std::string out;
  for (char c : EscapeInvalidUtf8(s)) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\n') out += c;
    }
  }
  return out;
}

std::string Csv(std::string_view s) {
  std::string v = EscapeInvalidUtf8(s);
  // A cell a spreadsheet would run as a formula is kept as text.
  if (!v.empty() && (v[0] == '=' || v[0] == '+' || v[0] == '-' || v[0] == '@')) v = "'" + v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string CsvNum(const Json& v) {
  if (v.is_null()) return "";
  if (v.is_number_integer()) return fmt::format("{}", v.get<std::int64_t>());
  return fmt::format("{}", v.get<double>());
}

constexpr int kW = 900, kH = 360, kLeft = 60, kRight = 20, kTop = 40, kBottom = 50;

}  // namespace

std::string FormatTable(const Json& r) {
  std::string out;
  const Json& t = r["totals"];
  out += ForTerminal(fmt::format("gpuslice report  {} .. {}  ({} GPUs{})", r["period"]["from"].get<std::string>(),
                                 r["period"]["to"].get<std::string>(), r["devices"].get<int>(),
                                 r.value("simulated", false) ? ", simulated devices" : "")) + "\n";
  out += ForTerminal(r["verdict"]["text"].get<std::string>()) + "\n\n";
  out += fmt::format("capacity {} GPU-h; held {} GPU-h ({}); used {} GPU-h ({} of capacity, {} of measured); "
                     "measured {} of held, unknown {} GPU-h; idle {} GPU-h ({} of held); idle reclaim returned {} GPU-h\n\n",
                     Num(t["capacity_gpu_hours"]), Num(t["held_gpu_hours"]), Num(t["held_percent"], "%"),
                     Num(t["used_gpu_hours"]), Num(t["used_percent"], "%"), Num(t["used_percent_of_measured"], "%"),
                     Num(t["coverage_percent"], "%"), Num(t["unknown_gpu_hours"]), Num(t["idle_gpu_hours"]),
                     Num(t["idle_percent_of_held"], "%"), Num(t["reclaim_returned_gpu_hours"]));
  std::vector<std::vector<std::string>> rows;
  for (const auto& g : r["groups"]) {
    std::vector<std::string> row{ForTerminal(g["key"].get<std::string>())};
    for (auto& c : FigureCells(g)) row.push_back(std::move(c));
    rows.push_back(std::move(row));
  }
  std::vector<std::string> total{"TOTAL"};
  for (auto& c : FigureCells(t)) total.push_back(std::move(c));
  rows.push_back(std::move(total));
  std::string by = r["by"].get<std::string>();
  for (auto& ch : by) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  out += Table({by, "HELD-GPUh", "USED-GPUh", "MEASURED", "IDLE-GPUh", "RECLAIM-RETURNED", "JOBS", "TIMED-OUT", "RECLAIMED"}, rows);
  rows.clear();
  for (const auto& w : r["wait"]) {
    rows.push_back({ForTerminal(w["queue"].get<std::string>()), Num(w["jobs"]), Dur(w["p50_us"]), Dur(w["p95_us"])});
  }
  if (!rows.empty()) out += "\n" + Table({"QUEUE", "STARTED", "WAIT-P50", "WAIT-P95"}, rows);
  rows.clear();
  for (const auto& w : r["wait_by_reason"]) {
    rows.push_back({ForTerminal(w["reason"].get<std::string>()), Num(w["jobs"]), Dur(w["p50_us"]),
                    Dur(w["p95_us"]), Dur(w["total_us"])});
  }
  if (!rows.empty()) out += "\n" + Table({"WAIT-REASON", "JOBS", "P50", "P95", "TOTAL"}, rows);
  rows.clear();
  for (const auto& s : r["top_idle"]) {
    rows.push_back({Num(s["job"]), ForTerminal(s["user"].get<std::string>()), ForTerminal(s["queue"].get<std::string>()),
                    ForTerminal(s["state"].get<std::string>()), Num(s["held_gpu_hours"]), Num(s["idle_gpu_hours"])});
  }
  if (!rows.empty()) out += "\nHeld most while idle:\n" + Table({"JOB", "USER", "QUEUE", "STATE", "HELD-GPUh", "IDLE-GPUh"}, rows);
  rows.clear();
  if (r.contains("never_ran") && r["never_ran"].is_object()) {
    for (const auto& j : r["never_ran"]["list"]) {
      rows.push_back({Num(j["job"]), ForTerminal(j["user"].get<std::string>()), ForTerminal(j["queue"].get<std::string>()),
                      ForTerminal(j["why"].get<std::string>())});
    }
  }
  if (!rows.empty()) out += "\nCould never run on this host:\n" + Table({"JOB", "USER", "QUEUE", "WHY"}, rows);
  return out;
}

std::string FormatCsv(const Json& r) {
  std::string out = r["by"].get<std::string>() +
                    ",held_gpu_hours,used_gpu_hours,measured_gpu_hours,unknown_gpu_hours,coverage_percent,"
                    "idle_gpu_hours,reclaim_returned_gpu_hours,jobs,timed_out,reclaimed\n";
  auto row = [&](const std::string& key, const Json& f) {
    out += Csv(key);
    for (const char* k : {"held_gpu_hours", "used_gpu_hours", "measured_gpu_hours", "unknown_gpu_hours",
                          "coverage_percent", "idle_gpu_hours", "reclaim_returned_gpu_hours", "jobs",
                          "timed_out", "reclaimed"}) {
      out += "," + CsvNum(f[k]);
    }
    out += "\n";
  };
  for (const auto& g : r["groups"]) row(g["key"].get<std::string>(), g);
  row("TOTAL", r["totals"]);
  return out;
}

std::string TimelineSvg(const Json& r) {
  const auto& pts = r["timeline"]["points"];
  const double devices = std::max(1, r["devices"].get<int>());
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  const std::size_t n = std::max<std::size_t>(1, pts.size());
  auto x = [&](std::size_t i) { return kLeft + pw * static_cast<double>(i) / static_cast<double>(n); };
  auto y = [&](double g) { return kTop + ph * (1 - std::min(g, devices) / devices); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<title>GPUs held vs used</title>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" font-size=\"14\">GPUs held vs used, {} .. {}</text>\n",
      kW, kH, kW, kH, kLeft, Xml(r["period"]["from"].get<std::string>()), Xml(r["period"]["to"].get<std::string>()));
  for (int k = 0; k <= 4; ++k) {
    const double g = devices * k / 4;
    s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                     "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
                     kLeft, kW - kRight, y(g), y(g), kLeft - 6, y(g) + 4, g);
  }
  // Held: grey bars; measured but unknown part is what held has beyond measured; used: blue.
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const double held = pts[i]["held_gpus"].get<double>();
    const double bw = std::max(0.5, x(i + 1) - x(i));
    s += fmt::format("<rect class=\"held\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#c8c8c8\"/>\n",
                     x(i), y(held), bw, y(0) - y(held));
    if (!pts[i]["used_gpus"].is_null()) {
      const double used = pts[i]["used_gpus"].get<double>();
      s += fmt::format("<rect class=\"used\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#2b6cb0\"/>\n",
                       x(i), y(used), bw, y(0) - y(used));
    }
  }
  s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"black\"/>\n", kLeft, kW - kRight, y(0), y(0));
  s += fmt::format("<text x=\"{}\" y=\"{}\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLeft,
                   kH - kBottom + 18, Xml(r["period"]["from"].get<std::string>()), kW - kRight, kH - kBottom + 18,
                   Xml(r["period"]["to"].get<std::string>()));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#c8c8c8\"/><text x=\"{}\" y=\"{}\">held</text>"
                   "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#2b6cb0\"/><text x=\"{}\" y=\"{}\">used "
                   "(measured; a bar without blue was not measured)</text>\n",
                   kLeft, kH - 22, kLeft + 16, kH - 12, kLeft + 70, kH - 22, kLeft + 86, kH - 12);
  return s + "</svg>\n";
}

std::string GroupsSvg(const Json& r) {
  const auto& groups = r["groups"];
  const std::size_t n = std::min<std::size_t>(groups.size(), 30);
  double max = 0;
  for (std::size_t i = 0; i < n; ++i) max = std::max(max, groups[i]["held_gpu_hours"].get<double>());
  if (max <= 0) max = 1;
  const int row = 22, label = 160;
  const int h = kTop + static_cast<int>(n) * row + 40;
  const double pw = kW - kLeft - label - kRight;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<title>GPU-hours by {}</title>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"14\">GPU-hours held (grey) and used (blue) by {}</text>\n",
      kW, h, kW, h, Xml(r["by"].get<std::string>()), Xml(r["by"].get<std::string>()));
  for (std::size_t i = 0; i < n; ++i) {
    const Json& g = groups[i];
    const double held = g["held_gpu_hours"].get<double>();
    const double y = kTop + static_cast<double>(i) * row;
    const double x0 = 10 + label;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", x0 - 6, y + 14,
                     Xml(g["key"].get<std::string>().substr(0, 24)));
    s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"16\" fill=\"#c8c8c8\"/>\n", x0, y, pw * held / max);
    if (!g["used_gpu_hours"].is_null()) {
      s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"16\" fill=\"#2b6cb0\"/>\n", x0, y,
                       pw * g["used_gpu_hours"].get<double>() / max);
    }
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{:.1f} / {}</text>\n", x0 + pw * held / max + 4, y + 14, held,
                     g["used_gpu_hours"].is_null() ? std::string("unknown")
                                                   : fmt::format("{:.1f}", g["used_gpu_hours"].get<double>()));
  }
  return s + "</svg>\n";
}

Result<std::vector<std::string>> WriteSvgs(const Json& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgument(fmt::format("--out '{}': cannot create: {}", EscapeInvalidUtf8(dir), ec.message()));
  std::vector<std::string> written;
  for (const auto& [name, text] :
       {std::pair{std::string("held_vs_used.svg"), TimelineSvg(r)},
        std::pair{fmt::format("by_{}.svg", r["by"].get<std::string>()), GroupsSvg(r)}}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return Unavailable(fmt::format("--out: cannot write {}", EscapeInvalidUtf8(path)));
    written.push_back(path);
  }
  return written;
}

}  // namespace gpuslice::report
