#pragma once
// ReplayBackend: plays back a Recording (docs/recording-format.md). Sample(i) at clock time t
// returns what the recording measured on device i since the previous read: utilisation
// averaged over the recorded windows that ended in (previous read, t], weighted by window
// length; memory, clocks, power and processes from the latest of them. Read-only: MPS and MIG
// actions return Unsupported. The default clock starts at the recording's first window when
// the backend is opened and runs in real time. Thread-safe (one mutex).

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "devices/backend.h"
#include "devices/clock.h"
#include "devices/recording.h"

namespace gpuslice::devices {

class ReplayBackend : public DeviceBackend {
 public:
  static Result<std::unique_ptr<ReplayBackend>> OpenFile(const std::string& path, Clock clock);
  ReplayBackend(Recording recording, Clock clock);

  // First window start in the recording (0 if it has no samples).
  Micros start_time() const { return start_; }

  std::string_view kind() const override { return "replay"; }
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

 private:
  Status ReadOnly(std::string_view what) const;
  // Latest recorded sample of device `d` whose window ended at or before t; nullptr if none.
  const DeviceSample* LatestAt(std::size_t d, Micros t) const;

  mutable std::mutex mu_;
  Recording rec_;
  Clock clock_;
  Micros start_ = 0;
  std::vector<std::vector<std::size_t>> per_device_;  // sample indices, by window_end
  std::vector<Micros> last_read_;                     // per device; start_ initially
};

}  // namespace gpuslice::devices
