#pragma once
// Prometheus text exposition (format 0.0.4) of device and slice metrics, as a library
// function the daemon's /metrics and the Slurm agent both call. Device metric names follow
// dcgm-exporter where they overlap (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_MEM_COPY_UTIL,
// DCGM_FI_DEV_FB_USED/FREE in MiB, DCGM_FI_DEV_POWER_USAGE in W, DCGM_FI_DEV_GPU_TEMP,
// DCGM_FI_DEV_SM_CLOCK/MEM_CLOCK in MHz, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION in mJ) with its
// labels (gpu, UUID, modelName, Hostname; MIG instances add GPU_I_ID); per-slice series are
// gpuslice_slice_* labelled with slice, job_id, user, queue, kind, gpu, in base units. A figure the driver cannot give is omitted, never
// rendered as 0. Pure functions; thread-safe.

#include <optional>
#include <string>
#include <vector>

#include "core/ids.h"
#include "core/slice_kind.h"
#include "devices/backend.h"

namespace gpuslice::agent {

struct SliceMetrics {
  SliceId slice;
  JobId job;
  std::string user;
  std::string queue;
  SliceKind kind = SliceKind::kShared;
  std::string gpu;         // device index list, e.g. "0" or "0,1"
  std::string mig_uuid;    // kind mig
  devices::Reading<devices::Permille> sm_util;
  devices::Reading<devices::Permille> mem_util;
  devices::Reading<Bytes> memory_used;
  int processes = 0;
  bool idle = false;
  std::optional<Micros> idle_for;  // since the last activity; nullopt: unknown (unmeasured), omitted
  std::string activity;  // "active", "idle", "unmeasured"; empty: not sampled yet
  std::string basis;     // the signals that decided it, e.g. "sm,mem"
  std::int64_t held_milli = 0;  // GPU share held (1000 = one device); 0: not known, omitted
};

struct MetricsInput {
  std::string hostname;
  std::vector<devices::DeviceInfo> devices;
  std::vector<devices::DeviceSample> samples;  // latest per device (may be fewer than devices)
  std::vector<SliceMetrics> slices;
  int unattributed_processes = 0;
  int sample_errors = 0;  // cumulative failed device reads
};

std::string RenderPrometheus(const MetricsInput& in);

// Escapes a label value (backslash, double quote, newline).
std::string EscapeLabel(std::string_view v);

}  // namespace gpuslice::agent
