#pragma once
// Scheduler configuration: the queues (shaped by workload), their slice kinds, defaults, limits,
// idle policy, per-user caps and placement policy, plus cluster-wide MIG drain policy. Parsed
// from one TOML file; a bad file gives an error naming the file, the key and the value, and no
// Config at all (nothing starts). The full reference is docs/config.md.
// Plain values; thread-compatible.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/catalogue.h"
#include "core/slice_kind.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::sched {

// The four kinds of slice: core's type (core/slice_kind.h), under the scheduler's names.
using ::gpuslice::ParseSliceKind;
using ::gpuslice::SliceKind;
using ::gpuslice::SliceKindName;

// What happens when the idle state machine reaches its end.
enum class ReclaimAction {
  kReclaim,  // Warn, then Reclaim after the grace period (interactive)
  kReport,   // Warn only ("report"); the job is never reclaimed (training, inference)
};
std::string_view ReclaimActionName(ReclaimAction action);

// How a GPU chosen for a new MIG layout is emptied.
enum class MigDrainPolicy {
  kWait,     // no new slices; wait for the running ones to finish
  kPreempt,  // no new slices; preempt running slices of preemptible queues (they are requeued)
};
std::string_view MigDrainPolicyName(MigDrainPolicy policy);

// Which samples count as activity (any one enabled signal above threshold resets idleness).
struct ActivitySignals {
  bool sm_utilisation = true;    // SM utilisation percent >= threshold
  bool memory_traffic = true;    // memory-controller utilisation percent >= threshold
  bool process_presence = false; // any process on the slice counts as activity
  friend bool operator==(const ActivitySignals&, const ActivitySignals&) = default;
};

// When a slice that has passed its idle window and grace is reclaimed.
enum class IdleReclaim {
  kAlways,    // at the end of the grace period (the default)
  kOnDemand,  // it keeps running, "reclaimable on demand", until a pending job needs its room
};
std::string_view IdleReclaimName(IdleReclaim r);  // "always", "on-demand"

// Idle reclaim: a slice idle continuously for `window` is warned (deadline = now + grace);
// still idle at the deadline, it is reclaimed (or only reported, per `action`). Any activity
// in between resets it to active.
//
// Activity reports from outside the GPU (sched::ActivityReport, e.g. a notebook server's
// kernels) count only when their source is listed in `report_sources`, and only while fresh
// (received less than `report_stale` ago). They can only postpone a reclaim: a fresh report
// makes the slice active when it says busy (with busy_is_active, for at most busy_max of one
// busy streak) and moves its last activity to the report's last_activity. Missing or stale
// reports leave the GPU-only rule.
struct IdlePolicy {
  bool enabled = false;
  int util_threshold_percent = 5;  // 0..100
  Micros window = 30 * kMinute;
  Micros grace = 10 * kMinute;
  ActivitySignals activity;
  ReclaimAction action = ReclaimAction::kReclaim;
  std::vector<std::string> report_sources;  // signals naming a report source ("jupyter"); sorted
  bool busy_is_active = true;      // a fresh busy report counts as activity
  Micros busy_max = 0;             // cap on one busy streak's protection; 0: none
  Micros report_stale = 10 * kMinute;  // a report older than this (by received time) no longer counts
  IdleReclaim reclaim = IdleReclaim::kAlways;
  friend bool operator==(const IdlePolicy&, const IdlePolicy&) = default;

  bool CountsReports(std::string_view source) const;
};

struct QueueConfig {
  std::string name;
  std::vector<SliceKind> allowed_kinds;  // non-empty; contains default_kind
  SliceKind default_kind = SliceKind::kShared;
  MilliGpu default_milli = 250;          // shared / mps share of one device when not requested
  Bytes default_memory = 0;              // per-device memory cap / MIG size; 0: proportional to share
  int default_gpus = 1;                  // whole devices when not requested
  int priority = 0;                      // higher runs first
  Micros time_limit = 0;                 // 0: none. Interactive-style limit; a request may ask for less
  Micros max_duration = 0;               // 0: none. Training-style cap; the effective limit is the min
  Micros warn_before = 0;                // Warn this long before a time limit stops the job; 0: no warning
  IdlePolicy idle;
  MilliGpu user_max_milli = 0;           // per-user cap on running GPU share in this queue; 0: none
  int user_max_jobs = 0;                 // per-user cap on running jobs in this queue; 0: none
  std::string placement = "best-fit";    // a name from sched::PolicyNames()
  bool preemptible = false;              // its slices may be preempted to drain a GPU for MIG
  Micros reserve_after = 0;              // whole-GPU job waiting this long: devices are kept for it; 0: never
  friend bool operator==(const QueueConfig&, const QueueConfig&) = default;

  bool Allows(SliceKind kind) const;
  // The effective time limit for a job that asked for `requested` (0: none asked).
  Micros EffectiveLimit(Micros requested) const;
  // How long before the end of a time limit of length `limit` its warning comes: warn_before,
  // but never in the first three quarters of the limit (a 20-minute job with a 15-minute lead
  // is warned 5 minutes before its end, not as it starts). 0: no warning.
  Micros TimeLimitWarnLead(Micros limit) const;
};

