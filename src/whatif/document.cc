#include "whatif/document.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/text.h"
#include "report/report.h"
#include "sim/csv.h"
#include "sim/output.h"

namespace gpuslice::whatif {
namespace {

using Json = nlohmann::json;

double Hours(MilliUs v) { return std::round(static_cast<double>(v) / kMilliUsPerGpuHour * 1000.0) / 1000.0; }
Json Percent(MilliUs part, MilliUs whole) {
  if (whole <= 0) return nullptr;
  return std::round(1000.0 * static_cast<double>(part) / static_cast<double>(whole)) / 10.0;
}

Json WaitsJson(const std::vector<QueueWaits>& waits) {
  Json out = Json::array();
  for (const QueueWaits& q : waits) {
    out.push_back({{"queue", EscapeInvalidUtf8(q.queue)},
                   {"jobs", q.jobs},
                   {"never_started", q.never_started},
                   {"p50_us", q.jobs > 0 ? Json(q.p50) : Json(nullptr)},
                   {"p95_us", q.jobs > 0 ? Json(q.p95) : Json(nullptr)},
                   {"max_us", q.jobs > 0 ? Json(q.max) : Json(nullptr)}});
  }
  return out;
}

Json QueueHoursJson(const std::vector<QueueHours>& hours) {
  Json out = Json::array();
  for (const QueueHours& q : hours) {
    if (q.held == 0) continue;
    out.push_back({{"queue", EscapeInvalidUtf8(q.queue)},
                   {"held_gpu_hours", Hours(q.held)},
                   {"busy_gpu_hours", Hours(q.busy)},
                   {"idle_gpu_hours", Hours(q.idle)},
                   {"unknown_gpu_hours", Hours(q.unknown)},
                   {"used_gpu_hours", q.busy_level_known > 0 ? Json(Hours(q.used)) : Json(nullptr)}});
  }
  return out;
}

Json ScenarioJson(const ScenarioResult& r) {
  Json cuts = Json::array();
  for (const CutSession& c : r.cut_list) {
    cuts.push_back({{"job", EscapeInvalidUtf8(c.id)},
                    {"user", EscapeInvalidUtf8(c.user)},
                    {"queue", EscapeInvalidUtf8(c.queue)},
                    {"how", c.how},
                    {"held_before_us", c.held_before},
                    {"came_back_after_us", c.came_back >= 0 ? Json(c.came_back) : Json(nullptr)},
                    {"owner_cost_us", c.owner_cost},
                    {"given_back_gpu_hours", Hours(c.given_back)}});
  }
  Json notes = Json::array();
  for (const std::string& n : r.notes) notes.push_back(EscapeInvalidUtf8(n));
  return {{"name", r.name},
          {"description", EscapeInvalidUtf8(r.description)},
          {"gpus", r.gpus},
          {"capacity_gpu_hours", Hours(r.capacity)},
          {"held_gpu_hours", Hours(r.held)},
          {"held_percent", Percent(r.held, r.capacity)},
          {"busy_gpu_hours", Hours(r.busy)},
          {"idle_gpu_hours", Hours(r.idle)},
          {"unknown_gpu_hours", Hours(r.unknown)},
          {"measured_percent", Percent(r.held - r.unknown, r.held)},
          {"used_gpu_hours", r.busy_level_known > 0 ? Json(Hours(r.used)) : Json(nullptr)},
          {"given_back_gpu_hours", Hours(r.given_back)},
          {"jobs", r.jobs},
          {"started", r.started},
          {"rejected", r.rejected},
          {"never_started", r.never_started},
          {"unmeasured_jobs", r.unmeasured_jobs},
          {"resized", r.resized},
          {"not_resized_unmeasured", r.not_resized_unmeasured},
          {"slower", r.slower},
          {"cut",
           {{"sessions", r.cut},
            {"reclaimed", r.cut_reclaimed},
            {"time_limit", r.cut_time_limit},
            {"with_work_left", r.cut_with_work_left},
            {"owner_cost_us", r.owner_cost}}},
          {"waits", WaitsJson(r.waits)},
          {"by_queue", QueueHoursJson(r.hours)},
          {"cut_sessions", cuts},
          {"notes", notes},
          {"seconds", std::round(r.seconds * 1000) / 1000}};
}

// The configured idle window of the queues a reclaim cure names, said in words.
std::string Configured(const History& h, const std::vector<std::string>& queues) {
  std::set<std::string> seen;
  for (const std::string& name : queues) {
    const sched::QueueConfig* q = h.config.FindQueue(name);
    if (q == nullptr) continue;
    seen.insert(q->idle.enabled && q->idle.action == sched::ReclaimAction::kReclaim
                    ? fmt::format("{} configured", FormatDuration(q->idle.window))
                    : std::string("no idle reclaim configured"));
  }
  return seen.empty() ? "as configured" : fmt::format("{}", fmt::join(seen, ", "));
}

std::vector<std::string> Headlines(const History& h, const WhatifSpec& spec, const std::vector<ScenarioResult>& results) {
  std::vector<std::string> out;
  for (std::size_t i = 1; i < results.size() && i < spec.scenarios.size(); ++i) {
    const Scenario& s = spec.scenarios[i];
    const ScenarioResult& r = results[i];
    const double back = Hours(r.given_back);
    const std::string gave = back >= 0 ? fmt::format("given back {:.1f} GPU-hours", back)
                                       : fmt::format("held {:.1f} GPU-hours more", -back);
    const std::string cut = r.cut > 0 ? fmt::format(", cutting {} session{} ({} with work left, costing owners {})", r.cut,
                                                    r.cut == 1 ? "" : "s", r.cut_with_work_left, FormatWait(r.owner_cost))
                                      : "";
    if (s.gpus && !s.HasCures()) {
      std::vector<std::string> waits;
      for (const QueueWaits& q : r.waits) {
        if (q.jobs > 0) waits.push_back(fmt::format("{} {}", q.queue, FormatWait(q.p95)));
      }
      out.push_back(fmt::format("With {} GPUs instead of {}, p95 waits would have been {}.", r.gpus, results.front().gpus,
                                waits.empty() ? "none" : fmt::format("{}", fmt::join(waits, ", "))));
    } else if (r.cures == 1 && s.reclaim) {
      out.push_back(fmt::format("Idle reclaim after {} in {} (instead of {}) would have {}{}.", FormatDuration(s.reclaim->window),
                                fmt::join(s.reclaim->queues, ", "), Configured(h, s.reclaim->queues), gave, cut));
    } else if (s.HasCures()) {
      std::string resized;
      if (r.resized > 0 || r.not_resized_unmeasured > 0) {
        resized = fmt::format(" ({} job{} resized{})", r.resized, r.resized == 1 ? "" : "s",
                              r.not_resized_unmeasured > 0
                                  ? fmt::format(", {} left as recorded: not measured", r.not_resized_unmeasured)
                                  : "");
      }
      out.push_back(fmt::format("{} would have {}{}{}.", s.Describe(), gave, resized, cut));
    }
    out.back()[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out.back()[0])));
  }
  return out;
}

