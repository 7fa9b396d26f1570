#include "whatif/run.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "sim/cluster.h"

namespace gpuslice::whatif {
namespace {

// Follow-up jobs carry this bit in their tag, with their index in Collector::follows_.
constexpr std::uint32_t kFollowUp = 1u << 31;

Micros Percentile(std::vector<Micros>& v, int pct) {
  if (v.empty()) return 0;
  std::size_t rank = static_cast<std::size_t>((static_cast<std::int64_t>(v.size()) * pct + 99) / 100);
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank - 1), v.end());
  return v[rank - 1];
}

// Sums one scenario's replay, slice by slice (sim::SliceEnd), and makes the follow-up jobs of
// cut sessions. One replay's thread only.
class Collector {
 public:
  Collector(const History& h, const Prepared& p, const Scenario& s, const Assumptions& a, ScenarioResult& r)
      : h_(h), s_(s), a_(a), r_(r), seen_(h.jobs.size(), 0) {
    for (const sched::QueueConfig& q : p.config.queues) queue_index_.emplace(q.name, queue_index_.size());
    waits_.resize(queue_index_.size());
    hours_.resize(queue_index_.size());
    default_queue_ = p.config.default_queue;
  }

  void OnSliceEnd(const sim::SliceEnd& e) {
    const bool follow = (e.tag & kFollowUp) != 0;
    const std::uint32_t origin = follow ? follows_[e.tag & ~kFollowUp].origin : e.tag;
    const HistoryJob& hj = h_.jobs[origin];
    last_end_ = std::max(last_end_, e.end);
    if (e.start < 0) {
      if (e.how == sim::EndKind::kRejected) {
        if (!follow) ++r_.rejected;
        return;
      }
      // Never started: its wait so far is a lower bound.
      if (follow) {
        r_.owner_cost += e.end - e.submit;
      } else {
        Waits(hj).push_back(e.end - e.submit);
        ++r_.never_started;
      }
      return;
    }
    if (e.first) {
      if (follow) {
        Follow& f = follows_[e.tag & ~kFollowUp];
        r_.owner_cost += e.start - e.submit;
        if (f.cut >= 0) cuts_[f.cut].came_back = e.start - cuts_[f.cut].cut_at;
      } else {
        ++r_.started;
        Waits(hj).push_back(e.start - e.submit);
      }
    }
    const MilliUs share = static_cast<MilliUs>(e.milli) * e.devices;
    const Micros len = e.end - e.start;
    const sim::ActivityTotals t = sim::Integrate(e.job->activity, 0, len);
    r_.held += share * len;
    r_.busy += share * t.active;
    r_.idle += share * t.idle;
    r_.unknown += share * t.unknown;
    r_.busy_level_known += share * t.active_level_known;
    // The recorded level is of the share the job held then; what it does now is capped by
    // the share it holds now (a right-sized job busier than its instance runs slower).
    const MilliUs used = static_cast<MilliUs>(static_cast<__int128>(hj.held_milli) * t.used_permille_us / 1000);
    const MilliUs cap = share * t.active_level_known;
    r_.used += std::min(used, cap);
    QueueHours& q = hours_[QueueIndex(hj)];
    q.held += share * len;
    q.busy += share * t.active;
    q.idle += share * t.idle;
    q.unknown += share * t.unknown;
    q.busy_level_known += share * t.active_level_known;
    q.used += std::min(used, cap);
    if (used > cap && (seen_[origin] & kSlower) == 0) {
      seen_[origin] |= kSlower;
      ++r_.slower;
    }
    seen_[origin] |= kHeld;
    if (t.active + t.idle > 0) seen_[origin] |= kMeasured;
    if (follow && follows_[e.tag & ~kFollowUp].cut >= 0) cuts_[follows_[e.tag & ~kFollowUp].cut].follow_held += share * len;

    last_cut_ = -1;
    if (e.how == sim::EndKind::kReclaimed || e.how == sim::EndKind::kTimeLimit) {
      ++r_.cut;
      ++(e.how == sim::EndKind::kReclaimed ? r_.cut_reclaimed : r_.cut_time_limit);
      last_cut_ = static_cast<std::int64_t>(cuts_.size());
      cuts_.push_back(Cut{origin, e.how, len, e.end, -1, share * std::max<Micros>(0, e.job->duration - len), 0, 0});
    }
  }

