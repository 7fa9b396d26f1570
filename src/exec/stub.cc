// gpuslice-exec: the first program a job's process runs, and the job's parent until it ends
// (see launcher.h, "Start protocol" and "Results").
//
// The daemon spawns it with vfork semantics (posix_spawn), so the daemon's memory is never
// shared copy-on-write with a child while the daemon commits the job's pid: that sharing made
// every SQLite write of the commit take page faults and cost submit->start latency. The stub:
//   1. reads the job (where to record its result, credentials, cwd, argv, environment, and
//      its log as an attached descriptor) from fd 3, a socket whose other end the daemon
//      holds, while the daemon makes the pid durable;
//   2. waits for the go-ahead byte 'G' followed by EOF. EOF without it (the daemon died or the
//      commit failed) means the job must not run: exit 126, having run nothing;
//   3. forks the job: the child drops to the user (supplementary groups, gid, uid), enters
//      cwd, resets signals and execs the job with exactly the environment the daemon sent;
//   4. stays the job's parent, waits for it and records its exit status in the status file
//      (written to a temporary name, then renamed: the daemon sees all of it or nothing),
//      then exits. So the result survives the daemon: a daemon restarted after the job ended
//      reads it there.
// The stub keeps the daemon's credentials (root, in production): a job running as a user can
// neither signal nor ptrace it, nor write the status directory (0700). The daemon signals the
// job's process group, which holds the stub too: the stub ignores every catchable signal (so
// SIGTERM reaches only the job), and the daemon's SIGKILL spares it (launcher.cc). Should the
// stub die anyway (an admin's kill -9), no status file appears and the daemon records the
// result as unknown, never as success.
// The job's log arrives with the message (SCM_RIGHTS) and becomes stdout and stderr; stdin
// (/dev/null) and the process group are set up by posix_spawn. The daemon spawns stubs ahead of
// time, so one may wait idle for a while before it gets a job.
//
// Statically linked, with an empty environment of its own: nothing the submitter controls
// (LD_PRELOAD for the memory cap, GLIBC_TUNABLES, ...) applies to this root-owned step.
// Wire format on fd 3: NUL-terminated strings
//   "GSX2" status-path uid gid ngroups group... cwd argc arg... envc env... [umask]   then 'G', then EOF.
// uid/gid are "-" to keep the daemon's own credentials. Status file: "pid <stub pid>\n" then
// "exit <code>\n" or "signal <number>\n". Plain C and syscalls only: this must not pull in
// more than libc.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

constexpr int kGoFd = 3;
constexpr int kNoGoAhead = 126;  // nothing was run
constexpr int kCannotRun = 127;  // as a shell reports a command it cannot run

void Put(const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

[[noreturn]] void Fail(const char* what, const char* arg) {
  const int err = errno;
  Put("gpuslice: ");
  Put(what);
  Put(arg);
  Put(": ");
  Put(strerror(err));
  Put("\n");
  _exit(kCannotRun);
}

// A non-negative decimal, nothing else (a garbled uid must never read as 0, root).
bool ParseNumber(const char* s, long* out) {
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  errno = 0;
  *out = strtol(s, &end, 10);
  return errno == 0 && *end == '\0' && *out >= 0;
}

// The message, read whole: it is small (argv + environment) and ends only at EOF.
struct Message {
  char* data = nullptr;
  size_t size = 0;
  size_t pos = 0;

  // Next NUL-terminated field, or nullptr when the message ends early.
  char* Next() {
    if (pos >= size) return nullptr;
    char* s = data + pos;
    void* nul = memchr(s, '\0', size - pos);
    if (nul == nullptr) return nullptr;
    pos = static_cast<size_t>(static_cast<char*>(nul) - data) + 1;
    return s;
  }
  bool Number(long* out) { return ParseNumber(Next(), out); }
  // A count followed by that many fields, as a NULL-terminated array.
  char** List() {
    long n = 0;
    if (!Number(&n) || n > 1 << 20) return nullptr;
    char** v = static_cast<char**>(calloc(static_cast<size_t>(n) + 1, sizeof(char*)));
    if (v == nullptr) return nullptr;
    for (long i = 0; i < n; ++i) {
      if ((v[i] = Next()) == nullptr) return nullptr;
    }
    return v;
  }
};

// Reads to EOF; the first descriptor attached (SCM_RIGHTS) is the job's log, any other is
// closed.
bool ReadAll(int fd, Message* m, int* log_fd) {
  size_t cap = 16384;
  m->data = static_cast<char*>(malloc(cap));
  if (m->data == nullptr) return false;
  for (;;) {
    if (m->size == cap) {
      cap *= 2;
      char* bigger = static_cast<char*>(realloc(m->data, cap));
      if (bigger == nullptr) return false;
      m->data = bigger;
    }
    char control[CMSG_SPACE(4 * sizeof(int))];
    iovec iov = {m->data + m->size, cap - m->size};
    msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int got;
        memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (*log_fd < 0) {
          *log_fd = got;
        } else {
          close(got);
        }
      }
    }
    if (r == 0) return true;
    m->size += static_cast<size_t>(r);
  }
}