std::string Us(const Json& v) { return v.is_null() ? "-" : FormatWait(v.get<Micros>()); }
std::string Num(const Json& v, int decimals = 1) {
  if (v.is_null()) return "unknown";
  return fmt::format("{:.{}f}", v.get<double>(), decimals);
}

// The queues any scenario shows waits for, in name order.
std::vector<std::string> Queues(const Json& doc) {
  std::set<std::string> names;
  for (const Json& s : doc["scenarios"]) {
    for (const Json& w : s["waits"]) {
      if (w["jobs"].get<std::int64_t>() > 0) names.insert(w["queue"].get<std::string>());
    }
  }
  return {names.begin(), names.end()};
}

const Json* WaitOf(const Json& scenario, const std::string& queue) {
  for (const Json& w : scenario["waits"]) {
    if (w["queue"] == queue) return &w;
  }
  return nullptr;
}

// Left-aligned columns as wide as their widest cell.
std::string Columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) line += i + 1 < r.size() ? fmt::format("{:<{}}  ", r[i], width[i]) : r[i];
    out += line + "\n";
  }
  return out;
}

}  // namespace

Json ToJson(const History& h, const WhatifSpec& spec, const std::vector<ScenarioResult>& results, const Verdict& v) {
  Json scenarios = Json::array();
  for (const ScenarioResult& r : results) scenarios.push_back(ScenarioJson(r));
  Json probes = Json::array();
  for (const Probe& p : v.probes) probes.push_back({{"gpus", p.gpus}, {"meets", p.meets}, {"waits", WaitsJson(p.waits)}});
  Json targets = {{"default_us", spec.verdict.p95_wait}, {"queues", Json::object()}};
  for (const auto& [q, t] : spec.verdict.queue_p95) targets["queues"][EscapeInvalidUtf8(q)] = t;
  Json notes = Json::array();
  for (const std::string& n : h.notes) notes.push_back(EscapeInvalidUtf8(n));
  Json headlines = Json::array();
  for (const std::string& s : Headlines(h, spec, results)) headlines.push_back(EscapeInvalidUtf8(s));
  return {{"source", EscapeInvalidUtf8(h.source)},
          {"period",
           {{"from", report::FormatTimePoint(h.from)},
            {"to", report::FormatTimePoint(h.to)},
            {"from_us", h.from},
            {"to_us", h.to}}},
          {"gpus", GpuCount(h.nodes)},
          {"jobs", static_cast<std::int64_t>(h.jobs.size())},
          {"assume", {{"restart_cost_us", spec.assume.restart_cost}, {"idle_tail_us", spec.assume.idle_tail}}},
          {"scenarios", scenarios},
          {"verdict",
           {{"code", v.code},
            {"text", EscapeInvalidUtf8(v.text)},
            {"gpus_now", v.gpus_now},
            {"gpus_needed", v.gpus_needed},
            {"resolution", v.resolution},
            {"recorded_meets", v.recorded_meets},
            {"measured_percent", std::round(v.measured_percent * 10) / 10},
            {"unmeasured_jobs", v.unmeasured_jobs},
            {"cures", EscapeInvalidUtf8(v.cures)},
            {"best_cure", v.best_cure},
            {"targets", targets},
            {"probes", probes}}},
          {"headlines", headlines},
          {"notes", notes}};
}

