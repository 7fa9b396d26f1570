#include "api/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <optional>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "api/http_detail.h"
#include "api/protocol.h"
#include "core/text.h"

namespace gpuslice::api {
namespace http_detail {


std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string_view Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

// Sends everything or fails; a blocking or non-blocking fd, each wait for the peer to take
// more bounded by `timeout_us` (a client that stops reading cannot hold the sender).
bool SendAll(int fd, std::string_view data, Micros timeout_us) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int rc = poll(&p, 1, static_cast<int>(std::max<Micros>(1, timeout_us / 1000)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
      continue;
    }
    return false;
  }
  return true;
}

// Best effort, never waits: for short error answers on the event loop.
void SendNow(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Parses "Name: value" lines after the first line of a head (the client's, lenient).
void ParseHeaders(std::string_view head, std::map<std::string, std::string>* out) {
  size_t pos = head.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < head.size()) {
    size_t next = head.find("\r\n", pos + 2);
    std::string_view line =
        head.substr(pos + 2, (next == std::string_view::npos ? head.size() : next) - pos - 2);
    size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      (*out)[Lower(Trim(line.substr(0, colon)))] = std::string(Trim(line.substr(colon + 1)));
    }
    pos = next;
  }
}

std::string Head(int status, std::string_view content_type, std::string_view extra) {
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\n{}\r\n", status, Reason(status),
                     content_type, extra);
}

// The handler's header lines plus the defaults every answer carries (see HttpResponse).
// A name or value holding CR or LF (never expected: handlers set them) is dropped, so no
// answer can be split.
std::string ExtraHeaders(const HttpResponse& resp) {
  std::string out = "X-Content-Type-Options: nosniff\r\n";
  bool cache = false;
  for (const auto& [name, value] : resp.headers) {
    if (name.find_first_of("\r\n:") != std::string::npos ||
        value.find_first_of("\r\n") != std::string::npos) {
      continue;
    }
    if (Lower(name) == "cache-control") cache = true;
    out += fmt::format("{}: {}\r\n", name, value);
  }
  if (!cache) out += "Cache-Control: no-store\r\n";
  return out;
}

StatusCode CodeForHttp(int status) {
  switch (status) {
    case 400: case 411: case 417: case 505: return StatusCode::kInvalidArgument;
    case 408: return StatusCode::kDeadlineExceeded;
    case 413: case 431: return StatusCode::kResourceExhausted;
    case 501: return StatusCode::kUnsupported;
    case 503: return StatusCode::kUnavailable;
    default: return StatusCode::kInternal;
  }
}

// A complete answer with the API's JSON error body; the connection is closed after it.
std::string ErrorAnswer(int status, std::string_view message) {
  std::string body = DumpJson(ErrorJson(Status(CodeForHttp(status), std::string(message))));
  body += "\n";
  return Head(status, "application/json",
              fmt::format("Content-Length: {}\r\nConnection: close\r\n", body.size())) +
         body;
}

