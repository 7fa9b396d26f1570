#pragma once
// The few NVML types gpuslice uses, declared by us from the documented ABI (x86-64 LP64) —
// no NVIDIA header is needed at build time. Layouts and sizes are from
// shared/reference/measurement.md §1.2-1.3 and pinned by static_asserts below; function
// pointer types name the versioned symbols we dlsym. Plain declarations; no state.

#include <cstddef>
#include <cstdint>

namespace gpuslice::devices::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorInUse = 19;
inline constexpr Return kErrorNoData = 21;
inline constexpr Return kErrorInsufficientResources = 23;

struct DeviceSt;
struct GpuInstanceSt;
struct ComputeInstanceSt;
using Device = DeviceSt*;
using GpuInstance = GpuInstanceSt*;
using ComputeInstance = ComputeInstanceSt*;

inline constexpr unsigned kNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kDriverVersionBufferSize = 80;
inline constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE
inline constexpr unsigned kNoInstance = 0xFFFFFFFFu;             // GI/CI id when not MIG

struct Memory {  // nvmlMemory_t (v1)
  unsigned long long total, free, used;
};
struct MemoryV2 {  // nvmlMemory_v2_t; version = nvmlMemory_v2
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
inline constexpr unsigned int kMemoryV2Version = 0x02000028;

union Value {  // nvmlValue_t
  double d;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  int si;
  unsigned short us;
};
struct Sample {  // nvmlSample_t
  unsigned long long time_stamp;
  Value value;
};
inline constexpr int kSamplingGpuUtil = 1;    // NVML_GPU_UTILIZATION_SAMPLES
inline constexpr int kSamplingMemoryUtil = 2;  // NVML_MEMORY_UTILIZATION_SAMPLES
inline constexpr int kValueDouble = 0, kValueUInt = 1, kValueULong = 2, kValueULongLong = 3,
                     kValueSLongLong = 4, kValueSInt = 5, kValueUShort = 6;

struct ProcessUtilizationSample {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long time_stamp;
  unsigned int sm_util, mem_util, enc_util, dec_util;
};

struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t (unversioned symbol, drivers < 510 without _v2)
  unsigned int pid;
  unsigned long long used_gpu_memory;
};
struct ProcessInfoV2 {  // nvmlProcessInfo_t == nvmlProcessInfo_v2_t (_v2 and _v3 symbols)
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};
// Early R535 drivers wrote this 32-byte record through the _v3 symbol (measurement.md §1.1).
struct ProcessInfoR535 {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
  unsigned long long used_gpu_cc_protected_memory;
};

inline constexpr int kClockGraphics = 0, kClockSm = 1, kClockMem = 2;
inline constexpr int kTemperatureGpu = 0;
inline constexpr unsigned kMigDisable = 0, kMigEnable = 1;
inline constexpr unsigned kComputeInstanceEngineProfileShared = 0;

struct GpuInstanceProfileInfo {  // nvmlGpuInstanceProfileInfo_t (v1)
  unsigned int id, is_p2p_supported, slice_count, instance_count, multiprocessor_count,
      copy_engine_count, decoder_count, encoder_count, jpeg_count, ofa_count;
  unsigned long long memory_size_mb;
};
struct GpuInstancePlacement {  // nvmlGpuInstancePlacement_t
  unsigned int start, size;
};
struct GpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  Device device;
  unsigned int id, profile_id;
  GpuInstancePlacement placement;
};
struct ComputeInstanceProfileInfo {  // nvmlComputeInstanceProfileInfo_t (v1)
  unsigned int id, slice_count, instance_count, multiprocessor_count, shared_copy_engine_count,
      shared_decoder_count, shared_encoder_count, shared_jpeg_count, shared_ofa_count;
};
struct ComputeInstancePlacement {
  unsigned int start, size;
};
struct ComputeInstanceInfo {  // nvmlComputeInstanceInfo_t
  Device device;
  GpuInstance gpu_instance;
  unsigned int id, profile_id;
  ComputeInstancePlacement placement;
};

