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

// Every request, of every method and from any client: its Host (port ignored, any case) must be
// one of the listener's own names, else 403. On the Unix socket (reached directly or through
// an ssh tunnel's local port) those are the loopback names: localhost, *.localhost,
// 127.0.0.0/8, [::1]; on TCP also `tcp_names` (the address it is bound to, this machine's
// hostname, `serve --allowed-host`). A page of another site that re-points its own name at the
// tunnel's or the listener's address (DNS rebinding) is same-origin with itself, so
// CheckSameOrigin passes it, and a same-origin GET carries neither Origin nor (over plain HTTP)
// Sec-Fetch-*: its Host, which still names that site, is what gives it away. A request without
// Host (HTTP/1.0 tools) cannot come from a browser and is allowed.
Status CheckHost(const api::HttpRequest& req, const std::vector<std::string>& tcp_names);

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
