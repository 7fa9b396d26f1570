#include "slurm/process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

extern char** environ;

namespace gpuslice::slurm {
namespace {

// Pipe ends that close themselves; -1 when closed.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

Status MakePipe(Fd& read_end, Fd& write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  read_end.fd = p[0];
  write_end.fd = p[1];
  return Status::Ok();
}

std::vector<std::string> BuildEnv(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string_view::npos && extra.count(std::string(kv.substr(0, eq))) > 0) continue;
    env.emplace_back(kv);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

long long NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<CommandResult> RunCommand(const CommandSpec& spec) {
  if (spec.argv.empty()) return InvalidArgument("RunCommand: empty argv");
  Fd in_r, in_w, out_r, out_w, err_r, err_w, exec_r, exec_w;
  GPUSLICE_RETURN_IF_ERROR(MakePipe(in_r, in_w));
  GPUSLICE_RETURN_IF_ERROR(MakePipe(out_r, out_w));
  GPUSLICE_RETURN_IF_ERROR(MakePipe(err_r, err_w));
  GPUSLICE_RETURN_IF_ERROR(MakePipe(exec_r, exec_w));  // carries errno if exec fails

  // Everything the child needs is prepared before fork: only async-signal-safe calls after.
  std::vector<std::string> env_strings = BuildEnv(spec.env);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) return Internal(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in_r.fd, 0);
    ::dup2(out_w.fd, 1);
    ::dup2(err_w.fd, 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    ssize_t ignored = ::write(exec_w.fd, &e, sizeof e);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so a kill below cannot miss the group
  in_r.Close();
  out_w.Close();
  err_w.Close();
  exec_w.Close();

  int exec_errno = 0;
  if (::read(exec_r.fd, &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
    ::waitpid(pid, nullptr, 0);
    return Unavailable(fmt::format("cannot run '{}': {}", spec.argv[0], std::strerror(exec_errno)));
  }

  CommandResult result;
  size_t stdin_off = 0;
  if (spec.stdin_text.empty()) in_w.Close();
  else ::fcntl(in_w.fd, F_SETFL, O_NONBLOCK);
  const long long deadline = NowMs() + spec.timeout / kMillisecond;
  bool timed_out = false;
  while (out_r.fd >= 0 || err_r.fd >= 0) {
    long long left = deadline - NowMs();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    if (out_r.fd >= 0) fds[n++] = {out_r.fd, POLLIN, 0};
    if (err_r.fd >= 0) fds[n++] = {err_r.fd, POLLIN, 0};
    if (in_w.fd >= 0) fds[n++] = {in_w.fd, POLLOUT, 0};
    int rc = ::poll(fds, n, static_cast<int>(left));
    if (rc < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in_w.fd) {
        // A child that exits without reading its stdin (sbatch refusing an option) raised
        // SIGPIPE, which ends the CLI silently: blocked in this thread for the write, a pending
        // one swallowed (as devices/subprocess.cc does), so the write fails with EPIPE instead.
        sigset_t pipe_set, old_set;
        sigemptyset(&pipe_set);
        sigaddset(&pipe_set, SIGPIPE);
        ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
        ssize_t w = ::write(in_w.fd, spec.stdin_text.data() + stdin_off,
                            spec.stdin_text.size() - stdin_off);
        const timespec zero{0, 0};
        while (::sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
        }
        ::pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
        if (w > 0) stdin_off += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) in_w.Close();
        if (stdin_off == spec.stdin_text.size()) in_w.Close();
        continue;
      }
      char buf[8192];
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      Fd& which = fds[i].fd == out_r.fd ? out_r : err_r;
      if (r > 0) (fds[i].fd == out_r.fd ? result.out : result.err).append(buf, static_cast<size_t>(r));
      else if (r == 0 || errno != EINTR) which.Close();
    }
  }
  in_w.Close();
  if (timed_out) ::kill(-pid, SIGKILL);
  int wstatus = 0;
  // The pipes are closed or the group is killed; wait for the child itself, bounded as well
  // (a child that closed its stdout early but keeps running counts against the deadline).
  while (true) {
    pid_t w = ::waitpid(pid, &wstatus, timed_out ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (NowMs() >= deadline) {
      timed_out = true;
      ::kill(-pid, SIGKILL);
      continue;
    }
    ::usleep(2000);
  }
  if (timed_out) {
    return Status(StatusCode::kDeadlineExceeded,
                  fmt::format("'{}' did not finish within {}", ShellJoin(spec.argv),
                              FormatDuration(spec.timeout)));
  }
  if (WIFEXITED(wstatus)) result.exit_code = WEXITSTATUS(wstatus);
  else if (WIFSIGNALED(wstatus)) result.exit_code = 128 + WTERMSIG(wstatus);
  return result;
}

std::string ShellQuote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-+=./:,@%") == std::string::npos) {
    return word;
  }
  std::string q = "'";
  for (char c : word) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

std::string ShellJoin(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) {
    if (!s.empty()) s += ' ';
    s += ShellQuote(w);
  }
  return s;
}

}  // namespace gpuslice::slurm
