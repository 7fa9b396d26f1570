#include "devices/replay.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpuslice::devices {

Result<std::unique_ptr<ReplayBackend>> ReplayBackend::OpenFile(const std::string& path, Clock clock) {
  GPUSLICE_ASSIGN_OR_RETURN(auto rec, ReadRecordingFile(path));
  return std::make_unique<ReplayBackend>(std::move(rec), std::move(clock));
}

ReplayBackend::ReplayBackend(Recording recording, Clock clock) : rec_(std::move(recording)) {
  per_device_.resize(rec_.devices.size());
  bool first = true;
  for (std::size_t i = 0; i < rec_.samples.size(); ++i) {
    const auto& s = rec_.samples[i];
    per_device_[s.index.value()].push_back(i);
    if (first || s.window_start < start_) start_ = s.window_start;
    first = false;
  }
  for (auto& v : per_device_) {
    std::stable_sort(v.begin(), v.end(), [&](std::size_t a, std::size_t b) {
      return rec_.samples[a].window_end < rec_.samples[b].window_end;
    });
  }
  last_read_.assign(rec_.devices.size(), start_);
  if (clock) {
    clock_ = std::move(clock);
  } else {
    // Real-time playback leads by a quarter interval, so a reader sampling at the recorded
    // interval sees each recorded window once, despite the recorder's own timing jitter.
    const Micros offset = WallMicros() - start_ - rec_.interval / 4;
    clock_ = [offset] { return WallMicros() - offset; };
  }
}

std::string ReplayBackend::description() const {
  return "replay of " + (rec_.source.empty() ? std::string("a recording") : rec_.source);
}

const DeviceSample* ReplayBackend::LatestAt(std::size_t d, Micros t) const {
  const DeviceSample* found = nullptr;
  for (std::size_t i : per_device_[d]) {
    if (rec_.samples[i].window_end > t) break;
    found = &rec_.samples[i];
  }
  return found;
}

Result<std::vector<DeviceInfo>> ReplayBackend::ListDevices() {
  std::lock_guard lock(mu_);
  std::vector<DeviceInfo> out = rec_.devices;
  const Micros now = clock_();
  for (std::size_t d = 0; d < out.size(); ++d) {
    if (const DeviceSample* s = LatestAt(d, now)) out[d].memory_used = s->memory_used;
  }
  return out;
}

Result<DeviceSample> ReplayBackend::Sample(DeviceIndex index) {
  std::lock_guard lock(mu_);
  const std::size_t d = index.value();
  if (d >= rec_.devices.size()) {
    return NotFound(fmt::format("device index {}: no such device in the recording ({} present)", d,
                                rec_.devices.size()));
  }
  const Micros now = clock_();
  const Micros from = last_read_[d];
  last_read_[d] = std::max(from, now);

  std::vector<const DeviceSample*> in_window;
  for (std::size_t i : per_device_[d]) {
    const auto& s = rec_.samples[i];
    if (s.window_end > from && s.window_end <= now) in_window.push_back(&s);
  }
  DeviceSample out;
  const DeviceSample* latest = in_window.empty() ? LatestAt(d, now) : in_window.back();
  if (latest != nullptr) out = *latest;
  out.index = index;
  out.uuid = rec_.devices[d].uuid;
  out.window_start = from;
  out.window_end = now;
  if (in_window.empty()) {
    out.driver_samples = 0;
    out.gpu_util = Reading<Permille>::Missing(NotFound("no new driver samples since the last read"));
    out.mem_util = out.gpu_util;
    if (latest == nullptr) {
      out.memory_total = rec_.devices[d].memory_total;
      out.memory_used = Reading<Bytes>::NotSupported("no recorded sample yet");
    }
    return out;
  }
  // Length-weighted mean of the recorded windows, as the driver's buffer would average them.
  auto average = [&](Reading<Permille> DeviceSample::*field) -> Reading<Permille> {
    __int128 sum = 0;
    Micros total = 0;
    for (const DeviceSample* s : in_window) {
      const auto& r = s->*field;
      if (!r.ok()) continue;
      const Micros w = std::max<Micros>(1, s->window_end - s->window_start);
      sum += static_cast<__int128>(r.value()) * w;
      total += w;
    }
    if (total == 0) return in_window.back()->*field;
    return Reading<Permille>::Of(static_cast<Permille>((sum + total / 2) / total));
  };
  out.gpu_util = average(&DeviceSample::gpu_util);
  out.mem_util = average(&DeviceSample::mem_util);
  out.driver_samples = 0;
  for (const DeviceSample* s : in_window) out.driver_samples += s->driver_samples;
  return out;
}

Status ReplayBackend::ReadOnly(std::string_view what) const {
  return Unsupported(fmt::format("{}: the replay backend is read-only", what));
}

Status ReplayBackend::StartMps(DeviceIndex, const MpsConfig&) { return ReadOnly("mps start"); }
Status ReplayBackend::StopMps(DeviceIndex) { return ReadOnly("mps stop"); }
Result<MpsStatus> ReplayBackend::GetMpsStatus(DeviceIndex index) {
  if (index.value() >= rec_.devices.size()) {
    return NotFound(fmt::format("device index {}: no such device in the recording", index.value()));
  }
  return MpsStatus{};
}
Status ReplayBackend::SetMigMode(DeviceIndex, bool) { return ReadOnly("mig mode"); }
Result<GpuInstanceInfo> ReplayBackend::CreateGpuInstance(DeviceIndex, int, int) {
  return ReadOnly("mig create gpu instance");
}
Result<ComputeInstanceInfo> ReplayBackend::CreateComputeInstance(DeviceIndex, GpuInstanceId, int) {
  return ReadOnly("mig create compute instance");
}
Status ReplayBackend::DestroyComputeInstance(DeviceIndex, GpuInstanceId, ComputeInstanceId) {
  return ReadOnly("mig destroy compute instance");
}
Status ReplayBackend::DestroyGpuInstance(DeviceIndex, GpuInstanceId) {
  return ReadOnly("mig destroy gpu instance");
}

}  // namespace gpuslice::devices
