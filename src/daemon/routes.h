#pragma once
// The HTTP/JSON API v1 over a Daemon: routing, caller identity, error bodies, log streaming.
// See docs/api.md. The handler is thread-safe (the Daemon is).

#include "api/http.h"
#include "daemon/daemon.h"

namespace gpuslice::daemon {

api::Handler MakeApiHandler(Daemon& daemon);

}  // namespace gpuslice::daemon
