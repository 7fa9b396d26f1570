// gpu_agent_check: the GPU-machine half of tests/gpu/check.sh, built on the real nvml backend.
//   gpu_agent_check attribute --pid P --decoy-pid Q --expect-mib M [--seconds 10] [--device 0]
//       Binds slice 1 (shared, root pid P), slice 2 (shared, root pid Q) and slice 3 (whole)
//       on the device, samples once a second and checks that the memory and utilisation of P
//       (or of its descendant on the GPU) land on slice 1 only, and that /metrics carries both DCGM and gpuslice series.
//   gpu_agent_check two-slices --busy-pid P --idle-pid Q [--seconds 8] [--device 0]
//       Two shared slices on one GPU: the busy one is never idle; with per-process figures it
//       is active and above the idle one.
//   gpu_agent_check mig-util --device 0 [--busy-uuid MIG-...]
//       MIG instance utilisation: a value or Unsupported, never a failed read; > 0 when busy.
//   gpu_agent_check mps-start --device 0 --pipe DIR --log DIR [--threads 50] [--pinned-mib 1024]
//   gpu_agent_check mps-status --pipe DIR      (prints running|stopped|died; exit 0 iff running)
//   gpu_agent_check mps-stop --pipe DIR
// Exit 0 on success; prints "FAIL: ..." lines otherwise.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "agent/metrics.h"
#include "devices/backend.h"
#include "devices/mps.h"
#include "devices/nvml.h"

namespace gs = gpuslice;

namespace {

std::map<std::string, std::string> Flags(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 2; i + 1 < argc; i += 2) f[argv[i]] = argv[i + 1];
  return f;
}

// True when process p is root or a descendant of it (the check starts its CUDA programs under
// `timeout`, so the process on the GPU is a child of the pid the shell knows).
bool DescendsFrom(int p, int root) {
  for (int depth = 0; p > 1 && depth < 64; ++depth) {
    if (p == root) return true;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", p);
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) return false;
    char buf[512];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* close = std::strrchr(buf, ')');  // the command name may hold spaces or ')'
    int ppid = 0;
    if (close == nullptr || std::sscanf(close + 1, " %*c %d", &ppid) != 1) return false;
    p = ppid;
  }
  return p == root;
}

std::string Get(const std::map<std::string, std::string>& f, const std::string& k, const std::string& def = "") {
  auto it = f.find(k);
  return it == f.end() ? def : it->second;
}

