#pragma once
// What to fix first: findings from measured evidence, with the thresholds the established
// tools use (PyTorch TensorBoard plugin, TensorFlow/XProf input-pipeline analyser, HTA; see
// docs/profile.md and the shared measurement notes §5):
//   input-bound       data loading >= 5% of step time (moderate), >= 20% (high)
//   launch-bound      GPU busy < 50% and most kernels shorter than their launch call
//   low-utilisation   GPU busy < 50% otherwise (not explained by the above)
//   no-tensor-cores   compute capability >= 7, GEMM/conv kernels >= 10% of kernel time and
//                     < 10% of that time on tensor cores
//   communication     exposed communication > 10% of step time
//   synchronisation   synchronisation >= 5% of step time
//   memory            peak device memory > 90% of the device
//   gpu-bound         (recordings) GPU busy >= 80% and not input-bound: the GPU is the limit
// Each finding carries the figures that triggered it and an expected gain: the fraction of
// step time the fix can save at best, with how that was estimated. Findings are sorted by
// expected gain (largest first), then severity.
//
// The advice follows the GPU's architecture (compute_major): bf16 and TF32 only on compute
// capability 8.0 or newer, FP16 with a gradient scaler on 7.x, no tensor-core advice before 7.0.
//
// Evidence is filled either from a trace analysis or from a recording; absent figures are
// std::nullopt and the rules that need them stay silent. Plain values; thread-compatible.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.h"

namespace gpuslice::profile {

struct Evidence {
  std::string source;              // "trace" or "recording"
  std::int64_t steps = 0;
  std::optional<double> data_loading_share;     // of step time, [0,1]
  std::optional<double> host_to_device_share;
  std::optional<double> communication_share;    // exposed (not hidden by compute)
  std::optional<double> communication_raw_share;
  std::optional<double> synchronisation_share;
  std::optional<double> gpu_busy_share;         // trace: union of GPU work; recording: NVML util
  std::optional<double> idle_host_bound_share;
  std::optional<double> short_kernel_fraction;  // kernels shorter than their launch call
  std::optional<Micros> median_kernel;
  std::optional<double> tc_eligible_share;      // GEMM/conv share of kernel time
  std::optional<double> tensor_core_share;      // tensor-core share of eligible time
  std::optional<double> kernel_share;           // summed kernel time / step time
  int compute_major = -1;
  std::optional<Bytes> memory_peak;
  std::optional<Bytes> memory_total;
  // Recording only.
  std::optional<double> main_iowait_share;      // samples with the main process in I/O wait
  std::optional<double> main_running_share;
  std::optional<int> workers;                   // child processes seen (data-loader workers)
};

enum class Severity { kHigh, kModerate, kLow, kInfo };
std::string_view SeverityName(Severity s);

struct Finding {
  std::string id;           // "input-bound", "no-tensor-cores", ...
  Severity severity = Severity::kInfo;
  std::string title;
  std::string evidence;     // the figures that triggered it
  std::vector<std::string> actions;
  std::optional<double> expected_gain;  // fraction of step time saved at best
  std::string gain_basis;   // how the gain was estimated
};

std::vector<Finding> Diagnose(const Evidence& e);

// The compute capability's major version of a GPU named in `text` (an NVML name such as
// "Tesla V100-SXM2-16GB" or "NVIDIA H100 80GB HBM3", or a catalogue name), from NVIDIA's
// published table; -1 when no known GPU is named. For recordings, whose devices report a name
// but not their architecture.
int ComputeMajorOf(std::string_view text);

}  // namespace gpuslice::profile
