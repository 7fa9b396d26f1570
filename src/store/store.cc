#include "store/store.h"

#include <array>
#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "store/codec.h"

#include "core/text.h"

namespace gpuslice::store {
namespace {
constexpr std::array<std::pair<JobState, std::string_view>, 11> kStateNames{{
    {JobState::kPending, "pending"},
    {JobState::kStarting, "starting"},
    {JobState::kRunning, "running"},
    {JobState::kStopping, "stopping"},
    {JobState::kSucceeded, "succeeded"},
    {JobState::kFailed, "failed"},
    {JobState::kCancelled, "cancelled"},
    {JobState::kTimedOut, "timed_out"},
    {JobState::kReclaimed, "reclaimed"},
    {JobState::kLost, "lost"},
    {JobState::kRejected, "rejected"},
}};
}  // namespace

std::string_view JobStateName(JobState s) {
  for (const auto& [state, name] : kStateNames) {
    if (state == s) return name;
  }
  return "unknown";
}

Result<JobState> ParseJobState(std::string_view name) {
  for (const auto& [state, n] : kStateNames) {
    if (n == name) return state;
  }
  return InvalidArgument(fmt::format("job state '{}': not one of pending, starting, running, "
                                     "stopping, succeeded, failed, cancelled, timed_out, "
                                     "reclaimed, lost, rejected", name));
}

bool IsTerminal(JobState s) {
  switch (s) {
    case JobState::kPending:
    case JobState::kStarting:
    case JobState::kRunning:
    case JobState::kStopping:
      return false;
    default:
      return true;
  }
}

JobRecord PrivateCopy(const JobRecord& j) {
  JobRecord out = j;
  if (!IsTerminal(j.state)) return out;
  out.env.clear();
  out.env.shrink_to_fit();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < out.argv.size(); ++i) {
    if (kept + out.argv[i].size() <= kEndedArgvBytes) {
      kept += out.argv[i].size();
      continue;
    }
    std::int64_t dropped = 0;
    for (std::size_t k = i; k < out.argv.size(); ++k) dropped += static_cast<std::int64_t>(out.argv[k].size());
    // The element that passes the cap keeps its head; the rest go.
    std::size_t room = kEndedArgvBytes - kept;
    // Do not cut a UTF-8 sequence in two (the view would have to carry it as bytes).
    while (room > 0 && room < out.argv[i].size() && (static_cast<unsigned char>(out.argv[i][room]) & 0xC0) == 0x80) {
      --room;
    }
    out.argv[i].resize(room);
    dropped -= static_cast<std::int64_t>(room);
    out.argv.resize(room > 0 ? i + 1 : i);
    out.argv.shrink_to_fit();
    out.argv_dropped += dropped;
    break;
  }
  return out;
}

nlohmann::json BytesToJson(std::string_view bytes) {
  if (IsValidUtf8(bytes)) return std::string(bytes);
  return {{"b64", Base64Encode(bytes)}};
}

Result<std::string> BytesFromJson(const nlohmann::json& j, std::string_view what) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.size() == 1 && j.contains("b64") && j["b64"].is_string()) {
    std::string out;
    if (Base64Decode(j["b64"].get_ref<const std::string&>(), &out)) return out;
    return InvalidArgument(fmt::format("{}: 'b64' is not valid base64", what));
  }
  return InvalidArgument(fmt::format("{}: expected a string or {{\"b64\": \"...\"}}", what));
}

namespace {
nlohmann::json BytesListToJson(const std::vector<std::string>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const std::string& s : v) a.push_back(BytesToJson(s));
  return a;
}
nlohmann::json EnvToJson(const std::vector<std::pair<std::string, std::string>>& env) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [k, v] : env) a.push_back(nlohmann::json::array({BytesToJson(k), BytesToJson(v)}));
  return a;
}
// Throws nlohmann::json::exception on a malformed value, like the .get<>() calls around it.
std::string DecodeBytes(const nlohmann::json& j, const char* what) {
  auto r = BytesFromJson(j, what);
  if (!r.ok()) throw nlohmann::json::other_error::create(501, r.status().message(), &j);
  return *std::move(r);
}
}  // namespace