int Attribute(const std::map<std::string, std::string>& f) {
  const int pid = std::atoi(Get(f, "--pid").c_str());
  const int decoy = std::atoi(Get(f, "--decoy-pid", "1").c_str());
  const long expect_mib = std::atol(Get(f, "--expect-mib", "0").c_str());
  const int seconds = std::atoi(Get(f, "--seconds", "10").c_str());
  const std::uint32_t device = static_cast<std::uint32_t>(std::atoi(Get(f, "--device", "0").c_str()));
  gs::devices::BackendOptions o;
  auto backend = gs::devices::NvmlBackend::Open(o);
  if (!backend.ok()) {
    std::printf("FAIL: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  std::printf("backend=%s process_abi=%d\n", (*backend)->description().c_str(),
              static_cast<int>((*backend)->process_abi()));
  gs::agent::AgentOptions ao;
  ao.hostname = "gpu-check";
  gs::agent::Agent agent(**backend, ao);
  auto bind = [&](std::uint64_t id, gs::sched::SliceKind kind, int root) {
    gs::agent::SliceBinding b;
    b.slice = gs::SliceId(id);
    b.job = gs::JobId(id * 10);
    b.user = "check";
    b.queue = "interactive";
    b.kind = kind;
    b.devices = {gs::DeviceIndex(device)};
    if (root > 0) b.root_pids = {root};
    agent.Bind(b);
  };
  bind(1, gs::sched::SliceKind::kShared, pid);
  bind(2, gs::sched::SliceKind::kShared, decoy);
  bind(3, gs::sched::SliceKind::kWhole, 0);

  bool seen = false, memory_ok = false, util_seen = false, util_unsupported = false, decoy_clean = true;
  bool device_util_seen = false;
  for (int i = 0; i < seconds; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    gs::agent::Round r = agent.SampleOnce();
    for (const auto& e : r.errors) std::printf("round %d error: %s\n", i, e.ToString().c_str());
    for (const auto& a : r.slices) {
      std::string pids;
      for (int p : a.pids) pids += std::to_string(p) + " ";
      std::printf("round=%d slice=%llu sm=%s mem_mib=%s pids=[%s]\n", i,
                  static_cast<unsigned long long>(a.slice.value()),
                  a.sm_util.ok() ? std::to_string(a.sm_util.value() / 10.0).c_str() : a.sm_util.status().ToString().c_str(),
                  a.memory_used.ok() ? std::to_string(a.memory_used.value() >> 20).c_str() : "-", pids.c_str());
      const bool has_pid =
          std::any_of(a.pids.begin(), a.pids.end(), [&](int p) { return DescendsFrom(p, pid); });
      if (a.slice == gs::SliceId(1) && has_pid) {
        seen = true;
        if (a.memory_used.ok() && a.memory_used.value() >= expect_mib * gs::kMiB * 9 / 10) memory_ok = true;
        if (a.sm_util.ok() && a.sm_util.value() > 0) util_seen = true;
        if (a.sm_util.unsupported()) util_unsupported = true;
      }
      if (a.slice == gs::SliceId(2) && has_pid) decoy_clean = false;
      if (a.slice == gs::SliceId(3) && a.sm_util.ok() && a.sm_util.value() > 0) device_util_seen = true;
    }
    std::printf("round=%d attributed=%d unattributed=%d vanished=%d\n", i, r.attribution.attributed,
                r.attribution.unattributed, r.attribution.vanished);
  }
  const std::string metrics = gs::agent::RenderPrometheus(agent.MetricsSnapshot());
  std::printf("---- /metrics ----\n%s------------------\n", metrics.c_str());
  int fails = 0;
  auto check = [&](bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    if (!ok) ++fails;
  };
  check(seen, "busy process attributed to slice 1 (process tree)");
  check(memory_ok, "slice 1 memory >= 90% of the busy program's allocation");
  check(util_seen || util_unsupported, "slice 1 SM utilisation > 0 (or reported unsupported, not 0)");
  check(decoy_clean, "decoy slice 2 never claimed the busy process");
  check(device_util_seen, "whole-device slice 3 saw device utilisation > 0");
  check(metrics.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"" + std::to_string(device) + "\"") != std::string::npos,
        "/metrics has DCGM_FI_DEV_GPU_UTIL for the device");
  check(metrics.find("gpuslice_slice_memory_used_bytes{slice=\"1\"") != std::string::npos,
        "/metrics has gpuslice_slice_memory_used_bytes for slice 1");
  return fails == 0 ? 0 : 1;
}

gs::Result<std::unique_ptr<gs::devices::NvmlBackend>> OpenNvml() {
  gs::devices::BackendOptions o;
  return gs::devices::NvmlBackend::Open(o);
}

const char* Verdict(gs::sched::Activity a) {
  return a == gs::sched::Activity::kActive ? "active" : a == gs::sched::Activity::kIdle ? "idle" : "unmeasured";
}

