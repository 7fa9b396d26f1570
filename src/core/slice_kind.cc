#include "core/slice_kind.h"

#include <fmt/format.h>

namespace gpuslice {
namespace {
constexpr std::string_view kKindNames[] = {"whole", "mig", "mps", "shared"};
}  // namespace

std::string_view SliceKindName(SliceKind kind) { return kKindNames[static_cast<int>(kind)]; }

Result<SliceKind> ParseSliceKind(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kKindNames[i]) return static_cast<SliceKind>(i);
  }
  return InvalidArgument(fmt::format("slice kind '{}' is unknown (known: whole, mig, mps, shared)", name));
}

}  // namespace gpuslice
