#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sched/placement/placement.h"

namespace gpuslice::sched {
namespace {
std::vector<PolicyEntry> AllEntries() {
  std::vector<PolicyEntry> all = SimplePolicies();
  for (const PolicyEntry& e : FgdPolicies()) all.push_back(e);
  return all;
}
}  // namespace

Result<std::unique_ptr<PlacementPolicy>> MakePolicy(std::string_view name) {
  for (const PolicyEntry& e : AllEntries()) {
    if (name == e.name) return e.make();
  }
  return InvalidArgument(fmt::format("placement policy '{}' is unknown (known: {})", name,
                                     fmt::join(PolicyNames(), ", ")));
}

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const PolicyEntry& e : AllEntries()) names.emplace_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace gpuslice::sched
