// A fake libcuda.so.1 for the memcap tests and benchmark: the entry points libgpuslice-cuda
// intercepts, implemented with host memory, plus counters the tests read (fakecuda_*), so a
// test can tell whether a call reached "the driver" at all. Device memory is plain malloc (never
// touched, so large sizes cost nothing). Thread-safe (atomics only).
//
// Like a real driver, cuGetProcAddress hands out internal entry points, not the addresses of
// the exported symbols (so an interposer cannot recognise them by address), and for "cuMemAlloc"
// at CUDA version 90000 or later a different entry point again: a made-up newer ABI.
//
// FAKECUDA_BLOCK_BYTES=N makes an allocation of exactly N bytes print "blocked" on stdout and
// hang, so a test can kill the process while it is inside the driver.
// FAKECUDA_TOTAL_BYTES sets the device's total memory (default 80 GiB).
// FAKECUDA_TRACE=1 logs every cuGetProcAddress request on stderr.

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "memcap/cuda_abi.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<long long> g_alloc_calls{0};
std::atomic<long long> g_free_calls{0};
std::atomic<long long> g_live_bytes{0};
std::atomic<unsigned long long> g_next_handle{1};

constexpr std::size_t kHeader = 16;  // each block starts with its size

long long EnvBytes(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::atoll(v) : fallback;
}

void MaybeBlock(std::size_t bytes) {
  static const long long block = EnvBytes("FAKECUDA_BLOCK_BYTES", -1);
  if (block >= 0 && static_cast<long long>(bytes) == block) {
    ssize_t rc = write(1, "blocked\n", 8);
    (void)rc;
    for (;;) pause();
  }
}

CUresult HostAlloc(CUdeviceptr* dptr, std::size_t bytes) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  g_alloc_calls.fetch_add(1);
  MaybeBlock(bytes);
  auto* block = static_cast<unsigned char*>(std::malloc(bytes + kHeader));
  if (block == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memcpy(block, &bytes, sizeof bytes);
  g_live_bytes.fetch_add(static_cast<long long>(bytes));
  *dptr = reinterpret_cast<CUdeviceptr>(block + kHeader);
  return CUDA_SUCCESS;
}

CUresult HostFree(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  g_free_calls.fetch_add(1);
  auto* block = reinterpret_cast<unsigned char*>(dptr) - kHeader;
  std::size_t bytes = 0;
  std::memcpy(&bytes, block, sizeof bytes);
  g_live_bytes.fetch_sub(static_cast<long long>(bytes));
  std::free(block);
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_EXPORT long long fakecuda_alloc_calls() { return g_alloc_calls.load(); }
FAKE_EXPORT long long fakecuda_free_calls() { return g_free_calls.load(); }
FAKE_EXPORT long long fakecuda_live_bytes() { return g_live_bytes.load(); }
FAKE_EXPORT long long fakecuda_internal_calls();  // calls through cuGetProcAddress's pointers

FAKE_EXPORT CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
FAKE_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr || ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
  *device = 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int, CUdevice) {
  static int dummy;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(&dummy);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  static const long long total = EnvBytes("FAKECUDA_TOTAL_BYTES", 80LL << 30);
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  long long live = g_live_bytes.load();
  *total_bytes = static_cast<std::size_t>(total);
  *free_bytes = static_cast<std::size_t>(live < total ? total - live : 0);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice device) {
  static const long long total = EnvBytes("FAKECUDA_TOTAL_BYTES", 80LL << 30);
  if (bytes == nullptr || device != 0) return CUDA_ERROR_INVALID_VALUE;
  *bytes = static_cast<std::size_t>(total);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) { return HostAlloc(dptr, bytes); }
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width,
                                        std::size_t height, unsigned int) {
  if (pitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 2047) / 2048 * 2048;  // coarser than the interposer's 512-byte estimate
  return HostAlloc(dptr, *pitch * height);
}
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned int) {
  return HostAlloc(dptr, bytes);
}
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream) {
  return HostAlloc(dptr, bytes);
}
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream) {
  return HostAlloc(dptr, bytes);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool,
                                             CUstream) {
  return HostAlloc(dptr, bytes);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes,
                                                  CUmemoryPool, CUstream) {
  return HostAlloc(dptr, bytes);
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return HostFree(dptr); }
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) { return HostFree(dptr); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream) { return HostFree(dptr); }

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size,
                                 const CUmemAllocationProp* prop, unsigned long long) {
  if (handle == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult rc = HostAlloc(&p, size);
  if (rc == CUDA_SUCCESS) *handle = p;  // the block address doubles as the handle
  return rc;
}
FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { return HostFree(handle); }

FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (handle == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult rc = HostAlloc(&p, desc->Width * (desc->Height ? desc->Height : 1) * desc->NumChannels);
  if (rc == CUDA_SUCCESS) *handle = reinterpret_cast<CUarray>(p);
  return rc;
}
FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (handle == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult rc = HostAlloc(&p, desc->Width * (desc->Height ? desc->Height : 1) *
                                  (desc->Depth ? desc->Depth : 1) * desc->NumChannels);
  if (rc == CUDA_SUCCESS) *handle = reinterpret_cast<CUarray>(p);
  return rc;
}
FAKE_EXPORT CUresult cuArrayDestroy(CUarray handle) {
  return HostFree(reinterpret_cast<CUdeviceptr>(handle));
}
FAKE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                            unsigned int levels) {
  if (handle == nullptr || desc == nullptr || levels == 0) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult rc = HostAlloc(&p, desc->Width * (desc->Height ? desc->Height : 1) *
                                  (desc->Depth ? desc->Depth : 1) * desc->NumChannels * 2);
  if (rc == CUDA_SUCCESS) *handle = reinterpret_cast<CUmipmappedArray>(p);
  return rc;
}
FAKE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle) {
  return HostFree(reinterpret_cast<CUdeviceptr>(handle));
}

