#pragma once
// The oracle of the placement parts' tests (by_state_placement_test.cc,
// generic_placement_test.cc): Place() (placement.h) over every host in NodeId order, each host
// with all its GPUs as a request sees them; the devices here track no memory, clients or MPS
// users. Both parts must choose, and draw from the RNG, as this does.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "sched/by_state_placement.h"
#include "sched/device_rules.h"

namespace gpuslice::sched {

// A random state for `d`: free, whole, or shared (or MPS, with `mps`) at a quarter to three
// quarters; one in 20 draining.
inline void RandomizeDevice(std::mt19937_64& gen, DeviceView& d, bool mps = false) {
  static constexpr MilliGpu kShares[] = {0, 0, 250, 500, 750};
  d.mode = DeviceMode::kFree;
  d.used_milli = 0;
  d.draining = gen() % 20 == 0;
  if (gen() % 4 == 0) {
    d.mode = DeviceMode::kWhole;
    d.used_milli = kOneGpu;
  } else if (MilliGpu used = kShares[gen() % 5]; used > 0) {
    d.mode = mps && gen() % 3 == 0 ? DeviceMode::kMps : DeviceMode::kShared;
    d.used_milli = used;
  }
}

// What a whole, shared or MPS request `r` is shown of `d`.
inline GpuView EveryHostView(const Resolved& r, const DeviceView& d) {
  const bool open = !d.draining && (r.model.empty() || d.model == r.model);
  const bool ok = r.kind == SliceKind::kWhole ? open && d.mode == DeviceMode::kFree
                                              : open && (d.mode == DeviceMode::kFree || d.mode == ModeFor(r.kind)) &&
                                                    kOneGpu - d.used_milli >= r.milli;
  return GpuView{ok ? kOneGpu - d.used_milli : 0, 0, ok};
}

inline std::optional<ByStateEngine::Pick> PlaceOverEveryHost(const Resolved& r, const PlacementPolicy& policy,
                                                             const std::map<DeviceRef, DeviceView>& devices,
                                                             WorkloadModel& workload, std::mt19937_64& rng) {
  std::vector<GpuView> gpus;
  std::vector<NodeView> nodes;
  std::vector<DeviceRef> refs;
  gpus.reserve(devices.size());  // the spans below stay valid
  for (auto it = devices.begin(); it != devices.end();) {
    const NodeId node = it->first.node;
    NodeView v;
    v.index = static_cast<std::uint32_t>(nodes.size());
    v.model = it->second.model;
    v.cpu_milli_free = v.cpu_milli_total = 1 << 30;
    v.memory_free = v.memory_total = Bytes{1} << 50;
    const std::size_t first = gpus.size();
    for (; it != devices.end() && it->first.node == node; ++it) {
      gpus.push_back(EveryHostView(r, it->second));
      refs.push_back(it->first);
    }
    v.gpus = std::span<const GpuView>(gpus.data() + first, gpus.size() - first);
    nodes.push_back(v);
  }
  const PolicyInput in = PolicyInputFor(r, rng, workload);
  const std::optional<Placement> p = Place(policy, in.req, nodes, in.ctx);
  if (!p) return std::nullopt;
  std::size_t first = 0;
  for (std::uint32_t i = 0; i < p->node_index; ++i) first += nodes[i].gpus.size();
  ByStateEngine::Pick pick{refs[first].node, {}};
  for (int g : p->gpu_indices) pick.devices.push_back(refs[first + g].index);
  std::sort(pick.devices.begin(), pick.devices.end());
  return pick;
}

}  // namespace gpuslice::sched
