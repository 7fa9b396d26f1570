// gpuslice-exec: the first program a job's process runs (see launcher.h, "Start protocol").
//
// The daemon spawns it with vfork semantics (posix_spawn), so the daemon's memory is never
// shared copy-on-write with a child while the daemon commits the job's pid: that sharing made
// every SQLite write of the commit take page faults and cost submit->start latency. The stub:
//   1. reads the job (credentials, cwd, argv, environment, and its log as an attached
//      descriptor) from fd 3, a socket whose other end the daemon holds, while the daemon makes
//      the pid durable;
//   2. waits for the go-ahead byte 'G' followed by EOF. EOF without it (the daemon died or the
//      commit failed) means the job must not run: exit 126, having run nothing;
//   3. drops to the user (supplementary groups, gid, uid), enters cwd, resets signals and
//      execs the job with exactly the environment the daemon sent.
// The job's log arrives with the message (SCM_RIGHTS) and becomes stdout and stderr; stdin
// (/dev/null) and the process group are set up by posix_spawn. The daemon spawns stubs ahead of
// time, so one may wait idle for a while before it gets a job.
//
// Statically linked, with an empty environment of its own: nothing the submitter controls
// (LD_PRELOAD for the memory cap, GLIBC_TUNABLES, ...) applies to this root-owned step.
// Wire format on fd 3: NUL-terminated strings
//   "GSX1" uid gid ngroups group... cwd argc arg... envc env...   then 'G', then EOF.
// uid/gid are "-" to keep the daemon's own credentials. Plain C and syscalls only: the job is
// one exec away and this must not pull in more than libc.
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
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

}  // namespace

int main() {
  Message m;
  int log_fd = -1;
  // The go-ahead is the last byte; anything else (EOF early, a torn message, no log) runs
  // nothing.
  if (!ReadAll(kGoFd, &m, &log_fd) || log_fd < 0 || m.size == 0 || m.data[m.size - 1] != 'G') {
    _exit(kNoGoAhead);
  }
  m.data[m.size - 1] = '\0';
  m.size -= 1;
  close(kGoFd);

  char* magic = m.Next();
  if (magic == nullptr || strcmp(magic, "GSX1") != 0) _exit(kNoGoAhead);
  // Credentials: "-" "-" (keep the daemon's) or two numbers; anything else runs nothing.
  char* uid_s = m.Next();
  char* gid_s = m.Next();
  long uid = -1, gid = -1;
  const bool keep = uid_s != nullptr && gid_s != nullptr && strcmp(uid_s, "-") == 0 && strcmp(gid_s, "-") == 0;
  if (!keep && !(ParseNumber(uid_s, &uid) && ParseNumber(gid_s, &gid))) _exit(kNoGoAhead);
  long ngroups = 0;
  if (!m.Number(&ngroups) || ngroups > 65536) _exit(kNoGoAhead);
  gid_t* groups = static_cast<gid_t*>(calloc(static_cast<size_t>(ngroups) + 1, sizeof(gid_t)));
  for (long i = 0; i < ngroups; ++i) {
    long g = 0;
    if (groups == nullptr || !m.Number(&g)) _exit(kNoGoAhead);
    groups[i] = static_cast<gid_t>(g);
  }
  char* cwd = m.Next();
  char** argv = m.List();
  char** envp = m.List();
  if (cwd == nullptr || argv == nullptr || argv[0] == nullptr || envp == nullptr || m.pos != m.size) {
    _exit(kNoGoAhead);
  }

  if (dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) _exit(kNoGoAhead);
  syscall(SYS_close_range, 3u, ~0u, 0u);
  // Every disposition back to default, including the real-time signals glibc's sigaction()
  // refuses to touch (32, 33): the raw system call with the kernel's struct layout.
  struct {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
  } dfl = {SIG_DFL, 0, nullptr, 0};
  for (long sig = 1; sig <= 64; ++sig) {
    syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof(dfl.mask));  // SIGKILL/SIGSTOP just fail
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  if (!keep) {
    if (setgroups(static_cast<size_t>(ngroups), groups) != 0) Fail("setgroups", "");
    if (setgid(static_cast<gid_t>(gid)) != 0) Fail("setgid", "");
    if (setuid(static_cast<uid_t>(uid)) != 0) Fail("setuid", "");
  }
  if (chdir(cwd) != 0) Fail("chdir ", cwd);
  // The job's PATH, not this program's (empty) one, finds argv[0]: execvp searches getenv().
  environ = envp;
  execvp(argv[0], argv);
  Fail("exec ", argv[0]);
}
