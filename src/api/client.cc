#include "api/client.h"

#include <cstdlib>

#include "api/protocol.h"

namespace gpuslice::api {

std::string DefaultSocket() {
  const char* env = std::getenv("GPUSLICE_SOCKET");
  return env && *env ? env : "/run/gpuslice/gpuslice.sock";
}

Result<nlohmann::json> ApiClient::Decode(const Result<ClientResponse>& r) {
  if (!r.ok()) return r.status();
  if (r->status >= 300) return StatusFromResponse(r->status, r->body);
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return Internal("daemon answered with invalid JSON");
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
