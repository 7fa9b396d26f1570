#pragma once
// Typed records of the daemon's API answers (docs/api.md): one struct per view, with the one
// ToJson the daemon answers with and the one FromJson the CLI reads them with, so both ends
// share one schema. FromJson never throws: a missing field or one of the wrong type (a hostile
// or newer daemon) is an InvalidArgument naming the view and the field; fields it does not
// know are ignored (a newer daemon may add some). Values are passed through as they are: text
// for a terminal still goes through ForTerminal() when printed. Plain data; thread-compatible.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::api {

// A job (/v1/jobs, /v1/jobs/<id>, submit and cancel answers). Never its environment.
struct JobView {
  std::uint64_t id = 0;
  std::string user;
  std::int64_t uid = -1;
  std::int64_t gid = -1;
  std::string queue;
  std::optional<std::string> team;  // with teams: the team it runs in (absent: none)
  std::string kind;  // "" : the queue's default
  int gpus = 0;
  MilliGpu milli = 0;
  Bytes memory = 0;
  Micros time_limit_us = 0;
  std::string model;
  std::vector<std::string> argv;  // bytes (on the wire: a string, or {"b64": ...})
  std::string cwd;                // bytes
  std::string state;              // store::JobStateName
  std::string reason;
  std::string warning;
  Micros warn_deadline_us = 0;
  Micros submit_time_us = 0;
  Micros start_time_us = 0;
  Micros end_time_us = 0;
  Micros deadline_us = 0;
  std::uint64_t slice = 0;  // 0: none
  int pid = 0;
  std::string log_path;  // bytes
  std::optional<int> exit_code;
  std::optional<int> exit_signal;
  // How many times it went back to pending because nothing of it ran (its start was recorded
  // but the daemon stopped before the go-ahead); 0 when never. Preemptions are not counted.
  int requeues = 0;
  std::optional<Micros> time_left_us;          // no limit, not started, or ended: none
  std::optional<std::string> activity;         // active | idle | unmeasured
  std::optional<std::string> activity_basis;   // the signals that decided it, e.g. "sm,mem"
  nlohmann::json pending_reason;               // null, or an object with at least "text"
  // Reports of activity from outside the GPU (POST /v1/jobs/ID/activity): null, or the latest
  // one as daemon/activity.h renders it.
  nlohmann::json activity_report;
  std::optional<std::string> idle_state;         // a running job's idle state machine
  std::optional<std::string> idle_state_text;    // the same for people
  std::optional<std::string> idle_reclaim_mode;  // always | on-demand | off (its queue's)
  // What the standing warning is about: "idle" or "time-limit"; none without a warning.
  std::optional<std::string> warning_kind;
  // A running job: since when it has been idle by every counting signal (the GPU, fresh
  // activity reports); unknown when unmeasured, while active it is the last activity.
  std::optional<Micros> idle_since_us;
  // A MIG job: which instance its memory gets and why, e.g. "1g.20gb (19.62GiB) on
  // H100-80GB: the smallest instance that holds 10GiB (1g.10gb holds 9.75GiB)".
  std::optional<std::string> mig_instance;
  // Present only when set: the submit's idempotency key, and the bytes of argv not kept once the
  // job ended (store::kEndedArgvBytes are).
  std::optional<std::string> idempotency_key;
  std::optional<std::int64_t> argv_dropped_bytes;

  nlohmann::json ToJson() const;
  static Result<JobView> FromJson(const nlohmann::json& j);
};

// A slice as stored (the "slice" of /v1/jobs/<id>) and, with its figures, as listed by
// /v1/slices (the optional part is set there).
struct SliceView {
  std::uint64_t id = 0;
  std::uint64_t job = 0;
  std::string kind;  // whole | mig | mps | shared
  std::vector<int> devices;
  std::vector<std::string> uuids;
  MilliGpu milli = 0;
  Bytes memory_cap = 0;
  int mps_thread_percent = 0;
  std::string mig;
  bool active = true;
  Micros created_us = 0;
  Micros released_us = 0;
  // Running slices: what holds its memory (daemon/cap_mechanism.h names: "interposer",
  // "driver-limits", "mps-client-limit", "mig") and, for mps, whose MPS server it uses.
  std::optional<std::string> cap_mechanism;
  std::optional<std::string> mps_user;

