// A slice's part of a job's environment: the devices it may see (a MIG slice's device UUID),
// its MPS server's directories and limits, and its memory held by the device's mechanism
// (cap_mechanism.h): the driver's limits, else the memcap interposer (refused when it cannot load).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon_impl.h"
#include "devices/mig_actuator.h"
#include "memcap/check.h"
#include "memcap/env.h"

namespace gpuslice::daemon {
namespace {
namespace fs = std::filesystem;
}  // namespace

// The MIG device UUID for a mig slice (creating the compute instance if it is missing).
Result<std::string> Daemon::Impl::MigUuid(const SliceRecord& s) {
  if (!s.mig || s.devices.empty()) return Internal(fmt::format("slice {}: no MIG placement", s.id.value()));
  DeviceIndex idx(static_cast<std::uint32_t>(s.devices[0]));
  return devices::MigDeviceUuid(*backend_, idx, s.mig->profile_id, s.mig->start);
}

// The slice's part of the job environment.
Result<std::vector<std::pair<std::string, std::string>>> Daemon::Impl::SliceEnv(const JobRecord& j,
                                                                  const SliceRecord& s,
                                                                  std::string* note) {
  std::vector<std::pair<std::string, std::string>> env;
  std::string visible;
  if (s.kind == SliceKind::kMig) {
    GPUSLICE_ASSIGN_OR_RETURN(visible, MigUuid(s));
  } else {
    for (const auto& u : s.uuids) visible += (visible.empty() ? "" : ",") + u;
  }
  env.emplace_back("CUDA_VISIBLE_DEVICES", visible);
  env.emplace_back("GPUSLICE_JOB_ID", std::to_string(j.id.value()));
  env.emplace_back("GPUSLICE_SLICE_ID", std::to_string(s.id.value()));
  env.emplace_back("GPUSLICE_SLICE_KIND", SliceKindName(s.kind));
  env.emplace_back("GPUSLICE_QUEUE", j.queue);
  env.emplace_back("GPUSLICE_GPU_MILLI", std::to_string(s.milli));
  if (opt_.simulated) env.emplace_back("GPUSLICE_SIMULATED", "1");
  if (s.kind == SliceKind::kMps && !s.devices.empty()) {
    DeviceIndex idx(static_cast<std::uint32_t>(s.devices[0]));
    devices::MpsConfig mc;
    const fs::path mps = opt_.mps_dir.empty() ? fs::path(opt_.state_dir) / "mps" : fs::path(opt_.mps_dir);
    mc.pipe_dir = (mps / std::to_string(s.devices[0]) / "pipe").string();
    mc.log_dir = (mps / std::to_string(s.devices[0]) / "log").string();
    // Every user's MPS clients must reach the pipes (the daemon's umask is 077). One level at
    // a time, each checked before the next is made in it, and never through a link: the
    // socket's directory may be writable by others (/tmp), and a planted link would have us
    // create and chmod directories in its target.
    std::error_code mk;
    fs::create_directories(mps.parent_path(), mk);
    for (const fs::path& d : {mps, mps / std::to_string(s.devices[0]), fs::path(mc.pipe_dir),
                              fs::path(mc.log_dir)}) {
      (void)mkdir(d.c_str(), 0755);
      struct stat sb {};
      if (lstat(d.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid()) {
        return FailedPrecondition(fmt::format(
            "MPS directory '{}': not a directory of the daemon's own (missing, a link, or "
            "another owner's); refusing to use it", d.string()));
      }
      (void)chmod(d.c_str(), 0755);
    }
    // The server serves this slice's user alone (the scheduler places no other user's mps slice
    // here until it stops); each slice's own limits go by its clients' environment below, which
    // can only lower the server's defaults, so the server gets none.
    mc.server_uid = SliceUid(s);
    Status started = backend_->StartMps(idx, mc);
    if (!started.ok() && started.code() == StatusCode::kFailedPrecondition) {
      // A server for another user that no slice uses any more (its stop failed, or a restart
      // found it): stopped, then this user's started.
      auto status = backend_->GetMpsStatus(idx);
      if (status.ok() && status->server_uid && !MpsSliceOf(*status->server_uid, s.devices[0], s.id)) {
        spdlog::warn("device {}: stopping an MPS server left for uid {}: {}", idx.value(), *status->server_uid,
                     started.ToString());
        GPUSLICE_RETURN_IF_ERROR(backend_->StopMps(idx));
        started = backend_->StartMps(idx, mc);
      }
    }
    GPUSLICE_RETURN_IF_ERROR(started);
    env.emplace_back("CUDA_MPS_PIPE_DIRECTORY", mc.pipe_dir);
    env.emplace_back("CUDA_MPS_LOG_DIRECTORY", mc.log_dir);
    if (s.mps_thread_percent > 0) {
      env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(s.mps_thread_percent));
    }
    if (s.memory_cap > 0) {
      env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                       fmt::format("0={}M", std::max<Bytes>(1, s.memory_cap / kMiB)));
      std::string how = "MPS's client limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)";
      const auto m = cap_mechanisms_.find(s.devices[0]);
      if (m != cap_mechanisms_.end() && m->second.mps == CapMechanism::kDriverLimits) {
        const std::string dir = fmt::format("{}/job-{}", opt_.cgroup_parent, j.id.value());
        (void)mkdir(dir.c_str(), 0755);
        Status st = backend_->SetMemoryLimit(idx, dir, s.memory_cap, s.memory_cap);
        if (st.ok()) {
          how = "the driver's memory limits on " + dir;
          slice_mechanism_[s.id] = std::string(CapMechanismName(CapMechanism::kDriverLimits));
        } else {
          how += " (driver memory limits failed: " + st.ToString() + ")";
        }
      }
      if (!slice_mechanism_.contains(s.id)) {
        slice_mechanism_[s.id] = std::string(CapMechanismName(CapMechanism::kMpsClientLimit));
      }
      *note = fmt::format("memory cap {} held by {}; ", FormatBytes(s.memory_cap), how);
    }
    *note += fmt::format("MPS server for uid {} (one user per GPU); per-client utilisation is not measurable "
                         "under MPS", *mc.server_uid);
  }
  if (s.kind == SliceKind::kShared && s.memory_cap > 0) GPUSLICE_RETURN_IF_ERROR(HoldSharedMemory(j, s, env, note));
  return env;
}

