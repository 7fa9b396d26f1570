#pragma once
// DeviceBackend: the one interface through which gpuslice sees and acts on GPUs.
// Implementations: "nvml" (dlopen of libnvidia-ml.so.1 at run time; no NVIDIA header or
// library at build time), "fake" (in-memory, scripted, injectable errors; devices/fake.h) and
// "replay" (plays back a recording; docs/recording-format.md). One contract test suite
// (tests/devices/contract_test.cc) runs against every implementation.
//
// Readings: every figure the driver might not give is a Reading<T>. "Unsupported" (e.g. GPU
// utilisation inside a MIG instance on A100) is a distinct state from a reading of 0, and
// from an error (no permission, GPU lost). Never substitute 0 for a missing figure.
//
// Actions (MPS, MIG) are idempotent and safe to retry after a crash: asking for a state that
// already holds succeeds and changes nothing; "create" of an instance that already exists at
// the same profile and placement returns the existing one.
//
// Thread-safety: every implementation is thread-safe (internally locked); the agent samples
// from its thread while the daemon acts from another.

#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::devices {

// Utilisation as an integer in 0..1000 (tenths of a percent): averages of several driver
// samples keep one decimal without floating point. DCGM_FI_DEV_GPU_UTIL = permille / 10.
using Permille = int;

// A figure that may be missing. status().ok() <=> value is valid. A missing figure carries
// why: kUnsupported (the device/driver cannot give it), kPermissionDenied, kUnavailable...
template <typename T>
class Reading {
 public:
  Reading() : status_(Unsupported("not read")) {}
  static Reading Of(T v) { Reading r; r.status_ = Status::Ok(); r.value_ = std::move(v); return r; }
  static Reading Missing(Status why) {
    assert(!why.ok());
    Reading r; r.status_ = std::move(why); return r;
  }
  static Reading NotSupported(std::string what) { return Missing(Unsupported(std::move(what))); }

  bool ok() const { return status_.ok(); }
  bool unsupported() const { return status_.code() == StatusCode::kUnsupported; }
  const Status& status() const { return status_; }
  // Only meaningful when ok(); asserting keeps "missing" from silently turning into 0.
  const T& value() const { assert(ok()); return value_; }
  T value_or(T fallback) const { return ok() ? value_ : std::move(fallback); }
  std::optional<T> optional() const { return ok() ? std::optional<T>(value_) : std::nullopt; }

  friend bool operator==(const Reading& a, const Reading& b) {
    return a.status_ == b.status_ && (!a.ok() || a.value_ == b.value_);
  }

 private:
  Status status_;
  T value_{};
};

enum class MigMode { kUnsupported = 0, kDisabled = 1, kEnabled = 2 };
std::string_view MigModeName(MigMode m);  // "unsupported", "disabled", "enabled"

// One compute instance inside a GPU instance. Each CI is one "MIG device" that CUDA sees,
// with its own UUID ("MIG-..."), which is what a mig slice hands to CUDA_VISIBLE_DEVICES.
struct ComputeInstanceInfo {
  ComputeInstanceId id;  // NVML-local to the GPU instance
  int profile_id = 0;    // NVML compute-instance profile (0 = 1 slice ... see measurement.md)
  std::string uuid;      // "MIG-..."; may be empty if the driver did not give it
  friend bool operator==(const ComputeInstanceInfo&, const ComputeInstanceInfo&) = default;
};

struct GpuInstanceInfo {
  GpuInstanceId id;      // NVML-local to the device
  int profile_id = 0;    // NVML GPU-instance profile id (core/catalogue.h MigProfile::id)
  int start = 0;         // placement start, in memory slices
  int size = 0;          // placement size, in memory slices
  Reading<Bytes> memory_total;
  std::vector<ComputeInstanceInfo> compute_instances;
  friend bool operator==(const GpuInstanceInfo&, const GpuInstanceInfo&) = default;
};

struct DeviceInfo {
  DeviceIndex index;
  std::string uuid;      // "GPU-..."
  std::string name;      // as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"
  // Catalogue entry found from `name` (FindModel); nullptr when the model is unknown — the
  // device is still listed and measured, but cannot be sliced by MIG.
  const DeviceModel* model = nullptr;
  std::string pci_bus_id;  // may be empty
  Reading<Bytes> memory_total;
  Reading<Bytes> memory_used;
  // What the driver keeps for itself (nvmlMemory_v2.reserved); Unsupported with older drivers.
  Reading<Bytes> memory_reserved;
  MigMode mig_current = MigMode::kUnsupported;
  MigMode mig_pending = MigMode::kUnsupported;  // differs from current until reset (Ampere)
  std::vector<GpuInstanceInfo> gpu_instances;    // empty unless MIG is enabled
};

