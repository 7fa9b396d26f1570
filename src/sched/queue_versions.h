#pragma once
// Internal to the scheduler: every version of every queue a job was resolved against
// (Resolved::queue points into it), the current config's queues by name, and per version its
// placement policy. A reload (Install) adds one version per queue and makes them current; the
// earlier ones stay, because running and pending jobs keep pointing at theirs until the
// scheduler moves them, and because an address must never name two versions (shape keys and
// placement memo slots hold these pointers). The policy is made once per version, so a
// placement try looks it up by address, not by name. Not thread-safe (owned by one Scheduler).

#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "sched/config.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {

// How the built-in policies order candidates (device level, see docs/config.md).
enum class FastOrder { kNone, kTightest, kLoosest };

inline FastOrder FastOrderFor(std::string_view policy) {
  if (policy == "best-fit" || policy == "packing") return FastOrder::kTightest;
  if (policy == "spread") return FastOrder::kLoosest;
  return FastOrder::kNone;
}

class QueueVersions {
 public:
  // How one queue version places: its policy (null only for a name MakePolicy does not know,
  // which ValidateConfig rules out) and, for the built-in ones, the indexed order.
  struct Placement {
    std::unique_ptr<PlacementPolicy> policy;
    FastOrder order = FastOrder::kNone;
  };

  // Adds a version of each of `queues` (a validated config's: names are distinct); they become
  // the current ones, and queues not among them are current no more.
  void Install(std::span<const QueueConfig> queues);
  // The current version of the queue `name`; nullptr when the current config has none.
  const QueueConfig* Current(std::string_view name) const {
    auto it = current_.find(name);
    return it == current_.end() ? nullptr : it->second;
  }
  // `version` is one Install() added. One lookup for both, as a placement try needs both.
  const Placement& PlacementOf(const QueueConfig* version) const { return placement_.at(version); }
  std::size_t versions() const { return versions_.size(); }

 private:
  std::deque<QueueConfig> versions_;  // never erased: addresses stay put and unique
  std::map<std::string, const QueueConfig*, std::less<>> current_;  // the current ones, by name
  std::unordered_map<const QueueConfig*, Placement> placement_;
};

}  // namespace gpuslice::sched