Status Daemon::Impl::HoldSharedMemory(const JobRecord& j, const SliceRecord& s,
                                      std::vector<std::pair<std::string, std::string>>& env, std::string* note) {
  const int device = s.devices.empty() ? -1 : s.devices[0];
  const auto m = cap_mechanisms_.find(device);
  std::string fallback;
  if (m != cap_mechanisms_.end() && m->second.shared == CapMechanism::kDriverLimits) {
    // The job's cgroup exists before the job does (the launcher puts the job's first process in
    // it), so the limit holds from its first CUDA call.
    const std::string dir = fmt::format("{}/job-{}", opt_.cgroup_parent, j.id.value());
    (void)mkdir(dir.c_str(), 0755);
    Status st = backend_->SetMemoryLimit(DeviceIndex(static_cast<std::uint32_t>(device)), dir, s.memory_cap,
                                         s.memory_cap);
    if (st.ok()) {
      slice_mechanism_[s.id] = std::string(CapMechanismName(CapMechanism::kDriverLimits));
      *note = fmt::format("memory cap {} enforced by the driver's memory limits on {}", FormatBytes(s.memory_cap), dir);
      return Status::Ok();
    }
    spdlog::warn("slice {}: driver memory limits failed ({}); using the interposer", s.id.value(), st.ToString());
    fallback = fmt::format(" (the driver's memory limits failed: {})", st.ToString());
  }
  if (!interposer_.usable) {
    return FailedPrecondition(fmt::format("memory cap {} cannot be enforced: {}; the job was not started (it would "
                                          "have run without its cap)",
                                          FormatBytes(s.memory_cap), interposer_.problem));
  }
  // Each process's CUDA context is charged to the slice: the cap is what the slice books on
  // the device, its contexts included (sched MemoryCap).
  const sched::DeviceView* d = SchedDevice(device);
  const Bytes context = d != nullptr ? d->context_reserve : 0;
  for (auto& [k, v] : memcap::SliceEnvironment(SliceKey(s.id), s.memory_cap, context)) {
    if (k == "LD_PRELOAD") {
      v = interposer_.path;
      for (const auto& [uk, uv] : j.env) {
        if (uk == "LD_PRELOAD" && !uv.empty()) v += ":" + uv;
      }
    }
    env.emplace_back(k, v);
  }
  slice_mechanism_[s.id] = std::string(CapMechanismName(CapMechanism::kInterposer));
  *note = fmt::format("memory cap {} enforced by libgpuslice-cuda{}{}", FormatBytes(s.memory_cap),
                      context > 0 ? fmt::format(" ({} of it per process for its CUDA context)", FormatBytes(context)) : "",
                      fallback);
  return Status::Ok();
}

