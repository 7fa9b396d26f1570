#include "devices/fake.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace gpuslice::devices {
namespace {

// NVML refreshes its utilisation buffer every 1/6 s to 1 s depending on the product; the fake
// pretends 1/6 s so `driver_samples` looks like a real driver's.
constexpr Micros kDriverSamplePeriod = kSecond / 6;

// Compute slices of an NVML compute-instance profile id (measurement.md §1.3 CI profiles).
int CiComputeSlices(int ci_profile_id) {
  switch (ci_profile_id) {
    case 0: return 1;
    case 1: return 2;
    case 2: return 3;
    case 3: return 4;
    case 4: return 7;
    case 5: return 8;
    case 6: return 6;
    case 7: return 1;
    default: return 0;
  }
}

std::string GpuUuid(std::size_t index) {
  return fmt::format("GPU-fa4e{:04x}-0000-4000-8000-{:012x}", index, index + 1);
}

std::string MigUuid(std::size_t index, std::uint32_t gi, std::uint32_t ci) {
  return fmt::format("MIG-fa4e{:04x}-{:04x}-4000-8000-{:012x}", index, gi, ci + 1);
}

}  // namespace

Result<std::vector<const DeviceModel*>> ParseSimulateSpec(std::string_view spec) {
  std::vector<const DeviceModel*> out;
  if (spec.empty()) return InvalidArgument("simulate: empty device list (expected e.g. 8xH100-80GB)");
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    std::size_t comma = spec.find(',', pos);
    std::string_view part = spec.substr(pos, comma == std::string_view::npos ? spec.npos : comma - pos);
    std::size_t x = part.find('x');
    int count = 1;
    std::string_view model_name = part;
    if (x != std::string_view::npos && x > 0) {
      auto [p, ec] = std::from_chars(part.data(), part.data() + x, count);
      if (ec == std::errc() && p == part.data() + x) model_name = part.substr(x + 1);
      else count = 1;
    }
    if (count < 1 || count > 64) {
      return InvalidArgument(fmt::format("simulate: count in '{}' must be 1..64", part));
    }
    auto model = FindModel(model_name);
    if (!model.ok()) {
      // A bad spec is bad input (exit "usage"), whatever code the catalogue chose.
      return InvalidArgument(fmt::format("simulate: '{}': {}", part, model.status().message()));
    }
    for (int i = 0; i < count; ++i) out.push_back(*model);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

Result<std::unique_ptr<FakeBackend>> FakeBackend::Create(std::string_view spec, Clock clock) {
  GPUSLICE_ASSIGN_OR_RETURN(auto models, ParseSimulateSpec(spec));
  return std::make_unique<FakeBackend>(std::move(models), clock ? std::move(clock) : SystemClock());
}

FakeBackend::FakeBackend(std::vector<const DeviceModel*> models, Clock clock)
    : clock_(std::move(clock)) {
  for (std::size_t i = 0; i < models.size(); ++i) {
    Device d;
    d.model = models[i];
    d.uuid = GpuUuid(i);
    // Pre-Hopper MIG has no per-instance utilisation through NVML (measurement.md §1.4).
    d.mig_util_supported = !(d.model->name.starts_with("A100") || d.model->name.starts_with("A30"));
    devices_.push_back(std::move(d));
  }
}

std::string FakeBackend::description() const {
  std::lock_guard lock(mu_);
  std::string out = "fake";
  for (const auto& d : devices_) out += " " + d.model->name;
  return out;
}

void FakeBackend::AddStep(DeviceIndex index, FakeStep step) {
  std::lock_guard lock(mu_);
  assert(index.value() < devices_.size());
  auto& steps = devices_[index.value()].steps;
  auto it = std::upper_bound(steps.begin(), steps.end(), step.at,
                             [](Micros t, const FakeStep& s) { return t < s.at; });
  steps.insert(it, std::move(step));
}

void FakeBackend::SetState(DeviceIndex index, FakeStep step) {
  std::lock_guard lock(mu_);
  assert(index.value() < devices_.size());
  auto& d = devices_[index.value()];
  // Keep what happened before now, so a window spanning the change still averages correctly.
  step.at = clock_();
  std::erase_if(d.steps, [&](const FakeStep& s) { return s.at >= step.at; });
  d.steps.push_back(std::move(step));
}

void FakeBackend::InjectError(FakeCall call, Status error, int times) {
  std::lock_guard lock(mu_);
  for (int i = 0; i < times; ++i) injected_[call].push_back(error);
}

void FakeBackend::KillMps(DeviceIndex index) {
  std::lock_guard lock(mu_);
  auto& d = devices_.at(index.value());
  if (d.mps_running) d.mps_died = true;
}

void FakeBackend::SetMigUtilSupported(DeviceIndex index, bool supported) {
  std::lock_guard lock(mu_);
  devices_.at(index.value()).mig_util_supported = supported;
}

void FakeBackend::SetProcessUtilSupported(DeviceIndex index, bool supported) {
  std::lock_guard lock(mu_);
  devices_.at(index.value()).process_util_supported = supported;
}

Status FakeBackend::TakeInjected(FakeCall call) {
  auto it = injected_.find(call);
  if (it == injected_.end() || it->second.empty()) return Status::Ok();
  Status s = it->second.front();
  it->second.erase(it->second.begin());
  return s;
}

Result<FakeBackend::Device*> FakeBackend::Find(DeviceIndex index) {
  if (index.value() >= devices_.size()) {
    return NotFound(fmt::format("device index {}: no such device ({} present)", index.value(),
                                devices_.size()));
  }
  return &devices_[index.value()];
}

const FakeStep* FakeBackend::StepAt(const Device& d, Micros t) const {
  const FakeStep* found = nullptr;
  for (const auto& s : d.steps) {
    if (s.at > t) break;
    found = &s;
  }
  return found;
}

bool FakeBackend::HasProcessesOn(const Device& d, Micros now, const GpuInstanceInfo* gi) const {
  const FakeStep* step = StepAt(d, now);
  if (step == nullptr) return false;
  for (const auto& p : step->processes) {
    if (gi == nullptr) return true;
    for (const auto& ci : gi->compute_instances) {
      if (p.mig_uuid == ci.uuid) return true;
    }
  }
  return false;
}

DeviceInfo FakeBackend::Describe(std::size_t i, const Device& d) const {
  DeviceInfo info;
  info.index = DeviceIndex(static_cast<std::uint32_t>(i));
  info.uuid = d.uuid;
  info.name = d.model->aliases.empty() ? d.model->name : d.model->aliases.front();
  info.model = d.model;
  info.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x18 + i);
  info.memory_total = Reading<Bytes>::Of(d.model->memory);
  const FakeStep* step = StepAt(d, clock_());
  Bytes used = 0;
  if (step != nullptr) {
    if (step->memory_used) {
      used = *step->memory_used;
    } else {
      for (const auto& p : step->processes) used += p.memory;
    }
  }
  info.memory_used = Reading<Bytes>::Of(used);
  info.mig_current = d.model->supports_mig() ? d.mig : MigMode::kUnsupported;
  info.mig_pending = info.mig_current;
  if (d.mig == MigMode::kEnabled) info.gpu_instances = d.gpu_instances;
  return info;
}