std::string FormatTable(const Json& doc) {
  std::string out = fmt::format("gpuslice whatif  {}  {} .. {}  ({} GPUs, {} jobs)\n\n", ForTerminal(doc["source"].get<std::string>()),
                                doc["period"]["from"].get<std::string>(), doc["period"]["to"].get<std::string>(),
                                doc["gpus"].get<int>(), doc["jobs"].get<std::int64_t>());
  out += ForTerminal(doc["verdict"]["text"].get<std::string>()) + "\n\n";
  std::vector<std::vector<std::string>> rows = {{"SCENARIO", "GPUS", "HELD-GPUh", "BUSY", "IDLE", "UNKNOWN", "USED",
                                                 "GIVEN-BACK", "CUT", "WORK-LEFT", "OWNER-COST", "RESIZED"}};
  for (const Json& s : doc["scenarios"]) {
    rows.push_back({s["name"].get<std::string>(), std::to_string(s["gpus"].get<int>()), Num(s["held_gpu_hours"]),
                    Num(s["busy_gpu_hours"]), Num(s["idle_gpu_hours"]), Num(s["unknown_gpu_hours"]),
                    Num(s["used_gpu_hours"]), Num(s["given_back_gpu_hours"]), std::to_string(s["cut"]["sessions"].get<std::int64_t>()),
                    std::to_string(s["cut"]["with_work_left"].get<std::int64_t>()), Us(s["cut"]["owner_cost_us"]),
                    std::to_string(s["resized"].get<std::int64_t>())});
  }
  out += Columns(rows) + "\n";
  if (!doc["scenarios"].empty() && !doc["scenarios"][0]["by_queue"].empty()) {
    std::vector<std::vector<std::string>> by = {{"AS RECORDED", "HELD-GPUh", "BUSY", "IDLE", "UNKNOWN", "USED"}};
    for (const Json& q : doc["scenarios"][0]["by_queue"]) {
      by.push_back({ForTerminal(q["queue"].get<std::string>()), Num(q["held_gpu_hours"]), Num(q["busy_gpu_hours"]),
                    Num(q["idle_gpu_hours"]), Num(q["unknown_gpu_hours"]), Num(q["used_gpu_hours"])});
    }
    out += Columns(by) + "\n";
  }
  const std::vector<std::string> queues = Queues(doc);
  std::vector<std::vector<std::string>> waits = {{"WAIT p50/p95"}};
  for (const std::string& q : queues) waits[0].push_back(ForTerminal(q));
  for (const Json& s : doc["scenarios"]) {
    std::vector<std::string> row = {s["name"].get<std::string>()};
    for (const std::string& q : queues) {
      const Json* w = WaitOf(s, q);
      row.push_back(w == nullptr || (*w)["jobs"].get<std::int64_t>() == 0
                        ? "-"
                        : Us((*w)["p50_us"]) + "/" + Us((*w)["p95_us"]) +
                              ((*w)["never_started"].get<std::int64_t>() > 0
                                   ? fmt::format(" ({} never started)", (*w)["never_started"].get<std::int64_t>())
                                   : ""));
    }
    waits.push_back(std::move(row));
  }
  out += Columns(waits);
  if (!doc["headlines"].empty()) {
    out += "\n";
    for (const Json& l : doc["headlines"]) out += "- " + ForTerminal(l.get<std::string>()) + "\n";
  }
  std::vector<std::string> notes;
  for (const Json& n : doc["notes"]) notes.push_back(n.get<std::string>());
  for (const Json& s : doc["scenarios"]) {
    for (const Json& n : s["notes"]) notes.push_back(n.get<std::string>());
  }
  if (!notes.empty()) {
    out += "\nNotes:\n";
    for (const std::string& n : notes) out += "- " + ForTerminal(n) + "\n";
  }
  return out;
}

