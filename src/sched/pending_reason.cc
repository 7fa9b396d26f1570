#include "sched/pending_reason.h"

#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/overloaded.h"

namespace gpuslice::sched {
namespace {

constexpr std::array<std::string_view, kWaitReasonKinds> kNames = {
    "no-device-fits", "user-cap", "reserved-for-other", "waiting-for-reservation", "draining-for-mig",
    "never-fits"};

std::string Devices(NodeId node, const std::vector<DeviceIndex>& devices) {
  std::vector<std::uint32_t> idx;
  for (DeviceIndex d : devices) idx.push_back(d.value());
  return fmt::format("GPU{} {} of node {}", idx.size() == 1 ? "" : "s", fmt::join(idx, ","), node.value());
}

}  // namespace

std::string_view WaitReasonKindName(std::size_t kind_index) {
  return kind_index < kNames.size() ? kNames[kind_index] : "?";
}

std::string_view WaitReasonKind(const WaitReason& r) { return WaitReasonKindName(r.index()); }

std::string FormatWaitReason(const WaitReason& reason) {
  return std::visit(
      Overloaded{
          [](const NoDeviceFits& r) {
            const std::string model = r.model.empty() ? "" : r.model + " ";
            switch (r.kind) {
              case SliceKind::kWhole:
                return fmt::format("no host with {} free {}GPU{}", r.gpus, model, r.gpus == 1 ? "" : "s");
              case SliceKind::kMig:
                return fmt::format("no free MIG instance with {} on a {}GPU", FormatBytes(r.memory), model);
              case SliceKind::kShared:
              case SliceKind::kMps: {
                std::string s = fmt::format("no {}GPU with {}", model, FormatMilliGpu(r.milli));
                if (r.memory > 0) s += fmt::format(" and {}", FormatBytes(r.memory));
                s += " free";
                if (r.kind == SliceKind::kMps) s += " (and an MPS client slot)";
                return s;
              }
            }
            return std::string("no device fits");
          },
          [](const UserCap& r) {
            if (r.limit == UserCap::Limit::kJobs)
              return fmt::format("user cap reached: {} runs {} of {} jobs allowed in queue '{}'", r.user, r.held,
                                 r.max, r.queue);
            return fmt::format("user cap reached: {} holds {} of {} GPU allowed in queue '{}'; this job asks {}",
                               r.user, FormatMilliGpu(r.held), FormatMilliGpu(r.max), r.queue,
                               FormatMilliGpu(r.asked));
          },
          [](const ReservedForOther& r) {
            return fmt::format("{} that would fit are kept for waiting job {}", Devices(r.node, r.devices),
                               r.job.value());
          },
          [](const WaitingForReservation& r) {
            return fmt::format("{} are kept for this job; waiting for {} of them to empty",
                               Devices(r.node, r.devices), r.busy);
          },
          [](const DrainingForMig& r) {
            return fmt::format("GPU {} of node {} is {} for a MIG layout", r.device.index.value(),
                               r.device.node.value(), r.reconfiguring ? "being reconfigured" : "draining");
          },
          [](const NeverFits& r) { return "could never fit on this host: " + r.why; },
      },
      reason);
}

}  // namespace gpuslice::sched
