#pragma once
// ScriptedBackend: a DeviceBackend wrapper (in the style of LevelDB's EnvWrapper) that lays
// scripted activity over another backend's samples — behind `serve --simulate-script`,
// `agent --slurm --simulate-script`, the tests and the demos. Everything but Sample() is
// forwarded unchanged; production code only ever sees a DeviceBackend.
//
// One script format, JSON, re-read whenever the file changes:
//   {"devices":   {"<index>": <utilisation percent>},
//    "jobs":      {"<job id>": {"sm": <percent>, "memory": "<bytes, e.g. 2GiB>"}},
//    "processes": [{"pid": <pid>, "device": <index>, "sm": <percent>, "memory": "<bytes>"}]}
// A "jobs" entry is the job's top process as the driver would list it: the process whose
// environment carries GPUSLICE_JOB_ID=<id> (the daemon's jobs) or SLURM_JOB_ID=<id> (Slurm's)
// and whose parent does not, on the devices its CUDA_VISIBLE_DEVICES names (GPU or MIG
// UUIDs; every device when unset). A device's utilisation is the sum of its scripted
// processes' (capped at 100%) unless "devices" says more. A device the script does not
// mention keeps the wrapped backend's sample.
// A script that cannot be read or parsed changes nothing: the last good one stays in force
// and last_error() says why (Load() gives the same error for a startup check).
// Thread-safe (one mutex; the wrapped backend is itself thread-safe).

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "devices/backend.h"

namespace gpuslice::devices {

struct ScriptedProcess {
  int pid = 0;                 // set for "processes" entries
  std::string job;             // set for "jobs" entries
  std::optional<std::uint32_t> device;  // "processes": required
  Permille sm_util = 0;
  Bytes memory = 0;
};

struct DeviceScript {
  std::map<std::uint32_t, Permille> device_util;
  std::vector<ScriptedProcess> processes;
};

// Parses the script text; InvalidArgument names the field and the value.
Result<DeviceScript> ParseDeviceScript(std::string_view text);

class ScriptedBackend : public DeviceBackend {
 public:
  ScriptedBackend(std::unique_ptr<DeviceBackend> inner, std::string script_path,
                  std::string proc_root = "/proc");

  // Reads and parses the script now (the startup check); the error names the file.
  Status Load();
  Status last_error() const;

  std::string_view kind() const override { return inner_->kind(); }
  std::string description() const override;
  Result<std::vector<DeviceInfo>> ListDevices() override { return inner_->ListDevices(); }
  Result<DeviceSample> Sample(DeviceIndex index) override;
  Status StartMps(DeviceIndex index, const MpsConfig& config) override { return inner_->StartMps(index, config); }
  Status StopMps(DeviceIndex index) override { return inner_->StopMps(index); }
  Result<MpsStatus> GetMpsStatus(DeviceIndex index) override { return inner_->GetMpsStatus(index); }
  Status SetMigMode(DeviceIndex index, bool enabled) override { return inner_->SetMigMode(index, enabled); }
  Result<GpuInstanceInfo> CreateGpuInstance(DeviceIndex index, int profile_id, int start) override {
    return inner_->CreateGpuInstance(index, profile_id, start);
  }
  Result<ComputeInstanceInfo> CreateComputeInstance(DeviceIndex index, GpuInstanceId gi, int ci_profile_id) override {
    return inner_->CreateComputeInstance(index, gi, ci_profile_id);
  }
  Status DestroyComputeInstance(DeviceIndex index, GpuInstanceId gi, ComputeInstanceId ci) override {
    return inner_->DestroyComputeInstance(index, gi, ci);
  }
  Status DestroyGpuInstance(DeviceIndex index, GpuInstanceId gi) override {
    return inner_->DestroyGpuInstance(index, gi);
  }
  Result<std::vector<MigProfile>> MigProfiles(DeviceIndex index) override { return inner_->MigProfiles(index); }
  bool SupportsMemoryLimits(DeviceIndex index) override { return inner_->SupportsMemoryLimits(index); }
  Status SetMemoryLimit(DeviceIndex index, const std::string& cgroup_dir, Bytes soft, Bytes hard) override {
    return inner_->SetMemoryLimit(index, cgroup_dir, soft, hard);
  }

 private:
  Status RefreshLocked();  // re-reads the file if it changed; requires mu_
  // The top process of `job` and the devices it may use (uuids from CUDA_VISIBLE_DEVICES).
  struct Found {
    int pid = 0;
    std::vector<std::string> visible;  // empty: every device
  };
  std::optional<Found> FindJob(const std::string& job) const;

  std::unique_ptr<DeviceBackend> inner_;
  std::string path_;
  std::string proc_root_;
  mutable std::mutex mu_;
  std::optional<std::string> seen_;  // the text of script_
  std::optional<DeviceScript> script_;
  Status error_;
};

}  // namespace gpuslice::devices
