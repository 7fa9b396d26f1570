// busy: a small CUDA program for tests/gpu/run.sh. Allocates and touches --mem-mib MiB of
// device memory, then keeps the GPU busy with spinning kernels for --seconds, so the agent can
// be checked to attribute its utilisation and memory. Optionally tries one extra allocation
// (--try-alloc-mib) to check an MPS pinned-memory limit. Prints one "key=value" line per fact.
//   busy --seconds 20 --mem-mib 1024 [--try-alloc-mib 4096] [--duty 100]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    cudaError_t err_ = (call);                                                          \
    if (err_ != cudaSuccess) {                                                          \
      std::printf("error=%s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); \
      std::fflush(stdout);                                                              \
      return 2;                                                                         \
    }                                                                                   \
  } while (0)

// Spins for `cycles` SM clock cycles per thread; `sink` keeps the compiler honest.
__global__ void Spin(long long cycles, unsigned long long* sink) {
  const long long start = clock64();
  unsigned long long acc = threadIdx.x;
  while (clock64() - start < cycles) acc = acc * 6364136223846793005ULL + 1442695040888963407ULL;
  if (acc == 42) *sink = acc;
}

int main(int argc, char** argv) {
  double seconds = 10;
  long mem_mib = 256;
  long try_alloc_mib = 0;
  int duty = 100;  // percent of each 100 ms period spent with a kernel running
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--mem-mib")) mem_mib = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--try-alloc-mib")) try_alloc_mib = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--duty")) duty = std::atoi(argv[i + 1]);
    else { std::printf("error=unknown flag %s\n", argv[i]); return 64; }
  }
  CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("pid=%d\ndevice=%s\nsms=%d\nmem_total_mib=%zu\n", getpid(), prop.name, sms, total_b >> 20);

  void* block = nullptr;
  CHECK(cudaMalloc(&block, static_cast<size_t>(mem_mib) << 20));
  CHECK(cudaMemset(block, 0xA5, static_cast<size_t>(mem_mib) << 20));
  unsigned long long* sink = nullptr;
  CHECK(cudaMalloc(&sink, sizeof(*sink)));
  CHECK(cudaDeviceSynchronize());
  std::printf("allocated_mib=%ld\n", mem_mib);

  if (try_alloc_mib > 0) {
    void* extra = nullptr;
    cudaError_t e = cudaMalloc(&extra, static_cast<size_t>(try_alloc_mib) << 20);
    std::printf("try_alloc_mib=%ld\ntry_alloc=%s\n", try_alloc_mib, e == cudaSuccess ? "ok" : "failed");
    if (e == cudaSuccess) cudaFree(extra);
    else cudaGetLastError();  // clear the sticky-free error state
  }
  std::printf("ready=1\n");
  std::fflush(stdout);

  // ~10 ms kernels (2e7 cycles at 1.4-2 GHz SM clocks); enough blocks to cover every SM.
  const long long cycles = 20'000'000;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long launches = 0;
  while (std::chrono::steady_clock::now() < end) {
    const auto period = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - period < std::chrono::milliseconds(duty)) {
      Spin<<<sms * 4, 128>>>(cycles, sink);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      ++launches;
    }
    if (duty < 100) std::this_thread::sleep_for(std::chrono::milliseconds(100 - duty));
  }
  std::printf("launches=%ld\ndone=1\n", launches);
  cudaFree(block);
  cudaFree(sink);
  return 0;
}