Result<std::vector<DeviceInfo>> FakeBackend::ListDevices() {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kListDevices));
  std::vector<DeviceInfo> out;
  for (std::size_t i = 0; i < devices_.size(); ++i) out.push_back(Describe(i, devices_[i]));
  return out;
}

Result<DeviceSample> FakeBackend::Sample(DeviceIndex index) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  const Micros now = clock_();
  // A failed read loses its window, as a real driver error would; the next read starts anew.
  const Micros from = d->last_read < 0 ? now - kSecond : d->last_read;
  d->last_read = now;
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kSample));

  DeviceSample s;
  s.index = index;
  s.uuid = d->uuid;
  s.window_start = from;
  s.window_end = now;
  const bool mig = d->mig == MigMode::kEnabled;

  // Time-weighted mean over the steps in [from, now): what the driver's buffer averages to.
  if (now <= from) {
    s.gpu_util = Reading<Permille>::Missing(NotFound("no new driver samples since the last read"));
    s.mem_util = s.gpu_util;
  } else if (mig) {
    s.gpu_util = Reading<Permille>::NotSupported("GPU utilisation is not available with MIG enabled");
    s.mem_util = s.gpu_util;
  } else {
    __int128 gpu = 0, mem = 0;
    Micros t = from;
    while (t < now) {
      const FakeStep* step = StepAt(*d, t);
      Micros next = now;
      for (const auto& st : d->steps) {
        if (st.at > t) { next = std::min(next, st.at); break; }
      }
      const Micros span = next - t;
      if (step != nullptr) {
        gpu += static_cast<__int128>(step->gpu_util) * span;
        mem += static_cast<__int128>(step->mem_util) * span;
      }
      t = next;
    }
    const Micros window = now - from;
    s.gpu_util = Reading<Permille>::Of(static_cast<Permille>((gpu + window / 2) / window));
    s.mem_util = Reading<Permille>::Of(static_cast<Permille>((mem + window / 2) / window));
    s.driver_samples = static_cast<int>(std::max<Micros>(1, window / kDriverSamplePeriod));
  }

  const FakeStep* step = StepAt(*d, now);
  Bytes used = 0;
  if (step != nullptr) {
    for (const auto& p : step->processes) {
      ProcessSample ps;
      ps.pid = p.pid;
      if (p.exits_during_lookup) {
        Status gone = NotFound(fmt::format("process {} exited during lookup", p.pid));
        ps.memory_used = Reading<Bytes>::Missing(gone);
        ps.sm_util = Reading<Permille>::Missing(gone);
        ps.mem_util = Reading<Permille>::Missing(gone);
      } else {
        ps.memory_used = Reading<Bytes>::Of(p.memory);
        if (mig) {
          ps.sm_util = Reading<Permille>::NotSupported("no per-process utilisation in MIG mode");
          ps.mem_util = ps.sm_util;
        } else if (!d->process_util_supported) {
          ps.sm_util = Reading<Permille>::NotSupported("the driver gives no per-process utilisation");
          ps.mem_util = ps.sm_util;
        } else {
          ps.sm_util = Reading<Permille>::Of(p.sm_util);
          ps.mem_util = Reading<Permille>::Of(p.mem_util);
        }
      }
      if (mig && !p.mig_uuid.empty()) {
        for (const auto& gi : d->gpu_instances) {
          for (const auto& ci : gi.compute_instances) {
            if (ci.uuid == p.mig_uuid) {
              ps.gpu_instance = gi.id;
              ps.compute_instance = ci.id;
              ps.mig_uuid = ci.uuid;
            }
          }
        }
      }
      used += p.memory;
      s.processes.push_back(std::move(ps));
    }
    if (step->memory_used) used = *step->memory_used;
  }
  s.memory_total = Reading<Bytes>::Of(d->model->memory);
  s.memory_used = Reading<Bytes>::Of(used);

  if (mig) {
    for (const auto& gi : d->gpu_instances) {
      for (const auto& ci : gi.compute_instances) {
        MigSample m;
        m.uuid = ci.uuid;
        m.gpu_instance = gi.id;
        m.compute_instance = ci.id;
        m.memory_total = gi.memory_total;
        Bytes mig_used = 0;
        for (const auto& p : s.processes) {
          if (p.mig_uuid == ci.uuid) {
            m.pids.push_back(p.pid);
            mig_used += p.memory_used.value_or(0);
          }
        }
        m.memory_used = Reading<Bytes>::Of(mig_used);
        if (!d->mig_util_supported) {
          m.util = Reading<Permille>::NotSupported(
              "per-instance utilisation is not available on " + d->model->name);
        } else {
          Permille u = 0;
          if (step != nullptr) {
            if (auto it = step->mig_util.find(ci.uuid); it != step->mig_util.end()) u = it->second;
          }
          m.util = Reading<Permille>::Of(u);
        }
        s.mig.push_back(std::move(m));
      }
    }
  }

  // Plausible physical figures derived from load, so dashboards and tests see them move.
  const Permille load = s.gpu_util.value_or(0);
  s.sm_clock_mhz = Reading<int>::Of(load > 0 ? 1980 : 345);
  s.mem_clock_mhz = Reading<int>::Of(2619);
  s.power_mw = Reading<std::int64_t>::Of(70000 + static_cast<std::int64_t>(load) * 630);
  s.temperature_c = Reading<int>::Of(35 + load / 25);
  d->energy_mj += s.power_mw.value() * std::max<Micros>(0, now - from) / kSecond;
  s.energy_mj = Reading<std::int64_t>::Of(d->energy_mj);
  return s;
}

