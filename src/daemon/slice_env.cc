// A slice's part of a job's environment: the devices it may see (a MIG slice's device UUID),
// its MPS server's directories and limits, the memcap interposer for a capped shared slice.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "daemon/daemon_impl.h"
#include "devices/mig_actuator.h"
#include "memcap/env.h"

namespace gpuslice::daemon {
namespace {
namespace fs = std::filesystem;
}  // namespace

// The MIG device UUID for a mig slice (creating the compute instance if it is missing).
Result<std::string> Daemon::Impl::MigUuid(const SliceRecord& s) {
  int profile = 0, start = 0;
  if (std::sscanf(s.mig.c_str(), "profile=%d start=%d", &profile, &start) != 2 || s.devices.empty()) {
    return Internal(fmt::format("slice {}: no MIG placement", s.id.value()));
  }
  DeviceIndex idx(static_cast<std::uint32_t>(s.devices[0]));
  return devices::MigDeviceUuid(*backend_, idx, profile, start);
}

// The slice's part of the job environment.
Result<std::vector<std::pair<std::string, std::string>>> Daemon::Impl::SliceEnv(const JobRecord& j,
                                                                  const SliceRecord& s,
                                                                  std::string* note) {
  std::vector<std::pair<std::string, std::string>> env;
  std::string visible;
  if (s.kind == "mig") {
    GPUSLICE_ASSIGN_OR_RETURN(visible, MigUuid(s));
  } else {
    for (const auto& u : s.uuids) visible += (visible.empty() ? "" : ",") + u;
  }
  env.emplace_back("CUDA_VISIBLE_DEVICES", visible);
  env.emplace_back("GPUSLICE_JOB_ID", std::to_string(j.id.value()));
  env.emplace_back("GPUSLICE_SLICE_ID", std::to_string(s.id.value()));
  env.emplace_back("GPUSLICE_SLICE_KIND", s.kind);
  env.emplace_back("GPUSLICE_QUEUE", j.queue);
  env.emplace_back("GPUSLICE_GPU_MILLI", std::to_string(s.milli));
  if (opt_.simulated) env.emplace_back("GPUSLICE_SIMULATED", "1");
  if (s.kind == "mps" && !s.devices.empty()) {
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
    GPUSLICE_RETURN_IF_ERROR(backend_->StartMps(idx, mc));
    env.emplace_back("CUDA_MPS_PIPE_DIRECTORY", mc.pipe_dir);
    env.emplace_back("CUDA_MPS_LOG_DIRECTORY", mc.log_dir);
    if (s.mps_thread_percent > 0) {
      env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(s.mps_thread_percent));
    }
    if (s.memory_cap > 0) {
      env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                       fmt::format("0={}M", std::max<Bytes>(1, s.memory_cap / kMiB)));
    }
  }
  if (s.kind == "shared" && s.memory_cap > 0) {
    auto mc = memcap::SliceEnvironment(SliceKey(s.id), s.memory_cap);
    bool preloaded = false;
    for (auto& [k, v] : mc) {
      if (k == "LD_PRELOAD") {
        preloaded = true;
        for (const auto& [uk, uv] : j.env) {
          if (uk == "LD_PRELOAD" && !uv.empty()) v += ":" + uv;
        }
      }
      env.emplace_back(k, v);
    }
    *note = preloaded ? fmt::format("memory cap {} enforced by libgpuslice-cuda",
                                    FormatBytes(s.memory_cap))
                      : fmt::format("memory cap {} NOT enforced: libgpuslice-cuda.so not found",
                                    FormatBytes(s.memory_cap));
  }
  return env;
}

}  // namespace gpuslice::daemon
