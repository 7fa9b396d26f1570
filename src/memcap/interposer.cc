// libgpuslice-cuda.so: enforces a `shared` slice's memory cap inside every process of the slice.
// Preloaded with LD_PRELOAD by the executor; see docs/memcap.md for the design and env.h for the
// variables it reads. C ABI only; no libstdc++ at run time (no exceptions, no RTTI, no STL).
//
// How calls reach the hooks:
//  * programs linked against libcuda.so.1 bind cu* symbols to the exported hooks below (the
//    preloaded library comes first in the global scope);
//  * dlsym(handle, "cu...") is interposed: when the real lookup yields the real driver function
//    of a hooked entry point, the hook is returned instead (the CUDA runtime finds
//    cuGetProcAddress this way). Both are exported symbols, so comparing addresses is exact;
//  * cuGetProcAddress / cuGetProcAddress_v2 are hooked: the hook is chosen by the symbol name,
//    version and flags requested, as the driver maps them to an ABI (the table below), never by
//    the address the driver returns (which may be an internal entry point, not the export). A
//    request past the newest CUDA version this table was checked against gets the hook only if
//    the driver gives the same entry point as at that version; otherwise it is a newer ABI and
//    passes through untouched (logged) instead of being called with the wrong signature.
// The real driver functions are found with the real dlsym on libcuda.so.1's own handle, which
// never sees this library.

#include "memcap/glibc_compat.h"  // first: binds libc references to old versions

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "memcap/cuda_abi.h"
#include "memcap/ptr_table.h"
#include "memcap/segment.h"

#define GPUSLICE_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpuslice::memcap {
namespace {

// ---------------------------------------------------------------------------------------------
// Logging: straight to fd 2, no stdio buffering (the process may be dying or forking).
void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Log(const char* fmt, ...) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "gpuslice-memcap[%d]: ", static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - static_cast<std::size_t>(n) - 1, fmt, ap);
  va_end(ap);
  std::size_t len = static_cast<std::size_t>(n) +
                    (m < 0 ? 0 : (static_cast<std::size_t>(m) < sizeof buf - n - 1
                                      ? static_cast<std::size_t>(m)
                                      : sizeof buf - n - 2));
  buf[len++] = '\n';
  ssize_t rc = write(2, buf, len);
  (void)rc;
}

// ---------------------------------------------------------------------------------------------
// The real dlsym and the real driver.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn g_real_dlsym = nullptr;

DlsymFn RealDlsym() {
  DlsymFn f = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
  if (f != nullptr) return f;
  // Default version first (glibc >= 2.34), then the base versions of x86_64 and aarch64.
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  for (const char* version : kVersions) {
    f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", version));
    if (f != nullptr) break;
  }
  __atomic_store_n(&g_real_dlsym, f, __ATOMIC_RELEASE);
  return f;
}

void* g_driver = nullptr;

// libcuda.so.1 as loaded by the process. With `load`, loads it if the process has not yet (a hook
// was called, so the program links or dlopened a driver); without, only finds it.
void* DriverHandle(bool load) {
  void* h = __atomic_load_n(&g_driver, __ATOMIC_ACQUIRE);
  if (h != nullptr) return h;
  h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr && load) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h != nullptr) {
    void* expected = nullptr;
    if (!__atomic_compare_exchange_n(&g_driver, &expected, h, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
      dlclose(h);  // another thread won; drop our extra reference
      h = expected;
    }
  }
  return h;
}

// ---------------------------------------------------------------------------------------------
// Hook table: every intercepted entry point, its hook and (once resolved) the real function.
enum Hook : int {
  kMemAlloc,
  kMemAllocPitch,
  kMemAllocManaged,
  kMemAllocAsync,
  kMemAllocAsyncPtsz,
  kMemAllocFromPoolAsync,
  kMemAllocFromPoolAsyncPtsz,
  kMemFree,
  kMemFreeAsync,
  kMemFreeAsyncPtsz,
  kMemCreate,
  kMemRelease,
  kArrayCreate,
  kArray3DCreate,
  kArrayDestroy,
  kMipmappedArrayCreate,
  kMipmappedArrayDestroy,
  kMemGetInfo,
  kDeviceTotalMem,
  kGetProcAddress,
  kGetProcAddressV2,
  kMemPoolSetAttribute,
  kGraphAddMemAllocNode,
  kGraphAddNode,
  kGraphAddNodeV2,
  kGraphDestroy,
  kHookCount
};

struct HookEntry {
  const char* name;  // the driver's export
  void* hook;        // filled by the static initialiser below
  void* real;        // resolved lazily; never one of our hooks
  // How cuGetProcAddress names it: base name, the CUDA version from which a request gets this
  // ABI (cudaTypedefs.h's PFN_<base>_v<version>), the version from which it no longer does
  // (0: none known), and whether it is the per-thread-stream (_ptsz) variant.
  const char* base;
  int since;
  int until;
  bool ptsz;
};

HookEntry g_hooks[kHookCount];  // names and hooks set in InitHookTable (constructor)

// Cached for entry points the driver does not export (e.g. older drivers).
void* const kMissing = reinterpret_cast<void*>(std::uintptr_t{1});

