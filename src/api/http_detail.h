#pragma once
// Internal to the HTTP layer (http.cc: parser and shared helpers; http_server.cc; http_client.cc):
// the small pieces both ends use. Not part of the API; include only from those files.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "api/http.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::api::http_detail {

inline constexpr size_t kMaxHeaders = 100;
inline constexpr size_t kMaxChunkLine = 1024;
// After an error answer the connection is drained this long (so the client reads the answer
// instead of a reset), then closed.
inline constexpr Micros kDrainTime = kSecond;
inline constexpr size_t kReadSize = 65536;

std::int64_t NowUs();  // steady clock, µs
std::string_view Reason(int status);
// Writes all of `data` (poll for writability up to `timeout_us`); false when it could not.
bool SendAll(int fd, std::string_view data, Micros timeout_us = 30 * kSecond);
void SendNow(int fd, std::string_view data);  // best effort, never blocks
std::string Lower(std::string_view s);
std::string_view Trim(std::string_view s);
void ParseHeaders(std::string_view head, std::map<std::string, std::string>* out);
std::string Head(int status, std::string_view content_type, std::string_view extra);
// The handler's header lines plus the defaults every answer carries (see HttpResponse).
std::string ExtraHeaders(const HttpResponse& resp);
StatusCode CodeForHttp(int status);
// A complete answer with the API's JSON error body; the connection is closed after it.
std::string ErrorAnswer(int status, std::string_view message);
bool IsTokenChar(unsigned char c);
// Constant time in the token's content.
bool SameSecret(std::string_view a, std::string_view b);
// A length from a response header or chunk-size line; nullopt when it is not one.
std::optional<size_t> ParseSize(std::string_view s, int base);
void SetNonBlocking(int fd);

}  // namespace gpuslice::api::http_detail