Status FakeBackend::StartMps(DeviceIndex index, const MpsConfig& config) {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kStartMps));
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  if (config.pipe_dir.empty()) return InvalidArgument("mps: pipe_dir must be set");
  if (config.default_active_thread_percentage &&
      (*config.default_active_thread_percentage < 1 || *config.default_active_thread_percentage > 100)) {
    return InvalidArgument(fmt::format("mps: active_thread_percentage {} must be 1..100",
                                       *config.default_active_thread_percentage));
  }
  if (config.default_pinned_mem_limit && *config.default_pinned_mem_limit < kMiB) {
    return InvalidArgument(fmt::format("mps: pinned_mem_limit {} must be at least 1MiB",
                                       *config.default_pinned_mem_limit));
  }
  if (d->mps_running && !d->mps_died) {
    if (d->mps_config.pipe_dir != config.pipe_dir) {
      return FailedPrecondition(fmt::format("mps: device {} already runs a daemon on pipe dir {}",
                                            index.value(), d->mps_config.pipe_dir));
    }
    if (config.server_uid && d->mps_config.server_uid && *config.server_uid != *d->mps_config.server_uid) {
      return FailedPrecondition(fmt::format("mps: the server on {} serves uid {}; uid {} cannot use it until it stops",
                                            config.pipe_dir, *d->mps_config.server_uid, *config.server_uid));
    }
    d->mps_config = config;  // settings re-applied, as the real controller does
    return Status::Ok();
  }
  d->mps_running = true;
  d->mps_died = false;
  d->mps_config = config;
  return Status::Ok();
}

