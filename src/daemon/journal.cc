#include "daemon/journal.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/overloaded.h"
#include "sched/config_format.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

json LayoutJson(const MigLayout& l) {
  json a = json::array();
  for (const auto& p : l) a.push_back({p.profile_id, p.start});
  return a;
}

MigLayout LayoutFrom(const json& a) {
  MigLayout l;
  for (const auto& p : a) l.push_back(MigPlacement{p.at(0).get<int>(), p.at(1).get<int>()});
  return l;
}

}  // namespace

std::string EncodeEvent(const sched::Event& e) {
  json o = std::visit(
      Overloaded{
          [](const sched::DeviceAdded& d) -> json {
            json o = {{"t", "device_added"}, {"now", d.now},
                      {"node", d.device.node.value()}, {"index", d.device.index.value()},
                      {"uuid", d.uuid}, {"model", d.model}, {"mig_capable", d.mig_capable},
                      {"mig_enabled", d.mig_enabled}, {"layout", LayoutJson(d.mig_layout)}};
            // Only when set: older entries have none, and read the same.
            if (d.reserved_memory != 0) o["reserved_memory"] = d.reserved_memory;
            if (d.context_reserve != 0) o["context_reserve"] = d.context_reserve;
            return o;
          },
          [](const sched::DeviceRemoved& d) -> json {
            json o = {{"t", "device_removed"}, {"now", d.now},
                      {"node", d.device.node.value()}, {"index", d.device.index.value()}};
            // Only when there are some: older entries have none, and read the same.
            if (!d.requeue.empty()) {
              json ids = json::array();
              for (JobId j : d.requeue) ids.push_back(j.value());
              o["requeue"] = ids;
            }
            return o;
          },
          [](const sched::Submit& s) -> json {
            json r = {{"gpus", s.request.gpus}, {"milli", s.request.milli},
                      {"memory", s.request.memory}, {"time_limit", s.request.time_limit},
                      {"model", s.request.model}};
            if (s.request.kind) r["kind"] = sched::SliceKindName(*s.request.kind);
            json o = {{"t", "submit"}, {"now", s.now}, {"job", s.job.value()},
                      {"user", s.user}, {"queue", s.queue}, {"request", r}};
            if (!s.team.empty()) o["team"] = s.team;  // absent before teams: journals stay as they were
            return o;
          },
          [](const sched::Finish& f) -> json {
            return {{"t", "finish"}, {"now", f.now}, {"job", f.job.value()}};
          },
          [](const sched::Cancel& c) -> json {
            return {{"t", "cancel"}, {"now", c.now}, {"job", c.job.value()}};
          },
          [](const sched::Requeue& r) -> json {
            return {{"t", "requeue"}, {"now", r.now}, {"job", r.job.value()}, {"reason", r.reason}};
          },
          [](const sched::Sample& s) -> json {
            json a = json::array();
            for (const auto& x : s.slices) {
              json e = {x.slice.value(), x.sm_percent, x.memory_percent, x.processes};
              // Which figures were measured, only when not all (older entries have 4 fields).
              const int unknown = (x.sm_known ? 0 : 1) | (x.memory_known ? 0 : 2) | (x.processes_known ? 0 : 4);
              if (unknown != 0 || x.memory_change != sched::Activity::kUnknown ||
                  x.external != sched::Activity::kUnknown) {
                e.push_back(unknown);
                e.push_back(static_cast<int>(x.memory_change));
                e.push_back(static_cast<int>(x.external));
              }
              a.push_back(e);
            }
            return {{"t", "sample"}, {"now", s.now}, {"slices", a}};
          },
          [](const sched::Tick& t) -> json { return {{"t", "tick"}, {"now", t.now}}; },
          [](const sched::ActivityReport& a) -> json {
            return {{"t", "activity"}, {"now", a.now}, {"job", a.job.value()}, {"source", a.source},
                    {"busy", a.busy}, {"last", a.last_activity}, {"kernels", a.kernels},
                    {"connections", a.connections}};
          },
          // The whole config in force from now on, as canonical TOML (exact whatever the
          // built-in defaults of a later version are).
          [](const sched::ConfigReload& c) -> json {
            return {{"t", "config"}, {"now", c.now}, {"config", sched::FormatConfig(c.config)}};
          },
          [](const sched::AdminDrain& a) -> json {
            return {{"t", "admin_drain"}, {"now", a.now}, {"node", a.device.node.value()},
                    {"index", a.device.index.value()}, {"drained", a.drained}, {"reason", a.reason}};
          },
          [](const sched::AdminMigMode& a) -> json {
            return {{"t", "admin_mig"}, {"now", a.now}, {"node", a.device.node.value()},
                    {"index", a.device.index.value()},
                    {"enabled", a.enabled ? json(*a.enabled) : json(nullptr)}};
          },
          [](const sched::AdminHold& a) -> json {
            return {{"t", "admin_hold"}, {"now", a.now}, {"job", a.job.value()}, {"held", a.held}};
          },
          [](const sched::AdminRequeue& a) -> json {
            return {{"t", "admin_requeue"}, {"now", a.now}, {"job", a.job.value()}, {"reason", a.reason}};
          },
          [](const sched::ReconfigureDone& r) -> json {
            return {{"t", "reconfigure_done"}, {"now", r.now},
                    {"node", r.device.node.value()}, {"index", r.device.index.value()},
                    {"ok", r.ok}, {"layout", LayoutJson(r.layout)}, {"error", r.error}};
          },
      },
      e);
  return o.dump();
}

