// A CUDA "application" for the memcap tests: linked against the fake libcuda.so.1, run with
// libgpuslice-cuda.so preloaded, driven line by line on stdin. Each command prints exactly one
// line: "ok ..." or "err <CUresult>". See memcap_preload_test.cc for the commands.
//
// `mode` chooses how the driver entry points are found, as real programs do:
//   direct    linked symbols (a program linked against libcuda)
//   dlsym     dlopen("libcuda.so.1") + dlsym (ctypes, JAX, older runtimes)
//   proc      cuGetProcAddress_v2 found with dlsym, CUDA 12 ABI (the CUDA 12+ runtime)
//   procptsz  the same with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
//   proc1     legacy 4-argument cuGetProcAddress, CUDA 11.8
//   procnew   cuGetProcAddress_v2 asked at CUDA 13.2 (a program passing a newer CUDA_VERSION
//             than the interposer was checked against: same ABI, so still hooked)
//   procfuture cuGetProcAddress_v2 asked at version 90000, where the fake driver has a newer
//             cuMemAlloc ABI: that one entry point must pass through, the others are hooked
//   next      dlsym(RTLD_NEXT, ...) from the main program

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "memcap/cuda_abi.h"

extern "C" {
CUresult cuMemAlloc_v2(CUdeviceptr*, std::size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr*, std::size_t, unsigned int);
CUresult cuMemAllocAsync(CUdeviceptr*, std::size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, std::size_t, const CUmemAllocationProp*,
                     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayCreate_v2(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
CUresult cuArray3DCreate_v2(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayCreate(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned int);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
CUresult cuMemGetInfo_v2(std::size_t*, std::size_t*);
CUresult cuDeviceTotalMem_v2(std::size_t*, CUdevice);
CUresult cuMemPoolSetAttribute(CUmemoryPool, int, void*);
CUresult cuGraphAddMemAllocNode(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t, CUDA_MEM_ALLOC_NODE_PARAMS*);
CUresult cuGraphAddNode_v2(CUgraphNode*, CUgraph, const CUgraphNode*, const void*, std::size_t, CUgraphNodeParams*);
CUresult cuGraphDestroy(CUgraph);
unsigned long long fakecuda_pool_threshold();
long long fakecuda_graph_alloc_nodes();
long long fakecuda_alloc_calls();
long long fakecuda_live_bytes();
long long fakecuda_internal_calls();
}

namespace {

struct Api {
  PFN_cuMemAlloc_v2 alloc = nullptr;
  PFN_cuMemAllocPitch_v2 pitch = nullptr;
  PFN_cuMemAllocManaged managed = nullptr;
  PFN_cuMemAllocAsync async = nullptr;
  PFN_cuMemAllocFromPoolAsync pool = nullptr;
  PFN_cuMemFree_v2 free = nullptr;
  PFN_cuMemFreeAsync free_async = nullptr;
  PFN_cuMemCreate create = nullptr;
  PFN_cuMemRelease release = nullptr;
  PFN_cuArrayCreate_v2 array = nullptr;
  PFN_cuArray3DCreate_v2 array3d = nullptr;
  PFN_cuArrayDestroy array_destroy = nullptr;
  PFN_cuMipmappedArrayCreate mipmap = nullptr;
  PFN_cuMipmappedArrayDestroy mipmap_destroy = nullptr;
  PFN_cuMemGetInfo_v2 info = nullptr;
  PFN_cuDeviceTotalMem_v2 total_mem = nullptr;
  PFN_cuMemPoolSetAttribute pool_set = nullptr;
  PFN_cuGraphAddMemAllocNode graph_alloc = nullptr;
  PFN_cuGraphAddNode_v2 graph_node = nullptr;  // CUDA 12.3 ABI; not there for older lookups
  PFN_cuGraphDestroy graph_destroy = nullptr;
};

template <typename F>
void Set(F* out, void* p) {
  *out = reinterpret_cast<F>(p);
}

Api Direct() {
  Api a;
  a.alloc = &cuMemAlloc_v2;
  a.pitch = &cuMemAllocPitch_v2;
  a.managed = &cuMemAllocManaged;
  a.async = &cuMemAllocAsync;
  a.pool = &cuMemAllocFromPoolAsync;
  a.free = &cuMemFree_v2;
  a.free_async = &cuMemFreeAsync;
  a.create = &cuMemCreate;
  a.release = &cuMemRelease;
  a.array = &cuArrayCreate_v2;
  a.array3d = &cuArray3DCreate_v2;
  a.array_destroy = &cuArrayDestroy;
  a.mipmap = &cuMipmappedArrayCreate;
  a.mipmap_destroy = &cuMipmappedArrayDestroy;
  a.info = &cuMemGetInfo_v2;
  a.total_mem = &cuDeviceTotalMem_v2;
  a.pool_set = &cuMemPoolSetAttribute;
  a.graph_alloc = &cuGraphAddMemAllocNode;
  a.graph_node = &cuGraphAddNode_v2;
  a.graph_destroy = &cuGraphDestroy;
  return a;
}

// Resolves every entry point with `get(base name, versioned name)`.
template <typename Get>
Api Resolve(Get get) {
  Api a;
  Set(&a.alloc, get("cuMemAlloc", "cuMemAlloc_v2"));
  Set(&a.pitch, get("cuMemAllocPitch", "cuMemAllocPitch_v2"));
  Set(&a.managed, get("cuMemAllocManaged", "cuMemAllocManaged"));
  Set(&a.async, get("cuMemAllocAsync", "cuMemAllocAsync"));
  Set(&a.pool, get("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync"));
  Set(&a.free, get("cuMemFree", "cuMemFree_v2"));
  Set(&a.free_async, get("cuMemFreeAsync", "cuMemFreeAsync"));
  Set(&a.create, get("cuMemCreate", "cuMemCreate"));
  Set(&a.release, get("cuMemRelease", "cuMemRelease"));
  Set(&a.array, get("cuArrayCreate", "cuArrayCreate_v2"));
  Set(&a.array3d, get("cuArray3DCreate", "cuArray3DCreate_v2"));
  Set(&a.array_destroy, get("cuArrayDestroy", "cuArrayDestroy"));
  Set(&a.mipmap, get("cuMipmappedArrayCreate", "cuMipmappedArrayCreate"));
  Set(&a.mipmap_destroy, get("cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy"));
  Set(&a.info, get("cuMemGetInfo", "cuMemGetInfo_v2"));
  Set(&a.total_mem, get("cuDeviceTotalMem", "cuDeviceTotalMem_v2"));
  Set(&a.pool_set, get("cuMemPoolSetAttribute", "cuMemPoolSetAttribute"));
  Set(&a.graph_alloc, get("cuGraphAddMemAllocNode", "cuGraphAddMemAllocNode"));
  Set(&a.graph_node, get("cuGraphAddNode", "cuGraphAddNode_v2"));
  Set(&a.graph_destroy, get("cuGraphDestroy", "cuGraphDestroy"));
  return a;
}

bool Complete(const Api& a) {
  return a.alloc && a.pitch && a.managed && a.async && a.pool && a.free && a.free_async &&
         a.create && a.release && a.array && a.array3d && a.array_destroy && a.mipmap &&
         a.mipmap_destroy && a.info && a.total_mem && a.pool_set && a.graph_alloc && a.graph_destroy;
}

bool ChooseMode(const std::string& mode, Api* api) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  if (driver == nullptr) return false;
  if (mode == "direct") {
    *api = Direct();
  } else if (mode == "dlsym") {
    *api = Resolve([&](const char*, const char* name) { return dlsym(driver, name); });
  } else if (mode == "next") {
    *api = Resolve([&](const char*, const char* name) { return dlsym(RTLD_NEXT, name); });
  } else if (mode == "proc" || mode == "procptsz" || mode == "procnew" || mode == "procfuture") {
    auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v2>(dlsym(driver, "cuGetProcAddress_v2"));
    if (gpa == nullptr) return false;
    cuuint64_t flags = mode == "procptsz" ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                          : CU_GET_PROC_ADDRESS_DEFAULT;
    const int version = mode == "procnew" ? 13020 : mode == "procfuture" ? 90000 : 12080;
    *api = Resolve([&](const char* base, const char*) -> void* {
      void* p = nullptr;
      CUdriverProcAddressQueryResult status = -1;
      if (gpa(base, &p, version, flags, &status) != CUDA_SUCCESS ||
          status != CU_GET_PROC_ADDRESS_SUCCESS) {
        return nullptr;
      }
      return p;
    });
  } else if (mode == "proc1") {
    auto gpa = reinterpret_cast<PFN_cuGetProcAddress>(dlsym(driver, "cuGetProcAddress"));
    if (gpa == nullptr) return false;
    *api = Resolve([&](const char* base, const char*) -> void* {
      void* p = nullptr;
      return gpa(base, &p, 11080, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS ? p : nullptr;
    });
  } else {
    return false;
  }
  return Complete(*api);
}

long long ParseBytes(const std::string& text) {
  long long v = std::atoll(text.c_str());
  switch (text.empty() ? ' ' : text.back()) {
    case 'K': return v << 10;
    case 'M': return v << 20;
    case 'G': return v << 30;
    default: return v;
  }
}

enum class Kind { kPtr, kHandle, kArray, kMipmap };
struct Allocation {
  Kind kind;
  std::uint64_t key;
  bool live;
};

std::string Err(CUresult rc) { return "err " + std::to_string(rc); }

// A graph handle for the number the test names (the fake driver never dereferences it).
CUgraph Graph(const std::string& n) {
  return reinterpret_cast<CUgraph>(std::uintptr_t{0x10000} + static_cast<std::uintptr_t>(std::atoll(n.c_str())));
}

}  // namespace

int main(int argc, char** argv) {
  Api api = Direct();
  // Started again by `exec`: say so, as the reply to that command.
  if (argc > 1 && std::string(argv[1]) == "--execd") std::cout << "ok execd" << std::endl;
  std::vector<Allocation> allocations;
  auto stream = reinterpret_cast<CUstream>(std::uintptr_t{0x5});
  auto pool = reinterpret_cast<CUmemoryPool>(std::uintptr_t{0x7});
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd, a, b, c;
    in >> cmd >> a >> b >> c;
    std::string reply;
    // Callers compute rc in its own statement: the key is an out-parameter of that call.
    auto added = [&](CUresult rc, Kind kind, std::uint64_t key) {
      if (rc != CUDA_SUCCESS) return Err(rc);
      allocations.push_back({kind, key, true});
      return "ok " + std::to_string(allocations.size() - 1);
    };
    CUdeviceptr ptr = 0;
    if (cmd == "mode") {
      reply = ChooseMode(a, &api) ? "ok" : "err mode";
    } else if (cmd == "alloc") {
      CUresult rc = api.alloc(&ptr, ParseBytes(a));
      reply = added(rc, Kind::kPtr, ptr);
    } else if (cmd == "pitch") {
      std::size_t pitch = 0;
      CUresult rc = api.pitch(&ptr, &pitch, ParseBytes(a), ParseBytes(b), 4);
      reply = added(rc, Kind::kPtr, ptr);
      if (rc == CUDA_SUCCESS) reply += " " + std::to_string(pitch);
    } else if (cmd == "managed") {
      CUresult rc = api.managed(&ptr, ParseBytes(a), 1);
      reply = added(rc, Kind::kPtr, ptr);
    } else if (cmd == "async") {
      CUresult rc = api.async(&ptr, ParseBytes(a), stream);
      reply = added(rc, Kind::kPtr, ptr);
    } else if (cmd == "pool") {
      CUresult rc = api.pool(&ptr, ParseBytes(a), pool, stream);
      reply = added(rc, Kind::kPtr, ptr);
    } else if (cmd == "create" || cmd == "createhost") {
      CUmemAllocationProp prop{};
      prop.type = 1;  // CU_MEM_ALLOCATION_TYPE_PINNED
      prop.location.type = cmd == "create" ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
      CUmemGenericAllocationHandle h = 0;
      CUresult rc = api.create(&h, ParseBytes(a), &prop, 0);
      reply = added(rc, Kind::kHandle, h);
    } else if (cmd == "array" || cmd == "array3d") {
      CUarray h = nullptr;
      CUresult rc;
      if (cmd == "array") {
        CUDA_ARRAY_DESCRIPTOR d{static_cast<std::size_t>(ParseBytes(a)),
                                static_cast<std::size_t>(ParseBytes(b)), CU_AD_FORMAT_FLOAT, 1};
        rc = api.array(&h, &d);
      } else {
        CUDA_ARRAY3D_DESCRIPTOR d{static_cast<std::size_t>(ParseBytes(a)),
                                  static_cast<std::size_t>(ParseBytes(b)),
                                  static_cast<std::size_t>(ParseBytes(c)), CU_AD_FORMAT_FLOAT, 1, 0};
        rc = api.array3d(&h, &d);
      }
      reply = added(rc, Kind::kArray, reinterpret_cast<std::uintptr_t>(h));
    } else if (cmd == "mipmap") {  // mipmap WIDTH HEIGHT LEVELS (float, 1 channel, 2D)
      CUmipmappedArray h = nullptr;
      CUDA_ARRAY3D_DESCRIPTOR d{static_cast<std::size_t>(ParseBytes(a)),
                                static_cast<std::size_t>(ParseBytes(b)), 0, CU_AD_FORMAT_FLOAT, 1, 0};
      CUresult rc = api.mipmap(&h, &d, static_cast<unsigned>(std::atoi(c.c_str())));
      reply = added(rc, Kind::kMipmap, reinterpret_cast<std::uintptr_t>(h));
    } else if (cmd == "free" || cmd == "freeasync") {
      std::size_t i = static_cast<std::size_t>(std::atoll(a.c_str()));
      if (i >= allocations.size() || !allocations[i].live) {
        reply = "err index";
      } else {
        Allocation& al = allocations[i];
        CUresult rc = CUDA_SUCCESS;
        switch (al.kind) {
          case Kind::kPtr:
            rc = cmd == "free" ? api.free(al.key) : api.free_async(al.key, stream);
            break;
          case Kind::kHandle:
            rc = api.release(al.key);
            break;
          case Kind::kArray:
            rc = api.array_destroy(reinterpret_cast<CUarray>(al.key));
            break;
          case Kind::kMipmap:
            rc = api.mipmap_destroy(reinterpret_cast<CUmipmappedArray>(al.key));
            break;
        }
        if (rc == CUDA_SUCCESS) al.live = false;
        reply = rc == CUDA_SUCCESS ? "ok" : Err(rc);
      }
    } else if (cmd == "info") {
      std::size_t free_bytes = 0, total_bytes = 0;
      CUresult rc = api.info(&free_bytes, &total_bytes);
      reply = rc == CUDA_SUCCESS
                  ? "ok " + std::to_string(free_bytes) + " " + std::to_string(total_bytes)
                  : Err(rc);
    } else if (cmd == "totalmem") {
      std::size_t total_bytes = 0;
      CUresult rc = api.total_mem(&total_bytes, 0);
      reply = rc == CUDA_SUCCESS ? "ok " + std::to_string(total_bytes) : Err(rc);
    } else if (cmd == "forkalloc") {
      // A forked child (no exec) allocates: it must count against the slice as its own process.
      int fds[2];
      if (pipe(fds) != 0) {
        reply = "err pipe";
      } else {
        pid_t pid = fork();
        if (pid == 0) {
          CUdeviceptr p = 0;
          CUresult rc = api.alloc(&p, ParseBytes(a));
          ssize_t w = write(fds[1], &rc, sizeof rc);
          _exit(w == sizeof rc ? 0 : 1);
        }
        close(fds[1]);
        CUresult rc = -1;
        ssize_t r = read(fds[0], &rc, sizeof rc);
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        reply = r != sizeof rc ? "err child" : rc == CUDA_SUCCESS ? "ok" : Err(rc);
      }
    } else if (cmd == "poolthreshold") {  // poolthreshold BYTES: what the driver was asked for
      cuuint64_t v = static_cast<cuuint64_t>(std::stoull(a));
      CUresult rc = api.pool_set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
      reply = rc == CUDA_SUCCESS ? "ok " + std::to_string(fakecuda_pool_threshold()) : Err(rc);
    } else if (cmd == "graphalloc" || cmd == "graphnode") {  // graphalloc GRAPH BYTES
      CUgraphNode node = nullptr;
      CUresult rc;
      if (cmd == "graphalloc") {
        CUDA_MEM_ALLOC_NODE_PARAMS p{};
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.bytesize = static_cast<std::size_t>(ParseBytes(b));
        rc = api.graph_alloc(&node, Graph(a), nullptr, 0, &p);
      } else if (api.graph_node == nullptr) {
        rc = CUDA_ERROR_NOT_FOUND;
      } else {
        CUgraphNodeParams p{};
        p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
        p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.alloc.bytesize = static_cast<std::size_t>(ParseBytes(b));
        rc = api.graph_node(&node, Graph(a), nullptr, nullptr, 0, &p);
      }
      reply = rc == CUDA_SUCCESS ? "ok " + std::to_string(fakecuda_graph_alloc_nodes()) : Err(rc);
    } else if (cmd == "graphdestroy") {
      CUresult rc = api.graph_destroy(Graph(a));
      reply = rc == CUDA_SUCCESS ? "ok" : Err(rc);
    } else if (cmd == "exec") {
      // The same process runs a new program image (this one again): the interposer is loaded
      // afresh in it, and the old image's allocations are gone with its address space.
      std::cout.flush();
      char self[] = "memcap_child";
      char flag[] = "--execd";
      char* args[] = {self, flag, nullptr};
      execv("/proc/self/exe", args);
      reply = "err exec";
    } else if (cmd == "calls") {
      reply = "ok " + std::to_string(fakecuda_alloc_calls()) + " " +
              std::to_string(fakecuda_live_bytes());
    } else if (cmd == "internal") {  // calls through cuGetProcAddress's internal entry points
      reply = "ok " + std::to_string(fakecuda_internal_calls());
    } else if (cmd == "nextdlsym") {
      // Which library holds "the next dlsym after this program"? With the interposer preloaded
      // it must be the interposer: its dlsym resolves RTLD_NEXT relative to the caller.
      Dl_info info{};
      void* p = dlsym(RTLD_NEXT, "dlsym");
      reply = p != nullptr && dladdr(p, &info) != 0 && info.dli_fname != nullptr
                  ? std::string("ok ") + (std::string(info.dli_fname).find("libgpuslice-cuda") !=
                                                  std::string::npos
                                              ? "interposer"
                                              : "other")
                  : "err dladdr";
    } else if (cmd == "exit") {
      std::cout << "ok" << std::endl;
      return 0;
    } else {
      reply = "err command";
    }
    std::cout << reply << std::endl;
  }
  return 0;
}
