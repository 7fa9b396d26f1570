#pragma once
// NvmlBackend: real NVIDIA GPUs through libnvidia-ml.so.1, loaded with dlopen at run time.
// Symbols are resolved by their versioned names with fallbacks (nvmlInit_v2 -> nvmlInit,
// *RunningProcesses_v3 -> _v2 -> v1, GetMemoryInfo_v2 -> v1); a missing optional symbol makes
// that figure Unsupported, never a crash. No driver -> Unavailable("no NVIDIA driver: ...").
// MPS goes through MpsController (the real nvidia-cuda-mps-control). Thread-safe (one mutex
// around NVML calls and the per-device "last seen" timestamps).

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "devices/backend.h"
#include "devices/mps.h"
#include "devices/nvml_abi.h"

namespace gpuslice::devices {

// Which process-record layout the *RunningProcesses symbol we bound writes.
enum class NvmlProcessAbi { kV1, kV2, kV3, kV3R535 };

class NvmlBackend : public DeviceBackend {
 public:
  static Result<std::unique_ptr<NvmlBackend>> Open(const BackendOptions& options);
  ~NvmlBackend() override;

  NvmlProcessAbi process_abi() const { return process_abi_; }

  std::string_view kind() const override { return "nvml"; }
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
  // The driver's major version (615 for "615.20.01"); 0 when unknown.
  int driver_major() const;

 private:
  struct Api;
  struct RawProcess {
    unsigned pid = 0;
    unsigned long long memory = nvml::kValueNotAvailable;
    unsigned gi = nvml::kNoInstance, ci = nvml::kNoInstance;
  };
  struct MigDevice {
    nvml::Device handle = nullptr;
    std::string uuid;
    unsigned gi = 0, ci = 0;
  };

  NvmlBackend(void* lib, std::unique_ptr<Api> api, const BackendOptions& options);
  Status Error(std::string_view what, nvml::Return r) const;
  Result<nvml::Device> Handle(DeviceIndex index);
  void ReadMemory(nvml::Device dev, Reading<Bytes>* total, Reading<Bytes>* used,
                  Reading<Bytes>* reserved = nullptr);
  Result<std::vector<RawProcess>> RunningProcesses(nvml::Device dev);
  // The record size the driver wrote for `n` records into a sentinel-filled buffer; updates
  // process_abi_ to what was measured (the symbol-based guess stands when n == 0).
  std::size_t MeasureProcessRecord(const std::vector<unsigned char>& buf, unsigned n);
  Result<std::vector<MigDevice>> MigDevices(nvml::Device dev);
  Result<std::vector<GpuInstanceInfo>> GpuInstances(nvml::Device dev);
  Reading<Permille> AverageSamples(nvml::Device dev, int type, unsigned long long* last_seen,
                                   int* count);
  // Maps a catalogue profile id (as `nvidia-smi mig -lgip` shows) to NVML's profile enum.
  Result<unsigned> ProfileEnum(nvml::Device dev, int profile_id, nvml::GpuInstanceProfileInfo* info);
  bool HasProcesses(nvml::Device dev, const std::vector<unsigned>* gi_filter);

  void* lib_;
  std::unique_ptr<Api> api_;
  NvmlProcessAbi process_abi_ = NvmlProcessAbi::kV1;
  std::string driver_version_;
  MpsController mps_;

  std::mutex mu_;
  std::map<std::uint32_t, unsigned long long> last_util_seen_;  // per device, driver clock µs (0: none yet)
  std::map<std::uint32_t, unsigned long long> last_mem_seen_;
  std::map<std::uint32_t, unsigned long long> last_proc_seen_;
  std::map<std::uint32_t, Micros> last_read_wall_;  // per device, wall clock of the last Sample
  std::map<std::uint32_t, MpsConfig> mps_configs_;

  // GPM: per-MIG-instance utilisation (Hopper+). Unsupported where the driver or the device
  // has no GPM; the first read of an instance only starts its window. Requires mu_.
  struct Gpm;
  Reading<Permille> MigUtilization(nvml::Device dev, std::uint32_t device, unsigned gpu_instance);
  std::unique_ptr<Gpm> gpm_;
};

}  // namespace gpuslice::devices
