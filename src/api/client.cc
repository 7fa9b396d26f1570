#include "api/client.h"

#include <cstdlib>

#include "api/bounded_json.h"
#include "api/protocol.h"

namespace gpuslice::api {
namespace {
// Answers may be large (a year of jobs is tens of MB) but are never deeply nested.
constexpr JsonLimits kAnswerLimits{.max_bytes = std::size_t{1} << 30, .max_depth = 64};
}  // namespace

std::string DefaultSocket() {
  const char* env = std::getenv("GPUSLICE_SOCKET");
  return env && *env ? env : "/run/gpuslice/gpuslice.sock";
}

Result<nlohmann::json> ApiClient::Decode(const Result<ClientResponse>& r) {
  if (!r.ok()) return r.status();
  if (r->status >= 300) return StatusFromResponse(r->status, r->body);
  // Whatever listens on the socket wrote this: bounded like any other untrusted JSON (its
  // size is already bounded by the HTTP client).
  auto j = ParseBoundedJson(r->body, "answer", kAnswerLimits);
  if (!j.ok()) return Internal("daemon answered with invalid JSON: " + j.status().message());
  return j;
}

Result<nlohmann::json> ApiClient::Get(std::string_view target) {
  return Decode(http_.Request("GET", target));
}

Result<nlohmann::json> ApiClient::Post(std::string_view target, const nlohmann::json& body) {
  return Decode(http_.Request("POST", target, body.dump()));
}

Result<std::string> ApiClient::GetText(std::string_view target) {
  auto r = http_.Request("GET", target);
  if (!r.ok()) return r.status();
  if (r->status >= 300) return StatusFromResponse(r->status, r->body);
  return r->body;
}

Status ApiClient::Follow(std::string_view target,
                         const std::function<bool(std::string_view)>& on_chunk) {
  std::string error_body;
  auto st = http_.Stream(target, on_chunk, &error_body);
  if (!st.ok()) return st.status();
  if (*st >= 300) return StatusFromResponse(*st, error_body);
  return Status::Ok();
}

}  // namespace gpuslice::api
