#pragma once
// Agent: the node's sampler. One thread reads every device of a DeviceBackend at a fixed
// interval (default 1 s), attributes GPU processes to the slices bound to it, computes each
// slice's activity, feeds an idle detector and a per-slice ring buffer (+ downsampler for the
// store) and emits a sched::Sample event per round to a sink (the daemon forwards it to the
// scheduler; the Slurm agent uses the same figures).
//
// Slice activity per kind:
//   whole   device utilisation and memory (mean / sum over its devices)
//   mig     the MIG device's figures (utilisation Unsupported on pre-Hopper), its processes
//   shared, mps  sums over the slice's attributed processes (per-process figures)
// sched::SliceSample has plain ints: a slice whose utilisation is *unsupported* is sent with
// sm 0 and its process count (the scheduler's idle policy can still use processes); a slice
// whose device read *failed* this round is left out of the Sample (no evidence either way).
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

class Agent {
 public:
  using SampleSink = std::function<void(const sched::Sample&)>;

  Agent(devices::DeviceBackend& backend, AgentOptions options, devices::Clock clock = nullptr);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  void SetSampleSink(SampleSink sink);
  void SetDownsampleSink(Downsampler::Sink sink);

  void Bind(const SliceBinding& binding);
  void Unbind(SliceId slice);  // flushes its open downsample bucket

  // Lists devices, then runs the sampling thread. FailedPrecondition if already running.
  Status Start();
  void Stop();  // idempotent; joins the thread

  // One round, synchronously (the thread calls this; tests call it directly).
  Round SampleOnce();

  MetricsInput MetricsSnapshot() const;
  std::vector<SeriesPoint> Series(SliceId slice) const;
  std::optional<IdleState> Idle(SliceId slice) const;
  int rounds() const;

 private:
  struct SliceState {
    SliceBinding binding;
    SeriesRing ring;
    IdleDetector idle;
    SliceActivity latest;
  };
  void Loop();
  SliceActivity Compute(const SliceBinding& b, Micros now,
                        const std::map<std::uint32_t, const devices::DeviceSample*>& by_device,
                        const std::map<std::uint32_t, Status>& failed,
                        const std::map<int, SliceId>& owner) const;

  devices::DeviceBackend& backend_;
  AgentOptions options_;
  devices::Clock clock_;

  mutable std::mutex mu_;  // guards everything below except attributor_ (sampling thread only)
  std::map<SliceId, SliceState> slices_;
  std::vector<devices::DeviceInfo> devices_;
  std::vector<devices::DeviceSample> latest_samples_;
  int unattributed_ = 0;
  int sample_errors_ = 0;
  int rounds_ = 0;
  SampleSink sample_sink_;
  std::unique_ptr<Downsampler> downsampler_;

  std::mutex round_mu_;  // one round at a time (thread vs direct SampleOnce)
  Attributor attributor_;

  std::mutex run_mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpuslice::agent
