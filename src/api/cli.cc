#include "api/cli.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/client.h"
#include "core/text.h"
#include "core/units.h"

extern char** environ;

namespace gpuslice::api {
namespace {

using nlohmann::json;

constexpr const char* kSimBanner = "SIMULATED devices (no NVIDIA driver)";

Result<ApiClient> Connect(const ClientFlags& c) {
  std::string token;
  if (!c.token_file.empty()) {
    std::ifstream in(c.token_file);
    if (!in) return InvalidArgument(fmt::format("--token-file '{}': cannot read", c.token_file));
    std::getline(in, token);
  }
  return ApiClient(c.socket.empty() ? DefaultSocket() : c.socket, token);
}

void PrintJson(const json& j) { std::cout << j.dump(2) << "\n"; }

void Banner(const json& j) {
  if (j.value("simulated", false)) std::cout << "*** " << kSimBanner << " ***\n";
}

// Left-aligned columns, widths from the content.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
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

std::string Ago(std::int64_t us) {
  if (us <= 0) return "-";
  return FormatDuration((us / kSecond) * kSecond);
}

std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Resources(const json& job) {
  std::string kind = job.value("kind", "");
  if (job.value("gpus", 0) > 0) return fmt::format("{} GPU{}", job["gpus"].get<int>(), job["gpus"].get<int>() > 1 ? "s" : "");
  if (job.value("milli", 0) > 0) return FormatMilliGpu(job["milli"].get<std::int64_t>()) + " GPU";
  return "default";
}

std::string Command(const json& job) {
  std::string out;
  for (const auto& a : job["argv"]) out += (out.empty() ? "" : " ") + a.get<std::string>();
  if (out.size() > 40) out = out.substr(0, 37) + "...";
  return out;
}

}  // namespace

Status Submit(const ClientFlags& c, const SubmitFlags& s) {
  if (s.command.empty()) return InvalidArgument("command: give the program after --, e.g. -- python train.py");
  json body = {{"argv", s.command}};
  if (!s.queue.empty()) body["queue"] = s.queue;
  if (s.gpus) body["gpus"] = *s.gpus;
  if (!s.fraction.empty()) body["fraction"] = s.fraction;
  if (!s.mem.empty()) body["mem"] = s.mem;
  if (!s.time.empty()) body["time"] = s.time;
  if (!s.kind.empty()) body["kind"] = s.kind;
  if (!s.model.empty()) body["model"] = s.model;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd))) body["cwd"] = cwd;
  json env = json::object();
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string k = kv.substr(0, eq);
    // The daemon sets these for the slice; the submitter's own values would be misleading.
    if (k == "CUDA_VISIBLE_DEVICES" || k.rfind("GPUSLICE_", 0) == 0) continue;
    env[k] = kv.substr(eq + 1);
  }
  body["env"] = env;
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Post("/v1/jobs", body));
  if (c.json) {
    PrintJson(r);
    return Status::Ok();
  }
  const json& j = r["job"];
  Banner(r);
  std::cout << fmt::format("job {} submitted to queue '{}' ({}): {}\n", j["id"].get<std::uint64_t>(),
                           j["queue"].get<std::string>(), Resources(j), j["state"].get<std::string>());
  std::cout << fmt::format("  logs: gpuslice logs {} -f    status: gpuslice show {}\n",
                           j["id"].get<std::uint64_t>(), j["id"].get<std::uint64_t>());
  return Status::Ok();
}

