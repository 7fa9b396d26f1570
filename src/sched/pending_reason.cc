#include "sched/pending_reason.h"

#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/overloaded.h"

namespace gpuslice::sched {
namespace {

constexpr std::array<std::string_view, kWaitReasonKinds> kNames = {
    "no-device-fits", "user-cap", "reserved-for-other", "waiting-for-reservation", "draining-for-mig",
    "never-fits", "mps-other-user", "held", "team-limit"};

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
          [](const MpsServesOtherUser& r) {
            return fmt::format("GPU {} of node {} runs the MPS server of user {} (an MPS server serves one user at "
                               "a time): waiting for {}'s MPS jobs there to end",
                               r.device.index.value(), r.device.node.value(), r.user, r.user);
          },
          [](const Held&) { return std::string("held by an admin (gpuslice release JOB lets it run)"); },
          [](const TeamLimit& r) {
            return fmt::format("team limit reached: team {} holds {} of {} GPU allowed in queue '{}'; this job asks {}",
                               r.team, FormatMilliGpu(r.held), FormatMilliGpu(r.limit), r.queue, FormatMilliGpu(r.asked));
          },
      },
      reason);
}

namespace {

// Shares as decimals ("0.25"), not milli ("250m"), for people.
std::string Amount(MilliGpu milli) {
  const std::string s = fmt::format("{}.{:03d}", milli / kOneGpu, milli % kOneGpu);
  std::string t = s;
  while (!t.empty() && t.back() == '0') t.pop_back();
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

}  // namespace

std::string FormatWaitReasonPlain(const WaitReason& reason) {
  return std::visit(
      Overloaded{
          [](const NoDeviceFits& r) {
            const std::string model = r.model.empty() ? "" : r.model + " ";
            switch (r.kind) {
              case SliceKind::kWhole:
                return fmt::format("all {}GPUs are in use: {} free {} needed on one machine; it starts when "
                                   "enough of them are freed",
                                   model, r.gpus == 1 ? "one" : std::to_string(r.gpus),
                                   r.gpus == 1 ? "GPU is" : "GPUs are");
              case SliceKind::kMig:
                return fmt::format("every {}GPU partition of {} is in use; it starts when one is freed", model,
                                   FormatBytes(r.memory));
              case SliceKind::kShared:
              case SliceKind::kMps: {
                std::string s = fmt::format("every {}GPU is busy: none has {} of its time", model, Amount(r.milli));
                if (r.memory > 0) s += fmt::format(" and {} of memory", FormatBytes(r.memory));
                return s + " free right now; it starts when enough is freed";
              }
            }
            return std::string("no GPU has room right now; it starts when enough is freed");
          },
          [](const UserCap& r) {
            if (r.limit == UserCap::Limit::kJobs)
              return fmt::format("{} already runs {} of the {} jobs one person may run in '{}'; it starts when "
                                 "one of them ends",
                                 r.user, r.held, r.max, r.queue);
            return fmt::format("{} already holds {} of the {} GPU one person may hold in '{}' and this asks {} "
                               "more; it starts when enough of them ends",
                               r.user, Amount(r.held), Amount(r.max), r.queue, Amount(r.asked));
          },
          [](const ReservedForOther& r) {
            return fmt::format("the free GPUs are kept for a larger job (job {}) that has waited long; it "
                               "starts after that one",
                               r.job.value());
          },
          [](const WaitingForReservation& r) {
            return fmt::format("GPUs are being kept free for this job; {} of {} still {} a job to end", r.busy,
                               r.devices.size(), r.busy == 1 ? "waits for" : "wait for");
          },
          [](const DrainingForMig& r) {
            return r.reconfiguring
                       ? std::string("a GPU is being split into isolated partitions (MIG) right now; it "
                                     "starts when that is done")
                       : std::string("a GPU is being prepared for isolated partitions (MIG): it takes no new "
                                     "work until the jobs on it end");
          },
          [](const NeverFits& r) {
            return "this request can never fit on this machine (" + r.why + "); change what it asks for";
          },
          [](const MpsServesOtherUser& r) {
            return fmt::format("the GPU with room serves {}'s MPS jobs, and MPS serves one person at a time; it "
                               "starts when {}'s MPS jobs there end",
                               r.user, r.user);
          },
          [](const Held&) {
            return std::string("an administrator has put it on hold; it starts after they release it");
          },
          [](const TeamLimit& r) {
            return fmt::format("team {} already holds {} of the {} GPU it may hold in '{}' and this asks {} more; it "
                               "starts when enough of the team's jobs there end",
                               r.team, Amount(r.held), Amount(r.limit), r.queue, Amount(r.asked));
          },
      },
      reason);
}

}  // namespace gpuslice::sched
