#include "agent/agent.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpuslice::agent {
namespace {

using devices::Permille;
using devices::Reading;

int ToPercent(const Reading<Permille>& r) { return r.ok() ? (r.value() + 5) / 10 : 0; }

std::string DeviceList(const std::vector<DeviceIndex>& ds) {
  std::string out;
  for (const auto& d : ds) out += (out.empty() ? "" : ",") + std::to_string(d.value());
  return out;
}

}  // namespace

std::string ActivityLabel(sched::Activity a) {
  return a == sched::Activity::kUnknown ? "unmeasured" : std::string(sched::ActivityName(a));
}

namespace {

// A missing reading that means "the read failed" rather than "the driver cannot say".
bool IsFailure(const Status& s) {
  return !s.ok() && s.code() != StatusCode::kUnsupported && s.code() != StatusCode::kNotFound;
}

}  // namespace

Agent::Agent(devices::DeviceBackend& backend, AgentOptions options, devices::Clock clock,
             std::unique_ptr<OwnerResolver> resolver)
    : backend_(backend),
      options_(std::move(options)),
      clock_(clock ? std::move(clock) : devices::SystemClock()),
      resolver_(resolver ? std::move(resolver)
                         : std::make_unique<Attributor>(ProcessTable(options_.proc_root))) {}

Agent::~Agent() { Stop(); }

void Agent::SetSampleSink(SampleSink sink) {
  std::lock_guard lock(mu_);
  sample_sink_ = std::move(sink);
}

void Agent::SetDownsampleSink(Downsampler::Sink sink) {
  std::lock_guard lock(mu_);
  downsampler_ = std::make_unique<Downsampler>(options_.downsample_bucket, std::move(sink));
}

void Agent::Bind(const SliceBinding& binding) {
  std::lock_guard lock(mu_);
  auto it = slices_.find(binding.slice);
  if (it != slices_.end()) {
    // Re-binding (daemon restart, added pids) keeps the history and idle state.
    it->second.binding = binding;
    return;
  }
  slices_.emplace(binding.slice,
                  SliceState{binding, SeriesRing(options_.series_capacity), IdleDetector(binding.idle), {}, std::nullopt,
                             sched::Activity::kUnknown});
}

void Agent::Unbind(SliceId slice) {
  std::lock_guard lock(mu_);
  if (downsampler_) downsampler_->Flush(slice);
  slices_.erase(slice);
}