Status Ps(const ClientFlags& c, bool all, const std::string& user, const std::string& state) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  std::string target = "/v1/jobs?state=" + UrlEncode(state.empty() ? (all ? "" : "active") : state);
  if (!user.empty()) target += "&user=" + UrlEncode(user);
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Get(target));
  if (c.json) {
    PrintJson(r);
    return Status::Ok();
  }
  Banner(r);
  std::int64_t now = NowUs();
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> warnings;
  for (const auto& j : r["jobs"]) {
    std::int64_t start = j["start_time_us"].get<std::int64_t>();
    std::int64_t end = j["end_time_us"].get<std::int64_t>();
    std::string age = start > 0 ? Ago((end > 0 ? end : now) - start)
                                : "waiting " + Ago(now - j["submit_time_us"].get<std::int64_t>());
    rows.push_back({std::to_string(j["id"].get<std::uint64_t>()), j["user"].get<std::string>(),
                    j["queue"].get<std::string>(), j["state"].get<std::string>(), Resources(j),
                    j["slice"].get<std::uint64_t>() ? std::to_string(j["slice"].get<std::uint64_t>()) : "-",
                    age, Command(j)});
    std::string w = j.value("warning", "");
    if (!w.empty() && !j["state"].get<std::string>().empty()) {
      warnings.push_back(fmt::format("  job {}: WARNING: {}", j["id"].get<std::uint64_t>(), w));
    }
  }
  PrintTable({"ID", "USER", "QUEUE", "STATE", "ASKED", "SLICE", "TIME", "COMMAND"}, rows);
  for (const auto& w : warnings) std::cout << w << "\n";
  if (rows.empty()) std::cout << (all ? "(no jobs)\n" : "(no active jobs; --all shows ended ones)\n");
  return Status::Ok();
}

Status Show(const ClientFlags& c, std::uint64_t id) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Get(fmt::format("/v1/jobs/{}", id)));
  GPUSLICE_ASSIGN_OR_RETURN(json ev, client.Get(fmt::format("/v1/events?job={}&limit=50", id)));
  if (c.json) {
    r["events"] = ev["events"];
    PrintJson(r);
    return Status::Ok();
  }
  Banner(r);
  const json& j = r["job"];
  auto kv = [](const std::string& k, const std::string& v) {
    std::cout << fmt::format("{:<14}{}\n", k + ":", v);
  };
  kv("job", std::to_string(j["id"].get<std::uint64_t>()));
  kv("user", fmt::format("{} (uid {})", j["user"].get<std::string>(), j["uid"].get<std::int64_t>()));
  kv("queue", j["queue"].get<std::string>());
  kv("state", j["state"].get<std::string>() +
                  (j["reason"].get<std::string>().empty() ? "" : " (" + j["reason"].get<std::string>() + ")"));
  kv("asked", Resources(j) + (j["memory"].get<std::int64_t>() > 0 ? ", mem " + FormatBytes(j["memory"].get<std::int64_t>()) : "") +
                  (j["time_limit_us"].get<std::int64_t>() > 0 ? ", time " + FormatDuration(j["time_limit_us"].get<std::int64_t>()) : ""));
  kv("command", [&] {
    std::string out;
    for (const auto& a : j["argv"]) out += (out.empty() ? "" : " ") + a.get<std::string>();
    return out;
  }());
  kv("cwd", j["cwd"].get<std::string>());
  if (j["pid"].get<int>() > 0) kv("pid", std::to_string(j["pid"].get<int>()));
  if (!j["exit_code"].is_null()) kv("exit code", std::to_string(j["exit_code"].get<int>()));
  if (!j["exit_signal"].is_null()) kv("signal", std::to_string(j["exit_signal"].get<int>()));
  if (j["deadline_us"].get<std::int64_t>() > 0) {
    kv("time left", Ago(j["deadline_us"].get<std::int64_t>() - NowUs()));
  }
  if (!j["warning"].get<std::string>().empty()) kv("WARNING", j["warning"].get<std::string>());
  kv("log", j["log_path"].get<std::string>());
  if (!r["slice"].is_null()) {
    const json& s = r["slice"];
    std::string devs;
    for (const auto& u : s["uuids"]) devs += (devs.empty() ? "" : ",") + u.get<std::string>();
    kv("slice", fmt::format("{} ({}, {} GPU per device) on {}", s["id"].get<std::uint64_t>(),
                            s["kind"].get<std::string>(), FormatMilliGpu(s["milli"].get<std::int64_t>()), devs));
    if (!s["mig"].get<std::string>().empty()) kv("mig", s["mig"].get<std::string>());
    // What the last sample said and which signals decided; "unmeasured" is never reclaimed
    // for idleness (its time limit still applies).
    if (j.value("activity", json()).is_string()) {
      const std::string basis = j.value("activity_basis", json()).is_string() ? j["activity_basis"].get<std::string>() : "";
      kv("activity", ForTerminal(j["activity"].get<std::string>()) +
                         (basis.empty() ? std::string(" (no usable signal; not reclaimed for idleness)")
                                        : " (by " + ForTerminal(basis) + ")"));
    }
    if (s["memory_cap"].get<std::int64_t>() > 0) {
      std::string how = s["kind"] == "shared" ? "enforced by libgpuslice-cuda (LD_PRELOAD memory cap)"
                        : s["kind"] == "mps"  ? "enforced by MPS (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)"
                                              : "";
      kv("memory cap", FormatBytes(s["memory_cap"].get<std::int64_t>()) + (how.empty() ? "" : ", " + how));
    }
  }
  std::cout << "events:\n";
  for (const auto& e : ev["events"]) {
    std::cout << fmt::format("  {:>8}  {:<8} {}\n", Ago(NowUs() - e["time_us"].get<std::int64_t>()) + " ago",
                             e["type"].get<std::string>(), e["message"].get<std::string>());
  }
  return Status::Ok();
}

