#pragma once
// ApiClient: typed access to the daemon's HTTP/JSON API for the CLI, tests and benchmarks.
// Error responses come back as the Status the daemon reported (code + message).
// Not thread-safe (one connection); use one per thread.

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api/http.h"
#include "core/status.h"

namespace gpuslice::api {

// $GPUSLICE_SOCKET, else /run/gpuslice/gpuslice.sock.
std::string DefaultSocket();

class ApiClient {
 public:
  explicit ApiClient(std::string endpoint, std::string token = "")
      : http_(std::move(endpoint), std::move(token)) {}

  Result<nlohmann::json> Get(std::string_view target);
  Result<nlohmann::json> Post(std::string_view target, const nlohmann::json& body);
  Result<std::string> GetText(std::string_view target);
  // Streams a text resource (logs?follow=1) to `on_chunk` until it ends.
  Status Follow(std::string_view target, const std::function<bool(std::string_view)>& on_chunk);
  // Whether the last Get/Post reached the daemon's socket (see HttpClient::sent).
  bool request_sent() const { return http_.sent(); }

 private:
  Result<nlohmann::json> Decode(const Result<ClientResponse>& r);
  HttpClient http_;
};

}  // namespace gpuslice::api