// One GPU process as the driver lists it. PIDs are host-namespace PIDs.
struct ProcessSample {
  int pid = 0;
  Reading<Bytes> memory_used;
  // Per-process utilisation since the previous sample, from the driver's per-process sample
  // buffer. The driver lists only processes with non-zero utilisation there, so a listed
  // process that has no entry reads 0; in MIG mode no tool can attribute utilisation to a PID
  // and these are Unsupported.
  Reading<Permille> sm_util;
  Reading<Permille> mem_util;
  // Set when the device is in MIG mode: the MIG device (GI+CI) the process runs on.
  std::optional<GpuInstanceId> gpu_instance;
  std::optional<ComputeInstanceId> compute_instance;
  std::string mig_uuid;  // "MIG-..." or empty
};

// Per-MIG-device (GI+CI) figures.
struct MigSample {
  std::string uuid;
  GpuInstanceId gpu_instance;
  ComputeInstanceId compute_instance;
  Reading<Bytes> memory_total;
  Reading<Bytes> memory_used;
  Reading<Permille> util;  // Unsupported on pre-Hopper (A100: no per-instance util via NVML)
  std::vector<int> pids;
};

// Everything measured on one device since the previous Sample() of that device.
struct DeviceSample {
  DeviceIndex index;
  std::string uuid;
  // Window covered, in the backend's clock (µs since the Unix epoch for nvml and recordings).
  Micros window_start = 0;
  Micros window_end = 0;
  int driver_samples = 0;  // how many driver buffer samples the utilisation averages
  Reading<Permille> gpu_util;  // time with >= 1 kernel running (NVML GPU_UTILIZATION)
  Reading<Permille> mem_util;  // time device memory was read/written (bandwidth busy)
  Reading<Bytes> memory_total;
  Reading<Bytes> memory_used;
  Reading<int> sm_clock_mhz;
  Reading<int> mem_clock_mhz;
  Reading<std::int64_t> power_mw;
  Reading<int> temperature_c;
  Reading<std::int64_t> energy_mj;  // monotonic since driver load
  std::vector<ProcessSample> processes;
  std::vector<MigSample> mig;  // one per MIG device when MIG is enabled
};

// ---- MPS ----------------------------------------------------------------------------------

struct MpsConfig {
  std::string pipe_dir;  // CUDA_MPS_PIPE_DIRECTORY; unique per device (and per MIG device)
  std::string log_dir;   // CUDA_MPS_LOG_DIRECTORY
  std::optional<int> default_active_thread_percentage;  // 1..100
  std::optional<Bytes> default_pinned_mem_limit;        // per client, on this device
  // The Linux user the device's MPS server serves (`start_server -uid`, right after the
  // defaults above): one server, one user, at a time. Starting for another uid while the daemon
  // serves one is refused (FailedPrecondition); nullopt: the server starts for whoever connects.
  std::optional<std::int64_t> server_uid = std::nullopt;
};

enum class MpsState {
  kStopped = 0,  // no control daemon for this device
  kRunning = 1,  // control daemon answering on its pipe
  kDied = 2,     // we started one and it is gone (or stopped answering): needs restart
};
std::string_view MpsStateName(MpsState s);

struct MpsStatus {
  MpsState state = MpsState::kStopped;
  int control_pid = 0;  // 0 when unknown
  std::string pipe_dir;
  std::string detail;   // e.g. why it counts as died
  std::optional<std::int64_t> server_uid = std::nullopt;  // whom the server was started for (MpsConfig)
};

