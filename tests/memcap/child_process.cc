#include "child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace gpuslice::memcap::testing {

ChildProcess::ChildProcess(const std::string& path, const EnvList& env,
                           const std::vector<std::string>& args) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return;
  }
  // Everything the child needs is built before fork (no allocation after it).
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> arg_strings{path};
  arg_strings.insert(arg_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    execve(path.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return;
  }
  pid_ = pid;
  to_child_ = in[1];
  from_child_ = out[0];
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) Kill();
}

std::string ChildProcess::Send(const std::string& line) {
  if (pid_ <= 0) return "";
  std::string msg = line + "\n";
  if (write(to_child_, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) return "";
  for (;;) {
    if (auto nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string reply = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return reply;
    }
    pollfd pfd{from_child_, POLLIN, 0};
    if (poll(&pfd, 1, 30000) <= 0) return "";
    char buf[4096];
    ssize_t n = read(from_child_, buf, sizeof buf);
    if (n <= 0) return "";
    buffered_.append(buf, static_cast<std::size_t>(n));
  }
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  close(to_child_);
  close(from_child_);
  pid_ = -1;
}

int ChildProcess::Finish() {
  if (pid_ <= 0) return -1;
  close(to_child_);
  int status = 0;
  waitpid(pid_, &status, 0);
  close(from_child_);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace gpuslice::memcap::testing
