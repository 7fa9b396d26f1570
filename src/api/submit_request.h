#pragma once
// POST /v1/jobs as a typed record, so both ends share one schema (as views.h does for answers):
// the CLI fills a SubmitRequest and sends ToJson(); the daemon reads FromJson(), which checks
// every field's type, form and size, names the field (and, bounded, the value) in its errors and
// never throws. Text fields stay text: what they mean depends on the site (the queue exists, the
// kind is allowed there, a time within its limit, a known model, the team), which the daemon
// checks after. argv, cwd and env are bytes (a JSON string, or {"b64": ...} where not UTF-8).
// Plain data; thread-compatible.

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gpuslice::api {

// Caps on a submitted command (docs/security.md, "Input limits"). Linux execve(2) refuses a
// single string over MAX_ARG_STRLEN (128 KiB) and, with the default 8 MiB stack, more than 2 MiB
// of argv + environment; these stay below both so that an accepted job can always start.
inline constexpr std::size_t kMaxArgvCount = 4096;
inline constexpr std::size_t kMaxEnvCount = 4096;
inline constexpr std::size_t kMaxArgBytes = 128 * 1024;       // one argv element or NAME=value
inline constexpr std::size_t kMaxCommandBytes = 1024 * 1024;  // argv + env, every string with its NUL
inline constexpr std::size_t kMaxPathBytes = 4095;            // PATH_MAX less the NUL
inline constexpr std::size_t kMaxTextField = 256;             // queue, kind, fraction, mem, time, model, team
inline constexpr std::size_t kMaxIdempotencyKey = 128;

struct SubmitRequest {
  std::vector<std::string> argv;  // the command; not empty, no NUL
  std::optional<std::string> cwd;  // absolute
  std::vector<std::pair<std::string, std::string>> env;  // NAME (no '=', no NUL), value
  std::optional<std::string> queue, kind, fraction, mem, time, model, team;  // as given
  std::optional<int> gpus;                 // 1..1024
  std::optional<int> umask;                // 0..0777
  std::optional<std::string> idempotency_key;  // 1..128 of [A-Za-z0-9._:-]

  nlohmann::json ToJson() const;
  // Also reads the API's aliases: gpu (fraction), memory (mem), time_limit (time).
  static Result<SubmitRequest> FromJson(const nlohmann::json& body);
};

}  // namespace gpuslice::api
