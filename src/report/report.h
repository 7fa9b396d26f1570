#pragma once
// The usage report (`gpuslice report`, GET /v1/report): over a period, GPU-hours held and used
// per user, queue, device or job, idle hours and what idle reclaim returned, time-limited and
// reclaimed jobs, waits per queue and per pending reason, the sessions that held most while
// idle, held vs used over time, and a one-line verdict on whether the host needs more GPUs.
// Everything comes from the store (jobs, slices, events, downsampled samples: store.h), so the
// daemon and an offline reader of a state directory give the same document.
//
// Unknown is not zero: a held interval without a measured utilisation is "unknown"; used
// figures and percentages are over the measured part only and say their coverage; a figure
// with no measurement at all is null. docs/report.md explains every field and the verdict.
//
// Free functions; thread-safe as the Store they read.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/units.h"
#include "store/store.h"

namespace gpuslice::report {

enum class GroupBy { kUser, kQueue, kDevice, kJob };
std::string_view GroupByName(GroupBy by);
// "user" | "queue" | "device" | "job"; the error names the flag and the value.
Result<GroupBy> ParseGroupBy(std::string_view text, std::string_view flag = "--by");

// A point in time: "2026-12-01", "2026-12-01T10:30", "2026-12-01T10:30:00" (UTC, optional
// trailing Z), "2026-12-01 10:30:00", or seconds since the epoch ("1764547200"). Errors name
// `flag` and the value.
Result<Micros> ParseTimePoint(std::string_view text, std::string_view flag);
// "2026-12-01T10:30:00Z".
std::string FormatTimePoint(Micros t);

struct Period {
  Micros from = 0;
  Micros to = 0;
};
// --since D (a duration back from now, e.g. 7d, 12h) or --from/--to (either may be missing:
// --to defaults to now, --from to 7 days before --to). --since with --from is an error; so is
// an empty or inverted period or one that starts after `now`. Default: the last 7 days.
Result<Period> ParsePeriod(std::string_view since, std::string_view from, std::string_view to,
                           Micros now);

struct ReportOptions {
  Period period;
  GroupBy by = GroupBy::kQueue;
  Micros now = 0;
  // The host's devices (the daemon knows them); nullopt: counted from the stored history.
  std::optional<int> devices;
  bool simulated = false;
  int top_idle = 5;           // sessions listed under "top_idle"
  int max_timeline = 240;     // at most this many timeline buckets
};

// The query of GET /v1/report (since, from, to, by); errors name the parameter and the value.
Result<ReportOptions> OptionsFromQuery(const std::map<std::string, std::string>& query, Micros now);

// The report document (docs/report.md has its shape). NotFound when the period ends before
// any stored history; InvalidArgument for a bad option.
Result<nlohmann::json> BuildReport(store::Store& store, const ReportOptions& options);

// The terminal table (every value through ForTerminal), CSV (one row per group, then the
// totals row), and the SVG plots written into `dir` (created if needed): held_vs_used.svg and
// by_<group>.svg. Return the written paths.
std::string FormatTable(const nlohmann::json& report);
std::string FormatCsv(const nlohmann::json& report);
Result<std::vector<std::string>> WriteSvgs(const nlohmann::json& report, const std::string& dir);
// The SVG texts themselves (for tests and the dashboard): held vs used over time, and held vs
// used per group.
std::string TimelineSvg(const nlohmann::json& report);
std::string GroupsSvg(const nlohmann::json& report);

}  // namespace gpuslice::report
