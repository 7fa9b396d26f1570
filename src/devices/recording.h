#pragma once
// Recordings: a JSON series of device samples that the replay backend plays back and
// `gpuslice record` writes from any backend. Format: docs/recording-format.md.
// Free functions and plain values; thread-compatible.

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "devices/backend.h"

namespace gpuslice::devices {

inline constexpr int kRecordingVersion = 1;

struct Recording {
  std::string source;        // e.g. "fake H100-80GB ..." or "nvml driver 550.54.15"
  Micros interval = 0;       // sampling interval the recorder used
  std::vector<DeviceInfo> devices;
  std::vector<DeviceSample> samples;  // in recording order; window_end non-decreasing per device
};

nlohmann::json ToJson(const Recording& r);
// Errors name the field path and the value (e.g. "samples[3].gpu_util: ...").
Result<Recording> RecordingFromJson(const nlohmann::json& j);
Result<Recording> ReadRecordingFile(const std::string& path);
Status WriteRecordingFile(const Recording& r, const std::string& path);

// Samples every device of `backend` every `interval` for `duration` (samples at interval,
// 2*interval, ... <= duration). `sleep_for` is injected so tests need not wait; a device whose
// Sample() fails is skipped for that round and the error is counted in `*errors`.
Result<Recording> Record(DeviceBackend& backend, Micros duration, Micros interval,
                         const std::function<void(Micros)>& sleep_for, int* errors = nullptr);

// `gpuslice record`: opens the backend, records in real time, writes `out_path` atomically.
// `summary` gets one line for the user ("recorded 20 samples of 2 devices ... to FILE").
Status RecordToFile(const BackendOptions& backend, Micros duration, Micros interval,
                    const std::string& out_path, std::string* summary);

}  // namespace gpuslice::devices
