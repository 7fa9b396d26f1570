#include "whatif/scenario.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "core/catalogue.h"
#include "core/text.h"

namespace gpuslice::whatif {

int GpuChange::For(int gpus) const {
  if (!percent) return std::max(amount, 1 - gpus);
  const int n = static_cast<int>(std::lround(std::abs(amount) * gpus / 100.0));
  const int delta = (amount < 0 ? -1 : 1) * std::max(1, n);
  return std::max(delta, 1 - gpus);
}

std::string GpuChange::Text() const { return fmt::format("{:+d}{}", amount, percent ? "%" : ""); }

std::string Scenario::Describe() const {
  std::vector<std::string> parts;
  auto queues = [](const std::vector<std::string>& q) { return fmt::format("{}", fmt::join(q, ",")); };
  if (reclaim) {
    parts.push_back(fmt::format("idle reclaim after {}{} in {}", FormatDuration(reclaim->window),
                                reclaim->grace ? " + " + FormatDuration(*reclaim->grace) + " grace" : "",
                                queues(reclaim->queues)));
  }
  if (time_slice) {
    parts.push_back(fmt::format("{} on time-sliced fractions of {}", queues(time_slice->queues),
                                FormatMilliGpu(time_slice->step)));
  }
  if (right_size) parts.push_back(fmt::format("{} right-sized to MIG", queues(right_size->queues)));
  if (max_duration) {
    parts.push_back(fmt::format("{} capped at {}{}", queues(max_duration->queues), FormatDuration(max_duration->limit),
                                max_duration->resubmit ? " (resubmitted)" : ""));
  }
  if (gpus) parts.push_back(fmt::format("{} GPUs", gpus->Text()));
  if (parts.empty()) return "as recorded";
  return fmt::format("{}", fmt::join(parts, "; "));
}

Micros VerdictSpec::Target(const std::string& queue) const {
  auto it = queue_p95.find(queue);
  return it == queue_p95.end() ? p95_wait : it->second;
}

WhatifSpec DefaultSpec() {
  WhatifSpec s;
  auto add = [&](std::string name) -> Scenario& {
    s.scenarios.emplace_back();
    s.scenarios.back().name = std::move(name);
    return s.scenarios.back();
  };
  add("as-recorded");
  for (Micros w : {15 * kMinute, 30 * kMinute, kHour}) {
    ReclaimCure r;
    r.window = w;
    add("reclaim-" + FormatDuration(w)).reclaim = r;
  }
  add("interactive-shared").time_slice = TimeSliceCure{};
  add("inference-mig").right_size = RightSizeCure{};
  add("training-max-24h").max_duration = MaxDurationCure{};
  add("fewer-gpus").gpus = GpuChange{-10, true};
  add("more-gpus").gpus = GpuChange{10, true};
  Scenario& all = add("all-cures");
  all.reclaim = ReclaimCure{};
  all.time_slice = TimeSliceCure{};
  all.right_size = RightSizeCure{};
  all.max_duration = MaxDurationCure{};
  return s;
}

Scenario VerdictCures(const WhatifSpec& spec) {
  const std::string want = spec.verdict.cures.empty() ? "all-cures" : spec.verdict.cures;
  for (const Scenario& s : spec.scenarios) {
    if (s.name == want) {
      Scenario c = s;
      c.gpus.reset();
      return c;
    }
  }
  // No such scenario (only when the default name is missing: a named one is checked at
  // parse time): the first cure of each kind the spec lists.
  Scenario c;
  c.name = "every listed cure";
  for (const Scenario& s : spec.scenarios) {
    if (!c.reclaim && s.reclaim) c.reclaim = s.reclaim;
    if (!c.time_slice && s.time_slice) c.time_slice = s.time_slice;
    if (!c.right_size && s.right_size) c.right_size = s.right_size;
    if (!c.max_duration && s.max_duration) c.max_duration = s.max_duration;
    c.strict_queues = c.strict_queues || s.strict_queues;
  }
  return c;
}

// ------------------------------------------------------------------------------ the file
namespace {

std::string Shown(const toml::node& n) {
  if (n.is_string()) return fmt::format("'{}'", EscapeInvalidUtf8(n.as_string()->get()));
  if (n.is_table()) return "{...}";
  if (n.is_array()) return "[...]";
  std::ostringstream os;
  n.visit([&os](const auto& v) { os << v; });
  return os.str();
}

// Reads the keys of one table by name; whatever is left unread is an unknown key. Errors read
// "FILE: key.path = value: why".
class Keys {
 public:
  Keys(const toml::table& t, std::string_view file, std::string path) : t_(t), file_(file), path_(std::move(path)) {}

