#pragma once
// Integer units used everywhere inside gpuslice. Values are converted from text (or from a
// double at an outside edge) exactly once, with rounding, and never truncated afterwards.
//   MilliGpu: 1000 = one whole device.   Bytes: bytes.   Micros: microseconds.
// Free functions only; thread-safe.

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gpuslice {

using MilliGpu = std::int64_t;
using Bytes = std::int64_t;
using Micros = std::int64_t;

inline constexpr MilliGpu kOneGpu = 1000;
inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;
inline constexpr Micros kMillisecond = 1000;
inline constexpr Micros kSecond = 1000 * kMillisecond;
inline constexpr Micros kMinute = 60 * kSecond;
inline constexpr Micros kHour = 60 * kMinute;

// "250m" (milli), "0.25" or "1.5" (devices, at most 3 decimals), "2" (devices).
// Rejects empty, negative, zero-rounding amounts such as "0.0001", junk, and overflow.
Result<MilliGpu> ParseGpuAmount(std::string_view text);

// "10GiB", "512MiB", "1.5GiB", "80GB" (decimal), "1024" (bytes), "4KiB", "2TiB".
Result<Bytes> ParseBytes(std::string_view text);

// "90s", "24h", "30m", "500ms", "1h30m", "2d", "15" (seconds).
Result<Micros> ParseDuration(std::string_view text);

// Rounds a double once, at an edge (e.g. a trace column of fractional GPUs). Errors name `what`.
Result<MilliGpu> MilliGpuFromDevices(double devices, std::string_view what);

std::string FormatMilliGpu(MilliGpu m);   // "250m", "2", "1.5"
std::string FormatBytes(Bytes b);         // "10GiB", "512MiB", "1.50GiB", "123B"
std::string FormatDuration(Micros us);    // "1h30m", "90s" -> "1m30s", "500ms"

}  // namespace gpuslice
