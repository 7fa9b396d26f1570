#pragma once
// The TCP token file: which bearer tokens the daemon accepts on TCP and who each acts as.
// One identity per line; blank lines and '#' comments are ignored:
//
//   # NAME   UID[:GID]   TOKEN
//   alice    1000        6f1c0d...        acts as uid 1000 (gid: its passwd group, or :GID)
//   prom     read-only   a93be1...        GET of listings and /metrics; no logs, no writes
//   ops      0           77aa02...        root: only because the line says uid 0
//
// Nothing is implicitly root. A file holding just one bare token (the old format) still
// works only where that was safe: it acts as the file's owner, and is refused when the owner
// is root (it used to run every TCP client's jobs as root). The file must be a regular file,
// not readable or writable by group or others, owned by root or by the one uid its lines
// map to (whoever can edit it can become any uid it names). Tokens are 16..256 printable
// non-space ASCII characters, each used once; errors name the line, never the token.
// Free functions; thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/http.h"
#include "core/status.h"

namespace gpuslice::api {

// Opens, checks and parses the token file at `path`.
Result<std::vector<TcpIdentity>> LoadTokenFile(const std::string& path);
// The parsing half, for a file whose owner is `owner_uid`/`owner_gid`.
Result<std::vector<TcpIdentity>> ParseTokenFile(std::string_view text, const std::string& path,
                                                std::int64_t owner_uid, std::int64_t owner_gid);

}  // namespace gpuslice::api