// Memory partitioning (NVIDIA r615 / CUDA 13.4: nvmlDeviceSetMemoryLimits_v1 and
// nvmlDeviceGetMemoryLimits_v1, limits per cgroup v2 directory). Layouts from NVIDIA's NVML API
// reference (nvmlSetMemoryLimits_v1_t, nvmlGetMemoryLimits_v1_t) as published, NOT checked
// against a driver header here (none is installed): the structs carry no version field, so the
// version is the symbol's _v1 suffix, and nvml_limits.cc uses them only from a driver branch of
// 615 or later and reads every limit back after setting it.
struct SetMemoryLimits {  // nvmlSetMemoryLimits_v1_t
  const char* name_space;  // full path of the cgroup v2 directory
  unsigned long long soft_limit;
  unsigned long long hard_limit;
};
struct GetMemoryLimits {  // nvmlGetMemoryLimits_v1_t
  const char* name_space;
  unsigned long long soft_limit;
  unsigned long long hard_limit;
  unsigned long long current_used;
};
// NVML_DEVICE_MEMORY_LIMIT_MAX, "no hard limit" (with soft 0 it clears a limit).
inline constexpr unsigned long long kDeviceMemoryLimitMax = ~0ULL;
inline constexpr int kMemoryLimitsFirstDriver = 615;

static_assert(sizeof(Memory) == 24);
static_assert(sizeof(SetMemoryLimits) == 24 && offsetof(SetMemoryLimits, hard_limit) == 16);
static_assert(sizeof(GetMemoryLimits) == 32 && offsetof(GetMemoryLimits, current_used) == 24);
static_assert(sizeof(MemoryV2) == 40 && offsetof(MemoryV2, total) == 8 && offsetof(MemoryV2, used) == 32);
static_assert(sizeof(Sample) == 16 && offsetof(Sample, value) == 8);
static_assert(sizeof(ProcessUtilizationSample) == 32 && offsetof(ProcessUtilizationSample, sm_util) == 16);
static_assert(sizeof(ProcessInfoV1) == 16);
static_assert(sizeof(ProcessInfoV2) == 24 && offsetof(ProcessInfoV2, gpu_instance_id) == 16);
static_assert(sizeof(ProcessInfoR535) == 32);
static_assert(sizeof(GpuInstanceProfileInfo) == 48 && offsetof(GpuInstanceProfileInfo, memory_size_mb) == 40);
static_assert(sizeof(GpuInstanceInfo) == 24 && offsetof(GpuInstanceInfo, placement) == 16);
static_assert(sizeof(ComputeInstanceProfileInfo) == 36);
static_assert(sizeof(ComputeInstanceInfo) == 32 && offsetof(ComputeInstanceInfo, placement) == 24);

extern "C" {
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using SystemGetDriverVersionFn = Return (*)(char*, unsigned int);
using DeviceGetCountFn = Return (*)(unsigned int*);
using DeviceGetHandleByIndexFn = Return (*)(unsigned int, Device*);
using DeviceGetStringFn = Return (*)(Device, char*, unsigned int);  // GetName, GetUUID
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);
using DeviceGetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);
using DeviceGetSamplesFn = Return (*)(Device, int, unsigned long long, int*, unsigned int*, Sample*);
using DeviceGetProcessUtilizationFn = Return (*)(Device, ProcessUtilizationSample*, unsigned int*,
                                                 unsigned long long);
