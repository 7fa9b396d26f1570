#include "sched/config_format.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace gpuslice::sched {
namespace {

// The largest unit that divides the value exactly, so the text parses back to it.
std::string ExactDuration(Micros us) {
  if (us == 0) return "0";
  constexpr std::pair<Micros, const char*> kUnits[] = {
      {24 * kHour, "d"}, {kHour, "h"}, {kMinute, "m"}, {kSecond, "s"}, {kMillisecond, "ms"}};
  for (const auto& [unit, name] : kUnits) {
    if (us % unit == 0) return fmt::format("{}{}", us / unit, name);
  }
  return fmt::format("{}us", us);
}

std::string ExactBytes(Bytes b) {
  if (b == 0) return "0";
  constexpr std::pair<Bytes, const char*> kUnits[] = {
      {1024 * kGiB, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}};
  for (const auto& [unit, name] : kUnits) {
    if (b % unit == 0) return fmt::format("{}{}", b / unit, name);
  }
  return std::to_string(b);
}

std::string ExactGpu(MilliGpu m) { return m == 0 ? "0" : fmt::format("{}m", m); }

toml::array Kinds(const QueueConfig& q) {
  toml::array a;
  for (SliceKind k : q.allowed_kinds) a.push_back(std::string(SliceKindName(k)));
  return a;
}

std::vector<std::string> SignalNames(const IdlePolicy& idle) {
  std::vector<std::string> s;
  if (idle.activity.sm_utilisation) s.push_back("sm");
  if (idle.activity.memory_traffic) s.push_back("memory");
  if (idle.activity.process_presence) s.push_back("processes");
  for (const std::string& r : idle.report_sources) s.push_back(r);
  return s;
}

toml::table IdleTable(const IdlePolicy& idle) {
  toml::array signals;
  for (const std::string& s : SignalNames(idle)) signals.push_back(s);
  return toml::table{
      {"enabled", idle.enabled},
      {"threshold", idle.util_threshold_percent},
      {"window", ExactDuration(idle.window)},
      {"grace", ExactDuration(idle.grace)},
      {"signals", std::move(signals)},
      {"action", std::string(ReclaimActionName(idle.action))},
      {"busy_is_active", idle.busy_is_active},
      {"busy_max", ExactDuration(idle.busy_max)},
      {"report_stale", ExactDuration(idle.report_stale)},
      {"reclaim", std::string(IdleReclaimName(idle.reclaim))},
  };
}

toml::table QueueTable(const QueueConfig& q) {
  return toml::table{
      {"kinds", Kinds(q)},
      {"default_kind", std::string(SliceKindName(q.default_kind))},
      {"default_gpu", ExactGpu(q.default_milli)},
      {"default_memory", ExactBytes(q.default_memory)},
      {"default_gpus", q.default_gpus},
      {"priority", q.priority},
      {"time_limit", ExactDuration(q.time_limit)},
      {"max_duration", ExactDuration(q.max_duration)},
      {"warn_before", ExactDuration(q.warn_before)},
      {"user_max_gpu", ExactGpu(q.user_max_milli)},
      {"user_max_jobs", q.user_max_jobs},
      {"placement", q.placement},
      {"preemptible", q.preemptible},
      {"reserve_after", ExactDuration(q.reserve_after)},
      {"idle", IdleTable(q.idle)},
  };
}

std::string Shown(Micros d) { return d == 0 ? "none" : FormatDuration(d); }

std::string DescribeIdle(const IdlePolicy& idle) {
  if (!idle.enabled) return "idle: not watched";
  std::string what = idle.action == ReclaimAction::kReport
                         ? fmt::format("report after {}", FormatDuration(idle.window))
                         : fmt::format("reclaim after {} + {} grace{}", FormatDuration(idle.window),
                                       Shown(idle.grace),
                                       idle.reclaim == IdleReclaim::kOnDemand ? ", on demand" : "");
  return fmt::format("idle: {} (threshold {}%, signals {})", what, idle.util_threshold_percent,
                     fmt::join(SignalNames(idle), ","));
}

std::string DescribeQueue(const QueueConfig& q) {
  std::vector<std::string> kinds;
  for (SliceKind k : q.allowed_kinds) kinds.emplace_back(SliceKindName(k));
  std::string def(SliceKindName(q.default_kind));
  if (q.default_kind == SliceKind::kWhole) {
    def += fmt::format(" x{}", q.default_gpus);
  } else if (q.default_kind == SliceKind::kMig) {
    def += q.default_memory > 0 ? " " + FormatBytes(q.default_memory) : "";
  } else {
    def += " " + FormatMilliGpu(q.default_milli);
    if (q.default_memory > 0) def += " " + FormatBytes(q.default_memory);
  }
  std::string limit = q.EffectiveLimit(0) == 0 ? "no time limit"
                                               : fmt::format("time limit {}", FormatDuration(q.EffectiveLimit(0)));
  if (q.EffectiveLimit(0) > 0 && q.warn_before > 0)
    limit += fmt::format(", warned {} before", FormatDuration(q.warn_before));
  std::string caps = "user caps none";
  if (q.user_max_milli > 0 || q.user_max_jobs > 0) {
    caps = fmt::format("user caps {} GPU, {} jobs",
                       q.user_max_milli > 0 ? FormatMilliGpu(q.user_max_milli) : "any",
                       q.user_max_jobs > 0 ? std::to_string(q.user_max_jobs) : "any");
  }
  std::string extra;
  if (q.preemptible) extra += "; preemptible";
  if (q.reserve_after > 0) extra += fmt::format("; devices kept after {} waiting", FormatDuration(q.reserve_after));
  return fmt::format("{}: kinds {} (default {}); priority {}; {}; {}; placement {}{}; {}", q.name,
                     fmt::join(kinds, ","), def, q.priority, limit, caps, q.placement, extra,
                     DescribeIdle(q.idle));
}

// [memory]'s overrides, only those set (a config without any has no [memory] table, so its
// text and version are what they were before memory reserves existed).
toml::table ReserveTable(const MemoryReserve& r) {
  toml::table t;
  if (r.driver_reserved) t.insert("driver_reserved", ExactBytes(*r.driver_reserved));
  if (r.context_reserve) t.insert("context_reserve", ExactBytes(*r.context_reserve));
  return t;
}

toml::table TeamsTable(const TeamsConfig& tc) {
  toml::table teams{{"half_life", ExactDuration(tc.half_life)}};
  toml::table defaults;
  for (const auto& [user, team] : tc.defaults) defaults.insert(user, team);
  if (!defaults.empty()) teams.insert("defaults", std::move(defaults));
  for (const TeamConfig& t : tc.teams) {
    toml::array members;
    for (const std::string& u : t.users) members.push_back(u);
    for (const std::string& g : t.groups) members.push_back("@" + g);
    toml::table guarantee, limit;
    for (const auto& [queue, milli] : t.guarantee) guarantee.insert(queue, ExactGpu(milli));
    for (const auto& [queue, milli] : t.limit) limit.insert(queue, ExactGpu(milli));
    teams.insert(t.name, toml::table{{"members", std::move(members)},
                                     {"guarantee", std::move(guarantee)},
                                     {"limit", std::move(limit)},
                                     {"weight", t.weight}});
  }
  return teams;
}

}  // namespace

