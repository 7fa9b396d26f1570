#pragma once
// "Used": the one definition of how much of what a slice holds it actually used, shared by
// the dashboard (/v1/slices used_milli), `gpuslice top`, the report and /metrics
// (gpuslice_slice_used_gpus). docs/report.md ("What each figure means") says it for people.
//
//   whole and MIG slices: their size x their own utilisation (the devices or the instance are
//     theirs alone, so their utilisation is of what they hold);
//   shared and MPS slices: the part of the device their processes kept busy (the agent
//     attributes the device's utilisation to processes), at most their size: a 250m slice
//     driving its GPU at 30 % used 250m, all of its share, not 250m x 30 %.
//
// Free functions; thread-safe.

#include <cstdint>

#include "core/slice_kind.h"
#include "core/units.h"

namespace gpuslice {

// Whether a slice kind's utilisation figure is a share of the whole device ("shared", "mps")
// rather than of what the slice holds ("whole", "mig").
bool UtilisationIsOfDevice(SliceKind kind);

// Used milli-GPU of a slice of `kind` holding `held_milli` (all its devices together) whose
// utilisation was `util_permille` (0..1000 of the device for shared/mps, of the slice
// otherwise). Never more than held_milli.
MilliGpu UsedMilli(SliceKind kind, MilliGpu held_milli, std::int64_t util_permille);

// The same over time: `util_permille_us` is the utilisation integrated over `measured_us` of
// measured time (permille x µs); the answer is in milli-GPU x µs, at most held x measured.
std::int64_t UsedMilliMicros(SliceKind kind, MilliGpu held_milli, std::int64_t util_permille_us,
                             Micros measured_us);

}  // namespace gpuslice
