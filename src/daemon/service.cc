#include "daemon/service.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

namespace gpuslice::daemon {
namespace {

// "%*" in the pattern: the line's syslog priority as sd-daemon(3) reads it ("<3>" for error).
class PriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    int priority = 6;  // info
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug: priority = 7; break;
      case spdlog::level::info: priority = 6; break;
      case spdlog::level::warn: priority = 4; break;
      case spdlog::level::err: priority = 3; break;
      case spdlog::level::critical: priority = 2; break;
      default: break;
    }
    const char text[3] = {'<', static_cast<char>('0' + priority), '>'};
    dest.append(text, text + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<PriorityFlag>();
  }
};

}  // namespace

Status NotifySocket(const std::string& socket_path, std::string_view state) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path) ||
      (socket_path[0] != '/' && socket_path[0] != '@')) {
    return InvalidArgument(fmt::format("NOTIFY_SOCKET '{}': not an absolute or abstract socket path",
                                       socket_path));
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path.size());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(fmt::format("NOTIFY_SOCKET: socket: {}", std::strerror(errno)));
  const ssize_t n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&addr), len);
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(state.size())) {
    return Unavailable(fmt::format("NOTIFY_SOCKET '{}': {}", socket_path,
                                   n < 0 ? std::strerror(err) : "short write"));
  }
  return Status::Ok();
}

namespace {
std::string& AdoptedSocket() {
  static std::string socket;
  return socket;
}
}  // namespace

void AdoptNotifySocket() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (socket == nullptr) return;
  AdoptedSocket() = socket;
  unsetenv("NOTIFY_SOCKET");
}

Status NotifyService(std::string_view state) {
  if (AdoptedSocket().empty()) return Status::Ok();
  return NotifySocket(AdoptedSocket(), state);
}

bool LogIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  struct stat st {};
  if (fstat(STDOUT_FILENO, &st) != 0) return false;
  return fmt::format("{}:{}", st.st_dev, st.st_ino) == stream;
}

void ConfigureServeLogging() {
  if (!LogIsJournal()) {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    return;
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<PriorityFlag>('*').set_pattern("%*%l %v");
  spdlog::set_formatter(std::move(formatter));
}

}  // namespace gpuslice::daemon
