#pragma once
// Placement policies as small named plugins (Filter/Score, as in the Kubernetes scheduler
// framework). The framework filters nodes on which a request cannot fit; a policy scores each
// remaining node and chooses the GPUs on it; the framework takes the highest score, ties broken
// by one draw from the context's seeded RNG over the tied nodes (each equally likely) or,
// without one, by the lowest node index (deterministic).
// Both the scheduler (daemon, Slurm mode) and the simulator (FGD protocol) use these.
// Policies are stateless and const: thread-safe to share.

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::sched {

// What placement sees of one GPU on a node.
struct GpuView {
  MilliGpu free_milli = kOneGpu;   // unallocated compute share
  Bytes free_memory = 0;           // unallocated device memory (0 means "not tracked")
  bool usable = true;              // right sharing mode, healthy, not draining
};

// What placement sees of one node (host).
struct NodeView {
  std::uint32_t index = 0;         // position in the cluster; the deterministic tie-break key
  std::string_view model;          // GPU model of every GPU on the node, e.g. "V100M32" or "H100-80GB"
  std::int64_t cpu_milli_free = 0;
  std::int64_t cpu_milli_total = 0;
  Bytes memory_free = 0;           // host memory
  Bytes memory_total = 0;
  std::span<const GpuView> gpus;
  // Which kinds of GPU work run on the node, when the caller tracks its pods: bit 0 = a GPU
  // share, bit k (1..31) = a k-GPU whole-device request (31 also stands for more). Read only
  // when gpu_pod_kinds_known; otherwise policies that need it infer it from the GPU states.
  std::uint32_t gpu_pod_kinds = 0;
  bool gpu_pod_kinds_known = false;
};

// The gpu_pod_kinds bit of a request (0 for CPU-only work).
inline std::uint32_t GpuPodKindBit(int num_gpus, MilliGpu milli_per_gpu) {
  if (num_gpus <= 0) return 0;
  if (num_gpus == 1 && milli_per_gpu < kOneGpu) return 1u;
  return 1u << (num_gpus < 31 ? num_gpus : 31);
}

// A request in placement terms. A fractional share is num_gpus = 1, milli_per_gpu < 1000;
// whole devices are milli_per_gpu = 1000; CPU-only work is num_gpus = 0.
struct PlacementRequest {
  std::int64_t cpu_milli = 0;
  Bytes host_memory = 0;
  int num_gpus = 0;
  MilliGpu milli_per_gpu = 0;
  Bytes gpu_memory_per_gpu = 0;               // 0: no memory demand tracked
  std::vector<std::string> allowed_models;    // empty: any model
};

// A resource shape of the expected workload with its frequency (FGD's "typical pods").
struct WorkloadShape {
  std::int64_t cpu_milli = 0;
  int num_gpus = 0;
  MilliGpu milli_per_gpu = 0;
  std::vector<std::string> allowed_models;
  double frequency = 0;  // sums to 1 over the workload
  // Host memory the shape's pods typically ask (their median; 0: none or not known). Only a
  // measure that counts memory (FragmentationEval's Resources::kCpuAndMemory) reads it.
  Bytes host_memory = 0;
  // The share of the cluster's GPUs on nodes that could take one pod of the shape when empty
  // (enough GPUs, CPU and host memory, an allowed model), in (0, 1]; 1 when not known. Set by
  // SetSupplyShares() (fgd_frag.h); only a measure weighted by supply reads it.
  double supply_share = 1;
};

struct PlacementContext {
  std::span<const WorkloadShape> workload;  // may be empty for policies that do not need it
  std::mt19937_64* rng = nullptr;           // for random policies and random tie-breaks
  // The workload with the rarer shapes that bring the GPU asked: `workload` where that is FGD's
  // typical shapes (by pod count), plus shapes enough to cover 95% of the GPU asked (sim
  // fgd's DemandShapes()). Empty where `workload` already lists every shape (the daemon, sim
  // replay). Only gpuslice's policy reads it.
  std::span<const WorkloadShape> demand_workload = {};
  // The cluster's host CPU over its GPU, both in capacity (milli-cores per milli-GPU): how much
  // CPU a pod can have beside the GPU it asks before CPU, not GPU, runs out. 0: not known (the
  // daemon, which does not model hosts' CPU). Only gpuslice's policy reads it.
  double cpu_per_gpu_milli = 0;
};

// A policy's choice on one node: higher score wins; gpu_indices has num_gpus entries.
struct NodeChoice {
  double score = 0;
  std::vector<int> gpu_indices;
};

// True iff `req` fits on `node` now (CPU, host memory, model, enough usable GPUs with the
// share and memory). Shared by every policy as the Filter step.
bool Fits(const PlacementRequest& req, const NodeView& node);

// What a policy computes of one node state alone, to reuse for every request it scores on that
// state (PlacementPolicy::Prepare()). Each policy derives its own; callers only hold it.
class NodePrep {
 public:
  virtual ~NodePrep() = default;
};

// What a policy computes of a context alone (its workload), to reuse for every node it prepares
// against that context (PlacementPolicy::PrepareWorkload()). Each policy derives its own;
// callers only hold it.
class WorkloadPrep {
 public:
  virtual ~WorkloadPrep() = default;
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string_view name() const = 0;
  // Called only for nodes where Fits() holds. nullopt: this policy refuses the node.
  virtual std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                          const PlacementContext& ctx) const = 0;
  // For callers that score many different requests on one node state (the simulator scores
  // each request class on every node that changed): Prepare() computes what Score() computes
  // of the node alone, and ScorePrepared() with it returns exactly what Score() returns, as
  // long as the node (its view and the GPU states it points to) and ctx are unchanged since.
  // The prep holds views into the node's GPUs and ctx's workload. `workload`: what
  // PrepareWorkload() gave for this ctx (it must outlive the prep), or null. Default: nothing
  // to prepare.
  virtual std::unique_ptr<NodePrep> Prepare(const NodeView& /*node*/, const PlacementContext& /*ctx*/,
                                            const WorkloadPrep* /*workload*/) const {
    return nullptr;
  }
  // What Prepare() computes of ctx alone, once for every node prepared against ctx (unchanged
  // since). Default: nothing.
  virtual std::unique_ptr<WorkloadPrep> PrepareWorkload(const PlacementContext& /*ctx*/) const { return nullptr; }
  virtual std::optional<NodeChoice> ScorePrepared(const PlacementRequest& req, const NodeView& node,
                                                  const PlacementContext& ctx, const NodePrep* /*prep*/) const {
    return Score(req, node, ctx);
  }
  // True iff Score() (and Fits()) depend only on the request, ctx.workload and the node's
  // model, CPU, memory and GPU views (not its index, not ctx.rng), are invariant under any
  // reordering of the GPUs that keeps GPUs of equal free share in index order, and choose,
  // among GPUs of equal free share, the first in index order. Such a policy can be scored
  // once per distinct node state (the scheduler's HostStates) with identical decisions.
  virtual bool ScoresByNodeState() const { return false; }
};

struct Placement {
  std::uint32_t node_index = 0;
  std::vector<int> gpu_indices;
};

// Filter + Score over all nodes, then select (see header comment). nullopt: fits nowhere now.
std::optional<Placement> Place(const PlacementPolicy& policy, const PlacementRequest& req,
                               std::span<const NodeView> nodes, const PlacementContext& ctx);

// Registry by name, e.g. "best-fit", "packing", "spread", "fgd", "random", ... Unknown names
// give InvalidArgument naming the value and listing the known ones.
Result<std::unique_ptr<PlacementPolicy>> MakePolicy(std::string_view name);
std::vector<std::string> PolicyNames();

// Each policy file contributes its factories here (explicit, so static linking keeps them).
using PolicyFactory = std::unique_ptr<PlacementPolicy> (*)();
struct PolicyEntry {
  const char* name;
  PolicyFactory make;
};
std::vector<PolicyEntry> SimplePolicies();  // simple.cc: best-fit, packing, spread
std::vector<PolicyEntry> FgdPolicies();     // fgd.cc: the FGD paper's baselines, fgd, and gpuslice's default

}  // namespace gpuslice::sched