bool IsTokenChar(unsigned char c) {
  return std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

// Constant time in the token's content, so a timing probe learns nothing but its length.
bool SameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

// A length from a response header or chunk-size line (client side); nullopt when it is not
// one, so a garbled answer is an error, not an exception.
std::optional<size_t> ParseSize(std::string_view s, int base) {
  s = Trim(s.substr(0, s.find(';')));
  size_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace http_detail

using http_detail::IsTokenChar;
using http_detail::Lower;
using http_detail::Trim;
using http_detail::kMaxChunkLine;
using http_detail::kMaxHeaders;


Status HttpLimits::Validate() const {
  auto range = [](const char* name, std::int64_t v, std::int64_t lo, std::int64_t hi,
                  std::string_view shown) -> Status {
    if (v < lo || v > hi) {
      return InvalidArgument(fmt::format("{} '{}': must be {}..{}", name, shown, lo, hi));
    }
    return Status::Ok();
  };
  GPUSLICE_RETURN_IF_ERROR(range("--max-connections", max_connections, 1, 1'000'000,
                                 std::to_string(max_connections)));
  GPUSLICE_RETURN_IF_ERROR(range("--max-connections-per-user", max_connections_per_user, 1,
                                 max_connections, std::to_string(max_connections_per_user)));
  GPUSLICE_RETURN_IF_ERROR(range("--max-unauthenticated", max_unauthenticated, 1, max_connections,
                                 std::to_string(max_unauthenticated)));
  for (auto [name, v] : {std::pair{"--header-timeout", header_timeout},
                         std::pair{"--body-timeout", body_timeout},
                         std::pair{"--idle-timeout", idle_timeout},
                         std::pair{"--write-timeout", write_timeout}}) {
    GPUSLICE_RETURN_IF_ERROR(
        range(name, v, kMillisecond, 24 * 3600 * kSecond, fmt::format("{}us", v)));
  }
  GPUSLICE_RETURN_IF_ERROR(range("--max-header-bytes", static_cast<std::int64_t>(max_header_bytes),
                                 1024, 16 << 20, std::to_string(max_header_bytes)));
  GPUSLICE_RETURN_IF_ERROR(range("--max-body-bytes", static_cast<std::int64_t>(max_body_bytes),
                                 1024, 1LL << 30, std::to_string(max_body_bytes)));
  GPUSLICE_RETURN_IF_ERROR(range("--http-workers", workers, 1, 256, std::to_string(workers)));
  GPUSLICE_RETURN_IF_ERROR(range("--max-workers-per-user", max_workers_per_user, 1, workers,
                                 std::to_string(max_workers_per_user)));
  GPUSLICE_RETURN_IF_ERROR(range("--max-streams", max_streams, 1, 100'000,
                                 std::to_string(max_streams)));
  GPUSLICE_RETURN_IF_ERROR(range("--max-streams-per-user", max_streams_per_user, 1, max_streams,
                                 std::to_string(max_streams_per_user)));
  return Status::Ok();
}

std::string UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string UrlEncode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// ---- request parser -------------------------------------------------------------------------

void RequestParser::Reset() {
  phase_ = Phase::kHead;
  started_ = false;
  scanned_ = 0;
  body_len_ = 0;
  chunk_left_ = 0;
  trailer_bytes_ = 0;
  wire_body_ = 0;
  expect_continue_ = false;
  keep_alive_ = true;
  req_ = HttpRequest();
  error_status_ = 0;
  error_.clear();
}

RequestParser::State RequestParser::Fail(int status, std::string message) {
  error_status_ = status;
  error_ = std::move(message);
  return State::kError;
}

RequestParser::State RequestParser::ParseHead(std::string_view head) {
  size_t eol = head.find("\r\n");
  std::string_view first = head.substr(0, eol);
  size_t sp1 = first.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : first.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      first.find(' ', sp2 + 1) != std::string_view::npos) {
    return Fail(400, "request line: expected 'METHOD /path HTTP/1.1'");
  }
  std::string_view method = first.substr(0, sp1);
  std::string_view target = first.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = first.substr(sp2 + 1);
  if (method.empty() || method.size() > 16 ||
      !std::all_of(method.begin(), method.end(),
                   [](char c) { return IsTokenChar(static_cast<unsigned char>(c)); })) {
    return Fail(400, "request line: the method is not an HTTP token");
  }
  if (target.empty() || target.front() != '/' ||
      !std::all_of(target.begin(), target.end(), [](char c) {
        auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u != 0x7f;
      })) {
    return Fail(400, "request line: the target must be an origin-form path starting with '/'");
  }
  if (version == "HTTP/1.0") {
    keep_alive_ = false;
  } else if (version != "HTTP/1.1") {
    return Fail(505, "request line: only HTTP/1.1 and HTTP/1.0 are supported");
  }
  req_.method = std::string(method);
  size_t q = target.find('?');
  req_.path = UrlDecode(target.substr(0, q));
  if (q != std::string_view::npos) {
    std::string_view qs = target.substr(q + 1);
    while (!qs.empty()) {
      size_t amp = qs.find('&');
      std::string_view kv = qs.substr(0, amp);
      size_t eq = kv.find('=');
      req_.query[UrlDecode(kv.substr(0, eq))] =
          eq == std::string_view::npos ? "" : UrlDecode(kv.substr(eq + 1));
      if (amp == std::string_view::npos) break;
      qs.remove_prefix(amp + 1);
    }
  }

  // Headers: strict, because two parties reading one request two ways is how requests are
  // smuggled; a repeated header that must be single is an error, others are joined by ", ".
  size_t count = 0;
  size_t pos = eol;
  while (pos != std::string_view::npos && pos + 2 <= head.size()) {
    size_t next = head.find("\r\n", pos + 2);
    std::string_view line =
        head.substr(pos + 2, (next == std::string_view::npos ? head.size() : next) - pos - 2);
    pos = next;
    if (line.empty()) continue;
    if (++count > kMaxHeaders) {
      return Fail(431, fmt::format("more than {} header fields", kMaxHeaders));
    }
    if (line.front() == ' ' || line.front() == '\t') {
      return Fail(400, "header: folded (obsolete line folding) header lines are not accepted");
    }
    size_t colon = line.find(':');
    std::string_view raw_name = line.substr(0, colon);
    if (colon == std::string_view::npos || raw_name.empty() ||
        !std::all_of(raw_name.begin(), raw_name.end(),
                     [](char c) { return IsTokenChar(static_cast<unsigned char>(c)); })) {
      return Fail(400, fmt::format("header line '{}': expected 'Name: value'",
                                   line.substr(0, std::min<size_t>(line.size(), 64))));
    }
    std::string name = Lower(raw_name);
    std::string_view value = Trim(line.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(), [](char c) {
          auto u = static_cast<unsigned char>(c);
          return (u < 0x20 && u != '\t') || u == 0x7f;
        })) {
      return Fail(400, fmt::format("header '{}': control characters in the value", name));
    }
    auto [it, fresh] = req_.headers.emplace(name, std::string(value));
    if (!fresh) {
      if (name == "content-length" || name == "transfer-encoding" || name == "host" ||
          name == "authorization" || name == "expect") {
        return Fail(400, fmt::format("header '{}' given more than once", name));
      }
      it->second += ", ";
      it->second += value;
    }
  }

  auto cl = req_.headers.find("content-length");
  auto te = req_.headers.find("transfer-encoding");
  if (cl != req_.headers.end() && te != req_.headers.end()) {
    return Fail(400, "both Content-Length and Transfer-Encoding: send one");
  }
  if (te != req_.headers.end()) {
    if (Lower(te->second) != "chunked") {
      return Fail(501, fmt::format("Transfer-Encoding '{}': only 'chunked' is supported",
                                   te->second));
    }
    if (version == "HTTP/1.0") {
      return Fail(400, "Transfer-Encoding: not allowed in HTTP/1.0");
    }
    phase_ = Phase::kChunkSize;
  } else if (cl != req_.headers.end()) {
    const std::string& v = cl->second;
    if (v.empty() || v.size() > 18 ||
        !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return Fail(400, fmt::format("Content-Length '{}': expected one decimal number", v));
    }
    body_len_ = std::stoull(v);
    if (body_len_ > max_body_) {
      return Fail(413, fmt::format("body of {} bytes: more than the limit of {} bytes "
                                   "(--max-body-bytes)", body_len_, max_body_));
    }
    phase_ = Phase::kBody;
  } else {
    phase_ = Phase::kBody;  // no body
  }
  if (auto it = req_.headers.find("expect"); it != req_.headers.end()) {
    if (Lower(it->second) != "100-continue") {
      return Fail(417, fmt::format("Expect '{}': only '100-continue' is supported", it->second));
    }
    expect_continue_ = true;
  }
  if (auto it = req_.headers.find("connection"); it != req_.headers.end()) {
    std::string v = Lower(it->second);
    if (v.find("close") != std::string::npos) keep_alive_ = false;
    if (version == "HTTP/1.0" && v.find("keep-alive") != std::string::npos) keep_alive_ = true;
  }
  return State::kNeedMore;
}

