#pragma once
// `gpuslice doctor`: what this host needs to run gpuslice, one check at a time, each failure
// with how to fix it. Every check is a file read, a dlopen (NVML, through the devices backend),
// a stat, a connect or a helper program run with a deadline; a check whose subject is absent
// says "skip" (no GPU: no per-GPU checks). Nothing is changed on the host.
//
// The checks: the NVIDIA driver (kernel module, nouveau, NVML and its version against the
// module's), each GPU (catalogue model, MIG mode and whether MIG is usable, the memory-cap
// mechanism), MPS, the glibc the memory-cap interposer needs, cgroup v2 and its controllers,
// the exec stub's owner and mode, the daemon's socket and state, the config, the clock, and
// Slurm in cluster mode (docs/operating.md lists them with their fixes).
// Free functions; thread-compatible (RunDoctor may run helper programs).

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpuslice::doctor {

enum class Outcome { kOk, kWarn, kFail, kSkip };
std::string_view OutcomeName(Outcome o);  // "ok", "warn", "fail", "skip"

struct Finding {
  std::string check;   // "driver", "nvml", "gpu 0", "gpu 0 memory cap", "cgroup", ...
  Outcome outcome = Outcome::kOk;
  std::string detail;  // what was found
  std::string fix;     // how to fix it; empty unless warn or fail
};

struct Options {
  std::string nvml_library = "libnvidia-ml.so.1";  // tests: the stand-in NVML
  std::string socket = "/run/gpuslice/gpuslice.sock";  // "" : the daemon is not checked
  std::string state_dir = "/var/lib/gpuslice";
  std::string config = "/etc/gpuslice/gpuslice.toml";  // "" : built-in queues (not checked)
  bool slurm = false;       // cluster mode: Slurm must answer
  std::string slurm_conf;   // SLURM_CONF for the Slurm commands; "" : Slurm's default
  // /proc, /sys and /dev are read under this directory ("" : the host's). Tests give a tree
  // holding a driver's files, as no driver can be loaded here.
  std::string sysroot;
};

struct Report {
  std::vector<Finding> findings;
  int Count(Outcome o) const;
  // 0 when nothing failed (warnings included), 1 otherwise.
  int ExitCode() const;
};

Report RunDoctor(const Options& options);

// {"ok": bool, "summary": {"ok": n, "warn": n, "fail": n, "skip": n}, "checks": [{"check",
// "outcome", "detail", "fix"}]}.
nlohmann::json ReportJson(const Report& report);
// One line per check ("FAIL driver: ..." and its "fix: ..."), then the summary. `brief`: only
// warnings and failures, then the summary (what `make run` shows before serving).
std::string ReportText(const Report& report, bool brief);
// "12 ok, 2 warnings, 1 failure, 3 skipped".
std::string Summary(const Report& report);

// The highest GLIBC_x.y symbol version an ELF shared object needs, e.g. "2.34" ("" when it
// needs none); an error names the file when it is not a readable 64-bit ELF.
std::string RequiredGlibc(const std::string& elf_path, std::string* error);

}  // namespace gpuslice::doctor