void* Real(Hook h) {
  void* p = __atomic_load_n(&g_hooks[h].real, __ATOMIC_ACQUIRE);
  if (p != nullptr) return p == kMissing ? nullptr : p;
  DlsymFn real_dlsym = RealDlsym();
  void* driver = DriverHandle(/*load=*/true);
  if (real_dlsym == nullptr || driver == nullptr || g_hooks[h].name == nullptr) return nullptr;
  p = real_dlsym(driver, g_hooks[h].name);
  if (p == g_hooks[h].hook) p = nullptr;  // never call ourselves
  __atomic_store_n(&g_hooks[h].real, p == nullptr ? kMissing : p, __ATOMIC_RELEASE);
  return p;
}

// The hook whose real function is `p`, or nullptr. Resolves the real functions as needed, but
// without loading the driver (a lookup that did not come from the driver cannot match).
void* HookForReal(void* p) {
  if (p == nullptr || DriverHandle(/*load=*/false) == nullptr) return nullptr;
  for (int i = 0; i < kHookCount; ++i) {
    if (g_hooks[i].hook == p) return p;  // already ours
    if (Real(static_cast<Hook>(i)) == p) return g_hooks[i].hook;
  }
  return nullptr;
}

// The hook exported under `name`, or nullptr when the name is not intercepted.
void* HookNamed(const char* name) {
  if (name == nullptr || name[0] != 'c' || name[1] != 'u') return nullptr;
  for (const HookEntry& e : g_hooks) {
    if (e.name != nullptr && std::strcmp(e.name, name) == 0) return e.hook;
  }
  return nullptr;
}

// The newest CUDA version whose cuda.h/cudaTypedefs.h the table was checked against: no hooked
// entry point has a newer ABI there (CUDA 13.0).
constexpr int kNewestCheckedCudaVersion = 13000;

// The hook for what cuGetProcAddress was asked, by name: the entry whose base name matches, whose
// ABI covers `version`, and whose stream variant the flags select (at the driver, DEFAULT is the
// legacy stream: cuda.h's per-thread build adds the PER_THREAD flag itself). kHookCount if none.
Hook HookForRequest(const char* symbol, int version, cuuint64_t flags) {
  if (symbol == nullptr || symbol[0] != 'c' || symbol[1] != 'u') return kHookCount;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  Hook legacy = kHookCount;
  for (int i = 0; i < kHookCount; ++i) {
    const HookEntry& e = g_hooks[i];
    if (e.base == nullptr || std::strcmp(e.base, symbol) != 0) continue;
    if (version < e.since || (e.until != 0 && version >= e.until)) continue;
    if (e.ptsz && per_thread) return static_cast<Hook>(i);
    if (!e.ptsz) legacy = static_cast<Hook>(i);
  }
  return legacy;  // functions without a stream have no _ptsz variant: the flags do not matter
}

// The real function of `h` as the driver returned it, for a hook whose export is missing.
void AdoptReal(Hook h, void* p) {
  if (p == nullptr || p == g_hooks[h].hook || Real(h) != nullptr) return;
  __atomic_store_n(&g_hooks[h].real, p, __ATOMIC_RELEASE);
}

// ---------------------------------------------------------------------------------------------
// Per-process accounting state.
struct Process {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;  // guards claiming and the tables
  bool enabled = false;      // a cap is set; otherwise every hook is a pass-through
  bool exiting = false;      // set by the destructor: stop accounting
  std::int64_t cap = 0;
  std::int64_t context_bytes = 0;  // charged to each process once, for its CUDA context
  const char* slice = nullptr;
  Segment* seg = nullptr;
  int slot = -1;             // -1 until the first accounted call (and after fork in the child)
  std::int32_t pid = 0;
  bool warned_refusal = false;
  bool warned_pool = false;
  bool log_all = false;
  PtrTable ptrs;             // device pointers: cuMemAlloc*, cuMemAllocManaged, async, pools
  PtrTable arrays;           // CUarray, CUmipmappedArray
  PtrTable handles;          // CUmemGenericAllocationHandle
  PtrTable graphs;           // CUgraph -> bytes of its memory allocation nodes
};

// Never destroyed: hooks may run during and after static destruction.
alignas(Process) unsigned char g_process_storage[sizeof(Process)];
Process* g_process = nullptr;
pthread_once_t g_once = PTHREAD_ONCE_INIT;

void AtForkChild() {
  // The child is a new process: it gets its own slot on its first allocation, and the parent's
  // allocations are not its own.
  Process& p = *g_process;
  pthread_mutex_init(&p.mu, nullptr);
  __atomic_store_n(&p.slot, -1, __ATOMIC_RELEASE);
  p.ptrs.~PtrTable();
  new (&p.ptrs) PtrTable();
  p.arrays.~PtrTable();
  new (&p.arrays) PtrTable();
  p.handles.~PtrTable();
  new (&p.handles) PtrTable();
  p.graphs.~PtrTable();
  new (&p.graphs) PtrTable();
}

void InitProcess() {
  g_process = new (g_process_storage) Process();
  const char* cap_text = std::getenv("GPUSLICE_MEMCAP_BYTES");
  if (cap_text == nullptr || cap_text[0] == '\0') return;
  std::int64_t cap = 0;
  if (!ParseEnvBytes(cap_text, &cap)) {
    Log("GPUSLICE_MEMCAP_BYTES='%s' is not a byte count; memory cap NOT enforced", cap_text);
    return;
  }
  if (cap == 0) return;
  Process& p = *g_process;
  p.cap = cap;
  // An unreadable charge is ignored (not a reason to drop the cap); an overflowing one used to
  // become LLONG_MAX, overflow the slice's shared usage and leave the slice refusing everything.
  if (const char* ctx = std::getenv("GPUSLICE_MEMCAP_CONTEXT_BYTES"); ctx != nullptr && *ctx) {
    std::int64_t v = 0;
    if (ParseEnvBytes(ctx, &v) && v > 0) p.context_bytes = v;
  }
  p.slice = std::getenv("GPUSLICE_SLICE");
  const char* log = std::getenv("GPUSLICE_MEMCAP_LOG");
  p.log_all = log != nullptr && log[0] != '\0' && log[0] != '0';
  p.enabled = true;
  pthread_atfork(nullptr, nullptr, &AtForkChild);
}

