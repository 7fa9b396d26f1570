#include "daemon/routes.h"

#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "api/bounded_json.h"
#include "api/protocol.h"
#include "daemon/ui.h"

namespace gpuslice::daemon {
namespace {

api::HttpResponse JsonResponse(int status, const Json& body) {
  api::HttpResponse r;
  r.status = status;
  r.body = api::DumpJson(body);  // the one safe encoder: never throws on a stray byte
  r.body += "\n";
  return r;
}

api::HttpResponse Error(const Status& st, bool simulated) {
  Json body = api::ErrorJson(st);
  body["simulated"] = simulated;
  return JsonResponse(api::HttpStatusFor(st.code()), body);
}

api::HttpResponse FromResult(const Result<Json>& r, bool simulated, int ok_status = 200) {
  if (!r.ok()) return Error(r.status(), simulated);
  return JsonResponse(ok_status, *r);
}

// "/v1/jobs/12/cancel" -> ["v1", "jobs", "12", "cancel"]
std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

Result<JobId> ParseJobId(const std::string& text) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v == 0) {
    return InvalidArgument(fmt::format("job id '{}': expected a positive integer", text));
  }
  return JobId(v);
}

Result<std::uint32_t> ParseDeviceIndex(const std::string& text) {
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v > 1023) {
    return InvalidArgument(fmt::format("device '{}': expected a device index (0-1023)", text));
  }
  return v;
}

// An order's body: empty, or a JSON object.
Result<Json> OrderBody(const api::HttpRequest& req) {
  if (req.body.empty()) return Json::object();
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return InvalidArgument("body: expected a JSON object");
  return body;
}

Result<std::int64_t> IntQuery(const api::HttpRequest& req, const char* name, std::int64_t dflt) {
  auto it = req.query.find(name);
  if (it == req.query.end() || it->second.empty()) return dflt;
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || p != it->second.data() + it->second.size() || v < 0) {
    return InvalidArgument(fmt::format("query '{}': value '{}' is not a non-negative integer",
                                       name, it->second));
  }
  return v;
}

api::HttpResponse Logs(Daemon& d, const api::HttpRequest& req, JobId id, const Caller& caller) {
  Status auth = d.Authorize(caller, id);
  if (!auth.ok()) return Error(auth, d.simulated());
  auto path = d.LogPath(id);
  if (!path.ok()) return Error(path.status(), d.simulated());
  auto offset = IntQuery(req, "offset", 0);
  if (!offset.ok()) return Error(offset.status(), d.simulated());
  // Past the end is a client's mistake, not "from the start" (seekg past the end used to fail
  // silently and the whole log came back).
  std::error_code size_ec;
  const auto size = std::filesystem::file_size(*path, size_ec);
  const std::int64_t have = size_ec ? 0 : static_cast<std::int64_t>(size);
  if (*offset > have) {
    return Error(InvalidArgument(fmt::format("query 'offset': value '{}' is past the end of the log ({} bytes)",
                                             *offset, have)), d.simulated());
  }
  bool follow = req.query.contains("follow") && req.query.at("follow") != "0" &&
                req.query.at("follow") != "false";
  api::HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  if (!follow) {
    std::ifstream in(*path, std::ios::binary);
    if (in) {
      in.seekg(*offset);
      r.body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return r;
  }
  std::string file = *path;
  std::int64_t start = *offset;
  r.stream = [&d, id, file, start](const api::StreamWriter& write) {
    std::int64_t pos = start;
    char buf[65536];
    while (true) {
      bool ended = d.JobEnded(id);  // read before the file: no output is missed at the end
      std::ifstream in(file, std::ios::binary);
      bool wrote = false;
      if (in) {
        in.seekg(pos);
        while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
          auto n = in.gcount();
          pos += n;
          wrote = true;
          if (!write(std::string_view(buf, static_cast<size_t>(n)))) return;
        }
      }
      if (ended) return;
      if (!wrote && !write(std::string_view())) return;  // client still there?
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };
  return r;
}

}  // namespace