Result<sched::Event> DecodeEvent(std::string_view text) {
  json o = json::parse(text, nullptr, false);
  if (o.is_discarded()) {
    return Status(StatusCode::kDataLoss, fmt::format("journal entry '{}': not JSON", text));
  }
  try {
    const std::string t = o.at("t").get<std::string>();
    const Micros now = o.at("now").get<Micros>();
    auto ref = [&] {
      return sched::DeviceRef{NodeId(o.at("node").get<std::uint32_t>()),
                              DeviceIndex(o.at("index").get<std::uint32_t>())};
    };
    if (t == "device_added") {
      sched::DeviceAdded d{now, ref(), o.at("uuid").get<std::string>(), o.at("model").get<std::string>(),
                           o.at("mig_capable").get<bool>(), o.at("mig_enabled").get<bool>(),
                           LayoutFrom(o.at("layout"))};
      d.reserved_memory = o.value("reserved_memory", Bytes{0});
      d.context_reserve = o.value("context_reserve", Bytes{0});
      return sched::Event(std::move(d));
    }
    if (t == "device_removed") {
      sched::DeviceRemoved d{now, ref(), {}};
      if (o.contains("requeue")) {
        for (const auto& j : o.at("requeue")) d.requeue.push_back(JobId(j.get<std::uint64_t>()));
      }
      return sched::Event(std::move(d));
    }
    if (t == "submit") {
      const json& r = o.at("request");
      sched::JobRequest req;
      if (r.contains("kind")) {
        GPUSLICE_ASSIGN_OR_RETURN(req.kind, sched::ParseSliceKind(r.at("kind").get<std::string>()));
      }
      req.gpus = r.at("gpus").get<int>();
      req.milli = r.at("milli").get<MilliGpu>();
      req.memory = r.at("memory").get<Bytes>();
      req.time_limit = r.at("time_limit").get<Micros>();
      req.model = r.at("model").get<std::string>();
      return sched::Event(sched::Submit{now, JobId(o.at("job").get<std::uint64_t>()),
                                        o.at("user").get<std::string>(),
                                        o.at("queue").get<std::string>(), req,
                                        o.contains("team") ? o.at("team").get<std::string>() : std::string()});
    }
    if (t == "finish") return sched::Event(sched::Finish{now, JobId(o.at("job").get<std::uint64_t>())});
    if (t == "cancel") return sched::Event(sched::Cancel{now, JobId(o.at("job").get<std::uint64_t>())});
    if (t == "requeue") {
      return sched::Event(sched::Requeue{now, JobId(o.at("job").get<std::uint64_t>()),
                                         o.at("reason").get<std::string>()});
    }
    if (t == "sample") {
      sched::Sample s{now, {}};
      for (const auto& x : o.at("slices")) {
        sched::SliceSample ss{SliceId(x.at(0).get<std::uint64_t>()), x.at(1).get<int>(),
                              x.at(2).get<int>(), x.at(3).get<int>()};
        if (x.size() > 4) {
          const int unknown = x.at(4).get<int>();
          auto activity = [&](const json& v) -> Result<sched::Activity> {
            const int n = v.get<int>();
            if (n < 0 || n > 2) {
              return Status(StatusCode::kDataLoss, fmt::format("journal entry '{}': activity {}", text, n));
            }
            return static_cast<sched::Activity>(n);
          };
          ss.sm_known = (unknown & 1) == 0;
          ss.memory_known = (unknown & 2) == 0;
          ss.processes_known = (unknown & 4) == 0;
          GPUSLICE_ASSIGN_OR_RETURN(ss.memory_change, activity(x.at(5)));
          GPUSLICE_ASSIGN_OR_RETURN(ss.external, activity(x.at(6)));
        }
        s.slices.push_back(ss);
      }
      return sched::Event(std::move(s));
    }
    if (t == "tick") return sched::Event(sched::Tick{now});
    if (t == "activity") {
      return sched::Event(sched::ActivityReport{now, JobId(o.at("job").get<std::uint64_t>()),
                                                o.at("source").get<std::string>(), o.at("busy").get<bool>(),
                                                o.at("last").get<Micros>(), o.at("kernels").get<int>(),
                                                o.at("connections").get<int>()});
    }
    if (t == "reconfigure_done") {
      return sched::Event(sched::ReconfigureDone{now, ref(), o.at("ok").get<bool>(),
                                                 LayoutFrom(o.at("layout")),
                                                 o.at("error").get<std::string>()});
    }
    if (t == "admin_drain") {
      return sched::Event(sched::AdminDrain{now, ref(), o.at("drained").get<bool>(),
                                            o.at("reason").get<std::string>()});
    }
    if (t == "admin_mig") {
      sched::AdminMigMode m{now, ref(), std::nullopt};
      if (!o.at("enabled").is_null()) m.enabled = o.at("enabled").get<bool>();
      return sched::Event(std::move(m));
    }
    if (t == "admin_hold") {
      return sched::Event(sched::AdminHold{now, JobId(o.at("job").get<std::uint64_t>()), o.at("held").get<bool>()});
    }
    if (t == "admin_requeue") {
      return sched::Event(sched::AdminRequeue{now, JobId(o.at("job").get<std::uint64_t>()),
                                              o.at("reason").get<std::string>()});
    }
    if (t == "config") {
      auto config = sched::ParseConfig(o.at("config").get<std::string>(), "journal");
      if (!config.ok()) {
        return Status(StatusCode::kDataLoss, fmt::format("journal entry 'config': {}", config.status().message()));
      }
      return sched::Event(sched::ConfigReload{now, std::move(config).value()});
    }
    return Status(StatusCode::kDataLoss, fmt::format("journal entry: unknown type '{}'", t));
  } catch (const json::exception& e) {
    return Status(StatusCode::kDataLoss, fmt::format("journal entry '{}': {}", text, e.what()));
  }
}

