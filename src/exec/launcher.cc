#include "exec/launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "exec/proc.h"

namespace gpuslice::exec {
namespace {

// Everything the job needs, serialized for the exec stub (wire format in stub.cc).
struct Prepared {
  std::string message;
  bool switch_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

void Field(std::string& out, std::string_view s) {
  out.append(s);
  out.push_back('\0');
}

Result<Prepared> Prepare(const LaunchSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return InvalidArgument("command: empty (give a program after --)");
  }
  for (const auto& a : spec.argv) {
    if (a.find('\0') != std::string::npos) return InvalidArgument("command: an argument contains a NUL byte");
  }
  for (const auto& [k, v] : spec.env) {
    if (k.empty() || k.find_first_of(std::string_view("=\0", 2)) != std::string::npos ||
        v.find('\0') != std::string::npos) {
      return InvalidArgument(fmt::format("env: '{}' is not a valid variable name or value", k));
    }
  }
  if (spec.status_path.empty() || spec.status_path[0] != '/' ||
      spec.status_path.find('\0') != std::string::npos) {
    return InvalidArgument(fmt::format("status path: '{}' is not an absolute path", spec.status_path));
  }
  Prepared p;
  std::vector<gid_t> groups;
  const bool as_other = spec.uid >= 0 && static_cast<uid_t>(spec.uid) != geteuid();
  if (as_other) {
    if (!CanSwitchUsers()) {
      return PermissionDenied(fmt::format(
          "uid {}: this daemon runs as uid {} and can start jobs only as itself", spec.uid,
          geteuid()));
    }
    p.switch_user = true;
    p.uid = static_cast<uid_t>(spec.uid);
    p.gid = static_cast<gid_t>(spec.gid >= 0 ? spec.gid : spec.uid);
    int n = 64;
    groups.resize(static_cast<size_t>(n));
    if (!spec.user.empty()) {
      if (getgrouplist(spec.user.c_str(), p.gid, groups.data(), &n) < 0) {
        groups.resize(static_cast<size_t>(n));
        getgrouplist(spec.user.c_str(), p.gid, groups.data(), &n);
      }
      groups.resize(static_cast<size_t>(n));
    } else {
      groups = {p.gid};
    }
  }
  std::string& m = p.message;
  Field(m, "GSX2");
  Field(m, spec.status_path);
  Field(m, p.switch_user ? std::to_string(p.uid) : "-");
  Field(m, p.switch_user ? std::to_string(p.gid) : "-");
  Field(m, std::to_string(groups.size()));
  for (gid_t g : groups) Field(m, std::to_string(g));
  Field(m, spec.cwd.empty() ? "/" : spec.cwd);
  Field(m, std::to_string(spec.argv.size()));
  for (const auto& a : spec.argv) Field(m, a);
  Field(m, std::to_string(spec.env.size()));
  for (const auto& [k, v] : spec.env) Field(m, k + "=" + v);
  // Optional last field: the job's umask (the stub keeps its own, the daemon's 077, without it).
  if (spec.umask >= 0) Field(m, std::to_string(spec.umask & 0777));
  return p;
}

// Writes all of `data` to a socket; false if the peer is gone.
bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t w = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data.remove_prefix(static_cast<size_t>(w));
  }
  return true;
}

