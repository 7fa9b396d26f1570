#include "devices/nvml.h"
#include "devices/nvml_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "devices/clock.h"

namespace gpuslice::devices {

using namespace nvml;  // NOLINT: .cc only; the ABI names are short on purpose


namespace {

// First symbol of `names` that the library exports (newest version first).
template <typename Fn>
Fn Resolve(void* lib, std::initializer_list<const char*> names, const char** chosen = nullptr) {
  for (const char* n : names) {
    if (void* p = ::dlsym(lib, n)) {
      if (chosen != nullptr) *chosen = n;
      return reinterpret_cast<Fn>(p);
    }
  }
  return nullptr;
}

// Process-record buffers: room for the largest record any driver writes, pre-filled with a byte
// pattern no record field ends with (see MeasureProcessRecord).
constexpr std::size_t kMaxProcessRecord = sizeof(ProcessInfoR535);
constexpr unsigned char kRecordSentinel = 0xA5;

std::string CString(const char* buf, std::size_t n) { return std::string(buf, strnlen(buf, n)); }

StatusCode CodeFor(Return r) {
  switch (r) {
    case kErrorNotSupported: return StatusCode::kUnsupported;
    case kErrorNoPermission: return StatusCode::kPermissionDenied;
    case kErrorNotFound: return StatusCode::kNotFound;
    case kErrorInvalidArgument: return StatusCode::kInvalidArgument;
    case kErrorInUse: return StatusCode::kFailedPrecondition;
    case kErrorInsufficientResources: return StatusCode::kResourceExhausted;
    case kErrorDriverNotLoaded:
    case kErrorGpuIsLost:
    case kErrorUninitialized: return StatusCode::kUnavailable;
    default: return StatusCode::kInternal;
  }
}

double SampleValue(int type, const Value& v) {
  switch (type) {
    case kValueDouble: return v.d;
    case kValueUInt: return v.ui;
    case kValueULong: return static_cast<double>(v.ul);
    case kValueULongLong: return static_cast<double>(v.ull);
    case kValueSLongLong: return static_cast<double>(v.sll);
    case kValueSInt: return v.si;
    case kValueUShort: return v.us;
    default: return 0;
  }
}

}  // namespace

Result<std::unique_ptr<NvmlBackend>> NvmlBackend::Open(const BackendOptions& options) {
  void* lib = ::dlopen(options.nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = ::dlerror();
    return Unavailable(fmt::format("no NVIDIA driver: cannot load {}: {}", options.nvml_library,
                                   err ? err : "unknown error"));
  }
  auto api = std::make_unique<Api>();
  Api& a = *api;
  a.init = Resolve<InitFn>(lib, {"nvmlInit_v2", "nvmlInit"});
  a.shutdown = Resolve<ShutdownFn>(lib, {"nvmlShutdown"});
  a.error_string = Resolve<ErrorStringFn>(lib, {"nvmlErrorString"});
  a.count = Resolve<DeviceGetCountFn>(lib, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  a.handle_by_index =
      Resolve<DeviceGetHandleByIndexFn>(lib, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  if (a.init == nullptr || a.shutdown == nullptr || a.count == nullptr || a.handle_by_index == nullptr) {
    ::dlclose(lib);
    return Unavailable(fmt::format("no NVIDIA driver: {} lacks nvmlInit/nvmlDeviceGetCount", options.nvml_library));
  }
  const Return r = a.init();
  if (r != kSuccess) {
    std::string why = a.error_string ? a.error_string(r) : fmt::format("error {}", r);
    ::dlclose(lib);
    return Unavailable(fmt::format("no NVIDIA driver: nvmlInit failed: {}", why));
  }
  a.driver_version = Resolve<SystemGetDriverVersionFn>(lib, {"nvmlSystemGetDriverVersion"});
  a.name = Resolve<DeviceGetStringFn>(lib, {"nvmlDeviceGetName"});
  a.uuid = Resolve<DeviceGetStringFn>(lib, {"nvmlDeviceGetUUID"});
  a.memory_v2 = Resolve<DeviceGetMemoryInfoV2Fn>(lib, {"nvmlDeviceGetMemoryInfo_v2"});
  a.memory = Resolve<DeviceGetMemoryInfoFn>(lib, {"nvmlDeviceGetMemoryInfo"});
  a.samples = Resolve<DeviceGetSamplesFn>(lib, {"nvmlDeviceGetSamples"});
  a.process_util = Resolve<DeviceGetProcessUtilizationFn>(lib, {"nvmlDeviceGetProcessUtilization"});
  a.clock = Resolve<DeviceGetClockInfoFn>(lib, {"nvmlDeviceGetClockInfo"});
  a.power = Resolve<DeviceGetUIntFn>(lib, {"nvmlDeviceGetPowerUsage"});
  a.temperature = Resolve<DeviceGetTemperatureFn>(lib, {"nvmlDeviceGetTemperature"});
  a.energy = Resolve<DeviceGetULongLongFn>(lib, {"nvmlDeviceGetTotalEnergyConsumption"});
  a.mig_mode = Resolve<DeviceGetMigModeFn>(lib, {"nvmlDeviceGetMigMode"});
  a.set_mig_mode = Resolve<DeviceSetMigModeFn>(lib, {"nvmlDeviceSetMigMode"});
  a.max_mig_devices = Resolve<DeviceGetUIntFn>(lib, {"nvmlDeviceGetMaxMigDeviceCount"});
  a.mig_handle = Resolve<DeviceGetMigDeviceHandleByIndexFn>(lib, {"nvmlDeviceGetMigDeviceHandleByIndex"});
  a.mig_gi_id = Resolve<DeviceGetUIntFn>(lib, {"nvmlDeviceGetGpuInstanceId"});
  a.mig_ci_id = Resolve<DeviceGetUIntFn>(lib, {"nvmlDeviceGetComputeInstanceId"});
  a.gi_profile_info = Resolve<DeviceGetGpuInstanceProfileInfoFn>(lib, {"nvmlDeviceGetGpuInstanceProfileInfo"});
  a.gpu_instances = Resolve<DeviceGetGpuInstancesFn>(lib, {"nvmlDeviceGetGpuInstances"});
  a.gi_by_id = Resolve<DeviceGetGpuInstanceByIdFn>(lib, {"nvmlDeviceGetGpuInstanceById"});
  a.create_gi =
      Resolve<DeviceCreateGpuInstanceWithPlacementFn>(lib, {"nvmlDeviceCreateGpuInstanceWithPlacement"});
  a.placements = Resolve<DeviceGetGpuInstancePossiblePlacementsFn>(
      lib, {"nvmlDeviceGetGpuInstancePossiblePlacements_v2", "nvmlDeviceGetGpuInstancePossiblePlacements"});
  a.gi_info = Resolve<GpuInstanceGetInfoFn>(lib, {"nvmlGpuInstanceGetInfo"});
  a.destroy_gi = Resolve<GpuInstanceDestroyFn>(lib, {"nvmlGpuInstanceDestroy"});
  a.ci_profile_info = Resolve<GpuInstanceGetComputeInstanceProfileInfoFn>(
      lib, {"nvmlGpuInstanceGetComputeInstanceProfileInfo"});
  a.create_ci = Resolve<GpuInstanceCreateComputeInstanceFn>(lib, {"nvmlGpuInstanceCreateComputeInstance"});
  a.compute_instances = Resolve<GpuInstanceGetComputeInstancesFn>(lib, {"nvmlGpuInstanceGetComputeInstances"});
  a.ci_by_id = Resolve<GpuInstanceGetComputeInstanceByIdFn>(lib, {"nvmlGpuInstanceGetComputeInstanceById"});
  a.ci_info = Resolve<ComputeInstanceGetInfoFn>(lib, {"nvmlComputeInstanceGetInfo_v2", "nvmlComputeInstanceGetInfo"});
  a.destroy_ci = Resolve<ComputeInstanceDestroyFn>(lib, {"nvmlComputeInstanceDestroy"});
  a.set_memory_limits = Resolve<DeviceSetMemoryLimitsFn>(lib, {"nvmlDeviceSetMemoryLimits_v1"});
  a.get_memory_limits = Resolve<DeviceGetMemoryLimitsFn>(lib, {"nvmlDeviceGetMemoryLimits_v1"});

  // Process records: _v3 and _v2 write 24-byte records, the unversioned one 16 bytes — except
  // early R535 drivers, whose _v3 wrote 32 bytes. nvitop's probe: that driver exports
  // nvmlDeviceGetConfComputeMemSizeInfo but not yet nvmlDeviceGetRunningProcessDetailList.
  const char* chosen = nullptr;
  a.compute_procs = Resolve<DeviceGetRunningProcessesFn>(
      lib,
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
       "nvmlDeviceGetComputeRunningProcesses"},
      &chosen);
  NvmlProcessAbi abi = NvmlProcessAbi::kV1;
  if (chosen != nullptr && std::string_view(chosen).ends_with("_v3")) {
    const bool r535 = ::dlsym(lib, "nvmlDeviceGetConfComputeMemSizeInfo") != nullptr &&
                      ::dlsym(lib, "nvmlDeviceGetRunningProcessDetailList") == nullptr;
    abi = r535 ? NvmlProcessAbi::kV3R535 : NvmlProcessAbi::kV3;
  } else if (chosen != nullptr && std::string_view(chosen).ends_with("_v2")) {
    abi = NvmlProcessAbi::kV2;
  }
  auto backend = std::unique_ptr<NvmlBackend>(new NvmlBackend(lib, std::move(api), options));
  backend->process_abi_ = abi;
  return backend;
}

NvmlBackend::NvmlBackend(void* lib, std::unique_ptr<Api> api, const BackendOptions& options)
    : lib_(lib), api_(std::move(api)), mps_(options.mps_control_binary) {
  if (api_->driver_version) {
    char buf[kDriverVersionBufferSize] = {};
    if (api_->driver_version(buf, sizeof(buf)) == kSuccess) driver_version_ = CString(buf, sizeof(buf));
  }
}

NvmlBackend::~NvmlBackend() {
  gpm_.reset();  // frees its samples while the library is loaded
  api_->shutdown();
  ::dlclose(lib_);
}

std::string NvmlBackend::description() const {
  return driver_version_.empty() ? "nvml" : "nvml driver " + driver_version_;
}

Status NvmlBackend::Error(std::string_view what, Return r) const {
  std::string why = api_->error_string ? api_->error_string(r) : fmt::format("error {}", r);
  return Status(CodeFor(r), fmt::format("{}: {}", what, why));
}

Result<Device> NvmlBackend::Handle(DeviceIndex index) {
  Device dev = nullptr;
  const Return r = api_->handle_by_index(index.value(), &dev);
  if (r == kErrorInvalidArgument || r == kErrorNotFound) {
    return NotFound(fmt::format("device index {}: no such device", index.value()));
  }
  if (r != kSuccess) return Error(fmt::format("device {}: nvmlDeviceGetHandleByIndex", index.value()), r);
  return dev;
}

Result<std::vector<NvmlBackend::RawProcess>> NvmlBackend::RunningProcesses(Device dev) {
  if (api_->compute_procs == nullptr) return Unsupported("nvmlDeviceGetComputeRunningProcesses not exported");
  unsigned count = 0;
  Return r = api_->compute_procs(dev, &count, nullptr);
  std::vector<RawProcess> out;
  if (r == kSuccess) return out;  // no processes
  // Processes come and go between the two calls: over-allocate (as nvitop does) and retry.
  for (int attempt = 0; attempt < 3 && r == kErrorInsufficientSize; ++attempt) {
    unsigned cap = 2 * count + 5;
    // Room for the largest record any driver writes, filled with a sentinel: the bytes the driver
    // wrote tell the record size (nvitop#226), whatever its symbols suggest.
    std::vector<unsigned char> buf(static_cast<std::size_t>(cap) * kMaxProcessRecord, kRecordSentinel);
    count = cap;
    r = api_->compute_procs(dev, &count, buf.data());
    if (r != kSuccess) continue;
    const unsigned n = std::min(count, cap);
    const std::size_t record = MeasureProcessRecord(buf, n);
    for (unsigned i = 0; i < n; ++i) {
      const unsigned char* p = buf.data() + i * record;
      RawProcess rp;
      if (record == sizeof(ProcessInfoV1)) {
        ProcessInfoV1 v;
        std::memcpy(&v, p, sizeof(v));
        rp.pid = v.pid;
        rp.memory = v.used_gpu_memory;
      } else {
        ProcessInfoV2 v;  // the R535 record starts with the same 24 bytes
        std::memcpy(&v, p, sizeof(v));
        rp.pid = v.pid;
        rp.memory = v.used_gpu_memory;
        rp.gi = v.gpu_instance_id;
        rp.ci = v.compute_instance_id;
      }
      out.push_back(rp);
    }
    return out;
  }
  return Error("nvmlDeviceGetComputeRunningProcesses", r);
}

std::size_t NvmlBackend::MeasureProcessRecord(const std::vector<unsigned char>& buf, unsigned n) {
  const std::size_t guess = process_abi_ == NvmlProcessAbi::kV1      ? sizeof(ProcessInfoV1)
                            : process_abi_ == NvmlProcessAbi::kV3R535 ? sizeof(ProcessInfoR535)
                                                                      : sizeof(ProcessInfoV2);
  if (n == 0) return guess;
  // The smallest known size s such that nothing past n records of s bytes was written. Every
  // record's last 8 bytes hold a field (memory, instance ids, protected memory) that is never
  // the sentinel pattern, so a larger record always shows past n * (smaller size).
  for (std::size_t s : {sizeof(ProcessInfoV1), sizeof(ProcessInfoV2), sizeof(ProcessInfoR535)}) {
    const auto from = buf.begin() + static_cast<std::ptrdiff_t>(s * n);
    const auto to = buf.begin() + static_cast<std::ptrdiff_t>(kMaxProcessRecord * n);
    if (std::all_of(from, to, [](unsigned char c) { return c == kRecordSentinel; })) {
      process_abi_ = s == sizeof(ProcessInfoV1) ? NvmlProcessAbi::kV1
                     : s == sizeof(ProcessInfoR535) ? NvmlProcessAbi::kV3R535
                     : process_abi_ == NvmlProcessAbi::kV2 ? NvmlProcessAbi::kV2 : NvmlProcessAbi::kV3;
      return s;
    }
  }
  return guess;
}

Reading<Permille> NvmlBackend::AverageSamples(Device dev, int type, unsigned long long* last_seen,
                                              int* count) {
  if (api_->samples == nullptr) return Reading<Permille>::NotSupported("nvmlDeviceGetSamples not exported");
  // Sample timestamps are in the driver's own clock (reported to be CLOCK_BOOTTIME, not the
  // epoch): never compare them with the wall clock. 0 asks for the whole buffer; after that
  // each read asks for what is newer than the newest sample it kept.
  int value_type = 0;
  unsigned n = 0;
  Return r = api_->samples(dev, type, *last_seen, &value_type, &n, nullptr);
  if (r == kErrorNotFound) {
    return Reading<Permille>::Missing(NotFound("no new driver samples since the last read"));
  }
  if (r != kSuccess && r != kErrorInsufficientSize) {
    return Reading<Permille>::Missing(Error("nvmlDeviceGetSamples", r));
  }
  std::vector<nvml::Sample> buf(n + 8);
  n = static_cast<unsigned>(buf.size());
  r = api_->samples(dev, type, *last_seen, &value_type, &n, buf.data());
  if (r == kErrorNotFound || (r == kSuccess && n == 0)) {
    return Reading<Permille>::Missing(NotFound("no new driver samples since the last read"));
  }
  if (r != kSuccess) return Reading<Permille>::Missing(Error("nvmlDeviceGetSamples", r));
  n = std::min(n, static_cast<unsigned>(buf.size()));
  // Drivers have returned out-of-range values (nvtop#110): such a sample is dropped, not clamped.
  auto valid = [&](const nvml::Sample& x) {
    const double v = SampleValue(value_type, x.value);
    return x.time_stamp > *last_seen && v >= 0.0 && v <= 100.0;
  };
  unsigned long long newest = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (valid(buf[i])) newest = std::max(newest, buf[i].time_stamp);
  }
  // The first read keeps the last second of the buffer (which can hold minutes), measured on
  // the driver's clock from its newest sample.
  constexpr auto kWindow = static_cast<unsigned long long>(kSecond);
  const unsigned long long from = *last_seen != 0 ? *last_seen : (newest > kWindow ? newest - kWindow : 0);
  double sum = 0;
  int used = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (!valid(buf[i]) || buf[i].time_stamp <= from) continue;
    sum += SampleValue(value_type, buf[i].value);
    ++used;
  }
  *last_seen = std::max(*last_seen, newest);
  if (used == 0) return Reading<Permille>::Missing(NotFound("no new driver samples since the last read"));
  if (count != nullptr) *count = used;
  return Reading<Permille>::Of(static_cast<Permille>(sum * 10.0 / used + 0.5));
}

