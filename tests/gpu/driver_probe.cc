// gpu_driver_probe: prints, on a real driver, the behaviours gpuslice's NVML backend and memory
// cap assume, and checks the ones the code depends on (reference/nvml-cuda-abi-review.md). Part
// of tests/gpu/check.sh; builds everywhere (NVML and libcuda are dlopened), needs no CUDA toolkit.
//   gpu_driver_probe samples [--device 0]
//       nvmlDeviceGetSamples(GPU_UTILIZATION) with lastSeenTimeStamp = 0: the newest sample's
//       timestamp beside CLOCK_REALTIME, CLOCK_BOOTTIME and CLOCK_MONOTONIC; what a read from
//       "wall clock - 1 s" gets (the old code); then one second later a read from the newest
//       sample's timestamp (what gpuslice does) must return new samples.
//   gpu_driver_probe procutil --pid P [--device 0]
//       nvmlDeviceGetProcessUtilization from 0 while P runs kernels, then again from the newest
//       sample: counts of values > 100 and of entries older than asked for; P must have a sample
//       in range.
//   gpu_driver_probe procaddress [--expect-hooks]
//       for every entry point libgpuslice-cuda hooks: does cuGetProcAddress_v2's pointer equal
//       dlsym's export, and is it the same at the version it appeared and at 13000 (the cap
//       relies on that for programs that ask at a newer CUDA_VERSION). With --expect-hooks (run
//       under the interposer's LD_PRELOAD) every pointer must be inside libgpuslice-cuda.
//   gpu_driver_probe mig-two-ci [--device 0]
//       on a MIG-enabled device, creates a GPU instance with >= 2 compute slices and two
//       compute instances of the 1-slice profile through NvmlBackend: they must be two. Prints
//       SKIP (exit 0) without MIG mode, privileges or a free placement; never changes MIG mode.
// One "key=value" or "ok/FAIL/SKIP ..." line per fact. Exit 0 iff the checks passed.

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "devices/backend.h"
#include "devices/nvml.h"
#include "devices/nvml_abi.h"
#include "memcap/cuda_abi.h"

namespace nv = gpuslice::devices::nvml;

namespace {

std::map<std::string, std::string> Flags(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 < argc && argv[i + 1][0] != '-') {
      f[k] = argv[++i];
    } else {
      f[k] = "1";
    }
  }
  return f;
}
std::string Get(const std::map<std::string, std::string>& f, const std::string& k, const std::string& def) {
  auto it = f.find(k);
  return it == f.end() ? def : it->second;
}

unsigned long long ClockUs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1'000'000ULL + static_cast<unsigned long long>(ts.tv_nsec) / 1000;
}
long long Diff(unsigned long long a, unsigned long long b) { return static_cast<long long>(a - b); }

struct Nvml {
  void* lib = nullptr;
  nv::DeviceGetHandleByIndexFn handle = nullptr;
  nv::DeviceGetSamplesFn samples = nullptr;
  nv::DeviceGetProcessUtilizationFn proc_util = nullptr;
  nv::Device dev = nullptr;
};

bool OpenNvml(unsigned index, Nvml* n) {
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (n->lib == nullptr) {
    std::printf("FAIL no libnvidia-ml.so.1: %s\n", dlerror());
    return false;
  }
  auto init = reinterpret_cast<nv::InitFn>(dlsym(n->lib, "nvmlInit_v2"));
  n->handle = reinterpret_cast<nv::DeviceGetHandleByIndexFn>(dlsym(n->lib, "nvmlDeviceGetHandleByIndex_v2"));
  n->samples = reinterpret_cast<nv::DeviceGetSamplesFn>(dlsym(n->lib, "nvmlDeviceGetSamples"));
  n->proc_util = reinterpret_cast<nv::DeviceGetProcessUtilizationFn>(dlsym(n->lib, "nvmlDeviceGetProcessUtilization"));
  if (init == nullptr || n->handle == nullptr || init() != nv::kSuccess || n->handle(index, &n->dev) != nv::kSuccess) {
    std::printf("FAIL nvmlInit or device %u\n", index);
    return false;
  }
  return true;
}

