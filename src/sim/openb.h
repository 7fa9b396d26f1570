#pragma once
// Readers for the Alibaba cluster-trace-gpu-v2023 ("openb") CSVs used by the FGD paper:
//   node list: sn,cpu_milli,memory_mib,gpu,model
//   pod list:  name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
//              creation_time,deletion_time,scheduled_time]
// gpu_milli is the per-GPU share (< 1000 only when num_gpu == 1); gpu_spec lists allowed models
// separated by '|' (empty: any). Times are seconds from the trace start. Values; thread-compatible.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sim/csv.h"

namespace gpuslice::sim {

struct TraceNode {
  std::string name;
  std::int64_t cpu_milli = 0;
  Bytes memory = 0;
  int gpus = 0;
  std::string model;
};

struct TracePod {
  std::string name;
  std::int64_t cpu_milli = 0;
  Bytes memory = 0;
  int num_gpus = 0;
  MilliGpu milli_per_gpu = 0;            // per GPU; 0 for CPU-only pods
  std::string gpu_spec;                   // raw, e.g. "V100M16|V100M32"
  std::vector<std::string> allowed_models;
  std::string qos;
  std::int64_t creation_s = -1;           // -1: not in the file
  std::int64_t deletion_s = -1;
  std::int64_t scheduled_s = -1;
};

struct NodeList {
  std::vector<TraceNode> nodes;
  SkippedRows skipped;
};
struct PodList {
  std::vector<TracePod> pods;
  SkippedRows skipped;
};

Result<NodeList> ReadOpenbNodes(const std::string& path, const ReadOptions& options = {});
Result<PodList> ReadOpenbPods(const std::string& path, const ReadOptions& options = {});

}  // namespace gpuslice::sim
