// The scheduler's WaitReason (sched/pending_reason.h) as the API's JSON, for the job views.
#include <string>
#include <variant>

#include <fmt/format.h>

#include "core/overloaded.h"
#include "core/text.h"
#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

// A pending job's reason for the API: its kind, one line for people and the figures behind it
// (docs/api.md, "Why a job waits").
Json Daemon::Impl::WaitReasonJson(const sched::WaitReason& w, const std::string& queue) {
  // Names in it (user, queue, model) may hold any bytes; the JSON text must stay valid.
  const std::string message = EscapeInvalidUtf8(sched::FormatWaitReason(w));
  Json o{{"kind", std::string(sched::WaitReasonKind(w))},
         {"message", message},
         {"text", EscapeInvalidUtf8(fmt::format("pending in {}: {}", queue, message))},
         {"plain", EscapeInvalidUtf8(sched::FormatWaitReasonPlain(w))}};
  auto devices = [](NodeId node, const std::vector<DeviceIndex>& ds) {
    Json arr = Json::array();
    for (DeviceIndex d : ds) arr.push_back(d.value());
    return Json{{"node", node.value()}, {"devices", arr}};
  };
  std::visit(Overloaded{
                 [&](const sched::NoDeviceFits& r) {
                   o["slice_kind"] = std::string(sched::SliceKindName(r.kind));
                   o["model"] = EscapeInvalidUtf8(r.model);
                   o["gpus"] = r.gpus;
                   o["milli"] = r.milli;
                   o["memory"] = r.memory;
                 },
                 [&](const sched::UserCap& r) {
                   o["queue"] = EscapeInvalidUtf8(r.queue);
                   o["user"] = EscapeInvalidUtf8(r.user);
                   o["limit"] = r.limit == sched::UserCap::Limit::kJobs ? "jobs" : "milli";
                   o["max"] = r.max;
                   o["held"] = r.held;
                   o["asked"] = r.asked;
                 },
                 [&](const sched::ReservedForOther& r) {
                   o["for_job"] = r.job.value();
                   o["kept"] = devices(r.node, r.devices);
                 },
                 [&](const sched::WaitingForReservation& r) {
                   o["kept"] = devices(r.node, r.devices);
                   o["busy"] = r.busy;
                 },
                 [&](const sched::DrainingForMig& r) {
                   o["device"] = Json{{"node", r.device.node.value()}, {"index", r.device.index.value()}};
                   o["reconfiguring"] = r.reconfiguring;
                 },
                 [&](const sched::NeverFits& r) { o["why"] = EscapeInvalidUtf8(r.why); },
                 [&](const sched::MpsServesOtherUser& r) {
                   o["device"] = Json{{"node", r.device.node.value()}, {"index", r.device.index.value()}};
                   o["mps_user"] = EscapeInvalidUtf8(r.user);
                 },
                 [&](const sched::Held&) {},
                 [&](const sched::TeamLimit& r) {
                   o["team"] = EscapeInvalidUtf8(r.team);
                   o["queue"] = EscapeInvalidUtf8(r.queue);
                   o["limit"] = r.limit;
                   o["held"] = r.held;
                   o["asked"] = r.asked;
                 },
             },
             w);
  return o;
}

}  // namespace gpuslice::daemon