Status CancelJobs(const ClientFlags& c, const std::vector<std::uint64_t>& ids) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  Status first;
  json all = json::array();
  for (auto id : ids) {
    auto r = client.Post(fmt::format("/v1/jobs/{}/cancel", id), json::object());
    if (!r.ok()) {
      std::cerr << fmt::format("job {}: {}\n", id, r.status().ToString());
      if (first.ok()) first = r.status();
      continue;
    }
    all.push_back((*r)["job"]);
    if (!c.json) {
      std::cout << fmt::format("job {}: {}\n", id, (*r)["job"]["state"].get<std::string>());
    }
  }
  if (c.json) PrintJson(json{{"jobs", all}});
  return first;
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
  Banner(r);
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : r["devices"]) {
    std::string util = d["util_percent"].is_null() ? "n/a" : fmt::format("{:.0f}%", d["util_percent"].get<double>());
    std::string mem = d["memory_used"].is_null() ? "n/a" : FormatBytes(d["memory_used"].get<std::int64_t>());
    rows.push_back({std::to_string(d["index"].get<int>()), d["model"].get<std::string>(),
                    d["mode"].get<std::string>() + (d["draining"].get<bool>() ? " (draining)" : "") +
                        (d.value("reserved_for", json()).is_number()
                             ? fmt::format(" (kept for job {})", d["reserved_for"].get<std::uint64_t>())
                             : ""),
                    FormatMilliGpu(d["used_milli"].get<std::int64_t>()) + "/1",
                    std::to_string(d["clients"].get<int>()), util,
                    mem + "/" + FormatBytes(d["memory"].get<std::int64_t>()), d["uuid"].get<std::string>()});
  }
  PrintTable({"DEV", "MODEL", "MODE", "ALLOCATED", "SLICES", "UTIL", "MEMORY", "UUID"}, rows);
  std::cout << fmt::format("backend: {} ({})\n", r["backend"].get<std::string>(),
                           r["backend_description"].get<std::string>());
  return Status::Ok();
}

Status Queues(const ClientFlags& c) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  GPUSLICE_ASSIGN_OR_RETURN(json r, client.Get("/v1/queues"));
  if (c.json) {
    PrintJson(r);
    return Status::Ok();
  }
  Banner(r);
  std::vector<std::vector<std::string>> rows;
  for (const auto& q : r["queues"]) {
    std::string kinds;
    for (const auto& k : q["allowed_kinds"]) kinds += (kinds.empty() ? "" : ",") + k.get<std::string>();
    std::int64_t limit = q["time_limit_us"].get<std::int64_t>();
    if (limit == 0) limit = q["max_duration_us"].get<std::int64_t>();
    rows.push_back({q["name"].get<std::string>() + (q["name"] == r["default_queue"] ? " (default)" : ""),
                    q["default_kind"].get<std::string>(), kinds,
                    std::to_string(q["pending"].get<int>()), std::to_string(q["running"].get<int>()),
                    Ago(q["oldest_wait_us"].get<std::int64_t>()), limit ? FormatDuration(limit) : "none",
                    q["idle_reclaim"].get<bool>()
                        ? fmt::format("after {} + {} grace", FormatDuration(q["idle_window_us"].get<std::int64_t>()),
                                      FormatDuration(q["idle_grace_us"].get<std::int64_t>()))
                        : "no"});
  }
  PrintTable({"QUEUE", "KIND", "ALLOWED", "PENDING", "RUNNING", "OLDEST-WAIT", "LIMIT", "IDLE-RECLAIM"}, rows);
  return Status::Ok();
}

