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

#include "api/protocol.h"
#include "core/text.h"

namespace gpuslice::api {
namespace {

constexpr size_t kMaxHeaders = 100;
constexpr size_t kMaxChunkLine = 1024;
// After an error answer the connection is drained this long (so the client reads the answer
// instead of a reset), then closed.
constexpr Micros kDrainTime = kSecond;
constexpr size_t kReadSize = 65536;

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
bool SendAll(int fd, std::string_view data, Micros timeout_us = 30 * kSecond) {
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

}  // namespace

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

// ---- server ---------------------------------------------------------------------------------

struct HttpServer::Conn {
  int fd = -1;
  bool unix_socket = false;
  Peer peer;
  std::string user;  // the key of the per-user limits
  std::string buf;
  RequestParser parser;
  bool busy = false;      // out with a worker or a stream thread
  bool draining = false;  // answered an error; reading and dropping until closed
  bool sent_continue = false;
  bool body_deadline_set = false;
  bool writing = false;  // the loop is writing `out`
  bool keep = false;     // after `out`: next request (else closed)
  std::string out;
  std::size_t out_off = 0;
  std::int64_t deadline = 0;
  Conn(std::size_t max_header, std::size_t max_body) : parser(max_header, max_body) {}
};

HttpServer::HttpServer(Handler handler, HttpLimits limits)
    : handler_(std::move(handler)), limits_(limits) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::ListenUnix(const std::string& path, unsigned mode) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument(fmt::format("--socket '{}': path longer than {} bytes", path,
                                       sizeof(addr.sun_path) - 1));
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal(fmt::format("socket: {}", std::strerror(errno)));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // Nothing is unlinked here: whatever is at `path` makes bind() fail (EADDRINUSE), so a live
  // daemon's socket or a file is never replaced. `serve` removes a stale socket first
  // (daemon::PrepareSocketPath).
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 512) != 0) {
    Status st = Unavailable(fmt::format("--socket '{}': {}", path, std::strerror(errno)));
    close(fd);
    return st;
  }
  chmod(path.c_str(), mode);
  unix_path_ = path;
  listeners_.push_back({fd, true});
  return Status::Ok();
}

Status HttpServer::ListenTcp(const std::string& host_port, std::vector<TcpIdentity> identities) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument(fmt::format("--tcp '{}': expected HOST:PORT", host_port));
  }
  std::string host = host_port.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(host_port.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    return InvalidArgument(fmt::format("--tcp '{}': port must be 0..65535", host_port));
  }
  if (identities.empty()) return InvalidArgument("--token-file: no token");
  for (const auto& id : identities) {
    if (id.token.empty()) return InvalidArgument(fmt::format("--token-file: '{}': empty token", id.name));
    if (id.uid < 0 && !id.read_only) {
      return InvalidArgument(fmt::format("--token-file: '{}': no uid", id.name));
    }
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument(fmt::format("--tcp '{}': '{}' is not an IPv4 address", host_port, host));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 512) != 0) {
    Status st = Unavailable(fmt::format("--tcp '{}': {}", host_port, std::strerror(errno)));
    close(fd);
    return st;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  tcp_port_ = ntohs(addr.sin_port);
  identities_ = std::move(identities);
  listeners_.push_back({fd, false});
  return Status::Ok();
}

void HttpServer::Start() {
  if (started_) return;
  started_ = true;
  // Every connection is a descriptor: make room for the connection cap (plus the store, job
  // logs and stubs), as far as the hard limit allows; past it the reserve descriptor below
  // still lets an over-limit client be told 503.
  rlimit rl{};
  auto want = static_cast<rlim_t>(limits_.max_connections) + 512;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &raised);
    if (raised.rlim_cur < want) {
      spdlog::warn("RLIMIT_NOFILE allows {} descriptors, fewer than --max-connections {} needs; "
                   "connections past it are refused", raised.rlim_cur, limits_.max_connections);
    }
  }
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (const auto& l : listeners_) {
    SetNonBlocking(l.fd);
    ev.data.fd = l.fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, l.fd, &ev);
  }
  for (int i = 0; i < limits_.workers; ++i) workers_.emplace_back([this] { Worker(); });
  loop_thread_ = std::thread([this] { Loop(); });
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (started_) {
    Wake();
    loop_thread_.join();  // shuts down busy connections on its way out
    { std::lock_guard lock(mu_); }  // a worker between its check and its wait sees stopping_
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [this] { return streams_ == 0; });
  }
  for (auto& [fd, c] : conns_) close(fd);
  conns_.clear();
  for (const auto& l : listeners_) close(l.fd);
  for (int fd : {epoll_fd_, wake_fd_, reserve_fd_}) {
    if (fd >= 0) close(fd);
  }
  if (!unix_path_.empty()) unlink(unix_path_.c_str());
}

