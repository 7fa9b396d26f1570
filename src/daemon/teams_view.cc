// GET /v1/teams (`gpuslice teams`, docs/teams.md): per team and queue, what the config
// guarantees and allows and what the scheduler sees now: held, borrowed (held past the
// guarantee), lent (guarantee unused while other teams borrow in the queue), waiting jobs, and
// each team's fair-share standing (decayed usage past its guarantees, rank in the over-quota pool).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/text.h"
#include "daemon/daemon_impl.h"

namespace gpuslice::daemon {

Json Daemon::Impl::Teams() const {
  std::shared_lock lock(mu_);
  return TeamsLocked();
}

Json Daemon::Impl::TeamsLocked() const {
  const sched::TeamsConfig& tc = config_.teams;
  // What each team (and jobs of no team, "") holds and waits for, per queue.
  std::map<std::pair<std::string, std::string>, MilliGpu> held;
  std::map<std::pair<std::string, std::string>, int> waiting;
  for (const auto& [sid, s] : sched_->slices()) {
    auto j = sched_->jobs().find(s.job);
    if (j == sched_->jobs().end()) continue;
    held[{j->second.team, j->second.queue}] += s.milli * static_cast<MilliGpu>(std::max<std::size_t>(1, s.devices.size()));
  }
  for (const auto& [id, j] : sched_->jobs())
    if (j.state == sched::JobState::kPending) ++waiting[{j.team, j.queue}];
  auto get = [](const auto& m, const std::string& team, const std::string& queue) {
    auto it = m.find({team, queue});
    return it == m.end() ? 0 : it->second;
  };
  // Per queue: what teams (and jobs of no team) hold past their guarantees.
  std::map<std::string, MilliGpu> borrowed_in;
  for (const auto& [key, milli] : held) {
    const sched::TeamConfig* t = tc.Find(key.first);
    borrowed_in[key.second] += std::max<MilliGpu>(0, milli - (t ? t->GuaranteeIn(key.second) : 0));
  }
  const MilliGpu cluster = static_cast<MilliGpu>(sched_->devices().size()) * kOneGpu;
  std::map<std::string, MilliGpu> guaranteed_in;
  // The scheduler's fair-share standing, in the config's order of teams.
  const std::vector<sched::TeamStanding> standing = sched_->TeamStandings();
  Json teams = Json::array();
  for (const sched::TeamConfig& t : tc.teams) {
    const auto st = std::find_if(standing.begin(), standing.end(),
                                 [&](const sched::TeamStanding& x) { return x.name == t.name; });
    Json members = Json::array();
    for (const std::string& u : t.users) members.push_back(EscapeInvalidUtf8(u));
    for (const std::string& g : t.groups) members.push_back("@" + EscapeInvalidUtf8(g));
    Json queues = Json::array();
    for (const auto& q : config_.queues) {
      const MilliGpu g = t.GuaranteeIn(q.name), h = get(held, t.name, q.name), borrowed = std::max<MilliGpu>(0, h - g);
      const int w = get(waiting, t.name, q.name);
      if (g == 0 && h == 0 && w == 0 && t.LimitIn(q.name) == 0) continue;
      guaranteed_in[q.name] += g;
      const MilliGpu others_borrow = borrowed_in[q.name] - borrowed;
      Json o{{"queue", q.name}, {"guaranteed", g}, {"held", h}, {"borrowed", borrowed},
             {"lent", std::min<MilliGpu>(std::max<MilliGpu>(0, g - h), others_borrow)}, {"waiting", w},
             {"limit", t.LimitIn(q.name) > 0 ? Json(t.LimitIn(q.name)) : Json(nullptr)}};
      queues.push_back(std::move(o));
    }
    Json o{{"name", EscapeInvalidUtf8(t.name)}, {"members", members}, {"weight", t.weight}, {"queues", queues},
           {"usage_gpu_hours", nullptr}, {"rank", nullptr}};
    if (st != standing.end()) {
      o["usage_gpu_hours"] = st->usage_gpu_hours;
      o["rank"] = st->rank;
    }
    teams.push_back(std::move(o));
  }
  Json notes = Json::array();
  for (const auto& [queue, g] : guaranteed_in) {
    if (g > cluster)
      notes.push_back(fmt::format("queue '{}': teams are guaranteed {} GPUs, more than the {} this cluster has; "
                                  "not every guarantee can be met at once", queue, FormatMilliGpu(g),
                                  FormatMilliGpu(cluster)));
  }
  Json none = Json::array();  // jobs in no team
  for (const auto& q : config_.queues) {
    const MilliGpu h = get(held, std::string(), q.name);
    const int w = get(waiting, std::string(), q.name);
    if (h > 0 || w > 0) none.push_back(Json{{"queue", q.name}, {"held", h}, {"waiting", w}});
  }
  return Json{{"enabled", tc.enabled()},
              {"half_life_us", tc.half_life},
              {"cluster_milli", cluster},
              {"teams", teams},
              {"no_team", none},
              {"notes", notes},
              {"simulated", opt_.simulated}};
}

}  // namespace gpuslice::daemon
