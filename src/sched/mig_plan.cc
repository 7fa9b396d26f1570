#include "sched/mig_plan.h"

#include "mig/planner.h"

namespace gpuslice::sched {

Result<MigPlanResult> PlanMigLayout(const DeviceModel& model, const MigLayout& in_use,
                                    const std::vector<Bytes>& needs) {
  GPUSLICE_ASSIGN_OR_RETURN(mig::Plan plan, mig::PlanLayout(mig::PlanInput{&model, in_use, needs}));
  return MigPlanResult{std::move(plan.layout), static_cast<int>(plan.satisfied.size())};
}

bool HasFreeMigPlacement(const DeviceModel& model, const MigLayout& in_use, int profile_id) {
  return mig::HasFreePlacement(model, in_use, profile_id);
}

}  // namespace gpuslice::sched
