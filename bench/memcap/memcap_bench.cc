// Added cost of libgpuslice-cuda per allocation call, against the fake libcuda.so.1.
//
// The benchmark runs itself twice as a worker process in the same run: once with no preload
// (the baseline: the fake driver's own cost, a small malloc/free) and once with the interposer
// preloaded through SliceEnvironment() and a cap large enough never to refuse. Each worker times
// N pairs of cuMemAlloc_v2 + cuMemFree_v2 (1 KiB) through the linked entry points, and N
// cuMemAlloc_v2 calls through a pointer from cuGetProcAddress_v2 (the CUDA 12 runtime's path).
// Prints both figures, the difference per call and the ratio. Target: < 1 us added per call.

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "memcap/cuda_abi.h"
#include "memcap/env.h"
#include "tests/memcap/child_process.h"

extern "C" {
CUresult cuMemAlloc_v2(CUdeviceptr*, std::size_t);
CUresult cuMemFree_v2(CUdeviceptr);
}

namespace {

constexpr int kIterations = 64 * 1600;  // alloc+free pairs per repetition
constexpr std::size_t kBytes = 1024;  // small: the fake's malloc stays below glibc's trim threshold

double NowNs() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Worker: prints "<ns per alloc+free pair, linked> <ns per alloc+free pair, via cuGetProcAddress>".
int Worker() {
  // 64 live allocations at a time: the interposer's table and the fake's heap stay warm, so
  // the figure is the per-call cost, not page faults.
  std::vector<CUdeviceptr> ptrs(64);
  auto run = [&](PFN_cuMemAlloc_v2 alloc, PFN_cuMemFree_v2 release) {
    double best = 1e300;
    for (int rep = 0; rep < 5; ++rep) {  // best of 5 damps noise from the shared machine
      double t0 = NowNs();
      for (int i = 0; i < kIterations; i += static_cast<int>(ptrs.size())) {
        for (CUdeviceptr& p : ptrs) {
          if (alloc(&p, kBytes) != CUDA_SUCCESS) std::abort();
        }
        for (CUdeviceptr p : ptrs) release(p);
      }
      double per_pair = (NowNs() - t0) / kIterations;
      if (per_pair < best) best = per_pair;
    }
    return best;
  };
  double linked = run(&cuMemAlloc_v2, &cuMemFree_v2);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v2>(dlsym(driver, "cuGetProcAddress_v2"));
  void* a = nullptr;
  void* f = nullptr;
  CUdriverProcAddressQueryResult st;
  if (gpa == nullptr || gpa("cuMemAlloc", &a, 12000, 0, &st) != CUDA_SUCCESS ||
      gpa("cuMemFree", &f, 12000, 0, &st) != CUDA_SUCCESS) {
    return 1;
  }
  double proc = run(reinterpret_cast<PFN_cuMemAlloc_v2>(a), reinterpret_cast<PFN_cuMemFree_v2>(f));
  std::printf("%.1f %.1f\n", linked, proc);
  return 0;
}

bool Measure(const gpuslice::memcap::testing::EnvList& env, double* linked, double* proc) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return false;
  self[n] = '\0';
  gpuslice::memcap::testing::ChildProcess worker(self, env, {"--worker"});
  std::string line = worker.Send("go");
  worker.Finish();
  return std::sscanf(line.c_str(), "%lf %lf", linked, proc) == 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) return Worker();
  std::string slice = "bench-" + std::to_string(getpid());
  auto preload_env = gpuslice::memcap::SliceEnvironment(slice, 1LL << 50);
  if (gpuslice::memcap::LibraryPath().empty()) {
    std::fprintf(stderr, "libgpuslice-cuda.so not found (build target gpuslice-cuda)\n");
    return 1;
  }
  double base_linked = 0, base_proc = 0, cap_linked = 0, cap_proc = 0;
  if (!Measure({}, &base_linked, &base_proc) || !Measure(preload_env, &cap_linked, &cap_proc)) {
    std::fprintf(stderr, "worker failed\n");
    return 1;
  }
  (void)gpuslice::memcap::RemoveSliceSegment(slice);
  std::printf("memcap: cost of cuMemAlloc_v2 + cuMemFree_v2 (%zu B) against the fake libcuda, "
              "best of 5 x %d pairs\n", kBytes, kIterations);
  auto row = [](const char* path, double base, double capped) {
    std::printf("  %-20s no preload %7.1f ns/pair   preloaded %7.1f ns/pair   "
                "added %6.1f ns/call   ratio %.2fx\n",
                path, base, capped, (capped - base) / 2, capped / base);
  };
  row("linked symbols", base_linked, cap_linked);
  row("cuGetProcAddress_v2", base_proc, cap_proc);
  double worst = ((cap_linked - base_linked) > (cap_proc - base_proc) ? (cap_linked - base_linked)
                                                                     : (cap_proc - base_proc)) / 2;
  std::printf("  target < 1000 ns added per call: %s (worst %.1f ns)\n",
              worst < 1000 ? "met" : "NOT met", worst);
  return 0;
}