void HttpServer::Wake() {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void HttpServer::Loop() {
  std::vector<epoll_event> events(256);
  while (!stopping_) {
    int timeout_ms = 1000;
    if (!deadlines_.empty()) {
      std::int64_t left = deadlines_.begin()->first - NowUs();
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>((left + 999) / 1000, 0, 1000));
    }
    int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("http: epoll_wait: {}", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n && !stopping_; ++i) {
      int fd = events[static_cast<size_t>(i)].data.fd;
      // Nothing a client sends may end the loop: contain anything unexpected per event.
      try {
        if (fd == wake_fd_) {
          std::uint64_t v;
          [[maybe_unused]] ssize_t r = read(wake_fd_, &v, sizeof(v));
          continue;
        }
        auto l = std::find_if(listeners_.begin(), listeners_.end(),
                              [fd](const Listener& x) { return x.fd == fd; });
        if (l != listeners_.end()) {
          Accept(*l);
          continue;
        }
        auto it = conns_.find(fd);
        if (it != conns_.end() && !it->second->busy) {
          OnEvent(it->second.get(), events[static_cast<size_t>(i)].events);
        }
      } catch (const std::exception& e) {
        spdlog::error("http: event on fd {}: {}", fd, ForTerminal(e.what()));
        if (auto it = conns_.find(fd); it != conns_.end() && !it->second->busy) {
          CloseConn(it->second.get());
        }
      }
    }
    try {
      TakeReturned();
      ExpireDeadlines();
    } catch (const std::exception& e) {
      spdlog::error("http: event loop: {}", ForTerminal(e.what()));
    }
  }
  // Stopping: connections out with a worker or a stream fail their next write.
  std::lock_guard lock(mu_);
  for (int fd : busy_fds_) shutdown(fd, SHUT_RDWR);
  pending_.clear();
  pending_order_.clear();
}

void HttpServer::Refuse(int fd, const std::string& why) {
  SendNow(fd, ErrorAnswer(503, why));
  // Read what already arrived so close() does not reset the connection before the answer.
  char tmp[4096];
  while (recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT) > 0) {
  }
  shutdown(fd, SHUT_WR);
  close(fd);
}

void HttpServer::Accept(const Listener& l) {
  for (int i = 0; i < 256; ++i) {
    int fd = accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if ((errno == EMFILE || errno == ENFILE) && reserve_fd_ >= 0) {
        // Out of descriptors: free the reserve to take this one, say so, close it.
        close(reserve_fd_);
        fd = accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) Refuse(fd, "the daemon is out of file descriptors; try again later");
        reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
        spdlog::warn("http: out of file descriptors; refused a connection");
        continue;
      }
      return;  // EAGAIN: nothing more now
    }
    Peer peer;
    peer.unix_socket = l.unix_socket;
    std::string user;
    if (l.unix_socket) {
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        peer.authenticated = true;
        peer.uid = cred.uid;
        peer.gid = cred.gid;
        peer.pid = cred.pid;
        user = fmt::format("uid {}", cred.uid);
      } else {
        user = "uid unknown";
      }
    } else {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      sockaddr_in a{};
      socklen_t len = sizeof(a);
      char ip[INET_ADDRSTRLEN] = "?";
      if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
      }
      peer.address = ip;
      user = fmt::format("address {}", ip);
    }
    int& mine = conns_per_user_[user];
    if (static_cast<int>(conns_.size()) >= limits_.max_connections) {
      if (mine == 0) conns_per_user_.erase(user);
      Refuse(fd, fmt::format("too many connections: the daemon holds its limit of {} "
                             "(--max-connections); try again later", limits_.max_connections));
      continue;
    }
    if (mine >= limits_.max_connections_per_user) {
      Refuse(fd, fmt::format("too many connections from {}: {} open, the limit is {} "
                             "(--max-connections-per-user)", user, mine,
                             limits_.max_connections_per_user));
      continue;
    }
    ++mine;
    auto c = std::make_unique<Conn>(limits_.max_header_bytes, limits_.max_body_bytes);
    c->fd = fd;
    c->unix_socket = l.unix_socket;
    c->peer = peer;
    c->user = user;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    Conn* raw = c.get();
    conns_.emplace(fd, std::move(c));
    // A new connection has the head's time to send its first request.
    SetDeadline(raw, NowUs() + limits_.header_timeout);
  }
}