RequestParser::State RequestParser::Parse(std::string* buf) {
  // Consumes through a cursor and erases once: a burst of tiny chunks costs one pass.
  size_t off = 0;
  State st = ParseFrom(*buf, &off);
  buf->erase(0, off);
  return st;
}

RequestParser::State RequestParser::ParseFrom(std::string_view all, size_t* off) {
  if (error_status_ != 0) return State::kError;
  if (!all.empty()) started_ = true;
  if (phase_ == Phase::kHead) {
    size_t from = scanned_ > 3 ? scanned_ - 3 : 0;
    size_t end = all.find("\r\n\r\n", from);
    if (end == std::string_view::npos) {
      scanned_ = all.size();
      if (all.size() > max_header_) {
        return Fail(431, fmt::format("request head over the limit of {} bytes "
                                     "(--max-header-bytes)", max_header_));
      }
      return State::kNeedMore;
    }
    if (end + 4 > max_header_) {
      return Fail(431, fmt::format("request head of {} bytes: over the limit of {} bytes "
                                   "(--max-header-bytes)", end + 4, max_header_));
    }
    State st = ParseHead(all.substr(0, end + 2));
    *off = end + 4;
    if (st == State::kError) return st;
  }
  // Chunk framing (sizes, extensions, trailers) may add to the body's bytes on the wire, but
  // not without bound.
  const size_t max_wire = 2 * max_body_ + max_header_;
  while (true) {
    std::string_view buf = all.substr(*off);
    switch (phase_) {
      case Phase::kHead:
      case Phase::kDone:
        return State::kDone;
      case Phase::kBody:
        if (buf.size() < body_len_) return State::kNeedMore;
        req_.body.assign(buf.substr(0, body_len_));
        *off += body_len_;
        phase_ = Phase::kDone;
        return State::kDone;
      case Phase::kChunkSize: {
        size_t eol = buf.find("\r\n");
        if (eol == std::string_view::npos) {
          if (buf.size() > kMaxChunkLine) return Fail(400, "chunked body: chunk size line too long");
          return State::kNeedMore;
        }
        if (eol > kMaxChunkLine) return Fail(400, "chunked body: chunk size line too long");
        std::string_view line = buf.substr(0, eol);
        std::string_view hex = Trim(line.substr(0, line.find(';')));  // extensions ignored
        if (hex.empty() || hex.size() > 15 ||
            !std::all_of(hex.begin(), hex.end(),
                         [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
          return Fail(400, fmt::format("chunked body: chunk size '{}' is not hexadecimal",
                                       line.substr(0, std::min<size_t>(line.size(), 32))));
        }
        size_t n = std::stoull(std::string(hex), nullptr, 16);
        *off += eol + 2;
        wire_body_ += eol + 2;
        if (n > max_body_ || req_.body.size() + n > max_body_ || wire_body_ > max_wire) {
          return Fail(413, fmt::format("chunked body: more than the limit of {} bytes "
                                       "(--max-body-bytes)", max_body_));
        }
        if (n == 0) {
          phase_ = Phase::kTrailer;
        } else {
          chunk_left_ = n;
          phase_ = Phase::kChunkData;
        }
        break;
      }
      case Phase::kChunkData: {
        if (buf.size() < chunk_left_ + 2) return State::kNeedMore;
        if (buf[chunk_left_] != '\r' || buf[chunk_left_ + 1] != '\n') {
          return Fail(400, "chunked body: a chunk is not followed by CRLF");
        }
        req_.body.append(buf.substr(0, chunk_left_));
        *off += chunk_left_ + 2;
        wire_body_ += 2;
        chunk_left_ = 0;
        phase_ = Phase::kChunkSize;
        break;
      }
      case Phase::kTrailer: {
        size_t eol = buf.find("\r\n");
        if (eol == std::string_view::npos) {
          if (trailer_bytes_ + buf.size() > max_header_) {
            return Fail(431, "chunked body: trailer over --max-header-bytes");
          }
          return State::kNeedMore;
        }
        trailer_bytes_ += eol + 2;
        if (trailer_bytes_ > max_header_) {
          return Fail(431, "chunked body: trailer over --max-header-bytes");
        }
        *off += eol + 2;
        if (eol == 0) {
          phase_ = Phase::kDone;
          req_.headers["content-length"] = std::to_string(req_.body.size());
          req_.headers.erase("transfer-encoding");
          return State::kDone;
        }
        break;  // a trailer field: dropped
      }
    }
  }
}

}  // namespace gpuslice::api
