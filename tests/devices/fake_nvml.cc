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

int IndexOf(nv::Device d) { return reinterpret_cast<FakeDevice*>(d)->index; }

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
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMigMode(nv::Device, unsigned* cur, unsigned* pend) {
  *cur = nv::kMigDisable;
  *pend = nv::kMigDisable;
  return nv::kSuccess;
}

}  // extern "C"
