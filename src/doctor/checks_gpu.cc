// doctor: the driver, NVML and each GPU (doctor.h). The GPUs are seen through the devices
// backend, as the daemon sees them.
#include <gnu/libc-version.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "devices/backend.h"
#include "devices/subprocess.h"
#include "doctor/checks.h"
#include "memcap/env.h"

namespace gpuslice::doctor {
namespace {

namespace fs = std::filesystem;

constexpr const char* kInstallDriver =
    "install the NVIDIA driver (Debian 12: enable non-free and `apt install nvidia-driver "
    "firmware-misc-nonfree`, or NVIDIA's CUDA repository), then reboot";

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." -> "535.104.05".
std::string ModuleVersion(const std::string& text) {
  const std::string marker = "Kernel Module";
  auto at = text.find(marker);
  if (at == std::string::npos) return "";
  std::istringstream in(text.substr(at + marker.size()));
  std::string word;
  while (in >> word) {
    if (!word.empty() && std::isdigit(static_cast<unsigned char>(word[0]))) return word;
  }
  return "";
}

// How a `shared` slice's memory cap is enforced on one GPU.
// SWITCH (issue 30 / wt29): the memcap library is gaining the per-GPU mechanism; when it lands,
// this function becomes a call to it. It is the only place doctor decides the mechanism.
Finding MemoryCapMechanism(const devices::DeviceInfo& d) {
  Finding f{fmt::format("gpu {} memory cap", d.index.value()), Outcome::kOk, "", ""};
  if (d.mig_current == devices::MigMode::kEnabled) {
    f.detail = "MIG instances: each slice's memory is its instance's (hardware isolation)";
    return f;
  }
  const std::string lib = memcap::LibraryPath();
  if (lib.empty()) {
    f.outcome = Outcome::kFail;
    f.detail = "libgpuslice-cuda.so not found: shared slices would run without a memory cap";
    f.fix = "reinstall gpuslice (the package puts it in /usr/lib/<multiarch>/gpuslice/)";
    return f;
  }
  f.detail = fmt::format("the interposer {} (LD_PRELOAD) caps shared slices; MPS slices get "
                         "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", lib);
  return f;
}

}  // namespace

void CheckDriver(const Options& o, Report& r, std::string* module_version) {
  const fs::path root = o.sysroot.empty() ? fs::path("/") : fs::path(o.sysroot);
  std::ifstream in(root / "proc/driver/nvidia/version");
  if (!in) {
    r.findings.push_back({"driver", Outcome::kFail,
                          "no NVIDIA driver is loaded (/proc/driver/nvidia/version is missing)",
                          kInstallDriver});
  } else {
    std::stringstream ss;
    ss << in.rdbuf();
    *module_version = ModuleVersion(ss.str());
    r.findings.push_back({"driver", Outcome::kOk,
                          fmt::format("kernel module {}", module_version->empty() ? "(version unreadable)"
                                                                                  : *module_version),
                          ""});
  }
  std::error_code ec;
  if (fs::exists(root / "sys/module/nouveau", ec)) {
    r.findings.push_back({"nouveau", Outcome::kFail,
                          "the nouveau driver is loaded: the NVIDIA driver cannot drive the GPUs",
                          "blacklist it (`echo blacklist nouveau > /etc/modprobe.d/nouveau.conf; "
                          "update-initramfs -u`) and reboot"});
  }
}

void CheckGpus(const Options& o, Report& r, const std::string& module_version) {
  devices::BackendOptions bo;
  bo.kind = "nvml";
  bo.nvml_library = o.nvml_library;
  auto backend = devices::OpenBackend(bo);
  if (!backend.ok()) {
    r.findings.push_back({"nvml", Outcome::kFail,
                          fmt::format("NVML ({}) cannot be used: {}", o.nvml_library,
                                      backend.status().message()),
                          std::string(kInstallDriver) + " (NVML is the driver's libnvidia-ml.so.1)"});
    r.findings.push_back({"gpus", Outcome::kSkip, "no NVML: the GPUs cannot be listed", ""});
    return;
  }
  const std::string description = (*backend)->description();
  const std::string kPrefix = "nvml driver ";
  const std::string nvml_version =
      description.rfind(kPrefix, 0) == 0 ? description.substr(kPrefix.size()) : "";
  if (!module_version.empty() && !nvml_version.empty() && module_version != nvml_version) {
    r.findings.push_back({"nvml", Outcome::kFail,
                          fmt::format("NVML is driver {} but the kernel module is {} (\"Driver/library "
                                      "version mismatch\")", nvml_version, module_version),
                          "reboot after the driver upgrade (or unload and reload the nvidia modules)"});
  } else {
    r.findings.push_back({"nvml", Outcome::kOk,
                          fmt::format("{} via {}", description, o.nvml_library), ""});
  }
  auto devs = (*backend)->ListDevices();
  if (!devs.ok()) {
    r.findings.push_back({"gpus", Outcome::kFail,
                          fmt::format("NVML lists no GPUs: {}", devs.status().message()),
                          "run `nvidia-smi`: it shows what the driver sees"});
    return;
  }
  if (devs->empty()) {
    r.findings.push_back({"gpus", Outcome::kFail, "NVML lists no GPU",
                          "run `nvidia-smi`; check `lspci | grep -i nvidia` and dmesg for NVRM errors"});
    return;
  }
  r.findings.push_back({"gpus", Outcome::kOk, fmt::format("{} GPU(s)", devs->size()), ""});
  const fs::path root = o.sysroot.empty() ? fs::path("/") : fs::path(o.sysroot);
  std::error_code ec;
  const bool mig_caps = fs::exists(root / "dev/nvidia-caps", ec) ||
                        fs::exists(root / "proc/driver/nvidia-caps/mig-minors", ec);
  for (const devices::DeviceInfo& d : *devs) {
    const std::string name = fmt::format("gpu {}", d.index.value());
    Finding g{name, Outcome::kOk, "", ""};
    g.detail = fmt::format("{} ({}{})", d.name, d.uuid,
                           d.memory_total.ok() ? ", " + FormatBytes(d.memory_total.value()) : "");
    if (d.model == nullptr) {
      g.outcome = Outcome::kWarn;
      g.detail += ": not in gpuslice's catalogue, so it is used whole, shared or by MPS, never by MIG";
      g.fix = "nothing to do unless it supports MIG: then its profiles belong in src/core/catalogue.cc";
    }
    r.findings.push_back(g);
    // MIG: usable when the model has it, the driver reports it, no mode change waits for a
    // reset, and non-root jobs can open MIG devices (the nvidia-caps device files).
    Finding m{name + " mig", Outcome::kOk, "", ""};
    if (d.model == nullptr || !d.model->supports_mig() || d.mig_current == devices::MigMode::kUnsupported) {
      m.outcome = Outcome::kSkip;
      m.detail = "no MIG on this GPU: mig slices go to other GPUs";
    } else if (d.mig_current != d.mig_pending) {
      m.outcome = Outcome::kWarn;
      m.detail = fmt::format("MIG mode is {} and {} after the next GPU reset",
                             devices::MigModeName(d.mig_current), devices::MigModeName(d.mig_pending));
      m.fix = fmt::format("reset the GPU with nothing running on it (`nvidia-smi -r -i {}`), or "
                          "drain it first (`gpuslice drain {}`)", d.index.value(), d.index.value());
    } else if (!mig_caps) {
      m.outcome = Outcome::kWarn;
      m.detail = fmt::format("MIG mode {}, but /dev/nvidia-caps is missing: jobs of other users "
                             "cannot open MIG instances", devices::MigModeName(d.mig_current));
      m.fix = "run `nvidia-modprobe -f /proc/driver/nvidia-caps/mig-minors -c0 -m` (or reboot)";
    } else {
      m.detail = fmt::format("MIG {}{}", devices::MigModeName(d.mig_current),
                             d.mig_current == devices::MigMode::kEnabled
                                 ? fmt::format(", {} GPU instance(s)", d.gpu_instances.size())
                                 : " (gpuslice turns it on when inference jobs need instances)");
    }
    r.findings.push_back(m);
    r.findings.push_back(MemoryCapMechanism(d));
  }
  // MPS is one control daemon per GPU, started by gpuslice with the driver's tool.
  auto mps = devices::FindExecutable("nvidia-cuda-mps-control");
  if (mps.ok()) {
    r.findings.push_back({"mps", Outcome::kOk, fmt::format("{} found: mps slices can be served", *mps), ""});
  } else {
    r.findings.push_back({"mps", Outcome::kWarn,
                          "nvidia-cuda-mps-control is not on PATH: mps slices cannot start",
                          "install the driver's MPS tool (Debian: nvidia-cuda-mps)"});
  }
}

void CheckInterposerGlibc(Report& r) {
  const std::string lib = memcap::LibraryPath();
  if (lib.empty()) {
    r.findings.push_back({"glibc", Outcome::kSkip, "no libgpuslice-cuda.so to check", ""});
    return;
  }
  std::string error;
  const std::string need = RequiredGlibc(lib, &error);
  const std::string have = gnu_get_libc_version();
  if (!error.empty()) {
    r.findings.push_back({"glibc", Outcome::kFail, error, "reinstall gpuslice"});
    return;
  }
  if (!need.empty() && OlderGlibc(have, need)) {
    r.findings.push_back({"glibc", Outcome::kFail,
                          fmt::format("{} needs glibc {}; this host has {}: shared slices' "
                                      "processes would not start", lib, need, have),
                          "install the gpuslice package built for this Debian release"});
    return;
  }
  r.findings.push_back({"glibc", Outcome::kOk,
                        fmt::format("the interposer needs glibc {}; this host has {}",
                                    need.empty() ? "(any)" : need, have),
                        ""});
}

}  // namespace gpuslice::doctor
