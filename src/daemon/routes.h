#pragma once
// The HTTP/JSON API v1 over a Daemon: routing, caller identity, error bodies, log streaming.
// See docs/api.md. The handler is thread-safe (the Daemon is).

#include <string>
#include <vector>

#include "api/http.h"
#include "daemon/daemon.h"

namespace gpuslice::daemon {

// `tcp_names`: the names a TCP request's Host may give besides the loopback ones (CheckHost in
// daemon/ui.h): the listener's address, the hostname, serve --allowed-host.
api::Handler MakeApiHandler(Daemon& daemon, std::vector<std::string> tcp_names = {});

}  // namespace gpuslice::daemon
