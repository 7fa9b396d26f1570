#pragma once
// A small HTTP/1.1 server and client for the gpuslice API, over a Unix socket (the caller's
// uid/gid/pid come from SO_PEERCRED, which cpp-httplib 0.11 cannot expose to handlers) and
// optionally TCP (bearer token mapped to a named identity, api/tokens.h). Keep-alive,
// Content-Length and chunked request bodies, chunked streaming responses (for
// `logs --follow`). Only what the API needs; not a general web server.
//
// HttpServer: every client is untrusted. One event-loop thread reads all connections
// (epoll, non-blocking) and hands only complete requests to a fixed pool of worker threads,
// fairly (round robin over users, at most max_workers_per_user at once for one user, so one
// user's slow reads never take every worker); streaming responses get their own threads,
// capped. So a connection costs a buffer, not a thread, and every resource a client can hold is
// bounded by HttpLimits: connections (in total, per identity, a small shared bucket for TCP
// connections without a valid token, which are closed after their answer), header and body read time, idle
// keep-alive time, header and body size, write time. A handler that throws answers 500 and
// is logged; nothing a request does terminates the process. The handler must be thread-safe.
// HttpClient: one connection, reused; not thread-safe (one per thread).
// RequestParser: incremental HTTP/1.1 request parser (exposed for tests and fuzzing); not
// thread-safe.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/http_budget.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::api {

// Who is calling. Unix socket: kernel-attested uid/gid/pid. TCP: the identity its bearer token
// maps to (api/tokens.h), or not authenticated.
struct Peer {
  bool authenticated = false;
  bool unix_socket = false;
  bool read_only = false;  // TCP read-only token: GET listings and /metrics only
  std::int64_t uid = -1;
  std::int64_t gid = -1;
  std::int64_t pid = 0;
  std::string name;     // TCP: the token's identity name
  std::string address;  // TCP: the source IPv4 address
};

// One bearer token accepted on TCP and who it acts as (parsed from the token file by
// api/tokens.h). uid -1 only with read_only.
struct TcpIdentity {
  std::string name;
  std::int64_t uid = -1;
  std::int64_t gid = -1;
  bool read_only = false;
  std::string token;
};

// What one client may hold. "User" is the caller's identity: the uid on the Unix socket; on
// TCP the uid its bearer token acts as ("token NAME" for a read-only token), and before its
// first request has shown a valid token, one bucket shared by every unauthenticated TCP
// connection. Of the connection and stream totals, a quarter is kept from TCP (for the Unix
// socket) and a sixteenth from callers other than root and admins (api/http_budget.h).
// Defaults are documented in docs/security.md ("Limits and their defaults").
struct HttpLimits {
  int max_connections = 1024;          // open connections in total; more: 503 and closed
  int max_connections_per_user = 64;   // per identity
  int max_unauthenticated = 16;        // TCP connections without a valid token yet, together
  Micros header_timeout = 10 * kSecond;  // from a request's first byte to the end of its head
  Micros body_timeout = 30 * kSecond;    // from the end of the head to the end of the body
  Micros idle_timeout = 60 * kSecond;    // keep-alive: between requests
  Micros write_timeout = 30 * kSecond;   // no progress writing an answer or stream chunk
  std::size_t max_header_bytes = 64 * 1024;        // request line + headers; more: 431
  std::size_t max_body_bytes = 4 * 1024 * 1024;    // decoded body; more: 413
  int workers = 8;                  // threads running handlers
  int max_workers_per_user = 2;     // handlers running for one identity at once; more wait
  int max_streams = 64;             // concurrent streaming answers (logs --follow)
  int max_streams_per_user = 16;
  // Checks ranges; the message names the limit and the value.
  Status Validate() const;
};

struct HttpRequest {
  std::string method;
  std::string path;                            // without the query string
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  Peer peer;
};

// Streaming body: called once; `write` sends one chunk and returns false when the client went
// away. Return when done.
using StreamWriter = std::function<bool(std::string_view chunk)>;
using StreamBody = std::function<void(const StreamWriter& write)>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  StreamBody stream;  // when set, sent chunked instead of body
  // More header lines, e.g. {"Content-Security-Policy", "..."}; set by handlers only (never
  // from request bytes). Every answer also carries X-Content-Type-Options: nosniff and, unless
  // given here, Cache-Control: no-store (API views are live state, never cached).
  std::vector<std::pair<std::string, std::string>> headers;
};