Status Top(const ClientFlags& c, bool once, double interval_s) {
  GPUSLICE_ASSIGN_OR_RETURN(auto client, Connect(c));
  while (true) {
    GPUSLICE_ASSIGN_OR_RETURN(json devs, client.Get("/v1/devices"));
    GPUSLICE_ASSIGN_OR_RETURN(json slices, client.Get("/v1/slices"));
    if (c.json) {
      PrintJson(json{{"devices", devs["devices"]}, {"slices", slices["slices"]},
                     {"simulated", devs.value("simulated", false)}});
    } else {
      if (!once) std::cout << "\033[H\033[2J";
      std::cout << "gpuslice top" << (once ? "" : fmt::format(" (every {:.1f}s, Ctrl-C to quit)", interval_s)) << "\n";
      Banner(devs);
      std::vector<std::vector<std::string>> rows;
      for (const auto& d : devs["devices"]) {
        double u = d["util_percent"].is_null() ? -1 : d["util_percent"].get<double>();
        int bars = u < 0 ? 0 : static_cast<int>(u / 5);
        rows.push_back({std::to_string(d["index"].get<int>()), d["model"].get<std::string>(),
                        d["mode"].get<std::string>(),
                        u < 0 ? "n/a" : fmt::format("{:>3.0f}% {:<20}", u, std::string(static_cast<size_t>(bars), '#')),
                        d["memory_used"].is_null() ? "n/a" : FormatBytes(d["memory_used"].get<std::int64_t>()),
                        std::to_string(d["clients"].get<int>())});
      }
      PrintTable({"DEV", "MODEL", "MODE", "UTIL", "MEM-USED", "SLICES"}, rows);
      std::cout << "\n";
      rows.clear();
      for (const auto& s : slices["slices"]) {
        std::string devices;
        for (const auto& d : s["devices"]) devices += (devices.empty() ? "" : ",") + std::to_string(d.get<int>());
        rows.push_back({std::to_string(s["id"].get<std::uint64_t>()), std::to_string(s["job"].get<std::uint64_t>()),
                        s.value("user", ""), s.value("queue", ""), s["kind"].get<std::string>(),
                        FormatMilliGpu(s["milli"].get<std::int64_t>()), devices,
                        s["util_percent"].is_null() ? "n/a" : fmt::format("{}%", s["util_percent"].get<int>()),
                        s["memory_used"].is_null() ? "n/a" : FormatBytes(s["memory_used"].get<std::int64_t>()),
                        s["idle_seconds"].is_null() ? "-" : fmt::format("{:.0f}s", s["idle_seconds"].get<double>()),
                        s.value("idle_state", ""),
                        s.value("activity", json()).is_string()
                            ? ForTerminal(s["activity"].get<std::string>()) +
                                  (s.value("activity_basis", json()).is_string() && !s["activity_basis"].get<std::string>().empty()
                                       ? " (" + ForTerminal(s["activity_basis"].get<std::string>()) + ")"
                                       : "")
                            : "-"});
      }
      PrintTable({"SLICE", "JOB", "USER", "QUEUE", "KIND", "SHARE", "DEV", "UTIL", "MEM", "IDLE", "STATE", "ACTIVITY"},
                 rows);
      if (rows.empty()) std::cout << "(no slices)\n";
    }
    std::cout << std::flush;
    if (once) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(interval_s * 1000)));
  }
}

}  // namespace gpuslice::api