std::string FormatConfig(const Config& config) {
  toml::table queues;
  for (const QueueConfig& q : config.queues) queues.insert(q.name, QueueTable(q));
  toml::table root{
      {"default_queue", config.default_queue},
      {"admin_group", config.admin_group},
      {"mig", toml::table{{"enabled", config.mig.enabled},
                          {"drain", std::string(MigDrainPolicyName(config.mig.drain))}}},
      {"queues", std::move(queues)},
  };
  toml::table memory = ReserveTable(config.memory.all);
  toml::table models;
  for (const auto& [name, r] : config.memory.models) models.insert(name, ReserveTable(r));
  if (!models.empty()) memory.insert("models", std::move(models));
  if (!memory.empty()) root.insert("memory", std::move(memory));
  // [teams] only when there are teams (a config without has the text and version it had).
  if (config.teams.enabled()) root.insert("teams", TeamsTable(config.teams));
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

std::string ConfigVersion(const Config& config) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : FormatConfig(config)) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("c-{:016x}", h);
}

std::vector<std::string> DescribeConfig(const Config& config) {
  std::vector<std::string> lines;
  for (const QueueConfig& q : config.queues) lines.push_back(DescribeQueue(q));
  lines.push_back(fmt::format("default queue {}; admin group {}; MIG layouts {}, drain {}",
                              config.default_queue, config.admin_group,
                              config.mig.enabled ? "planned from demand" : "not changed",
                              MigDrainPolicyName(config.mig.drain)));
  for (const TeamConfig& t : config.teams.teams) {
    std::vector<std::string> members(t.users.begin(), t.users.end()), amounts;
    for (const std::string& g : t.groups) members.push_back("@" + g);
    for (const auto& [queue, milli] : t.guarantee) amounts.push_back(fmt::format("{} {}", queue, FormatMilliGpu(milli)));
    std::vector<std::string> limits;
    for (const auto& [queue, milli] : t.limit) limits.push_back(fmt::format("{} {}", queue, FormatMilliGpu(milli)));
    lines.push_back(fmt::format("team {}: members {}; guaranteed {}; limit {}; weight {}", t.name,
                                fmt::join(members, ", "), amounts.empty() ? "nothing" : fmt::format("{}", fmt::join(amounts, ", ")),
                                limits.empty() ? "none" : fmt::format("{}", fmt::join(limits, ", ")), t.weight));
  }
  if (config.teams.enabled())
    lines.push_back(fmt::format("teams: usage half-life {}", FormatDuration(config.teams.half_life)));
  return lines;
}

QueueChanges CompareQueues(const Config& before, const Config& after) {
  QueueChanges c;
  for (const QueueConfig& q : before.queues) {
    const QueueConfig* n = after.FindQueue(q.name);
    if (n == nullptr) c.removed.push_back(q.name);
    else if (!(*n == q)) c.changed.push_back(q.name);
  }
  for (const QueueConfig& q : after.queues) {
    if (before.FindQueue(q.name) == nullptr) c.added.push_back(q.name);
  }
  return c;
}

}  // namespace gpuslice::sched
