#pragma once
// The scheduler's narrow view of the MIG planner (src/mig): two functions, so the scheduler
// does not depend on the planner's data types beyond this file. Pure; thread-safe.

#include <vector>

#include "core/catalogue.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::sched {

struct MigPlanResult {
  MigLayout layout;   // full new layout for the GPU (keeps `in_use`)
  int satisfied = 0;  // how many of `needs` get an instance in it
};

// Plans a layout for one GPU of `model` keeping `in_use`, for pending memory `needs` (queue order).
Result<MigPlanResult> PlanMigLayout(const DeviceModel& model, const MigLayout& in_use,
                                   const std::vector<Bytes>& needs);

// Whether an instance of `profile_id` could be placed on a GPU of `model` beside `in_use`.
bool HasFreeMigPlacement(const DeviceModel& model, const MigLayout& in_use, int profile_id);

}  // namespace gpuslice::sched
