// BuildReport: the report document from the store. Held time comes from the slice records
// (created .. released, exact); utilisation, measured coverage and idle time from the stored
// points of each slice (store.h SampleRecord); waits from the job records and the "wait"
// events the daemon records when a pending job's reason changes. Integer milli-GPU x
// microseconds inside; GPU-hours (doubles, 3 decimals) only in the document.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/text.h"
#include "core/usage.h"
#include "report/report.h"

namespace gpuslice::report {
namespace {

using Json = nlohmann::json;
using store::JobRecord;
using store::JobState;
using store::SliceRecord;

// milli-GPU x microseconds.
using MilliUs = std::int64_t;
constexpr double kMilliUsPerGpuHour = 1000.0 * static_cast<double>(kHour);

double Hours(MilliUs v) { return std::round(static_cast<double>(v) / kMilliUsPerGpuHour * 1000.0) / 1000.0; }
Json Percent(MilliUs part, MilliUs whole) {
  if (whole <= 0) return nullptr;
  return std::round(1000.0 * static_cast<double>(part) / static_cast<double>(whole)) / 10.0;
}

struct Figures {
  MilliUs held = 0;
  MilliUs measured = 0;   // held and measured (utilisation known)
  MilliUs used = 0;       // utilisation-weighted, over the measured part
  MilliUs idle = 0;       // measured idle
  MilliUs returned = 0;   // what idle reclaim gave back (see docs/report.md)
  int jobs = 0;
  int timed_out = 0;
  int reclaimed = 0;
  void Add(const Figures& o) {
    held += o.held;
    measured += o.measured;
    used += o.used;
    idle += o.idle;
    returned += o.returned;
    jobs += o.jobs;
    timed_out += o.timed_out;
    reclaimed += o.reclaimed;
  }
};

Json FiguresJson(const Figures& f) {
  return {{"held_gpu_hours", Hours(f.held)},
          {"used_gpu_hours", f.measured > 0 ? Json(Hours(f.used)) : Json(nullptr)},
          {"measured_gpu_hours", Hours(f.measured)},
          {"unknown_gpu_hours", Hours(std::max<MilliUs>(0, f.held - f.measured))},
          {"coverage_percent", Percent(f.measured, f.held)},
          {"used_percent_of_measured", Percent(f.used, f.measured)},
          {"idle_gpu_hours", Hours(f.idle)},
          {"idle_percent_of_held", Percent(f.idle, f.held)},
          {"reclaim_returned_gpu_hours", Hours(f.returned)},
          {"jobs", f.jobs},
          {"timed_out", f.timed_out},
          {"reclaimed", f.reclaimed}};
}

// Nearest-rank percentile of sorted values.
Micros Percentile(const std::vector<Micros>& sorted, int pct) {
  if (sorted.empty()) return 0;
  std::size_t rank = static_cast<std::size_t>(std::ceil(pct / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

Json WaitJson(const std::string& key_name, const std::string& key, std::vector<Micros> waits) {
  std::sort(waits.begin(), waits.end());
  Micros total = 0;
  for (Micros w : waits) total += w;
  return {{key_name, key},
          {"jobs", waits.size()},
          {"p50_us", waits.empty() ? Json(nullptr) : Json(Percentile(waits, 50))},
          {"p95_us", waits.empty() ? Json(nullptr) : Json(Percentile(waits, 95))},
          {"total_us", total}};
}

// A slice's size in milli-GPU: per device, times its devices.
MilliUs SliceMilli(const SliceRecord& s) {
  return static_cast<MilliUs>(s.milli) * static_cast<MilliUs>(std::max<std::size_t>(1, s.devices.size()));
}

// The utilisation-weighted use of `known` measured µs whose utilisation integral is
// `util_known` (permille x µs), by the one definition of "used" (core/usage.h).
MilliUs UsedOf(const SliceRecord& s, std::int64_t util_known_permille_us, Micros known) {
  return UsedMilliMicros(s.kind, SliceMilli(s), util_known_permille_us, known);
}

// Waits that weigh in the verdict (docs/report.md, "The verdict"): a p95 wait at or above
// this in any queue is a long wait. Ten minutes: a notebook user who waits that long for a
// server has stopped waiting, and a training job that waits that long on most submissions
// is a host that is full in practice, whatever its average.
constexpr Micros kLongWait = 10 * kMinute;

struct WaitSummary {
  std::string worst_queue;  // the queue with the longest p95 wait; empty: no started job
  Micros worst_p95 = 0;
  int never_ran = 0;        // jobs that could never run on this host
};

struct Verdict {
  std::string code;
  std::string text;
};

// Thresholds (docs/report.md, "The verdict"): a host whose measured use is under half of what
// is held has room to grow on the GPUs it has (Gao et al., ICSE'24, count a job at or under 50%
// average utilisation as low-utilisation); one held at 80% or more and used at 50% or more of
// what is held is full and well used; a host held under half the time has capacity to spare.
// With under half of the held hours measured, no verdict on use is given.
//
// Waits weigh in as well: held and used say how the GPUs were spent, not whether people got
// them. A long p95 wait turns "headroom" into "the free capacity did not fit what was asked";
// jobs that could never run are named in every verdict.
Verdict Decide(int devices, MilliUs capacity, const Figures& t, const std::string& idle_queue,
               MilliUs idle_queue_hours, const WaitSummary& waits) {
  Verdict v;
  const std::string head = fmt::format("{} GPU{}", devices, devices == 1 ? "" : "s");
  if (capacity <= 0) return {"no_data", head + ": no stored history in this period"};
  const double held = static_cast<double>(t.held) / static_cast<double>(capacity);
  std::string lead = fmt::format("{}: {:.0f}% held", head, 100 * held);
  const bool long_waits = !waits.worst_queue.empty() && waits.worst_p95 >= kLongWait;
  const std::string wait_note =
      long_waits ? fmt::format("p95 wait {} in {}", FormatDuration(waits.worst_p95 / kSecond * kSecond),
                               waits.worst_queue)
                 : "";
  const std::string never_note =
      waits.never_ran > 0
          ? fmt::format("; {} job{} could never run on this host", waits.never_ran, waits.never_ran == 1 ? "" : "s")
          : "";
  if (t.held == 0) return {"idle_host", lead + " — nothing ran; capacity to spare" + never_note};
  const double coverage = static_cast<double>(t.measured) / static_cast<double>(t.held);
  if (coverage < 0.5) {
    return {"unmeasured", fmt::format("{}, use unknown for {:.0f}% of held hours — measure "
                                      "utilisation before deciding on capacity{}{}",
                                      lead, 100 * (1 - coverage), long_waits ? "; " + wait_note : "",
                                      never_note)};
  }
  // Used as a share of capacity, scaled from the measured part (said so in the docs).
  const double used_of_held = static_cast<double>(t.used) / static_cast<double>(t.measured);
  const double used = held * used_of_held;
  lead += fmt::format(", {:.0f}% used", 100 * used);
  if (coverage < 0.995) lead += fmt::format(" ({:.0f}% of held hours measured)", 100 * coverage);
  if (used_of_held < 0.5) {
    v = {"improve_utilisation", lead + " — improve utilisation before adding capacity" +
                                    (long_waits ? " (jobs waited: " + wait_note + ")" : "")};
  } else if (held >= 0.8) {
    v = {"add_capacity", lead + " — held and well used: more GPUs would shorten waits" +
                             (long_waits ? " (" + wait_note + ")" : "")};
  } else if (long_waits) {
    v = {"long_waits", lead + " — yet jobs waited long (" + wait_note +
                           "): the free capacity did not fit what they asked (see the waits by reason)"};
  } else if (held < 0.5) {
    v = {"spare_capacity", lead + " — well used when held; capacity to spare"};
  } else {
    v = {"balanced", lead + " — well used, with headroom"};
  }
  v.text += never_note;
  if (!idle_queue.empty() && idle_queue_hours * 5 >= t.held) {  // 20% or more of held hours
    v.text += fmt::format("; {:.0f}% of held hours were idle {} sessions",
                          100.0 * static_cast<double>(idle_queue_hours) / static_cast<double>(t.held),
                          idle_queue);
  }
  return v;
}

Micros TimelineWidth(Micros span, int max_buckets) {
  for (Micros w : {kMinute, 5 * kMinute, 15 * kMinute, kHour, 3 * kHour, 6 * kHour, 24 * kHour,
                   7 * 24 * kHour}) {
    if (span / w <= max_buckets) return w;
  }
  return (span / max_buckets / kHour + 1) * kHour;
}

}  // namespace

Result<Json> BuildReport(store::Store& store, const ReportOptions& o) {
  const Micros from = o.period.from;
  const Micros to = std::min(o.period.to, o.now);
  if (from >= to) {
    return InvalidArgument(fmt::format("period {} .. {}: empty", FormatTimePoint(from), FormatTimePoint(to)));
  }
  GPUSLICE_ASSIGN_OR_RETURN(auto jobs_list, store.ListJobsBrief());
  GPUSLICE_ASSIGN_OR_RETURN(auto slices, store.ListSlicesBrief());
  GPUSLICE_ASSIGN_OR_RETURN(auto oldest, store.OldestSample());
  // Where the stored history begins: the oldest point (less nothing: it may be a coarse
  // one; its end is what we know) or the oldest job, whichever is earlier.
  std::optional<Micros> history;
  if (oldest) history = *oldest;
  for (const auto& j : jobs_list) {
    if (j.submit_time > 0) history = history ? std::min(*history, j.submit_time) : j.submit_time;
  }
  if (!history || *history >= to) {
    return NotFound(fmt::format("period {} .. {}: no stored history before {}{}", FormatTimePoint(from),
                                FormatTimePoint(to), FormatTimePoint(to),
                                history ? fmt::format(" (it begins {})", FormatTimePoint(*history))
                                        : std::string(" (the store holds none yet)")));
  }
  const Micros data_from = std::max(from, *history);

  std::map<JobId, const JobRecord*> jobs;
  for (const auto& j : jobs_list) jobs[j.id] = &j;
  std::map<JobId, std::vector<const SliceRecord*>> slices_of;
  for (const auto& s : slices) slices_of[s.job].push_back(&s);

  // One read of the points, per subject and timeline bucket; the per-subject totals are the
  // sums of its buckets.
  const Micros width = TimelineWidth(to - from, o.max_timeline);
  GPUSLICE_ASSIGN_OR_RETURN(auto buckets, store.SumSamples(from, to, width));
  std::vector<store::SampleSum> sums;
  for (const auto& b : buckets) {
    if (sums.empty() || sums.back().subject != b.subject) {
      sums.push_back(store::SampleSum{b.subject, from, 0, 0, 0, 0});
    }
    store::SampleSum& t = sums.back();
    t.span += b.span;
    t.known += b.known;
    t.idle += b.idle;
    t.util_known += b.util_known;
  }
  std::map<std::uint64_t, const store::SampleSum*> slice_sum;
  std::set<int> device_subjects;
  for (const auto& s : sums) {
    if (s.subject.starts_with("slice/")) {
      slice_sum[std::strtoull(s.subject.c_str() + 6, nullptr, 10)] = &s;
    } else if (s.subject.starts_with("device/")) {
      device_subjects.insert(std::atoi(s.subject.c_str() + 7));
    }
  }
  int devices = o.devices.value_or(static_cast<int>(device_subjects.size()));
  if (!o.devices && device_subjects.empty()) {
    // No device points in the period: at least the devices its slices name.
    for (const auto& s : slices) {
      for (int d : s.devices) devices = std::max(devices, std::min(d, 4095) + 1);
    }
  }
  const MilliUs capacity = static_cast<MilliUs>(devices) * 1000 * (to - data_from);

  // Per slice figures, into groups.
  std::map<std::string, Figures> groups;
  std::map<JobId, Figures> per_job;
  std::map<std::string, MilliUs> idle_by_queue;
  const std::size_t nb = static_cast<std::size_t>((to - from + width - 1) / width);
  std::vector<MilliUs> tl_held(nb, 0), tl_measured(nb, 0), tl_used(nb, 0);
  std::map<std::uint64_t, const SliceRecord*> slice_by_id;
  for (const auto& s : slices) {
    slice_by_id[s.id.value()] = &s;
    const Micros end = s.active ? to : std::min(to, s.released > 0 ? s.released : to);
    const Micros a = std::max(from, s.created), b = std::min(to, end);
    if (s.created <= 0 || b <= a) continue;
    auto jit = jobs.find(s.job);
    const JobRecord* j = jit == jobs.end() ? nullptr : jit->second;
    const MilliUs m = SliceMilli(s);
    Figures f;
    f.held = m * (b - a);
    if (auto it = slice_sum.find(s.id.value()); it != slice_sum.end()) {
      // Measured time never exceeds held time (a point at the period's edge may reach past it).
      const Micros known = std::min<Micros>(it->second->known, b - a);
      f.measured = m * known;
      // Scaled down with the measured time when that was clipped (128 bits: a year of
      // milli-GPU x permille x microseconds squared does not fit in 64).
      const MilliUs raw_used = UsedOf(s, it->second->util_known, it->second->known);
      const MilliUs used = it->second->known > known
                               ? static_cast<MilliUs>(static_cast<__int128>(raw_used) * known / it->second->known)
                               : raw_used;
      f.used = std::min(f.measured, it->second->known > 0 ? used : 0);
      f.idle = m * std::min<Micros>(it->second->idle, known);
    }
    for (std::size_t k = static_cast<std::size_t>((a - from) / width); k < nb; ++k) {
      const Micros ba = from + static_cast<Micros>(k) * width, bb = std::min(to, ba + width);
      if (ba >= b) break;
      tl_held[k] += m * (std::min(b, bb) - std::max(a, ba));
    }
    per_job[s.job].Add(f);
    if (j) idle_by_queue[j->queue] += f.idle;
    auto add = [&](const std::string& key, const Figures& g) { groups[key].Add(g); };
    if (o.by == GroupBy::kDevice) {
      const auto n = static_cast<MilliUs>(std::max<std::size_t>(1, s.devices.size()));
      Figures share{f.held / n, f.measured / n, f.used / n, f.idle / n, 0, 0, 0, 0};
      for (int d : s.devices) add(fmt::format("{}", d), share);
    }
  }
  for (const auto& b : buckets) {
    if (!b.subject.starts_with("slice/")) continue;
    auto it = slice_by_id.find(std::strtoull(b.subject.c_str() + 6, nullptr, 10));
    if (it == slice_by_id.end()) continue;
    const auto k = static_cast<std::size_t>((b.bucket - from) / width);
    if (k >= nb) continue;
    tl_measured[k] += SliceMilli(*it->second) * b.known;
    tl_used[k] += UsedOf(*it->second, b.util_known, b.known);
  }

  // Jobs: counts, reclaim returns, waits.
  std::map<std::string, std::vector<Micros>> waits_by_queue;
  for (const auto& j : jobs_list) {
    const bool ended_in = store::IsTerminal(j.state) && j.end_time >= from && j.end_time < to;
    Figures& f = per_job[j.id];
    const bool ran_in = f.held > 0 || ended_in;
    if (ran_in) f.jobs = 1;
    if (ended_in && j.state == JobState::kTimedOut) f.timed_out = 1;
    if (ended_in && j.state == JobState::kReclaimed) {
      f.reclaimed = 1;
      // What it would have held until its time limit (or the period's end, when it has none).
      const Micros until = std::min(to, j.deadline > 0 ? j.deadline : to);
      MilliUs m = 0;
      if (auto it = slices_of.find(j.id); it != slices_of.end()) m = SliceMilli(*it->second.back());
      if (until > j.end_time) f.returned = m * (until - j.end_time);
    }
    if (j.submit_time >= from && j.submit_time < to && j.start_time > 0) {
      waits_by_queue[j.queue].push_back(j.start_time - j.submit_time);
    }
    if (o.by == GroupBy::kDevice) {
      // Counts go to the devices the job's slices used.
      std::set<int> devs;
      if (auto it = slices_of.find(j.id); it != slices_of.end()) {
        for (const SliceRecord* s : it->second) devs.insert(s->devices.begin(), s->devices.end());
      }
      for (int d : devs) {
        Figures& g = groups[fmt::format("{}", d)];
        g.jobs += f.jobs;
        g.timed_out += f.timed_out;
        g.reclaimed += f.reclaimed;
        g.returned += f.returned / static_cast<MilliUs>(devs.size());
      }
    } else if (ran_in) {
      std::string key = o.by == GroupBy::kUser ? j.user
                        : o.by == GroupBy::kQueue ? j.queue
                                                  : fmt::format("{}", j.id.value());
      groups[key].Add(f);
    }
  }

  // Wait by reason: the "wait" events (message "<reason kind>: <text>") cut each job's wait
  // into intervals; the interval before the first event is the job's first reason as well.
  std::map<std::string, std::vector<Micros>> waits_by_reason;
  std::map<JobId, std::string> never_fits_why;  // jobs told they could never fit, and why
  {
    GPUSLICE_ASSIGN_OR_RETURN(auto events, store.ListEventsOfType("wait", to));
    std::map<JobId, std::vector<std::pair<Micros, std::string>>> changes;
    for (const auto& e : events) {
      if (!e.job.valid()) continue;
      const std::string kind = e.message.substr(0, e.message.find(':'));
      changes[e.job].emplace_back(e.time, kind);
      if (kind == "never-fits" && e.time < to) {
        const std::size_t colon = e.message.find(':');
        never_fits_why[e.job] = colon == std::string::npos ? "" : e.message.substr(std::min(e.message.size(), colon + 2));
      }
    }
    for (auto& [id, ch] : changes) {
      auto jit = jobs.find(id);
      if (jit == jobs.end()) continue;
      const JobRecord& j = *jit->second;
      const Micros end = j.start_time > 0 ? j.start_time : (store::IsTerminal(j.state) ? j.end_time : to);
      std::map<std::string, Micros> per_reason;
      for (std::size_t i = 0; i < ch.size(); ++i) {
        const Micros a = std::max({from, i == 0 ? j.submit_time : ch[i].first});
        const Micros b = std::min(to, i + 1 < ch.size() ? ch[i + 1].first : end);
        if (b > a) per_reason[ch[i].second] += b - a;
      }
      for (const auto& [r, t] : per_reason) waits_by_reason[r].push_back(t);
    }
  }

  Figures total;
  for (const auto& [id, f] : per_job) total.Add(f);
  std::string idle_queue;
  MilliUs idle_queue_hours = 0;
  for (const auto& [q, v] : idle_by_queue) {
    if (v > idle_queue_hours) {
      idle_queue = q;
      idle_queue_hours = v;
    }
  }

  Json doc;
  doc["period"] = {{"from", FormatTimePoint(from)}, {"to", FormatTimePoint(to)},
                   {"from_us", from}, {"to_us", to},
                   {"history_from", FormatTimePoint(data_from)}, {"history_from_us", data_from}};
  doc["by"] = GroupByName(o.by);
  doc["devices"] = devices;
  doc["simulated"] = o.simulated;
  Json totals = FiguresJson(total);
  totals["capacity_gpu_hours"] = Hours(capacity);
  totals["held_percent"] = Percent(total.held, capacity);
  // Used as a share of capacity, from the measured part (null when nothing was measured).
  totals["used_percent"] = total.measured > 0
                               ? Json(std::round(1000.0 * static_cast<double>(total.held) /
                                                 static_cast<double>(capacity) * static_cast<double>(total.used) /
                                                 static_cast<double>(total.measured)) / 10.0)
                               : Json(nullptr);
  doc["totals"] = totals;
  Json g = Json::array();
  std::vector<std::pair<std::string, Figures>> ordered(groups.begin(), groups.end());
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const auto& a, const auto& b) { return a.second.held > b.second.held; });
  for (const auto& [key, f] : ordered) {
    Json row = FiguresJson(f);
    row["key"] = EscapeInvalidUtf8(key);
    g.push_back(std::move(row));
  }
  doc["groups"] = g;
  Json w = Json::array();
  WaitSummary waits;
  for (auto& [q, v] : waits_by_queue) {
    w.push_back(WaitJson("queue", q, v));
    const Micros p95 = w.back()["p95_us"].is_number() ? w.back()["p95_us"].get<Micros>() : 0;
    if (waits.worst_queue.empty() || p95 > waits.worst_p95) {
      waits.worst_queue = q;
      waits.worst_p95 = p95;
    }
  }
  doc["wait"] = w;
  // Jobs that could never run: refused by the scheduler as never fitting (rejected), or
  // waiting with "could never fit on this host" and never started; in the period.
  Json never = Json::array();
  for (const auto& j : jobs_list) {
    const bool in_period = j.submit_time < to && (j.end_time == 0 || j.end_time >= from);
    if (!in_period || j.start_time > 0) continue;
    std::string why;
    if (j.state == JobState::kRejected && j.submit_time >= from) {
      why = j.reason;
    } else if (auto it = never_fits_why.find(j.id); it != never_fits_why.end()) {
      why = it->second;
    } else {
      continue;
    }
    ++waits.never_ran;
    if (never.size() < 20) {
      never.push_back({{"job", j.id.value()}, {"user", EscapeInvalidUtf8(j.user)}, {"queue", EscapeInvalidUtf8(j.queue)},
                       {"state", std::string(store::JobStateName(j.state))}, {"why", EscapeInvalidUtf8(why)}});
    }
  }
  doc["never_ran"] = {{"jobs", waits.never_ran}, {"list", never}};
  doc["long_wait_us"] = kLongWait;
  Json wr = Json::array();
  for (auto& [r, v] : waits_by_reason) wr.push_back(WaitJson("reason", r, v));
  doc["wait_by_reason"] = wr;
  // The sessions that held most while idle.
  std::vector<std::pair<JobId, Figures>> idle(per_job.begin(), per_job.end());
  std::erase_if(idle, [](const auto& e) { return e.second.idle <= 0; });
  std::stable_sort(idle.begin(), idle.end(), [](const auto& a, const auto& b) { return a.second.idle > b.second.idle; });
  Json top = Json::array();
  for (std::size_t i = 0; i < idle.size() && static_cast<int>(i) < o.top_idle; ++i) {
    const auto& [id, f] = idle[i];
    auto jit = jobs.find(id);
    Json row = FiguresJson(f);
    row["job"] = id.value();
    row["user"] = jit != jobs.end() ? EscapeInvalidUtf8(jit->second->user) : "";
    row["queue"] = jit != jobs.end() ? EscapeInvalidUtf8(jit->second->queue) : "";
    row["state"] = jit != jobs.end() ? std::string(store::JobStateName(jit->second->state)) : "";
    top.push_back(std::move(row));
  }
  doc["top_idle"] = top;
  Json pts = Json::array();
  for (std::size_t k = 0; k < nb; ++k) {
    const Micros ba = from + static_cast<Micros>(k) * width;
    const Micros len = std::min(to, ba + width) - ba;
    auto gpus = [&](MilliUs v) { return std::round(static_cast<double>(v) / 1000.0 / static_cast<double>(len) * 1000.0) / 1000.0; };
    pts.push_back({{"t_us", ba},
                   {"held_gpus", gpus(tl_held[k])},
                   {"measured_gpus", gpus(std::min(tl_measured[k], tl_held[k]))},
                   {"used_gpus", tl_measured[k] > 0 ? Json(gpus(tl_used[k])) : Json(nullptr)}});
  }
  doc["timeline"] = {{"bucket_us", width}, {"points", pts}};
  const Verdict v = Decide(devices, capacity, total, idle_queue, idle_queue_hours, waits);
  doc["verdict"] = {{"code", v.code}, {"text", v.text}};
  return doc;
}

}  // namespace gpuslice::report
