#include "api/cli.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/cli_detail.h"
#include "api/client.h"
#include "api/protocol.h"
#include "api/views.h"
#include "core/text.h"
#include "core/units.h"
#include "store/codec.h"

extern char** environ;

namespace gpuslice::api {

Result<ApiClient> Connect(const ClientFlags& c) {
  std::string token;
  if (!c.token_file.empty()) {
    std::ifstream in(c.token_file);
    if (!in) return InvalidArgument(fmt::format("--token-file '{}': cannot read", c.token_file));
    std::getline(in, token);
  }
  return ApiClient(c.socket.empty() ? DefaultSocket() : c.socket, token);
}

namespace cli_detail {

using nlohmann::json;

constexpr const char* kSimBanner = "SIMULATED devices (no NVIDIA driver)";

// Strings in a JSON value that are not valid UTF-8 escaped (\xNN), so that dump() cannot
// throw. What the daemon sends is already valid (bytes travel as {"b64": ...}); this covers
// anything the CLI puts together itself.
json ValidJson(json j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (!IsValidUtf8(s)) return EscapeInvalidUtf8(s);
  } else if (j.is_array()) {
    for (auto& e : j) e = ValidJson(std::move(e));
  } else if (j.is_object()) {
    json out = json::object();
    for (auto& [k, v] : j.items()) out[EscapeInvalidUtf8(k)] = ValidJson(v);
    return out;
  }
  return j;
}

void PrintJson(const json& j) { std::cout << ValidJson(j).dump(2) << "\n"; }

// The printing layer: every line below goes to the terminal through ForTerminal, once.
// Callers pass raw values (decoded bytes, daemon text) and never escape themselves.
void Line(std::string_view text) { std::cout << ForTerminal(text) << "\n"; }

// A text or byte-string field of a daemon answer, decoded ("" when absent or malformed: the
// CLI shows what it can rather than abort on one odd field).
std::string Str(const json& j, std::string_view key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  auto r = store::BytesFromJson(*it, key);
  return r.ok() ? *r : it->dump();
}

std::string Joined(const json& list, std::string_view sep) {
  std::string out;
  if (!list.is_array()) return out;
  for (const auto& a : list) {
    auto r = store::BytesFromJson(a, "element");
    out += (out.empty() ? "" : std::string(sep)) + (r.ok() ? *r : a.dump());
  }
  return out;
}

// Not value(): it throws on an answer that is not an object or a "simulated" that is no bool.
void Banner(const json& j) {
  auto it = j.find("simulated");
  if (it != j.end() && it->is_boolean() && it->get<bool>()) std::cout << "*** " << kSimBanner << " ***\n";
}

std::string Resources(const json& job) {
  std::string kind = job.value("kind", "");
  if (job.value("gpus", 0) > 0) return fmt::format("{} GPU{}", job["gpus"].get<int>(), job["gpus"].get<int>() > 1 ? "s" : "");
  if (job.value("milli", 0) > 0) return FormatMilliGpu(job["milli"].get<std::int64_t>()) + " GPU";
  return "default";
}

}  // namespace cli_detail

namespace {

using nlohmann::json;
using cli_detail::Banner;
using cli_detail::Connect;
using cli_detail::Joined;
using cli_detail::Line;
using cli_detail::PrintJson;
using cli_detail::Resources;
using cli_detail::Str;
using cli_detail::ValidJson;

std::string JoinedText(const std::vector<std::string>& list, std::string_view sep) {
  std::string out;
  for (const auto& a : list) out += (out.empty() ? "" : std::string(sep)) + a;
  return out;
}

}  // namespace

namespace cli_detail {
// Left-aligned columns, widths from the (made safe) content.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& raw_rows) {
  std::vector<std::vector<std::string>> rows;
  rows.reserve(raw_rows.size());
  for (const auto& r : raw_rows) {
    std::vector<std::string> safe;
    for (const auto& cell : r) safe.push_back(ForTerminal(cell));
    rows.push_back(std::move(safe));
  }
  std::vector<size_t> w(header.size());
  for (size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); ++i) {
      out += i + 1 == r.size() ? r[i] : fmt::format("{:<{}}  ", r[i], w[i]);
    }
    std::cout << out << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}
}  // namespace cli_detail