Process* Proc() {
  pthread_once(&g_once, &InitProcess);
  Process* p = g_process;
  return (p->enabled && !__atomic_load_n(&p->exiting, __ATOMIC_ACQUIRE)) ? p : nullptr;
}

// Maps the slice's segment (or a private one when there is no slice key or the shared one cannot
// be opened: the cap then holds per process) and claims this process's slot. Returns the slot,
// or -1 when every slot of the slice belongs to a live process.
int ClaimLocked(Process& p) {
  if (p.seg == nullptr && p.slice != nullptr && p.slice[0] != '\0') {
    char name[128];
    if (FormatSegmentName(p.slice, std::strlen(p.slice), name, sizeof name)) {
      p.seg = MapSegment(name, p.cap, /*create=*/true);
      if (p.seg == nullptr) {
        Log("cannot open shared segment %s (%s); enforcing the cap per process", name,
            std::strerror(errno));
      }
    }
  }
  if (p.seg == nullptr) {
    void* mem = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (mem == MAP_FAILED) return -1;
    p.seg = static_cast<Segment*>(mem);
    if (!InitSegment(p.seg, p.cap)) return -1;
  }
  p.pid = static_cast<std::int32_t>(getpid());
  int slot = ClaimSlot(p.seg, p.pid, ProcessStartTime(p.pid), &ProcessAlive);
  // The context already exists (or is being made): charge it unconditionally. It only lowers
  // what the slice's allocations may still take.
  if (slot >= 0 && p.context_bytes > 0) Adjust(p.seg, slot, p.pid, p.context_bytes);
  __atomic_store_n(&p.slot, slot, __ATOMIC_RELEASE);
  return slot;
}

int SlotOf(Process& p) {
  int slot = __atomic_load_n(&p.slot, __ATOMIC_ACQUIRE);
  if (slot >= 0) return slot;
  pthread_mutex_lock(&p.mu);
  slot = p.slot >= 0 ? p.slot : ClaimLocked(p);
  pthread_mutex_unlock(&p.mu);
  return slot;
}

void LogRefusal(Process& p, const char* call, std::int64_t bytes) {
  if (p.warned_refusal && !p.log_all) return;
  p.warned_refusal = true;
  Log("%s of %lld bytes refused: slice '%s' would exceed its cap of %lld bytes "
      "(CUDA_ERROR_OUT_OF_MEMORY)",
      call, static_cast<long long>(bytes), p.slice != nullptr ? p.slice : "", 
      static_cast<long long>(p.seg != nullptr ? p.seg->cap : p.cap));
}

// Reserves `bytes` for this process. Returns the slot, or -1 after logging a refusal.
int ReserveOrRefuse(Process& p, const char* call, std::int64_t bytes) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int slot = SlotOf(p);
    if (slot < 0) {
      Log("%s refused: no free process slot in slice '%s'", call, p.slice ? p.slice : "");
      return -1;
    }
    switch (Reserve(p.seg, slot, p.pid, bytes, &ProcessAlive)) {
      case ReserveResult::kOk:
        return slot;
      case ReserveResult::kOverCap:
        LogRefusal(p, call, bytes);
        return -1;
      case ReserveResult::kNotOwner:
        // Our slot was reclaimed (we looked dead to someone): claim a fresh one.
        pthread_mutex_lock(&p.mu);
        if (p.slot == slot) __atomic_store_n(&p.slot, -1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&p.mu);
        break;
    }
  }
  return -1;
}

void Remember(Process& p, PtrTable& table, std::uint64_t key, std::int64_t bytes) {
  pthread_mutex_lock(&p.mu);
  table.Put(key, bytes);
  pthread_mutex_unlock(&p.mu);
}

std::int64_t Forget(Process& p, PtrTable& table, std::uint64_t key) {
  pthread_mutex_lock(&p.mu);
  std::int64_t bytes = table.Take(key);
  pthread_mutex_unlock(&p.mu);
  return bytes;
}

// The accounted allocation: reserve, call the driver, then commit and remember the key (or
// cancel). `call` performs the real allocation and returns the key of what it allocated.
template <typename Call>
CUresult Allocate(Process* p, const char* what, std::int64_t bytes, PtrTable Process::*table,
                  Call&& call) {
  if (p == nullptr) {
    std::uint64_t ignored = 0;
    return call(&ignored);
  }
  int slot = ReserveOrRefuse(*p, what, bytes);
  if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::uint64_t key = 0;
  CUresult rc = call(&key);
  if (rc != CUDA_SUCCESS) {
    Cancel(p->seg, slot, p->pid, bytes);
    return rc;
  }
  Commit(p->seg, slot, p->pid, bytes);
  Remember(*p, p->*table, key, bytes);
  return rc;
}

