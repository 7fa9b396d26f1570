#include "tests/slurm/slurm_cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "slurm/process.h"

extern char** environ;

namespace gpuslice::slurm::testing {
namespace {

namespace fs = std::filesystem;
constexpr const char* kMarker = "GPUSLICE_SLURM_CLUSTER";

bool PortFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// `count` consecutive free TCP ports.
Result<int> FindPortRange(int count) {
  unsigned seed = static_cast<unsigned>(::getpid()) * 2654435761u;
  for (int attempt = 0; attempt < 200; ++attempt) {
    seed = seed * 1103515245u + 12345u;
    int base = 20000 + static_cast<int>((seed >> 8) % 30000);
    bool ok = true;
    for (int p = base; p < base + count && ok; ++p) ok = PortFree(p);
    if (ok) return base;
  }
  return Internal("no free port range found");
}

Status MakeCharDevice(const std::string& path, int minor) {
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(195, minor)) != 0)
    return Unavailable(fmt::format("mknod {}: {} (the Slurm tests need root)", path, std::strerror(errno)));
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return f ? Status::Ok() : Internal("cannot write " + path);
}

}  // namespace

Result<std::unique_ptr<SlurmCluster>> SlurmCluster::Start(const ClusterOptions& options) {
  for (const char* tool : {"slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "scancel"}) {
    auto r = RunCommand({.argv = {"sh", "-c", std::string("command -v ") + tool}, .env = {}, .stdin_text = "",
                         .timeout = 5 * kSecond});
    if (!r.ok() || r->exit_code != 0)
      return Unavailable(fmt::format("{} is not installed (scripts/install-deps installs slurm-wlm)", tool));
  }
  if (options.accounting) {
    for (const char* tool : {"mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "sacctmgr", "sshare"}) {
      auto r = RunCommand({.argv = {"sh", "-c", std::string("command -v ") + tool}, .env = {}, .stdin_text = "",
                           .timeout = 5 * kSecond});
      if (!r.ok() || r->exit_code != 0)
        return Unavailable(fmt::format("{} is not installed (scripts/install-deps installs slurmdbd and "
                                       "mariadb-server)", tool));
    }
  }
  std::unique_ptr<SlurmCluster> c(new SlurmCluster());
  c->options_ = options;
  char tmpl[] = "/tmp/gpuslice-slurm-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return Internal("mkdtemp failed");
  c->root_ = tmpl;
  ::chmod(tmpl, 0755);
  // The watchdog first, so that even a crash during start-up leaves nothing behind.
  GPUSLICE_RETURN_IF_ERROR(c->StartWatchdog(options.watchdog_seconds));
  for (const char* d : {"etc", "state", "spool", "run", "log", "jobs", "dev", "dev/mig"})
    fs::create_directories(c->root_ + "/" + d);
  for (int i = 0; i < options.gpus_per_node; ++i)
    GPUSLICE_RETURN_IF_ERROR(MakeCharDevice(fmt::format("{}/dev/nvidia{}", c->root_, i), i));
  for (int g = 0; g < options.mig_gpus_per_node && options.mig_nodes > 0; ++g)
    for (std::size_t i = 0; i < options.mig_layout.size(); ++i)
      GPUSLICE_RETURN_IF_ERROR(MakeCharDevice(fmt::format("{}/dev/mig/mig{}-{}", c->root_, g, i),
                                              64 + g * 16 + static_cast<int>(i)));

  const int nodes = options.gpu_nodes + options.mig_nodes;
  GPUSLICE_ASSIGN_OR_RETURN(int base, FindPortRange(nodes + (options.accounting ? 3 : 1)));
  const int ctld_port = base;
  const int db_port = base + nodes + 1, dbd_port = base + nodes + 2;
  ClusterSpec spec;
  spec.shards_per_gpu = options.shards_per_gpu;
  // Every node is this host; CPUs and memory are advertised (config_overrides) so that GPUs,
  // not the host's 2 cores, are what jobs wait for.
  const std::string common = "NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=16 RealMemory=16000";
  if (options.gpu_nodes > 0) {
    spec.gpu_nodes.nodes = options.gpu_nodes == 1 ? "node1" : fmt::format("node[1-{}]", options.gpu_nodes);
    spec.gpu_nodes.gpus_per_node = options.gpus_per_node;
    spec.gpu_nodes.gres_type = "fake";
    spec.gpu_nodes.device_files = options.gpus_per_node == 1
                                      ? c->root_ + "/dev/nvidia0"
                                      : fmt::format("{}/dev/nvidia[0-{}]", c->root_, options.gpus_per_node - 1);
    spec.gpu_nodes.node_params =
        options.gpu_nodes == 1 ? fmt::format("{} Port={}", common, base + 1)
                               : fmt::format("{} Port=[{}-{}]", common, base + 1, base + options.gpu_nodes);
    for (int i = 1; i <= options.gpu_nodes; ++i) c->node_names_.push_back(fmt::format("node{}", i));
  }
  if (options.mig_nodes > 0) {
    int first = options.gpu_nodes + 1, last = options.gpu_nodes + options.mig_nodes;
    spec.mig_nodes.nodes = first == last ? fmt::format("node{}", first) : fmt::format("node[{}-{}]", first, last);
    spec.mig_nodes.gpus_per_node = options.mig_gpus_per_node;
    spec.mig_nodes.model = options.mig_model;
    spec.mig_nodes.mig_layout = options.mig_layout;
    spec.mig_nodes.mig_device_dir = c->root_ + "/dev/mig";
    spec.mig_nodes.node_params = first == last ? fmt::format("{} Port={}", common, base + first)
                                               : fmt::format("{} Port=[{}-{}]", common, base + first, base + last);
    for (int i = first; i <= last; ++i) c->node_names_.push_back(fmt::format("node{}", i));
  }
  GPUSLICE_ASSIGN_OR_RETURN(c->generated_, GenerateSlurmConfig(options.policy, spec));

  const std::string& r = c->root_;
  std::string conf = fmt::format(R"(# Test cluster written by tests/slurm/slurm_cluster.cc
ClusterName=gpuslicetest
MailProg=/bin/true
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# Short credential life: a requeued job is eligible again after seconds, not 2 minutes.
AuthInfo=cred_expire=5
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroup plugins: they need systemd or a writable cgroup tree, which containers lack.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
{accounting}
# A job completion log that `sacct -c` reads (no slurmdbd here), e.g. for gpuslice whatif.
# Without slurmdbd Slurm keeps no GPU TRES: GPUs come from the gpuslice agent's usage log.
JobCompType=jobcomp/filetxt
JobCompLoc={r}/jobcomp.log
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=sched_min_interval=100000,sched_interval=1,bf_interval=1
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=5
InactiveLimit=0
MinJobAge=600
KillWait=2
Waittime=0
)",
                                 fmt::arg("ctld", ctld_port), fmt::arg("r", r),
                                 fmt::arg("accounting", options.accounting
                                     ? fmt::format("AccountingStorageType=accounting_storage/slurmdbd\n"
                                                   "AccountingStorageHost=localhost\nAccountingStoragePort={}",
                                                   dbd_port)
                                     : "AccountingStorageType=accounting_storage/none"));
  conf += c->generated_.slurm_conf;
  conf += options.extra_conf;
  GPUSLICE_RETURN_IF_ERROR(WriteFile(c->conf_path(), conf));
  GPUSLICE_RETURN_IF_ERROR(WriteFile(r + "/etc/gres.conf", c->generated_.gres_conf));
  if (options.accounting) GPUSLICE_RETURN_IF_ERROR(c->StartAccounting(db_port, dbd_port));
  GPUSLICE_RETURN_IF_ERROR(c->StartDaemons());
  return c;
}

SlurmCluster::~SlurmCluster() { Stop(); }

SlurmContext SlurmCluster::context() const {
  SlurmContext ctx;
  ctx.slurm_conf = conf_path();
  ctx.timeout = 10 * kSecond;
  ctx.env = {{kMarker, root_}};
  return ctx;
}

std::map<std::string, std::string> SlurmCluster::command_env() const {
  return {{kMarker, root_}, {"SLURM_CONF", conf_path()}};
}

pid_t SlurmCluster::Spawn(const std::vector<std::string>& argv) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "SLURM_CONF=", 11) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back("SLURM_CONF=" + conf_path());
  env_strings.push_back(std::string(kMarker) + "=" + root_);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  std::string log = fmt::format("{}/log/{}.stdio", root_, fs::path(argv[0]).filename().string() +
                                                              (argv.size() > 2 ? "-" + argv.back() : ""));
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execvpe(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  if (pid > 0) ::setpgid(pid, pid);
  return pid;
}

