#pragma once
// MIG layout planner: given one MIG-capable GPU, the instances that must stay (they run work)
// and the memory needs of pending inference requests, proposes a full new layout for that GPU.
// The scheduler drains the GPU and asks the device layer to reconfigure it to this layout.
// Pure functions over catalogue data: no I/O, no clock, deterministic; thread-safe.

#include <vector>

#include "core/catalogue.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::mig {

struct PlanInput {
  const DeviceModel* model = nullptr;
  MigLayout in_use;            // instances with running work: must be kept as is
  std::vector<Bytes> pending;  // memory needs of pending inference requests, in queue order
};

struct Plan {
  MigLayout layout;              // full new layout (includes in_use), legal per ValidateLayout
  std::vector<int> satisfied;    // indices into pending that get an instance in the new layout
  std::vector<int> assignment;   // for each satisfied[i], the index in layout of its instance
};

// Smallest-profile-that-fits for each pending need; maximises the number of satisfied requests
// (ties: more free memory slices left, then canonical order) — deterministic.
// Each need gets exactly SmallestProfileFor(need) (never +me, never a bigger profile instead).
// Plan.layout is in_use in its given order followed by the added instances in canonical order,
// so the new instances are layout[in_use.size()...]. satisfied is ascending; among requests for
// the same profile the earlier ones (queue order) are served first, the k-th of them getting
// the k-th added instance of that profile.
// Errors: InvalidArgument when model is null, has no MIG, in_use is not a legal layout, or a
// need is negative. A plan that satisfies nobody is still OK (layout == in_use).
Result<Plan> PlanLayout(const PlanInput& in);

// Place one more instance of `profile_id` into `current` at the lowest legal free start, or
// NotFound (also NotFound for an unknown profile id). InvalidArgument if `current` itself is
// not a legal layout.
Result<MigPlacement> FirstFreePlacement(const DeviceModel& model, const MigLayout& current,
                                        int profile_id);
// FirstFreePlacement(model, current, profile_id).ok(), without composing a message.
bool HasFreePlacement(const DeviceModel& model, const MigLayout& current, int profile_id);

}  // namespace gpuslice::mig
