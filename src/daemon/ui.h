#pragma once
// The web dashboard behind `gpuslice serve` (docs/ui.md): the page's files, compiled into the
// binary (ui/, embedded by cmake/embed_assets.cmake), served under /ui with a strict
// Content-Security-Policy; and the one API view only the page needs, the devices' recent
// utilisation in fixed buckets (GET /v1/devices/history). The page reads the ordinary JSON
// views and cancels through the ordinary API, so it has no authority of its own.
// Pure functions over their arguments; thread-safe.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agent/series.h"
#include "api/http.h"
#include "daemon/daemon.h"

namespace gpuslice::daemon {

// The embedded files by name ("index.html", "app.js", ...). Generated at build time.
const std::map<std::string, std::string_view>& UiAssets();

// "/ui", "/ui/" and "/ui/<file>": the page, served to anyone without a token (it holds no
// data; the JSON it reads needs what the API needs).
bool IsUiPath(std::string_view path);
api::HttpResponse ServeUi(const api::HttpRequest& req);

// A state-changing request a browser sent from another site (its Origin is not this host):
// refused, so a page elsewhere cannot cancel jobs through a user's ssh tunnel to the Unix
// socket, whose peer credentials would otherwise vouch for it. No Origin (the CLI, curl):
// allowed.
Status CheckSameOrigin(const api::HttpRequest& req);

// A request a browser sent on the Unix socket (it carries Sec-Fetch-Site/-Mode, Origin or
// Referer) whose Host is not a loopback name (localhost, *.localhost, 127.0.0.0/8, [::1], any
// port): refused. Through an ssh tunnel to the socket, a page of another site
// that re-points its own name at 127.0.0.1 (DNS rebinding) is same-origin with itself, so
// CheckSameOrigin passes it; its Host still names the other site. Non-browser clients (curl,
// the CLI, scripts; no such header) may name any host. TCP needs a bearer token, which such a
// page does not have, so it is not checked there.
Status CheckLoopbackHost(const api::HttpRequest& req);

// GET /v1/devices/history?minutes=M&step=S: for each device in `indices`, the mean SM and
// memory-traffic utilisation (percent) and the mean memory used (bytes) per bucket of S
// seconds over the last M minutes, oldest first; null where nothing was measured (a gap,
// never 0). Buckets are aligned to multiples of S since the epoch, so two polls agree; the
// last one is still filling. minutes: 1..60 (default 60); step: 1..3600 s (default
// minutes*60/120, at least 1), at most 3600 buckets.
Result<Json> DeviceHistoryJson(const std::map<std::string, std::string>& query,
                               const std::map<std::uint32_t, std::vector<agent::SeriesPoint>>& series,
                               const std::vector<std::uint32_t>& indices, Micros now, bool simulated);

}  // namespace gpuslice::daemon
