// The placement-only replay loop (see placement_replay.h): kept as the replay benchmark's
// baseline, no longer what `gpuslice sim replay` runs.
#include "sim/placement_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>

#include "sched/placement/fgd_frag.h"
#include "sim/placer.h"

namespace gpuslice::sim {

std::string RequestKey(const sched::PlacementRequest& r) {
  std::string k = std::to_string(r.cpu_milli) + "/" + std::to_string(r.host_memory) + "/" +
                  std::to_string(r.num_gpus) + "/" + std::to_string(r.milli_per_gpu) + "/" +
                  std::to_string(r.gpu_memory_per_gpu);
  for (const std::string& m : r.allowed_models) k += "/" + m;
  return k;
}

namespace {

// Nodes in one state: the same model, capacities, free CPU and memory, and sorted GPU shares.
struct State {
  std::string model;
  std::int64_t cpu_total = 0, cpu_free = 0;
  Bytes mem_total = 0, mem_free = 0;
  std::vector<sched::GpuView> gpus;  // sorted by free share, ascending
  std::set<std::uint32_t> nodes;
  struct Entry {
    bool known = false;
    bool refused = false;
    double score = 0;
    std::vector<int> gpus;  // canonical indices
  };
  std::vector<Entry> cache;  // per request class; a state never changes, so entries stay valid
  sched::NodeView View() const {
    sched::NodeView v;
    v.model = model;
    v.cpu_milli_free = cpu_free;
    v.cpu_milli_total = cpu_total;
    v.memory_free = mem_free;
    v.memory_total = mem_total;
    v.gpus = gpus;
    return v;
  }
};

class StateIndex {
 public:
  explicit StateIndex(const Cluster& c) : node_state_(c.size()), perm_(c.size()) {
    for (std::size_t i = 0; i < c.size(); ++i) Update(c, static_cast<std::uint32_t>(i));
  }

  // Re-files node i after it changed.
  void Update(const Cluster& c, std::uint32_t i) {
    const SimNode& n = c.node(i);
    std::vector<int>& perm = perm_[i];
    perm.resize(n.gpus.size());
    for (std::size_t g = 0; g < perm.size(); ++g) perm[g] = static_cast<int>(g);
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int a, int b) { return n.gpus[a].free_milli < n.gpus[b].free_milli; });
    std::string key = n.model + "|" + std::to_string(n.cpu_total) + "|" + std::to_string(n.cpu_free) + "|" +
                      std::to_string(n.memory_total) + "|" + std::to_string(n.memory_free);
    for (int g : perm) key += "|" + std::to_string(n.gpus[g].free_milli) + (n.gpus[g].usable ? "" : "u");
    auto [it, added] = ids_.emplace(std::move(key), static_cast<int>(states_.size()));
    if (added) {
      State s;
      s.model = n.model;
      s.cpu_total = n.cpu_total;
      s.cpu_free = n.cpu_free;
      s.mem_total = n.memory_total;
      s.mem_free = n.memory_free;
      for (int g : perm) s.gpus.push_back(n.gpus[g]);
      states_.push_back(std::move(s));
    }
    const int old = node_state_[i] - 1;
    const int now = it->second;
    if (old == now) return;
    if (old >= 0) {
      states_[old].nodes.erase(i);
      if (states_[old].nodes.empty()) Deactivate(old);
    }
    if (states_[now].nodes.empty()) Activate(now);
    states_[now].nodes.insert(i);
    node_state_[i] = now + 1;
  }

  // Best node for `req` (class `klass`) over active states; ties: lowest node index.
  std::optional<Chosen> Place(const sched::PlacementPolicy& policy, const sched::PlacementContext& ctx,
                              const sched::PlacementRequest& req, int klass, std::uint64_t& scored) {
    int best = -1;
    double best_score = 0;
    std::uint32_t best_node = 0;
    for (int s : active_) {
      State& st = states_[s];
      if (static_cast<std::size_t>(klass) >= st.cache.size()) st.cache.resize(klass + 1);
      State::Entry& e = st.cache[klass];
      if (!e.known) {
        e.known = true;
        e.refused = !FitsState(st, req);
        if (!e.refused) {
          auto choice = policy.Score(req, st.View(), ctx);
          ++scored;
          e.refused = !choice.has_value();
          if (choice) {
            e.score = choice->score;
            e.gpus = std::move(choice->gpu_indices);
          }
        }
      }
      if (e.refused) continue;
      const std::uint32_t node = *st.nodes.begin();
      if (best < 0 || e.score > best_score || (e.score == best_score && node < best_node)) {
        best = s;
        best_score = e.score;
        best_node = node;
      }
    }
    if (best < 0) return std::nullopt;
    Chosen c;
    c.node = best_node;
    for (int g : states_[best].cache[klass].gpus) c.gpus.push_back(perm_[best_node][g]);
    std::sort(c.gpus.begin(), c.gpus.end());
    return c;
  }