bool CanChangeState(const sched::Event& e) {
  if (std::holds_alternative<sched::Tick>(e)) return false;
  // Any slice's sample may change state: an idle-looking one ends an "unmeasured" stretch.
  if (const auto* s = std::get_if<sched::Sample>(&e)) return !s->slices.empty();
  return true;
}

void JournalCompactor::Observe(const sched::Event& e, const std::vector<sched::Decision>& decisions,
                               const sched::Scheduler& after) {
  const std::size_t index = kinds_.size();
  times_.push_back(sched::EventTime(e));
  clock_.push_back(after.now());
  const sched::QueueConfig* queue_of_slice = nullptr;
  auto queue_of = [&](JobId job) { return after.QueueOf(job); };
  if (const auto* s = std::get_if<sched::Sample>(&e)) {
    kinds_.push_back(Kind::kSample);
    for (const auto& x : s->slices) {
      Part part{x.slice, false, false};
      auto v = after.slices().find(x.slice);
      if (v != after.slices().end()) {
        part.alive = true;
        queue_of_slice = queue_of(v->second.job);
        // Unknown queue: kept as if active (it cannot be proven to do nothing).
        part.active = queue_of_slice == nullptr || sched::SampleShowsActivity(queue_of_slice->idle, x);
      }
      parts_.push_back(part);
    }
  } else {
    kinds_.push_back(std::holds_alternative<sched::Tick>(e) ? Kind::kTick : Kind::kOther);
  }
  part_begin_.push_back(static_cast<std::uint32_t>(parts_.size()));
  auto end = [&](JobId job, SliceId slice) {
    if (auto l = lives_.find(slice); l != lives_.end()) l->second.ended = index;
    running_.erase(job);
  };
  // A requeued job's slice ends before its decisions, which may start it again on a new one.
  auto requeued = [&](JobId job) {
    auto r = running_.find(job);
    if (r != running_.end() && !after.slices().contains(r->second)) end(job, r->second);
  };
  // A reload may change a running slice's idle window: its life is then treated as having the
  // smallest one (every Sample a Tick could read is kept), which is exact under any window.
  if (std::holds_alternative<sched::ConfigReload>(e)) {
    for (auto& [slice, life] : lives_) {
      if (life.ended == static_cast<std::size_t>(-1)) life.window = 1;
    }
  }
  if (const auto* q = std::get_if<sched::Requeue>(&e)) requeued(q->job);
  if (const auto* d = std::get_if<sched::DeviceRemoved>(&e)) {
    for (JobId job : d->requeue) requeued(job);
  }
  for (const auto& d : decisions) {
    if (const auto* st = std::get_if<sched::StartSlice>(&d)) {
      const sched::QueueConfig* q = queue_of(st->job);
      // Unknown queue: window 0 would mean "never due"; the smallest window keeps every
      // Sample a Tick could read instead.
      Micros window = q == nullptr ? 1 : q->idle.enabled ? q->idle.window : 0;
      lives_[st->slice] = Life{index, static_cast<std::size_t>(-1), window};
      running_[st->job] = st->slice;
    }
    if (const auto* x = std::get_if<sched::Stop>(&d)) end(x->job, x->slice);
    if (const auto* x = std::get_if<sched::Reclaim>(&d)) end(x->job, x->slice);
    if (const auto* x = std::get_if<sched::Preempt>(&d)) end(x->job, x->slice);
    if (const auto* x = std::get_if<sched::Warn>(&d); x && x->reason == sched::WarnReason::kIdle) {
      idle_warned_[index].push_back(x->slice);
    }
  }
  if (const auto* a = std::get_if<sched::ActivityReport>(&e)) {
    if (auto r = running_.find(a->job); r != running_.end()) reported_[index] = r->second;
  }
  // A job that ends by itself ends its slice without a decision.
  if (const auto* f = std::get_if<sched::Finish>(&e)) {
    auto r = running_.find(f->job);
    if (r != running_.end() && !after.slices().contains(r->second)) end(f->job, r->second);
  }
}