  // /v1/slices only.
  struct Figures {
    std::optional<int> util_percent;
    std::optional<Bytes> memory_used;
    std::optional<double> idle_seconds;  // unmeasured or stopping: unknown
    std::optional<std::string> activity;
    std::optional<std::string> activity_basis;
    std::string idle_state;  // active | warned | reported | unmeasured | stopping
    std::optional<std::string> user;
    std::optional<std::string> queue;
    // What it used now, by the one definition of "used" (core/usage.h); unknown when its
    // utilisation is.
    std::optional<MilliGpu> used_milli;
    // The idle clock of its queue's policy, as the scheduler keeps it (none where the queue
    // has no idle policy or the slice is unmeasured): idle since (the latest activity of any
    // counting signal), and when the idle warning comes if nothing is used before.
    std::optional<Micros> idle_since_us;
    std::optional<Micros> idle_warning_at_us;
    std::optional<Micros> idle_reclaim_at_us;  // warned: when it is reclaimed unless used
    // What keeps it from counting as idle although its GPU is, e.g. "busy cell (jupyter
    // report)" or "notebook activity (jupyter report)"; none when nothing but the GPU does.
    std::optional<std::string> protected_by;
  };
  std::optional<Figures> figures;

  nlohmann::json ToJson() const;
  static Result<SliceView> FromJson(const nlohmann::json& j);
};

// A queue as /v1/queues lists it: its configuration and what waits and runs in it now.
struct QueueView {
  std::string name;
  std::string default_kind;
  std::vector<std::string> allowed_kinds;
  int priority = 0;
  Micros time_limit_us = 0;    // 0: none
  Micros max_duration_us = 0;  // 0: none
  Micros reserve_after_us = 0;
  bool idle_reclaim = false;
  Micros idle_window_us = 0;
  Micros idle_grace_us = 0;
  std::string idle_reclaim_mode;          // always | on-demand | off
  std::vector<std::string> idle_signals;  // e.g. "sm", "memory", "processes", "jupyter"
  int pending = 0;
  int running = 0;
  Micros oldest_wait_us = 0;
  // Per-user caps on running work in this queue (0: none).
  int user_max_jobs = 0;
  MilliGpu user_max_milli = 0;

  nlohmann::json ToJson() const;
  static Result<QueueView> FromJson(const nlohmann::json& j);
};

// A device as /v1/devices lists it, with its last sample (unknown: null, never 0).
struct DeviceView {
  std::uint32_t index = 0;
  std::string uuid;
  std::string model;
  Bytes memory = 0;
  std::string mode;  // sched::DeviceModeName
  bool draining = false;
  MilliGpu used_milli = 0;  // shared / mps / whole slices' share (a MIG device: 0)
  // What its slices hold, whatever the mode (MIG: the used instances' compute shares).
  MilliGpu held_milli = 0;
  std::optional<std::uint64_t> reserved_for;  // the waiting job it is kept for
  Bytes used_memory = 0;
  int clients = 0;
  std::vector<std::uint64_t> slices;
  struct MigPart {
    int profile = 0;
    int start = 0;
    std::string name;        // e.g. "1g.10gb" (empty: profile not in the catalogue)
    Bytes memory = 0;        // the instance's memory
    MilliGpu milli = 0;      // its compute share of the device
    std::uint64_t slice = 0; // the slice in it; 0: free
  };
  std::vector<MigPart> mig_layout;
  std::optional<double> util_percent;
  std::optional<Bytes> memory_used;
  // Set aside before shares are cut: kept by the driver; one process's CUDA context.
  std::optional<Bytes> reserved_memory;
  std::optional<Bytes> context_reserve;
  // What holds shared / mps slices' memory here (daemon/cap_mechanism.h names).
  std::optional<std::string> cap_shared;
  std::optional<std::string> cap_mps;
  // The user whose MPS server the device runs (mode mps): one user per GPU at a time.
  std::optional<std::string> mps_user;
  // An admin's orders (gpuslice drain / mig): drained with this reason (nullopt: not drained),
  // and who decides its MIG mode ("auto": the planner, "on", "off": an admin).
  std::optional<std::string> drained;
  std::string mig_admin = "auto";
  bool mig_capable = false;  // its model has MIG (gpuslice mig applies)

  nlohmann::json ToJson() const;
  static Result<DeviceView> FromJson(const nlohmann::json& j);
};

// An event as /v1/events lists it.
struct EventView {
  std::int64_t seq = 0;
  Micros time_us = 0;
  std::uint64_t job = 0;  // 0: not about one job
  std::string type;
  std::string message;

  nlohmann::json ToJson() const;
  static Result<EventView> FromJson(const nlohmann::json& j);
};

// `what` holds an array of views under `key` (e.g. {"jobs": [...]}): each read with FromJson,
// the first error naming its position.
Result<std::vector<JobView>> JobsFromJson(const nlohmann::json& answer, const char* key = "jobs");
Result<std::vector<SliceView>> SlicesFromJson(const nlohmann::json& answer, const char* key = "slices");
Result<std::vector<QueueView>> QueuesFromJson(const nlohmann::json& answer, const char* key = "queues");
Result<std::vector<DeviceView>> DevicesFromJson(const nlohmann::json& answer, const char* key = "devices");
Result<std::vector<EventView>> EventsFromJson(const nlohmann::json& answer, const char* key = "events");

}  // namespace gpuslice::api
