#include "devices/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace gpuslice::devices {
namespace {

Micros SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool IsExecutable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

Result<std::string> FindExecutable(const std::string& program) {
  if (program.empty()) return InvalidArgument("program name is empty");
  if (program.find('/') != std::string::npos) {
    if (IsExecutable(program)) return program;
    return NotFound(fmt::format("'{}' is not an executable file", program));
  }
  const char* path = std::getenv("PATH");
  const std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t pos = 0;
  while (true) {
    const std::size_t colon = dirs.find(':', pos);
    std::string_view dir = dirs.substr(pos, colon == std::string_view::npos ? dirs.npos : colon - pos);
    std::string candidate = fmt::format("{}/{}", dir.empty() ? std::string_view(".") : dir, program);
    if (IsExecutable(candidate)) return candidate;
    if (colon == std::string_view::npos) break;
    pos = colon + 1;
  }
  return NotFound(fmt::format("'{}' not found on PATH", program));
}

Result<ProcessResult> RunProcess(const std::vector<std::string>& argv, const RunOptions& options) {
  if (argv.empty()) return InvalidArgument("RunProcess: empty argv");
  GPUSLICE_ASSIGN_OR_RETURN(std::string exe, FindExecutable(argv[0]));

  // Everything the child needs is built before fork(): only async-signal-safe calls after.
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    std::string key(kv.substr(0, kv.find('=')));
    if (!options.env.contains(key)) env_strings.emplace_back(kv);
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(fmt::format("{}={}", k, v));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  int in_pipe[2] = {-1, -1};
  int out_pipe[2] = {-1, -1};
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return Unavailable(fmt::format("pipe: {}", std::strerror(errno)));
  if (options.capture_output && ::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(in_pipe[0]);
    ::close(in_pipe[1]);
    return Unavailable(fmt::format("pipe: {}", std::strerror(errno)));
  }
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);

  const pid_t pid = ::fork();
  if (pid < 0) return Unavailable(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::dup2(in_pipe[0], 0);
    const int out = options.capture_output ? out_pipe[1] : devnull;
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::execve(exe.c_str(), argp.data(), envp.data());
    ::_exit(127);
  }
  ::close(in_pipe[0]);
  if (options.capture_output) ::close(out_pipe[1]);
  if (devnull >= 0) ::close(devnull);

  // The input is small (a control command): write it all, then close so the child sees EOF.
  // A child that exits without reading would raise SIGPIPE: block it in this thread only and
  // swallow a pending one, leaving the process-wide disposition alone.
  {
    sigset_t pipe_set, old_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
    std::size_t off = 0;
    while (off < options.stdin_text.size()) {
      ssize_t n = ::write(in_pipe[1], options.stdin_text.data() + off, options.stdin_text.size() - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    const timespec zero{0, 0};
    while (::sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
    }
    ::pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  }
  ::close(in_pipe[1]);

  ProcessResult result;
  const Micros deadline = SteadyMicros() + options.timeout;
  bool timed_out = false;
  if (options.capture_output) {
    char buf[4096];
    while (true) {
      const Micros left = deadline - SteadyMicros();
      if (left <= 0) { timed_out = true; break; }
      pollfd pfd{out_pipe[0], POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(std::min<Micros>(left / 1000 + 1, 100)));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) continue;
      ssize_t n = ::read(out_pipe[0], buf, sizeof(buf));
      if (n <= 0) break;  // EOF: the child (and anything it forked with our pipe) closed it
      if (result.output.size() < (1 << 20)) result.output.append(buf, static_cast<std::size_t>(n));
    }
    ::close(out_pipe[0]);
  }
  int status = 0;
  while (true) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return Internal(fmt::format("waitpid: {}", std::strerror(errno)));
    if (timed_out || SteadyMicros() > deadline) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (timed_out) {
    return Status(StatusCode::kDeadlineExceeded,
                  fmt::format("'{}' did not finish within {} ms", argv[0], options.timeout / 1000));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace gpuslice::devices
