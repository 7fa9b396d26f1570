#include "whatif/store_history.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/catalogue.h"

namespace gpuslice::whatif {

SliceActivity ActivityFromPoints(std::vector<store::SampleRecord> points, Micros from, Micros to,
                                 MilliGpu level_scale_milli) {
  std::sort(points.begin(), points.end(), [](const store::SampleRecord& a, const store::SampleRecord& b) { return a.time < b.time; });
  SliceActivity out;
  Micros cursor = from;
  auto add = [&](Micros len, std::int16_t level, sim::RunState st) { sim::AppendRun(out.runs, sim::ActivityRun{len, level, st}); };
  for (const store::SampleRecord& p : points) {
    if (p.span <= 0) continue;  // an old daemon's point without a span says nothing of time
    const Micros end = std::min(p.time, to);
    const Micros start = std::max({p.time - p.span, from, cursor});
    if (end <= start) continue;
    if (start > cursor) add(start - cursor, -1, sim::RunState::kUnknown);
    // The part of the point inside [start, end), its measured and idle time pro rata.
    const Micros len = end - start;
    const Micros known = static_cast<Micros>(static_cast<__int128>(std::clamp<Micros>(p.known, 0, p.span)) * len / p.span);
    const Micros idle = std::min(known, static_cast<Micros>(static_cast<__int128>(std::max<Micros>(p.idle, 0)) * len / p.span));
    const Micros busy = known - idle;
    std::int16_t level = -1;
    if (p.util_permille >= 0 && busy > 0) {
      // The point's mean is over its measured time; idle samples sit near 0, so the busy
      // part carries it. Then per mille of the slice's share.
      const std::int64_t of_device = static_cast<std::int64_t>(p.util_permille) * known / busy;
      level = static_cast<std::int16_t>(std::clamp<std::int64_t>(of_device * 1000 / std::max<MilliGpu>(level_scale_milli, 1), 0, 1000));
    }
    if (!out.runs.empty() && out.runs.back().state == sim::RunState::kIdle) {
      add(idle, 0, sim::RunState::kIdle);
      add(busy, level, sim::RunState::kActive);
    } else {
      add(busy, level, sim::RunState::kActive);
      add(idle, 0, sim::RunState::kIdle);
    }
    add(len - known, -1, sim::RunState::kUnknown);
    if (p.memory_used >= 0) out.memory_peak = std::max(out.memory_peak, p.memory_used);
    cursor = end;
  }
  if (to > cursor) add(to - cursor, -1, sim::RunState::kUnknown);
  return out;
}

namespace {

RecordedEnd EndOf(store::JobState s) {
  switch (s) {
    case store::JobState::kReclaimed: return RecordedEnd::kIdleReclaimed;
    case store::JobState::kTimedOut: return RecordedEnd::kTimeLimit;
    case store::JobState::kStarting:
    case store::JobState::kRunning:
    case store::JobState::kStopping: return RecordedEnd::kRunning;
    default: return RecordedEnd::kFinished;
  }
}

}  // namespace

Result<History> HistoryFromStore(store::Store& st, const StoreHistoryOptions& o) {
  History h;
  h.source = o.source.empty() ? "the daemon's store" : o.source;
  h.config = o.config;
  h.from = o.period.from;
  h.to = o.period.to;
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<store::JobRecord> jobs, st.ListJobs());
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<store::SliceRecord> slices, st.ListSlices(false));
  std::map<JobId, const store::SliceRecord*> last_slice;  // a requeued job's last slice is what ran
  int max_device = -1;
  for (const store::SliceRecord& s : slices) {
    auto& at = last_slice[s.job];
    if (at == nullptr || s.created >= at->created) at = &s;
    for (int d : s.devices) max_device = std::max(max_device, d);
  }
  // Submitted in the period, most recent last; bounded to the newest max_jobs.
  std::vector<const store::JobRecord*> in;
  for (const store::JobRecord& j : jobs) {
    if (j.submit_time >= o.period.from && j.submit_time < o.period.to) in.push_back(&j);
  }
  std::stable_sort(in.begin(), in.end(), [](const store::JobRecord* a, const store::JobRecord* b) { return a->submit_time < b->submit_time; });
  if (o.max_jobs > 0 && in.size() > o.max_jobs) {
    h.notes.push_back(fmt::format("{} jobs in the period; the newest {} replayed (from {})", in.size(), o.max_jobs,
                                  report::FormatTimePoint(in[in.size() - o.max_jobs]->submit_time)));
    h.from = in[in.size() - o.max_jobs]->submit_time;
    in.erase(in.begin(), in.end() - static_cast<std::ptrdiff_t>(o.max_jobs));
  }
  std::int64_t never_ran = 0, unknown_queue = 0;
  for (const store::JobRecord* j : in) {
    auto ls = last_slice.find(j->id);
    if (ls == last_slice.end() || ls->second->created <= 0) {
      ++never_ran;  // rejected, cancelled or still pending: no run to replay
      continue;
    }
    const store::SliceRecord& s = *ls->second;
    const sched::QueueConfig* q = h.config.FindQueue(j->queue.empty() ? h.config.default_queue : j->queue);
    if (q == nullptr) {
      ++unknown_queue;
      continue;
    }
    const SliceKind kind = s.kind;
    const Micros start = s.created;
    const Micros end = s.released > 0 ? std::min(s.released, o.period.to) : o.period.to;
    if (end <= start) continue;
    HistoryJob hj;
    sim::ReplayJob& r = hj.job;
    r.id = std::to_string(j->id.value());
    r.where = fmt::format("job {}", j->id.value());
    r.submit = j->submit_time;
    r.duration = end - start;
    r.queue = j->queue;
    r.user = j->user;
    r.kind = kind;
    const int devices = std::max<int>(1, static_cast<int>(s.devices.size()));
    r.request.num_gpus = devices;
    r.request.milli_per_gpu = kind == SliceKind::kWhole ? kOneGpu : s.milli;
    r.request.gpu_memory_per_gpu = j->memory > 0 ? j->memory : s.memory_cap;
    if (!j->model.empty()) r.request.allowed_models = {j->model};
    hj.held_milli = r.request.milli_per_gpu * devices;
    hj.ended = s.released > 0 && s.released <= o.period.to ? EndOf(j->state) : RecordedEnd::kRunning;
    GPUSLICE_ASSIGN_OR_RETURN(std::vector<store::SampleRecord> points,
                              st.ListSamples(fmt::format("slice/{}", s.id.value()), start));
    const bool device_share = kind == SliceKind::kShared || kind == SliceKind::kMps;
    SliceActivity a = ActivityFromPoints(std::move(points), start, end, device_share ? s.milli : kOneGpu);
    // Offsets from the slice's start.
    r.activity = std::move(a.runs);
    hj.memory_peak = a.memory_peak;
    r.tag = static_cast<std::uint32_t>(h.jobs.size());
    h.jobs.push_back(std::move(hj));
  }
  if (never_ran > 0) h.notes.push_back(fmt::format("{} jobs of the period never held a slice: not replayed", never_ran));
  if (unknown_queue > 0) {
    h.notes.push_back(fmt::format("{} jobs of queues the config no longer has: not replayed", unknown_queue));
  }
  if (o.nodes.empty()) {
    const int gpus = std::max(1, max_device + 1);
    h.nodes = {sim::TraceNode{"host", 128000, 1024 * kGiB, gpus, "GPU"}};
    h.notes.push_back(fmt::format("the GPU model is not in the store: {} GPUs of an unknown model (no MIG); give "
                                  "--cluster 1x{}:MODEL to right-size to MIG",
                                  gpus, gpus));
  } else {
    h.nodes = o.nodes;
  }
  return h;
}

}  // namespace gpuslice::whatif
