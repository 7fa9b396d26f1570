// cap_probe: the memory cap of a gpuslice slice against every way CUDA programs take device
// memory, on a real GPU (tests/gpu/check.sh; built by tests/gpu/stage.sh with nvcc, static
// cudart, so it needs only the driver). Built twice: as is, and with the per-thread default
// stream (cap_probe_ptsz), which reaches the driver's _ptsz entry points.
//
//   cap_probe info                  driver and runtime versions, device, cudaMemGetInfo
//   cap_probe context SECONDS       creates the CUDA context, prints its pid, then waits (the
//                                   caller reads the process's memory with nvidia-smi: the
//                                   per-process context overhead)
//   cap_probe fill API CHUNK_MIB    allocates CHUNK_MIB chunks through API until refused:
//                                     malloc   cudaMalloc
//                                     driver   cuMemAlloc through cudaGetDriverEntryPointByVersion
//                                     async    cudaMallocAsync (default pool)
//                                     pool     cudaMallocFromPoolAsync from a pool created here with
//                                              its release threshold set to UINT64_MAX
//                                     vmm      cuMemCreate + cuMemAddressReserve + cuMemMap
//                                              (PyTorch's expandable segments)
//                                     managed  cudaMallocManaged
//                                     pitch    cudaMallocPitch (rows of CHUNK_MIB)
//                                     graph    memory allocation nodes of a CUDA graph, launched
//                                   Passes when the refusal is an out-of-memory error, at or below
//                                   the cap (GPUSLICE_MEMCAP_BYTES) and within two chunks and the
//                                   context charge of it (and of CAP_PROBE_OTHERS_BYTES, what other
//                                   processes of the slice hold), cudaMemGetInfo's total is the cap, and
//                                   after freeing a kernel still runs. Never asks for more than
//                                   twice the cap (a broken cap must not fill the card). With
//                                   CAP_PROBE_HOLD_SECONDS it keeps what it got that long first.
//   cap_probe hold MIB SECONDS      holds MIB and runs a checked kernel in a loop (a neighbour)
//   cap_probe exec MIB              allocates MIB, then execs `fill malloc 64`: the new program
//                                   must get the whole cap, not the cap less the old image's MIB
//   cap_probe pool-release          a pool told to keep everything (threshold UINT64_MAX) must
//                                   give back what was freed at the next synchronisation
// Every line is "key=value" or "ok ..." / "FAIL ..." / "SKIP ..."; exit 0 ok, 1 failed, 2 usage,
// 3 skipped.

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace {

constexpr size_t kMiB = 1ull << 20;
constexpr int kMaxBlocks = 4096;

long long EnvBytes(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoll(v) : 0;
}

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__global__ void AddOne(int* data, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) data[i] += 1;
}

// Runs AddOne `rounds` times over n ints of `dev` and checks every element.
bool Compute(int* dev, size_t n, int rounds) {
  if (cudaMemset(dev, 0, n * sizeof(int)) != cudaSuccess) return false;
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  for (int r = 0; r < rounds; ++r) AddOne<<<blocks, 256>>>(dev, n);
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  int* host = static_cast<int*>(std::malloc(n * sizeof(int)));
  if (host == nullptr) return false;
  bool ok = cudaMemcpy(host, dev, n * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  for (size_t i = 0; ok && i < n; ++i) ok = host[i] == rounds;
  std::free(host);
  return ok;
}

// A driver entry point as the CUDA 12.5+ runtime hands it out (the path cudaGetDriverEntryPoint
// takes in frameworks): under the interposer it must be the hook.
template <typename F>
F Entry(const char* name, int version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<F>(p);
}

int Info() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("driver_cuda=%d runtime_cuda=%d\n", driver, runtime);
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("FAIL info: no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  std::printf("name=%s sm=%d.%d sms=%d total_global=%zu\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem);
  std::printf("memgetinfo_free=%zu memgetinfo_total=%zu\n", free_b, total_b);
  std::printf("ok info\n");
  return 0;
}

