// `gpuslice submit` (cli.h): the request from the flags, the submitter's cwd, environment and
// umask, and an idempotency key, so that a submit whose answer was lost (the connection closed
// after the daemon may have stored the job) is retried without ever running the job twice, or
// ends saying how to check (exit 5).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/cli.h"
#include "api/cli_detail.h"
#include "api/submit_request.h"
#include "core/text.h"
#include "core/units.h"
#include "store/codec.h"

extern char** environ;

namespace gpuslice::api {
namespace {

using nlohmann::json;
using cli_detail::Banner;
using cli_detail::Connect;
using cli_detail::Line;
using cli_detail::PrintJson;
using cli_detail::Resources;
using cli_detail::Str;

// A flag's value must be UTF-8 text (it travels as a JSON string).
Status CheckText(std::string_view flag, const std::string& v) {
  if (IsValidUtf8(v)) return Status::Ok();
  return InvalidArgument(fmt::format("{} '{}': not valid UTF-8", flag, EscapeInvalidUtf8(v)));
}

template <typename T>
Status CheckParsed(std::string_view flag, const Result<T>& r) {
  if (r.ok()) return Status::Ok();
  return InvalidArgument(fmt::format("{}: {}", flag, r.status().message()));
}

// The submitter's working directory, any length, any bytes.
std::string CurrentDir() {
  char* p = getcwd(nullptr, 0);
  if (p == nullptr) return "";
  std::string out(p);
  std::free(p);
  return out;
}

// 128 random bits as hex, from the kernel: unique per submit, whatever the clock or the pid.
std::string NewIdempotencyKey() {
  unsigned char b[16] = {};
  std::ifstream r("/dev/urandom", std::ios::binary);
  if (!r.read(reinterpret_cast<char*>(b), sizeof(b))) {
    std::random_device rd;  // no /dev/urandom: the library's source
    for (auto& c : b) c = static_cast<unsigned char>(rd());
  }
  std::string out;
  for (unsigned char c : b) out += fmt::format("{:02x}", c);
  return out;
}

// The submitter's umask as the shell prints it ("0022"): the job's files are made as the user
// would make them, not with the daemon's 077.
int CurrentUmask() {
  const mode_t m = umask(0);
  umask(m);
  return static_cast<int>(m & 0777);
}

// Waits between tries after a lost connection: the daemon may be restarting (a restart answers
// within about a second; ~9 s in all).
constexpr std::chrono::milliseconds kRetryWaits[] = {std::chrono::milliseconds(250), std::chrono::milliseconds(750),
                                                     std::chrono::milliseconds(2000), std::chrono::milliseconds(6000)};

}  // namespace

Status CheckSubmitFlags(const SubmitFlags& s) {
  if (s.command.empty()) return InvalidArgument("command: give the program after --, e.g. -- python train.py");
  for (auto [flag, v] : {std::pair{"--queue", &s.queue}, {"--fraction", &s.fraction}, {"--mem", &s.mem},
                         {"--time", &s.time}, {"--kind", &s.kind}, {"--model", &s.model}, {"--team", &s.team},
                         {"--idempotency-key", &s.idempotency_key}}) {
    GPUSLICE_RETURN_IF_ERROR(CheckText(flag, *v));
  }
  if (s.gpus && (*s.gpus < 1 || *s.gpus > 1024)) {
    return InvalidArgument(fmt::format("--gpus {}: must be a whole number of devices 1..1024", *s.gpus));
  }
  if (!s.fraction.empty()) {
    auto m = ParseGpuAmount(s.fraction);
    GPUSLICE_RETURN_IF_ERROR(CheckParsed("--fraction", m));
    if (*m > kOneGpu) {
      return InvalidArgument(fmt::format("--fraction '{}': more than one GPU (use --gpus N for whole devices)",
                                         s.fraction));
    }
  }
  if (!s.mem.empty()) GPUSLICE_RETURN_IF_ERROR(CheckParsed("--mem", ParseJobMemory(s.mem)));
  if (!s.time.empty()) GPUSLICE_RETURN_IF_ERROR(CheckParsed("--time", ParseTimeLimit(s.time)));
  return Status::Ok();
}

Status Submit(const ClientFlags& c, const SubmitFlags& s) {
  GPUSLICE_RETURN_IF_ERROR(CheckSubmitFlags(s));
  SubmitRequest req;
  req.argv = s.command;
  auto text = [](const std::string& v) { return v.empty() ? std::nullopt : std::optional<std::string>(v); };
  req.queue = text(s.queue);
  req.gpus = s.gpus;
  req.fraction = text(s.fraction);
  req.mem = text(s.mem);
  req.time = text(s.time);
  req.kind = text(s.kind);
  req.model = text(s.model);
  req.team = text(s.team);
  if (std::string cwd = CurrentDir(); !cwd.empty()) req.cwd = cwd;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string k = kv.substr(0, eq);
    // The daemon sets these for the slice; the submitter's own values would be misleading.
    if (k == "CUDA_VISIBLE_DEVICES" || k.rfind("GPUSLICE_", 0) == 0) continue;
    req.env.emplace_back(std::move(k), kv.substr(eq + 1));
  }
  req.umask = CurrentUmask();
  const std::string key = s.idempotency_key.empty() ? NewIdempotencyKey() : s.idempotency_key;
  req.idempotency_key = key;
  const json body = req.ToJson();
  // A failure after the request went out (the connection closed before the answer) may come
  // after the daemon stored the job: retried with the same key, which the daemon answers with
  // that job instead of making a second. One that never connected changed nothing.
  Result<json> answer = Unavailable("not sent");
  bool maybe_stored = false;
  for (std::size_t attempt = 0;; ++attempt) {
    GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
    answer = client.Post("/v1/jobs", body);
    if (answer.ok() || answer.status().code() != StatusCode::kUnavailable) break;
    maybe_stored = maybe_stored || client.request_sent();
    if (!maybe_stored || attempt == std::size(kRetryWaits)) break;
    std::this_thread::sleep_for(kRetryWaits[attempt]);
  }
  if (!answer.ok() && maybe_stored && answer.status().code() == StatusCode::kUnavailable) {
    return Unavailable(fmt::format(
        "{}; the daemon may have accepted the job before the connection was lost. Check with `gpuslice ps --key "
        "{}`; to try again without ever running it twice: `gpuslice submit --idempotency-key {} ...` with the "
        "same command", answer.status().message(), key, key));
  }
  GPUSLICE_ASSIGN_OR_RETURN(json r, std::move(answer));
  if (c.json) {
    PrintJson(r);
    return Status::Ok();
  }
  const json& j = r["job"];
  Banner(r);
  Line(fmt::format("job {} submitted to queue '{}' ({}): {}", j["id"].get<std::uint64_t>(), Str(j, "queue"),
                   Resources(j), Str(j, "state")));
  if (j.value("mig_instance", json()).is_string()) Line("  MIG instance: " + Str(j, "mig_instance"));
  std::cout << fmt::format("  logs: gpuslice logs {} -f    status: gpuslice show {}\n",
                           j["id"].get<std::uint64_t>(), j["id"].get<std::uint64_t>());
  if (r.value("deduplicated", false)) {
    Line(fmt::format("  (already submitted with idempotency key {}: this is that job, not a new one)", key));
  }
  return Status::Ok();
}

}  // namespace gpuslice::api