Status SlurmCluster::StartDaemons() {
  // -D: stay in the foreground as our children, so they are ours to signal and reap.
  controller_pid_ = Spawn({"slurmctld", "-D", "-i"});
  if (controller_pid_ <= 0) return Internal("cannot start slurmctld");
  daemon_pids_.push_back(controller_pid_);
  for (const std::string& n : node_names_) {
    pid_t p = Spawn({"slurmd", "-D", "-N", n});
    if (p <= 0) return Internal("cannot start slurmd -N " + n);
    daemon_pids_.push_back(p);
  }
  return WaitForNodes(30 * kSecond);
}

Status SlurmCluster::StartAccounting(int db_port, int dbd_port) {
  const std::string& r = root_;
  for (const char* d : {"db", "db-tmp"}) fs::create_directories(r + "/" + d);
  auto run = [&](std::vector<std::string> argv, Micros timeout) {
    return RunCommand({.argv = std::move(argv), .env = command_env(), .stdin_text = "", .timeout = timeout});
  };
  auto install = run({"mariadb-install-db", "--no-defaults", "--datadir=" + r + "/db", "--user=root",
                      "--auth-root-authentication-method=socket", "--skip-test-db"},
                     90 * kSecond);
  if (!install.ok() || install->exit_code != 0)
    return Unavailable(fmt::format("mariadb-install-db failed: {}", install.ok() ? install->err + install->out
                                                                                  : install.status().ToString()));
  // Only this directory and a private port: no /run/mysqld, no /etc/mysql.
  pid_t db = Spawn({"mariadbd", "--no-defaults", "--datadir=" + r + "/db", "--tmpdir=" + r + "/db-tmp", "--user=root",
                    "--socket=" + r + "/run/mysql.sock", fmt::format("--port={}", db_port),
                    "--bind-address=127.0.0.1", "--skip-name-resolve", "--pid-file=" + r + "/run/mariadb.pid",
                    "--log-error=" + r + "/log/mariadb.log", "--innodb-buffer-pool-size=16M", "--skip-log-bin"});
  if (db <= 0) return Unavailable("cannot start mariadbd");
  db_pids_.push_back(db);
  const std::vector<std::string> sql = {"mariadb", "--no-defaults", "--socket=" + r + "/run/mysql.sock", "-u", "root",
                                        "-e"};
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    if (::waitpid(db, nullptr, WNOHANG) == db) {
      db_pids_.clear();
      break;
    }
    auto ping = run({sql[0], sql[1], sql[2], sql[3], sql[4], sql[5], "select 1"}, 5 * kSecond);
    up = ping.ok() && ping->exit_code == 0;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!up) return Unavailable(fmt::format("MariaDB did not start; mariadb.log:\n{}", LogTail("mariadb.log")));
  auto grant = run({sql[0], sql[1], sql[2], sql[3], sql[4], sql[5],
                    "create user 'slurm'@'127.0.0.1' identified by 'gpuslice-test'; "
                    "grant all on slurm_acct_db.* to 'slurm'@'127.0.0.1';"},
                   10 * kSecond);
  if (!grant.ok() || grant->exit_code != 0)
    return Internal(fmt::format("MariaDB: cannot create the slurm user: {}", grant.ok() ? grant->err : ""));
  // slurmdbd 22.05 reads slurmdbd.conf next to SLURM_CONF; it must be 0600 and SlurmUser's.
  const std::string dbd_conf = r + "/etc/slurmdbd.conf";
  GPUSLICE_RETURN_IF_ERROR(WriteFile(dbd_conf, fmt::format(R"(AuthType=auth/none
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db}
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=gpuslice-test
LogFile={r}/log/slurmdbd.log
PidFile={r}/run/slurmdbd.pid
DebugLevel=info
)", fmt::arg("dbd", dbd_port), fmt::arg("db", db_port), fmt::arg("r", r))));
  ::chmod(dbd_conf.c_str(), 0600);
  pid_t dbd = Spawn({"slurmdbd", "-D"});
  if (dbd <= 0) return Internal("cannot start slurmdbd");
  db_pids_.push_back(dbd);
  for (int i = 0; i < 300; ++i) {
    if (::waitpid(dbd, nullptr, WNOHANG) == dbd) {
      db_pids_.pop_back();
      break;
    }
    auto r2 = run({"sacctmgr", "-n", "show", "cluster"}, 5 * kSecond);
    if (r2.ok() && r2->exit_code == 0) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Internal(fmt::format("slurmdbd did not answer; slurmdbd.log:\n{}", LogTail("slurmdbd.log")));
}

Status SlurmCluster::WaitForNodes(Micros timeout) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout);
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    for (pid_t p : daemon_pids_) {
      if (::waitpid(p, &status, WNOHANG) == p)
        return Internal(fmt::format("a Slurm daemon (pid {}) exited during start-up; slurmctld.log:\n{}\nslurmd:\n{}",
                                    p, LogTail("slurmctld.log"), LogTail("slurmd-node1.log")));
    }
    auto r = RunCommand({.argv = {"sinfo", "-h", "-N", "-o", "%N %t"}, .env = command_env(), .stdin_text = "",
                         .timeout = 5 * kSecond});
    if (r.ok() && r->exit_code == 0) {
      last = r->out;
      // One line per node and partition.
      std::set<std::string> idle;
      std::istringstream lines(r->out);
      std::string node, state;
      while (lines >> node >> state)
        if (state == "idle") idle.insert(node);
      if (idle.size() == node_names_.size()) return Status::Ok();
    } else if (r.ok()) {
      last = r->err;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Internal(fmt::format("nodes not idle after {}: sinfo said:\n{}\nslurmctld.log:\n{}", FormatDuration(timeout),
                              last, LogTail("slurmctld.log")));
}

