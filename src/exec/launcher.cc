#include "exec/launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "exec/proc.h"

namespace gpuslice::exec {
namespace {

// Writes a message to fd with only async-signal-safe calls (used in the forked child).
void ChildSay(int fd, const char* a, const char* b) {
  auto put = [fd](const char* s) {
    size_t n = std::strlen(s);
    while (n > 0) {
      ssize_t w = write(fd, s, n);
      if (w <= 0) return;
      s += w;
      n -= static_cast<size_t>(w);
    }
  };
  put("gpuslice: ");
  put(a);
  put(b);
  put(": ");
  put(strerror(errno));  // not strictly async-signal-safe; the child is single-threaded here
  put("\n");
}

// Everything the child needs, built before fork so the child does not allocate.
struct Prepared {
  std::vector<std::string> argv_store, env_store;
  std::vector<char*> argv, envp;
  std::vector<gid_t> groups;
  std::string cwd;
  bool switch_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

Result<Prepared> Prepare(const LaunchSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return InvalidArgument("command: empty (give a program after --)");
  }
  Prepared p;
  p.argv_store = spec.argv;
  for (const auto& [k, v] : spec.env) p.env_store.push_back(k + "=" + v);
  for (auto& s : p.argv_store) p.argv.push_back(s.data());
  p.argv.push_back(nullptr);
  for (auto& s : p.env_store) p.envp.push_back(s.data());
  p.envp.push_back(nullptr);
  p.cwd = spec.cwd.empty() ? "/" : spec.cwd;

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
    p.groups.resize(static_cast<size_t>(n));
    if (!spec.user.empty()) {
      if (getgrouplist(spec.user.c_str(), p.gid, p.groups.data(), &n) < 0) {
        p.groups.resize(static_cast<size_t>(n));
        getgrouplist(spec.user.c_str(), p.gid, p.groups.data(), &n);
      }
      p.groups.resize(static_cast<size_t>(n));
    } else {
      p.groups = {p.gid};
    }
  }
  return p;
}

// Puts the child in its own cgroup v2 (best effort; the process group is what we rely on).
void JoinCgroup(const LaunchSpec& spec, pid_t pid) {
  if (spec.cgroup_parent.empty()) return;
  std::string dir = fmt::format("{}/job-{}", spec.cgroup_parent, spec.job.value());
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return;
  std::ofstream(dir + "/cgroup.procs") << pid << "\n";
}

class ProcessLauncher final : public Launcher {
 public:
  Result<ProcessHandle> Start(const LaunchSpec& spec,
                              const std::function<Status(const ProcessHandle&)>& commit) override {
    GPUSLICE_ASSIGN_OR_RETURN(Prepared p, Prepare(spec));
    int log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (log_fd < 0) {
      return Internal(fmt::format("log '{}': {}", spec.log_path, std::strerror(errno)));
    }
    if (p.switch_user && fchown(log_fd, p.uid, p.gid) != 0) {
      // The daemon still reads it; the user just cannot read it directly. Not fatal.
    }
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) {
      close(log_fd);
      return Internal(fmt::format("pipe: {}", std::strerror(errno)));
    }
    pid_t pid = fork();
    if (pid < 0) {
      close(log_fd);
      close(go[0]);
      close(go[1]);
      return Internal(fmt::format("fork: {}", std::strerror(errno)));
    }
    if (pid == 0) RunChild(p, log_fd, go[0], go[1]);  // never returns

    setpgid(pid, pid);  // also done by the child: whichever runs first wins the race
    close(go[0]);
    close(log_fd);
    JoinCgroup(spec, pid);
    ProcessHandle h{pid, ProcessStartTicks(pid).value_or(0), false};
    Status st = commit(h);
    if (!st.ok()) {
      close(go[1]);  // EOF: the child exits without running the job
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return st;
    }
    char g = 'G';
    if (write(go[1], &g, 1) != 1) {
      // Child already gone (killed externally): Poll will report it.
    }
    close(go[1]);
    return h;
  }

  Status Signal(const ProcessHandle& h, int sig) override {
    if (h.pid <= 0) return InvalidArgument("pid: 0");
    if (kill(-h.pid, sig) != 0 && errno != ESRCH) {
      return Internal(fmt::format("kill -{} -{}: {}", sig, h.pid, std::strerror(errno)));
    }
    return Status::Ok();
  }

  std::optional<ExitInfo> Poll(const ProcessHandle& h) override {
    std::lock_guard lock(mu_);
    auto it = reaped_.find(h.pid);
    if (it == reaped_.end()) {
      ExitInfo info;
      if (h.adopted) {
        auto ticks = ProcessStartTicks(h.pid);
        if (ticks && *ticks == h.start_ticks) return std::nullopt;
      } else {
        int status = 0;
        pid_t r = waitpid(h.pid, &status, WNOHANG);
        if (r == 0) return std::nullopt;
        if (r == h.pid) {
          if (WIFEXITED(status)) info.exit_code = WEXITSTATUS(status);
          if (WIFSIGNALED(status)) info.signal = WTERMSIG(status);
        }
        // r < 0 (ECHILD): someone else reaped it; status unknown.
      }
      it = reaped_.emplace(h.pid, info).first;
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
  [[noreturn]] static void RunChild(const Prepared& p, int log_fd, int go_r, int go_w) {
    close(go_w);
    setpgid(0, 0);
    // Wait for the daemon's go-ahead; EOF means it died before recording our pid.
    char g = 0;
    ssize_t n;
    do {
      n = read(go_r, &g, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1 || g != 'G') _exit(126);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    syscall(SYS_close_range, 3u, ~0u, 0u);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (p.switch_user) {
      if (setgroups(p.groups.size(), p.groups.data()) != 0) {
        ChildSay(2, "setgroups", "");
        _exit(127);
      }
      if (setgid(p.gid) != 0) {
        ChildSay(2, "setgid", "");
        _exit(127);
      }
      if (setuid(p.uid) != 0) {
        ChildSay(2, "setuid", "");
        _exit(127);
      }
    }
    if (chdir(p.cwd.c_str()) != 0) {
      ChildSay(2, "chdir ", p.cwd.c_str());
      _exit(127);
    }
    execvpe(p.argv[0], p.argv.data(), p.envp.data());
    ChildSay(2, "exec ", p.argv[0]);
    _exit(127);
  }

  std::mutex mu_;
  std::map<int, ExitInfo> reaped_;  // leaders reaped whose group still has members
};

}  // namespace

std::unique_ptr<Launcher> NewProcessLauncher() { return std::make_unique<ProcessLauncher>(); }

bool CanSwitchUsers() { return geteuid() == 0; }

}  // namespace gpuslice::exec
