#include "slurm/teams_setup.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/text.h"
#include "slurm/process.h"

namespace gpuslice::slurm {
namespace {

using sched::SliceKind;

constexpr std::size_t kMaxName = 64;

bool Lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

// sacctmgr lower-cases account (and cluster) names, so "Vision" would silently become
// "vision"; '=' ',' and spaces would be read as its syntax. Refused rather than changed.
bool AccountNameOk(std::string_view n) {
  return !n.empty() && n.size() <= kMaxName && Lower(n.front()) &&
         std::all_of(n.begin(), n.end(), [](char c) { return Lower(c) || c == '-' || c == '.'; });
}

// Unix user names as the config accepts them. Upper case is allowed (with a warning: slurmdbd
// lower-cases user names unless its Parameters has PreserveCaseUser).
bool UserNameOk(std::string_view n) {
  return !n.empty() && n.size() <= kMaxName && n.front() != '-' && std::all_of(n.begin(), n.end(), [](char c) {
           return Lower(c) || (c >= 'A' && c <= 'Z') || c == '-' || c == '.';
         });
}

constexpr std::string_view kAccountRule =
    "Slurm account names here are 1-64 lower-case letters, digits, '_', '-' or '.', starting with a letter, "
    "digit or '_' (sacctmgr lower-cases names)";

// A comment line of the script or slurm.conf: control characters cannot end the comment.
std::string Comment(std::string_view text) {
  std::string s = "# ";
  for (char c : text) s += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  return s + "\n";
}

// A GRES a queue's slices are counted in, and its units per GPU.
struct Tres {
  std::string name;  // "gres/gpu"
  int per_gpu = 1;
  friend bool operator<(const Tres& a, const Tres& b) { return a.name < b.name; }
};

std::vector<Tres> TresOf(const sched::QueueConfig& q, const TeamsSetupOptions& o) {
  std::vector<Tres> out;
  if (q.Allows(SliceKind::kWhole)) out.push_back({"gres/gpu", 1});
  if (o.sharing == SharingGres::kShard && q.Allows(SliceKind::kShared)) out.push_back({"gres/shard", o.shards_per_gpu});
  if (o.sharing == SharingGres::kMps && q.Allows(SliceKind::kMps)) out.push_back({"gres/mps", 100});
  return out;
}

// The script: comments, and sacctmgr calls kept both as argv and as quoted lines.
class Script {
 public:
  explicit Script(TeamsSetup& out) : out_(out) {}
  void Note(std::string_view text) { out_.script += Comment(text); }
  void Warn(std::string text) {
    out_.script += Comment("warning: " + text);
    out_.warnings.push_back(std::move(text));
  }
  void Blank() { out_.script += "\n"; }
  void Add(std::vector<std::string> args) { Run("add", std::move(args), true); }
  void Modify(std::vector<std::string> args) { Run("modify", std::move(args), false); }

