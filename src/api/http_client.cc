// The HTTP client the CLI uses: one connection, bounded reads of every answer.
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

using http_detail::ParseHeaders;
using http_detail::ParseSize;
using http_detail::SendAll;

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
  // The daemon checks Host against the listener's own names (daemon/ui.h CheckHost): a Unix
  // socket answers to "localhost", TCP to the host:port it was reached at.
  const std::string host = endpoint_.rfind("tcp://", 0) == 0 ? endpoint_.substr(6) : "localhost";
  std::string req = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
                                method, target, host, body.size());
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
    GPUSLICE_RETURN_IF_ERROR(RecvMore());
  }
  std::string line = buf_.substr(0, pos);
  buf_.erase(0, pos + 2);
  return line;
}

Status HttpClient::RecvMore() {
  char tmp[65536];
  while (true) {
    ssize_t n = recv(fd_, tmp, sizeof(tmp), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("connection to the daemon closed");
    buf_.append(tmp, static_cast<size_t>(n));
    return Status::Ok();
  }
}

Result<std::string> HttpClient::ReadExact(size_t n) {
  while (buf_.size() < n) GPUSLICE_RETURN_IF_ERROR(RecvMore());
  std::string out = buf_.substr(0, n);
  buf_.erase(0, n);
  return out;
}

Result<std::string> HttpClient::ReadSizedBody(const std::map<std::string, std::string>& headers) {
  size_t len = 0;
  if (auto it = headers.find("content-length"); it != headers.end()) {
    auto n = ParseSize(it->second, 10);
    if (!n || *n > kMaxAnswerBytes) {
      Close();
      return Internal(fmt::format("bad Content-Length from daemon: '{}' (at most {})",
                                  EscapeInvalidUtf8(it->second.substr(0, 32)), kMaxAnswerBytes));
    }
    len = *n;
  }
  return ReadExact(len);
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
  sent_ = false;
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = fd_ >= 0;
    GPUSLICE_RETURN_IF_ERROR(Connect());
    sent_ = true;  // from here the daemon may have received (and acted on) the request
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
      GPUSLICE_ASSIGN_OR_RETURN(resp.body, ReadSizedBody(headers));
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
    GPUSLICE_ASSIGN_OR_RETURN(std::string all, ReadSizedBody(headers));
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