Status FakeBackend::StopMps(DeviceIndex index) {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kStopMps));
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  d->mps_running = false;
  d->mps_died = false;
  return Status::Ok();
}

Result<MpsStatus> FakeBackend::GetMpsStatus(DeviceIndex index) {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kGetMpsStatus));
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  MpsStatus st;
  if (d->mps_running) {
    st.state = d->mps_died ? MpsState::kDied : MpsState::kRunning;
    st.pipe_dir = d->mps_config.pipe_dir;
    st.control_pid = d->mps_died ? 0 : 4242 + static_cast<int>(index.value());
    if (d->mps_died) st.detail = "control daemon no longer answers";
    if (!d->mps_died) st.server_uid = d->mps_config.server_uid;
  }
  return st;
}

Status FakeBackend::SetMigMode(DeviceIndex index, bool enabled) {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kSetMigMode));
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  if (!d->model->supports_mig()) {
    return Unsupported(fmt::format("device {} ({}) does not support MIG", index.value(), d->model->name));
  }
  const MigMode want = enabled ? MigMode::kEnabled : MigMode::kDisabled;
  if (d->mig == want) return Status::Ok();
  if (HasProcessesOn(*d, clock_(), nullptr)) {
    return FailedPrecondition(fmt::format("device {}: processes running; stop them before changing MIG mode",
                                          index.value()));
  }
  if (!enabled && !d->gpu_instances.empty()) {
    return FailedPrecondition(fmt::format("device {}: {} GPU instance(s) exist; destroy them first",
                                          index.value(), d->gpu_instances.size()));
  }
  d->mig = want;
  return Status::Ok();
}

Result<GpuInstanceInfo> FakeBackend::CreateGpuInstance(DeviceIndex index, int profile_id, int start) {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kCreateGpuInstance));
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  if (d->mig != MigMode::kEnabled) {
    return FailedPrecondition(fmt::format("device {}: MIG mode is not enabled", index.value()));
  }
  const MigProfile* profile = d->model->FindProfileById(profile_id);
  if (profile == nullptr) {
    return InvalidArgument(fmt::format("device {}: no GPU-instance profile id {} on {}", index.value(),
                                       profile_id, d->model->name));
  }
  for (const auto& gi : d->gpu_instances) {
    if (gi.profile_id == profile_id && gi.start == start) return gi;  // retry after a crash
  }
  MigLayout layout;
  for (const auto& gi : d->gpu_instances) layout.push_back({gi.profile_id, gi.start});
  layout.push_back({profile_id, start});
  GPUSLICE_RETURN_IF_ERROR(ValidateLayout(*d->model, layout)
                               .WithContext(fmt::format("device {}", index.value())));
  GpuInstanceInfo gi;
  gi.id = GpuInstanceId(d->next_gi++);
  gi.profile_id = profile_id;
  gi.start = start;
  gi.size = profile->memory_slices;
  gi.memory_total = Reading<Bytes>::Of(profile->memory);
  d->gpu_instances.push_back(gi);
  return gi;
}