const sched::DeviceView* Daemon::Impl::SchedDevice(int index) const {
  if (index < 0 || !sched_) return nullptr;
  auto it = sched_->devices().find(sched::DeviceRef{opt_.node, DeviceIndex(static_cast<std::uint32_t>(index))});
  return it == sched_->devices().end() ? nullptr : &it->second;
}

// The uid whose processes a slice's job runs as (the daemon's own when it does not switch users).
std::int64_t Daemon::Impl::SliceUid(const SliceRecord& s) const {
  auto j = jobs_.find(s.job);
  return j != jobs_.end() && j->second.uid >= 0 ? j->second.uid : static_cast<std::int64_t>(geteuid());
}

// Another active mps slice of user `uid` on `device` (other than `except`).
bool Daemon::Impl::MpsSliceOf(std::int64_t uid, int device, SliceId except) const {
  for (const auto& [id, other] : slices_) {
    if (id != except && other.active && other.kind == SliceKind::kMps && !other.devices.empty() && other.devices[0] == device &&
        SliceUid(other) == uid)
      return true;
  }
  return false;
}

void Daemon::Impl::EndSliceMechanisms(const SliceRecord& s) {
  slice_mechanism_.erase(s.id);
  if (s.kind == SliceKind::kShared) {
    // A segment left behind holds no GPU memory, only a little of /dev/shm: said, not fatal.
    if (Status st = memcap::RemoveSliceSegment(SliceKey(s.id)); !st.ok())
      spdlog::warn("slice {}: its memory-cap segment stays: {}", s.id.value(), st.ToString());
  }
  // The server stops with its user's last mps slice on the device. Another user's may already be
  // placed there (when the scheduler freed this one at a stop decision, before its processes
  // ended): that one starts its own server when it launches.
  if (s.kind != SliceKind::kMps || s.devices.empty() || MpsSliceOf(SliceUid(s), s.devices[0], s.id)) return;
  const DeviceIndex idx(static_cast<std::uint32_t>(s.devices[0]));
  if (Status st = backend_->StopMps(idx); !st.ok()) {
    spdlog::warn("device {}: stopping its MPS server after the last mps slice: {}", idx.value(), st.ToString());
  }
}

void Daemon::Impl::ChooseMechanisms(const std::vector<devices::DeviceInfo>& devs) {
  interposer_ = memcap::CheckInterposer();
  if (!interposer_.usable) spdlog::warn("memory caps of shared slices: {}", interposer_.problem);
  cap_mechanisms_.clear();
  for (const devices::DeviceInfo& d : devs) {
    GpuCapMechanism g = ChooseCapMechanism(d, backend_->SupportsMemoryLimits(d.index), !opt_.cgroup_parent.empty(),
                                           interposer_);
    spdlog::info("device {}: shared slices' memory held by {}, mps slices' by {} ({})", g.index,
                 CapMechanismName(g.shared), CapMechanismName(g.mps), g.detail);
    cap_mechanisms_[static_cast<int>(d.index.value())] = std::move(g);
  }
}

void Daemon::Impl::AdoptDriverMigTables() {
  auto devs = backend_->ListDevices();
  if (!devs.ok()) return;
  std::set<std::string> done;
  for (const devices::DeviceInfo& d : *devs) {
    if (d.model == nullptr || !d.model->supports_mig() || done.contains(d.model->name)) continue;
    auto driver = backend_->MigProfiles(d.index);
    if (!driver.ok()) continue;  // no driver table (fake, replay, old driver): the catalogue stands
    done.insert(d.model->name);
    const std::vector<std::string> diffs = devices::MigTableDifferences(*d.model, *driver);
    if (diffs.empty()) continue;
    for (const std::string& line : diffs) {
      spdlog::warn("{} MIG profiles: {}; the driver's table is used", d.model->name, line);
    }
    if (Status st = UseDriverMigProfiles(d.model->name, std::move(driver).value()); !st.ok()) {
      spdlog::warn("{} MIG profiles from the driver not used: {}", d.model->name, st.ToString());
    }
  }
}

}  // namespace gpuslice::daemon
