#pragma once
// Agent: the node's sampler. One thread reads every device of a DeviceBackend at a fixed
// interval (default 1 s), attributes GPU processes to the slices bound to it, computes each
// slice's activity, feeds an idle detector and a per-slice ring buffer (+ downsampler for the
// store) and emits a sched::Sample event per round to a sink (the daemon forwards it to the
// scheduler; the Slurm agent uses the same figures).
//
// Slice activity per kind:
//   whole   device utilisation and memory (mean / sum over its devices)
//   mig     the MIG device's figures (utilisation through GPM; Unsupported where the driver
//           has none, e.g. A100), its processes
//   shared, mps  over the slice's attributed processes: per-process SM (and memory traffic)
//           summed and capped at 100% — NVML's per-process figure is the share of time the
//           process had a kernel running, so processes that take turns add up (max would call
//           two alternating 40% processes 40%), and where they overlap the sum overstates,
//           which errs towards "busy", the safe side for reclaim; a slice cannot exceed its
//           device. One per-process figure unsupported makes the sum unknown. On a device
//           where an MPS server runs, the driver charges its clients' kernels to the server:
//           the server's figure is the slice's when the slice is the device's only mps slice,
//           otherwise the slice's SM figure is unknown.
// Each bound slice goes to the sink every round as a sched::SliceSample saying which figures
// were measured (unknown is never sent as 0) — also when its device read failed (then nothing
// is known). The same rule as the scheduler's (sched::ClassifySample) gives each slice its
// verdict (active / idle / unknown) and the signals that decided it.
// Who owns a GPU process is the OwnerResolver's call (default: Attributor).
//
// Thread-safe: Bind/Unbind/snapshots may be called from any thread while the sampler runs.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/attribution.h"
#include "agent/idle.h"
#include "agent/metrics.h"
#include "agent/series.h"
#include "devices/backend.h"
#include "devices/clock.h"
#include "sched/events.h"
#include "sched/scheduler.h"

namespace gpuslice::agent {

struct AgentOptions {
  Micros interval = kSecond;
  std::size_t series_capacity = 3600;  // points per slice kept in memory (1 h at 1 Hz)
  Micros downsample_bucket = kMinute;
  std::string hostname;                // metrics label; empty: none
  std::string proc_root = "/proc";
};

struct SliceActivity {
  SliceId slice;
  Micros now = 0;
  devices::Reading<devices::Permille> sm_util;
  devices::Reading<devices::Permille> mem_util;
  devices::Reading<Bytes> memory_used;
  std::vector<int> pids;
  bool processes_known = true;  // false: a process on its device is claimed by no slice
  sched::SliceSample sample;    // what the scheduler is told
  sched::SampleVerdict verdict; // by the queue's policy; basis names the deciding signals
};

// What one sampling round saw (returned by SampleOnce, for tests and tools).
struct Round {
  Micros now = 0;
  std::vector<devices::DeviceSample> samples;  // devices read successfully
  std::vector<Status> errors;                  // one per failed device read
  std::vector<SliceActivity> slices;
  AttributionStats attribution;
  sched::Sample event;
};

// "active", "idle" or "unmeasured" (what views and /metrics call an unknown verdict).
std::string ActivityLabel(sched::Activity a);

class Agent {
 public:
  using SampleSink = std::function<void(const sched::Sample&)>;

  // `resolver` decides who owns a GPU process; nullptr: an Attributor on options.proc_root.
  Agent(devices::DeviceBackend& backend, AgentOptions options, devices::Clock clock = nullptr,
        std::unique_ptr<OwnerResolver> resolver = nullptr);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  void SetSampleSink(SampleSink sink);
  void SetDownsampleSink(Downsampler::Sink sink);

  void Bind(const SliceBinding& binding);
  void Unbind(SliceId slice);  // flushes its open downsample bucket
  // A report from outside the driver (e.g. a notebook's kernel busy or idle), used as the
  // "external" signal of the slice's next round.
  void ReportActivity(SliceId slice, sched::Activity activity);

  // Lists devices, then runs the sampling thread. FailedPrecondition if already running.
  Status Start();
  void Stop();  // idempotent; joins the thread

  // One round, synchronously (the thread calls this; tests call it directly).
  Round SampleOnce();

  MetricsInput MetricsSnapshot() const;
  std::vector<SeriesPoint> Series(SliceId slice) const;
  // Each device's recent readings (series_capacity points, oldest first), keyed by index. A
  // round whose read of a device failed adds no point: that time stays unknown (a gap).
  std::map<std::uint32_t, std::vector<SeriesPoint>> DeviceSeries() const;
  std::optional<IdleState> Idle(SliceId slice) const;
  int rounds() const;

 private:
  struct SliceState {
    SliceBinding binding;
    SeriesRing ring;
    IdleDetector idle;
    SliceActivity latest;
    std::optional<Bytes> last_memory;                     // for the memory-change signal
    sched::Activity external = sched::Activity::kUnknown;  // reported since the last round
  };
  // What a round learnt about one device beyond its sample.
  struct DeviceRound {
    const devices::DeviceSample* sample = nullptr;  // nullptr: read failed or not listed
    Status failure;                                 // when sample is nullptr
    int strangers = 0;                              // processes no slice claims
    bool mps_server = false;
    devices::Reading<devices::Permille> mps_sm, mps_mem;  // the servers' figures, summed
    int mps_slices = 0;                             // mps slices bound on it
  };
  void Loop();
  SliceActivity Compute(const SliceBinding& b, Micros now, const std::map<std::uint32_t, DeviceRound>& devs,
                        const std::map<int, SliceId>& owner) const;

  devices::DeviceBackend& backend_;
  AgentOptions options_;
  devices::Clock clock_;

  mutable std::mutex mu_;  // guards everything below except attributor_ (sampling thread only)
  std::map<SliceId, SliceState> slices_;
  std::vector<devices::DeviceInfo> devices_;
  std::vector<devices::DeviceSample> latest_samples_;
  std::map<std::uint32_t, SeriesRing> device_rings_;
  int unattributed_ = 0;
  int sample_errors_ = 0;
  int rounds_ = 0;
  SampleSink sample_sink_;
  std::unique_ptr<Downsampler> downsampler_;

  std::mutex round_mu_;  // one round at a time (thread vs direct SampleOnce)
  std::unique_ptr<OwnerResolver> resolver_;

  std::mutex run_mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpuslice::agent