 private:
  void Run(const char* verb, std::vector<std::string> args, bool may_exist) {
    SacctmgrCommand c;
    c.argv = {"sacctmgr", "-i", verb};
    c.argv.insert(c.argv.end(), args.begin(), args.end());
    c.may_exist = may_exist;
    out_.script += (may_exist ? "add " : "sacctmgr -i modify ") + ShellJoin(args) + "\n";
    out_.commands.push_back(std::move(c));
  }
  TeamsSetup& out_;
};

// Users and their teams, groups expanded.
struct Member {
  std::vector<std::string> direct;    // teams listing the user, by name
  std::vector<std::string> by_group;  // teams listing one of the user's groups, by name
};

Result<std::map<std::string, Member>> Members(const sched::TeamsConfig& tc, const TeamsSetupOptions& o,
                                              Script& script) {
  std::map<std::string, Member> users;
  for (const sched::TeamConfig& t : tc.teams) {
    for (const std::string& u : t.users) {
      if (!UserNameOk(u))
        return InvalidArgument(fmt::format("teams.{}.members: '{}' is not a user name Slurm can take",
                                           t.name, ForTerminal(u)));
      users[u].direct.push_back(t.name);
    }
    for (const std::string& g : t.groups) {
      if (!o.group_members) {
        script.Warn(fmt::format("team {}: members of group @{} are not added: Slurm has no group associations "
                                "(generate on a host that knows the group, or list its users)",
                                t.name, g));
        continue;
      }
      auto members = o.group_members(g);
      if (!members) {
        script.Warn(fmt::format("team {}: group @{} does not exist on this host; its members are not added",
                                t.name, g));
        continue;
      }
      script.Note(fmt::format("team {}: group @{} is {} user(s) here, added one by one (Slurm has no group "
                              "associations; run this again when the group changes)",
                              t.name, g, members->size()));
      for (const std::string& u : *members) {
        if (!UserNameOk(u))
          return InvalidArgument(fmt::format("teams.{}.members: group @{} has member '{}', not a user name Slurm "
                                             "can take", t.name, g, ForTerminal(u)));
        auto& m = users[u];
        if (m.by_group.empty() || m.by_group.back() != t.name) m.by_group.push_back(t.name);
      }
    }
  }
  for (auto& [user, m] : users) {
    // A user listed and also in a listed group: the direct membership is the one that counts.
    // (`direct` named apart: clang 14 cannot capture a structured binding.)
    const std::vector<std::string>& direct = m.direct;
    std::erase_if(m.by_group, [&direct](const std::string& t) {
      return std::find(direct.begin(), direct.end(), t) != direct.end();
    });
    if (std::any_of(user.begin(), user.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
      script.Warn(fmt::format("user {}: slurmdbd lower-cases user names unless slurmdbd.conf has "
                              "Parameters=PreserveCaseUser", user));
  }
  return users;
}

// The user's default team: teams.defaults when it is one of theirs, else the first team listing
// them, else the first team with one of their groups (the daemon's rule, docs/teams.md).
std::string DefaultTeam(const sched::TeamsConfig& tc, const std::string& user, const Member& m, Script& script) {
  if (auto it = tc.defaults.find(user); it != tc.defaults.end()) {
    const std::string& d = it->second;
    bool in = std::find(m.direct.begin(), m.direct.end(), d) != m.direct.end() ||
              std::find(m.by_group.begin(), m.by_group.end(), d) != m.by_group.end();
    if (in) return d;
    script.Warn(fmt::format("teams.defaults.{} = {}: the user is not a member here (group not expanded?); "
                            "the default account is the first team instead", user, d));
  }
  return m.direct.empty() ? m.by_group.front() : m.direct.front();
}

// GrpTRES of one team: every accounted GRES, capped or "-1" (no cap; clears an old one).
std::string GrpTres(const sched::Config& policy, const sched::TeamConfig& t, const std::set<Tres>& tres,
                    const TeamsSetupOptions& o, Script& script) {
  std::vector<std::string> parts;
  for (const Tres& r : tres) {
    std::vector<const sched::QueueConfig*> limited, open;
    MilliGpu sum = 0;
    for (const sched::QueueConfig& q : policy.queues) {
      auto qt = TresOf(q, o);
      if (std::none_of(qt.begin(), qt.end(), [&](const Tres& x) { return x.name == r.name; })) continue;
      if (t.LimitIn(q.name) > 0) {
        limited.push_back(&q);
        sum += t.LimitIn(q.name);
      } else {
        open.push_back(&q);
      }
    }
    if (limited.empty()) {
      parts.push_back(r.name + "=-1");
      continue;
    }
    if (!open.empty()) {
      script.Warn(fmt::format("teams.{}.limit.{}: not expressed: {} counts queue '{}' too, where the team has no "
                              "limit (a Slurm account limit covers every partition)",
                              t.name, limited.front()->name, r.name, open.front()->name));
      parts.push_back(r.name + "=-1");
      continue;
    }
    // Rounded down: Slurm counts whole units, and a cap is never raised.
    const std::int64_t units = sum * r.per_gpu / kOneGpu;
    if (limited.size() > 1) {
      std::string names;
      for (const auto* q : limited) names += (names.empty() ? "'" : ", '") + q->name + "'";
      script.Warn(fmt::format("team {}: {} is capped at {} for queues {} together (their limits' sum): a Slurm "
                              "account limit covers every partition", t.name, r.name, units, names));
    } else if (units * kOneGpu != sum * r.per_gpu) {
      script.Warn(fmt::format("teams.{}.limit.{} = {}: {} counts whole units ({} per GPU); capped at {} (rounded "
                              "down: a cap is never raised)",
                              t.name, limited.front()->name, FormatMilliGpu(sum), r.name, r.per_gpu, units));
    }
    parts.push_back(fmt::format("{}={}", r.name, units));
  }
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : ",") + p;
  return s;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::string SlurmDecayHalfLife(Micros half_life) {
  if (half_life <= 0) return "0";
  const std::int64_t minutes = std::max<std::int64_t>(1, (half_life + 30 * kSecond) / kMinute);
  return fmt::format("{}-{:02}:{:02}", minutes / (24 * 60), minutes / 60 % 24, minutes % 60);
}

Result<TeamsSetup> GenerateTeamsSetup(const sched::Config& policy, const TeamsSetupOptions& o) {
  const sched::TeamsConfig& tc = policy.teams;
  if (!tc.enabled()) return InvalidArgument("teams: the config has no [teams] (docs/teams.md)");
  if (!o.cluster.empty() && !AccountNameOk(o.cluster))
    return InvalidArgument(fmt::format("--cluster = '{}': not a Slurm cluster name (lower-case letters, digits, "
                                       "'_', '-', '.')", ForTerminal(o.cluster)));
  if (o.shards_per_gpu < 1 || o.shards_per_gpu > 1000)
    return InvalidArgument(fmt::format("--shards-per-gpu = {}: must be between 1 and 1000", o.shards_per_gpu));
  for (const sched::TeamConfig& t : tc.teams) {
    if (!AccountNameOk(t.name))
      return InvalidArgument(fmt::format("teams.{}: not a Slurm account name ({})", ForTerminal(t.name), kAccountRule));
    if (t.name == "root")
      return InvalidArgument("teams.root: 'root' is Slurm's root account, the parent of every team; rename the team");
    if (t.weight < 1 || t.weight > 1000)
      return InvalidArgument(fmt::format("teams.{}.weight = {}: must be between 1 and 1000", t.name, t.weight));
  }

  TeamsSetup out;
  Script script(out);
  std::set<Tres> tres = {{"gres/gpu", 1}};
  bool borrowing = false;
  std::vector<std::string> preemptible, fixed;
  for (const sched::QueueConfig& q : policy.queues) {
    for (const Tres& r : TresOf(q, o)) tres.insert(r);
    (q.preemptible ? preemptible : fixed).push_back(q.name);
    borrowing = borrowing || q.preemptible;
  }
  std::string tres_list;
  for (const Tres& r : tres) tres_list += (tres_list.empty() ? "" : ",") + r.name;

  // ---- slurm.conf ----
  std::string& c = out.slurm_conf;
  c += "# ---- generated by `gpuslice slurm teams`; merge into slurm.conf ----\n";
  c += "# Teams live in slurmdbd: accounts, their fair share and limits, and QOS.\n";
  c += "AccountingStorageType=accounting_storage/slurmdbd\n";
  c += "# Account limits and QOS are enforced (a user with no association cannot submit); safe: a job\n"
       "# that a GrpTRESMins limit would stop before its end does not start.\n";
  c += "AccountingStorageEnforce=limits,qos,safe\n";
  c += "# The GPU GRES are accounted, so that GrpTRES can cap them (gres/gpu also counts MIG instances).\n";
  c += fmt::format("AccountingStorageTRES={}\n", tres_list);
  c += "# Fair share between teams: an account's Fairshare is the team's weight.\n";
  c += "PriorityType=priority/multifactor\n";
  c += Comment(fmt::format("[teams] half_life = {}, rounded to minutes", FormatDuration(tc.half_life)));
  c += fmt::format("PriorityDecayHalfLife={}\n", SlurmDecayHalfLife(tc.half_life));
  c += "PriorityWeightFairshare=10000\n";
  if (borrowing) {
    c += Comment(fmt::format("Borrowing in preemptible queues ({}): jobs of QOS {} run on idle GPUs and are "
                             "requeued when a job of QOS {} needs them.",
                             Join(preemptible), kBorrowQos, kTeamQos));
    c += "PriorityWeightQOS=1000\n";
    c += "PreemptType=preempt/qos\n";
    c += "PreemptMode=REQUEUE\n";
    if (!fixed.empty())
      c += Comment(fmt::format("Add DenyQos={} to the PartitionName lines of the queues that are not preemptible "
                               "({}): there, borrowed GPUs are never taken back.",
                               kBorrowQos, Join(fixed)));
  }
  if (SlurmDecayHalfLife(tc.half_life) != "0" &&
      (tc.half_life % kMinute != 0 || tc.half_life < kMinute))
    out.warnings.push_back(fmt::format("teams.half_life = {}: Slurm counts minutes; PriorityDecayHalfLife={}",
                                       FormatDuration(tc.half_life), SlurmDecayHalfLife(tc.half_life)));

  // ---- the sacctmgr script ----
  out.script += "#!/bin/sh\n";
  script.Note(fmt::format("Generated by `gpuslice slurm teams`{}: the Slurm equivalent of [teams] (docs/teams.md).",
                          o.source.empty() ? "" : " from " + o.source));
  script.Note("Run it as root or SlurmUser where sacctmgr reaches slurmdbd, after slurmctld has started once with");
  script.Note("the slurm.conf lines generated with it (slurmctld creates the gres TRES and registers the cluster).");
  script.Note("It can run again after the config changes: every value is set again. Accounts and users");
  script.Note("that left the config are not removed (sacctmgr -i delete ... does that).");
  script.Note("Slurm has no guarantee: GrpTRES caps a team, and fair share only orders the waiting jobs.");
  script.Note("A team's guarantee below is a comment; what it promises (room freed for a team below");
  script.Note("its guarantee first) is approached by fair share and, in preemptible queues, by preemption.");
  out.script += "set -eu\n";
  out.script += "# `sacctmgr add` of what exists says \"Nothing new added.\" and exits 1: accepted.\n";
  out.script += "add() {\n"
                "  out=$(sacctmgr -i add \"$@\" 2>&1) && { printf '%s\\n' \"$out\"; return 0; }\n"
                "  case $out in *'Nothing new added'*) return 0 ;; esac\n"
                "  printf '%s\\n' \"$out\" >&2\n"
                "  return 1\n"
                "}\n";
  std::vector<std::string> where_cluster;
  if (!o.cluster.empty()) where_cluster.push_back("Cluster=" + o.cluster);

  std::vector<std::string> qos_settings;
  if (borrowing) {
    script.Blank();
    script.Note(fmt::format("Borrowing (preemptible queues: {}): submit with --qos={} to run on idle GPUs past the",
                            Join(preemptible), kBorrowQos));
    script.Note(fmt::format("team's share; such jobs are requeued when a job of {} (the default) needs the room.",
                            kTeamQos));
    script.Add({"qos", std::string("Name=") + kBorrowQos});
    script.Add({"qos", std::string("Name=") + kTeamQos});
    script.Modify({"qos", "where", std::string("Name=") + kBorrowQos, "set", "Priority=0", "PreemptMode=requeue",
                   "Flags=NoReserve"});
    script.Modify({"qos", "where", std::string("Name=") + kTeamQos, "set", "Priority=10",
                   std::string("Preempt=") + kBorrowQos});
    qos_settings = {fmt::format("QOS={},{}", kTeamQos, kBorrowQos), std::string("DefaultQOS=") + kTeamQos};
  }

  for (const sched::TeamConfig& t : tc.teams) {
    script.Blank();
    script.Note(fmt::format("team {}: weight {} -> Fairshare={}", t.name, t.weight, t.weight));
    for (const auto& [queue, milli] : t.guarantee)
      if (milli > 0)
        script.Note(fmt::format("  guaranteed {} GPU in queue '{}': not expressible in Slurm (no guarantee)",
                                FormatMilliGpu(milli), queue));
    for (const auto& [queue, milli] : t.limit)
      script.Note(fmt::format("  limit {} GPU in queue '{}'", FormatMilliGpu(milli), queue));
    for (const sched::QueueConfig& q : policy.queues) {
      if (t.LimitIn(q.name) == 0) continue;
      if (TresOf(q, o).empty())
        script.Warn(fmt::format("teams.{}.limit.{}: not expressed: no GRES counts this queue's slices as GPU "
                                "amounts (a MIG instance is one gres/gpu; shared slices need the shard GRES)",
                                t.name, q.name));
      else if (q.Allows(SliceKind::kMig))
        script.Warn(fmt::format("teams.{}.limit.{}: its MIG slices count as one gres/gpu each, not as GPU fractions",
                                t.name, q.name));
    }
    std::vector<std::string> add = {"account", "Name=" + t.name, "Description=gpuslice team", "Organization=gpuslice",
                                    "Parent=root"};
    add.insert(add.end(), where_cluster.begin(), where_cluster.end());
    script.Add(add);
    std::vector<std::string> modify = {"account", "where", "Name=" + t.name};
    modify.insert(modify.end(), where_cluster.begin(), where_cluster.end());
    modify.push_back("set");
    modify.push_back(fmt::format("Fairshare={}", t.weight));
    modify.push_back("GrpTRES=" + GrpTres(policy, t, tres, o, script));
    modify.insert(modify.end(), qos_settings.begin(), qos_settings.end());
    script.Modify(modify);
  }

  script.Blank();
  script.Note("Users: one association per team; the default account is the user's default team.");
  GPUSLICE_ASSIGN_OR_RETURN(auto users, Members(tc, o, script));
  for (const auto& [user, m] : users) {
    if (m.direct.empty() && m.by_group.empty()) continue;
    const std::string first = DefaultTeam(tc, user, m, script);
    std::vector<std::string> teams = {first};
    for (const auto* list : {&m.direct, &m.by_group})
      for (const std::string& t : *list)
        if (t != first) teams.push_back(t);
    for (const std::string& t : teams) {
      std::vector<std::string> add = {"user", "Name=" + user, "Account=" + t};
      if (t == first) add.push_back("DefaultAccount=" + first);
      add.insert(add.end(), where_cluster.begin(), where_cluster.end());
      script.Add(add);
    }
    std::vector<std::string> modify = {"user", "where", "Name=" + user};
    modify.insert(modify.end(), where_cluster.begin(), where_cluster.end());
    modify.insert(modify.end(), {"set", "DefaultAccount=" + first});
    script.Modify(modify);
  }
  return out;
}

GroupMembers SystemGroupMembers() {
  return [](const std::string& group) -> std::optional<std::vector<std::string>> {
    std::vector<char> buf(16384);
    struct group g{};
    struct group* found = nullptr;
    int rc = 0;
    while ((rc = ::getgrnam_r(group.c_str(), &g, buf.data(), buf.size(), &found)) == ERANGE && buf.size() < (1u << 24))
      buf.resize(buf.size() * 2);
    if (rc != 0 || found == nullptr) return std::nullopt;
    std::vector<std::string> users;
    for (char** m = g.gr_mem; m != nullptr && *m != nullptr; ++m) users.emplace_back(*m);
    ::setpwent();
    while (struct passwd* p = ::getpwent())
      if (p->pw_gid == g.gr_gid) users.emplace_back(p->pw_name);
    ::endpwent();
    std::sort(users.begin(), users.end());
    users.erase(std::unique(users.begin(), users.end()), users.end());
    return users;
  };
}

}  // namespace gpuslice::slurm