namespace {
using cli_detail::PrintTable;

std::string Ago(std::int64_t us) {
  if (us <= 0) return "-";
  return FormatDuration((us / kSecond) * kSecond);
}

std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}


// Shortened to 40 characters as shown (after ForTerminal, so an escape is never cut in two).
std::string Command(const json& job) {
  std::string out = ForTerminal(Joined(job.value("argv", json::array()), " "));
  if (out.size() > 40) {
    std::size_t cut = 37;
    // Do not split a UTF-8 sequence.
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out = out.substr(0, cut) + "...";
  }
  return out;
}

// A daemon answer that does not read as its view is the daemon's fault (hostile, broken or
// newer), not the user's: an internal error (exit 1), never a usage error (exit 2).
template <typename T>
Result<T> FromDaemon(Result<T> r) {
  if (!r.ok() && r.status().code() == StatusCode::kInvalidArgument) {
    return Status(StatusCode::kInternal, r.status().message());
  }
  return r;
}

}  // namespace

std::string ErrorForTerminal(const Status& st) { return ForTerminal(st.ToString()); }

// "pending in QUEUE: why" for a pending job whose reason the daemon gave; "" otherwise.
static std::string PendingText(const json& j) {
  auto it = j.find("pending_reason");
  if (it == j.end() || !it->is_object() || !it->contains("text") || !(*it)["text"].is_string()) return "";
  return (*it)["text"].get<std::string>();  // printed through Line(), which makes it safe
}

Status Ps(const ClientFlags& c, bool all, const std::string& user, const std::string& state,
          const std::string& key) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  std::string target = "/v1/jobs?state=" + UrlEncode(state.empty() ? (all ? "" : "active") : state);
  if (!user.empty()) target += "&user=" + UrlEncode(user);
  if (!key.empty()) target += "&key=" + UrlEncode(key);
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Get(target));
  if (c.json) {
    PrintJson(r);
    return Status::Ok();
  }
  Banner(r);
  std::int64_t now = NowUs();
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> warnings;
  // Typed first: a field missing or of the wrong type (a hostile or newer daemon) is an error
  // naming it, not an exception; the JSON helpers below then read checked fields only.
  GPUSLICE_ASSIGN_OR_RETURN(const std::vector<JobView> views, FromDaemon(JobsFromJson(r)));
  for (std::size_t i = 0; i < views.size(); ++i) {
    const json& j = r["jobs"][i];
    const JobView& v = views[i];
    std::int64_t start = v.start_time_us;
    std::int64_t end = v.end_time_us;
    const std::string& st = v.state;
    // Only a pending job is waiting; one that ended without starting (rejected, cancelled)
    // waited until it ended, and no longer ticks.
    std::string age = start > 0  ? Ago((end > 0 ? end : now) - start)
                      : end > 0  ? "-"
                                 : "waiting " + Ago(now - v.submit_time_us);
    rows.push_back({std::to_string(v.id), Str(j, "user"),
                    Str(j, "queue"), Str(j, "state"), Resources(j),
                    v.slice ? std::to_string(v.slice) : "-",
                    age, Command(j)});
    const std::string& w = v.warning;
    if (!w.empty() && !v.state.empty()) {
      warnings.push_back(fmt::format("  job {}: WARNING: {}", v.id, w));
    }
    if (st == "rejected") {
      warnings.push_back(fmt::format("  job {}: rejected: {}", v.id, v.reason));
    }
    if (const std::string why = PendingText(j); !why.empty())
      warnings.push_back(fmt::format("  job {}: {}", v.id, why));
  }
  PrintTable({"ID", "USER", "QUEUE", "STATE", "ASKED", "SLICE", "TIME", "COMMAND"}, rows);
  for (const auto& w : warnings) Line(w);
  if (rows.empty()) std::cout << (all ? "(no jobs)\n" : "(no active jobs; --all shows ended ones)\n");
  return Status::Ok();
}

