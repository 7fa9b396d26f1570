#include "profile/diagnosis.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include <fmt/format.h>

namespace gpuslice::profile {
namespace {

std::string Pct(double f) { return fmt::format("{:.1f}%", 100.0 * f); }

// Thresholds (see diagnosis.h for where they come from).
constexpr double kInputModerate = 0.05;
constexpr double kInputHigh = 0.20;
constexpr double kLowBusy = 0.50;
constexpr double kShortKernelMajority = 0.50;
constexpr double kEligibleMin = 0.10;
constexpr double kTensorCoreMin = 0.10;
constexpr double kTensorCoreSpeedup = 2.0;  // conservative: V100 FP16 TC 125 vs FP32 15.7 TFLOPS
constexpr double kCommunication = 0.10;
constexpr double kSync = 0.05;
constexpr double kMemory = 0.90;
constexpr double kGpuBound = 0.80;

int Rank(Severity s) { return static_cast<int>(s); }

// The advice depends on the GPU's architecture: bf16 and TF32 need compute capability 8.0
// (Ampere) or newer; 7.x (Volta, Turing) has FP16 tensor cores only; before 7.0 there are no
// tensor cores, and mixed precision saves memory rather than time. -1: not known.
struct Precision {
  std::string autocast;  // the mixed-precision advice
  std::string half;      // the half type to name elsewhere ("bf16", "fp16", "bf16 or fp16")
};
Precision PrecisionFor(int major) {
  if (major >= 8) {
    return {"automatic mixed precision: torch.autocast(\"cuda\", dtype=torch.bfloat16) (or float16 with GradScaler)",
            "bf16"};
  }
  if (major == 7) {
    return {"automatic mixed precision: torch.autocast(\"cuda\", dtype=torch.float16) with "
            "torch.cuda.amp.GradScaler (compute capability 7.x has FP16 tensor cores; no bf16, no TF32)",
            "fp16"};
  }
  if (major >= 0) {
    return {"mixed precision (fp16) saves memory here, not time: compute capability below 7.0 has no tensor cores",
            "fp16"};
  }
  return {"automatic mixed precision: torch.autocast(\"cuda\", dtype=torch.bfloat16) on compute capability 8.0 "
          "or newer, float16 with GradScaler on 7.x",
          "bf16 or fp16"};
}

}  // namespace

int ComputeMajorOf(std::string_view text) {
  std::string t(text);
  for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  // Whole words of the name: "A10" must not match "A100", "L4" not "L40".
  auto names = [&](std::string_view word) {
    for (std::size_t at = t.find(word); at != std::string::npos; at = t.find(word, at + 1)) {
      const bool start = at == 0 || !std::isalnum(static_cast<unsigned char>(t[at - 1]));
      const std::size_t end = at + word.size();
      const bool stop = end >= t.size() || !std::isalnum(static_cast<unsigned char>(t[end]));
      if (start && stop) return true;
    }
    return false;
  };
  // compute capability (developer.nvidia.com/cuda-gpus): 10.0 Blackwell, 9.0 Hopper, 8.x Ampere
  // and Ada, 7.x Volta and Turing, 6.x Pascal.
  static const std::pair<std::string_view, int> kTable[] = {
      {"B200", 10}, {"B100", 10}, {"GB200", 10},
      {"H100", 9}, {"H200", 9}, {"H800", 9}, {"GH200", 9},
      {"A100", 8}, {"A800", 8}, {"A30", 8}, {"A40", 8}, {"A10", 8}, {"A16", 8}, {"A2", 8}, {"L4", 8},
      {"L40", 8}, {"L40S", 8}, {"A6000", 8}, {"A5000", 8}, {"A4000", 8},
      {"V100", 7}, {"T4", 7}, {"TITAN V", 7}, {"TITAN RTX", 7}, {"QUADRO RTX", 7},
      {"RTX 2080", 7}, {"RTX 2070", 7}, {"RTX 2060", 7},
      {"P100", 6}, {"P40", 6}, {"P4", 6}, {"GTX 1080", 6}, {"GTX 1070", 6}};
  for (const auto& [word, major] : kTable) {
    if (names(word)) return major;
  }
  for (std::string_view series : {"RTX 30", "RTX 40"}) {
    if (t.find(series) != std::string::npos) return 8;
  }
  return -1;
}

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kHigh: return "high";
    case Severity::kModerate: return "moderate";
    case Severity::kLow: return "low";
    case Severity::kInfo: return "info";
  }
  return "?";
}

