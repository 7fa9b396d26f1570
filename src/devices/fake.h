#pragma once
// FakeBackend: in-memory GPUs of any catalogue model, for tests, the simulator, benchmarks and
// `gpuslice record --backend fake`. What the devices do is a script of timed steps per device
// (utilisation, memory, processes from time `at` on); Sample() averages utilisation over the
// steps that fall in the window since the previous read, the way NVML's sample buffer does.
// Errors can be injected per call ("driver error mid-sample"), and a scripted process can be
// marked as exiting between the listing and the per-process lookup.
// Thread-safe (one mutex).

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "devices/backend.h"
#include "devices/clock.h"

namespace gpuslice::devices {

struct FakeProcess {
  int pid = 0;
  Bytes memory = 0;
  Permille sm_util = 0;
  Permille mem_util = 0;
  std::string mig_uuid;  // runs on this MIG device (must exist when sampled)
  // Listed by the driver, but gone by the time its figures are looked up: memory and
  // utilisation read NotFound.
  bool exits_during_lookup = false;
};

// The device's state from `at` until the next step.
struct FakeStep {
  Micros at = 0;
  Permille gpu_util = 0;
  Permille mem_util = 0;
  std::optional<Bytes> memory_used;  // default: sum of the processes' memory
  std::vector<FakeProcess> processes;
  std::map<std::string, Permille> mig_util;  // per MIG uuid; absent -> Unsupported
};

enum class FakeCall {
  kListDevices,
  kSample,
  kStartMps,
  kStopMps,
  kGetMpsStatus,
  kSetMigMode,
  kCreateGpuInstance,
  kCreateComputeInstance,
  kDestroyComputeInstance,
  kDestroyGpuInstance,
};

// "8xH100-80GB" or "2xA100-40GB,1xL4" -> catalogue models (InvalidArgument names the part).
Result<std::vector<const DeviceModel*>> ParseSimulateSpec(std::string_view spec);

class FakeBackend : public DeviceBackend {
 public:
  // `clock` defaults to the system clock.
  static Result<std::unique_ptr<FakeBackend>> Create(std::string_view spec, Clock clock = nullptr);
  FakeBackend(std::vector<const DeviceModel*> models, Clock clock);

  // ---- scripting ----
  // Adds a step; steps are kept sorted by `at`. Before the first step a device is idle.
  void AddStep(DeviceIndex index, FakeStep step);
  // Replaces the script with one step starting now (a convenience for live tests).
  void SetState(DeviceIndex index, FakeStep step);
  // The next `times` calls of `call` fail with `error`.
  void InjectError(FakeCall call, Status error, int times = 1);
  // Makes the MPS daemon of `index` die (state kDied until stopped or restarted).
  void KillMps(DeviceIndex index);
  // Marks MIG utilisation as unsupported (pre-Hopper) or supported per the step's mig_util.
  // Default: unsupported for A100/A30, supported otherwise.
  void SetMigUtilSupported(DeviceIndex index, bool supported);
  // Whether per-process utilisation is given (default yes); off, every process's figures read
  // Unsupported, as with drivers that keep no per-process sample buffer.
  void SetProcessUtilSupported(DeviceIndex index, bool supported);
  // The MIG profiles the fake "driver" reports (MigProfiles): by default the catalogue's; a
  // different table stands for a driver that disagrees with the catalogue.
  void SetMigProfiles(DeviceIndex index, std::vector<MigProfile> profiles);
  // Whether the fake offers driver memory limits (default no, as before r615).
  void SetMemoryLimitsSupported(DeviceIndex index, bool supported);
  // The limits set so far: (device, cgroup dir) -> (soft, hard).
  std::map<std::pair<std::uint32_t, std::string>, std::pair<Bytes, Bytes>> MemoryLimits() const;

  // ---- DeviceBackend ----
  std::string_view kind() const override { return "fake"; }
  std::string description() const override;
  Result<std::vector<DeviceInfo>> ListDevices() override;
  Result<DeviceSample> Sample(DeviceIndex index) override;
  Status StartMps(DeviceIndex index, const MpsConfig& config) override;
  Status StopMps(DeviceIndex index) override;
  Result<MpsStatus> GetMpsStatus(DeviceIndex index) override;
  Status SetMigMode(DeviceIndex index, bool enabled) override;
  Result<GpuInstanceInfo> CreateGpuInstance(DeviceIndex index, int profile_id, int start) override;
  Result<ComputeInstanceInfo> CreateComputeInstance(DeviceIndex index, GpuInstanceId gi,
                                                    int ci_profile_id) override;
  Status DestroyComputeInstance(DeviceIndex index, GpuInstanceId gi,
                                ComputeInstanceId ci) override;
  Status DestroyGpuInstance(DeviceIndex index, GpuInstanceId gi) override;
  Result<std::vector<MigProfile>> MigProfiles(DeviceIndex index) override;
  bool SupportsMemoryLimits(DeviceIndex index) override;
  Status SetMemoryLimit(DeviceIndex index, const std::string& cgroup_dir, Bytes soft, Bytes hard) override;

 private:
  struct Device {
    const DeviceModel* model = nullptr;
    std::string uuid;
    std::vector<FakeStep> steps;  // sorted by at
    Micros last_read = -1;        // end of the previous Sample() window; -1: never read
    MigMode mig = MigMode::kDisabled;
    std::vector<GpuInstanceInfo> gpu_instances;
    std::uint32_t next_gi = 1;
    bool mig_util_supported = true;
    bool process_util_supported = true;
    bool mps_running = false;
    bool mps_died = false;
    MpsConfig mps_config;
    std::int64_t energy_mj = 0;
    std::optional<std::vector<MigProfile>> mig_profiles;  // nullopt: the catalogue's
    bool memory_limits = false;
  };

  Status TakeInjected(FakeCall call);           // requires mu_
  Result<Device*> Find(DeviceIndex index);      // requires mu_
  const FakeStep* StepAt(const Device& d, Micros t) const;
  bool HasProcessesOn(const Device& d, Micros now, const GpuInstanceInfo* gi) const;
  DeviceInfo Describe(std::size_t i, const Device& d) const;

  mutable std::mutex mu_;
  Clock clock_;
  std::vector<Device> devices_;
  std::map<FakeCall, std::vector<Status>> injected_;
  std::map<std::pair<std::uint32_t, std::string>, std::pair<Bytes, Bytes>> memory_limits_;
};

}  // namespace gpuslice::devices