// The accounted free: forget the key first (the address cannot be handed out again until the
// driver frees it), call the driver, then give the bytes back (or remember the key again).
template <typename Call>
CUresult Deallocate(Process* p, std::uint64_t key, PtrTable Process::*table, Call&& call) {
  if (p == nullptr) return call();
  std::int64_t bytes = Forget(*p, p->*table, key);
  CUresult rc = call();
  if (bytes < 0) return rc;  // not ours (allocated before the cap, or untracked)
  if (rc != CUDA_SUCCESS) {
    Remember(*p, p->*table, key, bytes);
    return rc;
  }
  int slot = __atomic_load_n(&p->slot, __ATOMIC_ACQUIRE);
  if (slot >= 0) Release(p->seg, slot, p->pid, bytes);
  return rc;
}

std::int64_t Mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

std::int64_t ArrayBytes(std::size_t width, std::size_t height, std::size_t depth, int format,
                        unsigned channels) {
  std::int64_t element = 4;  // per channel; an over-estimate for compressed and video formats
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      element = 1;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      element = 2;
      break;
    default:
      break;
  }
  std::int64_t n = Mul(static_cast<std::int64_t>(width), static_cast<std::int64_t>(height ? height : 1));
  n = Mul(n, static_cast<std::int64_t>(depth ? depth : 1));
  n = Mul(n, static_cast<std::int64_t>(channels ? channels : 1));
  return Mul(n, element);
}

CUresult NotFound() { return CUDA_ERROR_NOT_FOUND; }

#define REAL(hook, type) reinterpret_cast<type>(Real(hook))

}  // namespace
}  // namespace gpuslice::memcap

using namespace gpuslice::memcap;  // NOLINT: this file defines the exported C functions only

// ---------------------------------------------------------------------------------------------
// Allocation hooks.

GPUSLICE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytesize) {
  auto real = REAL(kMemAlloc, PFN_cuMemAlloc_v2);
  if (real == nullptr) return NotFound();
  return Allocate(Proc(), "cuMemAlloc", static_cast<std::int64_t>(bytesize), &Process::ptrs,
                  [&](std::uint64_t* key) {
                    CUresult rc = real(dptr, bytesize);
                    if (rc == CUDA_SUCCESS && dptr != nullptr) *key = *dptr;
                    return rc;
                  });
}

GPUSLICE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch,
                                            std::size_t width, std::size_t height,
                                            unsigned int element_size) {
  auto real = REAL(kMemAllocPitch, PFN_cuMemAllocPitch_v2);
  if (real == nullptr) return NotFound();
  Process* p = Proc();
  // The pitch is only known afterwards: reserve with the usual 512-byte row alignment, then
  // correct to pitch * height (the correction may overshoot the cap by the alignment slack).
  std::int64_t estimate = Mul(static_cast<std::int64_t>((width + 511) & ~std::size_t{511}),
                              static_cast<std::int64_t>(height));
  CUresult rc = Allocate(p, "cuMemAllocPitch", estimate, &Process::ptrs, [&](std::uint64_t* key) {
    CUresult r = real(dptr, pitch, width, height, element_size);
    if (r == CUDA_SUCCESS && dptr != nullptr) *key = *dptr;
    return r;
  });
  if (rc == CUDA_SUCCESS && p != nullptr && pitch != nullptr && dptr != nullptr) {
    std::int64_t actual = Mul(static_cast<std::int64_t>(*pitch), static_cast<std::int64_t>(height));
    if (actual != estimate) {
      int slot = __atomic_load_n(&p->slot, __ATOMIC_ACQUIRE);
      Adjust(p->seg, slot, p->pid, actual - estimate);
      Remember(*p, p->ptrs, *dptr, actual);
    }
  }
  return rc;
}

GPUSLICE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytesize,
                                           unsigned int flags) {
  auto real = REAL(kMemAllocManaged, PFN_cuMemAllocManaged);
  if (real == nullptr) return NotFound();
  // Counted in full: managed memory can become resident on the device at any time.
  return Allocate(Proc(), "cuMemAllocManaged", static_cast<std::int64_t>(bytesize),
                  &Process::ptrs, [&](std::uint64_t* key) {
                    CUresult rc = real(dptr, bytesize, flags);
                    if (rc == CUDA_SUCCESS && dptr != nullptr) *key = *dptr;
                    return rc;
                  });
}

namespace {
CUresult AllocAsync(Hook h, CUdeviceptr* dptr, std::size_t bytesize, CUstream stream) {
  auto real = REAL(h, PFN_cuMemAllocAsync);
  if (real == nullptr) return NotFound();
  return Allocate(Proc(), "cuMemAllocAsync", static_cast<std::int64_t>(bytesize), &Process::ptrs,
                  [&](std::uint64_t* key) {
                    CUresult rc = real(dptr, bytesize, stream);
                    if (rc == CUDA_SUCCESS && dptr != nullptr) *key = *dptr;
                    return rc;
                  });
}
CUresult AllocFromPool(Hook h, CUdeviceptr* dptr, std::size_t bytesize, CUmemoryPool pool,
                       CUstream stream) {
  auto real = REAL(h, PFN_cuMemAllocFromPoolAsync);
  if (real == nullptr) return NotFound();
  return Allocate(Proc(), "cuMemAllocFromPoolAsync", static_cast<std::int64_t>(bytesize),
                  &Process::ptrs, [&](std::uint64_t* key) {
                    CUresult rc = real(dptr, bytesize, pool, stream);
                    if (rc == CUDA_SUCCESS && dptr != nullptr) *key = *dptr;
                    return rc;
                  });
}
CUresult FreeAsync(Hook h, CUdeviceptr dptr, CUstream stream) {
  auto real = REAL(h, PFN_cuMemFreeAsync);
  if (real == nullptr) return NotFound();
  // Given back when enqueued: the stream will free it before anything enqueued later runs.
  return Deallocate(Proc(), dptr, &Process::ptrs, [&] { return real(dptr, stream); });
}
}  // namespace

