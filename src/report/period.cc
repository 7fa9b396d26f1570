// Report periods and group names: parsing of --since/--from/--to/--by (and the same query
// parameters of GET /v1/report). All times are UTC; the calendar arithmetic is done here
// (days_from_civil) so the answer does not depend on the process's TZ.
#include <charconv>

#include <fmt/format.h>

#include "core/text.h"
#include "report/report.h"

namespace gpuslice::report {
namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
std::int64_t DaysFromCivil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

void CivilFromDays(std::int64_t z, std::int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = static_cast<std::int64_t>(yoe) + era * 400 + (*m <= 2);
}

bool Digits(std::string_view s, std::size_t pos, std::size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

Status BadTime(std::string_view flag, std::string_view text, std::string_view why) {
  return InvalidArgument(fmt::format(
      "{} '{}': {} (expected a date 2026-12-01, a time 2026-12-01T10:30[:00][Z] in UTC, or "
      "seconds since the epoch)",
      flag, EscapeInvalidUtf8(text), why));
}

}  // namespace

std::string_view GroupByName(GroupBy by) {
  switch (by) {
    case GroupBy::kUser: return "user";
    case GroupBy::kQueue: return "queue";
    case GroupBy::kDevice: return "device";
    case GroupBy::kJob: return "job";
  }
  return "queue";
}

Result<GroupBy> ParseGroupBy(std::string_view text, std::string_view flag) {
  for (GroupBy by : {GroupBy::kUser, GroupBy::kQueue, GroupBy::kDevice, GroupBy::kJob}) {
    if (text == GroupByName(by)) return by;
  }
  return InvalidArgument(fmt::format("{} '{}': expected user, queue, device or job", flag,
                                     EscapeInvalidUtf8(text)));
}

Result<Micros> ParseTimePoint(std::string_view text, std::string_view flag) {
  if (text.empty()) return BadTime(flag, text, "empty");
  if (text.find_first_not_of("0123456789") == std::string_view::npos) {
    std::int64_t secs = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), secs);
    // Up to the year 9999, as for dates.
    if (ec != std::errc() || p != text.data() + text.size() || secs > 253402300799LL) {
      return BadTime(flag, text, "out of range");
    }
    return secs * kSecond;
  }
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (text.size() < 10 || !Digits(text, 0, 4, &y) || text[4] != '-' || !Digits(text, 5, 2, &mo) ||
      text[7] != '-' || !Digits(text, 8, 2, &d)) {
    return BadTime(flag, text, "not a date or time");
  }
  std::size_t pos = 10;
  if (pos < text.size() && (text[pos] == 'T' || text[pos] == ' ')) {
    if (!Digits(text, pos + 1, 2, &h) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !Digits(text, pos + 4, 2, &mi)) {
      return BadTime(flag, text, "the time of day is not HH:MM");
    }
    pos += 6;
    if (pos < text.size() && text[pos] == ':') {
      if (!Digits(text, pos + 1, 2, &s)) return BadTime(flag, text, "the seconds are not SS");
      pos += 3;
    }
  }
  if (pos < text.size() && text[pos] == 'Z') ++pos;
  if (pos != text.size()) return BadTime(flag, text, "unexpected text after the date/time");
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > kDays[mo - 1] || (mo == 2 && d == 29 && !leap)) {
    return BadTime(flag, text, "no such date");
  }
  if (h > 23 || mi > 59 || s > 59) return BadTime(flag, text, "no such time of day");
  const std::int64_t days = DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  return ((days * 24 + h) * 60 + mi) * 60 * kSecond + s * kSecond;
}

std::string FormatTimePoint(Micros t) {
  const std::int64_t secs = t >= 0 ? t / kSecond : (t - kSecond + 1) / kSecond;
  std::int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
  std::int64_t rem = secs - days * 86400;
  std::int64_t y = 0;
  unsigned m = 0, d = 0;
  CivilFromDays(days, &y, &m, &d);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", y, m, d, rem / 3600, rem / 60 % 60,
                     rem % 60);
}

Result<Period> ParsePeriod(std::string_view since, std::string_view from, std::string_view to,
                           Micros now) {
  if (!since.empty() && !from.empty()) {
    return InvalidArgument(fmt::format("--since '{}' and --from '{}': give one of them",
                                       EscapeInvalidUtf8(since), EscapeInvalidUtf8(from)));
  }
  Period p;
  p.to = now;
  if (!to.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(p.to, ParseTimePoint(to, "--to"));
  }
  if (!since.empty()) {
    auto d = ParseDurationIn(since, kSecond, 20LL * 365 * 24 * kHour);
    if (!d.ok()) return InvalidArgument(fmt::format("--since: {}", d.status().message()));
    p.from = p.to - *d;
  } else if (!from.empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(p.from, ParseTimePoint(from, "--from"));
  } else {
    p.from = p.to - 7 * 24 * kHour;
  }
  if (p.from >= p.to) {
    return InvalidArgument(fmt::format("period {} .. {}: empty (--from must be before --to)",
                                       FormatTimePoint(p.from), FormatTimePoint(p.to)));
  }
  if (p.from >= now) {
    return InvalidArgument(fmt::format("period {} .. {}: starts after now ({})",
                                       FormatTimePoint(p.from), FormatTimePoint(p.to),
                                       FormatTimePoint(now)));
  }
  return p;
}

Result<ReportOptions> OptionsFromQuery(const std::map<std::string, std::string>& query, Micros now) {
  auto get = [&](const char* k) -> std::string {
    auto it = query.find(k);
    return it == query.end() ? std::string() : it->second;
  };
  for (const auto& [k, v] : query) {
    if (k != "since" && k != "from" && k != "to" && k != "by") {
      return InvalidArgument(fmt::format("query '{}': unknown parameter (since, from, to, by)",
                                         EscapeInvalidUtf8(k)));
    }
  }
  ReportOptions o;
  o.now = now;
  GPUSLICE_ASSIGN_OR_RETURN(o.period, ParsePeriod(get("since"), get("from"), get("to"), now));
  if (!get("by").empty()) {
    GPUSLICE_ASSIGN_OR_RETURN(o.by, ParseGroupBy(get("by"), "by"));
  }
  return o;
}

}  // namespace gpuslice::report