  std::string Path(std::string_view key) const { return path_.empty() ? std::string(key) : path_ + "." + std::string(key); }
  Status Bad(std::string_view key, const toml::node& v, std::string_view why) const {
    return InvalidArgument(fmt::format("{}: {} = {}: {}", file_, Path(key), Shown(v), why));
  }
  const toml::node* Take(std::string_view key) {
    read_.insert(std::string(key));
    return t_.get(key);
  }
  Status Text(std::string_view key, std::string& out) {
    const toml::node* n = Take(key);
    if (n == nullptr) return Status::Ok();
    if (!n->is_string()) return Bad(key, *n, "expected a string");
    out = n->as_string()->get();
    return Status::Ok();
  }
  // A duration as "30m" / "1h30m" or a number of seconds.
  Status Duration(std::string_view key, Micros lo, Micros& out) {
    const toml::node* n = Take(key);
    if (n == nullptr) return Status::Ok();
    std::string text;
    if (n->is_string()) text = n->as_string()->get();
    else if (n->is_integer()) text = std::to_string(n->as_integer()->get());
    else return Bad(key, *n, "expected a duration such as \"30m\"");
    auto d = ParseDuration(text);
    if (!d.ok()) return Bad(key, *n, d.status().message());
    if (*d < lo) return Bad(key, *n, fmt::format("must be at least {}", FormatDuration(lo)));
    out = *d;
    return Status::Ok();
  }
  Status Percent(std::string_view key, int& out) {
    const toml::node* n = Take(key);
    if (n == nullptr) return Status::Ok();
    if (!n->is_integer() || n->as_integer()->get() < 0 || n->as_integer()->get() > 1000) {
      return Bad(key, *n, "expected a whole percentage 0..1000");
    }
    out = static_cast<int>(n->as_integer()->get());
    return Status::Ok();
  }
  Status Flag(std::string_view key, bool& out) {
    const toml::node* n = Take(key);
    if (n == nullptr) return Status::Ok();
    if (!n->is_boolean()) return Bad(key, *n, "expected true or false");
    out = n->as_boolean()->get();
    return Status::Ok();
  }
  Status Queues(std::string_view key, std::vector<std::string>& out) {
    const toml::node* n = Take(key);
    if (n == nullptr) return Status::Ok();
    const toml::array* a = n->as_array();
    if (a == nullptr || a->empty()) return Bad(key, *n, "expected a non-empty list of queue names");
    out.clear();
    for (const toml::node& e : *a) {
      if (!e.is_string()) return Bad(key, *n, "expected a list of queue names (strings)");
      out.push_back(e.as_string()->get());
    }
    return Status::Ok();
  }
  const toml::table* Table(std::string_view key, Status& st) {
    const toml::node* n = Take(key);
    if (n == nullptr) return nullptr;
    if (!n->is_table()) {
      st = Bad(key, *n, "expected a table, e.g. { window = \"30m\" }");
      return nullptr;
    }
    return n->as_table();
  }
  Status Done(std::string_view known) const {
    for (const auto& [k, v] : t_) {
      if (!read_.contains(std::string(k.str()))) {
        return InvalidArgument(fmt::format("{}: {} = {}: unknown key (known: {})", file_, Path(k.str()), Shown(v), known));
      }
    }
    return Status::Ok();
  }

