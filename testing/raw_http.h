#pragma once
// Raw HTTP over a Unix socket or TCP, for tests that must send what no well-behaved client would
// (broken framing, slow or oversized heads) and see the answer byte for byte. Header-only,
// no state: each call is independent and thread-safe.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpuslice::testing {

// A connected stream socket to `path`, or -1.
inline int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A TCP connection to 127.0.0.1:port from `source` (any 127.x address: loopback has millions,
// so a limit keyed by address is no limit), or -1.
inline int ConnectTcp(int port, const char* source = "127.0.0.1") {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends all of `s`, or stops at the first failure (the peer may close early on purpose).
inline void Send(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// Reads until the peer closes or `timeout` passes; returns what arrived.
inline std::string ReadUntilClosed(int fd, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  std::string out;
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (poll(&p, 1, std::max(left, 1)) <= 0) break;
    char buf[65536];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// One raw exchange on a fresh connection: sends `request`, returns all that came back ("" when
// the socket could not be reached).
inline std::string Raw(const std::string& path, std::string_view request,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  int fd = ConnectUnix(path);
  if (fd < 0) return "";
  Send(fd, request);
  std::string out = ReadUntilClosed(fd, timeout);
  close(fd);
  return out;
}

// The status code of a response, 0 when it has no status line.
inline int StatusOf(const std::string& response) {
  int status = 0;
  if (std::sscanf(response.c_str(), "HTTP/1.1 %d", &status) != 1) return 0;
  return status;
}

// Reads one answer (its head and Content-Length body) without waiting for the connection to
// close; what arrived when `timeout` passes (a streamed answer: its head and first chunks).
inline std::string ReadAnswer(int fd, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::size_t head = out.find("\r\n\r\n");
    if (head != std::string::npos) {
      const std::size_t cl = out.find("Content-Length: ");
      if (cl != std::string::npos && cl < head && out.size() >= head + 4 + std::stoul(out.substr(cl + 16))) {
        return out;
      }
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// True when the peer closes `fd` within `wait` (EOF after whatever it sent).
inline bool ClosedByPeer(int fd, std::chrono::milliseconds wait = std::chrono::milliseconds(2000)) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
  }
  return false;
}

// The body of a response parsed as JSON: null without a head, discarded when not JSON.
inline nlohmann::json BodyOf(const std::string& response) {
  size_t p = response.find("\r\n\r\n");
  if (p == std::string::npos) return nullptr;
  return nlohmann::json::parse(response.substr(p + 4), nullptr, false);
}

}  // namespace gpuslice::testing