// Stream-ordered pools: the release threshold last set (what the driver was asked to keep).
namespace {
std::atomic<unsigned long long> g_pool_threshold{0};
std::atomic<long long> g_graph_alloc_nodes{0};
}  // namespace
FAKE_EXPORT unsigned long long fakecuda_pool_threshold() { return g_pool_threshold.load(); }
FAKE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool, int attr, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
    cuuint64_t v = 0;
    std::memcpy(&v, value, sizeof v);
    g_pool_threshold.store(v);
  }
  return CUDA_SUCCESS;
}

// Graphs: memory allocation nodes are only counted (a real driver allocates them when the graph
// runs, which no interposer call brackets).
FAKE_EXPORT long long fakecuda_graph_alloc_nodes() { return g_graph_alloc_nodes.load(); }
FAKE_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*, std::size_t,
                                            CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (node == nullptr || graph == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  g_graph_alloc_nodes.fetch_add(1);
  *node = reinterpret_cast<CUgraphNode>(g_next_handle.fetch_add(1));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*, std::size_t,
                                    CUgraphNodeParams* params) {
  if (node == nullptr || graph == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) g_graph_alloc_nodes.fetch_add(1);
  *node = reinterpret_cast<CUgraphNode>(g_next_handle.fetch_add(1));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, const void*,
                                       std::size_t n, CUgraphNodeParams* params) {
  return cuGraphAddNode(node, graph, deps, n, params);
}
FAKE_EXPORT CUresult cuGraphDestroy(CUgraph graph) { return graph == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }

// Entry points by (base name, version, flags), as the real driver documents it: the per-thread
// variant when asked for, the _v2 ABI from CUDA 3.2 on (cuGetProcAddress_v2 from 12.0), else the
// plain name.
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult* status);