nlohmann::json JobToJson(const JobRecord& j) {
  nlohmann::json o = {
      {"id", j.id.value()},         {"user", j.user},
      {"uid", j.uid},               {"gid", j.gid},
      {"queue", j.queue},           {"kind", j.kind ? SliceKindName(*j.kind) : ""},
      {"gpus", j.gpus},             {"milli", j.milli},
      {"memory", j.memory},         {"time_limit_us", j.time_limit},
      {"model", j.model},           {"argv", BytesListToJson(j.argv)},
      {"cwd", BytesToJson(j.cwd)},  {"env", EnvToJson(j.env)},
      {"state", JobStateName(j.state)},
      // Texts the daemon composed; they may quote a user's bytes, and JSON cannot hold those.
      {"reason", EscapeInvalidUtf8(j.reason)}, {"warning", EscapeInvalidUtf8(j.warning)},
      {"warn_deadline_us", j.warn_deadline},
      {"submit_time_us", j.submit_time},
      {"start_time_us", j.start_time},
      {"end_time_us", j.end_time},  {"deadline_us", j.deadline},
      {"slice", j.slice.value()},   {"pid", j.pid},
      {"pid_start_ticks", j.pid_start_ticks},
      {"log_path", BytesToJson(j.log_path)},
      {"never_started_requeues", j.never_started_requeues},
      {"idempotency_key", j.idempotency_key},
      {"umask", j.umask},
      {"argv_dropped_bytes", j.argv_dropped},
  };
  o["exit_code"] = j.exit_code ? nlohmann::json(*j.exit_code) : nlohmann::json(nullptr);
  o["exit_signal"] = j.exit_signal ? nlohmann::json(*j.exit_signal) : nlohmann::json(nullptr);
  return o;
}

Result<JobRecord> JobFromJson(const nlohmann::json& o) {
  try {
    JobRecord j;
    j.id = JobId(o.at("id").get<std::uint64_t>());
    j.user = o.at("user").get<std::string>();
    j.uid = o.at("uid").get<std::int64_t>();
    j.gid = o.at("gid").get<std::int64_t>();
    j.queue = o.at("queue").get<std::string>();
    if (const std::string kind = o.at("kind").get<std::string>(); !kind.empty()) {
      Result<SliceKind> k = ParseSliceKind(kind);
      if (!k.ok()) return Status(StatusCode::kDataLoss, fmt::format("job record: kind: {}", k.status().message()));
      j.kind = *k;
    }
    j.gpus = o.at("gpus").get<int>();
    j.milli = o.at("milli").get<MilliGpu>();
    j.memory = o.at("memory").get<Bytes>();
    j.time_limit = o.at("time_limit_us").get<Micros>();
    j.model = o.at("model").get<std::string>();
    for (const auto& a : o.at("argv")) j.argv.push_back(DecodeBytes(a, "argv"));
    j.cwd = DecodeBytes(o.at("cwd"), "cwd");
    for (const auto& kv : o.at("env")) {
      if (!kv.is_array() || kv.size() != 2) throw nlohmann::json::other_error::create(501, "env: not [name, value]", &kv);
      j.env.emplace_back(DecodeBytes(kv[0], "env name"), DecodeBytes(kv[1], "env value"));
    }
    GPUSLICE_ASSIGN_OR_RETURN(j.state, ParseJobState(o.at("state").get<std::string>()));
    j.reason = o.at("reason").get<std::string>();
    j.warning = o.at("warning").get<std::string>();
    j.warn_deadline = o.at("warn_deadline_us").get<Micros>();
    j.submit_time = o.at("submit_time_us").get<Micros>();
    j.start_time = o.at("start_time_us").get<Micros>();
    j.end_time = o.at("end_time_us").get<Micros>();
    j.deadline = o.at("deadline_us").get<Micros>();
    j.slice = SliceId(o.at("slice").get<std::uint64_t>());
    j.pid = o.at("pid").get<int>();
    j.pid_start_ticks = o.at("pid_start_ticks").get<std::uint64_t>();
    j.log_path = DecodeBytes(o.at("log_path"), "log_path");
    if (!o.at("exit_code").is_null()) j.exit_code = o.at("exit_code").get<int>();
    if (!o.at("exit_signal").is_null()) j.exit_signal = o.at("exit_signal").get<int>();
    // Absent in records written before requeues were counted.
    j.never_started_requeues = o.value("never_started_requeues", 0);
    // Absent in records written before submit keys, umasks and the history cut.
    j.idempotency_key = o.value("idempotency_key", std::string());
    j.umask = o.value("umask", -1);
    j.argv_dropped = o.value("argv_dropped_bytes", std::int64_t{0});
    return j;
  } catch (const nlohmann::json::exception& e) {
    return Status(StatusCode::kDataLoss, fmt::format("job record: {}", e.what()));
  }
}

