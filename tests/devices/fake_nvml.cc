// A stand-in libnvidia-ml for tests: exports the NVML symbols the nvml backend dlsym's, with
// the documented ABI (devices/nvml_abi.h), so the real dlopen path runs on machines without a
// driver. It behaves like real drivers where they are less kind than the header
// (docs: reference/nvml-cuda-abi-review.md), so code that trusts the header fails here:
//   * nvmlDeviceGetSamples timestamps are on a CLOCK_BOOTTIME-like clock, not the epoch, and
//     with lastSeenTimeStamp = 0 the whole buffer (minutes of history) comes back; one sample
//     holds an impossible value (250 %).
//   * nvmlDeviceGetProcessUtilization (epoch µs) always returns a stale entry, older than asked
//     for, and an entry with an impossible SM value (nvtop#110).
//   * compute-instance profile ids are not their indexes (a profile sits at index 0 ahead of
//     the 1-slice one, as a newer driver may add); a GPU instance holds several compute
//     instances; a GPU-instance profile sits at index 0x13, past the 0x12 of today's header.
//   * MIG devices report memory through _v2 (used without reserved) and v1 (used = reserved +
//     allocated), like the device rows.
// Built three times:
//   FAKE_NVML_R535:  exports *RunningProcesses_v3 and nvmlDeviceGetConfComputeMemSizeInfo but not
//                    nvmlDeviceGetRunningProcessDetailList, and writes 32-byte process records —
//                    the early-R535 driver.
//   + FAKE_NVML_DETAIL_LIST: also exports nvmlDeviceGetRunningProcessDetailList (so the symbols
//                    say "24-byte records") yet still writes 32 bytes: only measuring tells.
//   otherwise:       exports only *RunningProcesses_v2 (24-byte records): the fallback path.
//   + FAKE_NVML_MEMORY_LIMITS (with the last): an r615 driver with memory partitioning
//                    (nvmlDeviceSet/GetMemoryLimits_v1) on device 0 (device 1 is in MIG mode).
// Two H100s; device 0 runs pids 1234 (1 GiB, 40% SM) and 5678 (2 GiB, idle); GPU utilisation
// samples of 60% every 1/6 s over the last second. Device 1 is in MIG mode. Not thread-safe
// (tests call it from one thread).

#include <time.h>

#include <cstdio>
#include <cstdlib>
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

unsigned long long ClockUs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1'000'000ULL + static_cast<unsigned long long>(ts.tv_nsec) / 1000;
}
// The driver's sample clock: µs since boot, as reported for real drivers (not the epoch).
unsigned long long BootUs() { return g_frozen_us != 0 ? g_frozen_us : ClockUs(CLOCK_BOOTTIME); }
// Per-process samples are stamped in epoch µs (nvtop#110 traces): the boot clock moved to the
// epoch by the offset measured at load, so freezing one freezes both.
const unsigned long long g_epoch_minus_boot = ClockUs(CLOCK_REALTIME) - ClockUs(CLOCK_BOOTTIME);
unsigned long long EpochUs() { return BootUs() + g_epoch_minus_boot; }

// ---- MIG model (device 1) ------------------------------------------------------------------
constexpr int kGiSlots = 8, kCiSlots = 8, kMigHandles = 7;
struct FakeCi {
  bool used = false;
  int gi_slot = 0;
  unsigned id = 0, profile_id = 0, start = 0, slices = 0;
  int handle = -1;  // its MIG device handle slot
};
struct FakeGi {
  bool used = false;
  unsigned id = 0, profile_id = 0, start = 0, size = 0, slices = 0;
  FakeCi cis[kCiSlots];
};
FakeGi g_gis[kGiSlots];
struct MigHandle {
  bool used = false;
  int gi_slot = 0, ci_slot = 0;
};
MigHandle g_mig_handles[kMigHandles];

