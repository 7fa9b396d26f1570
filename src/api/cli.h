#pragma once
// The client subcommands of the gpuslice CLI (submit, ps, show, cancel, logs, devices,
// queues, top). apps/gpuslice/cmd_client.cc only parses flags and calls these. Each prints
// its output (a readable table, or JSON with --json) and returns the Status that decides
// the exit code. Not thread-safe (writes to stdout).
// Safety of what reaches the terminal: every value that came from the daemon or a user
// (argv, cwd, names, reasons, messages) goes through ForTerminal() exactly once, in the
// printing helpers of cli.cc (PrintTable, the key/value lines, Line()), so no submitted text
// can move the cursor, recolour the screen or forge a row. --json output is always valid
// JSON: bytes that are not UTF-8 travel as {"b64": ...} (store::BytesToJson).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/client.h"
#include "core/status.h"

namespace gpuslice::api {

struct ClientFlags {
  std::string socket;      // "" : DefaultSocket(); "tcp://host:port" for TCP
  std::string token_file;  // TCP bearer token
  bool json = false;
};

// A client for the flags' endpoint (reads the token file).
Result<ApiClient> Connect(const ClientFlags& c);

struct SubmitFlags {
  std::string queue;
  std::optional<int> gpus;
  std::string fraction;
  std::string mem;
  std::string time;
  std::string kind;
  std::string model;
  std::string team;  // "": the user's default team (where the site has teams)
  // "" : a new random key. Sent with the request; a retry after a lost answer reuses it, so the
  // daemon never makes the job twice (docs/api.md).
  std::string idempotency_key;
  std::vector<std::string> command;
};

// After a lost connection the submit is retried with its key (about 9 s in all); if no answer
// comes, Unavailable saying the job may exist and how to check (`ps --key`).
Status Submit(const ClientFlags& c, const SubmitFlags& s);
// `key`: only the job submitted with that idempotency key.
Status Ps(const ClientFlags& c, bool all, const std::string& user, const std::string& state,
          const std::string& key = "");
Status Show(const ClientFlags& c, std::uint64_t id);
// Cancels each; the first error decides the status. With --json one document on stdout holds
// both: {"jobs": [...], "errors": [{"id": N, "error": {"code", "message"}}]}.
Status CancelJobs(const ClientFlags& c, const std::vector<std::uint64_t>& ids);
Status Logs(const ClientFlags& c, std::uint64_t id, bool follow);
// `gpuslice activity JOB`: reports the job's session activity (POST /v1/jobs/ID/activity).
struct ActivityFlags {
  bool busy = false;                // --busy (default: not busy, --idle)
  std::string source = "jupyter";   // --source
  std::int64_t last_activity_us = -1;  // --last-activity-us; -1: now (this machine's clock)
};
Status ReportActivity(const ClientFlags& c, std::uint64_t id, const ActivityFlags& a);
Status Devices(const ClientFlags& c);
Status Queues(const ClientFlags& c);
// gpuslice teams [--json]: GET /v1/teams as a table (cli_teams.cc).
Status Teams(const ClientFlags& c);
// `interval` as text ("1", "500ms", "2s"): 100ms .. 1h.
Status Top(const ClientFlags& c, bool once, const std::string& interval);

// Checks the flags of a submit before anything is sent (also used by `submit --slurm`): every
// text is UTF-8, and --fraction, --mem, --time, --gpus are within their bounds. Errors name the
// flag and the (escaped) value.
Status CheckSubmitFlags(const SubmitFlags& s);

// Safe text for stderr: ForTerminal of an error message.
std::string ErrorForTerminal(const Status& st);

}  // namespace gpuslice::api