std::vector<Finding> Diagnose(const Evidence& e) {
  std::vector<Finding> out;
  bool input_bound = false;

  if (e.data_loading_share && *e.data_loading_share >= kInputModerate) {
    input_bound = true;
    double dl = *e.data_loading_share;
    Finding f;
    f.id = "input-bound";
    f.severity = dl >= kInputHigh ? Severity::kHigh : Severity::kModerate;
    f.title = dl >= kInputHigh ? "Highly input-bound: the GPU waits for data"
                               : "Moderately input-bound: data loading shows in the step time";
    f.evidence = fmt::format("data loading {} of step time (thresholds: >= 5% moderate, >= 20% high)", Pct(dl));
    if (e.host_to_device_share && *e.host_to_device_share > 0.005) {
      f.evidence += fmt::format("; host-to-device copies {}", Pct(*e.host_to_device_share));
    }
    if (e.workers) f.evidence += fmt::format("; {} worker process(es) seen", *e.workers);
    if (e.main_iowait_share && *e.main_iowait_share > 0) {
      f.evidence += fmt::format("; main process in I/O wait in {} of samples", Pct(*e.main_iowait_share));
    }
    f.actions = {"DataLoader(num_workers=N): load in worker processes (start with the number of CPU cores per GPU)",
                 "pin_memory=True, and .to(device, non_blocking=True) for the batch",
                 "prefetch_factor > 2 (with num_workers > 0) so batches are ready ahead of the step",
                 "persistent_workers=True so workers survive between epochs",
                 "cache or pre-decode the data set on local disk / in memory; faster storage"};
    f.expected_gain = dl;
    f.gain_basis = "exposed data-loading time, which prefetching workers can hide entirely (upper bound)";
    out.push_back(std::move(f));
  }

  if (e.gpu_busy_share && *e.gpu_busy_share < kLowBusy && !input_bound) {
    double busy = *e.gpu_busy_share;
    bool short_kernels = e.short_kernel_fraction && *e.short_kernel_fraction >= kShortKernelMajority;
    Finding f;
    if (short_kernels) {
      f.id = "launch-bound";
      f.severity = Severity::kHigh;
      f.title = "GPU under-used with short kernels: launch overhead dominates";
      f.evidence = fmt::format("GPU busy {} of step time (< 50%); {} of kernels run shorter than their launch call",
                               Pct(busy), Pct(*e.short_kernel_fraction));
      if (e.median_kernel) f.evidence += fmt::format("; median kernel {} µs", *e.median_kernel);
      f.actions = {"larger batch per GPU (more work per kernel launch)",
                   "CUDA Graphs (torch.cuda.graphs / torch.compile(mode=\"reduce-overhead\")) to launch the step at once",
                   "fuse small ops (torch.compile)"};
    } else {
      f.id = "low-utilisation";
      f.severity = Severity::kModerate;
      f.title = "GPU under-used";
      f.evidence = fmt::format("GPU busy {} of step time (< 50%)", Pct(busy));
      f.actions = {"larger batch per GPU",
                   "host-bound GPU idle means the CPU side (Python, pre-processing, logging) is the limit: profile it (py-spy)",
                   "CUDA Graphs / torch.compile if many kernels are small"};
    }
    if (e.idle_host_bound_share) {
      f.evidence += fmt::format("; GPU idle while the CPU had not launched the next work: {}", Pct(*e.idle_host_bound_share));
      f.expected_gain = *e.idle_host_bound_share;
      f.gain_basis = short_kernels
                         ? "host-bound GPU idle time, which graph capture / bigger kernels remove (upper bound)"
                         : "host-bound GPU idle time, if the CPU side stops being the limit (upper bound)";
    } else {
      f.gain_basis = "not estimated: a recording cannot tell launch gaps from other idle time; take a trace";
    }
    out.push_back(std::move(f));
  }

  if (e.compute_major >= 7 && e.tc_eligible_share && e.tensor_core_share && e.kernel_share &&
      *e.tc_eligible_share >= kEligibleMin && *e.tensor_core_share < kTensorCoreMin) {
    Finding f;
    f.id = "no-tensor-cores";
    f.severity = *e.tensor_core_share == 0 ? Severity::kHigh : Severity::kModerate;
    f.title = "GEMM/convolution work runs without tensor cores (FP32)";
    f.evidence = fmt::format("GEMM/conv kernels are {} of kernel time, of which {} on tensor cores; compute capability {}",
                             Pct(*e.tc_eligible_share), Pct(*e.tensor_core_share), e.compute_major);
    f.actions = {PrecisionFor(e.compute_major).autocast};
    if (e.compute_major >= 8) {
      f.actions.push_back("at least allow TF32: torch.backends.cuda.matmul.allow_tf32 = True");
    }
    f.actions.push_back("torch.backends.cudnn.benchmark = True for fixed input shapes");
    double eligible_step = *e.tc_eligible_share * (1.0 - *e.tensor_core_share) * *e.kernel_share;
    f.expected_gain = std::min(1.0, eligible_step * (1.0 - 1.0 / kTensorCoreSpeedup));
    f.gain_basis = fmt::format("FP32 GEMM/conv time ({} of step) running {:.0f}x faster on tensor cores (conservative)",
                               Pct(eligible_step), kTensorCoreSpeedup);
    out.push_back(std::move(f));
  }

  if (e.communication_share && *e.communication_share > kCommunication) {
    Finding f;
    f.id = "communication";
    f.severity = *e.communication_share >= 0.25 ? Severity::kHigh : Severity::kModerate;
    f.title = "Communication is exposed in the step time";
    f.evidence = fmt::format("communication not overlapped with compute: {} of step time (> 10%)", Pct(*e.communication_share));
    if (e.communication_raw_share) f.evidence += fmt::format("; all communication kernels {}", Pct(*e.communication_raw_share));
    f.actions = {"gradient accumulation (DDP no_sync() on all but the last micro-batch) or a larger per-GPU batch",
                 "overlap: DDP bucket_cap_mb tuning, FSDP prefetch, avoid syncs between backward and all-reduce",
                 fmt::format("gradient compression (DDP communication hooks, e.g. {}/PowerSGD)",
                             e.compute_major >= 8 ? "bf16" : e.compute_major >= 0 ? "fp16" : "bf16 or fp16")};
    f.expected_gain = *e.communication_share;
    f.gain_basis = "exposed communication time, hidden at best by full overlap or amortised by accumulation";
    out.push_back(std::move(f));
  }

  if (e.synchronisation_share && *e.synchronisation_share >= kSync) {
    Finding f;
    f.id = "synchronisation";
    f.severity = *e.synchronisation_share >= 0.15 ? Severity::kHigh : Severity::kModerate;
    f.title = "The CPU waits on the GPU inside the step";
    f.evidence = fmt::format("CPU blocked in cuda*Synchronize with the GPU idle: {} of step time (>= 5%)",
                             Pct(*e.synchronisation_share));
    f.actions = {"remove .item(), .cpu(), print(tensor) and torch.cuda.synchronize() from the training loop",
                 "log metrics every N steps, asynchronously"};
    f.expected_gain = *e.synchronisation_share;
    f.gain_basis = "synchronisation time with the GPU idle (upper bound)";
    out.push_back(std::move(f));
  }

  if (e.memory_peak && e.memory_total && *e.memory_total > 0) {
    double m = static_cast<double>(*e.memory_peak) / static_cast<double>(*e.memory_total);
    if (m > kMemory) {
      Finding f;
      f.id = "memory";
      f.severity = Severity::kModerate;
      f.title = "Device memory nearly full: the batch size is memory-capped";
      f.evidence = fmt::format("peak memory {} of {} ({} > 90%)", FormatBytes(*e.memory_peak),
                               FormatBytes(*e.memory_total), Pct(m));
      f.actions = {"activation checkpointing (torch.utils.checkpoint) to trade compute for memory",
                   fmt::format("mixed precision ({}) halves activation memory", PrecisionFor(e.compute_major).half),
                   "then raise the batch size"};
      f.gain_basis = "no direct speed-up; frees memory for a larger batch and avoids OOM";
      out.push_back(std::move(f));
    }
  }

  if (e.gpu_busy_share && *e.gpu_busy_share >= kGpuBound && !input_bound) {
    Finding f;
    f.id = "gpu-bound";
    f.severity = Severity::kInfo;
    f.title = "GPU-bound: the GPU is busy, the input pipeline keeps up";
    f.evidence = fmt::format("GPU busy {} (>= 80%)", Pct(*e.gpu_busy_share));
    if (e.data_loading_share) f.evidence += fmt::format("; data loading {}", Pct(*e.data_loading_share));
    f.actions = {fmt::format("mixed precision ({}) if not already used", PrecisionFor(e.compute_major).half),
                 "take a torch.profiler trace to see kernel efficiency", "only more or faster GPUs speed up the rest"};
    f.gain_basis = "no input-side gain; GPU-side gains need a trace to estimate";
    out.push_back(std::move(f));
  }

  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    double ga = a.expected_gain.value_or(-1), gb = b.expected_gain.value_or(-1);
    if (ga != gb) return ga > gb;
    return Rank(a.severity) < Rank(b.severity);
  });
  return out;
}

}  // namespace gpuslice::profile
