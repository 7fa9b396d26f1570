// A stand-in libnvidia-ml for tests: exports the NVML symbols the nvml backend dlsym's, with
// the documented ABI (devices/nvml_abi.h), so the real dlopen path runs on machines without a
// driver. Built twice:
//   FAKE_NVML_R535: exports *RunningProcesses_v3 and nvmlDeviceGetConfComputeMemSizeInfo but not
//                   nvmlDeviceGetRunningProcessDetailList, and writes 32-byte process records —
//                   the early-R535 driver the backend must detect.
//   otherwise:      exports only *RunningProcesses_v2 (24-byte records): the fallback path.
// Two H100s; device 0 runs pids 1234 (1 GiB, 40% SM) and 5678 (2 GiB, idle); GPU utilisation
// samples of 60% every 1/6 s. Not thread-safe (tests call it from one thread).

#include <chrono>
#include <cstdio>
#include <cstring>

#include "devices/nvml_abi.h"

namespace nv = gpuslice::devices::nvml;

namespace {

struct FakeDevice {
  int index;
};
FakeDevice g_devices[2] = {{0}, {1}};
int g_init = 0;
unsigned long long g_frozen_us = 0;  // nonzero: the driver clock stands still (deterministic tests)

unsigned long long NowUs() {
  if (g_frozen_us != 0) return g_frozen_us;
  return static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
}

int IndexOf(nv::Device d);

// Device 1 is in MIG mode: a tiny model of GPU and compute instances (ids from 1 / 0).
struct FakeGi {
  bool used = false;
  unsigned id = 0, profile_id = 0, start = 0, size = 0;
  bool has_ci = false;
  unsigned ci_profile = 0;
};
FakeGi g_gis[8];
struct MigHandle {
  int gi_slot;
};
MigHandle g_mig_handles[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
// Profile enum -> (id, compute slices, memory slices, max instances, MB); enum 1 unsupported.
struct Prof {
  unsigned id, slices, mem_slices, count;
  unsigned long long mb;
};
const Prof kProfiles[3] = {{19, 1, 1, 7, 9856}, {0, 0, 0, 0, 0}, {9, 3, 4, 2, 40192}};

bool IsMigHandle(nv::Device d) {
  auto* p = reinterpret_cast<MigHandle*>(d);
  return p >= g_mig_handles && p < g_mig_handles + 8;
}

int IndexOf(nv::Device d) { return IsMigHandle(d) ? 1 : reinterpret_cast<FakeDevice*>(d)->index; }

struct Proc {
  unsigned pid;
  unsigned long long mem;
};
const Proc kProcs[] = {{1234, 1ULL << 30}, {5678, 2ULL << 30}};

nv::Return RunningProcesses(nv::Device dev, unsigned* count, void* out, std::size_t record) {
  const unsigned n = IndexOf(dev) == 0 ? 2 : 0;
  if (*count < n) {
    *count = n;
    return nv::kErrorInsufficientSize;
  }
  *count = n;
  for (unsigned i = 0; i < n; ++i) {
    unsigned char* p = static_cast<unsigned char*>(out) + i * record;
    nv::ProcessInfoR535 r{};
    r.pid = kProcs[i].pid;
    r.used_gpu_memory = kProcs[i].mem;
    r.gpu_instance_id = nv::kNoInstance;
    r.compute_instance_id = nv::kNoInstance;
    r.used_gpu_cc_protected_memory = 0;
    std::memcpy(p, &r, record);
  }
  return nv::kSuccess;
}

}  // namespace

extern "C" {

// Test hook (not an NVML symbol): freezes the stand-in driver's clock at `us` (0: run).
__attribute__((visibility("default"))) void gpuslice_fake_nvml_freeze(unsigned long long us) { g_frozen_us = us; }

__attribute__((visibility("default"))) nv::Return nvmlInit_v2() { ++g_init; return nv::kSuccess; }
__attribute__((visibility("default"))) nv::Return nvmlShutdown() { --g_init; return nv::kSuccess; }
__attribute__((visibility("default"))) const char* nvmlErrorString(nv::Return r) {
  switch (r) {
    case nv::kSuccess: return "Success";
    case nv::kErrorNotFound: return "Not Found";
    case nv::kErrorInvalidArgument: return "Invalid Argument";
    case nv::kErrorInsufficientSize: return "Insufficient Size";
    default: return "Unknown Error";
  }
}
__attribute__((visibility("default"))) nv::Return nvmlSystemGetDriverVersion(char* buf, unsigned len) {
#ifdef FAKE_NVML_R535
  std::snprintf(buf, len, "535.54.03");
#else
  std::snprintf(buf, len, "470.82.01");
#endif
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetCount_v2(unsigned* n) {
  if (g_init <= 0) return nv::kErrorUninitialized;
  *n = 2;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetHandleByIndex_v2(unsigned i, nv::Device* d) {
  if (i >= 2) return nv::kErrorInvalidArgument;
  *d = reinterpret_cast<nv::Device>(&g_devices[i]);
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetName(nv::Device, char* buf, unsigned len) {
  std::snprintf(buf, len, "NVIDIA H100 80GB HBM3");
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetUUID(nv::Device d, char* buf, unsigned len) {
  if (IsMigHandle(d)) {
    const FakeGi& g = g_gis[reinterpret_cast<MigHandle*>(d)->gi_slot];
    std::snprintf(buf, len, "MIG-fa4e0001-%04x-4000-8000-000000000000", g.id);
    return nv::kSuccess;
  }
  std::snprintf(buf, len, "GPU-fa4e0000-0000-4000-8000-00000000000%d", IndexOf(d));
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMemoryInfo_v2(nv::Device d, nv::MemoryV2* m) {
  if (m->version != nv::kMemoryV2Version) return 25;  // ARGUMENT_VERSION_MISMATCH
  m->total = 80ULL << 30;
  m->reserved = 512ULL << 20;
  m->used = IndexOf(d) == 0 ? 3ULL << 30 : 0;
  m->free = m->total - m->used - m->reserved;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetSamples(nv::Device d, int type, unsigned long long last,
                                                                       int* vtype, unsigned* count, nv::Sample* out) {
  if (type != nv::kSamplingGpuUtil && type != nv::kSamplingMemoryUtil) return nv::kErrorNotSupported;
  // Six samples over the last second, 1/6 s apart.
  const unsigned long long now = NowUs();
  nv::Sample buf[6];
  unsigned n = 0;
  for (int i = 5; i >= 0; --i) {
    const unsigned long long ts = now - static_cast<unsigned long long>(i) * 166'666;
    if (ts <= last) continue;
    buf[n].time_stamp = ts;
    buf[n].value.ui = IndexOf(d) == 0 ? (type == nv::kSamplingGpuUtil ? 60 : 20) : 0;
    ++n;
  }
  *vtype = nv::kValueUInt;
  if (n == 0) return nv::kErrorNotFound;
  if (out == nullptr) {
    *count = n;
    return nv::kSuccess;
  }
  if (*count < n) return nv::kErrorInsufficientSize;
  std::memcpy(out, buf, n * sizeof(nv::Sample));
  *count = n;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetProcessUtilization(
    nv::Device d, nv::ProcessUtilizationSample* out, unsigned* count, unsigned long long last) {
  const unsigned long long ts = NowUs() - 1000;
  if (IndexOf(d) != 0 || ts <= last) return nv::kErrorNotFound;
  if (out == nullptr || *count < 1) {
    *count = 1;
    return nv::kErrorInsufficientSize;
  }
  out[0] = {1234, ts, 40, 10, 0, 0};
  *count = 1;
  return nv::kSuccess;
}
#ifdef FAKE_NVML_R535
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetComputeRunningProcesses_v3(nv::Device d, unsigned* c,
                                                                                          void* out) {
  return RunningProcesses(d, c, out, sizeof(nv::ProcessInfoR535));
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetConfComputeMemSizeInfo(nv::Device, void*) {
  return nv::kErrorNotSupported;
}
#else
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetComputeRunningProcesses_v2(nv::Device d, unsigned* c,
                                                                                          void* out) {
  return RunningProcesses(d, c, out, sizeof(nv::ProcessInfoV2));
}
#endif
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetClockInfo(nv::Device, int type, unsigned* mhz) {
  *mhz = type == nv::kClockMem ? 2619 : 1980;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetPowerUsage(nv::Device, unsigned* mw) {
  *mw = 350000;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetTemperature(nv::Device, int, unsigned*) {
  return nv::kErrorNotSupported;  // e.g. a sensor the driver cannot read: must not become 0
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMigMode(nv::Device d, unsigned* cur, unsigned* pend) {
  *cur = IndexOf(d) == 1 ? nv::kMigEnable : nv::kMigDisable;
  *pend = *cur;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceSetMigMode(nv::Device d, unsigned mode, nv::Return* act) {
  *act = nv::kSuccess;
  return (IndexOf(d) == 1) == (mode == nv::kMigEnable) ? nv::kSuccess : nv::kErrorNotSupported;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetGpuInstanceProfileInfo(nv::Device d, unsigned p,
                                                                                      nv::GpuInstanceProfileInfo* info) {
  if (p >= 3) return nv::kErrorInvalidArgument;
  if (IndexOf(d) != 1 || kProfiles[p].count == 0) return nv::kErrorNotSupported;
  *info = {};
  info->id = kProfiles[p].id;
  info->slice_count = kProfiles[p].slices;
  info->instance_count = kProfiles[p].count;
  info->memory_size_mb = kProfiles[p].mb;
  return nv::kSuccess;
}
const Prof* ProfById(unsigned id) {
  for (const auto& p : kProfiles) {
    if (p.count > 0 && p.id == id) return &p;
  }
  return nullptr;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nv::Device, unsigned id, nv::GpuInstancePlacement* out, unsigned* count) {
  const Prof* p = ProfById(id);
  if (p == nullptr) return nv::kErrorInvalidArgument;
  unsigned n = 0;
  for (unsigned start = 0; start + p->mem_slices <= 8; start += p->mem_slices) {
    if (p->id == 19 && start == 7) break;  // 7 x 1g on an 8-slice layout
    if (out != nullptr && n < *count) out[n] = {start, p->mem_slices};
    ++n;
  }
  *count = n;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceCreateGpuInstanceWithPlacement(
    nv::Device d, unsigned id, const nv::GpuInstancePlacement* pl, nv::GpuInstance* out) {
  const Prof* p = ProfById(id);
  if (IndexOf(d) != 1 || p == nullptr || pl->size != p->mem_slices) return nv::kErrorInvalidArgument;
  int free_slot = -1;
  for (int i = 0; i < 8; ++i) {
    const FakeGi& g = g_gis[i];
    if (g.used && pl->start < g.start + g.size && g.start < pl->start + pl->size) return nv::kErrorInsufficientResources;
    if (!g.used && free_slot < 0) free_slot = i;
  }
  FakeGi& g = g_gis[free_slot];
  g = {true, static_cast<unsigned>(free_slot + 1), id, pl->start, pl->size, false, 0};
  *out = reinterpret_cast<nv::GpuInstance>(&g);
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetGpuInstances(nv::Device, unsigned id, nv::GpuInstance* out,
                                                                            unsigned* count) {
  unsigned n = 0;
  for (auto& g : g_gis) {
    if (g.used && g.profile_id == id && n < *count) out[n++] = reinterpret_cast<nv::GpuInstance>(&g);
  }
  *count = n;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetGpuInstanceById(nv::Device, unsigned id, nv::GpuInstance* out) {
  for (auto& g : g_gis) {
    if (g.used && g.id == id) {
      *out = reinterpret_cast<nv::GpuInstance>(&g);
      return nv::kSuccess;
    }
  }
  return nv::kErrorNotFound;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceGetInfo(nv::GpuInstance gi, nv::GpuInstanceInfo* info) {
  const FakeGi& g = *reinterpret_cast<FakeGi*>(gi);
  *info = {reinterpret_cast<nv::Device>(&g_devices[1]), g.id, g.profile_id, {g.start, g.size}};
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceDestroy(nv::GpuInstance gi) {
  FakeGi& g = *reinterpret_cast<FakeGi*>(gi);
  if (g.has_ci) return nv::kErrorInUse;  // the driver wants CIs gone first
  g = {};
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nv::GpuInstance gi, unsigned p, unsigned, nv::ComputeInstanceProfileInfo* info) {
  const Prof* gp = ProfById(reinterpret_cast<FakeGi*>(gi)->profile_id);
  if (p > 4) return nv::kErrorInvalidArgument;
  const unsigned slices[] = {1, 2, 3, 4, 7};
  if (slices[p] != gp->slices) return nv::kErrorNotSupported;  // full-size CIs only
  *info = {};
  info->id = p;
  info->slice_count = slices[p];
  info->instance_count = 1;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceCreateComputeInstance(nv::GpuInstance gi, unsigned p,
                                                                                       nv::ComputeInstance* out) {
  FakeGi& g = *reinterpret_cast<FakeGi*>(gi);
  if (g.has_ci) return nv::kErrorInsufficientResources;
  g.has_ci = true;
  g.ci_profile = p;
  *out = reinterpret_cast<nv::ComputeInstance>(&g);  // one CI per GI: the GI stands for it
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceGetComputeInstances(nv::GpuInstance gi, unsigned p,
                                                                                     nv::ComputeInstance* out,
                                                                                     unsigned* count) {
  FakeGi& g = *reinterpret_cast<FakeGi*>(gi);
  const bool match = g.has_ci && g.ci_profile == p && *count > 0;
  if (match) out[0] = reinterpret_cast<nv::ComputeInstance>(&g);
  *count = match ? 1 : 0;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceGetComputeInstanceById(nv::GpuInstance gi, unsigned id,
                                                                                        nv::ComputeInstance* out) {
  FakeGi& g = *reinterpret_cast<FakeGi*>(gi);
  if (!g.has_ci || id != 0) return nv::kErrorNotFound;
  *out = reinterpret_cast<nv::ComputeInstance>(&g);
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlComputeInstanceGetInfo_v2(nv::ComputeInstance ci,
                                                                               nv::ComputeInstanceInfo* info) {
  FakeGi& g = *reinterpret_cast<FakeGi*>(ci);
  *info = {reinterpret_cast<nv::Device>(&g_devices[1]), reinterpret_cast<nv::GpuInstance>(&g), 0, g.ci_profile,
           {0, g.size}};
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlComputeInstanceDestroy(nv::ComputeInstance ci) {
  reinterpret_cast<FakeGi*>(ci)->has_ci = false;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMaxMigDeviceCount(nv::Device d, unsigned* n) {
  *n = IndexOf(d) == 1 ? 7 : 0;
  return nv::kSuccess;
}
// MIG devices exist for GIs with a CI, in slot order (holes are normal in NVML too).
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMigDeviceHandleByIndex(nv::Device, unsigned i,
                                                                                      nv::Device* out) {
  if (i >= 7 || !g_gis[i].used || !g_gis[i].has_ci) return nv::kErrorNotFound;
  *out = reinterpret_cast<nv::Device>(&g_mig_handles[i]);
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetGpuInstanceId(nv::Device d, unsigned* id) {
  if (!IsMigHandle(d)) return nv::kErrorInvalidArgument;
  *id = g_gis[reinterpret_cast<MigHandle*>(d)->gi_slot].id;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetComputeInstanceId(nv::Device d, unsigned* id) {
  if (!IsMigHandle(d)) return nv::kErrorInvalidArgument;
  *id = 0;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMemoryInfo(nv::Device d, nv::Memory* m) {
  if (!IsMigHandle(d)) return nv::kErrorNotSupported;
  const FakeGi& g = g_gis[reinterpret_cast<MigHandle*>(d)->gi_slot];
  m->total = ProfById(g.profile_id)->mb << 20;
  m->used = 0;
  m->free = m->total;
  return nv::kSuccess;
}

}  // extern "C"