  std::size_t states() const { return states_.size(); }

 private:
  static bool FitsState(const State& s, const sched::PlacementRequest& req) {
    if (s.cpu_free < req.cpu_milli || s.mem_free < req.host_memory) return false;
    if (req.num_gpus == 0) return true;
    if (!sched::ModelAllowed(req.allowed_models, s.model)) return false;
    int enough = 0;
    for (const sched::GpuView& g : s.gpus) enough += g.usable && g.free_milli >= req.milli_per_gpu ? 1 : 0;
    return enough >= req.num_gpus;
  }
  void Activate(int s) {
    pos_[s] = active_.size();
    active_.push_back(s);
  }
  void Deactivate(int s) {
    const std::size_t p = pos_[s];
    pos_[active_.back()] = p;
    active_[p] = active_.back();
    active_.pop_back();
    pos_.erase(s);
  }

  std::unordered_map<std::string, int> ids_;
  std::vector<State> states_;
  std::vector<int> node_state_;          // state id + 1 (0: none)
  std::vector<std::vector<int>> perm_;   // canonical GPU -> node GPU
  std::vector<int> active_;
  std::unordered_map<int, std::size_t> pos_;
};

}  // namespace

ReplayResult RunPlacementReplay(Cluster cluster, std::vector<ReplayJob> jobs, const sched::PlacementPolicy& policy,
                       std::span<const sched::WorkloadShape> shapes, const ReplayOptions& options,
                       const std::function<void(double)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  std::stable_sort(jobs.begin(), jobs.end(), [](const ReplayJob& a, const ReplayJob& b) { return a.submit < b.submit; });
  ReplayResult r;
  r.policy = std::string(policy.name());
  r.jobs = static_cast<std::int64_t>(jobs.size());
  if (jobs.empty()) return r;

  // Request classes, and whether each could ever fit (on some empty node).
  std::vector<int> klass(jobs.size());
  std::vector<char> ever_fits;
  {
    std::unordered_map<std::string, int> ids;
    Cluster empty = cluster;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      auto [it, added] = ids.emplace(RequestKey(jobs[j].request), static_cast<int>(ids.size()));
      if (added) {
        bool fits = false;
        for (std::size_t i = 0; i < empty.size() && !fits; ++i) fits = empty.Fits(jobs[j].request, i);
        ever_fits.push_back(fits ? 1 : 0);
      }
      klass[j] = it->second;
    }
  }

  std::mt19937_64 rng(1);
  sched::PlacementContext ctx{shapes, &rng};
  const bool pure = ScoreIsPure(policy.name());
  StateIndex index(cluster);
  Placer placer(policy, ctx, TieBreak::kRandom, &rng);
  auto place = [&](int j) -> std::optional<Chosen> {
    if (pure) return index.Place(policy, ctx, jobs[j].request, klass[j], r.scored);
    return placer.Place(cluster, jobs[j].request, -1);
  };

  struct Running {
    Micros end;
    int job;
    bool operator>(const Running& o) const { return end != o.end ? end > o.end : job > o.job; }
  };
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running;
  std::vector<std::vector<int>> job_gpus(jobs.size());
  std::vector<std::uint32_t> job_node(jobs.size());
  std::vector<std::deque<int>> waiting(ever_fits.size());
  std::set<std::pair<std::size_t, int>> waiting_classes;  // (index of the class's oldest job, class)
  std::int64_t pending = 0;

  Micros horizon = 0;
  for (const ReplayJob& j : jobs) horizon = std::max(horizon, j.submit + j.duration);
  const Micros start = jobs.front().submit;
  const Micros step = std::max<Micros>(1, (horizon - start) / std::max(1, options.samples));
  Micros next_sample = start;
  Micros last_time = start;
  double alloc_integral = 0;  // milli-GPU x us
  const double capacity = static_cast<double>(cluster.capacity_milli());

  auto start_job = [&](int j, const Chosen& c, Micros now) {
    cluster.Apply(jobs[j].request, c.node, c.gpus, +1);
    if (pure) index.Update(cluster, c.node);
    job_gpus[j] = c.gpus;
    job_node[j] = c.node;
    running.push(Running{now + jobs[j].duration, j});
    r.delays.push_back(now - jobs[j].submit);
    ++r.started;
    const double held = static_cast<double>(jobs[j].request.milli_per_gpu * jobs[j].request.num_gpus) / kOneGpu *
                        static_cast<double>(jobs[j].duration) / kHour;
    r.gpu_hours_held += held;
    if (jobs[j].utilisation >= 0) {
      r.gpu_hours_held_known += held;
      r.gpu_hours_used += held * jobs[j].utilisation;
    }
  };
  auto advance = [&](Micros now) {
    while (next_sample <= now && next_sample <= horizon) {
      double frag = 0;
      for (std::size_t i = 0; i < cluster.size(); ++i) frag += sched::NodeFragmentation(cluster.View(i), shapes);
      r.series.push_back(ReplaySample{next_sample, 100 * static_cast<double>(cluster.allocated_milli()) / capacity,
                                      100 * frag / capacity, pending, static_cast<std::int64_t>(running.size())});
      next_sample += step;
    }
    alloc_integral += static_cast<double>(cluster.allocated_milli()) * static_cast<double>(now - last_time);
    last_time = now;
  };
  // After capacity was freed: each waiting class, oldest first, starts jobs until one does not fit.
  auto retry = [&](Micros now) {
    std::vector<std::pair<std::size_t, int>> order(waiting_classes.begin(), waiting_classes.end());
    for (auto [head, k] : order) {
      std::deque<int>& q = waiting[k];
      bool moved = false;
      while (!q.empty()) {
        std::optional<Chosen> c = place(q.front());
        if (!c) break;
        start_job(q.front(), *c, now);
        q.pop_front();
        --pending;
        moved = true;
      }
      if (moved) {
        waiting_classes.erase({head, k});
        if (!q.empty()) waiting_classes.insert({static_cast<std::size_t>(q.front()), k});
      }
    }
  };

  std::size_t next = 0;
  std::size_t done_events = 0;
  const double total_events = 2.0 * static_cast<double>(jobs.size());
  while (next < jobs.size() || !running.empty()) {
    const Micros t_arr = next < jobs.size() ? jobs[next].submit : INT64_MAX;
    const Micros t_dep = running.empty() ? INT64_MAX : running.top().end;
    if (t_dep <= t_arr) {
      const Micros now = t_dep;
      advance(now);
      while (!running.empty() && running.top().end == now) {
        const int j = running.top().job;
        running.pop();
        cluster.Apply(jobs[j].request, job_node[j], job_gpus[j], -1);
        if (pure) index.Update(cluster, job_node[j]);
        ++done_events;
      }
      if (pending > 0) retry(now);
    } else {
      const Micros now = t_arr;
      advance(now);
      const int j = static_cast<int>(next++);
      ++done_events;
      const int k = klass[j];
      if (!ever_fits[k]) {
        ++r.rejected;
      } else if (waiting[k].empty()) {
        std::optional<Chosen> c = place(j);
        if (c) {
          start_job(j, *c, now);
        } else {
          waiting[k].push_back(j);
          waiting_classes.insert({static_cast<std::size_t>(j), k});
          ++pending;
        }
      } else {
        waiting[k].push_back(j);
        ++pending;
      }
    }
    if (progress && (done_events & 4095) == 0) progress(static_cast<double>(done_events) / total_events);
  }
  r.never_started = pending;
  SummariseDelays(r);
  const double span = static_cast<double>(last_time - start);
  r.mean_alloc_pct = span > 0 ? 100 * alloc_integral / span / capacity : 0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress) progress(1.0);
  return r;
}

}  // namespace gpuslice::sim
