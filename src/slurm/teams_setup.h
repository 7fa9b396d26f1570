#pragma once
// Turns [teams] (sched::TeamsConfig, docs/teams.md) into the Slurm setup that comes closest:
// slurm.conf lines (multifactor priority with fair share, accounting limits, preempt/qos) and a
// `sacctmgr -i` script (one account per team, users as associations, GrpTRES from limits, QOS
// for borrowing). What each gpuslice notion becomes, and why:
//   team            -> account under root, Fairshare = the team's weight (the weight is what
//                      gpuslice's fair share divides capacity by; a guarantee would give teams
//                      without one no share at all)
//   member          -> user association in the team's account; DefaultAccount = the user's
//                      default team (teams.defaults, else the first team listing the user, else
//                      the first with one of the user's groups)
//   @group member   -> expanded to the group's users when the script is generated (Slurm has
//                      no group associations); without a resolver only a comment
//   limit           -> GrpTRES on the account: whole GPUs as gres/gpu, shared slices as
//                      gres/shard (or gres/mps), each rounded DOWN to whole units (a cap is
//                      never raised). An account limit covers every partition, so a queue's
//                      limit is exact only when its GRES is used by no other queue; otherwise
//                      the cap is on the sum (or left off when one of those queues is
//                      unlimited for the team), with a warning. MIG limits are not expressed
//                      (Slurm counts instances, not GPU fractions)
//   guarantee       -> no Slurm equivalent (GrpTRES caps, shares only order): comments only
//   borrowing       -> emulated in preemptible queues: QOS gpuslice-borrow (priority 0,
//                      requeued when preempted) is preempted by QOS gpuslice-team, the teams'
//                      default
//   half_life       -> PriorityDecayHalfLife
// Every name is checked (Slurm account and user names: lower case letters, digits, '_', '-',
// '.'; an account cannot be "root") and shell-quoted in the script. Pure function of its
// inputs and of the group resolver; thread-safe when the resolver is.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/config.h"
#include "slurm/config_gen.h"

namespace gpuslice::slurm {

// The users of a Unix group: those listing it as a supplementary group and those whose primary
// group it is. nullopt: no such group.
using GroupMembers = std::function<std::optional<std::vector<std::string>>(const std::string& group)>;
// This host's groups (getgrnam_r, and getpwent for primary groups). Not thread-safe (getpwent).
GroupMembers SystemGroupMembers();

// The QOS of borrowing in preemptible queues: a job of kBorrowQos (`submit --slurm --borrow`)
// runs on idle GPUs past its team's share and is requeued when a job of kTeamQos, the teams'
// default, needs the room.
inline constexpr const char* kTeamQos = "gpuslice-team";
inline constexpr const char* kBorrowQos = "gpuslice-borrow";

struct TeamsSetupOptions {
  std::string cluster;  // Cluster= on accounts and users; empty: every cluster slurmdbd knows
  SharingGres sharing = SharingGres::kShard;  // as given to `gpuslice slurm config`
  int shards_per_gpu = 8;                     // as given to `gpuslice slurm config`
  GroupMembers group_members;  // empty: @groups are listed in comments, not expanded
  std::string source;          // the config file named in the header comment
};

// One sacctmgr call.
struct SacctmgrCommand {
  std::vector<std::string> argv;  // "sacctmgr", "-i", ...
  // An `add` of something that may already exist: on a rerun sacctmgr says "Nothing new added."
  // and exits 1, which the script accepts (the `modify` lines after it set every value).
  bool may_exist = false;
};

struct TeamsSetup {
  std::string slurm_conf;                 // lines to merge into slurm.conf, with comments
  std::vector<SacctmgrCommand> commands;  // in order
  std::string script;                     // the commands as a /bin/sh script, with comments
  std::vector<std::string> warnings;      // what Slurm cannot express exactly
};

// InvalidArgument naming the field and value: no teams, a name Slurm cannot take, a group
// member that is not a user name, bad --cluster or shards per GPU.
Result<TeamsSetup> GenerateTeamsSetup(const sched::Config& policy, const TeamsSetupOptions& options);

// PriorityDecayHalfLife's "days-hours:minutes" ("7-00:00"), rounded to the nearest minute and
// at least one minute; 0 -> "0" (no decay).
std::string SlurmDecayHalfLife(Micros half_life);

}  // namespace gpuslice::slurm
