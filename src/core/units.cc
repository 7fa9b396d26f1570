#include "core/units.h"

#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/text.h"

namespace gpuslice {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// Parses a non-negative decimal "123" or "1.25" into an exact fraction (mantissa, 10^scale).
struct Decimal {
  std::int64_t mantissa = 0;
  int scale = 0;  // number of digits after the point
};

// The value as an error message may echo it: input can hold any bytes (a CLI argument, an API
// body), and a message must stay valid UTF-8 (it ends up in JSON and on terminals).
std::string Shown(std::string_view text) { return EscapeInvalidUtf8(text); }

// The character starting at s[i] (all bytes of a UTF-8 sequence), escaped for a message.
std::string CharAt(std::string_view s, std::size_t i) {
  std::size_t n = 1;
  while (n < 4 && i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
  return EscapeInvalidUtf8(s.substr(i, n));
}

Result<Decimal> ParseDecimal(std::string_view s, std::string_view what, std::string_view whole) {
  if (s.empty()) return InvalidArgument(fmt::format("{} '{}': missing number", what, Shown(whole)));
  Decimal d;
  bool seen_point = false, seen_digit = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      if (seen_point) return InvalidArgument(fmt::format("{} '{}': malformed number", what, Shown(whole)));
      seen_point = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return InvalidArgument(
          fmt::format("{} '{}': unexpected character '{}'", what, Shown(whole), CharAt(s, i)));
    seen_digit = true;
    if (d.mantissa > (kMax - 9) / 10 || d.scale > 12)
      return InvalidArgument(fmt::format("{} '{}': number too large or too precise", what, Shown(whole)));
    d.mantissa = d.mantissa * 10 + (c - '0');
    if (seen_point) ++d.scale;
  }
  if (!seen_digit) return InvalidArgument(fmt::format("{} '{}': missing number", what, Shown(whole)));
  return d;
}

// value * unit / 10^scale, exactly or rounded half-up; errors on overflow.
Result<std::int64_t> Scale(const Decimal& d, std::int64_t unit, std::string_view what,
                           std::string_view whole) {
  __int128 v = static_cast<__int128>(d.mantissa) * unit;
  __int128 div = 1;
  for (int i = 0; i < d.scale; ++i) div *= 10;
  __int128 q = (v + div / 2) / div;
  if (q > kMax) return InvalidArgument(fmt::format("{} '{}': value overflows", what, Shown(whole)));
  return static_cast<std::int64_t>(q);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

Status CheckSign(std::string_view s, std::string_view what, std::string_view whole) {
  if (s.empty()) return InvalidArgument(fmt::format("{}: empty value", what));
  if (s.front() == '-')
    return InvalidArgument(fmt::format("{} '{}': must not be negative", what, Shown(whole)));
  return Status::Ok();
}

}  // namespace

Result<MilliGpu> ParseGpuAmount(std::string_view text) {
  constexpr std::string_view kWhat = "GPU amount";
  std::string_view s = Trim(text);
  GPUSLICE_RETURN_IF_ERROR(CheckSign(s, kWhat, text));
  bool milli = !s.empty() && s.back() == 'm';
  if (milli) s.remove_suffix(1);
  GPUSLICE_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(s, kWhat, text));
  if (milli && d.scale > 0)
    return InvalidArgument(fmt::format("{} '{}': milli-GPU must be a whole number", kWhat, Shown(text)));
  if (!milli && d.scale > 3)
    return InvalidArgument(fmt::format("{} '{}': finer than 1/1000 of a GPU", kWhat, Shown(text)));
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t v, Scale(d, milli ? 1 : kOneGpu, kWhat, text));
  if (v <= 0) return InvalidArgument(fmt::format("{} '{}': must be more than zero", kWhat, Shown(text)));
  if (v > kMaxMilliGpu)
    return InvalidArgument(fmt::format("{} '{}': more than {} GPUs", kWhat, Shown(text), kMaxMilliGpu / kOneGpu));
  return v;
}