Status Show(const ClientFlags& c, std::uint64_t id) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Get(fmt::format("/v1/jobs/{}", id)));
  GPUSLICE_ASSIGN_OR_RETURN(json ev, client.Get(fmt::format("/v1/events?job={}&limit=50", id)));
  if (c.json) {
    r["events"] = ev.is_object() ? ev.value("events", json()) : json();
    PrintJson(r);
    return Status::Ok();
  }
  // Typed first (see Ps): a malformed events answer is an error before anything is printed.
  GPUSLICE_ASSIGN_OR_RETURN(const std::vector<EventView> events, FromDaemon(EventsFromJson(ev)));
  Banner(r);
  const json& j = r["job"];
  // Typed first (see Ps); the JSON helpers below then read checked fields only.
  GPUSLICE_ASSIGN_OR_RETURN(const JobView job, FromDaemon(JobView::FromJson(j)));
  std::optional<SliceView> slice;
  if (!r["slice"].is_null()) {
    GPUSLICE_ASSIGN_OR_RETURN(slice, FromDaemon(SliceView::FromJson(r["slice"])));
  }
  auto kv = [](const std::string& k, const std::string& v) { Line(fmt::format("{:<14}{}", k + ":", v)); };
  kv("job", std::to_string(job.id));
  kv("user", fmt::format("{} (uid {})", Str(j, "user"), job.uid));
  kv("queue", Str(j, "queue"));
  kv("state", Str(j, "state") + (Str(j, "reason").empty() ? "" : " (" + Str(j, "reason") + ")"));
  if (const std::string why = PendingText(j); !why.empty()) {
    kv("waiting", why);
    const json& pr = j["pending_reason"];
    if (pr.value("position", json()).is_number_integer() && pr.value("queue_length", json()).is_number_integer()) {
      std::string place = fmt::format("{} of {} waiting in queue {}", pr["position"].get<std::int64_t>(),
                                      pr["queue_length"].get<std::int64_t>(), Str(j, "queue"));
      if (pr.value("ready_by_us", json()).is_number_integer()) {
        place += fmt::format("; room for it by {} at the latest (the time limits of the jobs in the way)",
                             Ago(std::max<std::int64_t>(0, pr["ready_by_us"].get<std::int64_t>() - NowUs())) + " from now");
      }
      kv("place", place);
    }
  }
  kv("asked", Resources(j) + (job.memory > 0 ? ", mem " + FormatBytes(job.memory) : "") +
                  (job.time_limit_us > 0 ? ", time " + FormatDuration(job.time_limit_us) : ""));
  if (job.mig_instance) kv("mig instance", *job.mig_instance);
  kv("command", Joined(j.value("argv", json::array()), " ") +
                    (job.argv_dropped_bytes ? fmt::format(" ... ({} more bytes not kept after the job ended)",
                                                          *job.argv_dropped_bytes)
                                            : ""));
  kv("cwd", Str(j, "cwd"));
  if (job.pid > 0) kv("pid", std::to_string(job.pid));
  if (job.exit_code) kv("exit code", std::to_string(*job.exit_code));
  if (job.exit_signal) kv("signal", std::to_string(*job.exit_signal));
  if (job.requeues > 0) {
    kv("requeued", fmt::format("{} time{} (its start was recorded but nothing of it ran; see the requeue events)",
                               job.requeues, job.requeues == 1 ? "" : "s"));
  }
  if (job.time_left_us) kv("time left", Ago(*job.time_left_us));  // running jobs only
  if (!Str(j, "warning").empty()) kv("WARNING", Str(j, "warning"));
  if (j.value("idle_reclaim_mode", json()).is_string()) {
    const std::string mode = Str(j, "idle_reclaim_mode");
    kv("idle reclaim", mode == "on-demand" ? "on demand (an idle slice past its grace runs until a waiting job "
                                             "needs the room)"
                       : mode == "always" ? "always (at the end of the grace period)"
                                          : "off");
  }
  if (j.value("idle_state_text", json()).is_string()) kv("idle state", Str(j, "idle_state_text"));
  if (const json& rep = j.value("activity_report", json()); rep.is_object()) {
    std::string what = fmt::format("{}, {}", Str(rep, "source"), rep.value("busy", false) ? "busy" : "idle");
    if (rep.value("last_activity_us", json()).is_number())
      what += ", last activity " + Ago(NowUs() - rep["last_activity_us"].get<std::int64_t>()) + " ago";
    if (rep.value("kernels", json()).is_number()) what += fmt::format(", {} kernels", rep["kernels"].get<int>());
    if (rep.value("connections", json()).is_number())
      what += fmt::format(", {} connections", rep["connections"].get<int>());
    what += ", received " + Ago(NowUs() - rep.value("received_us", std::int64_t{0})) + " ago";
    what += rep.value("counted", false) ? "" : rep.value("fresh", false) ? " (not an idle signal of the queue)" : " (stale: not counted)";
    kv("reported", what);
  }
  kv("log", Str(j, "log_path"));
  if (slice) {
    const json& s = r["slice"];
    const std::string devs = Joined(s.value("uuids", json::array()), ",");
    kv("slice", fmt::format("{} ({}, {} GPU per device) on {}", slice->id, Str(s, "kind"),
                            FormatMilliGpu(slice->milli), devs));
    if (!Str(s, "mig").empty()) kv("mig", Str(s, "mig"));
    // What the last sample said and which signals decided; "unmeasured" is never reclaimed
    // for idleness (its time limit still applies).
    if (job.activity) {
      const std::string basis = Str(j, "activity_basis");
      kv("activity", Str(j, "activity") +
                         (basis.empty() ? std::string(" (no usable signal; not reclaimed for idleness)")
                                        : " (by " + basis + ")"));
    }
    if (slice->memory_cap > 0) {
      const std::string mech = slice->cap_mechanism.value_or("");
      std::string how = mech == "driver-limits"      ? "enforced by the driver's memory limits on the job's cgroup"
                        : mech == "interposer"       ? "enforced by libgpuslice-cuda (LD_PRELOAD; docs/memcap.md "
                                                       "lists what it cannot see)"
                        : mech == "mps-client-limit" ? "enforced by MPS (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)"
                        : mech == "mig"              ? "the MIG instance's memory"
                                                     : "";
      kv("memory cap", FormatBytes(slice->memory_cap) + (how.empty() ? "" : ", " + how));
    }
    if (slice->kind == "mps") {
      kv("mps server", (slice->mps_user ? "for user " + *slice->mps_user : std::string("for this job's user")) +
                           " (one user per GPU); per-client utilisation is not measurable under MPS");
    }
  }
  std::cout << "events:\n";
  for (const EventView& e : events) {
    Line(fmt::format("  {:>8}  {:<8} {}", Ago(NowUs() - e.time_us) + " ago", e.type, e.message));
  }
  return Status::Ok();
}