// Reads GPU_UTILIZATION samples newer than `last`. Returns the NVML code; fills `out`.
nv::Return ReadSamples(const Nvml& n, unsigned long long last, std::vector<nv::Sample>* out) {
  int vtype = 0;
  unsigned count = 0;
  nv::Return r = n.samples(n.dev, nv::kSamplingGpuUtil, last, &vtype, &count, nullptr);
  if (r != nv::kSuccess && r != nv::kErrorInsufficientSize) return r;
  out->assign(count + 16, nv::Sample{});
  count = static_cast<unsigned>(out->size());
  r = n.samples(n.dev, nv::kSamplingGpuUtil, last, &vtype, &count, out->data());
  out->resize(r == nv::kSuccess ? std::min<std::size_t>(count, out->size()) : 0);
  return r;
}

int Samples(const std::map<std::string, std::string>& f) {
  Nvml n;
  if (!OpenNvml(static_cast<unsigned>(std::stoul(Get(f, "--device", "0"))), &n)) return 1;
  if (n.samples == nullptr) {
    std::printf("FAIL nvmlDeviceGetSamples not exported\n");
    return 1;
  }
  std::vector<nv::Sample> s;
  nv::Return r = ReadSamples(n, 0, &s);
  const unsigned long long wall = ClockUs(CLOCK_REALTIME), boot = ClockUs(CLOCK_BOOTTIME),
                           mono = ClockUs(CLOCK_MONOTONIC);
  if (r == nv::kErrorNotSupported) {
    std::printf("SKIP samples: NOT_SUPPORTED (MIG mode?)\n");
    return 0;
  }
  if (r != nv::kSuccess || s.empty()) {
    std::printf("FAIL samples: lastSeenTimeStamp=0 returned %d with %zu samples\n", r, s.size());
    return 1;
  }
  unsigned long long newest = 0, oldest = ~0ULL;
  for (const auto& x : s) {
    newest = std::max(newest, x.time_stamp);
    oldest = std::min(oldest, x.time_stamp);
  }
  std::printf("samples_from_0=%zu newest_ts=%llu oldest_ts=%llu span_s=%.1f\n", s.size(), newest, oldest,
              (newest - oldest) / 1e6);
  std::printf("wall_us=%llu boottime_us=%llu monotonic_us=%llu\n", wall, boot, mono);
  std::printf("newest_minus_wall_s=%.3f newest_minus_boottime_s=%.3f newest_minus_monotonic_s=%.3f\n",
              Diff(newest, wall) / 1e6, Diff(newest, boot) / 1e6, Diff(newest, mono) / 1e6);
  const char* clock = std::llabs(Diff(newest, wall)) < 60'000'000   ? "epoch"
                      : std::llabs(Diff(newest, boot)) < 60'000'000 ? "boottime"
                      : std::llabs(Diff(newest, mono)) < 60'000'000 ? "monotonic"
                                                                    : "unknown";
  std::printf("sample_clock=%s\n", clock);
  std::vector<nv::Sample> old_way;
  nv::Return r_old = ReadSamples(n, wall - 1'000'000, &old_way);
  std::printf("from_wall_minus_1s: rc=%d samples=%zu (the old code's first read)\n", r_old, old_way.size());
  sleep(1);
  std::vector<nv::Sample> next;
  nv::Return r_next = ReadSamples(n, newest, &next);
  bool newer = r_next == nv::kSuccess && !next.empty() &&
               std::all_of(next.begin(), next.end(), [&](const nv::Sample& x) { return x.time_stamp > newest; });
  std::printf("from_newest_after_1s: rc=%d samples=%zu all_newer=%d\n", r_next, next.size(), newer ? 1 : 0);
  if (!newer) {
    std::printf("FAIL samples: following the newest sample's timestamp gave no new samples\n");
    return 1;
  }
  std::printf("ok samples: clock=%s, gpuslice's reads (0, then the newest timestamp) get samples\n", clock);
  return 0;
}

