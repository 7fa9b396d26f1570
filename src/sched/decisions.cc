#include "sched/decisions.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/overloaded.h"
#include "sched/events.h"

namespace gpuslice::sched {
namespace {

std::string Layout(const MigLayout& layout) {
  std::vector<std::string> parts;
  for (const MigPlacement& p : layout) parts.push_back(fmt::format("{}@{}", p.profile_id, p.start));
  return fmt::format("[{}]", fmt::join(parts, " "));
}

std::string Dev(const DeviceRef& d) { return fmt::format("{}/{}", d.node.value(), d.index.value()); }

}  // namespace

std::string_view WarnReasonName(WarnReason r) {
  return r == WarnReason::kIdle ? "idle" : "time-limit";
}

std::string_view StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kTimeLimit: return "time-limit";
    case StopReason::kDeviceLost: return "device-lost";
    case StopReason::kCancelled: return "cancelled";
  }
  return "?";
}

std::string FormatDecision(const Decision& d) {
  return std::visit(
      Overloaded{
          [](const StartSlice& s) {
            std::vector<std::uint32_t> devs;
            for (DeviceIndex i : s.devices) devs.push_back(i.value());
            return fmt::format(
                "start job={} slice={} kind={} node={} dev={} mig={} milli={} mem={} mps={} deadline={}",
                s.job.value(), s.slice.value(), SliceKindName(s.kind), s.node.value(),
                fmt::join(devs, ","),
                s.mig ? fmt::format("{}@{}", s.mig->profile_id, s.mig->start) : "-", s.milli,
                s.memory_cap, s.mps_thread_percent, s.deadline);
          },
          [](const Warn& w) {
            return fmt::format("warn job={} slice={} reason={} deadline={}", w.job.value(),
                               w.slice.value(), WarnReasonName(w.reason), w.deadline);
          },
          [](const ClearWarning& w) {
            return fmt::format("clear-warning job={} slice={} reason={}", w.job.value(),
                               w.slice.value(), WarnReasonName(w.reason));
          },
          [](const Reclaim& r) {
            return fmt::format("reclaim job={} slice={}", r.job.value(), r.slice.value());
          },
          [](const Stop& s) {
            return fmt::format("stop job={} slice={} reason={}", s.job.value(), s.slice.value(),
                               StopReasonName(s.reason));
          },
          [](const Preempt& p) {
            return fmt::format("preempt job={} slice={} requeue={}", p.job.value(), p.slice.value(),
                               p.requeue);
          },
          [](const Drain& d) { return fmt::format("drain dev={}", Dev(d.device)); },
          [](const ReconfigureMig& r) {
            return fmt::format("reconfigure dev={} from={} to={}", Dev(r.device), Layout(r.old_layout),
                               Layout(r.layout));
          },
          [](const Reject& r) {
            return fmt::format("reject job={} {}", r.job.value(), r.status.ToString());
          },
          [](const Reserve& r) {
            std::vector<std::uint32_t> devs;
            for (DeviceIndex i : r.devices) devs.push_back(i.value());
            return fmt::format("reserve job={} node={} dev={}", r.job.value(), r.node.value(),
                               fmt::join(devs, ","));
          },
      },
      d);
}

Micros EventTime(const Event& e) {
  return std::visit([](const auto& ev) { return ev.now; }, e);
}

std::string_view EventName(const Event& e) {
  static constexpr std::string_view kNames[] = {"device-added", "device-removed", "submit",
                                                "finish",       "cancel",         "sample",
                                                "tick",         "reconfigure-done", "activity",
                                                "requeue",      "config-reload",  "admin-drain",
                                                "admin-mig",    "admin-hold",     "admin-requeue"};
  return kNames[e.index()];
}

}  // namespace gpuslice::sched