using Handler = std::function<HttpResponse(const HttpRequest&)>;

// Parses one request at a time from bytes fed in pieces. Strict where leniency would let a
// request mean two things (duplicate or conflicting Content-Length, Transfer-Encoding with
// Content-Length, folded or malformed header lines: 400), bounded (head > max_header_bytes:
// 431; body > max_body_bytes: 413), chunked bodies decoded (trailers read and dropped; any
// other Transfer-Encoding: 501).
class RequestParser {
 public:
  enum class State { kNeedMore, kDone, kError };
  explicit RequestParser(std::size_t max_header_bytes, std::size_t max_body_bytes)
      : max_header_(max_header_bytes), max_body_(max_body_bytes) {}

  // Consumes what it can from the front of *buf (bytes of a following request stay there).
  // kDone: request() is complete; kError: error_status()/error_message() say why.
  State Parse(std::string* buf);
  bool head_done() const { return phase_ != Phase::kHead; }
  bool started() const { return started_; }
  bool expects_continue() const { return expect_continue_; }
  bool keep_alive() const { return keep_alive_; }
  HttpRequest& request() { return req_; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_; }
  void Reset();  // ready for the next request

 private:
  enum class Phase { kHead, kBody, kChunkSize, kChunkData, kTrailer, kDone };
  State Fail(int status, std::string message);
  State ParseHead(std::string_view head);
  State ParseFrom(std::string_view buf, std::size_t* consumed);

  std::size_t max_header_;
  std::size_t max_body_;
  Phase phase_ = Phase::kHead;
  bool started_ = false;
  std::size_t scanned_ = 0;  // bytes of the head already searched for its end
  std::size_t body_len_ = 0;
  std::size_t chunk_left_ = 0;
  std::size_t trailer_bytes_ = 0;
  std::size_t wire_body_ = 0;  // chunked: bytes of body framing read, bounded too
  bool expect_continue_ = false;
  bool keep_alive_ = true;
  HttpRequest req_;
  int error_status_ = 0;
  std::string error_;
};

