#include "whatif/csv_history.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/generic_trace.h"

namespace gpuslice::whatif {

std::vector<sim::ActivityRun> RunsFromUtilisation(double utilisation, Micros duration, const sched::QueueConfig* queue) {
  if (duration <= 0) return {};
  if (utilisation < 0) return {sim::ActivityRun{duration, -1, sim::RunState::kUnknown}};
  const int threshold = queue != nullptr && queue->idle.enabled ? queue->idle.util_threshold_percent : 5;
  const int percent = static_cast<int>(std::lround(utilisation * 100));
  const bool busy = percent > 0 && percent >= threshold;
  return {sim::ActivityRun{duration, static_cast<std::int16_t>(std::lround(utilisation * 1000)),
                           busy ? sim::RunState::kActive : sim::RunState::kIdle}};
}

Result<History> HistoryFromCsv(const std::string& path, std::vector<sim::TraceNode> nodes,
                               std::optional<sched::Config> config, const sim::ReadOptions& options) {
  GPUSLICE_ASSIGN_OR_RETURN(sim::CsvTable t, sim::CsvTable::Open(path, {"submit", "duration", "gpus"}));
  History h;
  h.source = "csv " + path;
  h.nodes = std::move(nodes);
  sim::SkippedRows skipped;
  std::int64_t row = 0;
  Micros first = INT64_MAX, last = 0;
  auto read = [&]() -> Result<HistoryJob> {
    HistoryJob hj;
    GPUSLICE_ASSIGN_OR_RETURN(hj.job, sim::ParseGenericJob(t, row));
    if (t.Has("memory_peak")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view m, t.Field("memory_peak"));
      if (!m.empty()) {
        auto b = ParseBytes(m);
        if (!b.ok()) return t.Error("memory_peak", m, "is not a size (10GiB, 512MiB)");
        hj.memory_peak = *b;
      }
    }
    if (t.Has("ended")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string_view e, t.Field("ended"));
      if (e == "reclaimed") hj.ended = RecordedEnd::kIdleReclaimed;
      else if (e == "time-limit") hj.ended = RecordedEnd::kTimeLimit;
      else if (e == "running") hj.ended = RecordedEnd::kRunning;
      else if (!e.empty() && e != "finished") return t.Error("ended", e, "is not finished, reclaimed, time-limit or running");
    }
    return hj;
  };
  while (t.Next()) {
    ++row;
    Result<HistoryJob> hj = read();
    if (!hj.ok()) {
      if (!options.skip_bad_rows) return hj.status();
      skipped.Add(hj.status());
      continue;
    }
    if (hj->job.request.num_gpus == 0) continue;  // CPU only: nothing to replay
    first = std::min(first, hj->job.submit);
    last = std::max(last, hj->job.submit + hj->job.duration);
    h.jobs.push_back(std::move(hj).value());
  }
  if (h.jobs.empty()) return InvalidArgument(fmt::format("{}: no GPU jobs", path));
  if (skipped.count > 0) {
    h.notes.push_back(fmt::format("skipped {} bad row(s) of {}; first: {}", skipped.count, path, skipped.first_errors.front()));
  }
  if (config) {
    h.config = std::move(*config);
  } else {
    std::vector<sim::ReplayJob> jobs;
    jobs.reserve(h.jobs.size());
    for (const HistoryJob& j : h.jobs) {
      jobs.emplace_back();
      jobs.back().queue = j.job.queue;
    }
    GPUSLICE_ASSIGN_OR_RETURN(h.config, sim::ReplayConfig("gpuslice", jobs));
    h.notes.push_back("no --config: each queue of the file has no time limit and no idle policy");
  }
  for (std::size_t i = 0; i < h.jobs.size(); ++i) {
    HistoryJob& hj = h.jobs[i];
    sim::ReplayJob& j = hj.job;
    j.tag = static_cast<std::uint32_t>(i);
    hj.held_milli = static_cast<MilliGpu>(std::max(1, j.request.num_gpus)) * j.request.milli_per_gpu;
    if (j.activity.empty()) {
      j.activity = RunsFromUtilisation(j.utilisation, j.duration,
                                       h.config.FindQueue(j.queue.empty() ? h.config.default_queue : j.queue));
    }
  }
  h.from = first;
  h.to = last;
  return h;
}

}  // namespace gpuslice::whatif
