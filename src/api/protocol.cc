#include "api/protocol.h"

#include <fmt/format.h>

#include "api/bounded_json.h"
#include "core/text.h"

namespace gpuslice::api {
namespace {

using nlohmann::json;

bool AllValidUtf8(const json& j) {
  switch (j.type()) {
    case json::value_t::string:
      return IsValidUtf8(j.get_ref<const std::string&>());
    case json::value_t::object:
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!IsValidUtf8(it.key()) || !AllValidUtf8(it.value())) return false;
      }
      return true;
    case json::value_t::array:
      for (const auto& v : j) {
        if (!AllValidUtf8(v)) return false;
      }
      return true;
    default:
      return true;
  }
}

json EscapedCopy(const json& j) {
  switch (j.type()) {
    case json::value_t::string:
      return EscapeInvalidUtf8(j.get_ref<const std::string&>());
    case json::value_t::object: {
      json out = json::object();
      for (auto it = j.begin(); it != j.end(); ++it) {
        out[EscapeInvalidUtf8(it.key())] = EscapedCopy(it.value());
      }
      return out;
    }
    case json::value_t::array: {
      json out = json::array();
      for (const auto& v : j) out.push_back(EscapedCopy(v));
      return out;
    }
    default:
      return j;
  }
}

}  // namespace

std::string DumpJson(const nlohmann::json& j) noexcept {
  try {
    // The walk is cheap next to dump(); the copy is made only when something needs escaping.
    // error_handler_t::replace is the second line of defence: dump() itself cannot throw.
    if (AllValidUtf8(j)) return j.dump(-1, ' ', false, json::error_handler_t::replace);
    return EscapedCopy(j).dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (...) {
    return R"({"error":{"code":"INTERNAL","message":"the answer could not be encoded"}})";
  }
}

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
  // The body comes from whatever listens on the socket (a newer daemon, a hostile process):
  // every field is checked for its type, since json::value() throws on a mismatch.
  auto parsed = ParseBoundedJson(body, "error answer", JsonLimits{.max_bytes = body.size(), .max_depth = 64});
  if (!parsed.ok() || !parsed->is_object() || !parsed->contains("error")) {
    return Internal(fmt::format("daemon answered HTTP {}: {}", http_status, ShownText(body, 200)));
  }
  const json& j = *parsed;
  const json& e = j["error"];
  auto malformed = [&](std::string_view field, const json& v) {
    return Internal(fmt::format("daemon answered HTTP {} with a malformed error: field '{}': "
                                "expected a string, got {}",
                                http_status, field, ShownJson(v, 100)));
  };
  if (!e.is_object()) return malformed("error", e);
  std::string code = "INTERNAL", message;
  if (auto c = e.find("code"); c != e.end()) {
    if (!c->is_string()) return malformed("error.code", *c);
    code = c->get<std::string>();
  }
  if (auto m = e.find("message"); m != e.end()) {
    if (!m->is_string()) return malformed("error.message", *m);
    // Printed by the CLI: bounded whatever sent it.
    message = ShownText(m->get_ref<const std::string&>(), 4000);
  }
  // From 1: an error answer that says "OK" would make an OK status stand for a failure.
  for (int c = 1; c <= static_cast<int>(StatusCode::kDeadlineExceeded); ++c) {
    if (StatusCodeName(static_cast<StatusCode>(c)) == code) {
      return Status(static_cast<StatusCode>(c), message);
    }
  }
  if (code == "UNAUTHENTICATED") return PermissionDenied(message);
  return Internal(code + ": " + message);
}

}  // namespace gpuslice::api
