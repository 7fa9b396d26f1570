// doctor: what the host around the GPUs must give (doctor.h): device files, cgroups, the exec
// stub, the config, the state directory, the daemon's socket, the clock, Slurm.
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/timex.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "api/client.h"
#include "devices/subprocess.h"
#include "doctor/checks.h"
#include "exec/launcher.h"
#include "sched/config.h"
#include "sched/config_format.h"
#include "store/schema.h"

namespace gpuslice::doctor {
namespace {

namespace fs = std::filesystem;

constexpr long kCgroup2Magic = 0x63677270;  // CGROUP2_SUPER_MAGIC

fs::path Root(const Options& o) { return o.sysroot.empty() ? fs::path("/") : fs::path(o.sysroot); }

std::string Mode(const struct stat& st) { return fmt::format("{:04o}", st.st_mode & 07777); }

std::string Trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

}  // namespace

void CheckDeviceNodes(const Options& o, Report& r) {
  const fs::path dev = Root(o) / "dev";
  std::error_code ec;
  if (!fs::exists(Root(o) / "proc/driver/nvidia", ec)) {
    r.findings.push_back({"device files", Outcome::kSkip, "no driver: no /dev/nvidia* to check", ""});
    return;
  }
  std::vector<std::string> names = {"nvidiactl", "nvidia-uvm"};
  for (const auto& e : fs::directory_iterator(dev, ec)) {
    const std::string n = e.path().filename().string();
    if (std::regex_match(n, std::regex("nvidia[0-9]+"))) names.push_back(n);
  }
  std::vector<std::string> missing, closed;
  for (const std::string& n : names) {
    struct stat st {};
    if (stat((dev / n).c_str(), &st) != 0) {
      missing.push_back("/dev/" + n);
    } else if ((st.st_mode & 0006) != 0006) {
      closed.push_back(fmt::format("/dev/{} ({})", n, Mode(st)));
    }
  }
  if (!missing.empty()) {
    r.findings.push_back({"device files", Outcome::kFail,
                          fmt::format("missing: {}", fmt::join(missing, ", ")),
                          "run `nvidia-modprobe -u -c=0` (creates them) or install nvidia-persistenced"});
  } else if (!closed.empty()) {
    r.findings.push_back({"device files", Outcome::kWarn,
                          fmt::format("not read-writable by every user: {}; jobs run as their "
                                      "submitters and must open them", fmt::join(closed, ", ")),
                          "set NVreg_DeviceFileMode=0666 for the nvidia module (modprobe.d), or "
                          "chmod 0666 the files"});
  } else {
    r.findings.push_back({"device files", Outcome::kOk,
                          fmt::format("{} present and open to every user", fmt::join(names, ", ")), ""});
  }
}

void CheckCgroup(const Options& o, Report& r) {
  const fs::path cg = Root(o) / "sys/fs/cgroup";
  struct statfs sf {};
  if (statfs(cg.c_str(), &sf) != 0 || static_cast<long>(sf.f_type) != kCgroup2Magic) {
    r.findings.push_back({"cgroup", Outcome::kWarn,
                          fmt::format("{} is not cgroup v2 (unified): jobs run without their own "
                                      "cgroup, found through their process tree only", cg.string()),
                          "boot with systemd.unified_cgroup_hierarchy=1 (Debian 12's default; "
                          "check GRUB_CMDLINE_LINUX in /etc/default/grub)"});
    return;
  }
  std::ifstream in(cg / "cgroup.controllers");
  std::set<std::string> have;
  for (std::string c; in >> c;) have.insert(c);
  std::vector<std::string> missing;
  for (const char* c : {"cpu", "memory", "pids"}) {
    if (!have.contains(c)) missing.emplace_back(c);
  }
  if (!missing.empty()) {
    r.findings.push_back({"cgroup", Outcome::kWarn,
                          fmt::format("cgroup v2 without the {} controller(s)", fmt::join(missing, ", ")),
                          "enable them (kernel command line cgroup_enable=memory; systemd "
                          "delegates cpu, memory and pids by default)"});
    return;
  }
  r.findings.push_back({"cgroup", Outcome::kOk,
                        fmt::format("cgroup v2 with {}", fmt::join(have, " ")), ""});
}

void CheckExecStub(Report& r) {
  const std::string stub = exec::FindExecStub();
  if (stub.empty()) {
    r.findings.push_back({"exec stub", Outcome::kFail,
                          "gpuslice-exec not found (next to gpuslice, in ../libexec/gpuslice/)",
                          "reinstall gpuslice: every job starts through it"});
    return;
  }
  // The daemon runs it as root before it becomes the job's user: it, and every directory above
  // it, must be root's and writable by root alone.
  std::vector<std::string> bad;
  for (fs::path p = stub; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (stat(p.c_str(), &st) != 0) {
      bad.push_back(fmt::format("{}: cannot stat", p.string()));
    } else if (st.st_uid != 0 || (st.st_mode & 0022) != 0) {
      // A sticky, world-writable directory (/tmp) still lets others replace what is in it.
      bad.push_back(fmt::format("{} (uid {}, mode {})", p.string(), st.st_uid, Mode(st)));
    }
    if (p == p.parent_path()) break;
  }
  struct stat st {};
  stat(stub.c_str(), &st);
  if (!bad.empty()) {
    r.findings.push_back({"exec stub", Outcome::kFail,
                          fmt::format("{}: not root's alone, so another user could change what runs "
                                      "as root at every job start: {}", stub, fmt::join(bad, "; ")),
                          fmt::format("use the installed gpuslice (/usr/libexec/gpuslice/gpuslice-exec), or "
                                      "`chown root:root` and `chmod go-w` each path named")});
    return;
  }
  r.findings.push_back({"exec stub", Outcome::kOk,
                        fmt::format("{} (root, mode {})", stub, Mode(st)), ""});
}

void CheckConfig(const Options& o, Report& r) {
  if (o.config.empty()) {
    r.findings.push_back({"config", Outcome::kSkip, "no config file: serve runs with the built-in queues", ""});
    return;
  }
  std::error_code ec;
  if (!fs::exists(o.config, ec)) {
    r.findings.push_back({"config", Outcome::kWarn,
                          fmt::format("{} does not exist: gpuslice.service does not start without it",
                                      o.config),
                          "reinstall the package (it ships the file), or write one (docs/config.md)"});
    return;
  }
  auto config = sched::LoadConfigFile(o.config);
  if (!config.ok()) {
    r.findings.push_back({"config", Outcome::kFail, config.status().message(),
                          fmt::format("correct the key named, then `gpuslice config check {}`", o.config)});
    return;
  }
  r.findings.push_back({"config", Outcome::kOk,
                        fmt::format("{}: valid, config {}, queues {}", o.config,
                                    sched::ConfigVersion(*config),
                                    [&] {
                                      std::vector<std::string> n;
                                      for (const auto& q : config->queues) n.push_back(q.name);
                                      return fmt::format("{}", fmt::join(n, ", "));
                                    }()),
                        ""});
}

void CheckStateDir(const Options& o, Report& r) {
  struct stat st {};
  if (stat(o.state_dir.c_str(), &st) != 0) {
    r.findings.push_back({"state", Outcome::kSkip,
                          fmt::format("{} does not exist yet (the first start creates it)", o.state_dir), ""});
    return;
  }
  if ((st.st_mode & 0077) != 0) {
    r.findings.push_back({"state", Outcome::kFail,
                          fmt::format("{} is mode {}: jobs' commands and environments are readable "
                                      "by others", o.state_dir, Mode(st)),
                          fmt::format("chmod 700 {}", o.state_dir)});
    return;
  }
  const std::string db = o.state_dir + "/gpuslice.db";
  if (access(db.c_str(), R_OK) != 0) {
    r.findings.push_back({"state", Outcome::kSkip,
                          fmt::format("{} cannot be read by this user (run doctor as root)", db), ""});
    return;
  }
  auto info = store::ReadSchemaInfo(db);
  if (!info.ok()) {
    r.findings.push_back({"state", Outcome::kFail, info.status().message(),
                          "move the state directory aside to start afresh (jobs' history is lost)"});
    return;
  }
  const int now = store::SchemaVersion();
  if (info->application_id != 0 && info->application_id != store::kApplicationId) {
    r.findings.push_back({"state", Outcome::kFail, fmt::format("{} is not a gpuslice store", db),
                          "point --state-dir at gpuslice's own directory"});
  } else if (info->user_version > now) {
    r.findings.push_back({"state", Outcome::kFail,
                          fmt::format("{}: schema version {}, newer than this gpuslice's ({}): serve "
                                      "refuses it", db, info->user_version, now),
                          "install the gpuslice version that wrote it (downgrades are not supported)"});
  } else if (info->user_version < now) {
    r.findings.push_back({"state", Outcome::kOk,
                          fmt::format("{}: schema version {}; the next start migrates it to {} in one "
                                      "transaction and keeps a copy", db, info->user_version, now), ""});
  } else {
    r.findings.push_back({"state", Outcome::kOk, fmt::format("{}: schema version {} (current)", db, now), ""});
  }
}

void CheckSocket(const Options& o, Report& r) {
  if (o.socket.empty()) {
    r.findings.push_back({"daemon", Outcome::kSkip, "not checked (no --socket)", ""});
    return;
  }
  struct stat st {};
  if (lstat(o.socket.c_str(), &st) != 0) {
    r.findings.push_back({"daemon", Outcome::kWarn,
                          fmt::format("no socket at {}: the daemon is not running", o.socket),
                          "systemctl enable --now gpuslice (then `journalctl -u gpuslice`)"});
    return;
  }
  if (!S_ISSOCK(st.st_mode)) {
    r.findings.push_back({"daemon", Outcome::kFail, fmt::format("{} is not a socket", o.socket),
                          "remove it and restart the daemon"});
    return;
  }
  // Every local user reaches the daemon (it tells callers apart by their credentials).
  struct stat dir {};
  const std::string parent = fs::path(o.socket).parent_path().string();
  if ((st.st_mode & 0002) == 0 || stat(parent.c_str(), &dir) != 0 || (dir.st_mode & 0001) == 0) {
    r.findings.push_back({"daemon", Outcome::kWarn,
                          fmt::format("{} (mode {}) or its directory (mode {}) keeps other users out",
                                      o.socket, Mode(st), Mode(dir)),
                          "restart the daemon: it makes them reachable (socket 0666, directory 0755)"});
    return;
  }
  api::ApiClient client(o.socket);
  auto config = client.Get("/v1/config");
  if (!config.ok()) {
    r.findings.push_back({"daemon", Outcome::kFail,
                          fmt::format("{} does not answer: {}", o.socket, config.status().message()),
                          "systemctl restart gpuslice; see `journalctl -u gpuslice`"});
    return;
  }
  r.findings.push_back({"daemon", Outcome::kOk,
                        fmt::format("answers on {} (mode {}), config {}", o.socket, Mode(st),
                                    config->value("version", "?")),
                        ""});
}

void CheckClock(Report& r) {
  // Time limits, idle windows and the history are all in wall-clock time.
  const std::time_t now = std::time(nullptr);
  if (now < 1704067200) {  // 2024-01-01
    r.findings.push_back({"clock", Outcome::kFail,
                          fmt::format("the clock says {} s since 1970, before 2024", now),
                          "set the time (timedatectl set-ntp true)"});
    return;
  }
  struct timex tx {};
  const int state = adjtimex(&tx);
  if (state == TIME_ERROR || (tx.status & STA_UNSYNC) != 0) {
    r.findings.push_back({"clock", Outcome::kWarn,
                          "the clock is not synchronised (NTP): time limits and idle windows follow it",
                          "apt install systemd-timesyncd (or chrony)"});
    return;
  }
  r.findings.push_back({"clock", Outcome::kOk,
                        fmt::format("synchronised (estimated error {} µs)", tx.esterror), ""});
}

void CheckSlurm(const Options& o, Report& r) {
  if (!o.slurm) {
    r.findings.push_back({"slurm", Outcome::kSkip, "single-host mode (--slurm checks cluster mode)", ""});
    return;
  }
  auto scontrol = devices::FindExecutable("scontrol");
  if (!scontrol.ok()) {
    r.findings.push_back({"slurm", Outcome::kFail, "scontrol is not on PATH",
                          "apt install slurm-client (and slurmd on GPU nodes)"});
    return;
  }
  devices::RunOptions ro;
  ro.timeout = 10 * kSecond;
  if (!o.slurm_conf.empty()) ro.env["SLURM_CONF"] = o.slurm_conf;
  auto ping = devices::RunProcess({*scontrol, "ping"}, ro);
  if (!ping.ok() || ping->exit_code != 0 || ping->output.find("is UP") == std::string::npos) {
    r.findings.push_back({"slurm", Outcome::kFail,
                          fmt::format("`scontrol ping` did not find the controller up: {}",
                                      ping.ok() ? Trimmed(ping->output) : ping.status().message()),
                          "start slurmctld; check SlurmctldHost in slurm.conf and munge "
                          "(`munge -n | unmunge`)"});
    return;
  }
  r.findings.push_back({"slurm", Outcome::kOk, Trimmed(ping->output), ""});
}

}  // namespace gpuslice::doctor
