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

// Bounds every parsed value of a kind obeys, whatever it is for: beyond them a value is absurd,
// and sums, products (memory x 1024 devices) and deadlines (now + duration) computed from it
// could overflow int64.
inline constexpr Bytes kMaxBytes = 1024 * 1024 * kGiB;                  // 1 PiB
inline constexpr Micros kMaxDuration = 100LL * 365 * 24 * kHour;        // 100 years
inline constexpr MilliGpu kMaxMilliGpu = 1'000'000 * kOneGpu;           // a million GPUs

// Bounds of a job's request, wherever it comes from (CLI flag, API body, queue default in the
// config, Slurm submit): a memory cap below 1 MiB is no cap a CUDA context can live under (and
// "--mem 10" is a typo for 10GiB, not a wish for 10 bytes); a time limit below 1 s kills the job
// before it has started.
inline constexpr Bytes kMinJobMemory = kMiB;
inline constexpr Micros kMinTimeLimit = kSecond;

// Every parser's error names the value (escaped: see core/text.h) and why it is wrong; none
// accepts negative, NaN/inf spellings, exponents, overflow or values beyond the bounds above.

// "250m" (milli), "0.25" or "1.5" (devices, at most 3 decimals), "2" (devices).
// Rejects empty, negative, zero-rounding amounts such as "0.0001", junk, and overflow.
Result<MilliGpu> ParseGpuAmount(std::string_view text);

// "10GiB", "512MiB", "1.5GiB", "80GB" (decimal), "1024" (bytes), "4KiB", "2TiB". At most kMaxBytes.
Result<Bytes> ParseBytes(std::string_view text);

// "90s", "24h", "30m", "500ms", "1h30m", "2d", "15" (seconds). At most kMaxDuration.
Result<Micros> ParseDuration(std::string_view text);

// The same, and the value must lie in [min, max]; the error says which bound it breaks.
Result<Bytes> ParseBytesIn(std::string_view text, Bytes min, Bytes max);
Result<Micros> ParseDurationIn(std::string_view text, Micros min, Micros max);

// A job's memory per device: [kMinJobMemory, kMaxBytes]. A job's time limit: [kMinTimeLimit,
// kMaxDuration].
Result<Bytes> ParseJobMemory(std::string_view text);
Result<Micros> ParseTimeLimit(std::string_view text);

// Rounds a double once, at an edge (e.g. a trace column of fractional GPUs). Errors name `what`.
Result<MilliGpu> MilliGpuFromDevices(double devices, std::string_view what);

std::string FormatMilliGpu(MilliGpu m);   // "250m", "2", "1.5"
std::string FormatBytes(Bytes b);         // "10GiB", "512MiB", "1.50GiB", "123B"
std::string FormatDuration(Micros us);    // "1h30m", "90s" -> "1m30s", "500ms"

}  // namespace gpuslice