// GPU-instance profiles by index: (index, id, compute slices, memory slices, max instances, MB).
// Other indexes below kGiIndexEnd are NOT_SUPPORTED; index 0x13 is past today's header's 0x12.
struct Prof {
  unsigned index, id, slices, mem_slices, count;
  unsigned long long mb;
};
const Prof kProfiles[] = {{0, 19, 1, 1, 7, 9856}, {2, 9, 3, 4, 2, 40192}, {0x13, 15, 2, 2, 4, 19968}};
constexpr unsigned kGiIndexEnd = 0x14;
// Compute-instance profiles by index: (id, compute slices). The ids are not the indexes.
struct CiProf {
  unsigned id, slices;
};
const CiProf kCiProfiles[] = {{7, 1}, {0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 7}};

bool IsMigHandle(nv::Device d) {
  auto* p = reinterpret_cast<MigHandle*>(d);
  return p >= g_mig_handles && p < g_mig_handles + kMigHandles;
}
const MigHandle& Mig(nv::Device d) { return *reinterpret_cast<MigHandle*>(d); }
int IndexOf(nv::Device d) { return IsMigHandle(d) ? 1 : reinterpret_cast<FakeDevice*>(d)->index; }
FakeGi& Gi(nv::GpuInstance gi) { return *reinterpret_cast<FakeGi*>(gi); }
FakeCi& Ci(nv::ComputeInstance ci) { return *reinterpret_cast<FakeCi*>(ci); }