GPUSLICE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytesize,
                                         CUstream stream) {
  return AllocAsync(kMemAllocAsync, dptr, bytesize, stream);
}
GPUSLICE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytesize,
                                              CUstream stream) {
  return AllocAsync(kMemAllocAsyncPtsz, dptr, bytesize, stream);
}
GPUSLICE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytesize,
                                                 CUmemoryPool pool, CUstream stream) {
  return AllocFromPool(kMemAllocFromPoolAsync, dptr, bytesize, pool, stream);
}
GPUSLICE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytesize,
                                                      CUmemoryPool pool, CUstream stream) {
  return AllocFromPool(kMemAllocFromPoolAsyncPtsz, dptr, bytesize, pool, stream);
}

GPUSLICE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size,
                                     const CUmemAllocationProp* prop, unsigned long long flags) {
  auto real = REAL(kMemCreate, PFN_cuMemCreate);
  if (real == nullptr) return NotFound();
  // Only device memory counts; host (NUMA) locations are pinned host memory (NCCL uses them).
  // Nothing else of `prop` is read, so an unusual location never makes us touch other fields.
  bool device = prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  return Allocate(device ? Proc() : nullptr, "cuMemCreate", static_cast<std::int64_t>(size),
                  &Process::handles, [&](std::uint64_t* key) {
                    CUresult rc = real(handle, size, prop, flags);
                    if (rc == CUDA_SUCCESS && handle != nullptr) *key = *handle;
                    return rc;
                  });
}

GPUSLICE_EXPORT CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  auto real = REAL(kArrayCreate, PFN_cuArrayCreate_v2);
  if (real == nullptr) return NotFound();
  if (desc == nullptr) return real(handle, desc);
  std::int64_t bytes = ArrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
  return Allocate(Proc(), "cuArrayCreate", bytes, &Process::arrays, [&](std::uint64_t* key) {
    CUresult rc = real(handle, desc);
    if (rc == CUDA_SUCCESS && handle != nullptr) *key = reinterpret_cast<std::uintptr_t>(*handle);
    return rc;
  });
}

GPUSLICE_EXPORT CUresult cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  auto real = REAL(kArray3DCreate, PFN_cuArray3DCreate_v2);
  if (real == nullptr) return NotFound();
  if (desc == nullptr) return real(handle, desc);
  // Depth already counts layers and the 6 faces of a cubemap.
  std::int64_t bytes =
      ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  return Allocate(Proc(), "cuArray3DCreate", bytes, &Process::arrays, [&](std::uint64_t* key) {
    CUresult rc = real(handle, desc);
    if (rc == CUDA_SUCCESS && handle != nullptr) *key = reinterpret_cast<std::uintptr_t>(*handle);
    return rc;
  });
}

// A mipmapped array: every level, each half the size of the one above in width and height (and
// in depth, unless the depth counts layers or cubemap faces), down to 1.
GPUSLICE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle,
                                                const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                unsigned int levels) {
  auto real = REAL(kMipmappedArrayCreate, PFN_cuMipmappedArrayCreate);
  if (real == nullptr) return NotFound();
  if (desc == nullptr) return real(handle, desc, levels);
  const bool layers = (desc->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  std::int64_t bytes = 0;
  std::size_t w = desc->Width, h = desc->Height, d = desc->Depth;
  for (unsigned l = 0; l < (levels == 0 ? 1u : levels) && l < 64; ++l) {
    std::int64_t level = ArrayBytes(w, h, d, desc->Format, desc->NumChannels);
    bytes = __builtin_add_overflow(bytes, level, &bytes) ? INT64_MAX : bytes;
    w = w > 1 ? w / 2 : w;
    h = h > 1 ? h / 2 : h;
    if (!layers) d = d > 1 ? d / 2 : d;
  }
  return Allocate(Proc(), "cuMipmappedArrayCreate", bytes, &Process::arrays, [&](std::uint64_t* key) {
    CUresult rc = real(handle, desc, levels);
    if (rc == CUDA_SUCCESS && handle != nullptr) *key = reinterpret_cast<std::uintptr_t>(*handle);
    return rc;
  });
}

// ---------------------------------------------------------------------------------------------
// Free hooks.

GPUSLICE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  auto real = REAL(kMemFree, PFN_cuMemFree_v2);
  if (real == nullptr) return NotFound();
  return Deallocate(Proc(), dptr, &Process::ptrs, [&] { return real(dptr); });
}
GPUSLICE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return FreeAsync(kMemFreeAsync, dptr, stream);
}
GPUSLICE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return FreeAsync(kMemFreeAsyncPtsz, dptr, stream);
}
GPUSLICE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto real = REAL(kMemRelease, PFN_cuMemRelease);
  if (real == nullptr) return NotFound();
  // The physical memory lives until its last mapping goes too; counting it free at release is
  // the usual VMM pattern (map, release, use, unmap) made slightly optimistic.
  return Deallocate(Proc(), handle, &Process::handles, [&] { return real(handle); });
}
GPUSLICE_EXPORT CUresult cuArrayDestroy(CUarray handle) {
  auto real = REAL(kArrayDestroy, PFN_cuArrayDestroy);
  if (real == nullptr) return NotFound();
  return Deallocate(Proc(), reinterpret_cast<std::uintptr_t>(handle), &Process::arrays,
                    [&] { return real(handle); });
}