Status Agent::Start() {
  std::lock_guard run(run_mu_);
  if (thread_.joinable()) return FailedPrecondition("agent: already running");
  auto listed = backend_.ListDevices();
  if (!listed.ok()) return listed.status().WithContext("agent: listing devices");
  {
    std::lock_guard lock(mu_);
    devices_ = std::move(listed).value();
  }
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void Agent::Stop() {
  {
    std::lock_guard run(run_mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Agent::Loop() {
  // Rounds are paced from a fixed start, so a slow round does not shift every later one.
  auto next = std::chrono::steady_clock::now();
  std::unique_lock run(run_mu_);
  while (!stop_) {
    run.unlock();
    (void)SampleOnce();
    run.lock();
    next += std::chrono::microseconds(options_.interval);
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // fell behind (e.g. suspended): skip, don't burst
    cv_.wait_until(run, next, [this] { return stop_; });
  }
}

SliceActivity Agent::Compute(const SliceBinding& b, Micros now, const std::map<std::uint32_t, DeviceRound>& devs,
                             const std::map<int, SliceId>& owner) const {
  SliceActivity a;
  a.slice = b.slice;
  a.now = now;
  auto unknown_all = [&](const Status& why) {
    a.sm_util = Reading<Permille>::Missing(why);
    a.mem_util = a.sm_util;
    a.memory_used = Reading<Bytes>::Missing(why);
    a.processes_known = false;
    return a;
  };
  for (const auto& d : b.devices) {
    auto it = devs.find(d.value());
    if (it == devs.end()) return unknown_all(NotFound(fmt::format("device {} not sampled", d.value())));
    if (it->second.sample == nullptr) return unknown_all(it->second.failure);
  }
  auto owned = [&](const devices::ProcessSample& p) {
    auto it = owner.find(p.pid);
    return it != owner.end() && it->second == b.slice;
  };

  if (b.kind == sched::SliceKind::kMig) {
    for (const auto& d : b.devices) {
      for (const auto& m : devs.at(d.value()).sample->mig) {
        if (m.uuid != b.mig_uuid) continue;
        a.sm_util = m.util;
        a.mem_util = Reading<Permille>::NotSupported("no memory-traffic figure per MIG instance");
        a.memory_used = m.memory_used;
        a.pids = m.pids;  // the driver lists the instance's processes: no guessing
        return a;
      }
    }
    return unknown_all(NotFound(fmt::format("MIG device {} not present", b.mig_uuid)));
  }

  if (b.kind == sched::SliceKind::kWhole) {
    long long sm = 0, mem = 0;
    Bytes used = 0;
    a.sm_util = Reading<Permille>::Of(0);
    a.mem_util = Reading<Permille>::Of(0);
    a.memory_used = Reading<Bytes>::Of(0);
    for (const auto& d : b.devices) {
      const auto* s = devs.at(d.value()).sample;
      if (s->gpu_util.ok()) sm += s->gpu_util.value(); else a.sm_util = s->gpu_util;
      if (s->mem_util.ok()) mem += s->mem_util.value(); else a.mem_util = s->mem_util;
      if (s->memory_used.ok()) used += s->memory_used.value(); else a.memory_used = s->memory_used;
      for (const auto& p : s->processes) {
        if (owned(p) && std::find(a.pids.begin(), a.pids.end(), p.pid) == a.pids.end()) a.pids.push_back(p.pid);
      }
      // The devices are the slice's alone: a process nobody claims still is its work.
      if (devs.at(d.value()).strangers > 0) a.processes_known = false;
    }
    const auto n = static_cast<long long>(b.devices.size());
    if (a.sm_util.ok()) a.sm_util = Reading<Permille>::Of(static_cast<Permille>(sm / n));
    if (a.mem_util.ok()) a.mem_util = Reading<Permille>::Of(static_cast<Permille>(mem / n));
    if (a.memory_used.ok()) a.memory_used = Reading<Bytes>::Of(used);
    return a;
  }

  // shared / mps: only the slice's own processes count; the device is shared with others.
  long long sm = 0, mem = 0;
  Bytes used = 0;
  a.sm_util = Reading<Permille>::Of(0);
  a.mem_util = Reading<Permille>::Of(0);
  a.memory_used = Reading<Bytes>::Of(0);
  for (const auto& d : b.devices) {
    const DeviceRound& dr = devs.at(d.value());
    // A stranger on the device may be this slice's (a process we could not place): the
    // process count is then not evidence of idleness.
    if (dr.strangers > 0) a.processes_known = false;
    for (const auto& p : dr.sample->processes) {
      if (!owned(p)) continue;
      a.pids.push_back(p.pid);
      // A process that vanished mid-read contributes nothing; "unsupported" spreads.
      if (p.sm_util.ok()) sm += p.sm_util.value();
      else if (p.sm_util.status().code() != StatusCode::kNotFound) a.sm_util = p.sm_util;
      if (p.mem_util.ok()) mem += p.mem_util.value();
      else if (p.mem_util.status().code() != StatusCode::kNotFound) a.mem_util = p.mem_util;
      if (p.memory_used.ok()) used += p.memory_used.value();
    }
    if (dr.mps_server) {
      // The driver charges MPS clients' kernels to the server process.
      if (b.kind == sched::SliceKind::kMps && dr.mps_slices == 1) {
        a.sm_util = dr.mps_sm;
        a.mem_util = dr.mps_mem;
        sm = a.sm_util.ok() ? a.sm_util.value() : 0;
        mem = a.mem_util.ok() ? a.mem_util.value() : 0;
      } else if (b.kind == sched::SliceKind::kMps) {
        a.sm_util = Reading<Permille>::NotSupported("kernels are attributed to the MPS server, shared by several slices");
        a.mem_util = a.sm_util;
      }
    }
  }
  if (a.sm_util.ok()) a.sm_util = Reading<Permille>::Of(static_cast<Permille>(std::min<long long>(sm, 1000)));
  if (a.mem_util.ok()) a.mem_util = Reading<Permille>::Of(static_cast<Permille>(std::min<long long>(mem, 1000)));
  a.memory_used = Reading<Bytes>::Of(used);
  return a;
}

Round Agent::SampleOnce() {
  std::lock_guard round_lock(round_mu_);
  Round round;
  round.now = clock_();

  std::vector<devices::DeviceInfo> devs;
  std::vector<SliceBinding> bindings;
  {
    std::lock_guard lock(mu_);
    devs = devices_;
    for (const auto& [id, st] : slices_) bindings.push_back(st.binding);
  }
  if (devs.empty()) {
    auto listed = backend_.ListDevices();
    if (listed.ok()) {
      devs = std::move(listed).value();
      std::lock_guard lock(mu_);
      devices_ = devs;
    } else {
      round.errors.push_back(listed.status());
    }
  }

  std::map<std::uint32_t, Status> failed;
  for (const auto& d : devs) {
    auto s = backend_.Sample(d.index);
    if (s.ok()) {
      round.samples.push_back(std::move(s).value());
    } else {
      failed[d.index.value()] = s.status();
      round.errors.push_back(s.status().WithContext(fmt::format("device {}", d.index.value())));
    }
  }
  std::map<std::uint32_t, DeviceRound> by_device;
  for (const auto& [idx, st] : failed) by_device[idx].failure = st;
  for (const auto& s : round.samples) by_device[s.index.value()].sample = &s;
  for (const auto& b : bindings) {
    if (b.kind != sched::SliceKind::kMps) continue;
    for (const auto& d : b.devices) ++by_device[d.value()].mps_slices;
  }

  std::map<int, SliceId> owner;
  for (const auto& s : round.samples) {
    DeviceRound& dr = by_device[s.index.value()];
    for (const auto& p : s.processes) {
      const Owner o = resolver_->Resolve(s.index, p, bindings, &round.attribution);
      if (o.slice) owner[p.pid] = *o.slice;
      if (o.stranger) ++dr.strangers;
      if (o.mps_server) {
        if (!dr.mps_server) {
          dr.mps_server = true;
          dr.mps_sm = p.sm_util;
          dr.mps_mem = p.mem_util;
        } else {
          dr.mps_sm = dr.mps_sm.ok() && p.sm_util.ok() ? Reading<Permille>::Of(dr.mps_sm.value() + p.sm_util.value())
                                                       : (dr.mps_sm.ok() ? p.sm_util : dr.mps_sm);
          dr.mps_mem = dr.mps_mem.ok() && p.mem_util.ok()
                           ? Reading<Permille>::Of(dr.mps_mem.value() + p.mem_util.value())
                           : (dr.mps_mem.ok() ? p.mem_util : dr.mps_mem);
        }
      }
    }
  }
  resolver_->EndRound();

  std::map<SliceId, std::pair<std::optional<Bytes>, sched::Activity>> history;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, st] : slices_) {
      history[id] = {st.last_memory, st.external};
      st.external = sched::Activity::kUnknown;  // a report counts for one round
    }
  }

  round.event.now = round.now;
  for (const auto& b : bindings) {
    SliceActivity a = Compute(b, round.now, by_device, owner);
    sched::SliceSample& ss = a.sample;
    ss.slice = b.slice;
    ss.sm_known = a.sm_util.ok();
    ss.sm_percent = ToPercent(a.sm_util);
    ss.memory_known = a.mem_util.ok();
    ss.memory_percent = ToPercent(a.mem_util);
    ss.processes_known = a.processes_known;
    ss.processes = static_cast<int>(a.pids.size());
    const auto& [last_memory, external] = history[b.slice];
    ss.memory_change = MemoryChange(last_memory, a.memory_used.optional());
    ss.external = external;
    a.verdict = sched::ClassifySample(b.idle, ss);
    round.event.slices.push_back(ss);
    round.slices.push_back(std::move(a));
  }

  SampleSink sink;
  {
    std::lock_guard lock(mu_);
    for (const auto& a : round.slices) {
      auto it = slices_.find(a.slice);
      if (it == slices_.end()) continue;  // unbound during the round
      it->second.idle.Observe(a.now, a.sample);
      it->second.latest = a;
      if (a.memory_used.ok()) it->second.last_memory = a.memory_used.value();
      if (IsFailure(a.sm_util.status())) continue;  // the read failed: no point for the series
      SeriesPoint p;
      p.t = a.now;
      p.sm_util = a.sm_util.optional();
      p.mem_util = a.mem_util.optional();
      p.memory_used = a.memory_used.optional();
      p.processes = static_cast<int>(a.pids.size());
      it->second.ring.Push(p);
      if (downsampler_) downsampler_->Add(a.slice, p);
    }
    // Keep the newest successful read per device for /metrics.
    for (const auto& s : round.samples) {
      auto it = std::find_if(latest_samples_.begin(), latest_samples_.end(),
                             [&](const auto& x) { return x.index == s.index; });
      if (it == latest_samples_.end()) latest_samples_.push_back(s);
      else *it = s;
      SeriesPoint p;
      p.t = round.now;
      p.sm_util = s.gpu_util.optional();
      p.mem_util = s.mem_util.optional();
      p.memory_used = s.memory_used.optional();
      p.processes = static_cast<int>(s.processes.size());
      device_rings_.try_emplace(s.index.value(), options_.series_capacity).first->second.Push(p);
    }
    unattributed_ = round.attribution.unattributed;
    sample_errors_ += static_cast<int>(failed.size());
    ++rounds_;
    sink = sample_sink_;
  }
  if (sink) sink(round.event);
  return round;
}

void Agent::ReportActivity(SliceId slice, sched::Activity activity) {
  std::lock_guard lock(mu_);
  if (auto it = slices_.find(slice); it != slices_.end()) it->second.external = activity;
}

MetricsInput Agent::MetricsSnapshot() const {
  std::lock_guard lock(mu_);
  MetricsInput in;
  in.hostname = options_.hostname;
  in.devices = devices_;
  in.samples = latest_samples_;
  std::sort(in.samples.begin(), in.samples.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  in.unattributed_processes = unattributed_;
  in.sample_errors = sample_errors_;
  for (const auto& [id, st] : slices_) {
    SliceMetrics m;
    m.slice = id;
    m.job = st.binding.job;
    m.user = st.binding.user;
    m.queue = st.binding.queue;
    m.kind = st.binding.kind;
    m.gpu = DeviceList(st.binding.devices);
    m.mig_uuid = st.binding.mig_uuid;
    m.held_milli = st.binding.held_milli;
    m.sm_util = st.latest.sm_util;
    m.mem_util = st.latest.mem_util;
    m.memory_used = st.latest.memory_used;
    m.processes = static_cast<int>(st.latest.pids.size());
    m.idle = st.idle.state().idle;
    // Unknown (absent) until a sample measured it: before the first one, and while unmeasured.
    if (st.latest.now != 0 && !st.idle.state().unmeasured) m.idle_for = st.idle.state().idle_for;
    if (st.latest.now != 0) {
      m.activity = ActivityLabel(st.latest.verdict.activity);
      m.basis = st.latest.verdict.basis;
    }
    in.slices.push_back(std::move(m));
  }
  return in;
}

std::vector<SeriesPoint> Agent::Series(SliceId slice) const {
  std::lock_guard lock(mu_);
  auto it = slices_.find(slice);
  return it == slices_.end() ? std::vector<SeriesPoint>{} : it->second.ring.Points();
}

std::map<std::uint32_t, std::vector<SeriesPoint>> Agent::DeviceSeries() const {
  std::lock_guard lock(mu_);
  std::map<std::uint32_t, std::vector<SeriesPoint>> out;
  for (const auto& [idx, ring] : device_rings_) out[idx] = ring.Points();
  return out;
}

std::optional<IdleState> Agent::Idle(SliceId slice) const {
  std::lock_guard lock(mu_);
  auto it = slices_.find(slice);
  if (it == slices_.end()) return std::nullopt;
  return it->second.idle.state();
}

int Agent::rounds() const {
  std::lock_guard lock(mu_);
  return rounds_;
}

}  // namespace gpuslice::agent