std::string FormatCsv(const Json& doc) {
  const std::vector<std::string> queues = Queues(doc);
  std::string out = "scenario,description,gpus,held_gpu_hours,busy_gpu_hours,idle_gpu_hours,unknown_gpu_hours,"
                    "used_gpu_hours,given_back_gpu_hours,jobs,started,never_started,unmeasured_jobs,resized,"
                    "not_resized_unmeasured,cut,cut_with_work_left,owner_cost_s";
  for (const std::string& q : queues) out += fmt::format(",{},{}", sim::CsvQuote("wait_p50_s." + q), sim::CsvQuote("wait_p95_s." + q));
  out += "\n";
  auto num = [](const Json& v) { return v.is_null() ? std::string() : fmt::format("{}", v.get<double>()); };
  auto secs = [](const Json& v) { return v.is_null() ? std::string() : fmt::format("{}", v.get<Micros>() / 1e6); };
  for (const Json& s : doc["scenarios"]) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}", sim::CsvQuote(s["name"].get<std::string>()), sim::CsvQuote(s["description"].get<std::string>()),
                       s["gpus"].get<int>(), num(s["held_gpu_hours"]), num(s["busy_gpu_hours"]), num(s["idle_gpu_hours"]),
                       num(s["unknown_gpu_hours"]), num(s["used_gpu_hours"]), num(s["given_back_gpu_hours"]),
                       s["jobs"].get<std::int64_t>(), s["started"].get<std::int64_t>(), s["never_started"].get<std::int64_t>(),
                       s["unmeasured_jobs"].get<std::int64_t>(), s["resized"].get<std::int64_t>(),
                       s["not_resized_unmeasured"].get<std::int64_t>(), s["cut"]["sessions"].get<std::int64_t>(),
                       s["cut"]["with_work_left"].get<std::int64_t>(), secs(s["cut"]["owner_cost_us"]));
    for (const std::string& q : queues) {
      const Json* w = WaitOf(s, q);
      out += w == nullptr ? ",," : fmt::format(",{},{}", secs((*w)["p50_us"]), secs((*w)["p95_us"]));
    }
    out += "\n";
  }
  return out;
}

Result<std::vector<std::string>> WriteSvgs(const Json& doc, const std::string& dir) {
  std::vector<std::string> written;
  const std::vector<std::string> queues = Queues(doc);
  std::vector<sim::BarRow> hours, waits;
  for (const Json& s : doc["scenarios"]) {
    hours.push_back({s["name"].get<std::string>(),
                     {s["busy_gpu_hours"].get<double>(), s["idle_gpu_hours"].get<double>(), s["unknown_gpu_hours"].get<double>()}});
    sim::BarRow w{s["name"].get<std::string>(), {}};
    for (const std::string& q : queues) {
      const Json* x = WaitOf(s, q);
      w.values.push_back(x == nullptr || (*x)["p95_us"].is_null() ? 0 : (*x)["p95_us"].get<double>() / 6e7);
    }
    waits.push_back(std::move(w));
  }
  const std::string h = sim::SvgBarPlot({"GPU-hours held, by what the recording shows", "", "GPU-hours", false},
                                        {"busy", "idle", "unknown"}, hours, true);
  const std::string w = sim::SvgBarPlot({"p95 queueing delay per queue", "", "minutes", false}, queues, waits, false);
  std::vector<sim::Series> series;
  for (const std::string& q : queues) {
    sim::Series s{q, {}};
    for (const Json& p : doc["verdict"]["probes"]) {
      for (const Json& x : p["waits"]) {
        if (x["queue"] == q && !x["p95_us"].is_null()) s.points.emplace_back(p["gpus"].get<double>(), x["p95_us"].get<double>() / 6e7);
      }
    }
    series.push_back(std::move(s));
  }
  const std::string v = sim::SvgLinePlot({"p95 wait with every cure, by GPU count", "GPUs", "minutes", false}, series);
  for (const auto& [name, text] : {std::pair{"whatif_gpu_hours.svg", &h}, {"whatif_waits.svg", &w}, {"whatif_verdict.svg", &v}}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    GPUSLICE_RETURN_IF_ERROR(sim::WriteFile(path, *text));
    written.push_back(path);
  }
  return written;
}

}  // namespace gpuslice::whatif