 private:
  const toml::table& t_;
  std::string_view file_;
  std::string path_;
  std::set<std::string> read_;
};

Status ParseGpuChange(Keys& k, std::optional<GpuChange>& out) {
  const toml::node* n = k.Take("gpus");
  if (n == nullptr) return Status::Ok();
  GpuChange g;
  std::string text;
  if (n->is_integer()) text = std::to_string(n->as_integer()->get());
  else if (n->is_string()) text = n->as_string()->get();
  else return k.Bad("gpus", *n, "expected a change such as -8, \"+2\" or \"-10%\"");
  std::string_view t = text;
  if (!t.empty() && t.back() == '%') {
    g.percent = true;
    t.remove_suffix(1);
  }
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  int v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v == 0 || std::abs(v) > 100000 ||
      (g.percent && (v <= -100 || v > 1000))) {
    return k.Bad("gpus", *n, "expected a non-zero change such as -8, \"+2\" or \"-10%\" (more than -100%)");
  }
  g.amount = v;
  out = g;
  return Status::Ok();
}

Result<Scenario> ParseScenario(const toml::table& t, std::string_view file, std::size_t index) {
  Scenario s;
  s.strict_queues = true;
  Keys k(t, file, fmt::format("scenario[{}]", index));
  GPUSLICE_RETURN_IF_ERROR(k.Text("name", s.name));
  if (s.name.empty() || s.name.size() > 40 ||
      !std::all_of(s.name.begin(), s.name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; })) {
    const toml::node* n = t.get("name");
    if (n == nullptr) return InvalidArgument(fmt::format("{}: scenario[{}]: needs a name", file, index));
    return k.Bad("name", *n, "expected 1-40 characters of letters, digits, '-', '_', '.'");
  }
  Keys named(t, file, fmt::format("scenario.{}", s.name));
  Status st;
  named.Take("name");
  if (const toml::table* r = named.Table("reclaim", st)) {
    ReclaimCure c;
    Keys rk(*r, file, named.Path("reclaim"));
    GPUSLICE_RETURN_IF_ERROR(rk.Queues("queues", c.queues));
    GPUSLICE_RETURN_IF_ERROR(rk.Duration("window", kMinute, c.window));
    Micros grace = -1;
    GPUSLICE_RETURN_IF_ERROR(rk.Duration("grace", 0, grace));
    if (grace >= 0) c.grace = grace;
    GPUSLICE_RETURN_IF_ERROR(rk.Done("queues, window, grace"));
    s.reclaim = c;
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  if (const toml::table* r = named.Table("time_slice", st)) {
    TimeSliceCure c;
    Keys rk(*r, file, named.Path("time_slice"));
    GPUSLICE_RETURN_IF_ERROR(rk.Queues("queues", c.queues));
    if (const toml::node* n = rk.Take("step")) {
      auto m = n->is_string() ? ParseGpuAmount(n->as_string()->get()) : Result<MilliGpu>(InvalidArgument(""));
      if (!m.ok() || *m > kOneGpu) return rk.Bad("step", *n, "expected a fraction of a GPU such as \"250m\" or \"0.25\"");
      c.step = *m;
    }
    GPUSLICE_RETURN_IF_ERROR(rk.Percent("headroom", c.headroom_percent));
    GPUSLICE_RETURN_IF_ERROR(rk.Done("queues, step, headroom"));
    s.time_slice = c;
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  if (const toml::table* r = named.Table("right_size", st)) {
    RightSizeCure c;
    Keys rk(*r, file, named.Path("right_size"));
    GPUSLICE_RETURN_IF_ERROR(rk.Queues("queues", c.queues));
    GPUSLICE_RETURN_IF_ERROR(rk.Percent("headroom", c.headroom_percent));
    GPUSLICE_RETURN_IF_ERROR(rk.Done("queues, headroom"));
    s.right_size = c;
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  if (const toml::table* r = named.Table("max_duration", st)) {
    MaxDurationCure c;
    Keys rk(*r, file, named.Path("max_duration"));
    GPUSLICE_RETURN_IF_ERROR(rk.Queues("queues", c.queues));
    GPUSLICE_RETURN_IF_ERROR(rk.Duration("limit", kMinute, c.limit));
    GPUSLICE_RETURN_IF_ERROR(rk.Flag("resubmit", c.resubmit));
    GPUSLICE_RETURN_IF_ERROR(rk.Done("queues, limit, resubmit"));
    s.max_duration = c;
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  GPUSLICE_RETURN_IF_ERROR(ParseGpuChange(named, s.gpus));
  GPUSLICE_RETURN_IF_ERROR(named.Done("name, reclaim, time_slice, right_size, max_duration, gpus"));
  return s;
}

}  // namespace

Result<WhatifSpec> ParseSpec(std::string_view text, std::string_view file) {
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {  // parsing edge
    return InvalidArgument(fmt::format("{}:{}:{}: {}", file, e.source().begin.line, e.source().begin.column,
                                       e.description()));
  }
  WhatifSpec spec = DefaultSpec();
  Keys top(root, file, "");
  Status st;
  if (const toml::table* v = top.Table("verdict", st)) {
    Keys k(*v, file, "verdict");
    GPUSLICE_RETURN_IF_ERROR(k.Duration("p95_wait", 0, spec.verdict.p95_wait));
    GPUSLICE_RETURN_IF_ERROR(k.Text("cures", spec.verdict.cures));
    if (const toml::node* n = k.Take("search_steps")) {
      if (!n->is_integer() || n->as_integer()->get() < 0 || n->as_integer()->get() > 20) {
        return k.Bad("search_steps", *n, "expected an integer 0..20");
      }
      spec.verdict.search_steps = static_cast<int>(n->as_integer()->get());
    }
    if (const toml::table* q = k.Table("queues", st)) {
      Keys qk(*q, file, "verdict.queues");
      for (const auto& [name, value] : *q) {
        Micros d = 0;
        GPUSLICE_RETURN_IF_ERROR(qk.Duration(name.str(), 0, d));
        spec.verdict.queue_p95[std::string(name.str())] = d;
      }
    }
    GPUSLICE_RETURN_IF_ERROR(st);
    GPUSLICE_RETURN_IF_ERROR(k.Done("p95_wait, queues, cures, search_steps"));
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  if (const toml::table* a = top.Table("assume", st)) {
    Keys k(*a, file, "assume");
    GPUSLICE_RETURN_IF_ERROR(k.Duration("restart_cost", 0, spec.assume.restart_cost));
    GPUSLICE_RETURN_IF_ERROR(k.Duration("idle_tail", 0, spec.assume.idle_tail));
    GPUSLICE_RETURN_IF_ERROR(k.Done("restart_cost, idle_tail"));
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  if (const toml::node* n = top.Take("scenario")) {
    const toml::array* list = n->as_array();
    if (list == nullptr || list->empty() || !list->is_array_of_tables()) {
      return top.Bad("scenario", *n, "expected [[scenario]] tables");
    }
    std::vector<Scenario> scenarios;
    std::set<std::string> names;
    for (std::size_t i = 0; i < list->size(); ++i) {
      GPUSLICE_ASSIGN_OR_RETURN(Scenario s, ParseScenario(*list->at(i).as_table(), file, i));
      if (!names.insert(s.name).second) {
        return InvalidArgument(fmt::format("{}: scenario.{}: the name is used twice", file, s.name));
      }
      scenarios.push_back(std::move(s));
    }
    if (!names.contains("as-recorded")) {
      scenarios.insert(scenarios.begin(), Scenario{});
      scenarios.front().name = "as-recorded";
    }
    auto base = std::find_if(scenarios.begin(), scenarios.end(), [](const Scenario& s) { return s.name == "as-recorded"; });
    if (base->HasCures() || base->gpus) {
      return InvalidArgument(fmt::format("{}: scenario.as-recorded: is the history as it was and takes no cures", file));
    }
    std::rotate(scenarios.begin(), base, base + 1);
    spec.scenarios = std::move(scenarios);
  }
  GPUSLICE_RETURN_IF_ERROR(top.Done("verdict, assume, scenario"));
  if (!spec.verdict.cures.empty() &&
      std::none_of(spec.scenarios.begin(), spec.scenarios.end(), [&](const Scenario& s) { return s.name == spec.verdict.cures; })) {
    return InvalidArgument(fmt::format("{}: verdict.cures = '{}': no scenario of that name", file,
                                       EscapeInvalidUtf8(spec.verdict.cures)));
  }
  return spec;
}

Result<WhatifSpec> LoadSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("--scenarios '{}': cannot read the file", EscapeInvalidUtf8(path)));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseSpec(ss.str(), path);
}

// ------------------------------------------------------------------------------ Prepare
namespace {

// The queues a cure names that the config has; a missing one is an error for a file's cure
// and a note for a built-in one.
Result<std::vector<sched::QueueConfig*>> CureQueues(sched::Config& c, const std::vector<std::string>& names,
                                                    const Scenario& s, std::string_view cure,
                                                    std::vector<std::string>& notes) {
  std::vector<sched::QueueConfig*> out;
  for (const std::string& n : names) {
    auto it = std::find_if(c.queues.begin(), c.queues.end(), [&](const sched::QueueConfig& q) { return q.name == n; });
    if (it != c.queues.end()) {
      out.push_back(&*it);
      continue;
    }
    if (s.strict_queues) {
      return InvalidArgument(fmt::format("scenario.{}.{}.queues: '{}' is not a queue of the config", s.name, cure,
                                         EscapeInvalidUtf8(n)));
    }
    notes.push_back(fmt::format("{}: no queue '{}' in this config; its {} changes nothing", s.name, n, cure));
  }
  return out;
}

bool Listed(const std::vector<sched::QueueConfig*>& qs, const std::string& name) {
  return std::any_of(qs.begin(), qs.end(), [&](const sched::QueueConfig* q) { return q->name == name; });
}

void Allow(sched::QueueConfig& q, sched::SliceKind k) {
  if (!q.Allows(k)) q.allowed_kinds.push_back(k);
}

// `b` plus `percent` %, rounded up to a MiB.
Bytes WithHeadroom(Bytes b, int percent) {
  const __int128 v = static_cast<__int128>(b) * (100 + percent);
  const Bytes raw = static_cast<Bytes>((v + 99) / 100);
  return (raw + kMiB - 1) / kMiB * kMiB;
}

}  // namespace

std::vector<sim::TraceNode> ResizeNodes(std::vector<sim::TraceNode> nodes, int delta) {
  if (nodes.empty()) return nodes;
  const sim::TraceNode pattern = nodes.back();
  while (delta < 0 && GpuCount(nodes) > 1) {
    sim::TraceNode& last = nodes.back();
    const int take = std::min(-delta, last.gpus - (nodes.size() == 1 ? 1 : 0));
    last.gpus -= take;
    delta += take;
    if (last.gpus == 0) nodes.pop_back();
    if (take == 0) break;
  }
  for (int i = 0; delta > 0; ++i) {
    sim::TraceNode n = pattern;
    n.name = fmt::format("{}-added-{}", pattern.name, i + 1);
    n.gpus = std::min(std::max(1, pattern.gpus), delta);
    delta -= n.gpus;
    nodes.push_back(std::move(n));
  }
  return nodes;
}

Result<Prepared> Prepare(const History& h, const Scenario& s, const Assumptions& a, std::optional<int> gpu_delta) {
  Prepared p;
  p.config = h.config;
  std::vector<sched::QueueConfig*> reclaim_q, slice_q, size_q, limit_q;
  if (s.reclaim) {
    GPUSLICE_ASSIGN_OR_RETURN(reclaim_q, CureQueues(p.config, s.reclaim->queues, s, "reclaim", p.notes));
    for (sched::QueueConfig* q : reclaim_q) {
      q->idle.enabled = true;
      q->idle.action = sched::ReclaimAction::kReclaim;
      q->idle.window = s.reclaim->window;
      if (s.reclaim->grace) q->idle.grace = *s.reclaim->grace;
    }
  }
  if (s.max_duration) {
    GPUSLICE_ASSIGN_OR_RETURN(limit_q, CureQueues(p.config, s.max_duration->queues, s, "max_duration", p.notes));
    for (sched::QueueConfig* q : limit_q) {
      q->max_duration = q->max_duration > 0 ? std::min(q->max_duration, s.max_duration->limit) : s.max_duration->limit;
    }
  }
  if (s.time_slice) {
    GPUSLICE_ASSIGN_OR_RETURN(slice_q, CureQueues(p.config, s.time_slice->queues, s, "time_slice", p.notes));
    for (sched::QueueConfig* q : slice_q) Allow(*q, sched::SliceKind::kShared);
  }
  if (s.right_size) {
    GPUSLICE_ASSIGN_OR_RETURN(size_q, CureQueues(p.config, s.right_size->queues, s, "right_size", p.notes));
    for (sched::QueueConfig* q : size_q) Allow(*q, sched::SliceKind::kMig);
  }
  // The names in the cure lists, kept past the config's edits (pointers into it are stable:
  // nothing is added to or removed from the queue list).
  GPUSLICE_RETURN_IF_ERROR(sched::ValidateConfig(p.config));

  const int total = GpuCount(h.nodes);
  const int delta = gpu_delta ? *gpu_delta : s.gpus ? s.gpus->For(total) : 0;
  p.nodes = ResizeNodes(h.nodes, delta);
  p.gpus = GpuCount(p.nodes);
  // The largest MIG instance any node's model offers: right-sizing asks for no more.
  Bytes largest_mig = 0;
  for (const sim::TraceNode& n : p.nodes) {
    auto m = FindModel(n.model);
    if (m.ok() && (*m)->supports_mig()) {
      for (const MigProfile& prof : (*m)->mig_profiles) largest_mig = std::max(largest_mig, prof.memory);
    }
  }
  if (s.right_size && largest_mig == 0 && !size_q.empty()) {
    p.notes.push_back(fmt::format("{}: no MIG-capable GPU model in the cluster; nothing right-sized", s.name));
  }

  p.jobs.reserve(h.jobs.size());
  for (const HistoryJob& hj : h.jobs) {
    sim::ReplayJob j = hj.job;
    const std::string& qname = j.queue.empty() ? p.config.default_queue : j.queue;
    if (hj.ended == RecordedEnd::kIdleReclaimed) {
      // The daemon reclaimed it for idleness: it was measured idle to the end, whatever its
      // last point (after the last sample the daemon took of it) shows as unknown.
      Micros blind_tail = 0;
      while (!j.activity.empty() && j.activity.back().state == sim::RunState::kUnknown) {
        blind_tail += j.activity.back().length;
        j.activity.pop_back();
      }
      if (!j.activity.empty() && j.activity.back().state == sim::RunState::kIdle) {
        sim::AppendRun(j.activity, sim::ActivityRun{blind_tail, 0, sim::RunState::kIdle});
      } else if (blind_tail > 0) {
        sim::AppendRun(j.activity, sim::ActivityRun{blind_tail, -1, sim::RunState::kUnknown});
      }
    }
    if (hj.ended == RecordedEnd::kIdleReclaimed && !j.activity.empty() && j.activity.back().state == sim::RunState::kIdle) {
      // What it would have done unreclaimed is not recorded: it stays idle until its queue's
      // time limit or `idle_tail` after it went idle, whichever is first.
      const Micros idle_from = j.duration - j.activity.back().length;
      const sched::QueueConfig* q = p.config.FindQueue(qname);
      Micros until = idle_from + a.idle_tail;
      if (q != nullptr && q->EffectiveLimit(0) > 0) until = std::min(until, q->EffectiveLimit(0));
      if (until > j.duration) {
        sim::AppendRun(j.activity, sim::ActivityRun{until - j.duration, 0, sim::RunState::kIdle});
        j.duration = until;
      }
    }
    const bool one_device = j.request.num_gpus <= 1;
    if (s.time_slice && one_device && Listed(slice_q, qname)) {
      const int peak = sim::PeakActivePermille(j.activity);
      const bool any_active = std::any_of(j.activity.begin(), j.activity.end(),
                                          [](const sim::ActivityRun& r) { return r.state == sim::RunState::kActive; });
      const bool any_idle = std::any_of(j.activity.begin(), j.activity.end(),
                                        [](const sim::ActivityRun& r) { return r.state == sim::RunState::kIdle; });
      if (peak >= 0 || (!any_active && any_idle)) {
        // Peak busy utilisation as a share of one whole GPU, rounded up to the step.
        const MilliGpu used = static_cast<MilliGpu>((static_cast<std::int64_t>(hj.held_milli) * std::max(peak, 0) + 999) / 1000);
        const MilliGpu step = s.time_slice->step;
        const MilliGpu milli = std::clamp<MilliGpu>((used + step - 1) / step * step, step, kOneGpu);
        if (milli < hj.held_milli) {
          j.kind = sched::SliceKind::kShared;
          j.request.num_gpus = 1;
          j.request.milli_per_gpu = milli;
          j.request.gpu_memory_per_gpu = hj.memory_peak >= 0 ? WithHeadroom(hj.memory_peak, s.time_slice->headroom_percent) : 0;
          ++p.resized;
        }
      } else {
        ++p.not_resized_unmeasured;
      }
    }
    if (s.right_size && one_device && Listed(size_q, qname) && largest_mig > 0) {
      if (hj.memory_peak < 0) {
        ++p.not_resized_unmeasured;
      } else if (const Bytes need = WithHeadroom(std::max<Bytes>(hj.memory_peak, 1), s.right_size->headroom_percent);
                 need <= largest_mig) {
        j.kind = sched::SliceKind::kMig;
        j.request.num_gpus = 1;
        j.request.milli_per_gpu = kOneGpu;
        j.request.gpu_memory_per_gpu = need;
        ++p.resized;
      }
    }
    p.jobs.push_back(std::move(j));
  }
  return p;
}

}  // namespace gpuslice::whatif