GPUSLICE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle) {
  auto real = REAL(kMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy);
  if (real == nullptr) return NotFound();
  return Deallocate(Proc(), reinterpret_cast<std::uintptr_t>(handle), &Process::arrays,
                    [&] { return real(handle); });
}

// ---------------------------------------------------------------------------------------------
// Stream-ordered pools and CUDA graphs: memory a process holds without an allocation call that
// returns it.

// A pool keeps freed memory up to its release threshold instead of giving it back at the next
// synchronisation. Frees count as given back the moment they are made (FreeAsync), so a pool that
// kept them would hold memory its slice's cap no longer counts (PyTorch's cudaMallocAsync backend
// sets the threshold to UINT64_MAX): in a capped process every threshold is lowered to 0, the
// driver's default, and pools release what they keep at each synchronisation.
GPUSLICE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void* value) {
  auto real = REAL(kMemPoolSetAttribute, PFN_cuMemPoolSetAttribute);
  if (real == nullptr) return NotFound();
  Process* p = Proc();
  if (p == nullptr || attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD || value == nullptr) {
    return real(pool, attr, value);
  }
  cuuint64_t asked = 0;
  std::memcpy(&asked, value, sizeof asked);
  if (asked == 0) return real(pool, attr, value);
  if (!__atomic_exchange_n(&p->warned_pool, true, __ATOMIC_ACQ_REL)) {
    Log("a memory pool's release threshold of %llu bytes lowered to 0: memory a pool keeps after "
        "frees is not counted against slice '%s''s cap, so pools give it back at synchronisation",
        static_cast<unsigned long long>(asked), p->slice != nullptr ? p->slice : "");
  }
  cuuint64_t zero = 0;
  return real(pool, attr, &zero);
}

namespace {
// A graph's memory allocation nodes are charged to the graph when they are added (the driver
// allocates them from the device's graph memory pool when the graph runs, and keeps that memory
// between launches) and given back when the graph is destroyed. Conservative: memory a graph frees
// inside itself stays charged until then.
template <typename Call>
CUresult AddAllocNode(const char* what, CUgraph graph, std::size_t bytesize, Call&& call) {
  Process* p = Proc();
  if (p == nullptr || graph == nullptr) return call();
  const auto bytes = static_cast<std::int64_t>(bytesize);
  int slot = ReserveOrRefuse(*p, what, bytes);
  if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    Cancel(p->seg, slot, p->pid, bytes);
    return rc;
  }
  Commit(p->seg, slot, p->pid, bytes);
  const auto key = reinterpret_cast<std::uintptr_t>(graph);
  pthread_mutex_lock(&p->mu);
  const std::int64_t held = p->graphs.Take(key);
  p->graphs.Put(key, (held > 0 ? held : 0) + bytes);
  pthread_mutex_unlock(&p->mu);
  return rc;
}
}  // namespace

GPUSLICE_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                std::size_t num_deps, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  auto real = REAL(kGraphAddMemAllocNode, PFN_cuGraphAddMemAllocNode);
  if (real == nullptr) return NotFound();
  if (params == nullptr) return real(node, graph, deps, num_deps, params);
  return AddAllocNode("cuGraphAddMemAllocNode", graph, params->bytesize,
                      [&] { return real(node, graph, deps, num_deps, params); });
}

GPUSLICE_EXPORT CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                        std::size_t num_deps, CUgraphNodeParams* params) {
  auto real = REAL(kGraphAddNode, PFN_cuGraphAddNode);
  if (real == nullptr) return NotFound();
  if (params == nullptr || params->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    return real(node, graph, deps, num_deps, params);
  }
  return AddAllocNode("cuGraphAddNode", graph, params->alloc.bytesize,
                      [&] { return real(node, graph, deps, num_deps, params); });
}

GPUSLICE_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                           const void* edge_data, std::size_t num_deps,
                                           CUgraphNodeParams* params) {
  auto real = REAL(kGraphAddNodeV2, PFN_cuGraphAddNode_v2);
  if (real == nullptr) return NotFound();
  if (params == nullptr || params->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    return real(node, graph, deps, edge_data, num_deps, params);
  }
  return AddAllocNode("cuGraphAddNode", graph, params->alloc.bytesize,
                      [&] { return real(node, graph, deps, edge_data, num_deps, params); });
}

GPUSLICE_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  auto real = REAL(kGraphDestroy, PFN_cuGraphDestroy);
  if (real == nullptr) return NotFound();
  return Deallocate(Proc(), reinterpret_cast<std::uintptr_t>(graph), &Process::graphs,
                    [&] { return real(graph); });
}

// ---------------------------------------------------------------------------------------------
// cuMemGetInfo: the slice's view. total = min(cap, device total); free = what is left of the cap
// after every live process of the slice, never more than the device really has free. Never an
// error because usage is above the cap (it can be, by pitch slack): free is then 0.