std::string MigText(const std::optional<MigPlacement>& mig) {
  return mig ? fmt::format("profile={} start={}", mig->profile_id, mig->start) : std::string();
}

Result<std::optional<MigPlacement>> MigFromText(std::string_view text) {
  if (text.empty()) return std::optional<MigPlacement>();
  MigPlacement p;
  int used = 0;
  const std::string t(text);
  if (std::sscanf(t.c_str(), "profile=%d start=%d%n", &p.profile_id, &p.start, &used) != 2 ||
      used != static_cast<int>(t.size()) || p.profile_id < 0 || p.start < 0)
    return Status(StatusCode::kDataLoss, fmt::format("slice record: mig = '{}' is not 'profile=<id> start=<n>'", t));
  return std::optional(p);
}

Result<SliceKind> SliceKindFromText(std::string_view text) {
  Result<SliceKind> k = ParseSliceKind(text);
  if (!k.ok()) return Status(StatusCode::kDataLoss, fmt::format("slice record: kind: {}", k.status().message()));
  return k;
}

nlohmann::json SliceToJson(const SliceRecord& s) {
  return {{"id", s.id.value()},          {"job", s.job.value()},
          {"kind", SliceKindName(s.kind)}, {"devices", s.devices},
          {"uuids", s.uuids},            {"milli", s.milli},
          {"memory_cap", s.memory_cap},  {"mps_thread_percent", s.mps_thread_percent},
          {"mig", MigText(s.mig)},       {"active", s.active},
          {"created_us", s.created},     {"released_us", s.released}};
}

Result<SliceRecord> SliceFromJson(const nlohmann::json& o) {
  try {
    SliceRecord s;
    s.id = SliceId(o.at("id").get<std::uint64_t>());
    s.job = JobId(o.at("job").get<std::uint64_t>());
    GPUSLICE_ASSIGN_OR_RETURN(s.kind, SliceKindFromText(o.at("kind").get<std::string>()));
    s.devices = o.at("devices").get<std::vector<int>>();
    s.uuids = o.at("uuids").get<std::vector<std::string>>();
    s.milli = o.at("milli").get<MilliGpu>();
    s.memory_cap = o.at("memory_cap").get<Bytes>();
    s.mps_thread_percent = o.at("mps_thread_percent").get<int>();
    GPUSLICE_ASSIGN_OR_RETURN(s.mig, MigFromText(o.at("mig").get<std::string>()));
    s.active = o.at("active").get<bool>();
    s.created = o.at("created_us").get<Micros>();
    s.released = o.at("released_us").get<Micros>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    return Status(StatusCode::kDataLoss, fmt::format("slice record: {}", e.what()));
  }
}

}  // namespace gpuslice::store