const Prof* ProfById(unsigned id) {
  for (const auto& p : kProfiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}
const CiProf* CiProfById(unsigned id) {
  for (const auto& p : kCiProfiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}
unsigned UsedSlices(const FakeGi& g) {
  unsigned n = 0;
  for (const auto& c : g.cis) n += c.used ? c.slices : 0;
  return n;
}
bool HasCi(const FakeGi& g) { return UsedSlices(g) > 0; }

// ---- processes ---------------------------------------------------------------------------
struct Proc {
  unsigned pid;
  unsigned long long mem;
};
const Proc kProcs[] = {{1234, 1ULL << 30}, {5678, 2ULL << 30}};

nv::Return RunningProcesses(nv::Device dev, unsigned* count, void* out, std::size_t record) {
  const unsigned n = !IsMigHandle(dev) && IndexOf(dev) == 0 ? 2 : 0;
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

// Test hooks (not NVML symbols): freeze the stand-in driver's clocks at boot-clock µs `us`
// (0: run), or at the boot clock's current reading.
__attribute__((visibility("default"))) void gpuslice_fake_nvml_freeze(unsigned long long us) { g_frozen_us = us; }
__attribute__((visibility("default"))) void gpuslice_fake_nvml_freeze_now() {
  g_frozen_us = ClockUs(CLOCK_BOOTTIME);
}

__attribute__((visibility("default"))) nv::Return nvmlInit_v2() { ++g_init; return nv::kSuccess; }
__attribute__((visibility("default"))) nv::Return nvmlShutdown() { --g_init; return nv::kSuccess; }
__attribute__((visibility("default"))) const char* nvmlErrorString(nv::Return r) {
  switch (r) {
    case nv::kSuccess: return "Success";
    case nv::kErrorNotFound: return "Not Found";
    case nv::kErrorInvalidArgument: return "Invalid Argument";
    case nv::kErrorInsufficientSize: return "Insufficient Size";
    case nv::kErrorInsufficientResources: return "Insufficient Resources";
    default: return "Unknown Error";
  }
}
__attribute__((visibility("default"))) nv::Return nvmlSystemGetDriverVersion(char* buf, unsigned len) {
#if defined(FAKE_NVML_MEMORY_LIMITS)
  std::snprintf(buf, len, "615.20.01");
#elif defined(FAKE_NVML_R535) && defined(FAKE_NVML_DETAIL_LIST)
  std::snprintf(buf, len, "535.43.02");
#elif defined(FAKE_NVML_R535)
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
    const FakeGi& g = g_gis[Mig(d).gi_slot];
    std::snprintf(buf, len, "MIG-fa4e0001-%04x-4%03x-8000-000000000000", g.id, g.cis[Mig(d).ci_slot].id);
    return nv::kSuccess;
  }
  std::snprintf(buf, len, "GPU-fa4e0000-0000-4000-8000-00000000000%d", IndexOf(d));
  return nv::kSuccess;
}
// MIG devices: 1 GiB allocated and 256 MiB reserved once a GI has a compute instance.
constexpr unsigned long long kMigAllocated = 1ULL << 30, kMigReserved = 256ULL << 20;
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMemoryInfo_v2(nv::Device d, nv::MemoryV2* m) {
  if (m->version != nv::kMemoryV2Version) return 25;  // ARGUMENT_VERSION_MISMATCH
  if (IsMigHandle(d)) {
    const FakeGi& g = g_gis[Mig(d).gi_slot];
    m->total = ProfById(g.profile_id)->mb << 20;
    m->reserved = kMigReserved;
    m->used = kMigAllocated;  // v2: without the reserved memory
    m->free = m->total - m->used - m->reserved;
    return nv::kSuccess;
  }
  m->total = 80ULL << 30;
  m->reserved = 512ULL << 20;
  m->used = IndexOf(d) == 0 ? 3ULL << 30 : 0;
  m->free = m->total - m->used - m->reserved;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMemoryInfo(nv::Device d, nv::Memory* m) {
  if (!IsMigHandle(d)) return nv::kErrorNotSupported;
  const FakeGi& g = g_gis[Mig(d).gi_slot];
  m->total = ProfById(g.profile_id)->mb << 20;
  m->used = kMigAllocated + kMigReserved;  // v1: "sum of reserved and allocated"
  m->free = m->total - m->used;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetSamples(nv::Device d, int type, unsigned long long last,
                                                                       int* vtype, unsigned* count, nv::Sample* out) {
  if (type != nv::kSamplingGpuUtil && type != nv::kSamplingMemoryUtil) return nv::kErrorNotSupported;
  if (IsMigHandle(d)) return nv::kErrorNotSupported;
  // The driver's buffer: the last second at the current load (six samples, 1/6 s apart), 14
  // older samples of an idle past, and one impossible 250 % reading in between.
  const unsigned long long now = BootUs();
  const unsigned busy = IndexOf(d) == 0 ? (type == nv::kSamplingGpuUtil ? 60 : 20) : 0;
  nv::Sample all[21];
  unsigned total = 0;
  for (unsigned k = 0; k < 20; ++k) {
    const unsigned long long age = k < 6 ? k * 166'666ULL : 1'000'000ULL + (k - 6) * 166'666ULL;
    all[total].time_stamp = now - age;
    all[total].value.ui = k < 6 ? busy : 10;
    ++total;
  }
  all[total].time_stamp = now - 83'333;
  all[total].value.ui = 250;
  ++total;
  nv::Sample buf[21];
  unsigned n = 0;
  for (unsigned k = 0; k < total; ++k) {
    if (all[k].time_stamp > last) buf[n++] = all[k];
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
  if (IsMigHandle(d) || IndexOf(d) != 0) return nv::kErrorNotFound;
  const unsigned long long now = EpochUs();
  nv::ProcessUtilizationSample buf[3];
  unsigned n = 0;
  if (now - 1000 > last) buf[n++] = {1234, now - 1000, 40, 10, 0, 0};
  buf[n++] = {1234, now - 3'600'000'000ULL, 90, 90, 0, 0};  // stale: returned whatever `last` says
  if (now - 500 > last) buf[n++] = {5678, now - 500, 4000, 7, 0, 0};  // impossible SM value
  if (out == nullptr || *count < n) {
    *count = n;
    return nv::kErrorInsufficientSize;
  }
  std::memcpy(out, buf, n * sizeof(buf[0]));
  *count = n;
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
#ifdef FAKE_NVML_DETAIL_LIST
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetRunningProcessDetailList(nv::Device, void*) {
  return nv::kErrorNotSupported;
}
#endif
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
  if (p >= kGiIndexEnd) return nv::kErrorInvalidArgument;
  const Prof* prof = nullptr;
  for (const auto& k : kProfiles) {
    if (k.index == p) prof = &k;
  }
  if (IndexOf(d) != 1 || prof == nullptr) return nv::kErrorNotSupported;
  *info = {};
  info->id = prof->id;
  info->slice_count = prof->slices;
  info->instance_count = prof->count;
  info->memory_size_mb = prof->mb;
  return nv::kSuccess;
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
  for (int i = 0; i < kGiSlots; ++i) {
    const FakeGi& g = g_gis[i];
    if (g.used && pl->start < g.start + g.size && g.start < pl->start + pl->size) return nv::kErrorInsufficientResources;
    if (!g.used && free_slot < 0) free_slot = i;
  }
  if (free_slot < 0) return nv::kErrorInsufficientResources;
  FakeGi& g = g_gis[free_slot];
  g = FakeGi{};
  g.used = true;
  g.id = static_cast<unsigned>(free_slot + 1);
  g.profile_id = id;
  g.start = pl->start;
  g.size = pl->size;
  g.slices = p->slices;
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
  const FakeGi& g = Gi(gi);
  *info = {reinterpret_cast<nv::Device>(&g_devices[1]), g.id, g.profile_id, {g.start, g.size}};
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceDestroy(nv::GpuInstance gi) {
  FakeGi& g = Gi(gi);
  if (HasCi(g)) return nv::kErrorInUse;  // the driver wants CIs gone first
  g = FakeGi{};
  return nv::kSuccess;
}
// `p` is a profile index (NVML_COMPUTE_INSTANCE_PROFILE_*); info->id is the profile id.
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nv::GpuInstance gi, unsigned p, unsigned, nv::ComputeInstanceProfileInfo* info) {
  if (p >= sizeof(kCiProfiles) / sizeof(kCiProfiles[0])) return nv::kErrorInvalidArgument;
  const FakeGi& g = Gi(gi);
  if (kCiProfiles[p].slices > g.slices) return nv::kErrorNotSupported;
  *info = {};
  info->id = kCiProfiles[p].id;
  info->slice_count = kCiProfiles[p].slices;
  info->instance_count = g.slices / kCiProfiles[p].slices;
  return nv::kSuccess;
}
// Takes a profile id. Several compute instances share a GPU instance, up to its slices.
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceCreateComputeInstance(nv::GpuInstance gi, unsigned id,
                                                                                       nv::ComputeInstance* out) {
  FakeGi& g = Gi(gi);
  const CiProf* p = CiProfById(id);
  if (p == nullptr || p->slices > g.slices) return nv::kErrorInvalidArgument;
  if (UsedSlices(g) + p->slices > g.slices) return nv::kErrorInsufficientResources;
  int slot = -1, handle = -1;
  for (int i = 0; i < kCiSlots && slot < 0; ++i) {
    if (!g.cis[i].used) slot = i;
  }
  for (int i = 0; i < kMigHandles && handle < 0; ++i) {
    if (!g_mig_handles[i].used) handle = i;
  }
  if (slot < 0 || handle < 0) return nv::kErrorInsufficientResources;
  unsigned ci_id = 0;  // the smallest id not in use in this GI
  for (bool taken = true; taken; ) {
    taken = false;
    for (const auto& c : g.cis) {
      if (c.used && c.id == ci_id) taken = true;
    }
    if (taken) ++ci_id;
  }
  const int gi_slot = static_cast<int>(&g - g_gis);
  FakeCi& c = g.cis[slot];
  c = {true, gi_slot, ci_id, id, UsedSlices(g), p->slices, handle};
  g_mig_handles[handle] = {true, gi_slot, slot};
  *out = reinterpret_cast<nv::ComputeInstance>(&c);
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceGetComputeInstances(nv::GpuInstance gi, unsigned id,
                                                                                     nv::ComputeInstance* out,
                                                                                     unsigned* count) {
  unsigned n = 0;
  for (auto& c : Gi(gi).cis) {
    if (c.used && c.profile_id == id && n < *count) out[n++] = reinterpret_cast<nv::ComputeInstance>(&c);
  }
  *count = n;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlGpuInstanceGetComputeInstanceById(nv::GpuInstance gi, unsigned id,
                                                                                        nv::ComputeInstance* out) {
  for (auto& c : Gi(gi).cis) {
    if (c.used && c.id == id) {
      *out = reinterpret_cast<nv::ComputeInstance>(&c);
      return nv::kSuccess;
    }
  }
  return nv::kErrorNotFound;
}
__attribute__((visibility("default"))) nv::Return nvmlComputeInstanceGetInfo_v2(nv::ComputeInstance ci,
                                                                               nv::ComputeInstanceInfo* info) {
  const FakeCi& c = Ci(ci);
  *info = {reinterpret_cast<nv::Device>(&g_devices[1]), reinterpret_cast<nv::GpuInstance>(&g_gis[c.gi_slot]), c.id,
           c.profile_id, {c.start, c.slices}};
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlComputeInstanceDestroy(nv::ComputeInstance ci) {
  FakeCi& c = Ci(ci);
  if (c.handle >= 0) g_mig_handles[c.handle] = MigHandle{};
  c = FakeCi{};
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMaxMigDeviceCount(nv::Device d, unsigned* n) {
  *n = IndexOf(d) == 1 ? kMigHandles : 0;
  return nv::kSuccess;
}
// One MIG device per compute instance, in handle-slot order (holes are normal in NVML too).
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMigDeviceHandleByIndex(nv::Device, unsigned i,
                                                                                      nv::Device* out) {
  if (i >= static_cast<unsigned>(kMigHandles) || !g_mig_handles[i].used) return nv::kErrorNotFound;
  *out = reinterpret_cast<nv::Device>(&g_mig_handles[i]);
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetGpuInstanceId(nv::Device d, unsigned* id) {
  if (!IsMigHandle(d)) return nv::kErrorInvalidArgument;
  *id = g_gis[Mig(d).gi_slot].id;
  return nv::kSuccess;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetComputeInstanceId(nv::Device d, unsigned* id) {
  if (!IsMigHandle(d)) return nv::kErrorInvalidArgument;
  *id = g_gis[Mig(d).gi_slot].cis[Mig(d).ci_slot].id;
  return nv::kSuccess;
}

#ifdef FAKE_NVML_MEMORY_LIMITS
// r615 memory partitioning: limits per (device, cgroup directory), read back by the getter.
// GPUSLICE_FAKE_NVML_DROP_LIMITS=1 makes the driver accept a limit and keep another (as a driver
// reading the struct with another layout would): the backend must notice on the read-back.
namespace {
struct Limit {
  int device = -1;
  char name_space[256] = {};
  unsigned long long soft = 0, hard = 0;
};
Limit g_limits[16];
}  // namespace
__attribute__((visibility("default"))) nv::Return nvmlDeviceSetMemoryLimits_v1(nv::Device d, nv::SetMemoryLimits* l) {
  if (l == nullptr || l->name_space == nullptr || l->name_space[0] != '/') return nv::kErrorInvalidArgument;
  if (IsMigHandle(d) || IndexOf(d) == 1) return nv::kErrorNotSupported;  // MIG handles and MIG mode
  const char* drop = std::getenv("GPUSLICE_FAKE_NVML_DROP_LIMITS");
  for (Limit& x : g_limits) {
    if (x.device >= 0 && (x.device != IndexOf(d) || std::strcmp(x.name_space, l->name_space) != 0)) continue;
    x.device = IndexOf(d);
    std::snprintf(x.name_space, sizeof(x.name_space), "%s", l->name_space);
    x.soft = l->soft_limit;
    x.hard = drop != nullptr && drop[0] == '1' ? nv::kDeviceMemoryLimitMax : l->hard_limit;
    return nv::kSuccess;
  }
  return nv::kErrorInsufficientResources;
}
__attribute__((visibility("default"))) nv::Return nvmlDeviceGetMemoryLimits_v1(nv::Device d, nv::GetMemoryLimits* l) {
  if (l == nullptr || l->name_space == nullptr) return nv::kErrorInvalidArgument;
  for (const Limit& x : g_limits) {
    if (x.device != IndexOf(d) || std::strcmp(x.name_space, l->name_space) != 0) continue;
    l->soft_limit = x.soft;
    l->hard_limit = x.hard;
    l->current_used = 0;
    return nv::kSuccess;
  }
  return nv::kErrorNotFound;
}
#endif

}  // extern "C"