void HttpServer::SetDeadline(Conn* c, std::int64_t deadline_us) {
  if (c->deadline != 0) deadlines_.erase({c->deadline, c->fd});
  c->deadline = deadline_us;
  if (deadline_us != 0) deadlines_.insert({deadline_us, c->fd});
}

void HttpServer::CloseConn(Conn* c) {
  SetDeadline(c, 0);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  auto it = conns_per_user_.find(c->user);
  if (it != conns_per_user_.end() && --it->second <= 0) conns_per_user_.erase(it);
  int fd = c->fd;
  close(fd);
  conns_.erase(fd);  // frees c
}

void HttpServer::FailConn(Conn* c, int status, const std::string& message) {
  SendNow(c->fd, ErrorAnswer(status, message));
  shutdown(c->fd, SHUT_WR);
  c->draining = true;
  c->buf.clear();
  SetDeadline(c, NowUs() + kDrainTime);
}

void HttpServer::OnReadable(Conn* c) {
  char tmp[kReadSize];
  ssize_t n;
  do {
    n = recv(c->fd, tmp, sizeof(tmp), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (n <= 0) {
    CloseConn(c);  // the client hung up (or the connection failed)
    return;
  }
  if (c->draining) return;  // dropped
  if (!c->parser.started() && c->buf.empty()) {
    // The first byte of a request: its head is due within the header timeout.
    SetDeadline(c, NowUs() + limits_.header_timeout);
  }
  c->buf.append(tmp, static_cast<size_t>(n));
  Advance(c);
}

void HttpServer::Advance(Conn* c) {
  RequestParser::State st = c->parser.Parse(&c->buf);
  if (st == RequestParser::State::kError) {
    FailConn(c, c->parser.error_status(), c->parser.error_message());
    return;
  }
  if (st == RequestParser::State::kNeedMore) {
    if (c->parser.head_done() && !c->body_deadline_set) {
      c->body_deadline_set = true;
      SetDeadline(c, NowUs() + limits_.body_timeout);
      if (c->parser.expects_continue() && !c->sent_continue) {
        c->sent_continue = true;
        SendNow(c->fd, "HTTP/1.1 100 Continue\r\n\r\n");
      }
    }
    return;
  }
  Dispatch(c);
}

void HttpServer::Dispatch(Conn* c) {
  SetDeadline(c, 0);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  c->busy = true;
  {
    std::lock_guard lock(mu_);
    busy_fds_.insert(c->fd);
    auto& q = pending_[c->user];
    if (q.empty()) pending_order_.push_back(c->user);
    q.push_back(c);
  }
  work_cv_.notify_one();
}

void HttpServer::GiveBack(Conn* c, bool keep, std::string out) {
  {
    std::lock_guard lock(mu_);
    busy_fds_.erase(c->fd);
    returned_.push_back({c, keep, std::move(out)});
  }
  Wake();
}

void HttpServer::TakeReturned() {
  std::vector<Returned> back;
  {
    std::lock_guard lock(mu_);
    back.swap(returned_);
  }
  for (auto& r : back) {
    Conn* c = r.conn;
    c->busy = false;
    if (stopping_) {
      CloseConn(c);
      continue;
    }
    c->keep = r.keep;
    c->out = std::move(r.out);
    c->out_off = 0;
    c->writing = true;
    Flush(c);
  }
}

void HttpServer::Flush(Conn* c) {
  while (c->out_off < c->out.size()) {
    ssize_t n = send(c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c->out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The client is slow to read: wait for room, within the write timeout, reading nothing
      // more from it meanwhile.
      epoll_event ev{};
      ev.events = EPOLLOUT;
      ev.data.fd = c->fd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev);
      }
      if (c->deadline == 0 || c->deadline > NowUs() + limits_.write_timeout) {
        SetDeadline(c, NowUs() + limits_.write_timeout);
      }
      return;
    }
    CloseConn(c);  // the client went away
    return;
  }
  c->writing = false;
  c->out.clear();
  c->out.shrink_to_fit();
  c->out_off = 0;
  if (!c->keep) {
    shutdown(c->fd, SHUT_WR);
    CloseConn(c);
    return;
  }
  Resume(c);
}

