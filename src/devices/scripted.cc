#include "devices/scripted.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gpuslice::devices {
namespace {

using nlohmann::json;

Result<Permille> Percent(const json& v, const std::string& field) {
  if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 100) {
    return InvalidArgument(fmt::format("{} = {}: expected a percentage 0..100", field, v.dump()));
  }
  return static_cast<Permille>(v.get<double>() * 10 + 0.5);
}

Result<Bytes> Memory(const json& v, const std::string& field) {
  if (!v.is_string()) return InvalidArgument(fmt::format("{} = {}: expected bytes such as \"2GiB\"", field, v.dump()));
  auto b = ParseBytes(v.get<std::string>());
  if (!b.ok()) return InvalidArgument(fmt::format("{} = {}: {}", field, v.dump(), b.status().message()));
  return *b;
}

Result<std::uint32_t> Index(const json& v, const std::string& field) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 1023) {
    return InvalidArgument(fmt::format("{} = {}: expected a device index", field, v.dump()));
  }
  return static_cast<std::uint32_t>(v.get<std::int64_t>());
}

std::optional<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> EnvValue(const std::string& environ, std::string_view key) {
  std::size_t pos = 0;
  while (pos < environ.size()) {
    std::size_t end = environ.find('\0', pos);
    if (end == std::string::npos) end = environ.size();
    std::string_view kv(environ.data() + pos, end - pos);
    if (kv.size() > key.size() && kv.substr(0, key.size()) == key && kv[key.size()] == '=') {
      return std::string(kv.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return std::nullopt;
}

int ParentOf(const std::string& proc_root, int pid) {
  auto s = ReadWhole(fmt::format("{}/{}/stat", proc_root, pid));
  if (!s) return 0;
  const auto close = s->rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(s->substr(close + 1));
  std::string state;
  int ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

std::optional<std::string> JobOf(const std::string& environ) {
  if (auto v = EnvValue(environ, "GPUSLICE_JOB_ID")) return v;
  return EnvValue(environ, "SLURM_JOB_ID");
}

}  // namespace

Result<DeviceScript> ParseDeviceScript(std::string_view text) {
  json o = json::parse(text, nullptr, false);
  if (o.is_discarded() || !o.is_object()) return InvalidArgument("simulate script: expected a JSON object");
  static const std::vector<std::string> kKeys = {"devices", "jobs", "processes"};
  for (const auto& [k, v] : o.items()) {
    if (std::find(kKeys.begin(), kKeys.end(), k) == kKeys.end()) {
      return InvalidArgument(fmt::format("simulate script: unknown field '{}' (known: devices, jobs, processes)", k));
    }
  }
  DeviceScript s;
  if (o.contains("devices")) {
    if (!o["devices"].is_object()) return InvalidArgument("simulate script: devices: expected an object");
    for (const auto& [k, v] : o["devices"].items()) {
      if (k.empty() || k.size() > 4 || k.find_first_not_of("0123456789") != std::string::npos) {
        return InvalidArgument(fmt::format("simulate script: devices.{}: expected a device index", k));
      }
      GPUSLICE_ASSIGN_OR_RETURN(Permille p, Percent(v, "devices." + k));
      s.device_util[static_cast<std::uint32_t>(std::stoul(k))] = p;
    }
  }
  auto entry = [](const json& v, const std::string& where, ScriptedProcess* p) -> Status {
    if (!v.is_object()) return InvalidArgument(fmt::format("simulate script: {}: expected an object", where));
    for (const auto& [k, x] : v.items()) {
      if (k == "sm") {
        GPUSLICE_ASSIGN_OR_RETURN(p->sm_util, Percent(x, where + ".sm"));
      } else if (k == "memory") {
        GPUSLICE_ASSIGN_OR_RETURN(p->memory, Memory(x, where + ".memory"));
      } else if (k == "device") {
        GPUSLICE_ASSIGN_OR_RETURN(p->device, Index(x, where + ".device"));
      } else if (k == "pid") {
        if (!x.is_number_integer() || x.get<std::int64_t>() <= 0 || x.get<std::int64_t>() > (1 << 22)) {
          return InvalidArgument(fmt::format("simulate script: {}.pid = {}: expected a process id", where, x.dump()));
        }
        p->pid = x.get<int>();
      } else {
        return InvalidArgument(fmt::format("simulate script: {}: unknown field '{}'", where, k));
      }
    }
    return Status::Ok();
  };
  if (o.contains("jobs")) {
    if (!o["jobs"].is_object()) return InvalidArgument("simulate script: jobs: expected an object");
    for (const auto& [k, v] : o["jobs"].items()) {
      ScriptedProcess p;
      p.job = k;
      GPUSLICE_RETURN_IF_ERROR(entry(v, "jobs." + k, &p));
      if (p.pid != 0) return InvalidArgument(fmt::format("simulate script: jobs.{}: a job entry names no pid", k));
      s.processes.push_back(p);
    }
  }
  if (o.contains("processes")) {
    if (!o["processes"].is_array()) return InvalidArgument("simulate script: processes: expected an array");
    int i = 0;
    for (const auto& v : o["processes"]) {
      ScriptedProcess p;
      const std::string where = fmt::format("processes[{}]", i++);
      GPUSLICE_RETURN_IF_ERROR(entry(v, where, &p));
      if (p.pid == 0 || !p.device) {
        return InvalidArgument(fmt::format("simulate script: {}: needs \"pid\" and \"device\"", where));
      }
      s.processes.push_back(p);
    }
  }
  return s;
}

ScriptedBackend::ScriptedBackend(std::unique_ptr<DeviceBackend> inner, std::string script_path,
                                 std::string proc_root)
    : inner_(std::move(inner)), path_(std::move(script_path)), proc_root_(std::move(proc_root)) {}

std::string ScriptedBackend::description() const {
  return fmt::format("{} + script {}", inner_->description(), path_);
}

Status ScriptedBackend::Load() {
  std::lock_guard lock(mu_);
  seen_.reset();
  GPUSLICE_RETURN_IF_ERROR(RefreshLocked());
  return error_;
}

Status ScriptedBackend::last_error() const {
  std::lock_guard lock(mu_);
  return error_;
}

Status ScriptedBackend::RefreshLocked() {
  // Read every time (scripts are small): a rewrite within one mtime tick still counts.
  auto text = ReadWhole(path_);
  if (!text) {
    error_ = NotFound(fmt::format("--simulate-script '{}': cannot be opened", path_));
    return Status::Ok();
  }
  if (seen_ && *seen_ == *text) return Status::Ok();
  auto parsed = ParseDeviceScript(*text);
  if (!parsed.ok()) {
    error_ = parsed.status().WithContext(fmt::format("--simulate-script '{}'", path_));
    return Status::Ok();  // the last good script stays in force
  }
  seen_ = std::move(*text);
  script_ = std::move(parsed).value();
  error_ = Status::Ok();
  return Status::Ok();
}

std::optional<ScriptedBackend::Found> ScriptedBackend::FindJob(const std::string& job) const {
  std::error_code ec;
  std::map<int, std::string> envs;  // pids carrying the job id
  for (const auto& e : std::filesystem::directory_iterator(proc_root_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto env = ReadWhole(e.path().string() + "/environ");
    if (!env) continue;
    if (auto j = JobOf(*env); j && *j == job) envs.emplace(std::stoi(name), std::move(*env));
  }
  // Several simulated daemons on one host (tests run in parallel) each have a job 1: prefer
  // the job whose processes descend from this process (the daemon that owns this backend);
  // for jobs that are not ours to start (Slurm's), the first top process.
  auto descends_from_us = [&](int pid) {
    for (int i = 0; i < 64 && pid > 1; ++i) {
      pid = ParentOf(proc_root_, pid);
      if (pid == getpid()) return true;
    }
    return false;
  };
  std::optional<int> chosen;
  for (const auto& [pid, env] : envs) {
    if (envs.contains(ParentOf(proc_root_, pid))) continue;  // not the top one
    if (descends_from_us(pid)) {
      chosen = pid;
      break;
    }
    if (!chosen) chosen = pid;
  }
  for (const auto& [pid, env] : envs) {
    if (!chosen || pid != *chosen) continue;
    Found f;
    f.pid = pid;
    if (auto v = EnvValue(env, "CUDA_VISIBLE_DEVICES")) {
      std::stringstream list(*v);
      std::string u;
      while (std::getline(list, u, ',')) {
        if (!u.empty()) f.visible.push_back(u);
      }
    }
    return f;
  }
  return std::nullopt;
}

Result<DeviceSample> ScriptedBackend::Sample(DeviceIndex index) {
  GPUSLICE_ASSIGN_OR_RETURN(DeviceSample s, inner_->Sample(index));
  std::optional<DeviceScript> script;
  {
    std::lock_guard lock(mu_);
    (void)RefreshLocked();
    script = script_;
  }
  if (!script) return s;
  // Which devices a job's processes may be on: by UUID (GPU-... or a MIG device's MIG-...).
  std::map<std::string, std::pair<std::uint32_t, std::string>> by_uuid;  // uuid -> device, mig uuid
  bool listed = false;
  std::vector<ProcessSample> procs;
  bool mentioned = script->device_util.contains(index.value());
  Permille sum = 0;
  Bytes used = 0;
  for (const auto& sp : script->processes) {
    ProcessSample p;
    p.memory_used = Reading<Bytes>::Of(sp.memory);
    p.sm_util = Reading<Permille>::Of(sp.sm_util);
    p.mem_util = Reading<Permille>::Of(0);
    if (!sp.job.empty()) {
      auto found = FindJob(sp.job);
      if (!found) continue;  // not running (yet)
      bool here = found->visible.empty();
      if (!here && !listed) {
        listed = true;
        if (auto devs = inner_->ListDevices(); devs.ok()) {
          for (const auto& d : *devs) {
            by_uuid[d.uuid] = {d.index.value(), ""};
            for (const auto& gi : d.gpu_instances) {
              for (const auto& ci : gi.compute_instances) by_uuid[ci.uuid] = {d.index.value(), ci.uuid};
            }
          }
        }
      }
      for (const auto& u : found->visible) {
        auto it = by_uuid.find(u);
        if (it != by_uuid.end() && it->second.first == index.value()) {
          here = true;
          p.mig_uuid = it->second.second;
        }
      }
      if (!here) continue;
      p.pid = found->pid;
    } else {
      if (*sp.device != index.value()) continue;
      p.pid = sp.pid;
    }
    if (!p.mig_uuid.empty()) {
      // As NVML in MIG mode: no per-process utilisation.
      p.sm_util = Reading<Permille>::NotSupported("no per-process utilisation in MIG mode");
      p.mem_util = p.sm_util;
      for (auto& m : s.mig) {
        if (m.uuid != p.mig_uuid) continue;
        m.pids.push_back(p.pid);
        // The instance's own figure plus the scripted process: unknown stays unknown.
        if (m.memory_used.ok()) m.memory_used = Reading<Bytes>::Of(m.memory_used.value() + sp.memory);
        if (m.util.ok()) m.util = Reading<Permille>::Of(std::min<Permille>(1000, m.util.value() + sp.sm_util));
      }
    }
    mentioned = true;
    sum = std::min<Permille>(1000, sum + sp.sm_util);
    used += sp.memory;
    procs.push_back(std::move(p));
  }
  if (!mentioned) return s;
  Permille util = sum;
  if (auto it = script->device_util.find(index.value()); it != script->device_util.end()) {
    util = std::max(util, it->second);
  }
  s.gpu_util = Reading<Permille>::Of(util);
  s.processes = std::move(procs);
  s.memory_used = Reading<Bytes>::Of(used);
  return s;
}

}  // namespace gpuslice::devices