// Two shared slices on one GPU, one busy process each side: the busy one must never be called
// idle (active where the driver gives per-process figures, unmeasured where it does not), and
// when both are measured the busy slice's SM figure exceeds the idle one's.
int TwoSlices(const std::map<std::string, std::string>& f) {
  const int busy = std::atoi(Get(f, "--busy-pid").c_str());
  const int idle = std::atoi(Get(f, "--idle-pid").c_str());
  const int seconds = std::atoi(Get(f, "--seconds", "8").c_str());
  const std::uint32_t device = static_cast<std::uint32_t>(std::atoi(Get(f, "--device", "0").c_str()));
  auto backend = OpenNvml();
  if (!backend.ok()) {
    std::printf("FAIL: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  gs::agent::Agent agent(**backend, gs::agent::AgentOptions{});
  for (auto [id, root] : {std::pair{1, busy}, std::pair{2, idle}}) {
    gs::agent::SliceBinding b;
    b.slice = gs::SliceId(static_cast<std::uint64_t>(id));
    b.kind = gs::sched::SliceKind::kShared;
    b.devices = {gs::DeviceIndex(device)};
    b.root_pids = {root};
    b.idle.enabled = true;
    agent.Bind(b);
  }
  bool busy_called_idle = false, busy_active = false, measured_both = false, busy_higher = true;
  bool busy_seen = false, idle_seen = false;
  for (int i = 0; i < seconds; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    gs::agent::Round r = agent.SampleOnce();
    const gs::agent::SliceActivity* a[3] = {nullptr, nullptr, nullptr};
    for (const auto& x : r.slices) a[x.slice.value()] = &x;
    for (int k = 1; k <= 2; ++k) {
      std::printf("round=%d slice=%d verdict=%s basis=%s sm=%s pids=%zu\n", i, k, Verdict(a[k]->verdict.activity),
                  a[k]->verdict.basis.c_str(),
                  a[k]->sm_util.ok() ? std::to_string(a[k]->sm_util.value() / 10.0).c_str()
                                     : a[k]->sm_util.status().ToString().c_str(),
                  a[k]->pids.size());
    }
    if (i == 0) continue;  // the first window may predate the kernels
    busy_seen |= !a[1]->pids.empty();
    idle_seen |= !a[2]->pids.empty();
    busy_called_idle |= a[1]->verdict.activity == gs::sched::Activity::kIdle;
    busy_active |= a[1]->verdict.activity == gs::sched::Activity::kActive;
    if (a[1]->sm_util.ok() && a[2]->sm_util.ok()) {
      measured_both = true;
      busy_higher = busy_higher && a[1]->sm_util.value() > a[2]->sm_util.value();
    }
  }
  int fails = 0;
  auto check = [&](bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    if (!ok) ++fails;
  };
  check(busy_seen && idle_seen, "each slice's process attributed to it");
  check(!busy_called_idle, "the busy slice is never idle (active, or unmeasured when per-process figures are missing)");
  if (measured_both) {
    check(busy_active, "per-process figures given: the busy slice is active");
    check(busy_higher, "per-process figures given: busy slice SM > idle slice SM every round");
  } else {
    std::printf("note: per-process utilisation unsupported here; both slices unmeasured is the right answer\n");
  }
  return fails == 0 ? 0 : 1;
}

// MIG instance utilisation: every MIG device of --device is read; its figure is a value or
// Unsupported, never a failure; with --busy-uuid (a MIG device running busy.cu) a supported
// figure must be > 0 and the slice bound to it must not be idle.
int MigUtil(const std::map<std::string, std::string>& f) {
  const std::uint32_t device = static_cast<std::uint32_t>(std::atoi(Get(f, "--device", "0").c_str()));
  const std::string busy_uuid = Get(f, "--busy-uuid");
  auto backend = OpenNvml();
  if (!backend.ok()) {
    std::printf("FAIL: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  gs::agent::Agent agent(**backend, gs::agent::AgentOptions{});
  if (!busy_uuid.empty()) {
    gs::agent::SliceBinding b;
    b.slice = gs::SliceId(1);
    b.kind = gs::sched::SliceKind::kMig;
    b.devices = {gs::DeviceIndex(device)};
    b.mig_uuid = busy_uuid;
    b.idle.enabled = true;
    agent.Bind(b);
  }
  int fails = 0, instances = 0, supported = 0;
  bool busy_positive = false, busy_idle = false;
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    gs::agent::Round r = agent.SampleOnce();
    for (const auto& s : r.samples) {
      if (s.index.value() != device) continue;
      instances = static_cast<int>(s.mig.size());
      for (const auto& m : s.mig) {
        std::printf("round=%d mig=%s gi=%u ci=%u util=%s\n", i, m.uuid.c_str(), m.gpu_instance.value(),
                    m.compute_instance.value(),
                    m.util.ok() ? std::to_string(m.util.value() / 10.0).c_str() : m.util.status().ToString().c_str());
        if (!m.util.ok() && !m.util.unsupported()) {
          std::printf("FAIL: MIG utilisation read failed (not unsupported): %s\n", m.util.status().ToString().c_str());
          ++fails;
        }
        if (m.util.ok()) ++supported;
        if (i > 0 && m.uuid == busy_uuid && m.util.ok() && m.util.value() > 0) busy_positive = true;
      }
    }
    for (const auto& a : r.slices) {
      if (i > 0 && a.verdict.activity == gs::sched::Activity::kIdle) busy_idle = true;
    }
  }
  std::printf("%s: MIG devices listed on GPU %u (%d)\n", instances > 0 ? "ok" : "FAIL", device, instances);
  if (instances == 0) ++fails;
  if (!busy_uuid.empty()) {
    const bool ok = supported == 0 || busy_positive;
    std::printf("%s: busy MIG device shows utilisation > 0 (or unsupported everywhere)\n", ok ? "ok" : "FAIL");
    if (!ok) ++fails;
    std::printf("%s: the busy MIG slice is never idle\n", busy_idle ? "FAIL" : "ok");
    if (busy_idle) ++fails;
  }
  return fails == 0 ? 0 : 1;
}

int MpsStart(const std::map<std::string, std::string>& f) {
  gs::devices::BackendOptions o;
  auto backend = gs::devices::NvmlBackend::Open(o);
  if (!backend.ok()) {
    std::printf("FAIL: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  gs::devices::MpsConfig c;
  c.pipe_dir = Get(f, "--pipe");
  c.log_dir = Get(f, "--log");
  if (f.contains("--threads")) c.default_active_thread_percentage = std::atoi(Get(f, "--threads").c_str());
  if (f.contains("--pinned-mib")) c.default_pinned_mem_limit = std::atol(Get(f, "--pinned-mib").c_str()) * gs::kMiB;
  const gs::DeviceIndex dev(static_cast<std::uint32_t>(std::atoi(Get(f, "--device", "0").c_str())));
  gs::Status s = (*backend)->StartMps(dev, c);
  if (!s.ok()) {
    std::printf("FAIL: mps start: %s\n", s.ToString().c_str());
    return 1;
  }
  // Starting again must be a no-op (retry after a crash).
  s = (*backend)->StartMps(dev, c);
  if (!s.ok()) {
    std::printf("FAIL: mps start (retry): %s\n", s.ToString().c_str());
    return 1;
  }
  auto st = (*backend)->GetMpsStatus(dev);
  std::printf("mps=%s control_pid=%d\n", st.ok() ? std::string(gs::devices::MpsStateName(st->state)).c_str() : "?",
              st.ok() ? st->control_pid : 0);
  return st.ok() && st->state == gs::devices::MpsState::kRunning ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_agent_check attribute|two-slices|mig-util|mps-start|mps-status|mps-stop [flags]\n");
    return 64;
  }
  const std::string mode = argv[1];
  const auto f = Flags(argc, argv);
  if (mode == "attribute") return Attribute(f);
  if (mode == "two-slices") return TwoSlices(f);
  if (mode == "mig-util") return MigUtil(f);
  if (mode == "mps-start") return MpsStart(f);
  gs::devices::MpsController mps;
  if (mode == "mps-status") {
    auto st = mps.Probe(Get(f, "--pipe"));
    std::printf("%s %s\n", std::string(gs::devices::MpsStateName(st.state)).c_str(), st.detail.c_str());
    return st.state == gs::devices::MpsState::kRunning ? 0 : 1;
  }
  if (mode == "mps-stop") {
    gs::Status s = mps.Stop(Get(f, "--pipe"));
    std::printf("%s\n", s.ok() ? "stopped" : s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 64;
}