void HttpServer::Resume(Conn* c) {
  c->parser.Reset();
  c->sent_continue = false;
  c->body_deadline_set = false;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c->fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev);
  }
  if (c->buf.empty()) {
    SetDeadline(c, NowUs() + limits_.idle_timeout);
  } else {
    SetDeadline(c, NowUs() + limits_.header_timeout);  // pipelined: already started
    Advance(c);
  }
}

void HttpServer::OnEvent(Conn* c, std::uint32_t events) {
  if (c->writing) {
    if (events & (EPOLLERR | EPOLLHUP)) {
      CloseConn(c);
    } else if (events & EPOLLOUT) {
      SetDeadline(c, NowUs() + limits_.write_timeout);  // progress: the client reads
      Flush(c);
    }
    return;
  }
  OnReadable(c);
}

void HttpServer::ExpireDeadlines() {
  std::int64_t now = NowUs();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    int fd = deadlines_.begin()->second;
    auto it = conns_.find(fd);
    if (it == conns_.end()) {
      deadlines_.erase(deadlines_.begin());
      continue;
    }
    Conn* c = it->second.get();
    if (c->writing || c->draining || (!c->parser.started() && c->buf.empty())) {
      CloseConn(c);  // drained, or idle between requests: closed without a word
    } else if (!c->parser.head_done()) {
      FailConn(c, 408, fmt::format("request head not received within {} ms (--header-timeout)",
                                   limits_.header_timeout / kMillisecond));
    } else {
      FailConn(c, 408, fmt::format("request body not received within {} ms (--body-timeout)",
                                   limits_.body_timeout / kMillisecond));
    }
  }
}

void HttpServer::Worker() {
  while (true) {
    Conn* c = nullptr;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !pending_order_.empty(); });
      if (stopping_) return;
      // Round robin over users: one user's burst waits behind everyone else's next request.
      std::string user = std::move(pending_order_.front());
      pending_order_.pop_front();
      auto it = pending_.find(user);
      c = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) {
        pending_.erase(it);
      } else {
        pending_order_.push_back(user);
      }
    }
    After after = After::kClose;
    std::string out;
    try {
      after = Handle(c, &out);
    } catch (const std::exception& e) {
      spdlog::error("http: answering {}: {}", c->user, ForTerminal(e.what()));
    } catch (...) {
      spdlog::error("http: answering {}: unknown exception", c->user);
    }
    if (after != After::kTaken) GiveBack(c, after == After::kKeep, std::move(out));
  }
}

void HttpServer::Authenticate(HttpRequest* req) const {
  if (req->peer.unix_socket) return;
  auto it = req->headers.find("authorization");
  if (it == req->headers.end()) return;
  std::string_view v = it->second;
  if (v.size() < 7 || Lower(v.substr(0, 7)) != "bearer ") return;
  std::string_view token = Trim(v.substr(7));
  const TcpIdentity* match = nullptr;
  for (const auto& id : identities_) {  // every one compared: no early exit to time
    if (SameSecret(token, id.token)) match = &id;
  }
  if (match == nullptr) return;
  req->peer.authenticated = true;
  req->peer.uid = match->uid;
  req->peer.gid = match->gid;
  req->peer.name = match->name;
  req->peer.read_only = match->read_only;
}