Result<std::vector<std::string>> JournalCompactor::Compact(const std::vector<std::string>& entries,
                                                          const sched::Config& config,
                                                          std::uint64_t seed,
                                                          const sched::Scheduler& full) const {
  const std::size_t n = entries.size();
  if (n != kinds_.size()) {
    return Internal(fmt::format("journal compaction: observed {} entries, given {}", kinds_.size(), n));
  }
  std::map<std::size_t, std::vector<SliceId>> created_at, ended_at;
  for (const auto& [slice, l] : lives_) {
    created_at[l.created].push_back(slice);
    if (l.ended != static_cast<std::size_t>(-1)) ended_at[l.ended].push_back(slice);
  }
  // Forward: which Sample parts must stay (see journal.h).
  struct State {
    Micros window = 0;
    Micros kept_last = 0;            // last_active as the compacted journal leaves it
    std::int64_t pending = -1;       // latest active part not kept (yet)
    Micros pending_time = 0;
    bool keep_next = false;          // the next active part resets an idle warning
  };
  std::vector<char> keep_part(parts_.size(), 0);
  std::map<SliceId, State> alive;
  auto keep_pending = [&](State& st) {
    if (st.pending < 0) return;
    keep_part[static_cast<std::size_t>(st.pending)] = 1;
    st.kept_last = st.pending_time;
    st.pending = -1;
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (auto c = created_at.find(i); c != created_at.end()) {
      for (SliceId x : c->second) alive[x] = State{lives_.at(x).window, clock_[i], -1, 0, false};
    }
    if (kinds_[i] == Kind::kSample) {
      for (std::uint32_t k = part_begin_[i]; k < part_begin_[i + 1]; ++k) {
        const Part& p = parts_[k];
        if (!p.alive || !p.active) continue;  // did nothing
        auto st = alive.find(p.slice);
        if (st == alive.end()) {
          keep_part[k] = 1;  // not seen start: keep what cannot be reasoned about
          continue;
        }
        if (st->second.keep_next) {
          keep_part[k] = 1;
          st->second.kept_last = clock_[i];
          st->second.pending = -1;
          st->second.keep_next = false;
        } else {
          st->second.pending = k;
          st->second.pending_time = clock_[i];
        }
      }
    }
    if (auto r = reported_.find(i); r != reported_.end()) {
      if (auto st = alive.find(r->second); st != alive.end()) keep_pending(st->second);
    }
    auto e = ended_at.find(i);
    if (kinds_[i] == Kind::kTick) {
      for (auto& [x, st] : alive) {
        const bool ends_here = e != ended_at.end() &&
                               std::find(e->second.begin(), e->second.end(), x) != e->second.end();
        if (ends_here || (st.window > 0 && st.kept_last + st.window <= clock_[i])) keep_pending(st);
      }
      if (auto w = idle_warned_.find(i); w != idle_warned_.end()) {
        for (SliceId x : w->second) {
          if (auto st = alive.find(x); st != alive.end()) st->second.keep_next = true;
        }
      }
    }
    if (e != ended_at.end()) {
      for (SliceId x : e->second) alive.erase(x);
    }
  }
  for (auto& [x, st] : alive) keep_pending(st);  // the final state is exact

  // Backward: assemble, dropping emptied Samples where that moves no clock.
  std::vector<std::string> kept_rev;
  Micros next_kept = std::numeric_limits<Micros>::max();
  for (std::size_t i = n; i-- > 0;) {
    bool keep = true;
    if (kinds_[i] == Kind::kSample) {
      const std::uint32_t begin = part_begin_[i], end = part_begin_[i + 1];
      std::uint32_t kept_parts = 0;
      for (std::uint32_t k = begin; k < end; ++k) kept_parts += keep_part[k];
      if (kept_parts == end - begin) {
        kept_rev.push_back(entries[i]);
      } else {
        GPUSLICE_ASSIGN_OR_RETURN(sched::Event ev, DecodeEvent(entries[i]));
        auto& sample = std::get<sched::Sample>(ev);
        if (sample.slices.size() != end - begin) {
          return Internal(fmt::format("journal compaction: entry {} is not the one observed", i));
        }
        std::vector<sched::SliceSample> parts;
        for (std::uint32_t k = begin; k < end; ++k) {
          if (keep_part[k]) parts.push_back(sample.slices[k - begin]);
        }
        sample.slices = std::move(parts);
        keep = !sample.slices.empty() || i + 1 == n || times_[i] > next_kept;
        if (keep) kept_rev.push_back(EncodeEvent(ev));
      }
    } else {
      kept_rev.push_back(entries[i]);
    }
    if (keep) next_kept = times_[i];
  }
  std::vector<std::string> kept(kept_rev.rbegin(), kept_rev.rend());
  // Exact or nothing: the compacted journal must rebuild the same scheduler.
  sched::Scheduler check(config, seed);
  for (const std::string& entry : kept) {
    GPUSLICE_ASSIGN_OR_RETURN(sched::Event e, DecodeEvent(entry));
    (void)check.Handle(e);
  }
  if (SchedulerDigest(check) != SchedulerDigest(full)) {
    return Internal("journal compaction: the compacted journal does not rebuild the same "
                    "scheduler state; keeping the full journal");
  }
  return kept;
}

