#include "api/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace gpuslice::api {
namespace {

constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kMaxBody = 4 * 1024 * 1024;

std::string_view Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
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

// Parses "Name: value" lines after the first line of a head.
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

}  // namespace

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

Result<HttpRequest> ParseRequestHead(std::string_view head) {
  HttpRequest req;
  std::string_view first = head.substr(0, head.find("\r\n"));
  size_t sp1 = first.find(' ');
  size_t sp2 = first.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) {
    return InvalidArgument("request line: expected 'METHOD TARGET HTTP/1.1'");
  }
  req.method = std::string(first.substr(0, sp1));
  std::string_view target = first.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t q = target.find('?');
  req.path = UrlDecode(target.substr(0, q));
  if (q != std::string_view::npos) {
    std::string_view qs = target.substr(q + 1);
    while (!qs.empty()) {
      size_t amp = qs.find('&');
      std::string_view kv = qs.substr(0, amp);
      size_t eq = kv.find('=');
      req.query[UrlDecode(kv.substr(0, eq))] =
          eq == std::string_view::npos ? "" : UrlDecode(kv.substr(eq + 1));
      if (amp == std::string_view::npos) break;
      qs.remove_prefix(amp + 1);
    }
  }
  ParseHeaders(head, &req.headers);
  return req;
}

// ---- server ---------------------------------------------------------------------------------

HttpServer::HttpServer(Handler handler) : handler_(std::move(handler)) {}

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
  unlink(path.c_str());  // a stale socket from a crashed daemon
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

Status HttpServer::ListenTcp(const std::string& host_port, std::string token, std::int64_t as_uid,
                             std::int64_t as_gid) {
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
  if (token.empty()) return InvalidArgument("--token-file: empty token");
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
  token_ = std::move(token);
  token_uid_ = as_uid;
  token_gid_ = as_gid;
  listeners_.push_back({fd, false});
  return Status::Ok();
}

void HttpServer::Start() {
  for (const auto& l : listeners_) accept_threads_.emplace_back([this, l] { AcceptLoop(l); });
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  for (const auto& l : listeners_) shutdown(l.fd, SHUT_RDWR);
  for (auto& t : accept_threads_) t.join();
  for (const auto& l : listeners_) close(l.fd);
  std::unique_lock lock(mu_);
  for (int fd : conns_) shutdown(fd, SHUT_RDWR);
  done_cv_.wait(lock, [this] { return active_ == 0; });
  if (!unix_path_.empty()) unlink(unix_path_.c_str());
}

void HttpServer::AcceptLoop(Listener l) {
  while (!stopping_) {
    int fd = accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE) continue;
      return;  // shut down
    }
    if (!l.unix_socket) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    std::lock_guard lock(mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    conns_.insert(fd);
    ++active_;
    std::thread([this, fd, unix_socket = l.unix_socket] {
      Serve(fd, unix_socket);
      std::lock_guard lock(mu_);
      conns_.erase(fd);
      close(fd);
      --active_;
      done_cv_.notify_all();
    }).detach();
  }
}

void HttpServer::Serve(int fd, bool unix_socket) {
  Peer peer;
  peer.unix_socket = unix_socket;
  if (unix_socket) {
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      peer.authenticated = true;
      peer.uid = cred.uid;
      peer.gid = cred.gid;
      peer.pid = cred.pid;
    }
  }
  std::string buf;
  char tmp[16384];
  auto fill = [&]() {
    ssize_t n;
    do {
      n = recv(fd, tmp, sizeof(tmp), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  };
  while (!stopping_) {
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (buf.size() > kMaxHead || !fill()) return;
    }
    Result<HttpRequest> parsed = ParseRequestHead(std::string_view(buf.data(), end));
    if (!parsed.ok()) {
      SendAll(fd, Head(400, "text/plain", "Content-Length: 0\r\nConnection: close\r\n"));
      return;
    }
    HttpRequest req = std::move(parsed).value();
    req.peer = peer;
    size_t body_len = 0;
    if (auto it = req.headers.find("content-length"); it != req.headers.end()) {
      try {
        body_len = std::stoul(it->second);
      } catch (...) {
        body_len = kMaxBody + 1;
      }
    }
    if (body_len > kMaxBody) {
      SendAll(fd, Head(413, "text/plain", "Content-Length: 0\r\nConnection: close\r\n"));
      return;
    }
    buf.erase(0, end + 4);
    while (buf.size() < body_len) {
      if (!fill()) return;
    }
    req.body = buf.substr(0, body_len);
    buf.erase(0, body_len);
    bool close_after = false;
    if (auto it = req.headers.find("connection"); it != req.headers.end()) {
      close_after = Lower(it->second) == "close";
    }

    if (!unix_socket) {
      auto it = req.headers.find("authorization");
      if (it != req.headers.end() && it->second == "Bearer " + token_) {
        req.peer.authenticated = true;
        req.peer.uid = token_uid_;
        req.peer.gid = token_gid_;
      }
    }
    HttpResponse resp = handler_(req);
    std::string conn = close_after ? "Connection: close\r\n" : "";
    if (resp.stream) {
      if (!SendAll(fd, Head(resp.status, resp.content_type,
                            conn + "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n"))) {
        return;
      }
      bool alive = true;
      resp.stream([&](std::string_view chunk) {
        if (alive && chunk.empty()) {
          // Keep-alive probe: has the client hung up?
          char c;
          ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) alive = false;
        }
        if (!alive || chunk.empty()) return alive && !stopping_;
        alive = SendAll(fd, fmt::format("{:x}\r\n", chunk.size())) && SendAll(fd, chunk) &&
                SendAll(fd, "\r\n");
        return alive && !stopping_;
      });
      if (!alive || !SendAll(fd, "0\r\n\r\n")) return;
    } else {
      std::string out = Head(resp.status, resp.content_type,
                             conn + fmt::format("Content-Length: {}\r\n", resp.body.size()));
      out += resp.body;
      if (!SendAll(fd, out)) return;
    }
    if (close_after) return;
  }
}

// ---- client ---------------------------------------------------------------------------------

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
  size_t pos;
  while ((pos = buf_.find("\r\n")) == std::string::npos) {
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
  int status = 0;
  if (std::sscanf(status_line.c_str(), "HTTP/1.%*d %d", &status) != 1) {
    return Internal(fmt::format("bad response from daemon: '{}'", status_line));
  }
  std::string head = status_line;
  while (true) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string line, ReadLine());
    if (line.empty()) break;
    head += "\r\n" + line;
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
      auto r = ReadChunks([&](std::string_view c) {
        resp.body.append(c);
        return true;
      });
      if (!r.ok()) return r.status();
    } else {
      size_t len = 0;
      if (auto it = headers.find("content-length"); it != headers.end()) {
        len = std::stoul(it->second);
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
      body.append(c);
      return true;
    }
    return on_chunk(c);
  };
  if (headers.find("transfer-encoding") == headers.end()) {
    size_t len = 0;
    if (auto it = headers.find("content-length"); it != headers.end()) len = std::stoul(it->second);
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
    size_t n = std::stoul(size_line, nullptr, 16);
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