bool IsExecutable(const std::filesystem::path& p) {
  return access(p.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(p);
}

// Puts the child in its own cgroup v2 (best effort; the process group is what we rely on).
void JoinCgroup(const LaunchSpec& spec, pid_t pid) {
  if (spec.cgroup_parent.empty()) return;
  std::string dir = fmt::format("{}/job-{}", spec.cgroup_parent, spec.job.value());
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return;
  std::ofstream(dir + "/cgroup.procs") << pid << "\n";
}

// Sends the first bytes of `data` with `fd` attached (SCM_RIGHTS), then the rest.
bool SendWithFd(int sock, int fd, std::string_view data) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<char*>(data.data()), data.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  ssize_t w;
  do {
    w = sendmsg(sock, &mh, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  if (w <= 0) return false;
  return SendAll(sock, data.substr(static_cast<size_t>(w)));
}

class ProcessLauncher final : public Launcher {
 public:
  ProcessLauncher(std::string stub, int ready) : stub_(std::move(stub)), want_(ready) {
    if (want_ > 0 && !stub_.empty()) refill_ = std::thread([this] { RefillLoop(); });
  }

  ~ProcessLauncher() override {
    {
      std::lock_guard lock(pool_mu_);
      stopping_ = true;
    }
    pool_cv_.notify_all();
    if (refill_.joinable()) refill_.join();
    for (const Stub& s : pool_) Discard(s);  // EOF: each exits at once, having run nothing
  }

  Result<ProcessHandle> Start(const LaunchSpec& spec,
                              const std::function<Status(const ProcessHandle&)>& commit) override {
    GPUSLICE_ASSIGN_OR_RETURN(Prepared p, Prepare(spec));
    if (stub_.empty()) {
      return Unavailable(
          "gpuslice-exec: not found next to this program, in ../libexec/gpuslice/ or the build "
          "tree; it starts every job (reinstall gpuslice)");
    }
    // Private (0600, whatever the umask): logs are read through the API, which checks the
    // caller. O_NOFOLLOW: the path is the daemon's, never a link someone planted.
    int log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (log_fd < 0) {
      return Internal(fmt::format("log '{}': {}", spec.log_path, std::strerror(errno)));
    }
    (void)fchmod(log_fd, 0600);  // also one an older version left readable
    if (p.switch_user && fchown(log_fd, p.uid, p.gid) != 0) {
      // The daemon still reads it; the user just cannot read it directly. Not fatal.
    }
    // A stub spawned ahead of time if one is ready (the spawn is most of the start's cost), else
    // a fresh one. The job's description and log go out before the commit; the stub holds them
    // until the go-ahead.
    Result<Stub> stub = TakeReady();
    if (stub.ok() && !SendWithFd(stub->sock, log_fd, p.message)) {
      Discard(*stub);  // died while waiting (killed from outside)
      stub = Internal("stub gone");
    }
    if (!stub.ok()) {
      stub = SpawnStub();
      if (stub.ok() && !SendWithFd(stub->sock, log_fd, p.message)) {
        Discard(*stub);
        stub = Internal(fmt::format("job {}: {} exited before taking the job", spec.job.value(), stub_));
      }
    }
    close(log_fd);
    if (!stub.ok()) return stub.status();
    JoinCgroup(spec, stub->pid);
    ProcessHandle h{stub->pid, stub->start_ticks, false, spec.status_path};
    Status st = commit(h);
    if (!st.ok()) {
      kill(stub->pid, SIGKILL);
      Discard(*stub);  // EOF without the go-ahead: it would not have run the job anyway
      return st;
    }
    if (!SendAll(stub->sock, "G")) {
      // The stub is already gone (killed externally): Poll will report it.
    }
    close(stub->sock);
    return h;
  }

  Status Signal(const ProcessHandle& h, int sig) override {
    if (h.pid <= 0) return InvalidArgument("pid: 0");
    if (sig == SIGKILL && ProcessStartTicks(h.pid) == h.start_ticks) {
      // The stub still waits for the job: kill the rest of the group and spare it, so it
      // records how the job ended. Stopping the group first keeps a forking job from adding
      // members between the scan and the kill (a group signal racing fork reaches the child).
      kill(-h.pid, SIGSTOP);
      for (int pid : ProcessGroupMembers(h.pid)) {
        if (pid != h.pid) kill(pid, SIGKILL);
      }
      kill(h.pid, SIGCONT);
      return Status::Ok();
    }
    if (kill(-h.pid, sig) != 0 && errno != ESRCH) {
      return Internal(fmt::format("kill -{} -{}: {}", sig, h.pid, std::strerror(errno)));
    }
    return Status::Ok();
  }

  std::optional<ExitInfo> Poll(const ProcessHandle& h) override {
    std::lock_guard lock(mu_);
    auto it = reaped_.find(h.pid);
    if (it == reaped_.end()) {
      if (h.adopted) {
        auto ticks = ProcessStartTicks(h.pid);
        if (ticks && *ticks == h.start_ticks) return std::nullopt;
      } else {
        // Reaped only to free the pid; the stub's own exit status is not the job's (a killed
        // stub and a job killed by the same signal would look alike).
        pid_t r = waitpid(h.pid, nullptr, WNOHANG);
        if (r == 0) return std::nullopt;
      }
      // The stub has ended: having recorded the job's end, or killed before it could.
      it = reaped_.emplace(h.pid, ReadStatusFile(h.status_path, h.pid)).first;
    }
    ExitInfo out = it->second;
    out.group_gone = !ProcessGroupAlive(h.pid);
    if (out.group_gone) reaped_.erase(it);  // the pid may be reused from now on
    return out;
  }

  bool StillAlive(const ProcessHandle& h) override {
    auto ticks = ProcessStartTicks(h.pid);
    return (ticks && *ticks == h.start_ticks) || ProcessGroupAlive(h.pid);
  }

 private:
  // A spawned stub waiting for its job on `sock`.
  struct Stub {
    pid_t pid = 0;
    std::uint64_t start_ticks = 0;
    int sock = -1;
  };

  // posix_spawn (clone with CLONE_VM | CLONE_VFORK in glibc): no copy of the daemon's page
  // tables and no copy-on-write sharing afterwards. stdin/stdout/stderr are /dev/null until the
  // stub gets the job's log; it leads its own process group from the start.
  Result<Stub> SpawnStub() const {
    int sv[2];  // sv[0]: the stub's fd 3; sv[1]: ours
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      return Internal(fmt::format("socketpair: {}", std::strerror(errno)));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    for (int fd : {0, 1, 2}) posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, sv[0], 3);  // also clears close-on-exec when sv[0] == 3
    // Every signal blocked, every disposition default, from the stub's first instruction: a
    // stop or cancel sent to the group right after the go-ahead (before the stub's own
    // sigprocmask) stays pending for the job instead of killing the stub unrecorded.
    sigset_t all;
    sigfillset(&all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &all);
    posix_spawnattr_setsigdefault(&attr, &all);
    std::string name = "gpuslice-exec", tag = "waiting-for-a-job";  // what `ps` shows
    char* argv[] = {name.data(), tag.data(), nullptr};
    char* envp[] = {nullptr};
    Stub s;
    int err = posix_spawn(&s.pid, stub_.c_str(), &fa, &attr, argv, envp);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[0]);
    if (err != 0) {
      close(sv[1]);
      return Internal(fmt::format("start {}: {}", stub_, std::strerror(err)));
    }
    s.sock = sv[1];
    s.start_ticks = ProcessStartTicks(s.pid).value_or(0);
    return s;
  }

  static void Discard(const Stub& s) {
    close(s.sock);
    waitpid(s.pid, nullptr, 0);
  }

  Result<Stub> TakeReady() {
    std::lock_guard lock(pool_mu_);
    if (pool_.empty()) return NotFound("no stub ready");
    Stub s = pool_.front();
    pool_.pop_front();
    pool_cv_.notify_all();
    return s;
  }

  // Keeps `want_` stubs ready. A failing spawn is retried after a second; Start then spawns
  // its own and reports the error.
  void RefillLoop() {
    std::unique_lock lock(pool_mu_);
    while (!stopping_) {
      if (static_cast<int>(pool_.size()) >= want_) {
        pool_cv_.wait(lock);
        continue;
      }
      lock.unlock();
      Result<Stub> s = SpawnStub();
      lock.lock();
      if (s.ok()) {
        pool_.push_back(*s);
      } else {
        pool_cv_.wait_for(lock, std::chrono::seconds(1));
      }
    }
  }

  const std::string stub_;
  const int want_;
  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::deque<Stub> pool_;
  bool stopping_ = false;
  std::thread refill_;
  std::mutex mu_;
  std::map<int, ExitInfo> reaped_;  // leaders reaped whose group still has members
};

}  // namespace