class HttpServer {
 public:
  explicit HttpServer(Handler handler, HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Creates the socket (replacing a stale one), mode `mode` so every local user can connect
  // (authorization is per request, from the peer's uid).
  Status ListenUnix(const std::string& path, unsigned mode = 0666);
  // "127.0.0.1:8080" (port 0: any; see tcp_port()). Requests need "Authorization: Bearer
  // <token>" with one of `identities`' tokens and act as that identity.
  Status ListenTcp(const std::string& host_port, std::vector<TcpIdentity> identities);
  int tcp_port() const { return tcp_port_; }
  // Whether a Unix-socket caller is root or an admin, who may use the share of connections and
  // streams kept for them; asked only when the ordinary share is full. Set before Start().
  void SetPrivileged(std::function<bool(const Peer&)> is_privileged) {
    is_privileged_ = std::move(is_privileged);
  }

  // Starts the event loop and the workers. Raises RLIMIT_NOFILE's soft limit toward the hard
  // limit when max_connections needs more descriptors than it allows.
  void Start();
  // Stops accepting, closes every connection, waits for handler and stream threads to return.
  void Stop();

 private:
  struct Conn;
  struct Listener {
    int fd = -1;
    bool unix_socket = false;
  };
  void Loop();
  void Accept(const Listener& l);
  void Refuse(int fd, const std::string& why);
  void OnEvent(Conn* c, std::uint32_t events);
  void OnReadable(Conn* c);
  void Flush(Conn* c);    // writes what is left of c's answer; then closes or waits for more
  void Resume(Conn* c);   // after an answer on a kept connection: next request
  void Advance(Conn* c);  // parse what is buffered; dispatch, answer an error, or wait
  void Dispatch(Conn* c);
  void FailConn(Conn* c, int status, const std::string& message);
  void CloseConn(Conn* c);
  void SetDeadline(Conn* c, std::int64_t deadline_us);
  void ExpireDeadlines();
  void TakeReturned();
  void Worker();
  // What happens to a connection after its answer: closed, kept for the next request, or
  // taken by a stream thread (which gives it back).
  enum class After { kClose, kKeep, kTaken };
  // Runs the handler for c's request; the answer's bytes go to *out (the event loop writes
  // them, so a client that does not read holds no worker).
  After Handle(Conn* c, std::string* out);
  void Stream(Conn* c, HttpResponse resp, bool close_after, const Hold& hold);
  // From a worker or stream thread to the loop, with the answer still to write (if any).
  void GiveBack(Conn* c, bool keep, std::string out = "");
  void Wake();
  void Authenticate(HttpRequest* req) const;
  // TCP: binds the connection to the identity of its first authenticated request; false when
  // it was refused (answered and closing).
  bool Identify(Conn* c, const Peer& peer);
  // Closes the oldest unauthenticated TCP connection not being answered; false: none.
  bool EvictUnauthenticated();
  bool Privileged(const Peer& p) const { return is_privileged_ && is_privileged_(p); }

  Handler handler_;
  HttpLimits limits_;
  std::vector<Listener> listeners_;
  std::string unix_path_;
  std::vector<TcpIdentity> identities_;
  std::function<bool(const Peer&)> is_privileged_;
  RefusalLog refusals_;
  int tcp_port_ = 0;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int reserve_fd_ = -1;  // kept free so an over-limit connection can still be told 503
  std::thread loop_thread_;
  std::vector<std::thread> workers_;
  bool started_ = false;
  std::atomic<bool> stopping_{false};

  // Event loop only.
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  HoldBudget conn_budget_;
  std::set<std::pair<std::int64_t, int>> unauthenticated_;  // (accepted µs, fd), TCP
  std::set<std::pair<std::int64_t, int>> deadlines_;  // (monotonic µs, fd)

  // Shared, under mu_.
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::map<std::string, std::deque<Conn*>> pending_;  // complete requests, per user
  std::deque<std::string> pending_order_;             // round robin over users with work
  struct Returned {
    Conn* conn;
    bool keep;
    std::string out;
  };
  std::vector<Returned> returned_;                    // back to the loop
  std::set<int> busy_fds_;                            // fds out with a worker or stream
  std::map<std::string, int> running_;                // handlers running, per user
  HoldBudget stream_budget_;
};

struct ClientResponse {
  int status = 0;
  std::string body;
};

// Endpoint: "/path/to.sock" or "unix:/path" for a Unix socket; "tcp://host:port" for TCP.
class HttpClient {
 public:
  explicit HttpClient(std::string endpoint, std::string token = "");
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  HttpClient(HttpClient&& o) noexcept
      : endpoint_(std::move(o.endpoint_)), token_(std::move(o.token_)), fd_(o.fd_),
        buf_(std::move(o.buf_)), sent_(o.sent_) {
    o.fd_ = -1;
  }
  HttpClient& operator=(HttpClient&&) = delete;

  // Unavailable when the daemon cannot be reached.
  Result<ClientResponse> Request(std::string_view method, std::string_view target,
                                 std::string_view body = "");
  // Whether the last Request got as far as sending (a failure after that may come after the
  // daemon acted on it); false when it could not even connect.
  bool sent() const { return sent_; }
  // GET whose answer may be chunked: calls on_chunk per chunk of a 2xx body until the stream
  // ends or on_chunk returns false; an error answer's body goes to *error_body instead.
  Result<int> Stream(std::string_view target,
                     const std::function<bool(std::string_view)>& on_chunk,
                     std::string* error_body = nullptr);

 private:
  Status Connect();
  Status Send(std::string_view method, std::string_view target, std::string_view body);
  Result<int> ReadHead(std::map<std::string, std::string>* headers);
  Result<int> ReadChunks(const std::function<bool(std::string_view)>& on_chunk);
  // One recv() appended to buf_ (EINTR retried); an error once the daemon closed.
  Status RecvMore();
  Result<std::string> ReadExact(size_t n);
  // The body of an answer without Transfer-Encoding: Content-Length bytes (none: empty). A bad
  // or too large Content-Length closes the connection and is an error naming the value.
  Result<std::string> ReadSizedBody(const std::map<std::string, std::string>& headers);
  Result<std::string> ReadLine();
  void Close();

  std::string endpoint_;
  std::string token_;
  int fd_ = -1;
  std::string buf_;
  bool sent_ = false;
};

// Percent-decoding for query strings; '+' is a space.
std::string UrlDecode(std::string_view s);
std::string UrlEncode(std::string_view s);

}  // namespace gpuslice::api
