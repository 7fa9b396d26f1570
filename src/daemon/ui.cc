#include "daemon/ui.h"

#include <charconv>

#include <fmt/format.h>

#include "api/bounded_json.h"
#include "api/protocol.h"
#include "core/text.h"

namespace gpuslice::daemon {
namespace {

// Scripts, styles and fetches from this origin only; no inline script or style, no plugins,
// no framing (clickjacking a Cancel button), no form posts elsewhere.
constexpr const char* kCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string_view ContentType(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

api::HttpResponse Plain(int status, std::string text) {
  api::HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(text);
  r.headers = {{"Content-Security-Policy", kCsp}};
  return r;
}

Result<std::int64_t> Query(const std::map<std::string, std::string>& q, const char* name,
                           std::int64_t dflt, std::int64_t lo, std::int64_t hi) {
  auto it = q.find(name);
  if (it == q.end() || it->second.empty()) return dflt;
  std::int64_t v = 0;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) {
    return InvalidArgument(fmt::format("query '{}': value '{}' is not an integer in {}..{}", name,
                                       EscapeInvalidUtf8(s), lo, hi));
  }
  return v;
}

Json ToJson(const std::vector<std::optional<double>>& v) {
  Json a = Json::array();
  for (const auto& x : v) a.push_back(x ? Json(*x) : Json());
  return a;
}

}  // namespace

bool IsUiPath(std::string_view path) { return path == "/ui" || path.starts_with("/ui/"); }

api::HttpResponse ServeUi(const api::HttpRequest& req) {
  if (req.method != "GET") {
    return Plain(405, fmt::format("method {} is not allowed on {}\n", EscapeInvalidUtf8(req.method),
                                  EscapeInvalidUtf8(req.path)));
  }
  std::string name = req.path == "/ui" || req.path == "/ui/" ? "index.html" : req.path.substr(4);
  const auto& assets = UiAssets();
  auto it = assets.find(name);  // a fixed table: no path is ever opened, so no traversal
  if (it == assets.end()) {
    return Plain(404, fmt::format("{}: no such file of the web page\n", EscapeInvalidUtf8(req.path)));
  }
  api::HttpResponse r;
  r.content_type = std::string(ContentType(name));
  r.body = std::string(it->second);
  // The page changes with the binary; no-cache makes the browser ask again after an upgrade.
  r.headers = {{"Content-Security-Policy", kCsp},
               {"Cache-Control", "no-cache"},
               {"Referrer-Policy", "no-referrer"},
               {"X-Frame-Options", "DENY"}};
  return r;
}

Status CheckSameOrigin(const api::HttpRequest& req) {
  auto o = req.headers.find("origin");
  if (o == req.headers.end()) return Status::Ok();
  auto h = req.headers.find("host");
  const std::string host = h == req.headers.end() ? "" : h->second;
  for (const char* scheme : {"http://", "https://"}) {
    if (!host.empty() && o->second == scheme + host) return Status::Ok();
  }
  return PermissionDenied(fmt::format(
      "origin '{}' is not this daemon's ('{}'): {} {} from another site's page is refused",
      EscapeInvalidUtf8(o->second), EscapeInvalidUtf8(host), EscapeInvalidUtf8(req.method),
      EscapeInvalidUtf8(req.path)));
}

namespace {
// The host part of a Host header value, lower-cased, without the port ("[::1]:8080" -> "[::1]").
std::string HostName(std::string_view v) {
  std::string h;
  if (!v.empty() && v.front() == '[') {
    h = v.substr(0, v.find(']') == std::string_view::npos ? v.size() : v.find(']') + 1);
  } else {
    h = v.substr(0, v.find(':'));
  }
  for (char& c : h) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return h;
}

bool IsLoopbackIpv4(std::string_view h) {
  int parts = 0;
  for (std::size_t start = 0;;) {
    const std::size_t dot = h.find('.', start);
    const std::string_view part = h.substr(start, dot == std::string_view::npos ? h.npos : dot - start);
    int value = -1;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || part.size() > 3 || ec != std::errc() || end != part.data() + part.size() || value > 255 ||
        (parts == 0 && value != 127) || ++parts > 4) {
      return false;
    }
    if (dot == std::string_view::npos) return parts == 4;
    start = dot + 1;
  }
}
}  // namespace

Status CheckHost(const api::HttpRequest& req, const std::vector<std::string>& tcp_names) {
  auto it = req.headers.find("host");
  if (it == req.headers.end()) return Status::Ok();
  const std::string h = HostName(it->second);
  const bool local_suffix = h.size() > 10 && h.ends_with(".localhost");
  if (h == "localhost" || local_suffix || h == "[::1]" || IsLoopbackIpv4(h)) return Status::Ok();
  if (!req.peer.unix_socket) {
    for (const std::string& name : tcp_names) {
      if (!name.empty() && h == HostName(name)) return Status::Ok();
    }
  }
  return PermissionDenied(fmt::format(
      "host '{}' is not a name of this listener: {} {} for another name is refused (a page of another site "
      "must not reach the API through a tunnel or a forwarded port); use http://localhost:PORT{}",
      api::ShownText(it->second), api::ShownText(req.method), api::ShownText(req.path),
      req.peer.unix_socket ? "" : ", the address the daemon listens on, or a name given with serve --allowed-host"));
}

Result<Json> DeviceHistoryJson(const std::map<std::string, std::string>& query,
                               const std::map<std::uint32_t, std::vector<agent::SeriesPoint>>& series,
                               const std::vector<std::uint32_t>& indices, Micros now, bool simulated) {
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t minutes, Query(query, "minutes", 60, 1, 60));
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t step_s,
                            Query(query, "step", std::max<std::int64_t>(1, minutes * 60 / 120), 1, 3600));
  const std::int64_t n = (minutes * 60 + step_s - 1) / step_s;
  const Micros step = step_s * kSecond;
  const Micros end = (now / step + 1) * step;  // the end of the bucket now falls in
  const Micros start = end - n * step;
  static const std::vector<agent::SeriesPoint> kNone;
  Json devs = Json::array();
  for (std::uint32_t idx : indices) {
    auto it = series.find(idx);
    const auto& pts = it == series.end() ? kNone : it->second;
    auto mean = [&](auto field) { return ToJson(agent::BucketMeans(pts, start, step, static_cast<size_t>(n), field)); };
    devs.push_back({{"index", idx},
                    {"sm_util_percent", mean([](const agent::SeriesPoint& p) -> std::optional<double> {
                       if (!p.sm_util) return std::nullopt;
                       return *p.sm_util / 10.0;
                     })},
                    {"mem_util_percent", mean([](const agent::SeriesPoint& p) -> std::optional<double> {
                       if (!p.mem_util) return std::nullopt;
                       return *p.mem_util / 10.0;
                     })},
                    {"memory_used", mean([](const agent::SeriesPoint& p) -> std::optional<double> {
                       if (!p.memory_used) return std::nullopt;
                       return static_cast<double>(*p.memory_used);
                     })}});
  }
  return Json{{"now_us", now}, {"start_us", start}, {"step_s", step_s}, {"minutes", minutes},
              {"buckets", n}, {"devices", devs}, {"simulated", simulated}};
}

}  // namespace gpuslice::daemon
