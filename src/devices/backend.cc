#include "devices/backend.h"

#include <chrono>

#include <fmt/format.h>

#include "devices/clock.h"
#include "devices/fake.h"
#include "devices/nvml.h"
#include "devices/replay.h"

namespace gpuslice::devices {

std::string_view MigModeName(MigMode m) {
  switch (m) {
    case MigMode::kUnsupported: return "unsupported";
    case MigMode::kDisabled: return "disabled";
    case MigMode::kEnabled: return "enabled";
  }
  return "unknown";
}

std::string_view MpsStateName(MpsState s) {
  switch (s) {
    case MpsState::kStopped: return "stopped";
    case MpsState::kRunning: return "running";
    case MpsState::kDied: return "died";
  }
  return "unknown";
}

Result<std::vector<MigProfile>> DeviceBackend::MigProfiles(DeviceIndex) {
  return Unsupported(fmt::format("backend '{}' does not read MIG profiles from a driver", kind()));
}

bool DeviceBackend::SupportsMemoryLimits(DeviceIndex) { return false; }

Status DeviceBackend::SetMemoryLimit(DeviceIndex index, const std::string&, Bytes, Bytes) {
  return Unsupported(fmt::format("backend '{}': no driver memory limits on device {}", kind(), index.value()));
}

Micros WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Clock SystemClock() { return [] { return WallMicros(); }; }

Result<std::unique_ptr<DeviceBackend>> OpenBackend(const BackendOptions& options) {
  if (options.kind == "fake") {
    GPUSLICE_ASSIGN_OR_RETURN(auto fake, FakeBackend::Create(options.simulate, SystemClock()));
    return std::unique_ptr<DeviceBackend>(std::move(fake));
  }
  if (options.kind == "replay") {
    if (options.replay_file.empty()) {
      return InvalidArgument("backend 'replay' needs a recording file");
    }
    GPUSLICE_ASSIGN_OR_RETURN(auto replay, ReplayBackend::OpenFile(options.replay_file, nullptr));
    return std::unique_ptr<DeviceBackend>(std::move(replay));
  }
  if (options.kind == "nvml") {
    GPUSLICE_ASSIGN_OR_RETURN(auto nvml, NvmlBackend::Open(options));
    return std::unique_ptr<DeviceBackend>(std::move(nvml));
  }
  return InvalidArgument("backend: unknown kind '" + options.kind +
                         "' (expected nvml, fake or replay)");
}

}  // namespace gpuslice::devices
