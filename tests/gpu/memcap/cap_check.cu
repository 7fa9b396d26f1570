// Real-GPU check of libgpuslice-cuda (run by tests/gpu/memcap.sh, built with nvcc there).
//
//   cap_check hog                 allocates 64 MiB chunks with cudaMalloc, then cudaMallocAsync,
//                                 until each fails; passes if the failure is a clean
//                                 cudaErrorMemoryAllocation at or below the cap, cudaMemGetInfo
//                                 reports the cap, and the process can still allocate and compute
//                                 after freeing.
//   cap_check neighbour SECS MIB  holds MIB of device memory and runs a checked kernel in a loop
//                                 for SECS seconds; passes if every result is right.
// The cap comes from GPUSLICE_MEMCAP_BYTES, as the interposer reads it.
// Exit 0 = pass, 1 = fail; one summary line on stdout.

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

__global__ void AddOne(int* data, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) data[i] += 1;
}

// Runs AddOne `rounds` times over n ints and checks the result. True if right.
bool Compute(int* dev, size_t n, int rounds) {
  if (cudaMemset(dev, 0, n * sizeof(int)) != cudaSuccess) return false;
  unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  for (int r = 0; r < rounds; ++r) AddOne<<<blocks, 256>>>(dev, n);
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  std::vector<int> host(n);
  if (cudaMemcpy(host.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) {
    return false;
  }
  for (int v : host) {
    if (v != rounds) return false;
  }
  return true;
}

long long Cap() {
  const char* v = std::getenv("GPUSLICE_MEMCAP_BYTES");
  return v != nullptr ? std::atoll(v) : 0;
}

int Hog() {
  const long long cap = Cap();
  const size_t chunk = 64ull << 20;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    std::printf("FAIL hog: cudaMemGetInfo failed\n");
    return 1;
  }
  if (cap > 0 && static_cast<long long>(total_bytes) != cap) {
    std::printf("FAIL hog: cudaMemGetInfo total %zu, cap %lld\n", total_bytes, cap);
    return 1;
  }
  // 1. cudaMalloc until refused.
  std::vector<void*> blocks;
  cudaError_t err = cudaSuccess;
  for (;;) {
    void* p = nullptr;
    err = cudaMalloc(&p, chunk);
    if (err != cudaSuccess) break;
    blocks.push_back(p);
    if (blocks.size() > (1u << 20)) break;  // never: the cap must stop us
  }
  long long allocated = static_cast<long long>(blocks.size() * chunk);
  if (err != cudaErrorMemoryAllocation) {
    std::printf("FAIL hog: cudaMalloc failed with %s, not cudaErrorMemoryAllocation\n",
                cudaGetErrorName(err));
    return 1;
  }
  cudaGetLastError();  // clear the sticky-free error state of the runtime
  if (cap > 0 && allocated > cap) {
    // The hooks were not reached: see "How calls reach the hooks" in docs/memcap.md.
    std::printf("FAIL hog: allocated %lld bytes past the cap %lld\n", allocated, cap);
    return 1;
  }
  if (cap > 0 && allocated + static_cast<long long>(2 * chunk) < cap) {
    std::printf("FAIL hog: refused after only %lld bytes of a %lld-byte cap\n", allocated, cap);
    return 1;
  }
  // 2. After freeing, the process works normally.
  for (void* p : blocks) cudaFree(p);
  blocks.clear();
  int* work = nullptr;
  const size_t n = 1 << 20;
  if (cudaMalloc(&work, n * sizeof(int)) != cudaSuccess || !Compute(work, n, 10)) {
    std::printf("FAIL hog: could not allocate or compute after the refusal\n");
    return 1;
  }
  cudaFree(work);
  // 3. Stream-ordered allocations are capped as well.
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  std::vector<void*> async_blocks;
  cudaError_t async_err = cudaSuccess;
  for (;;) {
    void* p = nullptr;
    async_err = cudaMallocAsync(&p, chunk, stream);
    if (async_err != cudaSuccess) break;
    async_blocks.push_back(p);
    if (async_blocks.size() > (1u << 20)) break;
  }
  long long async_allocated = static_cast<long long>(async_blocks.size() * chunk);
  cudaGetLastError();
  for (void* p : async_blocks) cudaFreeAsync(p, stream);
  cudaStreamSynchronize(stream);
  if (async_err != cudaErrorMemoryAllocation || (cap > 0 && async_allocated > cap)) {
    std::printf("FAIL hog: cudaMallocAsync stopped with %s after %lld bytes (cap %lld)\n",
                cudaGetErrorName(async_err), async_allocated, cap);
    return 1;
  }
  std::printf("OK hog: cudaMalloc refused after %lld bytes, cudaMallocAsync after %lld bytes, "
              "cap %lld, total reported %zu\n", allocated, async_allocated, cap, total_bytes);
  return 0;
}

int Neighbour(int seconds, long long mib) {
  size_t n = static_cast<size_t>(mib) * (1 << 20) / sizeof(int);
  int* dev = nullptr;
  if (cudaMalloc(&dev, n * sizeof(int)) != cudaSuccess) {
    std::printf("FAIL neighbour: could not allocate %lld MiB\n", mib);
    return 1;
  }
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int loops = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (!Compute(dev, n, 5)) {
      std::printf("FAIL neighbour: wrong result or CUDA error in loop %d\n", loops);
      return 1;
    }
    ++loops;
  }
  cudaFree(dev);
  std::printf("OK neighbour: %d checked loops over %lld MiB\n", loops, mib);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "hog") == 0) return Hog();
  if (argc >= 4 && std::strcmp(argv[1], "neighbour") == 0) {
    return Neighbour(std::atoi(argv[2]), std::atoll(argv[3]));
  }
  std::fprintf(stderr, "usage: cap_check hog | cap_check neighbour SECONDS MIB\n");
  return 2;
}