Status SlurmCluster::StartWatchdog(int seconds) {
  // Runs in its own session, so a signal to the test's process group does not reach it.
  static const char* kScript = R"(
parent=$1; root=$2; max=$3; marker=$4; i=0
while kill -0 "$parent" 2>/dev/null && [ "$i" -lt $((max * 5)) ]; do sleep 0.2; i=$((i + 1)); done
for sig in TERM KILL; do
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    if grep -qzxF "$marker=$root" "$e" 2>/dev/null; then kill -$sig "$p" 2>/dev/null; fi
  done
  sleep 1
done
case "$root" in /tmp/gpuslice-slurm-*) rm -rf "$root" ;; esac
)";
  std::string parent = std::to_string(::getpid());
  pid_t pid = ::fork();
  if (pid < 0) return Internal("fork failed");
  if (pid == 0) {
    ::setsid();
    int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    std::string max = std::to_string(seconds);
    ::execl("/bin/sh", "sh", "-c", kScript, "gpuslice-slurm-watchdog", parent.c_str(), root_.c_str(),
            max.c_str(), kMarker, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  watchdog_pid_ = pid;
  return Status::Ok();
}

void SlurmCluster::KillMarked(int signal) const {
  const std::string needle = std::string(kMarker) + "=" + root_;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == ::getpid() || pid == watchdog_pid_) continue;
    std::ifstream f(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    std::string entry;
    while (std::getline(f, entry, '\0')) {
      if (entry == needle) {
        ::kill(static_cast<pid_t>(pid), signal);
        break;
      }
    }
  }
  ::closedir(d);
}

