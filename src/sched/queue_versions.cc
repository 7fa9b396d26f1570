#include "sched/queue_versions.h"

#include <cassert>
#include <utility>

namespace gpuslice::sched {

void QueueVersions::Install(std::span<const QueueConfig> queues) {
  current_.clear();
  for (const QueueConfig& q : queues) {
    const QueueConfig* version = &versions_.emplace_back(q);
    current_.emplace(q.name, version);
    auto p = MakePolicy(q.placement);
    // ValidateConfig guarantees known names; an unknown one here is a caller bug.
    assert(p.ok());
    Placement& qp = placement_[version];
    qp.order = FastOrderFor(q.placement);
    if (p.ok()) qp.policy = std::move(p).value();
  }
}

}  // namespace gpuslice::sched
