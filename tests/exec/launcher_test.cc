// Launcher contract (real fork/exec and fake), plus what only real processes can show:
// environment, log, process group, user switch, and "commit failed => never ran".
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "exec/fake_launcher.h"
#include "exec/launcher.h"
#include "exec/proc.h"
#include "testing/files.h"

namespace gpuslice::exec {
namespace {

using gpuslice::testing::Slurp;

namespace fs = std::filesystem;

fs::path TempDir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("exec_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  fs::permissions(d, fs::perms::all);
  return d;
}

// The stub pid a status file names (0 if none).
int ReadStatusPid(const std::string& path) {
  std::ifstream in(path);
  std::string key;
  int pid = 0;
  in >> key >> pid;
  return pid;
}

// Polls until the job's processes are all gone (bounded: 10 s).
std::optional<ExitInfo> WaitGone(Launcher& l, const ProcessHandle& h) {
  for (int i = 0; i < 1000; ++i) {
    auto e = l.Poll(h);
    if (e && e->group_gone) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

LaunchSpec Spec(const fs::path& dir, std::vector<std::string> argv) {
  LaunchSpec s;
  s.job = JobId(1);
  s.argv = std::move(argv);
  s.cwd = dir.string();
  s.env = {{"PATH", "/usr/bin:/bin"}, {"GPUSLICE_JOB_ID", "1"}};
  s.log_path = (dir / "job.log").string();
  s.status_path = (dir / "job.exit").string();
  return s;
}

struct Impl {
  std::string name;
  std::function<std::unique_ptr<Launcher>()> make;
};

class LauncherContract : public ::testing::TestWithParam<Impl> {};

TEST_P(LauncherContract, CommitSeesThePidAndTermEndsTheJob) {
  auto dir = TempDir("contract_" + GetParam().name);
  auto l = GetParam().make();
  ProcessHandle committed;
  auto h = l->Start(Spec(dir, {"sleep", "30"}), [&](const ProcessHandle& ph) {
    committed = ph;
    return Status::Ok();
  });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(committed.pid, h->pid);
  EXPECT_GT(h->pid, 0);
  EXPECT_FALSE(l->Poll(*h).has_value());
  EXPECT_TRUE(l->StillAlive(*h));
  ASSERT_TRUE(l->Signal(*h, SIGTERM).ok());
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGTERM);
  EXPECT_FALSE(l->StillAlive(*h));
  fs::remove_all(dir);
}

TEST_P(LauncherContract, FailedCommitMeansNothingRuns) {
  auto dir = TempDir("commitfail_" + GetParam().name);
  auto l = GetParam().make();
  int pid = 0;
  auto h = l->Start(Spec(dir, {"touch", (dir / "ran").string()}), [&](const ProcessHandle& ph) {
    pid = ph.pid;
    return Internal("disk full");
  });
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), "disk full");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(fs::exists(dir / "ran"));
  EXPECT_FALSE(l->StillAlive(ProcessHandle{pid, 1, false, ""}));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(All, LauncherContract,
                         ::testing::Values(Impl{"process", [] { return NewProcessLauncher(); }},
                                           Impl{"fake", [] {
                                                  return std::unique_ptr<Launcher>(
                                                      std::make_unique<FakeLauncher>());
                                                }}),
                         [](const auto& info) { return info.param.name; });

TEST(ProcessLauncher, JobSeesItsEnvironmentAndCwdAndLogsBothStreams) {
  auto dir = TempDir("env");
  auto l = NewProcessLauncher();
  auto spec = Spec(dir, {"sh", "-c", "echo out; echo err >&2; pwd; env; exit 3"});
  spec.env.emplace_back("CUDA_VISIBLE_DEVICES", "GPU-abc");
  auto h = l->Start(spec, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 3);
  std::string log = Slurp(dir / "job.log");
  EXPECT_NE(log.find("out\n"), std::string::npos);
  EXPECT_NE(log.find("err\n"), std::string::npos);
  EXPECT_NE(log.find(dir.string() + "\n"), std::string::npos);
  EXPECT_NE(log.find("CUDA_VISIBLE_DEVICES=GPU-abc"), std::string::npos);
  EXPECT_NE(log.find("GPUSLICE_JOB_ID=1"), std::string::npos);
  EXPECT_EQ(log.find("HOME="), std::string::npos) << "only the given environment";
  fs::remove_all(dir);
}

TEST(ProcessLauncher, SignalReachesTheWholeGroupAndGroupKeepsJobAlive) {
  auto dir = TempDir("group");
  auto l = NewProcessLauncher();
  // The leader exits at once, leaving a background child in its group.
  auto h = l->Start(Spec(dir, {"sh", "-c", "sleep 30 & echo $! > child.pid"}),
                    [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok());
  std::optional<ExitInfo> e;
  for (int i = 0; i < 500 && !e; ++i) {
    e = l->Poll(*h);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_FALSE(e->group_gone) << "the background sleep is still in the group";
  EXPECT_TRUE(ProcessGroupAlive(h->pid));
  ASSERT_TRUE(l->Signal(*h, SIGKILL).ok());
  auto gone = WaitGone(*l, *h);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->exit_code, 0) << "the leader's own status is kept";
  fs::remove_all(dir);
}

TEST(ProcessLauncher, MissingProgramFailsInTheLogWith127) {
  auto dir = TempDir("missing");
  auto l = NewProcessLauncher();
  auto h = l->Start(Spec(dir, {"no-such-program-gpuslice"}),
                    [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok());
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 127);
  EXPECT_NE(Slurp(dir / "job.log").find("exec no-such-program-gpuslice"), std::string::npos);
  fs::remove_all(dir);
}

// A capped slice whose interposer cannot be read would run uncapped (the dynamic linker only
// warns about a preload it cannot open): the stub refuses to run it, saying why in the log.
TEST(ProcessLauncher, CappedJobWhoseInterposerIsMissingDoesNotRun) {
  auto dir = TempDir("nocap");
  auto l = NewProcessLauncher();
  auto spec = Spec(dir, {"sh", "-c", "echo ran > ran.txt"});
  const std::string missing = (dir / "gone" / "libgpuslice-cuda.so").string();
  spec.env.emplace_back("LD_PRELOAD", missing);
  spec.env.emplace_back("GPUSLICE_MEMCAP_BYTES", "1073741824");
  auto h = l->Start(spec, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok());
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 127);
  EXPECT_FALSE(fs::exists(dir / "ran.txt"));
  const std::string log = Slurp(dir / "job.log");
  EXPECT_NE(log.find("memory cap: not running the job without its cap"), std::string::npos) << log;
  EXPECT_NE(log.find(missing), std::string::npos) << log;

  // The real interposer: the job runs (and so does one without a cap, whatever LD_PRELOAD holds).
  auto ok = Spec(dir, {"sh", "-c", "echo ran > ran.txt"});
  ok.env.emplace_back("LD_PRELOAD", GPUSLICE_BUILD_DIR "/lib/libgpuslice-cuda.so");
  ok.env.emplace_back("GPUSLICE_MEMCAP_BYTES", "1073741824");
  auto h2 = l->Start(ok, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h2.ok());
  auto e2 = WaitGone(*l, *h2);
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(e2->exit_code, 0) << Slurp(dir / "job.log");
  EXPECT_TRUE(fs::exists(dir / "ran.txt"));
  fs::remove_all(dir);
}

TEST(ProcessLauncher, RunsAsTheSubmittingUser) {
  if (!CanSwitchUsers()) GTEST_SKIP() << "needs root";
  auto dir = TempDir("user");
  auto l = NewProcessLauncher();
  auto spec = Spec(dir, {"sh", "-c", "id -u; id -g; id -G"});
  spec.uid = 65534;
  spec.gid = 65534;
  spec.user = "nobody";
  auto h = l->Start(spec, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
  std::string log = Slurp(dir / "job.log");
  EXPECT_EQ(log.substr(0, 12), "65534\n65534\n") << log;
  EXPECT_EQ(log.find(" 0"), std::string::npos) << "root's group 0 dropped: " << log;
  fs::remove_all(dir);
}

TEST(ProcessLauncher, ReusedPidIsNotTheJob) {
  auto l = NewProcessLauncher();
  ProcessHandle self{getpid(), ProcessStartTicks(getpid()).value(), true, ""};
  EXPECT_TRUE(l->StillAlive(self));
  EXPECT_FALSE(l->Poll(self).has_value());
  ProcessHandle other{getpid(), self.start_ticks + 1, true, ""};
  auto e = l->Poll(other);
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(e->exit_code.has_value()) << "no status recorded: exit status unknown";
}

TEST(ProcessLauncher, EmptyCommandIsInvalid) {
  auto l = NewProcessLauncher();
  LaunchSpec s;
  auto h = l->Start(s, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
}

TEST(ProcessLauncher, ProgramIsFoundOnTheJobsPathNotTheDaemons) {
  auto dir = TempDir("path");
  fs::create_directories(dir / "bin");
  {
    std::ofstream f(dir / "bin" / "my-tool");
    f << "#!/bin/sh\necho my-tool ran\n";
  }
  fs::permissions(dir / "bin" / "my-tool", fs::perms::owner_all);
  auto l = NewProcessLauncher();
  auto spec = Spec(dir, {"my-tool"});
  spec.env = {{"PATH", (dir / "bin").string() + ":/usr/bin:/bin"}};
  auto h = l->Start(spec, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0) << Slurp(dir / "job.log");
  EXPECT_EQ(Slurp(dir / "job.log"), "my-tool ran\n");
  fs::remove_all(dir);
}

// The daemon ignores SIGPIPE and its threads block signals; none of that reaches a job, and no
// descriptor of the daemon leaks into it.
TEST(ProcessLauncher, JobStartsWithDefaultSignalsAndOnlyStdio) {
  auto dir = TempDir("signals");
  struct sigaction old_pipe {}, old_int {}, ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_pipe);
  sigaction(SIGINT, &ign, &old_int);
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, &old_mask);
  int leaked = open("/dev/null", O_RDONLY);  // not close-on-exec on purpose
  auto l = NewProcessLauncher();
  auto h = l->Start(Spec(dir, {"sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status; ls /proc/self/fd"}),
                    [](const ProcessHandle&) { return Status::Ok(); });
  close(leaked);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  std::string log = Slurp(dir / "job.log");
  EXPECT_NE(log.find("SigBlk:\t0000000000000000"), std::string::npos) << log;
  EXPECT_NE(log.find("SigIgn:\t0000000000000000"), std::string::npos) << log;
  // ls sees 0, 1, 2 and the directory it is listing (3); nothing more.
  EXPECT_NE(log.find("0\n1\n2\n3\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("\n4\n"), std::string::npos) << log;
  fs::remove_all(dir);
}

// The stub alone: without the go-ahead byte, or without the log attached, it runs nothing,
// however much of the job it got.
TEST(ExecStub, TornMessageNoLogOrNoGoAheadRunsNothing) {
  const std::string stub = FindExecStub();
  ASSERT_FALSE(stub.empty()) << "gpuslice-exec is built with the exec library";
  auto dir = TempDir("stub");
  const std::string marker = (dir / "ran").string();
  const std::string script = "echo hi; touch " + marker;
  const std::string status = (dir / "job.exit").string();
  auto message = [&](const char* magic, const char* uid) {
    std::string out;
    for (const char* f : {magic, status.c_str(), uid, "-", "0", "/", "3", "sh", "-c",
                          script.c_str(), "1", "PATH=/usr/bin:/bin"}) {
      out += f;
      out.push_back('\0');
    }
    return out;
  };
  const std::string full = message("GSX2", "-");
  const int log = open((dir / "log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(log, 0);
  auto run = [&](const std::string& message, bool attach_log) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(sv[1]);  // else the stub would hold its own EOF open
      dup2(sv[0], 3);
      execl(stub.c_str(), "gpuslice-exec", "test", static_cast<char*>(nullptr));
      _exit(99);
    }
    close(sv[0]);
    char control[CMSG_SPACE(sizeof(int))] = {};
    iovec iov{const_cast<char*>(message.data()), message.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (attach_log) {
      mh.msg_control = control;
      mh.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &log, sizeof(int));
    }
    EXPECT_EQ(sendmsg(sv[1], &mh, 0), static_cast<ssize_t>(message.size()));
    close(sv[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  // No go-ahead (the daemon was killed after counting the job as started) or no log: nothing
  // runs, and where the message named the status file the stub says so, so the daemon records
  // "never started" rather than an unknown end.
  for (const auto& [msg, log_attached, what] : {std::tuple{full, true, "no go-ahead"},
                                                std::tuple{full + "G", false, "no log"}}) {
    EXPECT_EQ(run(msg, log_attached), 126) << what;
    EXPECT_EQ(Slurp(status), "pid " + std::to_string(ReadStatusPid(status)) + "\nnever-started 0\n") << what;
    EXPECT_TRUE(ReadStatusFile(status, ReadStatusPid(status)).never_started) << what;
    fs::remove(status);
  }
  EXPECT_EQ(run(message("GSX1", "-") + "G", true), 126) << "unknown format";
  EXPECT_FALSE(fs::exists(status)) << "an unknown message names no status file to trust";
  EXPECT_EQ(run(full.substr(0, full.size() / 2) + "G", true), 126) << "torn message";
  EXPECT_EQ(Slurp(status), "pid " + std::to_string(ReadStatusPid(status)) + "\nexit 126\n")
      << "after the go-ahead the daemon counts the job as started: its failure is recorded";
  EXPECT_EQ(run(message("GSX2", "x") + "G", true), 126) << "a garbled uid is not root";
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_EQ(Slurp(dir / "log").find("hi"), std::string::npos) << Slurp(dir / "log");
  fs::remove(dir / "log");
  const int log2 = open((dir / "log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(log2, 0);
  dup2(log2, log);
  close(log2);
  EXPECT_EQ(run(full + "G", true), 0);
  EXPECT_TRUE(fs::exists(marker)) << "with the go-ahead the job runs";
  EXPECT_EQ(Slurp(dir / "log"), "hi\n") << "its output goes to the attached log";
  EXPECT_EQ(Slurp(status), "pid " + std::to_string(ReadStatusPid(status)) + "\nexit 0\n");
  close(log);
  fs::remove_all(dir);
}

// Stubs wait ready, as their own process group leaders; each start takes one, and one that was
// killed while waiting is replaced transparently.
TEST(ProcessLauncher, ReadyStubsAreUsedAndAKilledOneIsSkipped) {
  auto dir = TempDir("ready");
  auto l = NewProcessLauncher("", 2);
  auto ready = [] {
    std::vector<int> pids;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream cmd(e.path() / "cmdline");
      std::string argv0, argv1;
      std::getline(cmd, argv0, '\0');
      std::getline(cmd, argv1, '\0');
      if (argv0 == "gpuslice-exec" && argv1 == "waiting-for-a-job" &&
          getpgid(std::stoi(name)) == std::stoi(name)) {
        // Ours: a child of this test process.
        std::ifstream st(e.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(st)), {});
        auto rp = stat.rfind(')');
        int ppid = std::stoi(stat.substr(rp + 4));
        if (ppid == getpid()) pids.push_back(std::stoi(name));
      }
    }
    return pids;
  };
  std::vector<int> pids;
  for (int i = 0; i < 500 && pids.size() < 2; ++i) {
    pids = ready();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(pids.size(), 2u);
  // Kill one waiting stub: the next start must not fail because of it.
  kill(pids[0], SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int i = 0; i < 3; ++i) {
    auto spec = Spec(dir, {"sh", "-c", "echo run " + std::to_string(i)});
    auto h = l->Start(spec, [](const ProcessHandle&) { return Status::Ok(); });
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    auto e = WaitGone(*l, *h);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->exit_code, 0);
  }
  const std::string log = Slurp(dir / "job.log");
  EXPECT_NE(log.find("run 0\nrun 1\nrun 2\n"), std::string::npos) << log;
  l.reset();  // the remaining ready stubs get EOF and exit; nothing is left behind
  EXPECT_TRUE(ready().empty());
  fs::remove_all(dir);
}

// The result is the stub's record, exact for an exit code and a signal, and read the same way
// by a launcher that did not start the job (a restarted daemon re-adopting it).
TEST(ProcessLauncher, ExitCodeAndSignalAreRecordedAndReadAfterARestart) {
  auto dir = TempDir("record");
  auto l = NewProcessLauncher("", 0);
  auto h = l->Start(Spec(dir, {"sh", "-c", "exit 3"}), [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_FALSE(e->signal.has_value());
  EXPECT_EQ(ReadStatusPid((dir / "job.exit").string()), h->pid) << "the stub's pid names the run";

  // Started by one launcher, ended while nobody polled, read by another (adopted) one.
  auto first = NewProcessLauncher("", 0);
  auto spec = Spec(dir, {"sh", "-c", "sleep 0.3; kill -USR1 $$"});
  spec.status_path = (dir / "job2.exit").string();
  auto h2 = first->Start(spec, [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h2.ok()) << h2.status().ToString();
  auto second = NewProcessLauncher("", 0);
  ProcessHandle adopted = *h2;
  adopted.adopted = true;
  EXPECT_FALSE(second->Poll(adopted).has_value()) << "still running";
  std::optional<ExitInfo> e2;
  for (int i = 0; i < 500; ++i) {
    e2 = second->Poll(adopted);
    if (e2 && e2->group_gone) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(e2->signal, SIGUSR1) << "the signal that killed the job, not unknown";
  EXPECT_FALSE(e2->exit_code.has_value());
  (void)first->Poll(*h2);  // reap
  // Another run's record (a different stub pid) is not this run's result.
  EXPECT_FALSE(ReadStatusFile((dir / "job2.exit").string(), h2->pid + 1).signal.has_value());
  fs::remove_all(dir);
}

// SIGTERM to the group reaches the job, not the stub; the daemon's SIGKILL spares the stub,
// so the kill is recorded.
TEST(ProcessLauncher, StubSurvivesTheGroupsSignalsAndRecordsThem) {
  auto dir = TempDir("groupsig");
  auto l = NewProcessLauncher("", 0);
  auto h = l->Start(Spec(dir, {"sleep", "30"}), [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(l->Signal(*h, SIGTERM).ok());
  auto e = WaitGone(*l, *h);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGTERM);

  // A job that ignores SIGTERM, and a child of it, killed by the escalation.
  auto h2 = l->Start(Spec(dir, {"sh", "-c", "trap '' TERM; sleep 30 & wait"}),
                     [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h2.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(l->Signal(*h2, SIGTERM).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(l->Poll(*h2).has_value()) << "the job ignores SIGTERM; the stub must too";
  ASSERT_TRUE(l->Signal(*h2, SIGKILL).ok());
  auto e2 = WaitGone(*l, *h2);
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(e2->signal, SIGKILL) << "recorded by the stub that the kill spared";
  fs::remove_all(dir);
}

// Killing the stub itself loses the record: the result is unknown, not success or the stub's
// own death.
TEST(ProcessLauncher, KilledStubMeansUnknownResult) {
  auto dir = TempDir("stubkill");
  auto l = NewProcessLauncher("", 0);
  auto h = l->Start(Spec(dir, {"sleep", "30"}), [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(h->pid, SIGKILL);  // the stub only; the job lives on in the group
  std::optional<ExitInfo> e;
  for (int i = 0; i < 500 && !e; ++i) {
    e = l->Poll(*h);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(e->group_gone) << "the job itself still runs";
  ASSERT_TRUE(l->Signal(*h, SIGKILL).ok());
  auto gone = WaitGone(*l, *h);
  ASSERT_TRUE(gone.has_value());
  EXPECT_FALSE(gone->exit_code.has_value());
  EXPECT_FALSE(gone->signal.has_value()) << "unknown, not 'killed by SIGKILL'";
  fs::remove_all(dir);
}

TEST(ProcessLauncher, MissingStubIsAClearError) {
  auto dir = TempDir("nostub");
  auto l = NewProcessLauncher("/nonexistent/gpuslice-exec");
  auto h = l->Start(Spec(dir, {"true"}), [](const ProcessHandle&) { return Status::Ok(); });
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("/nonexistent/gpuslice-exec"), std::string::npos)
      << h.status().ToString();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::exec