Result<std::vector<NvmlBackend::MigDevice>> NvmlBackend::MigDevices(Device dev) {
  std::vector<MigDevice> out;
  if (!api_->max_mig_devices || !api_->mig_handle) return out;
  unsigned max = 0;
  if (api_->max_mig_devices(dev, &max) != kSuccess) return out;
  for (unsigned i = 0; i < max; ++i) {
    MigDevice m;
    if (api_->mig_handle(dev, i, &m.handle) != kSuccess) continue;  // holes are normal
    char buf[kUuidBufferSize] = {};
    if (api_->uuid && api_->uuid(m.handle, buf, sizeof(buf)) == kSuccess) m.uuid = CString(buf, sizeof(buf));
    if (api_->mig_gi_id) api_->mig_gi_id(m.handle, &m.gi);
    if (api_->mig_ci_id) api_->mig_ci_id(m.handle, &m.ci);
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<devices::GpuInstanceInfo>> NvmlBackend::GpuInstances(Device dev) {
  std::vector<devices::GpuInstanceInfo> out;
  if (!api_->gi_profile_info || !api_->gpu_instances || !api_->gi_info) return out;
  GPUSLICE_ASSIGN_OR_RETURN(auto migs, MigDevices(dev));
  for (unsigned p = 0; p < kProfileIndexLimit; ++p) {
    GpuInstanceProfileInfo pinfo{};
    Return r = api_->gi_profile_info(dev, p, &pinfo);
    if (r == kErrorInvalidArgument) break;  // past the last profile this driver knows
    if (r != kSuccess) continue;
    std::vector<GpuInstance> gis(std::max(1u, pinfo.instance_count));
    unsigned n = static_cast<unsigned>(gis.size());
    if (api_->gpu_instances(dev, pinfo.id, gis.data(), &n) != kSuccess) continue;
    for (unsigned k = 0; k < n; ++k) {
      nvml::GpuInstanceInfo info{};
      if (api_->gi_info(gis[k], &info) != kSuccess) continue;
      devices::GpuInstanceInfo gi;
      gi.id = GpuInstanceId(info.id);
      gi.profile_id = static_cast<int>(pinfo.id);
      gi.start = static_cast<int>(info.placement.start);
      gi.size = static_cast<int>(info.placement.size);
      gi.memory_total = Reading<Bytes>::Of(static_cast<Bytes>(pinfo.memory_size_mb) * kMiB);
      for (const auto& m : migs) {
        if (m.gi != info.id) continue;
        devices::ComputeInstanceInfo ci;
        ci.id = ComputeInstanceId(m.ci);
        ci.uuid = m.uuid;
        if (api_->ci_by_id && api_->ci_info) {
          ComputeInstance h = nullptr;
          nvml::ComputeInstanceInfo cinfo{};
          if (api_->ci_by_id(gis[k], m.ci, &h) == kSuccess && api_->ci_info(h, &cinfo) == kSuccess) {
            ci.profile_id = static_cast<int>(cinfo.profile_id);
          }
        }
        gi.compute_instances.push_back(std::move(ci));
      }
      out.push_back(std::move(gi));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  return out;
}

void NvmlBackend::ReadMemory(Device dev, Reading<Bytes>* total, Reading<Bytes>* used, Reading<Bytes>* reserved) {
  if (reserved != nullptr) *reserved = Reading<Bytes>::NotSupported("nvmlDeviceGetMemoryInfo_v2 not available");
  // _v2 (drivers >= 515) reports `used` without the driver's reserved memory; v1 includes it.
  if (api_->memory_v2) {
    MemoryV2 mem{};
    mem.version = kMemoryV2Version;
    if (api_->memory_v2(dev, &mem) == kSuccess) {
      *total = Reading<Bytes>::Of(static_cast<Bytes>(mem.total));
      *used = Reading<Bytes>::Of(static_cast<Bytes>(mem.used));
      if (reserved != nullptr) *reserved = Reading<Bytes>::Of(static_cast<Bytes>(mem.reserved));
      return;
    }
  }
  if (!api_->memory) {
    *total = Reading<Bytes>::NotSupported("nvmlDeviceGetMemoryInfo not exported");
    *used = *total;
    return;
  }
  Memory mem{};
  if (Return r = api_->memory(dev, &mem); r == kSuccess) {
    *total = Reading<Bytes>::Of(static_cast<Bytes>(mem.total));
    *used = Reading<Bytes>::Of(static_cast<Bytes>(mem.used));
  } else {
    *total = Reading<Bytes>::Missing(Error("nvmlDeviceGetMemoryInfo", r));
    *used = *total;
  }
}

Result<std::vector<DeviceInfo>> NvmlBackend::ListDevices() {
  std::lock_guard lock(mu_);
  unsigned n = 0;
  if (Return r = api_->count(&n); r != kSuccess) return Error("nvmlDeviceGetCount", r);
  std::vector<DeviceInfo> out;
  for (unsigned i = 0; i < n; ++i) {
    DeviceInfo d;
    d.index = DeviceIndex(i);
    auto h = Handle(d.index);
    if (!h.ok()) {
      // Counted but not accessible (e.g. NO_PERMISSION in a container): list it as such.
      d.memory_total = Reading<Bytes>::Missing(h.status());
      d.memory_used = d.memory_total;
      out.push_back(std::move(d));
      continue;
    }
    Device dev = *h;
    char buf[kNameBufferSize] = {};
    if (api_->name && api_->name(dev, buf, sizeof(buf)) == kSuccess) d.name = CString(buf, sizeof(buf));
    char ubuf[kUuidBufferSize] = {};
    if (api_->uuid && api_->uuid(dev, ubuf, sizeof(ubuf)) == kSuccess) d.uuid = CString(ubuf, sizeof(ubuf));
    if (auto m = FindModel(d.name); m.ok()) d.model = *m;
    ReadMemory(dev, &d.memory_total, &d.memory_used, &d.memory_reserved);
    if (api_->mig_mode) {
      unsigned cur = 0, pend = 0;
      if (api_->mig_mode(dev, &cur, &pend) == kSuccess) {
        d.mig_current = cur == kMigEnable ? MigMode::kEnabled : MigMode::kDisabled;
        d.mig_pending = pend == kMigEnable ? MigMode::kEnabled : MigMode::kDisabled;
      }
    }
    if (d.mig_current == MigMode::kEnabled) {
      auto gis = GpuInstances(dev);
      if (gis.ok()) d.gpu_instances = std::move(gis).value();
    }
    out.push_back(std::move(d));
  }
  return out;
}

Result<DeviceSample> NvmlBackend::Sample(DeviceIndex index) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
  const auto key = index.value();
  const Micros now = WallMicros();
  DeviceSample s;
  s.index = index;
  char ubuf[kUuidBufferSize] = {};
  if (api_->uuid && api_->uuid(dev, ubuf, sizeof(ubuf)) == kSuccess) s.uuid = CString(ubuf, sizeof(ubuf));

  // The window is on the wall clock; the driver's sample timestamps are on its own clock and
  // are only ever compared with each other (AverageSamples). 0: nothing read yet.
  auto& util_seen = last_util_seen_[key];
  auto& mem_seen = last_mem_seen_[key];
  auto& proc_seen = last_proc_seen_[key];
  auto& last_read = last_read_wall_[key];
  s.window_start = last_read != 0 ? last_read : now - kSecond;  // a first read keeps ~1 s
  s.window_end = now;
  last_read = now;

  bool mig = false;
  if (api_->mig_mode) {
    unsigned cur = 0, pend = 0;
    mig = api_->mig_mode(dev, &cur, &pend) == kSuccess && cur == kMigEnable;
  }
  if (mig) {
    s.gpu_util = Reading<Permille>::NotSupported("GPU utilisation is not available with MIG enabled");
    s.mem_util = s.gpu_util;
  } else {
    s.gpu_util = AverageSamples(dev, kSamplingGpuUtil, &util_seen, &s.driver_samples);
    s.mem_util = AverageSamples(dev, kSamplingMemoryUtil, &mem_seen, nullptr);
    if (s.gpu_util.status().code() == StatusCode::kUnavailable) return s.gpu_util.status();  // GPU lost
  }

  ReadMemory(dev, &s.memory_total, &s.memory_used);
  auto uint_reading = [&](Return r, unsigned v, std::string_view what) {
    return r == kSuccess ? Reading<int>::Of(static_cast<int>(v)) : Reading<int>::Missing(Error(what, r));
  };
  unsigned v = 0;
  if (api_->clock) {
    Return r = api_->clock(dev, kClockSm, &v);
    s.sm_clock_mhz = uint_reading(r, v, "nvmlDeviceGetClockInfo(SM)");
    r = api_->clock(dev, kClockMem, &v);
    s.mem_clock_mhz = uint_reading(r, v, "nvmlDeviceGetClockInfo(MEM)");
  }
  if (api_->power) {
    Return r = api_->power(dev, &v);
    s.power_mw = r == kSuccess ? Reading<std::int64_t>::Of(v)
                               : Reading<std::int64_t>::Missing(Error("nvmlDeviceGetPowerUsage", r));
  }
  if (api_->temperature) {
    Return r = api_->temperature(dev, kTemperatureGpu, &v);
    s.temperature_c = uint_reading(r, v, "nvmlDeviceGetTemperature");
  }
  if (api_->energy) {
    unsigned long long mj = 0;
    Return r = api_->energy(dev, &mj);
    s.energy_mj = r == kSuccess ? Reading<std::int64_t>::Of(static_cast<std::int64_t>(mj))
                                : Reading<std::int64_t>::Missing(Error("nvmlDeviceGetTotalEnergyConsumption", r));
  }

  // Processes, then per-process utilisation since the last read (entries only for processes
  // that were busy; several entries per pid are averaged).
  std::vector<MigDevice> migs;
  if (mig) {
    auto m = MigDevices(dev);
    if (m.ok()) migs = std::move(m).value();
  }
  auto procs = RunningProcesses(dev);
  if (mig && !procs.ok()) {
    // The parent's aggregate list needs privileges in MIG mode; each MIG device's own list
    // does not (measurement.md §1.4). Tag each process with the instance that listed it.
    std::vector<RawProcess> all;
    for (const auto& m : migs) {
      auto per = RunningProcesses(m.handle);
      if (!per.ok()) continue;
      for (auto rp : *per) {
        rp.gi = m.gi;
        rp.ci = m.ci;
        all.push_back(rp);
      }
    }
    procs = std::move(all);
  }
  if (!procs.ok() && procs.status().code() == StatusCode::kUnavailable) return procs.status();
  std::map<unsigned, std::pair<long, int>> sm, mm;  // pid -> (sum %, n)
  Status per_process = Status::Ok();
  if (mig) {
    per_process = Unsupported("no per-process utilisation in MIG mode");
  } else if (!api_->process_util) {
    per_process = Unsupported("nvmlDeviceGetProcessUtilization not exported");
  } else {
    unsigned n = 0;
    Return r = api_->process_util(dev, nullptr, &n, proc_seen);
    if (r == kErrorInsufficientSize || (r == kSuccess && n > 0)) {
      std::vector<ProcessUtilizationSample> buf(n + 16);
      n = static_cast<unsigned>(buf.size());
      r = api_->process_util(dev, buf.data(), &n, proc_seen);
      if (r == kSuccess) {
        n = std::min(n, static_cast<unsigned>(buf.size()));
        // Drivers return stale entries (older than asked for) and impossible values (nvtop#110):
        // both are dropped, as nvtop does, never clamped or averaged in.
        auto valid = [&](const ProcessUtilizationSample& x) {
          return x.time_stamp > proc_seen && x.sm_util <= 100 && x.mem_util <= 100;
        };
        unsigned long long newest = proc_seen;
        for (unsigned i = 0; i < n; ++i) {
          if (valid(buf[i])) newest = std::max(newest, buf[i].time_stamp);
        }
        // A first read (proc_seen == 0 asks for the whole buffer) keeps the last second of it.
        constexpr auto kWindow = static_cast<unsigned long long>(kSecond);
        const unsigned long long from = proc_seen != 0 ? proc_seen : (newest > kWindow ? newest - kWindow : 0);
        for (unsigned i = 0; i < n; ++i) {
          if (!valid(buf[i]) || buf[i].time_stamp <= from) continue;
          sm[buf[i].pid].first += buf[i].sm_util;
          sm[buf[i].pid].second++;
          mm[buf[i].pid].first += buf[i].mem_util;
          mm[buf[i].pid].second++;
        }
        proc_seen = newest;
      }
    }
    if (r != kSuccess && r != kErrorNotFound && r != kErrorInsufficientSize) {
      per_process = Error("nvmlDeviceGetProcessUtilization", r);
    }
  }
  if (procs.ok()) {
    for (const auto& rp : *procs) {
      ProcessSample p;
      p.pid = static_cast<int>(rp.pid);
      p.memory_used = rp.memory == kValueNotAvailable
                          ? Reading<Bytes>::NotSupported("per-process memory not available")
                          : Reading<Bytes>::Of(static_cast<Bytes>(rp.memory));
      if (!per_process.ok()) {
        p.sm_util = Reading<Permille>::Missing(per_process);
        p.mem_util = p.sm_util;
      } else {
        auto avg = [](const std::map<unsigned, std::pair<long, int>>& m, unsigned pid) {
          auto it = m.find(pid);
          if (it == m.end()) return Reading<Permille>::Of(0);
          return Reading<Permille>::Of(static_cast<Permille>(it->second.first * 10 / it->second.second));
        };
        p.sm_util = avg(sm, rp.pid);
        p.mem_util = avg(mm, rp.pid);
      }
      if (rp.gi != kNoInstance && mig) {
        p.gpu_instance = GpuInstanceId(rp.gi);
        p.compute_instance = ComputeInstanceId(rp.ci);
        for (const auto& m : migs) {
          if (m.gi == rp.gi && m.ci == rp.ci) p.mig_uuid = m.uuid;
        }
      }
      s.processes.push_back(std::move(p));
    }
  }
  for (const auto& m : migs) {
    MigSample ms;
    ms.uuid = m.uuid;
    ms.gpu_instance = GpuInstanceId(m.gi);
    ms.compute_instance = ComputeInstanceId(m.ci);
    // The same call and meaning of "used" as the device rows (v2: without reserved memory).
    ReadMemory(m.handle, &ms.memory_total, &ms.memory_used);
    ms.util = MigUtilization(dev, key, m.gi);  // GPM, per GPU instance
    for (const auto& p : s.processes) {
      if (p.mig_uuid == m.uuid) ms.pids.push_back(p.pid);
    }
    s.mig.push_back(std::move(ms));
  }
  return s;
}

// ---- GPM ----------------------------------------------------------------------------------

// The GPM entry points (all or nothing: measurement.md §1.3) and the previous sample of each
// (device, GPU instance), whose difference with the next one is the figure.
struct NvmlBackend::Gpm {
  GpmQueryDeviceSupportFn query = nullptr;
  GpmSampleAllocFn alloc = nullptr;
  GpmSampleFreeFn free = nullptr;
  GpmMigSampleGetFn mig_sample = nullptr;
  GpmMetricsGetFn metrics = nullptr;
  struct Window {
    GpmSample sample = nullptr;
    std::chrono::steady_clock::time_point taken;
    std::optional<Permille> last;  // the figure of the previous window
  };
  std::map<std::pair<std::uint32_t, unsigned>, Window> windows;
  std::map<std::uint32_t, bool> supported;  // per device

  explicit Gpm(void* lib) {
    query = reinterpret_cast<GpmQueryDeviceSupportFn>(::dlsym(lib, "nvmlGpmQueryDeviceSupport"));
    alloc = reinterpret_cast<GpmSampleAllocFn>(::dlsym(lib, "nvmlGpmSampleAlloc"));
    free = reinterpret_cast<GpmSampleFreeFn>(::dlsym(lib, "nvmlGpmSampleFree"));
    mig_sample = reinterpret_cast<GpmMigSampleGetFn>(::dlsym(lib, "nvmlGpmMigSampleGet"));
    metrics = reinterpret_cast<GpmMetricsGetFn>(::dlsym(lib, "nvmlGpmMetricsGet"));
  }
  ~Gpm() {
    for (auto& [k, w] : windows) {
      if (w.sample != nullptr && free != nullptr) free(w.sample);
    }
  }
  bool present() const { return query && alloc && free && mig_sample && metrics; }
};

Reading<Permille> NvmlBackend::MigUtilization(Device dev, std::uint32_t device, unsigned gpu_instance) {
  if (!gpm_) gpm_ = std::make_unique<Gpm>(lib_);
  Gpm& g = *gpm_;
  if (!g.present()) return Reading<Permille>::NotSupported("per-MIG-instance utilisation needs GPM (driver lacks nvmlGpm*)");
  auto sup = g.supported.find(device);
  if (sup == g.supported.end()) {
    GpmSupport s{kGpmSupportVersion, 0};
    const bool ok = g.query(dev, &s) == kSuccess && s.is_supported_device != 0;
    sup = g.supported.emplace(device, ok).first;
  }
  if (!sup->second) return Reading<Permille>::NotSupported("per-MIG-instance utilisation needs GPM (Hopper or newer)");
  auto& w = g.windows[{device, gpu_instance}];
  const auto now = std::chrono::steady_clock::now();
  // Samples closer than the driver's refresh (100 ms) give nothing new: keep the last figure.
  if (w.sample != nullptr && now - w.taken < std::chrono::milliseconds(100)) {
    if (w.last) return Reading<Permille>::Of(*w.last);
    return Reading<Permille>::Missing(Unavailable("GPM: window too short yet"));
  }
  GpmSample cur = nullptr;
  if (Return r = g.alloc(&cur); r != kSuccess) return Reading<Permille>::Missing(Error("nvmlGpmSampleAlloc", r));
  if (Return r = g.mig_sample(dev, gpu_instance, cur); r != kSuccess) {
    g.free(cur);
    if (r == kErrorNotSupported) return Reading<Permille>::NotSupported("GPM: not supported for this GPU instance");
    return Reading<Permille>::Missing(Error("nvmlGpmMigSampleGet", r));
  }
  if (w.sample == nullptr) {
    // The first sample only opens the window: no figure yet (unknown, never 0).
    w.sample = cur;
    w.taken = now;
    return Reading<Permille>::Missing(Unavailable("GPM: first sample of this instance; the figure comes next round"));
  }
  auto get = std::make_unique<GpmMetricsGet>();
  *get = GpmMetricsGet{};
  get->version = kGpmMetricsGetVersion;
  get->num_metrics = 1;
  get->sample1 = w.sample;
  get->sample2 = cur;
  get->metrics[0].metric_id = kGpmGraphicsUtil;
  const Return r = g.metrics(get.get());
  g.free(w.sample);
  w.sample = cur;
  w.taken = now;
  if (r != kSuccess) return Reading<Permille>::Missing(Error("nvmlGpmMetricsGet", r));
  if (get->metrics[0].nvml_return != kSuccess) {
    return Reading<Permille>::Missing(Error("GPM graphics utilisation", get->metrics[0].nvml_return));
  }
  const double pct = std::clamp(get->metrics[0].value, 0.0, 100.0);
  w.last = static_cast<Permille>(pct * 10 + 0.5);
  return Reading<Permille>::Of(*w.last);
}

// ---- MPS ----------------------------------------------------------------------------------

Status NvmlBackend::StartMps(DeviceIndex index, const MpsConfig& config) {
  std::string uuid;
  {
    std::lock_guard lock(mu_);
    GPUSLICE_ASSIGN_OR_RETURN(Device dev, Handle(index));
    char ubuf[kUuidBufferSize] = {};
    if (api_->uuid && api_->uuid(dev, ubuf, sizeof(ubuf)) == kSuccess) uuid = CString(ubuf, sizeof(ubuf));
    if (uuid.empty()) uuid = std::to_string(index.value());
    auto it = mps_configs_.find(index.value());
    if (it != mps_configs_.end() && it->second.pipe_dir != config.pipe_dir &&
        mps_.Probe(it->second.pipe_dir).state == MpsState::kRunning) {
      return FailedPrecondition(fmt::format("mps: device {} already runs a daemon on pipe dir {}",
                                            index.value(), it->second.pipe_dir));
    }
  }
  GPUSLICE_RETURN_IF_ERROR(mps_.Start(uuid, config));
  std::lock_guard lock(mu_);
  mps_configs_[index.value()] = config;
  return Status::Ok();
}

Status NvmlBackend::StopMps(DeviceIndex index) {
  std::string pipe;
  {
    std::lock_guard lock(mu_);
    GPUSLICE_RETURN_IF_ERROR(Handle(index).status());
    auto it = mps_configs_.find(index.value());
    if (it == mps_configs_.end()) return Status::Ok();
    pipe = it->second.pipe_dir;
  }
  GPUSLICE_RETURN_IF_ERROR(mps_.Stop(pipe));
  std::lock_guard lock(mu_);
  mps_configs_.erase(index.value());
  return Status::Ok();
}

Result<MpsStatus> NvmlBackend::GetMpsStatus(DeviceIndex index) {
  std::string pipe;
  {
    std::lock_guard lock(mu_);
    GPUSLICE_RETURN_IF_ERROR(Handle(index).status());
    auto it = mps_configs_.find(index.value());
    if (it == mps_configs_.end()) return MpsStatus{};
    pipe = it->second.pipe_dir;
  }
  return mps_.Probe(pipe);
}

}  // namespace gpuslice::devices
