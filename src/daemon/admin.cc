// An admin's orders (daemon.h, "an admin's orders"): drain or undrain a GPU, put it in or out
// of MIG mode (through a drain), hold or release a pending job, requeue a running one. Each is
// a scheduler event (sched/events.h), journaled with its effects in one commit, so it holds
// across restarts, and an "admin" event says who ordered what. Root or the admin group only.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/text.h"
#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {
namespace {

constexpr std::size_t kMaxReason = 200;

// An order's optional "reason": a string of at most kMaxReason bytes.
Result<std::string> ReasonOf(const Json& body) {
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  if (!body.contains("reason") || body["reason"].is_null()) return std::string();
  if (!body["reason"].is_string()) {
    return InvalidArgument(fmt::format("field 'reason': expected a string, got {}", body["reason"].type_name()));
  }
  std::string reason = body["reason"].get<std::string>();
  if (reason.size() > kMaxReason) {
    return InvalidArgument(fmt::format("field 'reason': {} bytes, at most {}", reason.size(), kMaxReason));
  }
  return EscapeInvalidUtf8(reason);
}

}  // namespace

Status Daemon::Impl::RequireAdmin(const Caller& c, std::string_view what) const {
  if (IsAdminLocked(c)) return Status::Ok();
  return PermissionDenied(fmt::format("{}: only root or a member of group '{}' may do this", what,
                                      config_.admin_group));
}

// Feeds an order and commits it with its effects, the audit event first.
Status Daemon::Impl::Order(const Caller& c, JobId job, const std::string& what, const sched::Event& e) {
  store::WriteBatch b;
  Actions act;
  AddEvent(b, job, "admin", fmt::format("{} (by {})", what, UserName(c.uid)));
  spdlog::info("admin: {} (by {})", what, UserName(c.uid));
  Feed(e, b, act);
  GPUSLICE_RETURN_IF_ERROR(CommitAndAct(b, act));
  LaunchReady();
  return Status::Ok();
}

Result<Json> Daemon::Impl::AdminDevice(const Caller& c, std::uint32_t index, std::string_view action,
                                       const Json& body) {
  std::unique_lock lock(mu_);
  if (!failure_.ok()) return failure_;
  const std::string what = fmt::format("device {}: {}", index, action);
  GPUSLICE_RETURN_IF_ERROR(RequireAdmin(c, what));
  const sched::DeviceRef ref{opt_.node, DeviceIndex(index)};
  auto dev = sched_->devices().find(ref);
  if (dev == sched_->devices().end()) return NotFound(fmt::format("device {}: no such device", index));
  GPUSLICE_ASSIGN_OR_RETURN(std::string reason, ReasonOf(body));
  const Micros now = Now();
  if (action == "drain" || action == "undrain") {
    const bool drain = action == "drain";
    if (dev->second.admin_drained == drain) {
      return FailedPrecondition(fmt::format("device {}: already {}", index, drain ? "drained" : "not drained"));
    }
    GPUSLICE_RETURN_IF_ERROR(Order(c, JobId(), fmt::format("device {} {}{}", index, drain ? "drained" : "undrained",
                                                            reason.empty() ? "" : ": " + reason),
                                   sched::AdminDrain{now, ref, drain, reason}));
  } else {  // "mig"
    if (!dev->second.mig_capable) {
      return FailedPrecondition(fmt::format("device {} ({}): no MIG on this GPU", index, dev->second.model));
    }
    const std::string mode = body.value("mode", "");
    std::optional<bool> enabled;
    if (mode == "on") enabled = true;
    else if (mode == "off") enabled = false;
    else if (mode != "auto")
      return InvalidArgument(fmt::format("field 'mode' = '{}': expected on, off or auto", EscapeInvalidUtf8(mode)));
    GPUSLICE_RETURN_IF_ERROR(Order(c, JobId(), fmt::format("device {}: MIG mode {}", index, mode),
                                   sched::AdminMigMode{now, ref, enabled}));
  }
  Json out = DevicesLocked();
  for (const Json& d : out["devices"]) {
    if (d["index"] == index) return Json{{"device", d}, {"simulated", opt_.simulated}};
  }
  return Json{{"device", nullptr}, {"simulated", opt_.simulated}};
}

Result<Json> Daemon::Impl::AdminJob(const Caller& c, JobId id, std::string_view action, const Json& body) {
  std::unique_lock lock(mu_);
  if (!failure_.ok()) return failure_;
  GPUSLICE_RETURN_IF_ERROR(RequireAdmin(c, fmt::format("job {}: {}", id.value(), action)));
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound(fmt::format("job {}: no such job", id.value()));
  GPUSLICE_ASSIGN_OR_RETURN(std::string reason, ReasonOf(body));
  const JobRecord& j = it->second;
  auto view = sched_->jobs().find(id);
  const bool held = view != sched_->jobs().end() && view->second.held;
  const Micros now = Now();
  if (action == "hold" || action == "release") {
    const bool hold = action == "hold";
    if (j.state != JobState::kPending) {
      return FailedPrecondition(fmt::format("job {}: {}: only a pending job can be {}", id.value(),
                                            store::JobStateName(j.state), hold ? "held" : "released"));
    }
    if (held == hold) return FailedPrecondition(fmt::format("job {}: already {}", id.value(), hold ? "held" : "not held"));
    GPUSLICE_RETURN_IF_ERROR(Order(c, id, fmt::format("job {} {}{}", id.value(), hold ? "held" : "released",
                                                       reason.empty() ? "" : ": " + reason),
                                   sched::AdminHold{now, id, hold}));
  } else {  // "requeue"
    if (j.state != JobState::kRunning) {
      return FailedPrecondition(fmt::format("job {}: {}: only a running job can be requeued", id.value(),
                                            store::JobStateName(j.state)));
    }
    const std::string why = reason.empty() ? "requeued by an admin" : "requeued by an admin: " + reason;
    GPUSLICE_RETURN_IF_ERROR(Order(c, id, fmt::format("job {} {}", id.value(), why),
                                   sched::AdminRequeue{now, id, why}));
  }
  return Json{{"job", JobJson(jobs_.at(id))}, {"simulated", opt_.simulated}};
}

}  // namespace gpuslice::daemon
