#include <optional>
#include "mig/planner.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace gpuslice::mig {
namespace {

// The best set of instances to add found so far, with the keys it is ranked by.
struct Candidate {
  MigLayout added;         // canonical order
  int free_slices = -1;
  std::vector<int> satisfied;  // sorted pending indices
};

// Pending indices served by `added`: for each profile, the earliest requests (queue order)
// that asked for it.
std::vector<int> SatisfiedBy(const MigLayout& added, const std::map<int, std::vector<int>>& demand) {
  std::map<int, size_t> used;
  std::vector<int> out;
  for (const MigPlacement& p : added) out.push_back(demand.at(p.profile_id)[used[p.profile_id]++]);
  std::sort(out.begin(), out.end());
  return out;
}

// Ranking from the API contract: more satisfied, then more free memory slices, then earlier
// requests in queue order. Equal keys keep the first found, which the search visits in
// canonical (lexicographic) order.
bool Better(const Candidate& a, const Candidate& b) {
  if (a.added.size() != b.added.size()) return a.added.size() > b.added.size();
  if (a.free_slices != b.free_slices) return a.free_slices > b.free_slices;
  return a.satisfied < b.satisfied;
}

}  // namespace

Result<Plan> PlanLayout(const PlanInput& in) {
  if (in.model == nullptr) return InvalidArgument("MIG plan: model is null");
  const DeviceModel& model = *in.model;
  if (!model.supports_mig())
    return InvalidArgument(fmt::format("MIG plan: {} does not support MIG", model.name));
  if (Status st = ValidateLayout(model, in.in_use); !st.ok())
    return st.WithContext("MIG plan: in_use");

  // Queue-ordered pending indices per profile; needs no profile can hold are never served.
  std::map<int, std::vector<int>> demand;
  for (size_t i = 0; i < in.pending.size(); ++i) {
    if (in.pending[i] < 0)
      return InvalidArgument(fmt::format("MIG plan: pending[{}]: memory need {} is negative", i,
                                         in.pending[i]));
    if (const MigProfile* p = model.SmallestProfileFor(in.pending[i]))
      demand[p->id].push_back(static_cast<int>(i));
  }

  MigLayout candidates;
  for (const auto& [id, requests] : demand)
    for (int s : model.FindProfileById(id)->placement_starts) candidates.push_back({id, s});
  SortCanonical(candidates);

  // Depth-first over sets of added instances in canonical order; a set is extended only while
  // in_use + set is legal and no profile is added more often than it is asked for. Legality is
  // closed under subsets, so this reaches every feasible set; the space is at most the number
  // of layouts of one GPU (2,319 on 8-slice parts).
  Candidate best;
  best.free_slices = FreeMemorySlices(model, in.in_use);
  MigLayout layout = in.in_use;
  MigLayout added;
  std::map<int, size_t> count;
  const auto visit = [&](auto&& self, size_t next) -> void {
    if (!added.empty() && added.size() >= best.added.size()) {
      Candidate c{added, FreeMemorySlices(model, layout), SatisfiedBy(added, demand)};
      if (Better(c, best)) best = std::move(c);
    }
    for (size_t i = next; i < candidates.size(); ++i) {
      const MigPlacement& p = candidates[i];
      if (count[p.profile_id] >= demand[p.profile_id].size()) continue;
      layout.push_back(p);
      if (LayoutIsLegal(model, layout)) {
        added.push_back(p);
        ++count[p.profile_id];
        self(self, i + 1);
        --count[p.profile_id];
        added.pop_back();
      }
      layout.pop_back();
    }
  };
  visit(visit, 0);

  Plan plan;
  plan.layout = in.in_use;
  plan.layout.insert(plan.layout.end(), best.added.begin(), best.added.end());
  plan.satisfied = best.satisfied;
  // The k-th request (in queue order) for a profile gets the k-th added instance of it.
  std::map<int, size_t> taken;
  for (int request : plan.satisfied) {
    const int id = model.SmallestProfileFor(in.pending[request])->id;
    size_t seen = 0;
    for (size_t j = 0; j < best.added.size(); ++j) {
      if (best.added[j].profile_id != id) continue;
      if (seen++ == taken[id]) {
        plan.assignment.push_back(static_cast<int>(in.in_use.size() + j));
        ++taken[id];
        break;
      }
    }
  }
  return plan;
}

namespace {
// The first legal start of profile `p` beside the (legal) `current` layout, if any.
std::optional<int> FirstFreeStart(const DeviceModel& model, const MigLayout& current, const MigProfile& p) {
  MigLayout trial = current;
  for (int start : p.placement_starts) {
    trial.push_back({p.id, start});
    if (LayoutIsLegal(model, trial)) return start;
    trial.pop_back();
  }
  return std::nullopt;
}
}  // namespace

bool HasFreePlacement(const DeviceModel& model, const MigLayout& current, int profile_id) {
  const MigProfile* p = model.FindProfileById(profile_id);
  if (p == nullptr || !LayoutIsLegal(model, current)) return false;
  return FirstFreeStart(model, current, *p).has_value();
}

Result<MigPlacement> FirstFreePlacement(const DeviceModel& model, const MigLayout& current,
                                        int profile_id) {
  const MigProfile* p = model.FindProfileById(profile_id);
  if (p == nullptr)
    return NotFound(fmt::format("MIG placement: {} has no profile id {}", model.name, profile_id));
  if (Status st = ValidateLayout(model, current); !st.ok())
    return st.WithContext("MIG placement: current layout");
  if (std::optional<int> start = FirstFreeStart(model, current, *p)) return MigPlacement{profile_id, *start};
  return NotFound(fmt::format("MIG placement: no free legal start for profile {} ({}) on {} "
                              "beside [{}]",
                              profile_id, p->name, model.name, FormatLayout(model, current)));
}

}  // namespace gpuslice::mig