// Sets every signal's disposition, including the real-time signals glibc's sigaction() refuses
// to touch (32, 33): the raw system call with the kernel's struct layout. SIGKILL and SIGSTOP
// just fail. `keep_chld`: SIGCHLD stays default (SIG_IGN would reap the child for us and
// lose its status).
void SetAllSignals(void (*handler)(int), bool keep_chld) {
  struct {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
  } act = {handler, 0, nullptr, 0}, dfl = {SIG_DFL, 0, nullptr, 0};
  for (long sig = 1; sig <= 64; ++sig) {
    syscall(SYS_rt_sigaction, sig, keep_chld && sig == SIGCHLD ? &dfl : &act, nullptr,
            sizeof(act.mask));
  }
}

// Writes the job's result to `path` atomically (temporary name in the same directory, fsync,
// rename). False if it could not (the daemon then records the result as unknown).
bool Record(const char* path, const char* result) {
  char tmp[4096];
  char text[128];
  const int n = snprintf(text, sizeof(text), "pid %ld\n%s\n", static_cast<long>(getpid()), result);
  if (snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, static_cast<long>(getpid())) >= static_cast<int>(sizeof(tmp))) {
    return false;
  }
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write(fd, text, static_cast<size_t>(n)) == n && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp, path) == 0) return true;
  unlink(tmp);
  return false;
}

// The job could not be run although the daemon counted it as started: recorded as exit 126,
// so the daemon shows it failed rather than unknown.
[[noreturn]] void NotRun(const char* status_path, const char* why) {
  Put("gpuslice: ");
  Put(why);
  Put("\n");
  Record(status_path, "exit 126");
  _exit(kNoGoAhead);
}

// The value of `name` in a NULL-terminated environment, or nullptr.
const char* EnvValue(char** envp, const char* name) {
  const size_t n = strlen(name);
  for (char** e = envp; *e != nullptr; ++e) {
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  }
  return nullptr;
}