api::Handler MakeApiHandler(Daemon& d, std::vector<std::string> tcp_names) {
  return [&d, tcp_names = std::move(tcp_names)](const api::HttpRequest& req) -> api::HttpResponse {
    const bool sim = d.simulated();
    if (Status st = CheckHost(req, tcp_names); !st.ok()) return Error(st, sim);
    if (IsUiPath(req.path)) return ServeUi(req);  // the page itself holds no data (daemon/ui.h)
    if (req.method != "GET") {
      if (Status st = CheckSameOrigin(req); !st.ok()) return Error(st, sim);
    }
    if (!req.peer.authenticated) {
      Json body = {{"error", {{"code", "UNAUTHENTICATED"},
                              {"message", "missing or wrong bearer token (see --token-file)"}}},
                   {"simulated", sim}};
      return JsonResponse(401, body);
    }
    Caller caller{req.peer.uid, req.peer.gid};
    auto parts = Split(req.path);
    if (req.peer.read_only) {
      // A read-only TCP token (a Prometheus scraper) reads what anyone may read, nothing more:
      // no writes, and no logs (those are the owner's).
      bool logs = parts.size() == 4 && parts[0] == "v1" && parts[3] == "logs";
      if (req.method != "GET" || logs) {
        return Error(PermissionDenied(fmt::format(
                         "token '{}' is read-only: {} {} is not allowed with it", req.peer.name,
                         req.method, req.path)), sim);
      }
    }
    auto method_not_allowed = [&] {
      return Error(InvalidArgument(fmt::format("method {} is not allowed on {}", req.method,
                                               req.path)), sim);
    };
    if (req.path == "/metrics") {
      if (req.method != "GET") return method_not_allowed();
      api::HttpResponse r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = d.Metrics();
      return r;
    }
    if (parts.size() < 2 || parts[0] != "v1") {
      return Error(NotFound(fmt::format("path '{}': not an API resource (see docs/api.md)",
                                        req.path)), sim);
    }
    const std::string& res = parts[1];
    if (parts.size() == 2) {
      if (res == "jobs" && req.method == "POST") {
        auto body = api::ParseBoundedJson(req.body, "body");
        if (!body.ok()) return Error(body.status(), sim);
        auto r = d.Submit(caller, *body);
        // A retry answered with the job its key already made: 200, not 201 (nothing created).
        const bool again = r.ok() && r->value("deduplicated", false);
        return FromResult(r, sim, again ? 200 : 201);
      }
      if (req.method != "GET") return method_not_allowed();
      if (res == "jobs") {
        auto text = d.ListJobsText(req.query);
        if (!text.ok()) return Error(text.status(), sim);
        api::HttpResponse r;
        r.body = *std::move(text);
        r.body += "\n";
        return r;
      }
      if (res == "devices") return JsonResponse(200, d.Devices());
      if (res == "queues") return JsonResponse(200, d.Queues());
      if (res == "teams") return JsonResponse(200, d.Teams());
      if (res == "slices") return JsonResponse(200, d.Slices());
      if (res == "report") return FromResult(d.Report(req.query, caller), sim);  // anyone may read
      if (res == "whatif") return FromResult(d.Whatif(req.query), sim);  // anyone may read
      if (res == "health") return JsonResponse(200, Json{{"ok", true}, {"simulated", sim}});
      if (res == "whoami") return JsonResponse(200, d.Whoami(caller));
      if (res == "config") return JsonResponse(200, d.ConfigInfo());  // reload.cc
      if (res == "events") {
        auto after = IntQuery(req, "after", 0);
        auto limit = IntQuery(req, "limit", 1000);
        auto job = IntQuery(req, "job", 0);
        for (const auto* r : {&after, &limit, &job}) {
          if (!r->ok()) return Error(r->status(), sim);
        }
        return FromResult(d.Events(*after, JobId(static_cast<std::uint64_t>(*job)),
                                   static_cast<int>(std::min<std::int64_t>(*limit, 10000))),
                          sim);
      }
    } else if (res == "devices" && parts.size() == 3 && parts[2] == "history") {
      if (req.method != "GET") return method_not_allowed();
      return FromResult(d.DeviceHistory(req.query), sim);
    } else if (res == "devices" && parts.size() == 4 &&
               (parts[3] == "drain" || parts[3] == "undrain" || parts[3] == "mig")) {
      // An admin's orders (admin.cc).
      if (req.method != "POST") return method_not_allowed();
      auto index = ParseDeviceIndex(parts[2]);
      if (!index.ok()) return Error(index.status(), sim);
      auto body = OrderBody(req);
      if (!body.ok()) return Error(body.status(), sim);
      return FromResult(d.AdminDevice(caller, *index, parts[3], *body), sim);
    } else if (res == "jobs" && parts.size() == 4 &&
               (parts[3] == "hold" || parts[3] == "release" || parts[3] == "requeue")) {
      if (req.method != "POST") return method_not_allowed();
      auto id = ParseJobId(parts[2]);
      if (!id.ok()) return Error(id.status(), sim);
      auto body = OrderBody(req);
      if (!body.ok()) return Error(body.status(), sim);
      return FromResult(d.AdminJob(caller, *id, parts[3], *body), sim);
    } else if (res == "jobs" && parts.size() <= 4) {
      auto id = ParseJobId(parts[2]);
      if (!id.ok()) return Error(id.status(), sim);
      if (parts.size() == 3) {
        if (req.method != "GET") return method_not_allowed();
        return FromResult(d.GetJob(*id), sim);
      }
      if (parts[3] == "cancel") {
        if (req.method != "POST") return method_not_allowed();
        return FromResult(d.Cancel(caller, *id), sim);
      }
      if (parts[3] == "activity") {
        if (req.method != "POST") return method_not_allowed();
        auto body = api::ParseBoundedJson(req.body, "body");
        if (!body.ok()) return Error(body.status(), sim);
        return FromResult(d.ReportActivity(caller, *id, *body), sim);
      }
      if (parts[3] == "samples") {
        // Anyone may read, as with /metrics, which already shows every slice's utilisation.
        if (req.method != "GET") return method_not_allowed();
        return FromResult(d.Samples(*id), sim);
      }
      if (parts[3] == "logs") {
        if (req.method != "GET") return method_not_allowed();
        return Logs(d, req, *id, caller);
      }
    }
    return Error(NotFound(fmt::format("path '{}': not an API resource (see docs/api.md)",
                                      req.path)), sim);
  };
}

}  // namespace gpuslice::daemon
