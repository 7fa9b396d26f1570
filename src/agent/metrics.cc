#include "agent/metrics.h"

#include <fmt/format.h>

#include "core/usage.h"

namespace gpuslice::agent {
namespace {

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

class Writer {
 public:
  void Begin(const Family& f) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
  }
  void Line(const char* name, const std::string& labels, const std::string& value) {
    if (labels.empty()) out_ += fmt::format("{} {}\n", name, value);
    else out_ += fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string Permille(devices::Permille p) {  // 0..1000 -> "12.5"
  return p % 10 == 0 ? fmt::format("{}", p / 10) : fmt::format("{}.{}", p / 10, p % 10);
}

std::string Ratio(devices::Permille p) { return fmt::format("{:.3f}", p / 1000.0); }

}  // namespace

std::string EscapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string RenderPrometheus(const MetricsInput& in) {
  Writer w;
  // Device labels as dcgm-exporter writes them, so existing dashboards keep working.
  auto device_labels = [&](const devices::DeviceSample& s) {
    std::string model;
    for (const auto& d : in.devices) {
      if (d.index == s.index) model = d.name;
    }
    std::string l = fmt::format("gpu=\"{}\",UUID=\"{}\",modelName=\"{}\"", s.index.value(), EscapeLabel(s.uuid),
                                EscapeLabel(model));
    if (!in.hostname.empty()) l += fmt::format(",Hostname=\"{}\"", EscapeLabel(in.hostname));
    return l;
  };
  auto device_family = [&](const Family& f, auto value_of) {
    bool begun = false;
    for (const auto& s : in.samples) {
      std::optional<std::string> v = value_of(s);
      if (!v) continue;
      if (!begun) { w.Begin(f); begun = true; }
      w.Line(f.name, device_labels(s), *v);
    }
  };
  using S = devices::DeviceSample;
  device_family({"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."},
                [](const S& s) { return s.gpu_util.ok() ? std::optional(Permille(s.gpu_util.value())) : std::nullopt; });
  device_family({"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."},
                [](const S& s) { return s.mem_util.ok() ? std::optional(Permille(s.mem_util.value())) : std::nullopt; });
  device_family({"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."}, [](const S& s) {
    return s.memory_used.ok() ? std::optional(fmt::format("{}", s.memory_used.value() / kMiB)) : std::nullopt;
  });
  device_family({"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."}, [](const S& s) {
    return s.memory_used.ok() && s.memory_total.ok()
               ? std::optional(fmt::format("{}", (s.memory_total.value() - s.memory_used.value()) / kMiB))
               : std::nullopt;
  });
  device_family({"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."}, [](const S& s) {
    return s.power_mw.ok() ? std::optional(fmt::format("{:.3f}", s.power_mw.value() / 1000.0)) : std::nullopt;
  });
  device_family({"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
                 "Total energy consumption since boot (in mJ)."},
                [](const S& s) {
                  return s.energy_mj.ok() ? std::optional(fmt::format("{}", s.energy_mj.value())) : std::nullopt;
                });
  device_family({"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."}, [](const S& s) {
    return s.temperature_c.ok() ? std::optional(fmt::format("{}", s.temperature_c.value())) : std::nullopt;
  });
  device_family({"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."}, [](const S& s) {
    return s.sm_clock_mhz.ok() ? std::optional(fmt::format("{}", s.sm_clock_mhz.value())) : std::nullopt;
  });
  device_family({"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."}, [](const S& s) {
    return s.mem_clock_mhz.ok() ? std::optional(fmt::format("{}", s.mem_clock_mhz.value())) : std::nullopt;
  });

  // Per MIG instance engine activity (GPM), as dcgm-exporter reports MIG instances: the
  // profiling field with the GPU_I_ID label, a ratio 0..1. Absent where the driver has none.
  bool prof_begun = false;
  for (const auto& s : in.samples) {
    for (const auto& m : s.mig) {
      if (!m.util.ok()) continue;
      if (!prof_begun) {
        w.Begin({"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."});
        prof_begun = true;
      }
      w.Line("DCGM_FI_PROF_GR_ENGINE_ACTIVE",
             device_labels(s) + fmt::format(",GPU_I_ID=\"{}\",GPU_CI_ID=\"{}\",mig_uuid=\"{}\"",
                                            m.gpu_instance.value(), m.compute_instance.value(),
                                            EscapeLabel(m.uuid)),
             Ratio(m.util.value()));
    }
  }

  // Per MIG device memory, dcgm-exporter style (GPU_I_ID label) under the FB_USED name would
  // clash with the parent's series; gpuslice keeps them separate.
  bool mig_begun = false;
  for (const auto& s : in.samples) {
    for (const auto& m : s.mig) {
      if (!m.memory_used.ok()) continue;
      if (!mig_begun) {
        w.Begin({"gpuslice_mig_memory_used_bytes", "gauge", "Memory used in a MIG device."});
        mig_begun = true;
      }
      w.Line("gpuslice_mig_memory_used_bytes",
             fmt::format("gpu=\"{}\",GPU_I_ID=\"{}\",GPU_CI_ID=\"{}\",mig_uuid=\"{}\"", s.index.value(),
                         m.gpu_instance.value(), m.compute_instance.value(), EscapeLabel(m.uuid)),
             fmt::format("{}", m.memory_used.value()));
    }
  }

  auto slice_labels = [](const SliceMetrics& m) {
    // job_id, not job: Prometheus owns "job" (the scrape job) and would rename ours.
    std::string l = fmt::format("slice=\"{}\",job_id=\"{}\",user=\"{}\",queue=\"{}\",kind=\"{}\",gpu=\"{}\"",
                                m.slice.value(), m.job.value(), EscapeLabel(m.user), EscapeLabel(m.queue),
                                SliceKindName(m.kind), EscapeLabel(m.gpu));
    if (!m.mig_uuid.empty()) l += fmt::format(",mig_uuid=\"{}\"", EscapeLabel(m.mig_uuid));
    return l;
  };
  auto slice_family = [&](const Family& f, auto value_of) {
    bool begun = false;
    for (const auto& m : in.slices) {
      std::optional<std::string> v = value_of(m);
      if (!v) continue;
      if (!begun) { w.Begin(f); begun = true; }
      w.Line(f.name, slice_labels(m), *v);
    }
  };
  using M = SliceMetrics;
  slice_family({"gpuslice_slice_sm_utilization_ratio", "gauge",
                "Slice SM utilisation over the last interval (0..1; absent when unsupported)."},
               [](const M& m) { return m.sm_util.ok() ? std::optional(Ratio(m.sm_util.value())) : std::nullopt; });
  slice_family({"gpuslice_slice_memory_utilization_ratio", "gauge",
                "Slice memory-traffic utilisation over the last interval (0..1)."},
               [](const M& m) { return m.mem_util.ok() ? std::optional(Ratio(m.mem_util.value())) : std::nullopt; });
  // Held, next to the utilisation and what was used (gpuslice_slice_used_gpus).
  slice_family({"gpuslice_slice_held_gpus", "gauge",
                "GPUs the slice holds (1 = one whole device; a fraction for shared, mps and mig)."},
               [](const M& m) {
                 return m.held_milli > 0 ? std::optional(fmt::format("{:.3f}", static_cast<double>(m.held_milli) / 1000))
                                         : std::nullopt;
               });
  // Used, by the one definition (core/usage.h): whole/MIG held x own utilisation, shared/MPS
  // their processes' share of the device, at most held. Absent when the utilisation is unknown.
  slice_family({"gpuslice_slice_used_gpus", "gauge",
                "GPUs the slice used over the last interval (whole/MIG: held x utilisation; shared/MPS: "
                "its processes' share of the device, at most held)."},
               [](const M& m) {
                 return m.held_milli > 0 && m.sm_util.ok()
                            ? std::optional(fmt::format(
                                  "{:.3f}", static_cast<double>(UsedMilli(m.kind, m.held_milli, m.sm_util.value())) / 1000))
                            : std::nullopt;
               });
  slice_family({"gpuslice_slice_memory_used_bytes", "gauge", "GPU memory used by the slice's processes."},
               [](const M& m) {
                 return m.memory_used.ok() ? std::optional(fmt::format("{}", m.memory_used.value())) : std::nullopt;
               });
  slice_family({"gpuslice_slice_processes", "gauge", "GPU processes attributed to the slice."},
               [](const M& m) { return std::optional(fmt::format("{}", m.processes)); });
  slice_family({"gpuslice_slice_idle", "gauge", "1 when the slice has been idle for its queue's window."},
               [](const M& m) { return std::optional(std::string(m.idle ? "1" : "0")); });
  slice_family({"gpuslice_slice_idle_seconds", "gauge", "Seconds since the slice's last activity (absent while unmeasured)."},
               [](const M& m) {
                 return m.idle_for ? std::optional(fmt::format("{}", *m.idle_for / kSecond)) : std::nullopt;
               });
  {
    // Info-style: which verdict the last round gave and the signals that decided it.
    bool begun = false;
    for (const auto& m : in.slices) {
      if (m.activity.empty()) continue;
      if (!begun) {
        w.Begin({"gpuslice_slice_activity_info", "gauge",
                 "1 per slice, labelled with the last round's verdict (active, idle, unmeasured) and the signals "
                 "that decided it."});
        begun = true;
      }
      w.Line("gpuslice_slice_activity_info",
             slice_labels(m) + fmt::format(",activity=\"{}\",basis=\"{}\"", EscapeLabel(m.activity),
                                           EscapeLabel(m.basis)),
             "1");
    }
  }

  w.Begin({"gpuslice_unattributed_processes", "gauge", "GPU processes no slice claims."});
  w.Line("gpuslice_unattributed_processes",
         in.hostname.empty() ? "" : fmt::format("Hostname=\"{}\"", EscapeLabel(in.hostname)),
         fmt::format("{}", in.unattributed_processes));
  w.Begin({"gpuslice_device_sample_errors_total", "counter", "Device reads that failed."});
  w.Line("gpuslice_device_sample_errors_total",
         in.hostname.empty() ? "" : fmt::format("Hostname=\"{}\"", EscapeLabel(in.hostname)),
         fmt::format("{}", in.sample_errors));
  return w.Take();
}

}  // namespace gpuslice::agent
