#pragma once
// The API's error convention, shared by the server and the client: a failed request answers
//   {"error": {"code": "INVALID_ARGUMENT", "message": "field 'fraction': value '2.5' ..."}}
// with an HTTP status derived from the code. Codes are core StatusCode names (stable) plus
// UNAUTHENTICATED (TCP without a valid token). Free functions; thread-safe.

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gpuslice::api {

int HttpStatusFor(StatusCode code);
// Every JSON body that leaves the daemon is written by this, the one place: strings and keys
// that are not valid UTF-8 (a byte echoed from a path, a query, a header) are escaped with
// core/text.h EscapeInvalidUtf8 instead of making nlohmann's dump() throw. Never throws.
std::string DumpJson(const nlohmann::json& j) noexcept;
nlohmann::json ErrorJson(const Status& st);
// Rebuilds the Status from an error response (any body that is not the convention becomes
// INTERNAL naming the HTTP status).
Status StatusFromResponse(int http_status, const std::string& body);

}  // namespace gpuslice::api