std::string SchedulerDigest(const sched::Scheduler& s) {
  std::string out = fmt::format("now {}\n", s.now());
  auto layout = [](const MigLayout& l) {
    std::string t;
    for (const auto& p : l) t += fmt::format("{}@{},", p.profile_id, p.start);
    return t;
  };
  for (const auto& [id, j] : s.jobs()) {
    const auto& r = j.request;
    out += fmt::format("job {} {} {} {} {} {} {} {} {} {} [{} {} {} {} {} {}]\n", id.value(), j.user,
                       j.queue, sched::JobStateName(j.state), sched::SliceKindName(j.kind),
                       j.submit_time, j.start_time, j.end_time, j.slice.value(), j.end_reason,
                       r.kind ? sched::SliceKindName(*r.kind) : "-", r.gpus, r.milli, r.memory,
                       r.time_limit, r.model);
  }
  for (const auto& [id, v] : s.slices()) {
    std::string devs;
    for (auto d : v.devices) devs += fmt::format("{},", d.value());
    out += fmt::format("slice {} job {} {} node {} [{}] mig {} {} {} start {} deadline {} warned {} "
                       "active {} idle {} until {}\n",
                       id.value(), v.job.value(), sched::SliceKindName(v.kind), v.node.value(), devs,
                       v.mig ? fmt::format("{}@{}", v.mig->profile_id, v.mig->start) : "-", v.milli,
                       v.memory, v.start_time, v.deadline, v.limit_warned, v.last_active,
                       static_cast<int>(v.idle), v.idle_deadline);
    if (v.report) {
      const sched::SliceReport& r = *v.report;
      out += fmt::format("  report {} busy {} last {} kernels {} connections {} received {} since {}\n",
                         r.source, r.busy, r.last_activity, r.kernels, r.connections, r.received,
                         r.busy_since);
    }
  }
  for (const auto& [ref, d] : s.devices()) {
    std::string slices;
    for (auto x : d.slices) slices += fmt::format("{},", x.value());
    out += fmt::format("device {}/{} {} {} {} {} mode {} [{}] drain {} reconf {} reserved {} "
                       "target [{}] used {} {} clients {} [{}]\n",
                       ref.node.value(), ref.index.value(), d.uuid, d.model, d.memory, d.mig_capable,
                       sched::DeviceModeName(d.mode), layout(d.layout), d.draining, d.reconfiguring,
                       d.reserved_for.value(), layout(d.target_layout), d.used_milli,
                       d.used_memory, d.clients, slices);
  }
  out += s.TeamBooksDigest();
  out += "pending";
  for (JobId id : s.Pending()) out += fmt::format(" {}", id.value());
  out += "\n";
  return out;
}

}  // namespace gpuslice::daemon