void SlurmCluster::KillController() {
  if (controller_pid_ > 0) {
    ::kill(controller_pid_, SIGKILL);
    ::waitpid(controller_pid_, nullptr, 0);
    std::erase(daemon_pids_, controller_pid_);
    controller_pid_ = -1;
  }
}

void SlurmCluster::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (controller_pid_ > 0) {
    // Jobs first: their slurmstepd processes outlive a killed slurmd.
    auto ids = RunCommand({.argv = {"squeue", "-h", "-o", "%i"}, .env = command_env(), .stdin_text = "",
                           .timeout = 5 * kSecond});
    if (ids.ok() && ids->exit_code == 0 && !ids->out.empty()) {
      std::vector<std::string> argv = {"scancel"};
      std::istringstream in(ids->out);
      std::string id;
      while (in >> id) argv.push_back(id);
      (void)RunCommand({.argv = argv, .env = command_env(), .stdin_text = "", .timeout = 5 * kSecond});
      for (int i = 0; i < 50; ++i) {
        auto left = RunCommand({.argv = {"squeue", "-h", "-t", "R,CG", "-o", "%i"}, .env = command_env(),
                                .stdin_text = "", .timeout = 5 * kSecond});
        if (!left.ok() || left->exit_code != 0 || left->out.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  for (pid_t p : daemon_pids_) ::kill(p, SIGTERM);
  for (int i = 0; i < 30; ++i) {
    bool all = true;
    for (pid_t p : daemon_pids_) all = all && ::waitpid(p, nullptr, WNOHANG) != 0;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (pid_t p : daemon_pids_) {
    ::kill(-p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  daemon_pids_.clear();
  controller_pid_ = -1;
  // Then slurmdbd, then MariaDB (each given time to shut down cleanly).
  for (auto it = db_pids_.rbegin(); it != db_pids_.rend(); ++it) {
    ::kill(*it, SIGTERM);
    for (int i = 0; i < 100 && ::waitpid(*it, nullptr, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(-*it, SIGKILL);
    ::waitpid(*it, nullptr, 0);
  }
  db_pids_.clear();
  KillMarked(SIGKILL);
  if (watchdog_pid_ > 0) {
    ::kill(watchdog_pid_, SIGKILL);
    ::waitpid(watchdog_pid_, nullptr, 0);
    watchdog_pid_ = -1;
  }
  if (!root_.empty() && std::getenv("GPUSLICE_KEEP_SLURM") == nullptr) {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
}

Result<std::map<std::string, std::string>> SlurmCluster::WaitForJobState(const std::string& job_id,
                                                                         const std::string& states,
                                                                         Micros timeout) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout);
  std::string seen = "(none)";
  std::vector<std::string> wanted;
  std::istringstream in(states);
  for (std::string s; std::getline(in, s, ',');) wanted.push_back(s);
  while (true) {
    auto job = ShowJob(job_id, context());
    if (job.ok()) {
      seen = (*job)["JobState"];
      for (const auto& w : wanted)
        if (seen == w) return job;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Status(StatusCode::kDeadlineExceeded,
                fmt::format("job {} not in {} after {}: last state {}", job_id, states, FormatDuration(timeout), seen));
}

std::string SlurmCluster::LogTail(const std::string& log_name, int lines) const {
  std::ifstream f(root_ + "/log/" + log_name);
  std::deque<std::string> tail;
  for (std::string l; std::getline(f, l);) {
    tail.push_back(l);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string s;
  for (const auto& l : tail) s += l + "\n";
  return s;
}

}  // namespace gpuslice::slurm::testing