GPUSLICE_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  auto real = REAL(kMemGetInfo, PFN_cuMemGetInfo_v2);
  if (real == nullptr) return NotFound();
  CUresult rc = real(free_bytes, total_bytes);
  Process* p = Proc();
  if (rc != CUDA_SUCCESS || p == nullptr || free_bytes == nullptr || total_bytes == nullptr) {
    return rc;
  }
  if (SlotOf(*p) < 0) return rc;
  Snapshot snap = Read(p->seg, &ProcessAlive);
  std::size_t total = static_cast<std::size_t>(snap.cap) < *total_bytes
                          ? static_cast<std::size_t>(snap.cap) : *total_bytes;
  std::size_t used = snap.used > 0 ? static_cast<std::size_t>(snap.used) : 0;
  std::size_t free = total > used ? total - used : 0;
  if (free > *free_bytes) free = *free_bytes;
  *free_bytes = free;
  *total_bytes = total;
  return rc;
}

// cuDeviceTotalMem (and so cudaDeviceProp::totalGlobalMem): min(cap, device total), because
// frameworks size their memory pools as a fraction of it.
GPUSLICE_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice device) {
  auto real = REAL(kDeviceTotalMem, PFN_cuDeviceTotalMem_v2);
  if (real == nullptr) return NotFound();
  CUresult rc = real(bytes, device);
  Process* p = Proc();
  if (rc != CUDA_SUCCESS || p == nullptr || bytes == nullptr) return rc;
  std::int64_t cap = p->seg != nullptr ? p->seg->cap : p->cap;
  if (static_cast<std::size_t>(cap) < *bytes) *bytes = static_cast<std::size_t>(cap);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// Entry-point lookups.

namespace {
// After the driver answered `symbol` at `cuda_version` with *pfn: swaps in the hook that the
// request names. `again(version, &p)` asks the driver the same at another version.
template <typename Again>
void SubstituteHook(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags, Again&& again) {
  Hook h = HookForRequest(symbol, cuda_version, flags);
  if (h == kHookCount) {
    // Not a name we map at this version; an exported hooked function still gets its hook.
    if (void* hook = HookForReal(*pfn); hook != nullptr) *pfn = hook;
    return;
  }
  if (cuda_version > kNewestCheckedCudaVersion) {
    // Same entry point as at the newest version we know: the same ABI. A different one is a
    // newer ABI that this library cannot call: leave it, and say the cap does not cover it.
    void* known = nullptr;
    if (!again(kNewestCheckedCudaVersion, &known) || known != *pfn) {
      Log("cuGetProcAddress(%s, %d): the driver returns another entry point than at version %d (a newer ABI); not "
          "intercepted, allocations through it are NOT capped", symbol, cuda_version,
          kNewestCheckedCudaVersion);
      return;
    }
  }
  AdoptReal(h, *pfn);
  *pfn = g_hooks[h].hook;
}
}  // namespace

GPUSLICE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                          cuuint64_t flags) {
  auto real = REAL(kGetProcAddress, PFN_cuGetProcAddress);
  if (real == nullptr) return NotFound();
  CUresult rc = real(symbol, pfn, cuda_version, flags);
  if (rc == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) {
    SubstituteHook(symbol, pfn, cuda_version, flags, [&](int version, void** out) {
      return real(symbol, out, version, flags) == CUDA_SUCCESS;
    });
  }
  return rc;
}

GPUSLICE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                             cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* status) {
  auto real = REAL(kGetProcAddressV2, PFN_cuGetProcAddress_v2);
  if (real == nullptr) return NotFound();
  CUresult rc = real(symbol, pfn, cuda_version, flags, status);
  if (rc == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr &&
      (status == nullptr || *status == CU_GET_PROC_ADDRESS_SUCCESS)) {
    SubstituteHook(symbol, pfn, cuda_version, flags, [&](int version, void** out) {
      CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
      return real(symbol, out, version, flags, &st) == CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SUCCESS;
    });
  }
  return rc;
}
// No cuGetProcAddress_v2_ptsz: it is a static inline in cuda.h that calls cuGetProcAddress_v2
// with the per-thread flag, not a driver symbol.