Result<Bytes> ParseBytes(std::string_view text) {
  constexpr std::string_view kWhat = "memory size";
  std::string_view s = Trim(text);
  GPUSLICE_RETURN_IF_ERROR(CheckSign(s, kWhat, text));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string_view num = s.substr(0, i), unit = Trim(s.substr(i));
  struct U { std::string_view name; std::int64_t mult; };
  static constexpr U kUnits[] = {
      {"", 1}, {"B", 1}, {"KiB", kKiB}, {"MiB", kMiB}, {"GiB", kGiB}, {"TiB", 1024 * kGiB},
      {"Ki", kKiB}, {"Mi", kMiB}, {"Gi", kGiB}, {"Ti", 1024 * kGiB},
      {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000LL * 1000 * 1000},
      {"TB", 1000LL * 1000 * 1000 * 1000}, {"K", 1000}, {"M", 1000 * 1000},
      {"G", 1000LL * 1000 * 1000}, {"T", 1000LL * 1000 * 1000 * 1000}};
  for (const U& u : kUnits) {
    if (unit == u.name) {
      GPUSLICE_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(num, kWhat, text));
      GPUSLICE_ASSIGN_OR_RETURN(Bytes b, Scale(d, u.mult, kWhat, text));
      if (b > kMaxBytes)
        return InvalidArgument(fmt::format("{} '{}': more than {}", kWhat, Shown(text), FormatBytes(kMaxBytes)));
      return b;
    }
  }
  return InvalidArgument(fmt::format("{} '{}': unknown unit '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                                     kWhat, Shown(text), Shown(unit)));
}

Result<Micros> ParseDuration(std::string_view text) {
  constexpr std::string_view kWhat = "duration";
  std::string_view s = Trim(text);
  GPUSLICE_RETURN_IF_ERROR(CheckSign(s, kWhat, text));
  // A bare number is seconds.
  bool bare = true;
  for (char c : s) bare = bare && (std::isdigit(static_cast<unsigned char>(c)) || c == '.');
  if (bare) {
    GPUSLICE_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(s, kWhat, text));
    GPUSLICE_ASSIGN_OR_RETURN(Micros v, Scale(d, kSecond, kWhat, text));
    if (v > kMaxDuration)
      return InvalidArgument(fmt::format("{} '{}': longer than 100 years", kWhat, Shown(text)));
    return v;
  }
  Micros total = 0;
  while (!s.empty()) {
    size_t i = 0;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
    std::string_view num = s.substr(0, i);
    s.remove_prefix(i);
    size_t j = 0;
    while (j < s.size() && std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
    std::string_view unit = s.substr(0, j);
    s.remove_prefix(j);
    std::int64_t mult = 0;
    if (unit == "us") mult = 1;
    else if (unit == "ms") mult = kMillisecond;
    else if (unit == "s") mult = kSecond;
    else if (unit == "m" || unit == "min") mult = kMinute;
    else if (unit == "h") mult = kHour;
    else if (unit == "d") mult = 24 * kHour;
    else
      return InvalidArgument(fmt::format("{} '{}': unknown unit '{}' (use us, ms, s, m, h, d)", kWhat,
                                         Shown(text), Shown(unit.empty() ? s.substr(0, 1) : unit)));
    GPUSLICE_ASSIGN_OR_RETURN(Decimal d, ParseDecimal(num, kWhat, text));
    GPUSLICE_ASSIGN_OR_RETURN(std::int64_t part, Scale(d, mult, kWhat, text));
    if (part > kMaxDuration || total > kMaxDuration - part)
      return InvalidArgument(fmt::format("{} '{}': longer than 100 years", kWhat, Shown(text)));
    total += part;
  }
  return total;
}

Result<Bytes> ParseBytesIn(std::string_view text, Bytes min, Bytes max) {
  GPUSLICE_ASSIGN_OR_RETURN(Bytes b, ParseBytes(text));
  if (b < min) {
    const bool bare = !text.empty() && std::isdigit(static_cast<unsigned char>(Trim(text).back()));
    return InvalidArgument(fmt::format("memory size '{}': {} is less than the minimum {}{}", Shown(text),
                                       FormatBytes(b), FormatBytes(min),
                                       bare ? fmt::format(" (a number without a unit is bytes: write {}GiB or {}MiB)",
                                                          Shown(Trim(text)), Shown(Trim(text)))
                                            : ""));
  }
  if (b > max)
    return InvalidArgument(fmt::format("memory size '{}': more than the maximum {}", Shown(text), FormatBytes(max)));
  return b;
}

Result<Micros> ParseDurationIn(std::string_view text, Micros min, Micros max) {
  GPUSLICE_ASSIGN_OR_RETURN(Micros d, ParseDuration(text));
  if (d < min)
    return InvalidArgument(fmt::format("duration '{}': {} is less than the minimum {}", Shown(text),
                                       FormatDuration(d), FormatDuration(min)));
  if (d > max)
    return InvalidArgument(
        fmt::format("duration '{}': more than the maximum {}", Shown(text), FormatDuration(max)));
  return d;
}

Result<Bytes> ParseJobMemory(std::string_view text) { return ParseBytesIn(text, kMinJobMemory, kMaxBytes); }
Result<Micros> ParseTimeLimit(std::string_view text) {
  return ParseDurationIn(text, kMinTimeLimit, kMaxDuration);
}

Result<MilliGpu> MilliGpuFromDevices(double devices, std::string_view what) {
  if (!std::isfinite(devices) || devices < 0)
    return InvalidArgument(fmt::format("{}: GPU amount {} is not a non-negative number", what, devices));
  // Checked before rounding: llround of a value beyond int64 is undefined.
  if (devices * 1000.0 > static_cast<double>(kMaxMilliGpu))
    return InvalidArgument(fmt::format("{}: GPU amount {} too large", what, devices));
  return static_cast<MilliGpu>(std::llround(devices * 1000.0));
}

std::string FormatMilliGpu(MilliGpu m) {
  if (m % kOneGpu == 0) return fmt::format("{}", m / kOneGpu);
  if (m < kOneGpu) return fmt::format("{}m", m);
  std::string s = fmt::format("{}.{:03d}", m / kOneGpu, m % kOneGpu);
  while (s.back() == '0') s.pop_back();
  return s;
}

std::string FormatBytes(Bytes b) {
  struct U { std::string_view name; Bytes mult; };
  static constexpr U kUnits[] = {{"TiB", 1024 * kGiB}, {"GiB", kGiB}, {"MiB", kMiB}, {"KiB", kKiB}};
  for (const U& u : kUnits) {
    if (b >= u.mult) {
      if (b % u.mult == 0) return fmt::format("{}{}", b / u.mult, u.name);
      return fmt::format("{:.2f}{}", static_cast<double>(b) / static_cast<double>(u.mult), u.name);
    }
  }
  return fmt::format("{}B", b);
}

std::string FormatDuration(Micros us) {
  if (us < 0) return "-" + FormatDuration(-us);
  if (us < kSecond) {
    if (us % kMillisecond == 0) return fmt::format("{}ms", us / kMillisecond);
    return fmt::format("{}us", us);
  }
  std::string out;
  std::int64_t d = us / (24 * kHour), h = us / kHour % 24, m = us / kMinute % 60, s = us / kSecond % 60;
  if (d) out += fmt::format("{}d", d);
  if (h) out += fmt::format("{}h", h);
  if (m) out += fmt::format("{}m", m);
  if (s || out.empty()) out += fmt::format("{}s", s);
  return out;
}

}  // namespace gpuslice