HttpServer::After HttpServer::Handle(Conn* c, std::string* out) {
  HttpRequest& req = c->parser.request();
  req.peer = c->peer;
  Authenticate(&req);
  const bool close_after = !c->parser.keep_alive();
  HttpResponse resp;
  try {
    resp = handler_(req);
  } catch (const std::exception& e) {
    spdlog::error("http: {} {} from {}: the handler threw: {}; answered 500",
                  ForTerminal(req.method), ForTerminal(req.path), c->user, ForTerminal(e.what()));
    resp = HttpResponse();
    resp.status = 500;
    resp.body = DumpJson(ErrorJson(Internal(
                    "internal error while answering this request (the daemon logged it)"))) +
                "\n";
  } catch (...) {
    spdlog::error("http: {} {} from {}: the handler threw; answered 500",
                  ForTerminal(req.method), ForTerminal(req.path), c->user);
    resp = HttpResponse();
    resp.status = 500;
    resp.body = DumpJson(ErrorJson(Internal(
                    "internal error while answering this request (the daemon logged it)"))) +
                "\n";
  }
  std::string conn = close_after ? "Connection: close\r\n" : "";
  conn += ExtraHeaders(resp);
  if (resp.stream) {
    {
      std::lock_guard lock(mu_);
      int& mine = streams_per_user_[c->user];
      if (streams_ >= limits_.max_streams || mine >= limits_.max_streams_per_user) {
        std::string why =
            streams_ >= limits_.max_streams
                ? fmt::format("too many streaming answers: the daemon holds its limit of {} "
                              "(--max-streams); try again later", limits_.max_streams)
                : fmt::format("too many streaming answers for {}: the limit is {} "
                              "(--max-streams-per-user)", c->user, limits_.max_streams_per_user);
        if (mine == 0) streams_per_user_.erase(c->user);
        *out = ErrorAnswer(503, why);
        return After::kClose;
      }
      ++mine;
      ++streams_;
    }
    std::thread([this, c, r = std::move(resp), close_after]() mutable {
      Stream(c, std::move(r), close_after);
    }).detach();
    return After::kTaken;
  }
  *out = Head(resp.status, resp.content_type,
              conn + fmt::format("Content-Length: {}\r\n", resp.body.size()));
  *out += resp.body;
  return close_after ? After::kClose : After::kKeep;
}

void HttpServer::Stream(Conn* c, HttpResponse resp, bool close_after) {
  bool ok = false;
  try {
    std::string conn = close_after ? "Connection: close\r\n" : "";
    if (SendAll(c->fd, Head(resp.status, resp.content_type,
                            conn + ExtraHeaders(resp) + "Transfer-Encoding: chunked\r\n"),
                limits_.write_timeout)) {
      bool alive = true;
      resp.stream([&](std::string_view chunk) {
        if (alive && chunk.empty()) {
          // Keep-alive probe: has the client hung up?
          char ch;
          ssize_t n = recv(c->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) alive = false;
        }
        if (!alive || chunk.empty()) return alive && !stopping_;
        alive = SendAll(c->fd, fmt::format("{:x}\r\n", chunk.size()), limits_.write_timeout) &&
                SendAll(c->fd, chunk, limits_.write_timeout) &&
                SendAll(c->fd, "\r\n", limits_.write_timeout);
        return alive && !stopping_;
      });
      ok = alive && SendAll(c->fd, "0\r\n\r\n", limits_.write_timeout);
    }
  } catch (const std::exception& e) {
    spdlog::error("http: stream to {}: {}", c->user, ForTerminal(e.what()));
    ok = false;
  } catch (...) {
    spdlog::error("http: stream to {}: unknown exception", c->user);
    ok = false;
  }
  std::string user = c->user;
  GiveBack(c, ok && !close_after);
  std::lock_guard lock(mu_);
  if (auto it = streams_per_user_.find(user); it != streams_per_user_.end() && --it->second <= 0) {
    streams_per_user_.erase(it);
  }
  --streams_;
  done_cv_.notify_all();
}

// ---- client ---------------------------------------------------------------------------------

namespace {
// The most one answer may carry (Content-Length, a chunk, a whole chunked answer): far above
// any real one (the job list of a busy year is tens of MB), far below what exhausts memory.
constexpr size_t kMaxAnswerBytes = size_t{1} << 30;
}  // namespace

HttpClient::HttpClient(std::string endpoint, std::string token)
    : endpoint_(std::move(endpoint)), token_(std::move(token)) {}

HttpClient::~HttpClient() { Close(); }

void HttpClient::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  buf_.clear();
}