Status CancelJobs(const ClientFlags& c, const std::vector<std::uint64_t>& ids) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  Status first;
  json all = json::array();
  json errors = json::array();
  for (auto id : ids) {
    auto r = client.Post(fmt::format("/v1/jobs/{}/cancel", id), json::object());
    if (!r.ok()) {
      // --json: one document on stdout holds the errors too (cmd_client prints nothing more).
      if (c.json) {
        errors.push_back({{"id", id}, {"error", ErrorJson(r.status())["error"]}});
      } else {
        std::cerr << fmt::format("job {}: {}\n", id, ErrorForTerminal(r.status()));
      }
      if (first.ok()) first = r.status();
      continue;
    }
    all.push_back((*r)["job"]);
    if (!c.json) {
      Line(fmt::format("job {}: {}", id, Str((*r)["job"], "state")));
    }
  }
  if (c.json) PrintJson(errors.empty() ? json{{"jobs", all}} : json{{"jobs", all}, {"errors", errors}});
  return first;
}

Status ReportActivity(const ClientFlags& c, std::uint64_t id, const ActivityFlags& a) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  json body = {{"source", a.source}, {"busy", a.busy},
               {"last_activity_us", a.last_activity_us >= 0 ? a.last_activity_us : NowUs()}};
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Post(fmt::format("/v1/jobs/{}/activity", id), ValidJson(body)));
  if (c.json) {
    PrintJson(r);
    return Status::Ok();
  }
  Banner(r);
  const json& j = r["job"];
  Line(fmt::format("job {}: activity reported ({}, {})", id, a.source, a.busy ? "busy" : "idle"));
  if (!Str(j, "warning").empty()) Line(fmt::format("  WARNING: {}", Str(j, "warning")));
  if (j.value("idle_state_text", json()).is_string()) Line("  idle: " + Str(j, "idle_state_text"));
  return Status::Ok();
}