ExitInfo ReadStatusFile(const std::string& path, int pid) {
  ExitInfo info;
  if (path.empty()) return info;
  std::ifstream in(path);
  std::string key;
  long long value = 0;
  if (!(in >> key >> value) || key != "pid" || value != pid) return info;  // another run's
  if (!(in >> key >> value) || value < 0 || value > 255) return info;
  if (key == "exit") info.exit_code = static_cast<int>(value);
  if (key == "signal" && value > 0) info.signal = static_cast<int>(value);
  if (key == "never-started") info.never_started = true;
  return info;
}

std::string FindExecStub() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path dir = exe.parent_path();
#ifndef GPUSLICE_INSTALL_LIBEXECDIR
#define GPUSLICE_INSTALL_LIBEXECDIR "libexec"
#endif
    // The install layout: <prefix>/bin/gpuslice and <prefix>/<libexecdir>/gpuslice/.
    for (const auto& candidate : {dir / "gpuslice-exec",
                                  dir / ".." / GPUSLICE_INSTALL_LIBEXECDIR / "gpuslice" / "gpuslice-exec"}) {
      if (IsExecutable(candidate)) return std::filesystem::weakly_canonical(candidate, ec).string();
    }
  }
#ifdef GPUSLICE_EXEC_STUB_BUILD
  if (IsExecutable(GPUSLICE_EXEC_STUB_BUILD)) return GPUSLICE_EXEC_STUB_BUILD;
#endif
  return "";
}

std::unique_ptr<Launcher> NewProcessLauncher(std::string stub, int ready) {
  if (stub.empty()) stub = FindExecStub();
  return std::make_unique<ProcessLauncher>(std::move(stub), ready);
}

bool CanSwitchUsers() { return geteuid() == 0; }

}  // namespace gpuslice::exec
