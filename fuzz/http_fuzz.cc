// Fuzzes the daemon's HTTP request parser (api::RequestParser), the first code every local
// user's bytes reach. The input is fed as the event loop feeds it: in pieces of arbitrary size
// (the first byte of the input chooses the piece size), with the serve defaults for the head
// and body limits scaled down so the body limit is reachable. Production catches nothing
// around it.
#include <algorithm>

#include "api/http.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpuslice;
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  std::string_view input = fuzz::AsText(data + 1, size - 1);
  api::RequestParser parser(/*max_header_bytes=*/64 * 1024, /*max_body_bytes=*/16 * 1024);
  std::string buf;
  std::size_t fed = 0;
  int requests = 0;
  while (true) {
    auto state = parser.Parse(&buf);
    if (state == api::RequestParser::State::kError) {
      fuzz::Check(parser.error_status() >= 400 && parser.error_status() < 600,
                  "error status outside 4xx/5xx");
      fuzz::Check(!parser.error_message().empty(), "error without a message");
      return 0;
    }
    if (state == api::RequestParser::State::kDone) {
      const api::HttpRequest& req = parser.request();
      fuzz::Check(req.body.size() <= 16 * 1024, "body past the limit accepted");
      for (const auto& [name, value] : req.headers) {
        for (char c : name) fuzz::Check(!(c >= 'A' && c <= 'Z'), "header name not lower-case");
        (void)value;
      }
      fuzz::Check(api::UrlDecode(api::UrlEncode(req.path)) == req.path,
                  "UrlDecode(UrlEncode(p)) != p");
      parser.Reset();
      if (++requests > 64) return 0;
      continue;
    }
    if (fed == input.size()) return 0;  // needs more, and there is no more
    const std::size_t n = std::min(piece, input.size() - fed);
    buf.append(input.substr(fed, n));
    fed += n;
  }
}