  // A cut session with more work in its recording comes back for the rest (sim's follow_up).
  std::optional<sim::ReplayJob> FollowUp(const sim::ReplayJob& job, Micros started, Micros now, sim::EndKind how) {
    const Micros cut_at = now - started;
    Micros back = -1;  // offset in this job's recording where the rest starts
    Micros submit = now;
    if (how == sim::EndKind::kReclaimed) {
      back = sim::NextActive(job.activity, cut_at);
      submit = started + back;
    } else if (how == sim::EndKind::kTimeLimit && Resubmits(job.queue) && cut_at < job.duration) {
      back = cut_at;
    }
    if (back < 0 || back >= job.duration) return std::nullopt;
    const bool follow = (job.tag & kFollowUp) != 0;
    const std::uint32_t origin = follow ? follows_[job.tag & ~kFollowUp].origin : job.tag;
    const Micros base = follow ? follows_[job.tag & ~kFollowUp].offset : 0;
    ++r_.cut_with_work_left;
    ++r_.follow_ups;
    r_.owner_cost += a_.restart_cost;
    if (last_cut_ >= 0) cuts_[last_cut_].owner_cost += a_.restart_cost;
    sim::ReplayJob next = job;
    next.id = h_.jobs[origin].job.id;
    next.submit = submit;
    next.duration = job.duration - back;
    next.activity = sim::RunsFrom(job.activity, back);
    next.tag = kFollowUp | static_cast<std::uint32_t>(follows_.size());
    follows_.push_back(Follow{origin, base + back, last_cut_});
    return next;
  }

  void Finish() {
    for (const auto& [name, index] : queue_index_) {
      std::vector<Micros>& w = waits_[index];
      QueueWaits q;
      q.queue = name;
      q.jobs = static_cast<std::int64_t>(w.size());
      if (!w.empty()) {
        q.max = *std::max_element(w.begin(), w.end());
        q.p95 = Percentile(w, 95);
        q.p50 = Percentile(w, 50);
      }
      r_.waits.push_back(std::move(q));
      hours_[index].queue = name;
      r_.hours.push_back(hours_[index]);
    }
    for (std::uint8_t f : seen_) {
      if ((f & kHeld) && !(f & kMeasured)) ++r_.unmeasured_jobs;
    }
    // The sessions whose cut gave most back, then by job order.
    std::vector<std::size_t> order(cuts_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    const std::size_t n = std::min(order.size(), ScenarioResult::kMaxCutListed);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(), [&](std::size_t x, std::size_t y) {
      const MilliUs gx = cuts_[x].after_hold - cuts_[x].follow_held, gy = cuts_[y].after_hold - cuts_[y].follow_held;
      return gx != gy ? gx > gy : x < y;
    });
    for (std::size_t i = 0; i < n; ++i) {
      const Cut& c = cuts_[order[i]];
      const sim::ReplayJob& j = h_.jobs[c.origin].job;
      CutSession cs;
      cs.id = j.id;
      cs.user = j.user;
      cs.queue = j.queue.empty() ? default_queue_ : j.queue;
      cs.how = std::string(sim::EndKindName(c.how));
      cs.held_before = c.held_before;
      cs.came_back = c.came_back;
      cs.owner_cost = c.owner_cost + (c.came_back >= 0 ? c.came_back : 0);
      cs.given_back = c.after_hold - c.follow_held;
      r_.cut_list.push_back(std::move(cs));
    }
  }

  Micros last_end() const { return last_end_; }

 private:
  static constexpr std::uint8_t kHeld = 1, kMeasured = 2, kSlower = 4;
  struct Follow {
    std::uint32_t origin;
    Micros offset;     // in the origin's recording
    std::int64_t cut;  // the cut that made it (index in cuts_), -1 none
  };
  struct Cut {
    std::uint32_t origin;
    sim::EndKind how;
    Micros held_before;
    Micros cut_at;
    Micros came_back;    // follow-up's wait after the cut until it started; -1: none
    MilliUs after_hold;  // what the recording would have held after the cut
    MilliUs follow_held;
    Micros owner_cost;   // restart cost (the follow-up's wait is added at the end)
  };

