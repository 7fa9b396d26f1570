#pragma once
// Kineto (PyTorch profiler) Chrome-trace reader. Parses `.json` or `.json.gz` files with a
// streaming (SAX) parser and keeps only what the step breakdown needs, in compact integer
// form, so a 100 MB trace costs tens of MB of memory, not a DOM of several GB.
//
// Understands both category vocabularies seen in real traces: the 2021 one (`Operator`,
// `Runtime`, `Kernel`, `Memcpy`, `Memset`) and the current one (`cpu_op`, `user_annotation`,
// `cuda_runtime`, `kernel`, `gpu_memcpy`, `gpu_memset`). `gpu_user_annotation` copies of
// ProfilerStep are ignored. Timestamps (integer or fractional µs) become integer ns once.
//
// Free functions and plain values; thread-compatible.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::profile {

using Nanos = std::int64_t;

// A CPU-side span [start, end) on one thread.
struct CpuSpan {
  Nanos start = 0;
  Nanos end = 0;
  std::int64_t tid = 0;
};

struct ProfilerStep {
  std::int64_t number = -1;  // N of ProfilerStep#N
  Nanos start = 0;
  Nanos end = 0;
  std::int64_t tid = 0;
};

enum class GpuKind : std::uint8_t { kKernel, kMemcpyHtoD, kMemcpyOther, kMemset };

// Per distinct kernel name, classified once (see ClassifyKernelName).
struct KernelClass {
  bool communication = false;  // NCCL/RCCL collective or point-to-point kernel
  bool tensor_core = false;    // name says it runs on tensor cores
  bool tc_eligible = false;    // a GEMM/convolution: could run on tensor cores
};
KernelClass ClassifyKernelName(std::string_view name);

struct GpuEvent {
  Nanos start = 0;
  Nanos end = 0;
  std::int64_t correlation = -1;  // links to the runtime call that launched it; -1 unknown
  std::int32_t name_id = -1;      // index into ParsedTrace::kernel_names (kernels only)
  GpuKind kind = GpuKind::kKernel;
};

// The CUDA/HIP runtime call that launched a GPU event.
struct Launch {
  std::int64_t correlation = 0;
  Nanos start = 0;
  Nanos end = 0;
  std::int64_t tid = 0;
};

struct ParsedTrace {
  std::string path;
  std::string device_name;        // deviceProperties[0].name, may be empty
  Bytes device_memory = 0;        // deviceProperties[0].totalGlobalMem, 0 unknown
  int compute_major = -1;         // -1 unknown (AMD traces give none)
  int rank = -1;                  // distributedInfo.rank, -1 when absent
  int world_size = -1;
  std::vector<ProfilerStep> steps;       // sorted by start
  std::vector<CpuSpan> data_loading;     // enumerate(DataLoader)… / enumerate(DataPipe)…
  std::vector<CpuSpan> optimizer;        // Optimizer.step… / Optimizer.zero_grad…
  std::vector<CpuSpan> backward;         // autograd::engine::evaluate_function…
  std::vector<CpuSpan> synchronisation;  // cuda/hip *Synchronize runtime calls
  std::vector<GpuEvent> gpu;             // sorted by start
  std::vector<Launch> launches;          // sorted by correlation
  std::vector<std::string> kernel_names;
  std::vector<KernelClass> kernel_classes;  // parallel to kernel_names
  Bytes peak_memory_reserved = 0;  // max "Total Reserved"/"Total Allocated" on the GPU, 0 unknown
  std::int64_t events_read = 0;    // complete ("X") events seen
  Nanos first_ts = 0;              // earliest ts of any complete event
  Nanos last_ts = 0;               // latest end

  const Launch* FindLaunch(std::int64_t correlation) const;
};

// Reads one trace file. Errors (InvalidArgument) name the file and, for malformed or
// truncated JSON, the byte offset in the (decompressed) JSON text and what was expected.
// A file that decompresses to more than `max_json_bytes` of JSON is refused once that much was
// read, naming the limit: a small .gz can hold gigabytes (a 1.9 MB file made `profile` take
// 4 GB), and parsed events cost about twice their JSON.
inline constexpr std::size_t kMaxTraceJsonBytes = std::size_t{512} << 20;
Result<ParsedTrace> ParseTraceFile(const std::string& path, std::size_t max_json_bytes = kMaxTraceJsonBytes);
// Same, from JSON text in memory (tests, and the benchmark baseline).
Result<ParsedTrace> ParseTraceText(std::string_view json, std::string name);

}  // namespace gpuslice::profile
