// The HTTP server (docs/security.md, "Input limits"): epoll event loop, bounded worker pool,
// per-caller caps and deadlines.
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

using http_detail::ErrorAnswer;
using http_detail::ExtraHeaders;
using http_detail::Head;
using http_detail::Lower;
using http_detail::NowUs;
using http_detail::SameSecret;
using http_detail::SendAll;
using http_detail::SendNow;
using http_detail::SetNonBlocking;
using http_detail::Trim;
using http_detail::kDrainTime;
using http_detail::kReadSize;

// ---- server ---------------------------------------------------------------------------------

namespace {
// The key every TCP connection is counted under until a request shows a valid token.
constexpr const char* kUnauthenticated = "tcp unauthenticated";
}  // namespace

struct HttpServer::Conn {
  int fd = -1;
  bool unix_socket = false;
  Peer peer;         // as accepted (TCP: the address only)
  Hold hold;         // what it counts against; hold.key is the user of the per-user limits
  bool identified = false;   // TCP: bound to the identity of its first authenticated request
  bool close_after = false;  // TCP without a valid token: closed after this answer
  std::int64_t accepted_us = 0;
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
    : handler_(std::move(handler)),
      limits_(limits),
      conn_budget_("connections", "--max-connections", "--max-connections-per-user",
                   limits.max_connections, limits.max_connections_per_user),
      stream_budget_("streaming answers", "--max-streams", "--max-streams-per-user", limits.max_streams,
                     limits.max_streams_per_user) {}

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
    done_cv_.wait(lock, [this] { return stream_budget_.held() == 0; });
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
    std::string key = kUnauthenticated;
    if (l.unix_socket) {
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        peer.authenticated = true;
        peer.uid = cred.uid;
        peer.gid = cred.gid;
        peer.pid = cred.pid;
        key = fmt::format("uid {}", cred.uid);
      } else {
        key = "uid unknown";
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
    }
    // TCP: every connection starts in the one small unauthenticated bucket (the token is known
    // only once a request arrives); its oldest idle member makes room for a new one, so
    // connections held open without a request cannot keep token holders out for long.
    const int limit = l.unix_socket ? 0 : limits_.max_unauthenticated;
    auto privileged = [&] { return Privileged(peer); };
    auto hold = conn_budget_.Take(key, !l.unix_socket, privileged, limit);
    if (!hold.ok() && !l.unix_socket && conn_budget_.held_by(key) >= limit && EvictUnauthenticated()) {
      hold = conn_budget_.Take(key, true, privileged, limit);
    }
    if (!hold.ok()) {
      const std::string who = l.unix_socket ? key : fmt::format("{} (address {})", key, peer.address);
      refusals_.Note("connection " + who, fmt::format("connection from {}: {}", who, hold.status().message()));
      Refuse(fd, hold.status().message());
      continue;
    }
    auto c = std::make_unique<Conn>(limits_.max_header_bytes, limits_.max_body_bytes);
    c->fd = fd;
    c->unix_socket = l.unix_socket;
    c->peer = peer;
    c->hold = *std::move(hold);
    c->accepted_us = NowUs();
    if (!l.unix_socket) unauthenticated_.insert({c->accepted_us, fd});
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
  conn_budget_.Release(c->hold);
  unauthenticated_.erase({c->accepted_us, c->fd});
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

bool HttpServer::EvictUnauthenticated() {
  for (const auto& [accepted, fd] : unauthenticated_) {
    auto it = conns_.find(fd);
    if (it == conns_.end() || it->second->busy || it->second->writing) continue;
    refusals_.Note("evicted unauthenticated", fmt::format(
        "closed an unauthenticated TCP connection from {} held {} ms without a request, to make room "
        "(--max-unauthenticated {})", it->second->peer.address, (NowUs() - accepted) / 1000,
        limits_.max_unauthenticated));
    Refuse(fd, "closed to make room for another connection: send a request with a valid token right after "
               "connecting");
    // Refuse closed the descriptor; forget it without a second close().
    Conn* c = it->second.get();
    SetDeadline(c, 0);
    conn_budget_.Release(c->hold);
    unauthenticated_.erase({c->accepted_us, fd});
    conns_.erase(it);
    return true;
  }
  return false;
}

bool HttpServer::Identify(Conn* c, const Peer& peer) {
  if (c->unix_socket) return true;
  if (!peer.authenticated) {
    c->close_after = true;  // answered (401 by the handler), then closed: no idle unauthenticated holds
    return true;
  }
  const std::string key = peer.uid >= 0 ? fmt::format("uid {}", peer.uid) : "token " + peer.name;
  // A kept-alive connection may carry another token's request next (a client's connection
  // pool): it then counts against that identity, if it has room.
  if (Status st = conn_budget_.Rekey(c->hold, key); !st.ok()) {
    refusals_.Note("connection " + key, fmt::format("TCP connection from {}: {}", peer.address, st.message()));
    FailConn(c, 503, st.message());
    return false;
  }
  c->identified = true;
  unauthenticated_.erase({c->accepted_us, c->fd});
  return true;
}

void HttpServer::Dispatch(Conn* c) {
  // Who is asking is settled here, on the loop thread, so that a TCP connection counts
  // against its token's identity (not its address) from its first request on.
  HttpRequest& req = c->parser.request();
  req.peer = c->peer;
  Authenticate(&req);
  if (!Identify(c, req.peer)) return;
  SetDeadline(c, 0);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  c->busy = true;
  {
    std::lock_guard lock(mu_);
    busy_fds_.insert(c->fd);
    auto& q = pending_[c->hold.key];
    if (q.empty()) pending_order_.push_back(c->hold.key);
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
    std::string user;
    {
      std::unique_lock lock(mu_);
      // Round robin over users with work, skipping those already running their share of the
      // workers: one user's burst of slow reads waits behind everyone else's next request and
      // never holds every worker.
      auto next = pending_order_.end();
      work_cv_.wait(lock, [&] {
        if (stopping_) return true;
        next = std::find_if(pending_order_.begin(), pending_order_.end(), [this](const std::string& u) {
          auto r = running_.find(u);
          return r == running_.end() || r->second < limits_.max_workers_per_user;
        });
        return next != pending_order_.end();
      });
      if (stopping_) return;
      user = std::move(*next);
      pending_order_.erase(next);
      auto it = pending_.find(user);
      c = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) {
        pending_.erase(it);
      } else {
        pending_order_.push_back(user);
      }
      ++running_[user];
    }
    After after = After::kClose;
    std::string out;
    try {
      after = Handle(c, &out);
    } catch (const std::exception& e) {
      spdlog::error("http: answering {}: {}", user, ForTerminal(e.what()));
    } catch (...) {
      spdlog::error("http: answering {}: unknown exception", user);
    }
    {
      std::lock_guard lock(mu_);
      if (auto r = running_.find(user); r != running_.end() && --r->second <= 0) running_.erase(r);
    }
    // This user may have been skipped while at its share: another worker may take it now.
    work_cv_.notify_one();
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
  HttpRequest& req = c->parser.request();  // req.peer was settled by Dispatch
  const bool close_after = !c->parser.keep_alive() || c->close_after;
  HttpResponse resp;
  try {
    resp = handler_(req);
  } catch (const std::exception& e) {
    spdlog::error("http: {} {} from {}: the handler threw: {}; answered 500",
                  ForTerminal(req.method), ForTerminal(req.path), c->hold.key, ForTerminal(e.what()));
    resp = HttpResponse();
    resp.status = 500;
    resp.body = DumpJson(ErrorJson(Internal(
                    "internal error while answering this request (the daemon logged it)"))) +
                "\n";
  } catch (...) {
    spdlog::error("http: {} {} from {}: the handler threw; answered 500",
                  ForTerminal(req.method), ForTerminal(req.path), c->hold.key);
    resp = HttpResponse();
    resp.status = 500;
    resp.body = DumpJson(ErrorJson(Internal(
                    "internal error while answering this request (the daemon logged it)"))) +
                "\n";
  }
  std::string conn = close_after ? "Connection: close\r\n" : "";
  conn += ExtraHeaders(resp);
  if (resp.stream) {
    // Root and admins may use the share of streams kept for them (asked before the lock: it may
    // look up groups).
    const bool privileged = c->unix_socket && Privileged(req.peer);
    Result<Hold> hold = Internal("unset");
    {
      std::lock_guard lock(mu_);
      hold = stream_budget_.Take(c->hold.key, !c->unix_socket, [privileged] { return privileged; });
    }
    if (!hold.ok()) {
      refusals_.Note("stream " + c->hold.key, fmt::format("logs stream for {}: {}", c->hold.key,
                                                          hold.status().message()));
      *out = ErrorAnswer(503, hold.status().message());
      return After::kClose;
    }
    std::thread([this, c, r = std::move(resp), close_after, h = *std::move(hold)]() mutable {
      Stream(c, std::move(r), close_after, h);
    }).detach();
    return After::kTaken;
  }
  *out = Head(resp.status, resp.content_type,
              conn + fmt::format("Content-Length: {}\r\n", resp.body.size()));
  *out += resp.body;
  return close_after ? After::kClose : After::kKeep;
}

void HttpServer::Stream(Conn* c, HttpResponse resp, bool close_after, const Hold& hold) {
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
    spdlog::error("http: stream to {}: {}", hold.key, ForTerminal(e.what()));
    ok = false;
  } catch (...) {
    spdlog::error("http: stream to {}: unknown exception", hold.key);
    ok = false;
  }
  GiveBack(c, ok && !close_after);
  std::lock_guard lock(mu_);
  stream_budget_.Release(hold);
  done_cv_.notify_all();
}

}  // namespace gpuslice::api