  std::size_t QueueIndex(const HistoryJob& hj) const {
    return queue_index_.at(hj.job.queue.empty() ? default_queue_ : hj.job.queue);
  }
  std::vector<Micros>& Waits(const HistoryJob& hj) { return waits_[QueueIndex(hj)]; }
  bool Resubmits(const std::string& queue) const {
    const std::string& q = queue.empty() ? default_queue_ : queue;
    return s_.max_duration && s_.max_duration->resubmit &&
           std::find(s_.max_duration->queues.begin(), s_.max_duration->queues.end(), q) != s_.max_duration->queues.end();
  }

  const History& h_;
  const Scenario& s_;
  const Assumptions& a_;
  ScenarioResult& r_;
  std::map<std::string, std::size_t> queue_index_;
  std::string default_queue_;
  std::vector<std::vector<Micros>> waits_;
  std::vector<QueueHours> hours_;
  std::vector<std::uint8_t> seen_;  // per history job: kHeld | kMeasured | kSlower
  std::vector<Follow> follows_;
  std::vector<Cut> cuts_;
  std::int64_t last_cut_ = -1;
  Micros last_end_ = 0;
};

}  // namespace

Result<ScenarioResult> RunScenario(const History& h, const Scenario& s, const Assumptions& a, std::uint64_t seed,
                                   std::optional<int> gpu_delta, const std::function<void(double)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  GPUSLICE_ASSIGN_OR_RETURN(Prepared p, Prepare(h, s, a, gpu_delta));
  ScenarioResult r;
  r.name = s.name;
  r.description = s.Describe();
  r.cures = (s.reclaim ? 1 : 0) + (s.time_slice ? 1 : 0) + (s.right_size ? 1 : 0) + (s.max_duration ? 1 : 0);
  r.gpu_change = s.gpus.has_value() || gpu_delta.has_value();
  r.gpus = p.gpus;
  r.jobs = static_cast<std::int64_t>(h.jobs.size());
  r.resized = p.resized;
  r.not_resized_unmeasured = p.not_resized_unmeasured;
  r.notes = std::move(p.notes);
  Collector c(h, p, s, a, r);
  sim::ReplayOptions o;
  o.seed = seed;
  o.samples = 2;
  o.wait_reasons = false;  // not reported by the what-if
  sim::ReplayHooks hooks;
  hooks.on_slice_end = [&c](const sim::SliceEnd& e) { c.OnSliceEnd(e); };
  hooks.follow_up = [&c](const sim::ReplayJob& j, Micros started, Micros now, sim::EndKind how) {
    return c.FollowUp(j, started, now, how);
  };
  const sim::Cluster cluster(p.nodes);
  sim::RunReplay(cluster, std::move(p.jobs), p.config, s.name, {}, o, progress, hooks);
  c.Finish();
  const Micros span = std::max(h.to, c.last_end()) - h.from;
  r.capacity = static_cast<MilliUs>(r.gpus) * kOneGpu * std::max<Micros>(span, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

Result<std::vector<ScenarioResult>> RunScenarios(const History& h, const WhatifSpec& spec, const RunOptions& o) {
  GPUSLICE_RETURN_IF_ERROR(CheckHistory(h));
  const std::size_t n = spec.scenarios.size();
  std::vector<Result<ScenarioResult>> out(n, Internal("not run"));
  std::vector<double> done(n, 0);
  std::mutex mu;  // guards done and the caller's progress callback
  auto report = [&](std::size_t i, double f) {
    if (!o.progress) return;
    std::lock_guard lock(mu);
    done[i] = f;
    double sum = 0;
    for (double d : done) sum += d;
    o.progress(sum / static_cast<double>(n));
  };
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) {
      out[i] = RunScenario(h, spec.scenarios[i], spec.assume, o.seed, std::nullopt,
                           [&, i](double f) { report(i, f); });
    }
  };
  const int threads = std::clamp<int>(o.threads, 1, static_cast<int>(n));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  std::vector<ScenarioResult> results;
  for (auto& r : out) {
    if (!r.ok()) return r.status();
    results.push_back(std::move(r).value());
  }
  for (ScenarioResult& r : results) r.given_back = results.front().held - r.held;
  return results;
}

std::string FormatWait(Micros us) { return us == 0 ? "0s" : FormatDuration(us); }

bool MeetsTargets(const ScenarioResult& r, const VerdictSpec& v) {
  for (const QueueWaits& q : r.waits) {
    if (q.jobs > 0 && q.p95 > v.Target(q.queue)) return false;
  }
  return true;
}

}  // namespace gpuslice::whatif