Status Logs(const ClientFlags& c, std::uint64_t id, bool follow) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  std::string target = fmt::format("/v1/jobs/{}/logs{}", id, follow ? "?follow=1" : "");
  if (!follow) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string text, client.GetText(target));
    std::cout << text << std::flush;
    return Status::Ok();
  }
  return client.Follow(target, [](std::string_view chunk) {
    std::cout.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    std::cout.flush();
    return true;
  });
}

Status Devices(const ClientFlags& c) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Get("/v1/devices"));
  if (c.json) {
    PrintJson(r);
    return Status::Ok();
  }
  // Typed first (see Ps): a field missing or of the wrong type is an error naming it.
  GPUSLICE_ASSIGN_OR_RETURN(const std::vector<DeviceView> devices, FromDaemon(DevicesFromJson(r)));
  Banner(r);
  std::vector<std::vector<std::string>> rows;
  for (const DeviceView& d : devices) {
    std::string util = d.util_percent ? fmt::format("{:.0f}%", *d.util_percent) : "n/a";
    std::string mem = d.memory_used ? FormatBytes(*d.memory_used) : "n/a";
    // What holds a slice's memory here: the mode's own mechanism (MIG, MPS) or shared slices'.
    std::string cap = d.mode == "mig" ? "mig" : d.mode == "mps" ? d.cap_mps.value_or("?") : d.cap_shared.value_or("?");
    // An admin's orders (gpuslice drain / mig) next to the mode they act on.
    std::string mode = d.mode + (d.mps_user ? " (server for " + *d.mps_user + ")" : "") +
                       (d.draining ? " (draining)" : "") +
                       (d.reserved_for ? fmt::format(" (kept for job {})", *d.reserved_for) : "");
    if (d.drained) mode += d.drained->empty() ? " (drained)" : fmt::format(" (drained: {})", *d.drained);
    if (d.mig_admin != "auto") mode += fmt::format(" (MIG {} by an admin)", d.mig_admin);
    rows.push_back({std::to_string(d.index), d.model, ForTerminal(mode),
                    FormatMilliGpu(d.used_milli) + "/1", std::to_string(d.clients), util,
                    mem + "/" + FormatBytes(d.memory), cap, d.uuid});
  }
  PrintTable({"DEV", "MODEL", "MODE", "ALLOCATED", "SLICES", "UTIL", "MEMORY", "MEM-CAP", "UUID"}, rows);
  Line(fmt::format("backend: {} ({})", Str(r, "backend"), Str(r, "backend_description")));
  // MEMORY is what slices can book: the driver's reserve is set aside (and each slice books one
  // CUDA context besides what it asks).
  for (const DeviceView& d : devices) {
    if (d.reserved_memory.value_or(0) > 0 || d.context_reserve.value_or(0) > 0) {
      Line(fmt::format("GPU {}: {} kept by the driver, {} per slice for its CUDA context", d.index,
                       FormatBytes(d.reserved_memory.value_or(0)), FormatBytes(d.context_reserve.value_or(0))));
    }
  }
  if (std::any_of(devices.begin(), devices.end(), [](const DeviceView& d) { return d.mode == "mps"; })) {
    Line("mps: one user per GPU's MPS server; " + Str(r, "mps_note"));
  }
  if (!Str(r, "interposer_problem").empty()) {
    Line("shared slices with a memory cap are not started: " + Str(r, "interposer_problem"));
  }
  return Status::Ok();
}