int ProcUtil(const std::map<std::string, std::string>& f) {
  Nvml n;
  if (!OpenNvml(static_cast<unsigned>(std::stoul(Get(f, "--device", "0"))), &n)) return 1;
  const unsigned pid = static_cast<unsigned>(std::stoul(Get(f, "--pid", "0")));
  if (n.proc_util == nullptr) {
    std::printf("FAIL nvmlDeviceGetProcessUtilization not exported\n");
    return 1;
  }
  int rc = 0;
  bool pid_seen_valid = false;
  unsigned long long last = 0;
  for (int round = 0; round < 2; ++round) {
    unsigned count = 0;
    nv::Return r = n.proc_util(n.dev, nullptr, &count, last);
    if (r == nv::kErrorNotSupported) {
      std::printf("SKIP procutil: NOT_SUPPORTED (MIG mode?)\n");
      return 0;
    }
    std::vector<nv::ProcessUtilizationSample> buf(count + 16);
    count = static_cast<unsigned>(buf.size());
    if (r == nv::kSuccess || r == nv::kErrorInsufficientSize) r = n.proc_util(n.dev, buf.data(), &count, last);
    const unsigned long long wall = ClockUs(CLOCK_REALTIME);
    if (r != nv::kSuccess) {
      std::printf("procutil round=%d from=%llu rc=%d\n", round, last, r);
      sleep(1);
      continue;
    }
    buf.resize(std::min<std::size_t>(count, buf.size()));
    int over = 0, stale = 0;
    unsigned long long newest = last, oldest = ~0ULL;
    unsigned max_sm = 0, max_mem = 0;
    for (const auto& x : buf) {
      if (x.sm_util > 100 || x.mem_util > 100) ++over;
      if (x.time_stamp <= last) ++stale;
      max_sm = std::max(max_sm, x.sm_util);
      max_mem = std::max(max_mem, x.mem_util);
      oldest = std::min(oldest, x.time_stamp);
      if (x.sm_util <= 100 && x.mem_util <= 100) newest = std::max(newest, x.time_stamp);
      if (x.pid == pid && x.sm_util <= 100 && x.time_stamp > last) pid_seen_valid = true;
    }
    std::printf("procutil round=%d from=%llu samples=%zu over_100=%d older_than_asked=%d max_sm=%u max_mem=%u "
                "oldest_minus_wall_s=%.1f newest_minus_wall_s=%.1f\n",
                round, last, buf.size(), over, stale, max_sm, max_mem,
                buf.empty() ? 0.0 : Diff(oldest, wall) / 1e6, Diff(newest, wall) / 1e6);
    for (std::size_t i = 0; i < buf.size() && i < 8; ++i) {
      std::printf("  pid=%u ts=%llu sm=%u mem=%u enc=%u dec=%u\n", buf[i].pid, buf[i].time_stamp, buf[i].sm_util,
                  buf[i].mem_util, buf[i].enc_util, buf[i].dec_util);
    }
    last = newest;
    sleep(1);
  }
  if (pid != 0 && !pid_seen_valid) {
    std::printf("FAIL procutil: no in-range sample for the busy pid %u\n", pid);
    rc = 1;
  } else {
    std::printf("ok procutil: the busy pid has in-range samples (garbage and stale counts above)\n");
  }
  return rc;
}