// A capped slice's process must load the memory-cap interposer: the dynamic linker only warns
// about a preloaded library it cannot open and runs the program anyway, without its cap. Returns
// the first libgpuslice-cuda entry of LD_PRELOAD this user cannot read (into `buf`), or nullptr.
const char* UnreadableCapLibrary(char** envp, char* buf, size_t size) {
  const char* cap = EnvValue(envp, "GPUSLICE_MEMCAP_BYTES");
  const char* preload = EnvValue(envp, "LD_PRELOAD");
  if (cap == nullptr || cap[0] == '\0' || strcmp(cap, "0") == 0 || preload == nullptr) return nullptr;
  for (const char* p = preload; *p != '\0';) {
    const size_t len = strcspn(p, ": ");
    if (len > 0 && len < size) {
      memcpy(buf, p, len);
      buf[len] = '\0';
      if (strstr(buf, "libgpuslice-cuda") != nullptr && access(buf, R_OK) != 0) return buf;
    }
    p += len;
    if (*p != '\0') ++p;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv_of_stub) {
  // Blocked from the start (a signal sent to the job's group between the fork and the job's
  // own reset must not be lost, see below); the job gets an empty mask.
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);

  Message m;
  int log_fd = -1;
  // The go-ahead is the last byte; anything else (EOF early, a torn message, no log) runs
  // nothing.
  if (!ReadAll(kGoFd, &m, &log_fd) || log_fd < 0 || m.size == 0 || m.data[m.size - 1] != 'G') {
    // The daemon may have been killed between committing the start and the go-ahead: the job
    // is counted as started but never ran. Say so where the daemon looks for the result (if
    // the message got as far as naming that place), so it is not taken for an unknown end.
    char* magic = m.Next();
    char* status_path = magic != nullptr && strcmp(magic, "GSX2") == 0 ? m.Next() : nullptr;
    if (status_path != nullptr && status_path[0] == '/') Record(status_path, "never-started 0");
    _exit(kNoGoAhead);
  }
  m.data[m.size - 1] = '\0';
  m.size -= 1;
  close(kGoFd);

  char* magic = m.Next();
  if (magic == nullptr || strcmp(magic, "GSX2") != 0) _exit(kNoGoAhead);
  char* status_path = m.Next();
  if (status_path == nullptr || status_path[0] != '/') _exit(kNoGoAhead);
  if (dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) NotRun(status_path, "cannot open the job's log");
  syscall(SYS_close_range, 3u, ~0u, 0u);
  // From here the daemon has counted the job as started: every outcome is recorded.
  // Credentials: "-" "-" (keep the daemon's) or two numbers; anything else runs nothing.
  char* uid_s = m.Next();
  char* gid_s = m.Next();
  long uid = -1, gid = -1;
  const bool keep = uid_s != nullptr && gid_s != nullptr && strcmp(uid_s, "-") == 0 && strcmp(gid_s, "-") == 0;
  if (!keep && !(ParseNumber(uid_s, &uid) && ParseNumber(gid_s, &gid))) {
    NotRun(status_path, "malformed job (credentials)");
  }
  long ngroups = 0;
  if (!m.Number(&ngroups) || ngroups > 65536) NotRun(status_path, "malformed job (groups)");
  gid_t* groups = static_cast<gid_t*>(calloc(static_cast<size_t>(ngroups) + 1, sizeof(gid_t)));
  for (long i = 0; i < ngroups; ++i) {
    long g = 0;
    if (groups == nullptr || !m.Number(&g)) NotRun(status_path, "malformed job (groups)");
    groups[i] = static_cast<gid_t>(g);
  }
  char* cwd = m.Next();
  char** argv = m.List();
  char** envp = m.List();
  // Optional: the submitter's umask (decimal, 0..511); without it the job keeps this one's.
  long mask = -1;
  if (m.pos != m.size && (!m.Number(&mask) || mask > 0777)) NotRun(status_path, "malformed job (umask)");
  if (cwd == nullptr || argv == nullptr || argv[0] == nullptr || envp == nullptr || m.pos != m.size) {
    NotRun(status_path, "malformed job");
  }

  // What `ps` shows for this process from now on (the same bytes, so no longer than before).
  if (argc > 1) {
    const size_t room = strlen(argv_of_stub[1]);
    memset(argv_of_stub[1], 0, room);
    memcpy(argv_of_stub[1], "job-parent", room < 10 ? room : 10);
  }
  const pid_t child = fork();
  if (child < 0) NotRun(status_path, "fork failed");
  if (child == 0) {
    // The job: every disposition back to default, nothing blocked.
    SetAllSignals(SIG_DFL, false);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!keep) {
      if (setgroups(static_cast<size_t>(ngroups), groups) != 0) Fail("setgroups", "");
      if (setgid(static_cast<gid_t>(gid)) != 0) Fail("setgid", "");
      if (setuid(static_cast<uid_t>(uid)) != 0) Fail("setuid", "");
    }
    if (mask >= 0) umask(static_cast<mode_t>(mask));
    if (chdir(cwd) != 0) Fail("chdir ", cwd);
    static char lib[4096];
    if (const char* missing = UnreadableCapLibrary(envp, lib, sizeof(lib))) {
      Fail("memory cap: not running the job without its cap: cannot read the interposer ", missing);
    }
    // The job's PATH, not this program's (empty) one, finds argv[0]: execvp searches getenv().
    environ = envp;
    execvp(argv[0], argv);
    Fail("exec ", argv[0]);
  }

  // The parent. A signal sent to the group before the fork completed reached only this
  // process (the kernel delivers a group signal racing a fork before it or to both after it):
  // pass those on to the job. Then ignore everything: what the daemon sends the group (SIGTERM
  // for a stop) is for the job.
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  for (int sig = 1; sig < 32; ++sig) {
    if (sig != SIGCHLD && sig != SIGCONT && sigismember(&pending, sig)) kill(child, sig);
  }
  SetAllSignals(SIG_IGN, true);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  int status = 0;
  pid_t r;
  do {
    r = waitpid(child, &status, 0);
  } while (r < 0 && errno == EINTR);
  char result[64];
  int code = 125;
  if (r == child && WIFEXITED(status)) {
    code = WEXITSTATUS(status);
    snprintf(result, sizeof(result), "exit %d", code);
  } else if (r == child && WIFSIGNALED(status)) {
    code = 128 + WTERMSIG(status);
    snprintf(result, sizeof(result), "signal %d", WTERMSIG(status));
  } else {
    Put("gpuslice: lost track of the job's process\n");
    _exit(125);
  }
  if (!Record(status_path, result)) {
    Put("gpuslice: cannot record the job's exit status in ");
    Put(status_path);
    Put(": ");
    Put(strerror(errno));
    Put("\n");
    _exit(125);
  }
  _exit(code);
}
