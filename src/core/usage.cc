#include "core/usage.h"

#include <algorithm>

namespace gpuslice {

bool UtilisationIsOfDevice(SliceKind kind) { return kind == SliceKind::kShared || kind == SliceKind::kMps; }

std::int64_t UsedMilliMicros(SliceKind kind, MilliGpu held_milli, std::int64_t util_permille_us,
                             Micros measured_us) {
  if (held_milli <= 0 || util_permille_us <= 0 || measured_us <= 0) return 0;
  const __int128 cap = static_cast<__int128>(held_milli) * measured_us;
  // Permille of one device x µs is milli-GPU x µs.
  const __int128 used = UtilisationIsOfDevice(kind)
                            ? static_cast<__int128>(util_permille_us)
                            : static_cast<__int128>(held_milli) * util_permille_us / 1000;
  return static_cast<std::int64_t>(std::min(used, cap));
}

MilliGpu UsedMilli(SliceKind kind, MilliGpu held_milli, std::int64_t util_permille) {
  if (held_milli <= 0 || util_permille <= 0) return 0;
  if (UtilisationIsOfDevice(kind)) return std::min<MilliGpu>(held_milli, util_permille);
  // Rounded once, to the nearest milli-GPU.
  return std::min<MilliGpu>(held_milli, (held_milli * std::min<std::int64_t>(util_permille, 1000) + 500) / 1000);
}

}  // namespace gpuslice