struct Hooked {
  const char* base;
  int version;  // the version the ABI appeared (the runtime asks at it)
  cuuint64_t flags;
  const char* exported;
};
const Hooked kHooked[] = {
    {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
    {"cuMemAllocPitch", 3020, 0, "cuMemAllocPitch_v2"},
    {"cuMemAllocManaged", 6000, 0, "cuMemAllocManaged"},
    {"cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"},
    {"cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAllocAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 11020, 0, "cuMemAllocFromPoolAsync"},
    {"cuMemAllocFromPoolAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAllocFromPoolAsync_ptsz"},
    {"cuMemFree", 3020, 0, "cuMemFree_v2"},
    {"cuMemFreeAsync", 11020, 0, "cuMemFreeAsync"},
    {"cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemFreeAsync_ptsz"},
    {"cuMemCreate", 10020, 0, "cuMemCreate"},
    {"cuMemRelease", 10020, 0, "cuMemRelease"},
    {"cuArrayCreate", 3020, 0, "cuArrayCreate_v2"},
    {"cuArray3DCreate", 3020, 0, "cuArray3DCreate_v2"},
    {"cuArrayDestroy", 2000, 0, "cuArrayDestroy"},
    {"cuMipmappedArrayCreate", 5000, 0, "cuMipmappedArrayCreate"},
    {"cuMipmappedArrayDestroy", 5000, 0, "cuMipmappedArrayDestroy"},
    {"cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2"},
    {"cuDeviceTotalMem", 3020, 0, "cuDeviceTotalMem_v2"},
    {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
};

std::string Where(void* p) {
  Dl_info info{};
  if (p == nullptr || dladdr(p, &info) == 0) return "?";
  std::string lib = info.dli_fname ? info.dli_fname : "?";
  lib = lib.substr(lib.rfind('/') == std::string::npos ? 0 : lib.rfind('/') + 1);
  return lib + ":" + (info.dli_sname ? info.dli_sname : "(internal)");
}

int ProcAddress(const std::map<std::string, std::string>& f) {
  const bool expect_hooks = f.count("--expect-hooks") > 0;
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (cuda == nullptr) {
    std::printf("FAIL no libcuda.so.1: %s\n", dlerror());
    return 1;
  }
  using InitFn = CUresult (*)(unsigned);
  auto init = reinterpret_cast<InitFn>(dlsym(cuda, "cuInit"));
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v2>(dlsym(cuda, "cuGetProcAddress_v2"));
  if (init == nullptr || gpa == nullptr || init(0) != CUDA_SUCCESS) {
    std::printf("FAIL cuInit or cuGetProcAddress_v2\n");
    return 1;
  }
  int equal = 0, differ = 0, unstable = 0, not_hooked = 0, rc = 0;
  for (const auto& h : kHooked) {
    void* at_since = nullptr;
    void* at_13000 = nullptr;
    CUdriverProcAddressQueryResult st1 = -1, st2 = -1;
    CUresult r1 = gpa(h.base, &at_since, h.version, h.flags, &st1);
    CUresult r2 = gpa(h.base, &at_13000, 13000, h.flags, &st2);
    if (r2 != CUDA_SUCCESS || st2 != CU_GET_PROC_ADDRESS_SUCCESS) at_13000 = nullptr;
    void* exported = dlsym(cuda, h.exported);
    const bool same = at_since != nullptr && at_since == exported;
    const bool stable = at_since == at_13000;
    equal += same ? 1 : 0;
    differ += same ? 0 : 1;
    unstable += stable ? 0 : 1;
    std::printf("procaddress %s v%d flags=%llu: rc=%d/%d %s export %s (%s) at_13000=%s\n", h.base, h.version,
                static_cast<unsigned long long>(h.flags), r1, st1, same ? "==" : "!=", h.exported,
                Where(at_since).c_str(), stable ? "same" : ("DIFFERENT " + Where(at_13000)).c_str());
    if (expect_hooks && Where(at_since).find("libgpuslice-cuda") == std::string::npos) ++not_hooked;
  }
  std::printf("procaddress_equal_export=%d procaddress_differ=%d unstable_across_versions=%d\n", equal, differ,
              unstable);
  if (unstable > 0) {
    std::printf("FAIL procaddress: the same ABI gives different pointers at different versions; the "
                "interposer would pass requests above 13000 through uncapped\n");
    rc = 1;
  }
  if (expect_hooks) {
    if (not_hooked > 0) {
      std::printf("FAIL procaddress: %d entry points reach the driver without the interposer's hook\n", not_hooked);
      rc = 1;
    } else {
      std::printf("ok procaddress: every hooked entry point resolves to libgpuslice-cuda\n");
    }
  }
  if (rc == 0) std::printf("ok procaddress: %d of %zu pointers are the exports\n", equal, std::size(kHooked));
  return rc;
}

int MigTwoCi(const std::map<std::string, std::string>& f) {
  namespace dv = gpuslice::devices;
  const auto index = gpuslice::DeviceIndex(static_cast<std::uint32_t>(std::stoul(Get(f, "--device", "0"))));
  dv::BackendOptions o;
  auto b = dv::NvmlBackend::Open(o);
  if (!b.ok()) {
    std::printf("FAIL mig: %s\n", b.status().ToString().c_str());
    return 1;
  }
  auto devs = (*b)->ListDevices();
  if (!devs.ok()) {
    std::printf("FAIL mig: %s\n", devs.status().ToString().c_str());
    return 1;
  }
  const dv::DeviceInfo* d = nullptr;
  for (const auto& x : *devs) {
    if (x.index == index) d = &x;
  }
  if (d == nullptr || d->mig_current != dv::MigMode::kEnabled || d->model == nullptr) {
    std::printf("SKIP mig-two-ci: MIG mode is not enabled on device %u (not changed here)\n", index.value());
    return 0;
  }
  for (const auto& p : d->model->mig_profiles) {
    if (p.compute_slices < 2 || p.media_extensions) continue;
    for (int start : p.placement_starts) {
      auto gi = (*b)->CreateGpuInstance(index, p.id, start);
      if (!gi.ok()) {
        if (gi.status().code() == gpuslice::StatusCode::kPermissionDenied) {
          std::printf("SKIP mig-two-ci: %s (needs root)\n", gi.status().ToString().c_str());
          return 0;
        }
        continue;
      }
      if (!gi->compute_instances.empty()) continue;  // someone else's: leave it alone
      auto a = (*b)->CreateComputeInstance(index, gi->id, 0);
      auto c = (*b)->CreateComputeInstance(index, gi->id, 0);
      int rc = 0;
      if (!a.ok() || !c.ok()) {
        std::printf("FAIL mig-two-ci: %s / %s\n", a.status().ToString().c_str(), c.status().ToString().c_str());
        rc = 1;
      } else if (a->id == c->id || a->uuid == c->uuid) {
        std::printf("FAIL mig-two-ci: both calls returned CI %u (%s)\n", a->id.value(), a->uuid.c_str());
        rc = 1;
      } else {
        std::printf("ok mig-two-ci: GI %u (profile %d at %d) holds CIs %u (%s) and %u (%s)\n", gi->id.value(), p.id,
                    start, a->id.value(), a->uuid.c_str(), c->id.value(), c->uuid.c_str());
      }
      auto st = (*b)->DestroyGpuInstance(index, gi->id);
      if (!st.ok()) std::printf("FAIL mig-two-ci: cleanup: %s\n", st.ToString().c_str());
      return st.ok() ? rc : 1;
    }
  }
  std::printf("SKIP mig-two-ci: no free placement for a GPU instance with 2+ compute slices\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_driver_probe samples|procutil|procaddress|mig-two-ci [flags]\n");
    return 2;
  }
  const std::string cmd = argv[1];
  auto f = Flags(argc, argv);
  if (cmd == "samples") return Samples(f);
  if (cmd == "procutil") return ProcUtil(f);
  if (cmd == "procaddress") return ProcAddress(f);
  if (cmd == "mig-two-ci") return MigTwoCi(f);
  std::fprintf(stderr, "unknown command %s\n", cmd.c_str());
  return 2;
}