// dlsym. Lookups that yield a real driver entry point we hook get the hook.
// RTLD_NEXT of a hooked name, once the driver is loaded, always gets the hook: from a library
// whose own dependencies include libcuda, "the next definition" would otherwise be the real
// driver function (a one-line way around the cap). That is safe for an interposer layered on
// top of us too: it chains into our hook, which calls the driver directly.
// Any other RTLD_NEXT lookup must be resolved relative to the *caller*, which glibc finds from
// the return address, so it is a tail call (compiled to a jump: the return address stays the
// caller's).
GPUSLICE_EXPORT void* dlsym(void* handle, const char* name) {
  DlsymFn real = RealDlsym();
  void* hook = HookNamed(name);
  if (handle == RTLD_NEXT) {
    if (hook != nullptr && DriverHandle(/*load=*/false) != nullptr) return hook;
    return real(handle, name);
  }
  void* p = real(handle, name);
  if (p != nullptr && hook != nullptr) {
    if (void* substitute = HookForReal(p); substitute != nullptr) return substitute;
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Library lifetime.

namespace {

__attribute__((constructor)) void InitHookTable() {
  const struct {
    Hook id;
    const char* name;
    void* hook;
    const char* base;
    int since, until;
    bool ptsz;
  } table[] = {
      {kMemAlloc, "cuMemAlloc_v2", reinterpret_cast<void*>(&cuMemAlloc_v2), "cuMemAlloc", 3020, 0, false},
      {kMemAllocPitch, "cuMemAllocPitch_v2", reinterpret_cast<void*>(&cuMemAllocPitch_v2), "cuMemAllocPitch",
       3020, 0, false},
      {kMemAllocManaged, "cuMemAllocManaged", reinterpret_cast<void*>(&cuMemAllocManaged), "cuMemAllocManaged",
       6000, 0, false},
      {kMemAllocAsync, "cuMemAllocAsync", reinterpret_cast<void*>(&cuMemAllocAsync), "cuMemAllocAsync", 11020, 0,
       false},
      {kMemAllocAsyncPtsz, "cuMemAllocAsync_ptsz", reinterpret_cast<void*>(&cuMemAllocAsync_ptsz),
       "cuMemAllocAsync", 11020, 0, true},
      {kMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", reinterpret_cast<void*>(&cuMemAllocFromPoolAsync),
       "cuMemAllocFromPoolAsync", 11020, 0, false},
      {kMemAllocFromPoolAsyncPtsz, "cuMemAllocFromPoolAsync_ptsz",
       reinterpret_cast<void*>(&cuMemAllocFromPoolAsync_ptsz), "cuMemAllocFromPoolAsync", 11020, 0, true},
      {kMemFree, "cuMemFree_v2", reinterpret_cast<void*>(&cuMemFree_v2), "cuMemFree", 3020, 0, false},
      {kMemFreeAsync, "cuMemFreeAsync", reinterpret_cast<void*>(&cuMemFreeAsync), "cuMemFreeAsync", 11020, 0,
       false},
      {kMemFreeAsyncPtsz, "cuMemFreeAsync_ptsz", reinterpret_cast<void*>(&cuMemFreeAsync_ptsz), "cuMemFreeAsync",
       11020, 0, true},
      {kMemCreate, "cuMemCreate", reinterpret_cast<void*>(&cuMemCreate), "cuMemCreate", 10020, 0, false},
      {kMemRelease, "cuMemRelease", reinterpret_cast<void*>(&cuMemRelease), "cuMemRelease", 10020, 0, false},
      {kArrayCreate, "cuArrayCreate_v2", reinterpret_cast<void*>(&cuArrayCreate_v2), "cuArrayCreate", 3020, 0,
       false},
      {kArray3DCreate, "cuArray3DCreate_v2", reinterpret_cast<void*>(&cuArray3DCreate_v2), "cuArray3DCreate",
       3020, 0, false},
      {kArrayDestroy, "cuArrayDestroy", reinterpret_cast<void*>(&cuArrayDestroy), "cuArrayDestroy", 2000, 0,
       false},
      {kMipmappedArrayCreate, "cuMipmappedArrayCreate", reinterpret_cast<void*>(&cuMipmappedArrayCreate),
       "cuMipmappedArrayCreate", 5000, 0, false},
      {kMipmappedArrayDestroy, "cuMipmappedArrayDestroy", reinterpret_cast<void*>(&cuMipmappedArrayDestroy),
       "cuMipmappedArrayDestroy", 5000, 0, false},
      {kMemGetInfo, "cuMemGetInfo_v2", reinterpret_cast<void*>(&cuMemGetInfo_v2), "cuMemGetInfo", 3020, 0, false},
      {kDeviceTotalMem, "cuDeviceTotalMem_v2", reinterpret_cast<void*>(&cuDeviceTotalMem_v2), "cuDeviceTotalMem",
       3020, 0, false},
      {kGetProcAddress, "cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress), "cuGetProcAddress",
       11030, 12000, false},
      {kGetProcAddressV2, "cuGetProcAddress_v2", reinterpret_cast<void*>(&cuGetProcAddress_v2),
       "cuGetProcAddress", 12000, 0, false},
      {kMemPoolSetAttribute, "cuMemPoolSetAttribute", reinterpret_cast<void*>(&cuMemPoolSetAttribute),
       "cuMemPoolSetAttribute", 11020, 0, false},
      {kGraphAddMemAllocNode, "cuGraphAddMemAllocNode", reinterpret_cast<void*>(&cuGraphAddMemAllocNode),
       "cuGraphAddMemAllocNode", 11040, 0, false},
      {kGraphAddNode, "cuGraphAddNode", reinterpret_cast<void*>(&cuGraphAddNode), "cuGraphAddNode", 12020,
       12030, false},
      {kGraphAddNodeV2, "cuGraphAddNode_v2", reinterpret_cast<void*>(&cuGraphAddNode_v2), "cuGraphAddNode",
       12030, 0, false},
      {kGraphDestroy, "cuGraphDestroy", reinterpret_cast<void*>(&cuGraphDestroy), "cuGraphDestroy", 10000, 0,
       false},
  };
  for (const auto& e : table) {
    g_hooks[e.id].name = e.name;
    g_hooks[e.id].hook = e.hook;
    g_hooks[e.id].base = e.base;
    g_hooks[e.id].since = e.since;
    g_hooks[e.id].until = e.until;
    g_hooks[e.id].ptsz = e.ptsz;
  }
}

// At a clean exit the process's bytes go back to the slice at once instead of when a neighbour
// next finds the pid dead. Later hooks (other atexit handlers) stop accounting.
__attribute__((destructor)) void ReleaseAtExit() {
  Process* p = g_process;
  if (p == nullptr || !p->enabled) return;
  __atomic_store_n(&p->exiting, true, __ATOMIC_RELEASE);
  int slot = __atomic_load_n(&p->slot, __ATOMIC_ACQUIRE);
  if (slot >= 0 && p->pid == static_cast<std::int32_t>(getpid())) ReleaseSlot(p->seg, slot, p->pid);
}

}  // namespace
