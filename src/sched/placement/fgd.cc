#include "sched/placement/placement.h"

namespace gpuslice::sched {
// Filled in by the simulator work: the FGD paper's baselines, fgd, and gpuslice's default.
std::vector<PolicyEntry> FgdPolicies() { return {}; }
}  // namespace gpuslice::sched
