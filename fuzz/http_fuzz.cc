// Fuzzes the daemon's HTTP request-head parser (api::ParseRequestHead), the first code every
// local user's bytes reach. The input is what HttpServer::Serve hands it: the bytes before the
// first "\r\n\r\n", at most 64 KiB. Production catches nothing around it.
#include "api/http.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  std::string_view head = fuzz::AsText(data, size);
  if (std::size_t end = head.find("\r\n\r\n"); end != std::string_view::npos) head = head.substr(0, end);
  if (head.size() > 64 * 1024) return 0;
  auto req = api::ParseRequestHead(head);
  if (!req.ok()) {
    fuzz::TouchError(req.status());
    return 0;
  }
  fuzz::Check(req->path.size() <= head.size(), "path longer than the head");
  for (const auto& [name, value] : req->headers) {
    for (char c : name) fuzz::Check(!(c >= 'A' && c <= 'Z'), "header name not lower-case");
    (void)value;
  }
  // Round trip of the decoder the parser uses.
  fuzz::Check(api::UrlDecode(api::UrlEncode(req->path)) == req->path, "UrlDecode(UrlEncode(p)) != p");
  return 0;
}
