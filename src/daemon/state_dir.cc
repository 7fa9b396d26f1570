#include "daemon/state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

std::string_view KindOf(mode_t m) {
  if (S_ISREG(m)) return "regular file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISLNK(m)) return "symlink";
  if (S_ISFIFO(m)) return "fifo";
  if (S_ISSOCK(m)) return "socket";
  return "special file";
}

// Removes group/other permissions from `path`; logs what changed. Through a descriptor
// opened with O_NOFOLLOW, so a symlink swapped in (while the directory was still loose) makes
// it change nothing rather than some other file.
void Tighten(const std::string& path, mode_t want) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat sb {};
  if (fstat(fd, &sb) == 0 && (sb.st_mode & 077) != 0) {
    if (fchmod(fd, want) == 0) {
      spdlog::warn("{}: mode {:04o} was readable by others; tightened to {:04o}", path,
                   sb.st_mode & 07777, want);
    } else {
      spdlog::warn("{}: mode {:04o} is readable by others and chmod failed: {}", path,
                   sb.st_mode & 07777, std::strerror(errno));
    }
  }
  close(fd);
}

}  // namespace

Status PrepareStateDir(const std::string& dir) {
  if (dir.empty()) return InvalidArgument("--state-dir: empty");
  struct stat sb {};
  if (lstat(dir.c_str(), &sb) != 0) {
    if (errno != ENOENT) {
      return Unavailable(fmt::format("--state-dir '{}': {}", dir, std::strerror(errno)));
    }
    std::error_code ec;
    fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec) {
      return Unavailable(fmt::format("--state-dir '{}': cannot create {}: {}", dir,
                                     parent.string(), ec.message()));
    }
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Unavailable(fmt::format("--state-dir '{}': cannot create: {}", dir, std::strerror(errno)));
    }
    if (lstat(dir.c_str(), &sb) != 0) {
      return Unavailable(fmt::format("--state-dir '{}': {}", dir, std::strerror(errno)));
    }
  }
  const uid_t me = geteuid();
  if (S_ISLNK(sb.st_mode)) {
    // A link the daemon's user (or root) made is an admin's choice; one made by anybody else
    // would hand them the store.
    if (sb.st_uid != me && sb.st_uid != 0) {
      return FailedPrecondition(fmt::format(
          "--state-dir '{}': a symlink owned by uid {}, not by this daemon's uid {} or root; "
          "refusing to keep private state behind it", dir, sb.st_uid, me));
    }
    if (stat(dir.c_str(), &sb) != 0) {
      return Unavailable(fmt::format("--state-dir '{}': {}", dir, std::strerror(errno)));
    }
  }
  if (!S_ISDIR(sb.st_mode)) {
    return FailedPrecondition(fmt::format("--state-dir '{}': a {}, not a directory", dir,
                                          KindOf(sb.st_mode)));
  }
  if (sb.st_uid != me) {
    return FailedPrecondition(fmt::format(
        "--state-dir '{}': owned by uid {}, not by this daemon's uid {}; jobs' environments and "
        "logs must stay private (chown it, or give another --state-dir)", dir, sb.st_uid, me));
  }
  Tighten(dir, 0700);
  for (const char* name : {"gpuslice.db", "gpuslice.db-wal", "gpuslice.db-shm", "lock"}) {
    Tighten(dir + "/" + name, 0600);
  }
  const std::string logs = dir + "/logs";
  if (lstat(logs.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    Tighten(logs, 0700);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(logs, ec)) {
      Tighten(e.path().string(), 0600);
    }
  }
  return Status::Ok();
}

Result<StateDirLock> StateDirLock::Acquire(const std::string& dir) {
  const std::string path = dir + "/lock";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Unavailable(fmt::format("{}: {}", path, std::strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder = "unknown";
    char buf[32] = {};
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n > 0) {
      std::string_view s(buf, static_cast<size_t>(n));
      while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
      if (!s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos) holder = s;
    }
    close(fd);
    if (err == EWOULDBLOCK) {
      return FailedPrecondition(fmt::format(
          "--state-dir '{}': in use by another gpuslice serve (pid {}, holding {}); two daemons "
          "on one state directory would both run its jobs. Stop that one, or give this one "
          "another --state-dir", dir, holder, path));
    }
    return Unavailable(fmt::format("{}: flock: {}", path, std::strerror(err)));
  }
  const std::string pid = fmt::format("{}\n", getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds without the pid; the refusal of a second daemon then says "pid unknown".
    spdlog::warn("{}: cannot record this daemon's pid: {}", path, std::strerror(errno));
  }
  return StateDirLock(fd);
}

StateDirLock::StateDirLock(StateDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

StateDirLock& StateDirLock::operator=(StateDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

StateDirLock::~StateDirLock() {
  if (fd_ >= 0) close(fd_);  // releases the flock; the file stays (its pid is then stale)
}

Status PrepareSocketPath(const std::string& path) {
  struct stat sb {};
  if (lstat(path.c_str(), &sb) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Unavailable(fmt::format("--socket '{}': {}", path, std::strerror(errno)));
  }
  if (!S_ISSOCK(sb.st_mode)) {
    return FailedPrecondition(fmt::format(
        "--socket '{}': a {} is there, not a socket; refusing to replace it (remove it "
        "yourself if it is not needed, or give another --socket)", path, KindOf(sb.st_mode)));
  }
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return Status::Ok();  // ListenUnix says why
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal(fmt::format("socket: {}", std::strerror(errno)));
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (rc == 0) {
    return FailedPrecondition(fmt::format(
        "--socket '{}': another daemon is listening there (it accepted a connection); stop it, "
        "or give this one another --socket", path));
  }
  // Only "refused" proves nobody listens; EAGAIN (a full backlog) means a live, busy daemon.
  if (err != ECONNREFUSED) {
    return FailedPrecondition(fmt::format("--socket '{}': cannot tell whether a daemon listens "
                                          "there ({}); refusing to replace it", path,
                                          std::strerror(err)));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Unavailable(fmt::format("--socket '{}': stale socket, cannot remove it: {}", path,
                                   std::strerror(errno)));
  }
  spdlog::info("removed the stale socket {} (nobody listened on it)", path);
  return Status::Ok();
}

}  // namespace gpuslice::daemon
