#include "sim/activity.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "core/text.h"

namespace gpuslice::sim {

std::string_view RunStateName(RunState s) {
  switch (s) {
    case RunState::kUnknown: return "unknown";
    case RunState::kIdle: return "idle";
    case RunState::kActive: return "active";
  }
  return "unknown";
}

ActivityTotals Integrate(std::span<const ActivityRun> runs, Micros from, Micros to) {
  ActivityTotals t;
  if (to <= from) return t;
  Micros at = 0;
  for (const ActivityRun& r : runs) {
    if (at >= to) break;
    const Micros a = std::max(at, from), b = std::min(at + r.length, to);
    at += r.length;
    if (b <= a) continue;
    const Micros len = b - a;
    switch (r.state) {
      case RunState::kUnknown: t.unknown += len; break;
      case RunState::kIdle: t.idle += len; break;
      case RunState::kActive:
        t.active += len;
        if (r.permille >= 0) {
          t.active_level_known += len;
          t.used_permille_us += static_cast<std::int64_t>(r.permille) * len;
        }
        break;
    }
  }
  if (to > std::max(at, from)) t.unknown += to - std::max(at, from);  // past the record
  return t;
}

std::vector<ActivityRun> RunsFrom(std::span<const ActivityRun> runs, Micros offset) {
  std::vector<ActivityRun> out;
  Micros at = 0;
  for (const ActivityRun& r : runs) {
    const Micros end = at + r.length;
    if (end > offset) {
      ActivityRun part = r;
      part.length = end - std::max(at, offset);
      out.push_back(part);
    }
    at = end;
  }
  return out;
}

Micros NextActive(std::span<const ActivityRun> runs, Micros from) {
  Micros at = 0;
  for (const ActivityRun& r : runs) {
    const Micros end = at + r.length;
    if (r.state == RunState::kActive && end > from) return std::max(at, from);
    at = end;
  }
  return -1;
}

int PeakActivePermille(std::span<const ActivityRun> runs) {
  int peak = -1;
  for (const ActivityRun& r : runs)
    if (r.state == RunState::kActive) peak = std::max<int>(peak, r.permille);
  return peak;
}

void AppendRun(std::vector<ActivityRun>& runs, ActivityRun run) {
  if (run.length <= 0) return;
  if (!runs.empty() && runs.back().state == run.state) {
    ActivityRun& last = runs.back();
    if (run.state == RunState::kActive) {
      // Length-weighted mean of the known levels; unknown where neither is known.
      if (last.permille < 0) {
        last.permille = run.permille;
      } else if (run.permille >= 0) {
        const __int128 sum = static_cast<__int128>(last.permille) * last.length +
                             static_cast<__int128>(run.permille) * run.length;
        last.permille = static_cast<std::int16_t>((sum + (last.length + run.length) / 2) / (last.length + run.length));
      }
    }
    last.length += run.length;
    return;
  }
  if (run.state == RunState::kIdle) run.permille = 0;
  if (run.state == RunState::kUnknown) run.permille = -1;
  runs.push_back(run);
}

Result<std::vector<ActivityRun>> ParseActivity(std::string_view text, Micros max_total) {
  std::vector<ActivityRun> runs;
  Micros total = 0;
  std::string_view rest = text;
  auto bad = [&](std::string_view token, std::string_view why) {
    return InvalidArgument(fmt::format("activity run '{}': {}", EscapeInvalidUtf8(token), why));
  };
  while (true) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    if (rest.empty()) break;
    std::size_t end = 0;
    while (end < rest.size() && rest[end] != ' ' && rest[end] != '\t') ++end;
    const std::string_view token = rest.substr(0, end);
    rest.remove_prefix(end);
    ActivityRun run;
    switch (token.front()) {
      case 'a': run.state = RunState::kActive; break;
      case 'i': run.state = RunState::kIdle; run.permille = 0; break;
      case 'u': run.state = RunState::kUnknown; break;
      default: return bad(token, "expected a (busy), i (idle) or u (unknown), then a duration");
    }
    std::string_view body = token.substr(1);
    const std::size_t at = body.find('@');
    const std::string_view dur = body.substr(0, at);
    if (dur.empty()) return bad(token, "no duration");
    auto d = ParseDuration(dur);
    if (!d.ok()) return bad(token, d.status().message());
    if (*d <= 0) return bad(token, "the duration is zero");
    run.length = *d;
    if (at != std::string_view::npos) {
      if (run.state != RunState::kActive) return bad(token, "only a busy run (a) has a utilisation");
      std::string_view pct = body.substr(at + 1);
      if (!pct.empty() && pct.back() == '%') pct.remove_suffix(1);
      double v = -1;
      auto [p, ec] = std::from_chars(pct.data(), pct.data() + pct.size(), v);
      if (pct.empty() || ec != std::errc() || p != pct.data() + pct.size() || !(v >= 0 && v <= 100)) {
        return bad(token, "the utilisation after '@' is not a percentage 0..100");
      }
      run.permille = static_cast<std::int16_t>(v * 10 + 0.5);
    }
    total += run.length;
    if (total > max_total) {
      return bad(token, fmt::format("the runs add up to more than {}", FormatDuration(max_total)));
    }
    AppendRun(runs, run);
  }
  return runs;
}

std::string FormatActivity(std::span<const ActivityRun> runs) {
  std::string out;
  for (const ActivityRun& r : runs) {
    if (!out.empty()) out += ' ';
    out += r.state == RunState::kActive ? 'a' : r.state == RunState::kIdle ? 'i' : 'u';
    // Exact: whole seconds read as 1h30m, anything finer in microseconds.
    out += r.length % kSecond == 0 ? FormatDuration(r.length) : fmt::format("{}us", r.length);
    if (r.state == RunState::kActive && r.permille >= 0) {
      out += r.permille % 10 == 0 ? fmt::format("@{}", r.permille / 10) : fmt::format("@{:.1f}", r.permille / 10.0);
    }
  }
  return out;
}

}  // namespace gpuslice::sim
