#include "api/protocol.h"

#include <fmt/format.h>

#include "core/text.h"

namespace gpuslice::api {

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kResourceExhausted: return 409;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kUnsupported: return 501;
    default: return 500;
  }
}

nlohmann::json ErrorJson(const Status& st) {
  // Messages echo the request (a path, a query value), which may be any bytes; a non-UTF-8
  // one made dump() throw out of the request's thread and end the daemon.
  return {{"error", {{"code", std::string(StatusCodeName(st.code()))},
                     {"message", EscapeInvalidUtf8(st.message())}}}};
}

Status StatusFromResponse(int http_status, const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object()) {
    std::string code = j["error"].value("code", "INTERNAL");
    std::string message = j["error"].value("message", "");
    for (int c = 0; c <= static_cast<int>(StatusCode::kDeadlineExceeded); ++c) {
      if (StatusCodeName(static_cast<StatusCode>(c)) == code) {
        return Status(static_cast<StatusCode>(c), message);
      }
    }
    if (code == "UNAUTHENTICATED") return PermissionDenied(message);
    return Internal(code + ": " + message);
  }
  return Internal(fmt::format("daemon answered HTTP {}: {}", http_status, body.substr(0, 200)));
}

}  // namespace gpuslice::api
