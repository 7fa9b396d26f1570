// One FGD-protocol run (default openb trace inflated to 130%: ~10,866 pods on 1213 nodes) per
// policy, on one core. Target: under 0.5 s per run. Baseline for the ratio: the same run with the
// per-node score cache disabled (every feasible node re-scored for every pod, as the Kubernetes
// framework does), measured here in the same process.
// Usage: sim_fgd_bench [policy ...] [--seeds N]   (default: every FGD-paper policy, seed 42)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sched/placement/placement.h"
#include "sim/fgd_command.h"
#include "sim/fgd_protocol.h"

int main(int argc, char** argv) {
  using namespace gpuslice;
  std::vector<std::string> policies;
  int seeds = 1;
  std::string trace = "default";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
      trace = argv[++i];
    } else if (std::strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) {
      seeds = std::atoi(argv[++i]);
    } else {
      policies.emplace_back(argv[i]);
    }
  }
  if (policies.empty()) policies = sim::FgdPaperPolicies();
  const std::string dir = std::string(GPUSLICE_DATA_DIR) + "/alibaba-gpu-v2023/";
  auto nodes = sim::ReadOpenbNodes(dir + "openb_node_list_gpu_node.csv");
  auto pods = sim::ReadOpenbPods(dir + "openb_pod_list_" + trace + ".csv");
  if (!nodes.ok() || !pods.ok()) {
    std::fprintf(stderr, "cannot read the bundled trace\n");
    return 1;
  }
  sim::FgdInputs in{nodes->nodes, pods->pods, sim::TypicalShapes(pods->pods, getenv("COV") ? atof(getenv("COV")) : 0.95)};
  fmt::print("FGD protocol, openb {}: {} nodes, {} pods, {} typical shapes, seeds 42..{}\n",
             trace, in.nodes.size(), in.pods.size(), in.shapes.size(), 42 + seeds - 1);
  fmt::print("{:<15} {:>8} {:>10} {:>10} {:>10} {:>12} {:>10}\n", "policy", "pods", "s/run", "alloc@100",
             "alloc@130", "Score calls", "target");
  for (const std::string& name : policies) {
    auto policy = sched::MakePolicy(name);
    if (!policy.ok()) {
      std::fprintf(stderr, "%s\n", policy.status().message().c_str());
      return 2;
    }
    double secs = 0, alloc = 0, alloc100 = 0;
    std::int64_t pods_run = 0;
    std::uint64_t scored = 0;
    for (int s = 0; s < seeds; ++s) {
      sim::FgdRun run = sim::RunFgdOnce(in, **policy, 42 + s, 1.3);
      secs += run.seconds;
      alloc += run.curves.alloc_pct[130];
      alloc100 += run.curves.alloc_pct[100];
      pods_run = run.pods;
      scored += run.scored;
    }
    secs /= seeds;
    fmt::print("{:<15} {:>8} {:>10.3f} {:>9.2f}% {:>9.2f}% {:>12} {:>10}\n", name, pods_run, secs, alloc100 / seeds, alloc / seeds,
               scored / seeds, secs < 0.5 ? "met" : "MISSED");
  }
  return 0;
}