Result<ComputeInstanceInfo> FakeBackend::CreateComputeInstance(DeviceIndex index, GpuInstanceId gi_id,
                                                               int ci_profile_id) {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kCreateComputeInstance));
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  auto it = std::find_if(d->gpu_instances.begin(), d->gpu_instances.end(),
                         [&](const GpuInstanceInfo& g) { return g.id == gi_id; });
  if (it == d->gpu_instances.end()) {
    return NotFound(fmt::format("device {}: no GPU instance {}", index.value(), gi_id.value()));
  }
  const MigProfile* profile = d->model->FindProfileById(it->profile_id);
  const int want = CiComputeSlices(ci_profile_id);
  int used = 0;
  for (const auto& ci : it->compute_instances) used += CiComputeSlices(ci.profile_id);
  if (want == 0 || profile == nullptr || used + want > profile->compute_slices) {
    return InvalidArgument(fmt::format(
        "device {} GI {}: compute-instance profile {} ({} slices) does not fit ({} of {} used)",
        index.value(), gi_id.value(), ci_profile_id, want, used,
        profile == nullptr ? 0 : profile->compute_slices));
  }
  ComputeInstanceInfo ci;
  std::uint32_t free_id = 0;  // the smallest id not in use, as NVML numbers them
  while (std::any_of(it->compute_instances.begin(), it->compute_instances.end(),
                     [&](const ComputeInstanceInfo& c) { return c.id.value() == free_id; })) {
    ++free_id;
  }
  ci.id = ComputeInstanceId(free_id);
  ci.profile_id = ci_profile_id;
  ci.uuid = MigUuid(index.value(), gi_id.value(), ci.id.value());
  it->compute_instances.push_back(ci);
  return ci;
}

Status FakeBackend::DestroyComputeInstance(DeviceIndex index, GpuInstanceId gi_id, ComputeInstanceId ci_id) {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kDestroyComputeInstance));
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  for (auto& gi : d->gpu_instances) {
    if (gi.id != gi_id) continue;
    for (auto ci = gi.compute_instances.begin(); ci != gi.compute_instances.end(); ++ci) {
      if (ci->id != ci_id) continue;
      GpuInstanceInfo only = gi;
      only.compute_instances = {*ci};
      if (HasProcessesOn(*d, clock_(), &only)) {
        return FailedPrecondition(fmt::format("device {} GI {} CI {}: processes running", index.value(),
                                              gi_id.value(), ci_id.value()));
      }
      gi.compute_instances.erase(ci);
      return Status::Ok();
    }
  }
  return Status::Ok();  // already gone
}

Status FakeBackend::DestroyGpuInstance(DeviceIndex index, GpuInstanceId gi_id) {
  std::lock_guard lock(mu_);
  GPUSLICE_RETURN_IF_ERROR(TakeInjected(FakeCall::kDestroyGpuInstance));
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  for (auto gi = d->gpu_instances.begin(); gi != d->gpu_instances.end(); ++gi) {
    if (gi->id != gi_id) continue;
    if (HasProcessesOn(*d, clock_(), &*gi)) {
      return FailedPrecondition(fmt::format("device {} GI {}: processes running", index.value(),
                                            gi_id.value()));
    }
    d->gpu_instances.erase(gi);
    return Status::Ok();
  }
  return Status::Ok();  // already gone
}

void FakeBackend::SetMigProfiles(DeviceIndex index, std::vector<MigProfile> profiles) {
  std::lock_guard lock(mu_);
  if (auto d = Find(index); d.ok()) (*d)->mig_profiles = std::move(profiles);
}

void FakeBackend::SetMemoryLimitsSupported(DeviceIndex index, bool supported) {
  std::lock_guard lock(mu_);
  if (auto d = Find(index); d.ok()) (*d)->memory_limits = supported;
}

std::map<std::pair<std::uint32_t, std::string>, std::pair<Bytes, Bytes>> FakeBackend::MemoryLimits() const {
  std::lock_guard lock(mu_);
  return memory_limits_;
}

Result<std::vector<MigProfile>> FakeBackend::MigProfiles(DeviceIndex index) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  if (d->mig_profiles) return *d->mig_profiles;
  if (!d->model->supports_mig()) return Unsupported(fmt::format("device {} ({}) has no MIG", index.value(), d->model->name));
  return d->model->mig_profiles;
}

bool FakeBackend::SupportsMemoryLimits(DeviceIndex index) {
  std::lock_guard lock(mu_);
  auto d = Find(index);
  return d.ok() && (*d)->memory_limits && (*d)->mig != MigMode::kEnabled;
}

Status FakeBackend::SetMemoryLimit(DeviceIndex index, const std::string& cgroup_dir, Bytes soft, Bytes hard) {
  std::lock_guard lock(mu_);
  GPUSLICE_ASSIGN_OR_RETURN(Device * d, Find(index));
  if (!d->memory_limits || d->mig == MigMode::kEnabled) {
    return Unsupported(fmt::format("device {}: no driver memory limits", index.value()));
  }
  if (cgroup_dir.empty() || cgroup_dir.front() != '/' || soft < 0 || hard <= 0 || soft > hard) {
    return InvalidArgument(fmt::format("memory limit on '{}': soft {} hard {}", cgroup_dir, soft, hard));
  }
  memory_limits_[{index.value(), cgroup_dir}] = {soft, hard};
  return Status::Ok();
}

}  // namespace gpuslice::devices