Status HttpClient::Connect() {
  if (fd_ >= 0) return Status::Ok();
  std::string ep = endpoint_;
  if (ep.rfind("tcp://", 0) == 0) {
    std::string hp = ep.substr(6);
    size_t colon = hp.rfind(':');
    if (colon == std::string::npos) return InvalidArgument(fmt::format("endpoint '{}': no port", ep));
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(hp.substr(0, colon).c_str(), hp.substr(colon + 1).c_str(), &hints, &res) != 0) {
      return Unavailable(fmt::format("cannot resolve '{}'", hp));
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc != 0) {
      Status st = Unavailable(fmt::format("cannot reach the gpuslice daemon at {}: {}", ep,
                                          std::strerror(errno)));
      close(fd);
      return st;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fd_ = fd;
    return Status::Ok();
  }
  if (ep.rfind("unix:", 0) == 0) ep = ep.substr(5);
  sockaddr_un addr{};
  if (ep.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument(fmt::format("--socket '{}': path too long", ep));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, ep.c_str(), ep.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status st = Unavailable(fmt::format(
        "cannot reach the gpuslice daemon at {}: {} (is `gpuslice serve` running? set --socket "
        "or $GPUSLICE_SOCKET)", ep, std::strerror(errno)));
    close(fd);
    return st;
  }
  fd_ = fd;
  return Status::Ok();
}

Status HttpClient::Send(std::string_view method, std::string_view target, std::string_view body) {
  std::string req = fmt::format("{} {} HTTP/1.1\r\nHost: gpuslice\r\nContent-Length: {}\r\n",
                                method, target, body.size());
  if (!body.empty()) req += "Content-Type: application/json\r\n";
  if (!token_.empty()) req += "Authorization: Bearer " + token_ + "\r\n";
  req += "\r\n";
  req += body;
  if (!SendAll(fd_, req)) {
    Close();
    return Unavailable("connection to the daemon closed");
  }
  return Status::Ok();
}

Result<std::string> HttpClient::ReadLine() {
  // A status, header or chunk-size line; whatever answers on the socket could send one
  // without end.
  constexpr size_t kMaxLine = 64 * 1024;
  size_t pos;
  while ((pos = buf_.find("\r\n")) == std::string::npos) {
    if (buf_.size() > kMaxLine) {
      Close();
      return Internal(fmt::format("bad response from daemon: a line longer than {} bytes", kMaxLine));
    }
    char tmp[16384];
    ssize_t n = recv(fd_, tmp, sizeof(tmp), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("connection to the daemon closed");
    buf_.append(tmp, static_cast<size_t>(n));
  }
  std::string line = buf_.substr(0, pos);
  buf_.erase(0, pos + 2);
  return line;
}

Result<std::string> HttpClient::ReadExact(size_t n) {
  while (buf_.size() < n) {
    char tmp[65536];
    ssize_t r = recv(fd_, tmp, sizeof(tmp), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Unavailable("connection to the daemon closed");
    buf_.append(tmp, static_cast<size_t>(r));
  }
  std::string out = buf_.substr(0, n);
  buf_.erase(0, n);
  return out;
}

Result<int> HttpClient::ReadHead(std::map<std::string, std::string>* headers) {
  GPUSLICE_ASSIGN_OR_RETURN(std::string status_line, ReadLine());
  // "HTTP/1.x NNN reason": three digits, 100..599 (sscanf's %d overflowed on a long number).
  int status = 0;
  std::string_view sl = status_line;
  bool good = sl.size() >= 12 && sl.substr(0, 7) == "HTTP/1." &&
              std::isdigit(static_cast<unsigned char>(sl[7])) && sl[8] == ' ' &&
              (sl.size() == 12 || sl[12] == ' ');
  if (good) {
    auto [p, ec] = std::from_chars(sl.data() + 9, sl.data() + 12, status);
    good = ec == std::errc() && p == sl.data() + 12 && status >= 100 && status <= 599;
  }
  if (!good) {
    Close();
    return Internal(fmt::format("bad response from daemon: status line '{}'",
                                EscapeInvalidUtf8(sl.substr(0, 100))));
  }
  constexpr size_t kMaxHead = 1 << 20;
  std::string head = status_line;
  while (true) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string line, ReadLine());
    if (line.empty()) break;
    head += "\r\n" + line;
    if (head.size() > kMaxHead) {
      Close();
      return Internal(fmt::format("bad response from daemon: a head longer than {} bytes", kMaxHead));
    }
  }
  ParseHeaders(head, headers);
  return status;
}

