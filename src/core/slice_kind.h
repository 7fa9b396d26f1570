#pragma once
// The four kinds of slice (see DESIGN.md), one type for the scheduler, the store and the
// daemon. Stable names, also on disk and on the wire: "whole", "mig", "mps", "shared".
// Free functions; thread-safe.

#include <string_view>

#include "core/status.h"

namespace gpuslice {

enum class SliceKind { kWhole, kMig, kMps, kShared };
std::string_view SliceKindName(SliceKind kind);
Result<SliceKind> ParseSliceKind(std::string_view name);

}  // namespace gpuslice