// A queue's per-user caps: "2 GPU, 8 jobs", "4 jobs", or "no cap".
std::string PerUserCaps(const QueueView& q) {
  std::vector<std::string> caps;
  if (q.user_max_milli > 0) caps.push_back(FormatMilliGpu(q.user_max_milli) + " GPU");
  if (q.user_max_jobs > 0) caps.push_back(fmt::format("{} job{}", q.user_max_jobs, q.user_max_jobs == 1 ? "" : "s"));
  return caps.empty() ? "no cap" : JoinedText(caps, ", ");
}

Status Queues(const ClientFlags& c) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Get("/v1/queues"));
  if (c.json) {
    PrintJson(r);
    return Status::Ok();
  }
  // Typed first (see Ps): a field missing or of the wrong type is an error naming it.
  GPUSLICE_ASSIGN_OR_RETURN(const std::vector<QueueView> queues, FromDaemon(QueuesFromJson(r)));
  auto def = r.find("default_queue");
  const bool has_default = def != r.end() && def->is_string();
  Banner(r);
  std::vector<std::vector<std::string>> rows;
  for (const QueueView& q : queues) {
    Micros limit = q.time_limit_us;
    if (limit == 0) limit = q.max_duration_us;
    const bool jupyter = std::find(q.idle_signals.begin(), q.idle_signals.end(), "jupyter") != q.idle_signals.end();
    rows.push_back({q.name + (has_default && q.name == def->get_ref<const std::string&>() ? " (default)" : ""),
                    q.default_kind, JoinedText(q.allowed_kinds, ","), std::to_string(q.pending),
                    std::to_string(q.running), Ago(q.oldest_wait_us), limit ? FormatDuration(limit) : "none",
                    q.idle_reclaim ? fmt::format("after {} + {} grace{}{}", FormatDuration(q.idle_window_us),
                                                 FormatDuration(q.idle_grace_us),
                                                 q.idle_reclaim_mode == "on-demand" ? ", on demand" : "",
                                                 jupyter ? " (+jupyter)" : "")
                                   : "no",
                    PerUserCaps(q)});
  }
  PrintTable({"QUEUE", "KIND", "ALLOWED", "PENDING", "RUNNING", "OLDEST-WAIT", "LIMIT", "IDLE-RECLAIM", "PER-USER"},
             rows);
  return Status::Ok();
}

// How long a slice has been idle by every counting signal, or what keeps it in use although
// its GPU is idle ("kept: a running notebook cell").
std::string IdleText(const SliceView::Figures& f) {
  if (f.protected_by) return "kept: " + *f.protected_by;
  if (!f.idle_seconds) return "-";
  return FormatDuration(static_cast<Micros>(*f.idle_seconds) * kSecond);
}

// What the idle policy does next and when: "warn in 25m", "reclaim in 8m".
std::string IdleNext(const SliceView::Figures& f, Micros now) {
  if (f.idle_reclaim_at_us) return "reclaim in " + FormatDuration(std::max<Micros>(0, *f.idle_reclaim_at_us - now) / kSecond * kSecond);
  if (f.protected_by) return "-";
  if (f.idle_warning_at_us) return "warn in " + FormatDuration(std::max<Micros>(0, *f.idle_warning_at_us - now) / kSecond * kSecond);
  return "-";
}

