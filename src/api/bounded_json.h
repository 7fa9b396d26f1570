#pragma once
// JSON from bytes someone else controls (an API body, the activity body, a daemon's answer read
// by the CLI): parsed only after a linear pre-scan has checked the size and the nesting depth,
// so no value can be deep enough to exhaust the stack of a recursive walk (nlohmann's dump(),
// comparison and the destructor of older releases recurse once per level; a request nested
// 100,000 deep used to end the daemon). And what an error message may echo of such a value:
// never a nested value, never more than a bounded prefix of a scalar.
// Free functions over their arguments; thread-safe.

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gpuslice::api {

struct JsonLimits {
  std::size_t max_bytes = 4 * 1024 * 1024;  // the HTTP body cap's default
  int max_depth = 32;                       // arrays and objects inside one another
};

// The deepest nesting of arrays and objects in `text`, counted without parsing (string
// contents, escapes included, are skipped), stopping as soon as it passes `stop_above`.
int JsonDepth(std::string_view text, int stop_above);

// Parses `text` when it is at most max_bytes long and nested at most max_depth deep; else
// INVALID_ARGUMENT naming `what` and the limit (the value itself is never echoed). Invalid JSON:
// INVALID_ARGUMENT "<what>: not valid JSON (at byte N)".
Result<nlohmann::json> ParseBoundedJson(std::string_view text, std::string_view what,
                                        const JsonLimits& limits = {});

// How an error message shows a value it received: a string quoted, as its first `max_bytes`
// bytes (ShownText: invalid UTF-8 escaped, cut on a character boundary, "... (N bytes)" when
// cut); a number, bool or null as written; an array or object only by its kind and size ("an
// array of 3 elements"), never its contents.
std::string ShownJson(const nlohmann::json& v, std::size_t max_bytes = 64);
std::string ShownText(std::string_view s, std::size_t max_bytes = 64);

}  // namespace gpuslice::api
