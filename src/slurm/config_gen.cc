#include "slurm/config_gen.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "core/catalogue.h"

namespace gpuslice::slurm {
namespace {

using sched::SliceKind;

bool ValidHostlist(std::string_view s) {
  if (s.empty()) return false;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    else if (c == ']') --depth;
    else if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ',' || c == '_' ||
               c == '.'))
      return false;
    if (depth < 0 || depth > 1) return false;
  }
  return depth == 0;
}

Status CheckNodeSet(const NodeSet& n, std::string_view flag) {
  if (!ValidHostlist(n.nodes))
    return InvalidArgument(fmt::format("--{}nodes = '{}': not a Slurm hostlist such as gpu[1-4]",
                                       flag, n.nodes));
  if (n.gpus_per_node < 1 || n.gpus_per_node > 64)
    return InvalidArgument(fmt::format("--{}gpus-per-node = {}: must be between 1 and 64", flag,
                                       n.gpus_per_node));
  return Status::Ok();
}

std::string TypeOf(const NodeSet& n) {
  if (!n.gres_type.empty()) return n.gres_type;
  return n.model.empty() ? std::string() : GresTypeForModel(n.model);
}

std::string DeviceFiles(const NodeSet& n) {
  if (!n.device_files.empty()) return n.device_files;
  return n.gpus_per_node == 1 ? "/dev/nvidia0" : fmt::format("/dev/nvidia[0-{}]", n.gpus_per_node - 1);
}

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += sep;
    s += x;
  }
  return s;
}

// Checks a per-GPU MIG layout against the model: every profile is known and the instances fit
// together (placed greedily, largest first, at their lowest legal free start).
Status CheckMigLayout(const NodeSet& n) {
  if (n.model.empty()) return Status::Ok();  // no model named: trust the operator
  auto model = FindModel(n.model);
  if (!model.ok()) return InvalidArgument(fmt::format("--mig-model: {}", model.status().message()));
  const DeviceModel& m = **model;
  if (!m.supports_mig())
    return InvalidArgument(fmt::format("--mig-model = '{}': this GPU has no MIG", n.model));
  std::vector<const MigProfile*> profiles;
  for (const std::string& name : n.mig_layout) {
    const MigProfile* p = m.FindProfile(name);
    if (p == nullptr)
      return InvalidArgument(fmt::format("--mig-layout: profile '{}' does not exist on {}", name, m.name));
    profiles.push_back(p);
  }
  // Depth-first over legal starts (at most 7 instances, so this is tiny); the first layout that
  // passes the catalogue's own check wins.
  MigLayout layout;
  std::function<bool(std::size_t)> place = [&](std::size_t i) {
    if (i == profiles.size()) return ValidateLayout(m, layout).ok();
    for (int start : profiles[i]->placement_starts) {
      layout.push_back({profiles[i]->id, start});
      if (ValidateLayout(m, layout).ok() && place(i + 1)) return true;
      layout.pop_back();
    }
    return false;
  };
  if (!place(0))
    return InvalidArgument(fmt::format("--mig-layout = '{}': these instances do not fit together on one {}",
                                       Join(n.mig_layout, ","), m.name));
  return Status::Ok();
}

// Profile name -> instances per GPU, in first-seen order.
std::vector<std::pair<std::string, int>> CountProfiles(const std::vector<std::string>& layout) {
  std::vector<std::pair<std::string, int>> counts;
  for (const std::string& raw : layout) {
    std::string p = raw;
    std::transform(p.begin(), p.end(), p.begin(), [](unsigned char c) { return std::tolower(c); });
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == p; });
    if (it == counts.end()) counts.emplace_back(p, 1);
    else ++it->second;
  }
  return counts;
}

}  // namespace

std::string SlurmTimeLimit(Micros limit) {
  if (limit <= 0) return "INFINITE";
  std::int64_t minutes = (limit + kMinute - 1) / kMinute;
  std::int64_t days = minutes / (24 * 60);
  std::int64_t hours = (minutes / 60) % 24;
  std::int64_t mins = minutes % 60;
  if (days > 0) return fmt::format("{}-{:02}:{:02}:00", days, hours, mins);
  return fmt::format("{:02}:{:02}:00", hours, mins);
}

