// gpu_agent_check: the GPU-machine half of tests/gpu/run.sh, built on the real nvml backend.
//   gpu_agent_check attribute --pid P --decoy-pid Q --expect-mib M [--seconds 10] [--device 0]
//       Binds slice 1 (shared, root pid P), slice 2 (shared, root pid Q) and slice 3 (whole)
//       on the device, samples once a second and checks that P's memory and utilisation land
//       on slice 1 only, and that /metrics carries both DCGM and gpuslice series.
//   gpu_agent_check mps-start --device 0 --pipe DIR --log DIR [--threads 50] [--pinned-mib 1024]
//   gpu_agent_check mps-status --pipe DIR      (prints running|stopped|died; exit 0 iff running)
//   gpu_agent_check mps-stop --pipe DIR
// Exit 0 on success; prints "FAIL: ..." lines otherwise.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
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
      const bool has_pid = std::find(a.pids.begin(), a.pids.end(), pid) != a.pids.end();
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
    std::fprintf(stderr, "usage: gpu_agent_check attribute|mps-start|mps-status|mps-stop [flags]\n");
    return 64;
  }
  const std::string mode = argv[1];
  const auto f = Flags(argc, argv);
  if (mode == "attribute") return Attribute(f);
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