Result<ClientResponse> HttpClient::Request(std::string_view method, std::string_view target,
                                           std::string_view body) {
  // A kept-alive connection the server closed shows up on first use: retry once on a new one
  // (only for reads; a write might have been applied).
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = fd_ >= 0;
    GPUSLICE_RETURN_IF_ERROR(Connect());
    Status st = Send(method, target, body);
    std::map<std::string, std::string> headers;
    Result<int> status = st.ok() ? ReadHead(&headers) : Result<int>(st);
    if (!status.ok()) {
      Close();
      if (reused && method == "GET") continue;
      return status.status();
    }
    ClientResponse resp;
    resp.status = *status;
    if (auto it = headers.find("transfer-encoding"); it != headers.end()) {
      bool too_big = false;
      auto r = ReadChunks([&](std::string_view c) {
        too_big = resp.body.size() + c.size() > kMaxAnswerBytes;
        if (!too_big) resp.body.append(c);
        return !too_big;
      });
      if (!r.ok()) return r.status();
      if (too_big) {
        return Internal(fmt::format("answer from daemon: more than {} bytes", kMaxAnswerBytes));
      }
    } else {
      size_t len = 0;
      if (auto it = headers.find("content-length"); it != headers.end()) {
        auto n = ParseSize(it->second, 10);
        if (!n || *n > kMaxAnswerBytes) {
          Close();
          return Internal(fmt::format("bad Content-Length from daemon: '{}' (at most {})",
                                      EscapeInvalidUtf8(it->second.substr(0, 32)),
                                      kMaxAnswerBytes));
        }
        len = *n;
      }
      GPUSLICE_ASSIGN_OR_RETURN(resp.body, ReadExact(len));
    }
    if (auto it = headers.find("connection"); it != headers.end() && it->second == "close") {
      Close();
    }
    return resp;
  }
  return Unavailable("connection to the daemon closed");
}

Result<int> HttpClient::Stream(std::string_view target,
                               const std::function<bool(std::string_view)>& on_chunk,
                               std::string* error_body) {
  GPUSLICE_RETURN_IF_ERROR(Connect());
  GPUSLICE_RETURN_IF_ERROR(Send("GET", target, ""));
  std::map<std::string, std::string> headers;
  auto st = ReadHead(&headers);
  if (!st.ok()) {
    Close();
    return st.status();
  }
  std::string body;
  auto sink = [&](std::string_view c) {
    if (*st >= 300) {
      if (body.size() + c.size() > kMaxAnswerBytes) return false;  // an error is short
      body.append(c);
      return true;
    }
    return on_chunk(c);
  };
  if (headers.find("transfer-encoding") == headers.end()) {
    size_t len = 0;
    if (auto it = headers.find("content-length"); it != headers.end()) {
      auto n = ParseSize(it->second, 10);
      if (!n || *n > kMaxAnswerBytes) {
        Close();
        return Internal(fmt::format("bad Content-Length from daemon: '{}' (at most {})",
                                    EscapeInvalidUtf8(it->second.substr(0, 32)),
                                    kMaxAnswerBytes));
      }
      len = *n;
    }
    GPUSLICE_ASSIGN_OR_RETURN(std::string all, ReadExact(len));
    sink(all);
  } else {
    GPUSLICE_RETURN_IF_ERROR(ReadChunks(sink).status());
  }
  if (error_body) *error_body = std::move(body);
  return *st;
}

// Reads a chunked body whose head was already read.
Result<int> HttpClient::ReadChunks(const std::function<bool(std::string_view)>& on_chunk) {
  while (true) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string size_line, ReadLine());
    auto parsed = ParseSize(size_line, 16);
    if (!parsed) {
      Close();
      return Internal(fmt::format("bad chunk size from daemon: '{}'",
                                  EscapeInvalidUtf8(size_line.substr(0, 32))));
    }
    size_t n = *parsed;
    if (n > kMaxAnswerBytes) {
      // Also keeps n + 2 from wrapping (a size of 2^64-1 read 1 byte, then resize threw).
      Close();
      return Internal(fmt::format("bad chunk size from daemon: {} bytes, more than {}", n,
                                  kMaxAnswerBytes));
    }
    if (n == 0) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string trailer, ReadLine());
      return 0;
    }
    GPUSLICE_ASSIGN_OR_RETURN(std::string chunk, ReadExact(n + 2));
    chunk.resize(n);
    if (!on_chunk(chunk)) {
      Close();  // abandon the rest of the stream
      return 0;
    }
  }
}

}  // namespace gpuslice::api