namespace {

// The driver's internal entry point for an export: another function (another address) doing
// the same work. The library is linked with -Bsymbolic-functions, so the call to the export
// binds inside the library, as a real driver's internal calls do: it never reaches an
// interposer's hook of the same name. Counting keeps the compiler from folding the two.
std::atomic<long long> g_internal_calls{0};

template <auto F>
struct Internal;
template <typename... A, CUresult (*F)(A...)>
struct Internal<F> {
  static CUresult Call(A... a) {
    g_internal_calls.fetch_add(1, std::memory_order_relaxed);
    return F(a...);
  }
  // A made-up newer ABI of the function (same signature here, yet another entry point).
  static CUresult Newer(A... a) {
    g_internal_calls.fetch_add(2, std::memory_order_relaxed);
    return F(a...);
  }
};
#define INTERNAL(fn) reinterpret_cast<void*>(&Internal<&fn>::Call)

struct Entry {
  const char* name;
  void* fn;
};

const Entry* Find(const std::string& name) {
  static const Entry kTable[] = {
      {"cuInit", INTERNAL(cuInit)},
      {"cuDriverGetVersion", INTERNAL(cuDriverGetVersion)},
      {"cuDeviceGet", INTERNAL(cuDeviceGet)},
      {"cuCtxCreate_v2", INTERNAL(cuCtxCreate_v2)},
      {"cuMemGetInfo_v2", INTERNAL(cuMemGetInfo_v2)},
      {"cuDeviceTotalMem_v2", INTERNAL(cuDeviceTotalMem_v2)},
      {"cuMemAlloc_v2", INTERNAL(cuMemAlloc_v2)},
      {"cuMemAllocPitch_v2", INTERNAL(cuMemAllocPitch_v2)},
      {"cuMemAllocManaged", INTERNAL(cuMemAllocManaged)},
      {"cuMemAllocAsync", INTERNAL(cuMemAllocAsync)},
      {"cuMemAllocAsync_ptsz", INTERNAL(cuMemAllocAsync_ptsz)},
      {"cuMemAllocFromPoolAsync", INTERNAL(cuMemAllocFromPoolAsync)},
      {"cuMemAllocFromPoolAsync_ptsz", INTERNAL(cuMemAllocFromPoolAsync_ptsz)},
      {"cuMemFree_v2", INTERNAL(cuMemFree_v2)},
      {"cuMemFreeAsync", INTERNAL(cuMemFreeAsync)},
      {"cuMemFreeAsync_ptsz", INTERNAL(cuMemFreeAsync_ptsz)},
      {"cuMemCreate", INTERNAL(cuMemCreate)},
      {"cuMemRelease", INTERNAL(cuMemRelease)},
      {"cuArrayCreate_v2", INTERNAL(cuArrayCreate_v2)},
      {"cuArray3DCreate_v2", INTERNAL(cuArray3DCreate_v2)},
      {"cuArrayDestroy", INTERNAL(cuArrayDestroy)},
      {"cuMipmappedArrayCreate", INTERNAL(cuMipmappedArrayCreate)},
      {"cuMipmappedArrayDestroy", INTERNAL(cuMipmappedArrayDestroy)},
      {"cuGetProcAddress", INTERNAL(cuGetProcAddress)},
      {"cuGetProcAddress_v2", INTERNAL(cuGetProcAddress_v2)},
      {"cuMemPoolSetAttribute", INTERNAL(cuMemPoolSetAttribute)},
      {"cuGraphAddMemAllocNode", INTERNAL(cuGraphAddMemAllocNode)},
      {"cuGraphAddNode", INTERNAL(cuGraphAddNode)},
      {"cuGraphAddNode_v2", INTERNAL(cuGraphAddNode_v2)},
      {"cuGraphDestroy", INTERNAL(cuGraphDestroy)},
  };
  for (const Entry& e : kTable) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

CUresult Lookup(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static const bool trace = std::getenv("FAKECUDA_TRACE") != nullptr;
  if (trace) {
    std::fprintf(stderr, "fakecuda: cuGetProcAddress(%s, %d, %llu)\n", symbol, version,
                 static_cast<unsigned long long>(flags));
  }
  std::string base = symbol;
  if (base == "cuMemAlloc" && version >= 90000) {
    *pfn = reinterpret_cast<void*>(&Internal<&cuMemAlloc_v2>::Newer);
    return CUDA_SUCCESS;
  }
  const int v2_from = base == "cuGetProcAddress" ? 12000 : base == "cuGraphAddNode" ? 12030 : 3020;
  const Entry* e = nullptr;
  if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0) e = Find(base + "_ptsz");
  if (e == nullptr && version >= v2_from) e = Find(base + "_v2");
  if (e == nullptr) e = Find(base);
  *pfn = e != nullptr ? e->fn : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // namespace

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return Lookup(symbol, pfn, version, flags);
}
FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  CUresult rc = Lookup(symbol, pfn, version, flags);
  if (status != nullptr) {
    *status = rc == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return rc;
}

FAKE_EXPORT long long fakecuda_internal_calls() { return g_internal_calls.load(); }