// ---- the interface ------------------------------------------------------------------------

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual std::string_view kind() const = 0;  // "nvml", "fake", "replay"
  // Driver version or a description of the source (recording file name, "fake").
  virtual std::string description() const = 0;

  virtual Result<std::vector<DeviceInfo>> ListDevices() = 0;

  // Utilisation since the previous Sample() of this device (from the driver's sample buffer,
  // not one instantaneous reading), current memory/clock/power/temperature and processes.
  // NotFound for an unknown index; Unavailable/Internal when the driver fails mid-sample (the
  // next call starts a fresh window and may succeed).
  virtual Result<DeviceSample> Sample(DeviceIndex index) = 0;

  // MPS: one nvidia-cuda-mps-control daemon per device with its own pipe and log dirs.
  // Start when already running with the same pipe dir: OK, no change. Stop when stopped: OK.
  virtual Status StartMps(DeviceIndex index, const MpsConfig& config) = 0;
  virtual Status StopMps(DeviceIndex index) = 0;
  virtual Result<MpsStatus> GetMpsStatus(DeviceIndex index) = 0;

  // MIG. Refused with FailedPrecondition while processes run on the device (mode change) or
  // on the instance (destroy). Setting the current mode again is OK.
  virtual Status SetMigMode(DeviceIndex index, bool enabled) = 0;
  // Creates a GPU instance of `profile_id` at placement `start`; if one with that profile
  // already sits at `start`, returns it unchanged (retry after a crash).
  virtual Result<GpuInstanceInfo> CreateGpuInstance(DeviceIndex index, int profile_id,
                                                    int start) = 0;
  // Creates a new compute instance of `ci_profile_id` (a profile id, not an NVML index) in
  // `gi`. Never returns an existing one (two callers get two CIs); fails when the GI has no
  // room. A caller retrying after a crash looks at the GI's compute_instances first.
  virtual Result<ComputeInstanceInfo> CreateComputeInstance(DeviceIndex index, GpuInstanceId gi,
                                                            int ci_profile_id) = 0;
  // Destroy of something already gone is OK. Destroying a GI destroys its CIs first.
  virtual Status DestroyComputeInstance(DeviceIndex index, GpuInstanceId gi,
                                        ComputeInstanceId ci) = 0;
  virtual Status DestroyGpuInstance(DeviceIndex index, GpuInstanceId gi) = 0;

  // The GPU-instance profiles the driver offers on the device, each with its legal placement
  // starts (nvmlDeviceGetGpuInstanceProfileInfo, ...PossiblePlacements_v2): the table the
  // catalogue's is checked against (MigTableDifferences). Unsupported without MIG or a driver.
  virtual Result<std::vector<MigProfile>> MigProfiles(DeviceIndex index);

  // Driver-enforced memory limits (NVIDIA r615+ / CUDA 13.4 memory partitioning: a hard and a
  // soft limit per cgroup v2 directory and device; not in MIG mode). Where the driver offers
  // them they hold a shared or MPS slice's memory instead of the interposer (docs/memcap.md,
  // "Mechanisms"). Supported only when the driver has them on this device now.
  virtual bool SupportsMemoryLimits(DeviceIndex index);
  // Limits what processes in `cgroup_dir` may allocate on the device: past `hard` allocations
  // fail; `soft` is guaranteed. The limit is read back: a driver that did not keep it is an
  // error, never a silent "done". Unsupported where SupportsMemoryLimits() is false.
  virtual Status SetMemoryLimit(DeviceIndex index, const std::string& cgroup_dir, Bytes soft, Bytes hard);
};

// Differences between the catalogue's MIG profiles of `model` and what a driver reports, one line
// each for people ("profile 9 (3g.40gb): placement starts 0,4 in the catalogue, 0 from the
// driver"); empty when they agree on every profile's id, compute and memory slices, starts,
// instance count and memory (within 1%, as drivers round differently).
std::vector<std::string> MigTableDifferences(const DeviceModel& model, const std::vector<MigProfile>& driver);

// ---- opening a backend by name ------------------------------------------------------------

struct BackendOptions {
  std::string kind = "nvml";        // "nvml" | "fake" | "replay"
  std::string simulate = "8xH100-80GB";  // fake: "<N>x<model>[,<N>x<model>...]"
  std::string replay_file;          // replay: recording path
  std::string mps_control_binary = "nvidia-cuda-mps-control";  // nvml: looked up on PATH
  std::string nvml_library = "libnvidia-ml.so.1";              // nvml: dlopen name
};

// nvml with no driver -> Unavailable("no NVIDIA driver: ..."). Unknown kind -> InvalidArgument.
Result<std::unique_ptr<DeviceBackend>> OpenBackend(const BackendOptions& options);

}  // namespace gpuslice::devices