using DeviceGetRunningProcessesFn = Return (*)(Device, unsigned int*, void*);  // record size varies
using DeviceGetClockInfoFn = Return (*)(Device, int, unsigned int*);
using DeviceGetUIntFn = Return (*)(Device, unsigned int*);  // GetPowerUsage (mW)
using DeviceGetTemperatureFn = Return (*)(Device, int, unsigned int*);
using DeviceGetULongLongFn = Return (*)(Device, unsigned long long*);  // GetTotalEnergyConsumption
using DeviceGetMigModeFn = Return (*)(Device, unsigned int*, unsigned int*);
using DeviceSetMigModeFn = Return (*)(Device, unsigned int, Return*);
using DeviceGetMigDeviceHandleByIndexFn = Return (*)(Device, unsigned int, Device*);
using DeviceGetGpuInstanceProfileInfoFn = Return (*)(Device, unsigned int, GpuInstanceProfileInfo*);
using DeviceGetGpuInstancesFn = Return (*)(Device, unsigned int, GpuInstance*, unsigned int*);
using DeviceGetGpuInstanceByIdFn = Return (*)(Device, unsigned int, GpuInstance*);
using DeviceCreateGpuInstanceWithPlacementFn = Return (*)(Device, unsigned int, const GpuInstancePlacement*,
                                                          GpuInstance*);
using DeviceGetGpuInstancePossiblePlacementsFn = Return (*)(Device, unsigned int, GpuInstancePlacement*,
                                                            unsigned int*);
using GpuInstanceGetInfoFn = Return (*)(GpuInstance, GpuInstanceInfo*);
using GpuInstanceDestroyFn = Return (*)(GpuInstance);
using GpuInstanceGetComputeInstanceProfileInfoFn = Return (*)(GpuInstance, unsigned int, unsigned int,
                                                              ComputeInstanceProfileInfo*);
using GpuInstanceCreateComputeInstanceFn = Return (*)(GpuInstance, unsigned int, ComputeInstance*);
using GpuInstanceGetComputeInstancesFn = Return (*)(GpuInstance, unsigned int, ComputeInstance*,
                                                    unsigned int*);
using GpuInstanceGetComputeInstanceByIdFn = Return (*)(GpuInstance, unsigned int, ComputeInstance*);
using ComputeInstanceGetInfoFn = Return (*)(ComputeInstance, ComputeInstanceInfo*);
using ComputeInstanceDestroyFn = Return (*)(ComputeInstance);
using DeviceSetMemoryLimitsFn = Return (*)(Device, SetMemoryLimits*);
using DeviceGetMemoryLimitsFn = Return (*)(Device, GetMemoryLimits*);
}

// ---- GPM (GPU performance monitoring; Hopper and newer): per-MIG-instance activity --------
// measurement.md §1.3. Two samples >100 ms apart give a metric over the time between them.
struct GpmSampleSt;
using GpmSample = GpmSampleSt*;
inline constexpr unsigned kGpmSupportVersion = 1;     // NVML_GPM_SUPPORT_VERSION
inline constexpr unsigned kGpmMetricsGetVersion = 1;  // NVML_GPM_METRICS_GET_VERSION
inline constexpr unsigned kGpmMetricMax = 333;        // NVML_GPM_METRIC_MAX
inline constexpr unsigned kGpmGraphicsUtil = 1;       // NVML_GPM_METRIC_GRAPHICS_UTIL: % time any work ran

struct GpmSupport {  // nvmlGpmSupport_t
  unsigned version;
  unsigned is_supported_device;
};
struct GpmMetric {  // nvmlGpmMetric_t
  unsigned metric_id;
  Return nvml_return;
  double value;
  struct {
    char* short_name;
    char* long_name;
    char* unit;
  } metric_info;
};
static_assert(sizeof(GpmMetric) == 40);
struct GpmMetricsGet {  // nvmlGpmMetricsGet_t
  unsigned version;
  unsigned num_metrics;
  GpmSample sample1;
  GpmSample sample2;
  GpmMetric metrics[kGpmMetricMax];
};
static_assert(sizeof(GpmMetricsGet) == 13344);
static_assert(offsetof(GpmMetricsGet, metrics) == 24);

extern "C" {
using GpmQueryDeviceSupportFn = Return (*)(Device, GpmSupport*);
using GpmSampleAllocFn = Return (*)(GpmSample*);
using GpmSampleFreeFn = Return (*)(GpmSample);
using GpmMigSampleGetFn = Return (*)(Device, unsigned int, GpmSample);
using GpmMetricsGetFn = Return (*)(GpmMetricsGet*);
}

}  // namespace gpuslice::devices::nvml