std::string GresTypeForModel(std::string_view model) {
  std::string t;
  for (char c : model) {
    unsigned char u = static_cast<unsigned char>(c);
    t += std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '_';
  }
  return t;
}

Result<Bytes> MigProfileMemory(std::string_view profile) {
  // "<compute>g.<memory>gb", optionally followed by "+me".
  std::string p(profile);
  std::transform(p.begin(), p.end(), p.begin(), [](unsigned char c) { return std::tolower(c); });
  auto g = p.find("g.");
  auto gb = p.find("gb", g == std::string::npos ? 0 : g + 2);
  int compute = 0;
  std::int64_t mem = 0;
  if (g == std::string::npos || gb == std::string::npos ||
      std::from_chars(p.data(), p.data() + g, compute).ptr != p.data() + g ||
      std::from_chars(p.data() + g + 2, p.data() + gb, mem).ptr != p.data() + gb || compute <= 0 ||
      mem <= 0)
    return InvalidArgument(fmt::format("MIG profile '{}': expected a name such as 3g.40gb", profile));
  return mem * kGiB;
}

Result<GeneratedConfig> GenerateSlurmConfig(const sched::Config& policy, const ClusterSpec& spec) {
  GeneratedConfig out;
  const bool have_gpu = !spec.gpu_nodes.nodes.empty();
  const bool have_mig = !spec.mig_nodes.nodes.empty();
  if (!have_gpu && !have_mig)
    return InvalidArgument("--nodes: no GPU nodes given (and no --mig-nodes either)");
  if (have_gpu) GPUSLICE_RETURN_IF_ERROR(CheckNodeSet(spec.gpu_nodes, ""));
  if (have_mig) {
    GPUSLICE_RETURN_IF_ERROR(CheckNodeSet(spec.mig_nodes, "mig-"));
    if (spec.mig_nodes.mig_layout.empty())
      return InvalidArgument("--mig-layout: MIG nodes need the instances on each GPU, e.g. 3g.40gb,2g.20gb,2g.20gb");
    for (const auto& p : spec.mig_nodes.mig_layout)
      GPUSLICE_RETURN_IF_ERROR(MigProfileMemory(p).status().WithContext("--mig-layout"));
    GPUSLICE_RETURN_IF_ERROR(CheckMigLayout(spec.mig_nodes));
  }
  if (have_gpu && !spec.gpu_nodes.model.empty()) {
    auto m = FindModel(spec.gpu_nodes.model);
    if (!m.ok()) return InvalidArgument(fmt::format("--model: {}", m.status().message()));
  }
  if (spec.shards_per_gpu < 1 || spec.shards_per_gpu > 1000)
    return InvalidArgument(fmt::format("--shards-per-gpu = {}: must be between 1 and 1000",
                                       spec.shards_per_gpu));
  GPUSLICE_RETURN_IF_ERROR(sched::ValidateConfig(policy).WithContext("policy"));

  const bool sharing_shard = spec.sharing == SharingGres::kShard;
  const SliceKind shared_kind = sharing_shard ? SliceKind::kShared : SliceKind::kMps;
  const SliceKind dropped_kind = sharing_shard ? SliceKind::kMps : SliceKind::kShared;
  const std::string sharing_name = sharing_shard ? "shard" : "mps";
  const int sharing_per_gpu = sharing_shard ? spec.shards_per_gpu : 100;

  bool need_sharing = false;
  for (const auto& q : policy.queues) {
    if (q.Allows(shared_kind)) need_sharing = true;
    if (q.Allows(dropped_kind)) {
      out.warnings.push_back(fmt::format(
          "queue '{}': {} slices are not offered on Slurm: Slurm 22.05 cannot have shard and mps "
          "in GresTypes together (jobs lose CUDA_VISIBLE_DEVICES); this config uses {}",
          q.name, sched::SliceKindName(dropped_kind), sharing_name));
    }
  }
  need_sharing = need_sharing && have_gpu;

  std::string& c = out.slurm_conf;
  c += "# ---- generated by `gpuslice slurm config`; merge into slurm.conf ----\n";
  c += "# gres/shard and gres/mps need the cons_tres selector.\n";
  c += "SelectType=select/cons_tres\n";
  c += fmt::format(
      "# Exactly one sharing GRES ({}): with shard and mps both in GresTypes, Slurm 22.05 jobs lose\n"
      "# CUDA_VISIBLE_DEVICES (shard) or get CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=0 (mps).\n",
      sharing_name);
  c += need_sharing ? fmt::format("GresTypes=gpu,{}\n", sharing_name) : "GresTypes=gpu\n";
  c += "# Time limits are hard: no grace minutes beyond a partition's MaxTime.\n";
  c += "OverTimeLimit=0\n\n";

  // ---- nodes ----
  std::string& g = out.gres_conf;
  g += "# ---- generated by `gpuslice slurm config`; gres.conf on every node and the controller ----\n";
  g += "# Devices are listed explicitly; MIG nodes (if any) switch to NVML autodetection below.\n";
  g += "AutoDetect=off\n";
  if (have_gpu) {
    const NodeSet& n = spec.gpu_nodes;
    std::string type = TypeOf(n);
    std::string gpu_gres = type.empty() ? fmt::format("gpu:{}", n.gpus_per_node)
                                        : fmt::format("gpu:{}:{}", type, n.gpus_per_node);
    std::string gres = gpu_gres;
    if (need_sharing) gres += fmt::format(",{}:{}", sharing_name, sharing_per_gpu * n.gpus_per_node);
    c += fmt::format("# {} whole GPUs per node{}", n.gpus_per_node,
                     type.empty() ? "" : fmt::format(" (type {})", type));
    if (need_sharing && sharing_shard)
      c += fmt::format(", each also cut into {} shards: a shard is 1/{} of a GPU, time-sliced and not\n"
                       "# fenced (no memory cap from Slurm). A job's shards all come from one GPU.\n",
                       spec.shards_per_gpu, spec.shards_per_gpu);
    else if (need_sharing)
      c += ", each also 100 mps units (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); the MPS server is\n"
           "# started by a prolog (see Slurm's etc/prolog.example). No memory cap from Slurm.\n";
    else
      c += ".\n";
    c += fmt::format("NodeName={} Gres={}{}{} State=UNKNOWN\n", n.nodes, gres,
                     n.node_params.empty() ? "" : " ", n.node_params);
    std::string files = DeviceFiles(n);
    g += fmt::format("NodeName={} Name=gpu{} File={}\n", n.nodes,
                     type.empty() ? "" : " Type=" + type, files);
    if (need_sharing)
      g += fmt::format("# {} {} per GPU, spread evenly over the same device files.\n", sharing_per_gpu,
                       sharing_shard ? "shards" : "mps units");
    if (need_sharing)
      g += fmt::format("NodeName={} Name={} Count={} File={}\n", n.nodes, sharing_name,
                       sharing_per_gpu * n.gpus_per_node, files);
  }
  if (have_mig) {
    const NodeSet& n = spec.mig_nodes;
    auto counts = CountProfiles(n.mig_layout);
    std::vector<std::string> parts;
    for (const auto& [profile, per_gpu] : counts)
      parts.push_back(fmt::format("gpu:{}:{}", profile, per_gpu * n.gpus_per_node));
    c += fmt::format(
        "# MIG nodes: each GPU is cut into {} beforehand (Slurm does not create or change MIG\n"
        "# instances). Each instance is one typed gpu GRES; jobs ask for gpu:<profile>:1.\n",
        Join(n.mig_layout, " + "));
    c += fmt::format("NodeName={} Gres={}{}{} State=UNKNOWN\n", n.nodes, Join(parts, ","),
                     n.node_params.empty() ? "" : " ", n.node_params);
    if (n.mig_device_dir.empty()) {
      g += "# MIG instances are found through NVML; slurm.conf's types are matched as substrings\n"
           "# of the detected names (e.g. 3g.40gb in nvidia_h100_80gb_hbm3_3g.40gb).\n";
      g += fmt::format("NodeName={} AutoDetect=nvml\n", n.nodes);
    } else {
      g += "# MIG instances of a test cluster: one character device per instance.\n";
      for (const auto& [profile, per_gpu] : counts) {
        std::vector<std::string> files;
        for (int gpu = 0; gpu < n.gpus_per_node; ++gpu) {
          int index = 0;
          for (const std::string& raw : n.mig_layout) {
            std::string p = raw;
            std::transform(p.begin(), p.end(), p.begin(), [](unsigned char ch) { return std::tolower(ch); });
            if (p == profile) files.push_back(fmt::format("{}/mig{}-{}", n.mig_device_dir, gpu, index));
            ++index;
          }
        }
        g += fmt::format("NodeName={} Name=gpu Type={} File={}\n", n.nodes, profile, Join(files, ","));
      }
    }
  }
  c += "\n";

  // ---- partitions: one per queue ----
  for (const auto& q : policy.queues) {
    std::vector<std::string> nodes;
    std::vector<std::string> offers;
    bool on_gpu = have_gpu && (q.Allows(SliceKind::kWhole) || (q.Allows(shared_kind) && need_sharing));
    bool on_mig = have_mig && q.Allows(SliceKind::kMig);
    if (on_gpu) nodes.push_back(spec.gpu_nodes.nodes);
    if (on_mig) nodes.push_back(spec.mig_nodes.nodes);
    if (have_gpu && q.Allows(shared_kind) && need_sharing)
      offers.push_back(fmt::format("{} slices as gres/{}", sched::SliceKindName(shared_kind), sharing_name));
    if (have_gpu && q.Allows(SliceKind::kWhole)) offers.push_back("whole GPUs as gres/gpu");
    if (on_mig) offers.push_back("MIG instances as gres/gpu:<profile>");
    if (q.Allows(SliceKind::kMig) && !have_mig)
      out.warnings.push_back(fmt::format(
          "queue '{}': mig slices are not offered: no --mig-nodes given", q.name));
    if (nodes.empty()) {
      out.warnings.push_back(fmt::format("queue '{}': no partition: none of its slice kinds can run "
                                         "on the nodes given", q.name));
      c += fmt::format("# queue '{}': no partition (none of its slice kinds can run on these nodes)\n\n",
                       q.name);
      continue;
    }
    Micros limit = q.EffectiveLimit(0);
    c += fmt::format("# queue '{}' (default slice: {}): {}.\n", q.name,
                     sched::SliceKindName(q.default_kind), Join(offers, "; "));
    if (limit > 0)
      c += fmt::format("# MaxTime from the queue's {} ({}), rounded up to whole minutes; jobs that\n"
                       "# ask for no time get it as DefaultTime.\n",
                       q.time_limit > 0 && (q.max_duration == 0 || q.time_limit <= q.max_duration)
                           ? "time_limit" : "max_duration",
                       FormatDuration(limit));
    else
      c += "# No time limit in the policy.\n";
    if (q.idle.enabled)
      c += fmt::format("# Idle policy (below {}% for {}, {}) is applied by `gpuslice agent --slurm`,\n"
                       "# not by Slurm.\n",
                       q.idle.util_threshold_percent, FormatDuration(q.idle.window),
                       q.idle.action == sched::ReclaimAction::kReclaim
                           ? fmt::format("warned, then {} {} later", q.preemptible ? "requeued" : "cancelled",
                                         FormatDuration(q.idle.grace))
                           : "reported only");
    std::string line = fmt::format("PartitionName={} Nodes={}", q.name, Join(nodes, ","));
    if (q.name == policy.default_queue) line += " Default=YES";
    line += fmt::format(" MaxTime={}", SlurmTimeLimit(limit));
    if (limit > 0) line += fmt::format(" DefaultTime={}", SlurmTimeLimit(limit));
    line += fmt::format(" PriorityTier={}", std::clamp(q.priority + 1, 1, 65533));
    line += " State=UP\n\n";
    c += line;
  }
  return out;
}

}  // namespace gpuslice::slurm
