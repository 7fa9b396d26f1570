#include "whatif/history.h"

#include <fmt/format.h>

#include "sim/cluster.h"
#include "sim/replay_command.h"

namespace gpuslice::whatif {

std::string_view RecordedEndName(RecordedEnd e) {
  switch (e) {
    case RecordedEnd::kFinished: return "finished";
    case RecordedEnd::kIdleReclaimed: return "idle-reclaimed";
    case RecordedEnd::kTimeLimit: return "time-limit";
    case RecordedEnd::kRunning: return "running";
  }
  return "finished";
}

int GpuCount(const std::vector<sim::TraceNode>& nodes) {
  int n = 0;
  for (const sim::TraceNode& t : nodes) n += t.gpus;
  return n;
}

Result<std::vector<sim::TraceNode>> NodesFromSpec(std::string_view spec) {
  GPUSLICE_ASSIGN_OR_RETURN(sim::Cluster c, sim::ParseClusterSpec(spec));
  std::vector<sim::TraceNode> nodes;
  nodes.reserve(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    const sim::SimNode& n = c.node(i);
    nodes.push_back(sim::TraceNode{n.name, n.cpu_total, n.memory_total, static_cast<int>(n.gpus.size()), n.model});
  }
  return nodes;
}

Status CheckHistory(const History& h) {
  if (h.nodes.empty() || GpuCount(h.nodes) == 0) return InvalidArgument(fmt::format("{}: no GPUs to replay on", h.source));
  for (std::size_t i = 0; i < h.jobs.size(); ++i) {
    const sim::ReplayJob& j = h.jobs[i].job;
    if (j.tag != i) return Internal(fmt::format("job '{}': tag {} is not its index {}", j.id, j.tag, i));
    if (!j.queue.empty() && h.config.FindQueue(j.queue) == nullptr) {
      std::string names;
      for (const auto& q : h.config.queues) names += (names.empty() ? "" : ", ") + q.name;
      return InvalidArgument(fmt::format("{}: queue '{}' is not a queue of the config (queues: {})",
                                         j.where.empty() ? "job '" + j.id + "'" : j.where, j.queue, names));
    }
    Micros total = 0;
    for (const sim::ActivityRun& r : j.activity) total += r.length;
    if (total > j.duration) {
      return Internal(fmt::format("job '{}': activity of {} is longer than its duration {}", j.id,
                                  FormatDuration(total), FormatDuration(j.duration)));
    }
  }
  return Status::Ok();
}

}  // namespace gpuslice::whatif