struct MigConfig {
  bool enabled = true;                   // plan MIG layouts from pending demand
  MigDrainPolicy drain = MigDrainPolicy::kWait;
  friend bool operator==(const MigConfig&, const MigConfig&) = default;
};

// Device memory set aside before shares are cut ([memory] in the config; docs/config.md):
// overrides of what the driver keeps (`driver_reserved`) and of one process's CUDA context
// (`context_reserve`). nullopt: not overridden.
struct MemoryReserve {
  std::optional<Bytes> driver_reserved;
  std::optional<Bytes> context_reserve;
  friend bool operator==(const MemoryReserve&, const MemoryReserve&) = default;
};
struct MemoryConfig {
  MemoryReserve all;                            // [memory]: every model
  std::map<std::string, MemoryReserve> models;  // [memory.models.<catalogue name>]: wins over `all`
  friend bool operator==(const MemoryConfig&, const MemoryConfig&) = default;
};

// A team ([teams.<name>], docs/teams.md): who is in it, the GPU share each queue guarantees it,
// at most how much it may hold there, and its weight when idle capacity is lent.
struct TeamConfig {
  std::string name;
  std::vector<std::string> users;   // members by user name, sorted
  std::vector<std::string> groups;  // members by Unix group ("@name" in the file), sorted; the
                                    // daemon resolves them at submit (the scheduler cannot)
  std::map<std::string, MilliGpu, std::less<>> guarantee;  // per queue; absent: 0
  std::map<std::string, MilliGpu, std::less<>> limit;      // per queue; absent: no limit
  int weight = 1;                   // share of lent capacity against other teams over quota
  friend bool operator==(const TeamConfig&, const TeamConfig&) = default;

  MilliGpu GuaranteeIn(std::string_view queue) const;
  // 0: no limit.
  MilliGpu LimitIn(std::string_view queue) const;
  bool HasUser(std::string_view user) const;
};

struct TeamsConfig {
  std::vector<TeamConfig> teams;                          // sorted by name; empty: no teams
  std::map<std::string, std::string, std::less<>> defaults;  // user -> team, for users in several
  Micros half_life = 7 * 24 * kHour;                           // usage decay for the fair-share order
  friend bool operator==(const TeamsConfig&, const TeamsConfig&) = default;

  bool enabled() const { return !teams.empty(); }
  const TeamConfig* Find(std::string_view name) const;
  // The team a job of `user` runs in when it names none: the user's entry in `defaults`, else
  // the first team (by name) that lists the user. nullptr: none lists the user (members by
  // group are resolved by the daemon, which then names the team).
  const TeamConfig* DefaultFor(std::string_view user) const;
};

struct Config {
  std::vector<QueueConfig> queues;       // sorted by name
  std::string default_queue = "interactive";
  std::string admin_group = "gpuslice-admin";
  // The file named admin_group (serve then requires the group to exist; the built-in default
  // may be missing, with a warning).
  bool admin_group_from_file = false;
  MigConfig mig;
  MemoryConfig memory;
  TeamsConfig teams;
  // What the config says; where admin_group came from is not part of it (a built-in config
  // written out and read back names the group, and is the same config).
  friend bool operator==(const Config& a, const Config& b) {
    return a.queues == b.queues && a.default_queue == b.default_queue && a.admin_group == b.admin_group &&
           a.mig == b.mig && a.memory == b.memory && a.teams == b.teams;
  }

  const QueueConfig* FindQueue(std::string_view name) const;
};

// The memory set aside on a device of `model` (nullptr: unknown model, nothing set aside): what
// the driver keeps and one process's context. Each figure comes from, first to last: the
// config's entry for the model, the config's [memory], the driver's own report
// (`driver_reported`, nvmlMemory_v2.reserved; driver-reserved only), the catalogue.
struct DeviceReserve {
  Bytes driver_reserved = 0;
  Bytes context_reserve = 0;
  std::string source;  // for people: "config", "driver", "catalogue" (per figure, '/'-joined)
};
DeviceReserve MemoryReserveFor(const Config& config, const DeviceModel* model,
                               std::optional<Bytes> driver_reported);

// The built-in configuration: interactive (shared 250m, 8h, idle reclaim 30m + 10m grace, at
// most 2 GPUs and 8 jobs per user), training (whole, 1 GPU default, 7d max, idle reported),
// inference (mig, no limit, idle reported). examples/gpuslice.toml spells out the same values
// (tests/sched/config_test.cc compares them).
Config DefaultConfig();

// Parses a TOML config. `file_name` prefixes every error, e.g.
//   "gpuslice.toml: queues.interactive.time_limit = '8x': unknown unit ...".
// Unknown keys are errors. Checks cross-references (default queue exists, policy names known).
Result<Config> ParseConfig(std::string_view toml_text, std::string_view file_name);
Result<Config> LoadConfigFile(const std::string& path);

// Re-checks a Config built in code (same rules as ParseConfig).
Status ValidateConfig(const Config& config);

}  // namespace gpuslice::sched