int Context(int seconds) {
  if (cudaFree(nullptr) != cudaSuccess) {
    std::printf("FAIL context: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  std::printf("pid=%d ready=1\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  sleep(static_cast<unsigned>(seconds));
  std::printf("ok context\n");
  return 0;
}

struct Fill {
  void* blocks[kMaxBlocks];
  int count = 0;
  long long allocated = 0;
  const char* error = "none";
  bool oom = false;
};

// The allocation APIs behind `fill`, each: allocate one chunk (true) or say why not.
struct Api {
  const char* name;
  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr;
  PFN_cuMemAlloc_v3020 cu_alloc = nullptr;
  PFN_cuMemFree_v3020 cu_free = nullptr;
  PFN_cuMemCreate_v10020 cu_create = nullptr;
  PFN_cuMemRelease_v10020 cu_release = nullptr;
  PFN_cuMemAddressReserve_v10020 cu_reserve = nullptr;
  PFN_cuMemMap_v10020 cu_map = nullptr;
  PFN_cuMemUnmap_v10020 cu_unmap = nullptr;
  PFN_cuMemAddressFree_v10020 cu_addr_free = nullptr;
  size_t granularity = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUmemGenericAllocationHandle handles[kMaxBlocks];
};

bool Init(Api& a) {
  if (std::strcmp(a.name, "async") == 0 || std::strcmp(a.name, "pool") == 0 || std::strcmp(a.name, "graph") == 0) {
    if (cudaStreamCreate(&a.stream) != cudaSuccess) return false;
  }
  if (std::strcmp(a.name, "pool") == 0) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    if (cudaMemPoolCreate(&a.pool, &props) != cudaSuccess) return false;
    unsigned long long keep_all = ~0ull;
    cudaMemPoolSetAttribute(a.pool, cudaMemPoolAttrReleaseThreshold, &keep_all);
  }
  if (std::strcmp(a.name, "driver") == 0) {
    a.cu_alloc = Entry<PFN_cuMemAlloc_v3020>("cuMemAlloc", 12000);
    a.cu_free = Entry<PFN_cuMemFree_v3020>("cuMemFree", 12000);
    return a.cu_alloc != nullptr && a.cu_free != nullptr;
  }
  if (std::strcmp(a.name, "vmm") == 0) {
    a.cu_create = Entry<PFN_cuMemCreate_v10020>("cuMemCreate", 12000);
    a.cu_release = Entry<PFN_cuMemRelease_v10020>("cuMemRelease", 12000);
    a.cu_reserve = Entry<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve", 12000);
    a.cu_map = Entry<PFN_cuMemMap_v10020>("cuMemMap", 12000);
    a.cu_unmap = Entry<PFN_cuMemUnmap_v10020>("cuMemUnmap", 12000);
    a.cu_addr_free = Entry<PFN_cuMemAddressFree_v10020>("cuMemAddressFree", 12000);
    auto granularity = Entry<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity", 12000);
    if (!a.cu_create || !a.cu_release || !a.cu_reserve || !a.cu_map || !a.cu_unmap || !a.cu_addr_free || !granularity)
      return false;
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    return granularity(&a.granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS;
  }
  return true;
}

bool AllocOne(Api& a, size_t chunk, Fill& f) {
  void* p = nullptr;
  cudaError_t e = cudaSuccess;
  if (std::strcmp(a.name, "malloc") == 0) {
    e = cudaMalloc(&p, chunk);
  } else if (std::strcmp(a.name, "async") == 0) {
    e = cudaMallocAsync(&p, chunk, a.stream);
  } else if (std::strcmp(a.name, "pool") == 0) {
    e = cudaMallocFromPoolAsync(&p, chunk, a.pool, a.stream);
  } else if (std::strcmp(a.name, "managed") == 0) {
    e = cudaMallocManaged(&p, chunk);
  } else if (std::strcmp(a.name, "pitch") == 0) {
    size_t pitch = 0;
    e = cudaMallocPitch(&p, &pitch, kMiB, chunk / kMiB);
  } else if (std::strcmp(a.name, "driver") == 0) {
    CUdeviceptr d = 0;
    CUresult r = a.cu_alloc(&d, chunk);
    if (r != CUDA_SUCCESS) {
      f.oom = r == CUDA_ERROR_OUT_OF_MEMORY;
      f.error = f.oom ? "CUDA_ERROR_OUT_OF_MEMORY" : "driver error";
      return false;
    }
    p = reinterpret_cast<void*>(d);
  } else if (std::strcmp(a.name, "vmm") == 0) {
    size_t size = (chunk + a.granularity - 1) / a.granularity * a.granularity;
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = a.cu_create(&h, size, &prop, 0);
    if (r != CUDA_SUCCESS) {
      f.oom = r == CUDA_ERROR_OUT_OF_MEMORY;
      f.error = f.oom ? "CUDA_ERROR_OUT_OF_MEMORY" : "cuMemCreate error";
      return false;
    }
    CUdeviceptr va = 0;
    if (a.cu_reserve(&va, size, 0, 0, 0) != CUDA_SUCCESS || a.cu_map(va, size, 0, h, 0) != CUDA_SUCCESS) {
      a.cu_release(h);
      f.error = "cuMemAddressReserve/cuMemMap failed";
      return false;
    }
    a.handles[f.count] = h;
    p = reinterpret_cast<void*>(va);
  } else if (std::strcmp(a.name, "graph") == 0) {
    // One graph of one allocation node per chunk, instantiated and launched (freed by the graph
    // owner later: the memory stays with the graph).
    cudaGraph_t g = nullptr;
    cudaGraphNode_t node;
    cudaMemAllocNodeParams params = {};
    params.poolProps.allocType = cudaMemAllocationTypePinned;
    params.poolProps.location.type = cudaMemLocationTypeDevice;
    params.poolProps.location.id = 0;
    params.bytesize = chunk;
    if (cudaGraphCreate(&g, 0) != cudaSuccess) return false;
    e = cudaGraphAddMemAllocNode(&node, g, nullptr, 0, &params);
    if (e == cudaSuccess) {
      cudaGraphExec_t x = nullptr;
      e = cudaGraphInstantiate(&x, g, 0);
      if (e == cudaSuccess) e = cudaGraphLaunch(x, a.stream);
      if (e == cudaSuccess) e = cudaStreamSynchronize(a.stream);
      if (x != nullptr) cudaGraphExecDestroy(x);
    }
    if (e != cudaSuccess) {
      cudaGraphDestroy(g);
    } else {
      p = g;
    }
  }
  if (e != cudaSuccess) {
    f.oom = e == cudaErrorMemoryAllocation;
    f.error = cudaGetErrorName(e);
    cudaGetLastError();
    return false;
  }
  f.blocks[f.count++] = p;
  f.allocated += static_cast<long long>(chunk);
  return true;
}

void FreeAll(Api& a, Fill& f, size_t chunk) {
  for (int i = 0; i < f.count; ++i) {
    if (std::strcmp(a.name, "async") == 0 || std::strcmp(a.name, "pool") == 0) {
      cudaFreeAsync(f.blocks[i], a.stream);
    } else if (std::strcmp(a.name, "driver") == 0) {
      a.cu_free(reinterpret_cast<CUdeviceptr>(f.blocks[i]));
    } else if (std::strcmp(a.name, "vmm") == 0) {
      size_t size = (chunk + a.granularity - 1) / a.granularity * a.granularity;
      CUdeviceptr va = reinterpret_cast<CUdeviceptr>(f.blocks[i]);
      a.cu_unmap(va, size);
      a.cu_addr_free(va, size);
      a.cu_release(a.handles[i]);
    } else if (std::strcmp(a.name, "graph") == 0) {
      cudaGraphDestroy(static_cast<cudaGraph_t>(f.blocks[i]));
    } else {
      cudaFree(f.blocks[i]);
    }
  }
  if (a.stream != nullptr) cudaStreamSynchronize(a.stream);
  if (std::strcmp(a.name, "graph") == 0) cudaDeviceGraphMemTrim(0);
  f.count = 0;
}

int DoFill(const char* api, long long chunk_mib) {
  const long long cap = EnvBytes("GPUSLICE_MEMCAP_BYTES");
  // Bytes other processes of the slice hold (two processes sharing one cap), contexts included.
  const long long context = EnvBytes("GPUSLICE_MEMCAP_CONTEXT_BYTES") + EnvBytes("CAP_PROBE_OTHERS_BYTES");
  const size_t chunk = static_cast<size_t>(chunk_mib) * kMiB;
  if (cap <= 0 || chunk == 0) {
    std::printf("FAIL fill: needs GPUSLICE_MEMCAP_BYTES (run inside a capped slice) and a chunk size\n");
    return 2;
  }
  if (cudaFree(nullptr) != cudaSuccess) {
    std::printf("FAIL fill %s: no CUDA context: %s\n", api, cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  std::printf("api=%s cap=%lld context_charge=%lld memgetinfo_total=%zu memgetinfo_free=%zu\n", api, cap, context,
              total_b, free_b);
  static Api a;
  a.name = api;
  if (!Init(a)) {
    std::printf("FAIL fill %s: setup failed (%s)\n", api, cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  static Fill f;
  const long long most = 2 * cap / static_cast<long long>(chunk) + 2;
  while (f.count < kMaxBlocks && f.count < most && AllocOne(a, chunk, f)) {
  }
  std::printf("allocated=%lld chunks=%d refusal=%s\n", f.allocated, f.count, f.error);
  std::fflush(stdout);
  // CAP_PROBE_HOLD_SECONDS: keep the memory a while, so two slices filling their caps hold them
  // at the same time (caps that do not add up then show as a driver out-of-memory error).
  if (const long long hold = EnvBytes("CAP_PROBE_HOLD_SECONDS"); hold > 0) sleep(static_cast<unsigned>(hold));
  int rc = 0;
  if (static_cast<long long>(total_b) != cap) {
    std::printf("FAIL fill %s: cudaMemGetInfo total %zu is not the cap %lld\n", api, total_b, cap);
    rc = 1;
  }
  if (!f.oom) {
    std::printf("FAIL fill %s: stopped by %s, not an out-of-memory refusal\n", api, f.error);
    rc = 1;
  } else if (f.allocated > cap - context) {
    std::printf("FAIL fill %s: %lld bytes allocated past the cap (%lld less a %lld context charge)\n", api,
                f.allocated, cap, context);
    rc = 1;
  } else if (f.allocated + 2 * static_cast<long long>(chunk) < cap - context) {
    std::printf("FAIL fill %s: refused after %lld bytes of %lld\n", api, f.allocated, cap - context);
    rc = 1;
  }
  FreeAll(a, f, chunk);
  int* work = nullptr;
  const size_t n = 1 << 20;
  if (cudaMalloc(&work, n * sizeof(int)) != cudaSuccess || !Compute(work, n, 5)) {
    std::printf("FAIL fill %s: could not allocate or compute after freeing\n", api);
    rc = 1;
  }
  if (work != nullptr) cudaFree(work);
  if (rc == 0) std::printf("ok fill %s: refused after %lld of %lld bytes (%s)\n", api, f.allocated, cap, f.error);
  return rc;
}

int Hold(long long mib, int seconds) {
  const size_t n = static_cast<size_t>(mib) * kMiB / sizeof(int);
  int* dev = nullptr;
  if (cudaMalloc(&dev, n * sizeof(int)) != cudaSuccess) {
    std::printf("FAIL hold: could not allocate %lld MiB (%s)\n", mib, cudaGetErrorName(cudaGetLastError()));
    return 1;
  }
  std::printf("pid=%d ready=1\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  const double end = Now() + seconds;
  int loops = 0;
  while (Now() < end) {
    if (!Compute(dev, n, 3)) {
      std::printf("FAIL hold: wrong result or CUDA error in loop %d\n", loops);
      return 1;
    }
    ++loops;
  }
  cudaFree(dev);
  std::printf("ok hold: %d checked loops over %lld MiB\n", loops, mib);
  return 0;
}

int Exec(const char* self, long long mib) {
  void* p = nullptr;
  if (cudaMalloc(&p, static_cast<size_t>(mib) * kMiB) != cudaSuccess) {
    std::printf("FAIL exec: could not allocate %lld MiB before exec\n", mib);
    return 1;
  }
  std::printf("before_exec_allocated=%lld\n", mib * static_cast<long long>(kMiB));
  std::fflush(stdout);
  char fill[] = "fill", api[] = "malloc", chunk[] = "64";
  char* args[] = {const_cast<char*>(self), fill, api, chunk, nullptr};
  execv("/proc/self/exe", args);
  std::printf("FAIL exec: execv failed\n");
  return 1;
}

int PoolRelease() {
  cudaStream_t s;
  cudaMemPool_t pool;
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  if (cudaStreamCreate(&s) != cudaSuccess || cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
    std::printf("FAIL pool-release: setup\n");
    return 1;
  }
  unsigned long long keep_all = ~0ull;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all);
  unsigned long long threshold = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  void* p = nullptr;
  if (cudaMallocFromPoolAsync(&p, 256 * kMiB, pool, s) != cudaSuccess) {
    std::printf("FAIL pool-release: allocation\n");
    return 1;
  }
  cudaFreeAsync(p, s);
  cudaStreamSynchronize(s);
  unsigned long long reserved = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  std::printf("release_threshold=%llu reserved_after_sync=%llu\n", threshold, reserved);
  const bool capped = EnvBytes("GPUSLICE_MEMCAP_BYTES") > 0;
  if (capped && reserved != 0) {
    std::printf("FAIL pool-release: the pool kept %llu bytes after a free and a sync in a capped process\n", reserved);
    return 1;
  }
  std::printf("ok pool-release: %s\n", capped ? "released at synchronisation" : "uncapped (the pool keeps it)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "info") == 0) return Info();
  if (argc >= 3 && std::strcmp(argv[1], "context") == 0) return Context(std::atoi(argv[2]));
  if (argc >= 4 && std::strcmp(argv[1], "fill") == 0) return DoFill(argv[2], std::atoll(argv[3]));
  if (argc >= 4 && std::strcmp(argv[1], "hold") == 0) return Hold(std::atoll(argv[2]), std::atoi(argv[3]));
  if (argc >= 3 && std::strcmp(argv[1], "exec") == 0) return Exec(argv[0], std::atoll(argv[2]));
  if (argc >= 2 && std::strcmp(argv[1], "pool-release") == 0) return PoolRelease();
  std::fprintf(stderr, "usage: cap_probe info | context S | fill API MIB | hold MIB S | exec MIB | pool-release\n");
  return 2;
}
