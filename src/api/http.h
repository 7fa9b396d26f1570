#pragma once
// A small HTTP/1.1 server and client for the gpuslice API, over a Unix socket (the caller's
// uid/gid/pid come from SO_PEERCRED, which cpp-httplib 0.11 cannot expose to handlers) and
// optionally TCP (bearer token). Keep-alive, Content-Length bodies, chunked streaming
// responses (for `logs --follow`). Only what the API needs; not a general web server.
//
// HttpServer: handlers run on one thread per connection; the handler must be thread-safe.
// HttpClient: one connection, reused; not thread-safe (one per thread).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/status.h"

namespace gpuslice::api {

// Who is calling. Unix socket: kernel-attested uid/gid/pid. TCP: the token file's owner when
// the bearer token matched; otherwise not authenticated.
struct Peer {
  bool authenticated = false;
  bool unix_socket = false;
  std::int64_t uid = -1;
  std::int64_t gid = -1;
  std::int64_t pid = 0;
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
};

using Handler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  explicit HttpServer(Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Creates the socket (replacing a stale one), mode `mode` so every local user can connect
  // (authorization is per request, from the peer's uid).
  Status ListenUnix(const std::string& path, unsigned mode = 0666);
  // "127.0.0.1:8080" (port 0: any; see tcp_port()). Requests need "Authorization: Bearer
  // <token>"; they act as uid/gid `as_uid`/`as_gid`.
  Status ListenTcp(const std::string& host_port, std::string token, std::int64_t as_uid,
                   std::int64_t as_gid);
  int tcp_port() const { return tcp_port_; }

  void Start();  // accept threads
  // Stops accepting, closes every connection, waits for handler threads to return.
  void Stop();

 private:
  struct Listener {
    int fd = -1;
    bool unix_socket = false;
  };
  void AcceptLoop(Listener l);
  void Serve(int fd, bool unix_socket);

  Handler handler_;
  std::vector<Listener> listeners_;
  std::vector<std::thread> accept_threads_;
  std::string unix_path_;
  std::string token_;
  std::int64_t token_uid_ = -1;
  std::int64_t token_gid_ = -1;
  int tcp_port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::set<int> conns_;
  int active_ = 0;
  std::condition_variable_any done_cv_;
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
        buf_(std::move(o.buf_)) {
    o.fd_ = -1;
  }
  HttpClient& operator=(HttpClient&&) = delete;

  // Unavailable when the daemon cannot be reached.
  Result<ClientResponse> Request(std::string_view method, std::string_view target,
                                 std::string_view body = "");
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
  Result<std::string> ReadExact(size_t n);
  Result<std::string> ReadLine();
  void Close();

  std::string endpoint_;
  std::string token_;
  int fd_ = -1;
  std::string buf_;
};

// Parses a request head: the request line and its header lines, without the blank line that
// ends the head. Fills method, path, query and headers; the body and the peer are the caller's.
// InvalidArgument when the request line is not "METHOD TARGET VERSION". Pure, so that it can be
// fuzzed on its own (fuzz/http_fuzz.cc).
Result<HttpRequest> ParseRequestHead(std::string_view head);

// Percent-decoding for query strings; '+' is a space.
std::string UrlDecode(std::string_view s);
std::string UrlEncode(std::string_view s);

}  // namespace gpuslice::api
