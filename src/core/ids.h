#pragma once
// Strong ID types: a JobId can never be passed where a SliceId is expected. NVML-local MIG
// instance IDs (GpuInstanceId, ComputeInstanceId: small integers scoped to one device) are
// distinct types from the global ones so the two are never mixed. Values, thread-compatible.

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace gpuslice {

template <typename Tag, typename Rep = std::uint64_t>
class StrongId {
 public:
  using rep_type = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }
  constexpr bool valid() const { return v_ != Rep{}; }
  friend constexpr auto operator<=>(const StrongId&, const StrongId&) = default;
  friend std::ostream& operator<<(std::ostream& os, const StrongId& id) { return os << id.v_; }

 private:
  Rep v_{};  // zero means "unset"; real IDs start at 1
};

struct JobIdTag {};
struct SliceIdTag {};
struct NodeIdTag {};
struct DeviceIndexTag {};
struct GpuInstanceIdTag {};
struct ComputeInstanceIdTag {};

using JobId = StrongId<JobIdTag>;
using SliceId = StrongId<SliceIdTag>;
using NodeId = StrongId<NodeIdTag, std::uint32_t>;
// Position of a device within its host (0-based, so "valid()" is not meaningful for it).
using DeviceIndex = StrongId<DeviceIndexTag, std::uint32_t>;
// NVML-local identifiers, meaningful only together with the device they belong to.
using GpuInstanceId = StrongId<GpuInstanceIdTag, std::uint32_t>;
using ComputeInstanceId = StrongId<ComputeInstanceIdTag, std::uint32_t>;

}  // namespace gpuslice

template <typename Tag, typename Rep>
struct std::hash<gpuslice::StrongId<Tag, Rep>> {
  std::size_t operator()(const gpuslice::StrongId<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};
