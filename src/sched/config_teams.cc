// [teams] of the config (docs/teams.md): reading, checking and the lookups the scheduler uses.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "core/text.h"
#include "sched/config.h"
#include "sched/config_reader.h"

namespace gpuslice::sched {

MilliGpu TeamConfig::GuaranteeIn(std::string_view queue) const {
  auto it = guarantee.find(queue);
  return it == guarantee.end() ? 0 : it->second;
}

MilliGpu TeamConfig::LimitIn(std::string_view queue) const {
  auto it = limit.find(queue);
  return it == limit.end() ? 0 : it->second;
}

bool TeamConfig::HasUser(std::string_view user) const {
  return std::binary_search(users.begin(), users.end(), user);
}

const TeamConfig* TeamsConfig::Find(std::string_view name) const {
  auto it = std::lower_bound(teams.begin(), teams.end(), name,
                             [](const TeamConfig& t, std::string_view n) { return t.name < n; });
  return it != teams.end() && it->name == name ? &*it : nullptr;
}

const TeamConfig* TeamsConfig::DefaultFor(std::string_view user) const {
  if (auto it = defaults.find(user); it != defaults.end()) return Find(it->second);
  for (const TeamConfig& t : teams)
    if (t.HasUser(user)) return &t;
  return nullptr;
}

namespace config_internal {
namespace {

// Team, user and group names: what Unix accepts for users and groups (no spaces, no ':' or
// '/'), so that a name in the config can be shown, journaled and given to Slurm as it is.
bool NameOk(std::string_view n) {
  if (n.empty() || n.size() > 64 || n.front() == '-') return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

constexpr std::string_view kNameRule = "names are 1-64 letters, digits, '_', '-' or '.', not starting with '-'";

// guarantee / limit: { <queue> = <GPU amount> }.
Status ReadAmounts(TableReader& r, std::string_view key, std::map<std::string, MilliGpu, std::less<>>& out) {
  Status st;
  const toml::table* t = r.SubTable(key, st);
  GPUSLICE_RETURN_IF_ERROR(st);
  if (t == nullptr) return Status::Ok();
  TableReader ar(*t, r.file(), r.Key(key));
  for (const auto& [queue, node] : *t) {
    MilliGpu v = 0;
    GPUSLICE_RETURN_IF_ERROR(ar.Unit(queue.str(), [](const std::string& s) { return ParseGpuAmount(s); }, true, v));
    out[std::string(queue.str())] = v;
  }
  return Status::Ok();
}

Status ReadTeam(TableReader& r, TeamConfig& t) {
  std::vector<std::string> members;
  GPUSLICE_RETURN_IF_ERROR(r.StringList("members", members));
  for (const std::string& m : members) {
    const bool group = !m.empty() && m.front() == '@';
    const std::string name = group ? m.substr(1) : m;
    if (!NameOk(name))
      return r.ErrorAt("members", fmt::format("'{}' is not a user or @group name ({})", ForTerminal(m), kNameRule));
    (group ? t.groups : t.users).push_back(name);
  }
  for (auto* v : {&t.users, &t.groups}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  GPUSLICE_RETURN_IF_ERROR(ReadAmounts(r, "guarantee", t.guarantee));
  GPUSLICE_RETURN_IF_ERROR(ReadAmounts(r, "limit", t.limit));
  GPUSLICE_RETURN_IF_ERROR(r.Int("weight", 1, 1000, t.weight));
  return r.CheckUnknown("members, guarantee, limit, weight");
}

}  // namespace

Status ReadTeams(const toml::table& teams, const std::string& file, TeamsConfig& out) {
  TableReader r(teams, file, "teams");
  GPUSLICE_RETURN_IF_ERROR(
      r.Unit("half_life", [](const std::string& s) { return ParseDuration(s); }, false, out.half_life));
  Status st;
  if (const toml::table* d = r.SubTable("defaults", st)) {
    TableReader dr(*d, file, "teams.defaults");
    for (const auto& [user, node] : *d) {
      std::string team;
      GPUSLICE_RETURN_IF_ERROR(dr.String(user.str(), team));
      out.defaults[std::string(user.str())] = team;
    }
  }
  GPUSLICE_RETURN_IF_ERROR(st);
  for (const auto& [name, node] : teams) {
    const std::string tname(name.str());
    if (tname == "half_life" || tname == "defaults") continue;
    if (!node.is_table()) return r.Error(tname, node, "expected a table (a team) or half_life / defaults");
    r.Get(tname);  // consumed
    TeamConfig t;
    t.name = tname;
    TableReader tr(*node.as_table(), file, fmt::format("teams.{}", tname));
    GPUSLICE_RETURN_IF_ERROR(ReadTeam(tr, t));
    out.teams.push_back(std::move(t));
  }
  std::sort(out.teams.begin(), out.teams.end(), [](const TeamConfig& a, const TeamConfig& b) { return a.name < b.name; });
  return r.CheckUnknown("half_life, defaults, and one table per team");
}

Status ValidateTeams(const Config& config) {
  const TeamsConfig& tc = config.teams;
  for (std::size_t i = 0; i < tc.teams.size(); ++i) {
    const TeamConfig& t = tc.teams[i];
    const std::string key = fmt::format("teams.{}", ForTerminal(t.name));
    if (!NameOk(t.name)) return InvalidArgument(fmt::format("{}: not a team name ({})", key, kNameRule));
    if (i > 0 && tc.teams[i - 1].name == t.name) return InvalidArgument(fmt::format("{}: defined twice", key));
    if (t.users.empty() && t.groups.empty())
      return InvalidArgument(fmt::format("{}.members: a team needs at least one user or @group", key));
    for (const auto* amounts : {&t.guarantee, &t.limit}) {
      const char* what = amounts == &t.guarantee ? "guarantee" : "limit";
      for (const auto& [queue, milli] : *amounts) {
        if (config.FindQueue(queue) == nullptr)
          return InvalidArgument(fmt::format("{}.{}.{}: no queue '{}' in this config", key, what,
                                             ForTerminal(queue), ForTerminal(queue)));
        if (milli < 0 || milli > kMaxMilliGpu)
          return InvalidArgument(fmt::format("{}.{}.{} = {}m: out of range", key, what, ForTerminal(queue), milli));
      }
    }
    for (const auto& [queue, limit] : t.limit) {
      if (limit > 0 && limit < t.GuaranteeIn(queue))
        return InvalidArgument(fmt::format("{}.limit.{} = {}: below its guarantee of {} (a limit caps what the team "
                                           "may hold, guarantee included)", key, queue, FormatMilliGpu(limit),
                                           FormatMilliGpu(t.GuaranteeIn(queue))));
    }
    if (t.weight < 1 || t.weight > 1000)
      return InvalidArgument(fmt::format("{}.weight = {}: must be between 1 and 1000", key, t.weight));
  }
  for (const auto& [user, team] : tc.defaults) {
    const std::string key = fmt::format("teams.defaults.{}", ForTerminal(user));
    if (!NameOk(user)) return InvalidArgument(fmt::format("{}: not a user name ({})", key, kNameRule));
    const TeamConfig* t = tc.Find(team);
    if (t == nullptr)
      return InvalidArgument(fmt::format("{} = '{}': no such team", key, ForTerminal(team)));
    if (!t->HasUser(user) && t->groups.empty())
      return InvalidArgument(fmt::format("{} = '{}': the team does not list {} among its members", key, team, user));
  }
  if (tc.half_life <= 0) return InvalidArgument("teams.half_life: must be more than zero");
  return Status::Ok();
}

}  // namespace config_internal
}  // namespace gpuslice::sched
