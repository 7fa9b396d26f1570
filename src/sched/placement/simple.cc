#include "sched/placement/placement.h"

namespace gpuslice::sched {
// Filled in by the scheduling-core work: best-fit, packing, spread.
std::vector<PolicyEntry> SimplePolicies() { return {}; }
}  // namespace gpuslice::sched