Status Top(const ClientFlags& c, bool once, const std::string& interval_text) {
  // A period of 0 or less would busy-loop against the daemon; above an hour is no "top".
  auto interval = ParseDurationIn(interval_text, 100 * kMillisecond, kHour);
  if (!interval.ok()) return InvalidArgument(fmt::format("--interval: {}", interval.status().message()));
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  while (true) {
    GPUSLICE_ASSIGN_OR_RETURN(json devs, client.Get("/v1/devices"));
    GPUSLICE_ASSIGN_OR_RETURN(json slices, client.Get("/v1/slices"));
    // Typed first (see Ps), in both modes: the lists below are then known to be there.
    GPUSLICE_ASSIGN_OR_RETURN(const std::vector<DeviceView> dev_views, FromDaemon(DevicesFromJson(devs)));
    GPUSLICE_ASSIGN_OR_RETURN(const std::vector<SliceView> slice_views, FromDaemon(SlicesFromJson(slices)));
    if (c.json) {
      auto sim = devs.find("simulated");
      PrintJson(json{{"devices", devs["devices"]}, {"slices", slices["slices"]},
                     {"simulated", sim != devs.end() && sim->is_boolean() && sim->get<bool>()}});
    } else {
      if (!once) std::cout << "\033[H\033[2J";
      std::cout << "gpuslice top" << (once ? "" : fmt::format(" (every {}, Ctrl-C to quit)", FormatDuration(*interval)))
                << "\n";
      Banner(devs);
      std::vector<std::vector<std::string>> rows;
      for (const DeviceView& d : dev_views) {
        // A hostile figure (negative, NaN, huge) must not size the bar: 0..20 marks.
        const double u = d.util_percent && *d.util_percent >= 0 ? *d.util_percent : -1;
        const int bars = u < 0 ? 0 : static_cast<int>(std::min(u, 100.0) / 5);
        rows.push_back({std::to_string(d.index), d.model, d.mode,
                        u < 0 ? "n/a" : fmt::format("{:>3.0f}% {:<20}", u, std::string(static_cast<size_t>(bars), '#')),
                        d.memory_used ? FormatBytes(*d.memory_used) : "n/a", std::to_string(d.clients)});
      }
      PrintTable({"DEV", "MODEL", "MODE", "UTIL", "MEM-USED", "SLICES"}, rows);
      std::cout << "\n";
      rows.clear();
      for (const SliceView& s : slice_views) {
        std::string devices;
        for (int d : s.devices) devices += (devices.empty() ? "" : ",") + std::to_string(d);
        // A slice listed without its figures (not what /v1/slices sends): shown as unknown.
        const SliceView::Figures f = s.figures.value_or(SliceView::Figures{});
        const std::string basis = f.activity_basis.value_or("");
        rows.push_back({std::to_string(s.id), std::to_string(s.job), f.user.value_or(""), f.queue.value_or(""),
                        s.kind, FormatMilliGpu(s.milli), devices,
                        f.util_percent ? fmt::format("{}%", *f.util_percent) : "n/a",
                        f.used_milli ? FormatMilliGpu(*f.used_milli) : "n/a",
                        f.memory_used ? FormatBytes(*f.memory_used) : "n/a", IdleText(f), f.idle_state,
                        IdleNext(f, NowUs()),
                        f.activity ? *f.activity + (basis.empty() ? "" : " (" + basis + ")") : "-"});
      }
      PrintTable({"SLICE", "JOB", "USER", "QUEUE", "KIND", "SHARE", "DEV", "UTIL", "USED", "MEM", "IDLE", "STATE",
                  "NEXT", "ACTIVITY"},
                 rows);
      if (rows.empty()) std::cout << "(no slices)\n";
    }
    std::cout << std::flush;
    if (once) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::microseconds(*interval));
  }
}

}  // namespace gpuslice::api
