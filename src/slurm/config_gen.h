#pragma once
// Turns gpuslice's queue policy (sched::Config) into Slurm configuration: the GresTypes line,
// NodeName lines with their GRES, one PartitionName line per queue, and gres.conf — each with
// comments that say why. Slurm is the engine; the policy decides the shape:
//   shared slices  -> gres/shard (time-sliced, not fenced; K shards = K/shards_per_gpu of a GPU)
//   whole slices   -> gres/gpu
//   mig slices     -> typed gres/gpu on MIG nodes ("gpu:3g.40gb"), instances made beforehand
//   mps slices     -> gres/mps (only when chosen instead of shard; see SharingGres)
//   time_limit / max_duration -> partition MaxTime (and DefaultTime), rounded up to minutes
//   idle policy    -> not Slurm's: enforced by `gpuslice agent --slurm` on each node.
// Known Slurm 22.05 limits handled here (docs/slurm.md has the list):
//   * shard and mps must never both be in GresTypes: jobs then lose CUDA_VISIBLE_DEVICES
//     (shard) or get CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=0 (mps). One is chosen (SharingGres).
//   * all of a job's shards on a node come from one GPU: a shared slice is at most one GPU.
//   * Slurm does not create MIG instances; MIG nodes need them made before slurmd starts.
//   * time limits have minute granularity; the check runs about every 30 s.
// Pure function of its inputs; thread-safe.

#include <string>
#include <vector>

#include "core/status.h"
#include "sched/config.h"

namespace gpuslice::slurm {

enum class SharingGres { kShard, kMps };

// A set of identical GPU nodes.
struct NodeSet {
  std::string nodes;            // Slurm hostlist, e.g. "gpu[1-4]"; empty: no such nodes
  int gpus_per_node = 0;
  std::string model;            // catalogue model name, e.g. "H100-80GB" (checked with FindModel)
  // GRES type name for whole GPUs; default from the model ("H100-80GB" -> "h100_80gb", which
  // Slurm's NVML autodetect matches as a substring of "nvidia_h100_80gb_hbm3").
  std::string gres_type;
  // gres.conf File= for the GPUs; default "/dev/nvidia[0-<gpus_per_node-1>]".
  std::string device_files;
  // MIG nodes only: the instances on each GPU, by profile name ("3g.40gb,2g.20gb,2g.20gb").
  std::vector<std::string> mig_layout;
  // MIG nodes only: when set, gres.conf lists one File per instance under this directory
  // ("<dir>/mig<gpu>-<instance>", character devices; for test clusters); when empty the MIG
  // nodes use AutoDetect=nvml, which is how Slurm finds real MIG devices.
  std::string mig_device_dir;
  // Appended verbatim to the NodeName line: "CPUs=64 RealMemory=512000", or for a test
  // cluster "NodeHostname=localhost NodeAddr=127.0.0.1 Port=[17001-17002]".
  std::string node_params;
};

struct ClusterSpec {
  NodeSet gpu_nodes;   // whole GPUs: shared (shard/mps) and whole slices
  NodeSet mig_nodes;   // GPUs in MIG mode: mig slices
  SharingGres sharing = SharingGres::kShard;
  int shards_per_gpu = 8;  // shared slices come in 1/shards_per_gpu of a GPU
};

struct GeneratedConfig {
  std::string slurm_conf;   // lines to merge into slurm.conf (GresTypes, nodes, partitions)
  std::string gres_conf;    // a complete gres.conf
  std::vector<std::string> warnings;  // queue features Slurm cannot offer with this spec
};

// InvalidArgument naming the flag/field and value for a bad spec (no nodes, unknown model,
// MIG layout that does not fit the model, bad counts) or a policy that cannot be expressed.
Result<GeneratedConfig> GenerateSlurmConfig(const sched::Config& policy, const ClusterSpec& spec);

// Minutes for a Slurm time limit: rounded up (a limit is never shortened); 0 -> "INFINITE".
std::string SlurmTimeLimit(Micros limit);

// "H100-80GB" -> "h100_80gb".
std::string GresTypeForModel(std::string_view model);

// "3g.40gb" -> 40 GiB... as the profile name states it, in bytes (decimal GB as GiB, which is
// how NVIDIA names profiles); InvalidArgument when the name is not "<N>g.<M>gb".
Result<Bytes> MigProfileMemory(std::string_view profile);

}  // namespace gpuslice::slurm
