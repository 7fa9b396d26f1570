#pragma once
// Running a program in a test and reading what it printed: the gpuslice CLI, serve when it
// must refuse to start, doctor. Header-only; each call forks its own child (thread-compatible).

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace gpuslice::testing {

// Runs argv (argv[0] a path) in `cwd` ("" : this directory), as `as_uid` (and its gid; -1: as
// this process), with stdout and stderr together in *out (may be null). Returns the exit code,
// or 128 + the signal that ended it; 97-99 when the child could not become the user or enter
// the directory, 127 when argv[0] could not be run.
inline int RunProgram(const std::vector<std::string>& argv, std::string* out, int as_uid = -1,
                      const std::string& cwd = "") {
  int pipefd[2];
  if (pipe(pipefd) != 0) return 96;
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    close(pipefd[1]);
    if (as_uid >= 0 && (setgroups(0, nullptr) != 0 || setgid(static_cast<gid_t>(as_uid)) != 0 ||
                        setuid(static_cast<uid_t>(as_uid)) != 0)) {
      _exit(99);
    }
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(98);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(pipefd[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace gpuslice::testing
