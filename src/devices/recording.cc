#include "devices/recording.h"

#include <chrono>
#include <limits>
#include <optional>
#include <type_traits>
#include <fstream>
#include <thread>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gpuslice::devices {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "gpuslice-recording";

template <typename T>
json ReadingJson(const Reading<T>& r) {
  if (r.ok()) return r.value();
  return json{{"missing", std::string(StatusCodeName(r.status().code()))},
              {"why", r.status().message()}};
}

Result<StatusCode> CodeFromName(std::string_view name) {
  for (int c = 1; c <= static_cast<int>(StatusCode::kDeadlineExceeded); ++c) {
    if (StatusCodeName(static_cast<StatusCode>(c)) == name) return static_cast<StatusCode>(c);
  }
  return InvalidArgument(fmt::format("unknown status '{}'", name));
}

// A JSON value as T, or nullopt when it is not one. Integers must be JSON integers inside T's
// range: nlohmann's get<int>() truncates a large integer and converts a float with a cast that is
// undefined behaviour out of range; its value() and operator[] throw on a type mismatch.
template <typename T>
std::optional<T> As(const json& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return std::nullopt;
    return v.get<std::string>();
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    if (!v.is_array()) return std::nullopt;
    std::vector<int> out;
    for (const json& e : v) {
      std::optional<int> x = As<int>(e);
      if (!x) return std::nullopt;
      out.push_back(*x);
    }
    return out;
  } else {
    static_assert(std::is_integral_v<T> && (std::is_signed_v<T> || sizeof(T) < 8));
    if (!v.is_number_integer()) return std::nullopt;
    if (v.is_number_unsigned()) {
      const std::uint64_t u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
      return static_cast<T>(u);
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        x > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
      return std::nullopt;
    }
    return static_cast<T>(x);
  }
}

// Each reader names its field path; every access goes through As<T>, so no input can throw.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  template <typename T>
  Result<T> Get(const json& obj, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end()) return InvalidArgument(fmt::format("{}.{}: missing", path_, key));
    std::optional<T> v = As<T>(*it);
    if (!v) return InvalidArgument(fmt::format("{}.{}: bad value {}", path_, key, it->dump()));
    return *std::move(v);
  }

  template <typename T>
  T GetOr(const json& obj, std::string_view key, T fallback) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    std::optional<T> v = As<T>(*it);
    return v ? *std::move(v) : fallback;
  }

  // An array member: missing or null is empty; anything else that is not an array is an error.
  Result<json> Array(const json& obj, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return json::array();
    if (!it->is_array()) {
      return InvalidArgument(fmt::format("{}.{}: expected an array, got {}", path_, key, it->dump()));
    }
    return *it;
  }

  template <typename T>
  Result<Reading<T>> GetReading(const json& obj, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end()) return Reading<T>::NotSupported("not in recording");
    if (it->is_number_integer()) {
      std::optional<T> v = As<T>(*it);
      if (!v) return InvalidArgument(fmt::format("{}.{}: {} is out of range", path_, key, it->dump()));
      return Reading<T>::Of(*v);
    }
    if (it->is_object() && it->contains("missing")) {
      auto code = CodeFromName(GetOr<std::string>(*it, "missing", ""));
      if (!code.ok() || *code == StatusCode::kOk) {
        return InvalidArgument(fmt::format("{}.{}: bad status {}", path_, key, it->dump()));
      }
      return Reading<T>::Missing(Status(*code, GetOr<std::string>(*it, "why", "")));
    }
    return InvalidArgument(
        fmt::format("{}.{}: expected an integer or {{\"missing\": ...}}, got {}", path_, key, it->dump()));
  }

  const std::string& path() const { return path_; }

  Reader Child(std::string_view key, std::size_t i) const {
    return Reader(fmt::format("{}.{}[{}]", path_, key, i));
  }

 private:
  std::string path_;
};

Result<MigMode> MigModeFromName(std::string_view s, std::string_view path) {
  for (MigMode m : {MigMode::kUnsupported, MigMode::kDisabled, MigMode::kEnabled}) {
    if (MigModeName(m) == s) return m;
  }
  return InvalidArgument(fmt::format("{}: unknown MIG mode '{}'", path, s));
}

json DeviceJson(const DeviceInfo& d) {
  json gis = json::array();
  for (const auto& gi : d.gpu_instances) {
    json cis = json::array();
    for (const auto& ci : gi.compute_instances) {
      cis.push_back({{"id", ci.id.value()}, {"profile_id", ci.profile_id}, {"uuid", ci.uuid}});
    }
    gis.push_back({{"id", gi.id.value()}, {"profile_id", gi.profile_id}, {"start", gi.start},
                   {"size", gi.size}, {"memory_total", ReadingJson(gi.memory_total)},
                   {"compute_instances", cis}});
  }
  return {{"index", d.index.value()},
          {"uuid", d.uuid},
          {"name", d.name},
          {"model", d.model ? json(d.model->name) : json(nullptr)},
          {"pci_bus_id", d.pci_bus_id},
          {"memory_total", ReadingJson(d.memory_total)},
          {"memory_used", ReadingJson(d.memory_used)},
          {"mig_current", MigModeName(d.mig_current)},
          {"mig_pending", MigModeName(d.mig_pending)},
          {"gpu_instances", gis}};
}

json SampleJson(const DeviceSample& s) {
  json procs = json::array();
  for (const auto& p : s.processes) {
    json jp = {{"pid", p.pid},
               {"memory_used", ReadingJson(p.memory_used)},
               {"sm_util", ReadingJson(p.sm_util)},
               {"mem_util", ReadingJson(p.mem_util)}};
    if (p.gpu_instance) jp["gpu_instance"] = p.gpu_instance->value();
    if (p.compute_instance) jp["compute_instance"] = p.compute_instance->value();
    if (!p.mig_uuid.empty()) jp["mig_uuid"] = p.mig_uuid;
    procs.push_back(std::move(jp));
  }
  json migs = json::array();
  for (const auto& m : s.mig) {
    migs.push_back({{"uuid", m.uuid},
                    {"gpu_instance", m.gpu_instance.value()},
                    {"compute_instance", m.compute_instance.value()},
                    {"memory_total", ReadingJson(m.memory_total)},
                    {"memory_used", ReadingJson(m.memory_used)},
                    {"util", ReadingJson(m.util)},
                    {"pids", m.pids}});
  }
  return {{"device", s.index.value()},
          {"uuid", s.uuid},
          {"window_start", s.window_start},
          {"window_end", s.window_end},
          {"driver_samples", s.driver_samples},
          {"gpu_util", ReadingJson(s.gpu_util)},
          {"mem_util", ReadingJson(s.mem_util)},
          {"memory_total", ReadingJson(s.memory_total)},
          {"memory_used", ReadingJson(s.memory_used)},
          {"sm_clock_mhz", ReadingJson(s.sm_clock_mhz)},
          {"mem_clock_mhz", ReadingJson(s.mem_clock_mhz)},
          {"power_mw", ReadingJson(s.power_mw)},
          {"temperature_c", ReadingJson(s.temperature_c)},
          {"energy_mj", ReadingJson(s.energy_mj)},
          {"processes", procs},
          {"mig", migs}};
}

Result<DeviceInfo> DeviceFromJson(const json& j, const Reader& r) {
  DeviceInfo d;
  GPUSLICE_ASSIGN_OR_RETURN(auto index, r.Get<std::uint32_t>(j, "index"));
  d.index = DeviceIndex(index);
  GPUSLICE_ASSIGN_OR_RETURN(d.uuid, r.Get<std::string>(j, "uuid"));
  d.name = r.GetOr<std::string>(j, "name", "");
  std::string model = r.GetOr<std::string>(j, "model", "");
  if (model.empty()) model = d.name;
  if (auto m = FindModel(model); m.ok()) d.model = *m;
  d.pci_bus_id = r.GetOr<std::string>(j, "pci_bus_id", "");
  GPUSLICE_ASSIGN_OR_RETURN(d.memory_total, r.GetReading<Bytes>(j, "memory_total"));
  GPUSLICE_ASSIGN_OR_RETURN(d.memory_used, r.GetReading<Bytes>(j, "memory_used"));
  GPUSLICE_ASSIGN_OR_RETURN(d.mig_current,
                            MigModeFromName(r.GetOr<std::string>(j, "mig_current", "unsupported"), "mig_current"));
  GPUSLICE_ASSIGN_OR_RETURN(d.mig_pending,
                            MigModeFromName(r.GetOr<std::string>(j, "mig_pending", "unsupported"), "mig_pending"));
  GPUSLICE_ASSIGN_OR_RETURN(const json gis, r.Array(j, "gpu_instances"));
  for (std::size_t i = 0; i < gis.size(); ++i) {
    Reader gr = r.Child("gpu_instances", i);
    GpuInstanceInfo gi;
    GPUSLICE_ASSIGN_OR_RETURN(auto id, gr.Get<std::uint32_t>(gis[i], "id"));
    gi.id = GpuInstanceId(id);
    GPUSLICE_ASSIGN_OR_RETURN(gi.profile_id, gr.Get<int>(gis[i], "profile_id"));
    gi.start = gr.GetOr<int>(gis[i], "start", 0);
    gi.size = gr.GetOr<int>(gis[i], "size", 0);
    GPUSLICE_ASSIGN_OR_RETURN(gi.memory_total, gr.GetReading<Bytes>(gis[i], "memory_total"));
    GPUSLICE_ASSIGN_OR_RETURN(const json cis, gr.Array(gis[i], "compute_instances"));
    for (std::size_t k = 0; k < cis.size(); ++k) {
      Reader cr = gr.Child("compute_instances", k);
      ComputeInstanceInfo ci;
      GPUSLICE_ASSIGN_OR_RETURN(auto cid, cr.Get<std::uint32_t>(cis[k], "id"));
      ci.id = ComputeInstanceId(cid);
      ci.profile_id = cr.GetOr<int>(cis[k], "profile_id", 0);
      ci.uuid = cr.GetOr<std::string>(cis[k], "uuid", "");
      gi.compute_instances.push_back(std::move(ci));
    }
    d.gpu_instances.push_back(std::move(gi));
  }
  return d;
}

Result<DeviceSample> SampleFromJson(const json& j, const Reader& r) {
  DeviceSample s;
  GPUSLICE_ASSIGN_OR_RETURN(auto index, r.Get<std::uint32_t>(j, "device"));
  s.index = DeviceIndex(index);
  s.uuid = r.GetOr<std::string>(j, "uuid", "");
  GPUSLICE_ASSIGN_OR_RETURN(s.window_start, r.Get<Micros>(j, "window_start"));
  GPUSLICE_ASSIGN_OR_RETURN(s.window_end, r.Get<Micros>(j, "window_end"));
  if (s.window_end < s.window_start) {
    return InvalidArgument(fmt::format("{}: window_end {} before window_start {}", r.path(), s.window_end,
                                       s.window_start));
  }
  s.driver_samples = r.GetOr<int>(j, "driver_samples", 0);
  GPUSLICE_ASSIGN_OR_RETURN(s.gpu_util, r.GetReading<Permille>(j, "gpu_util"));
  GPUSLICE_ASSIGN_OR_RETURN(s.mem_util, r.GetReading<Permille>(j, "mem_util"));
  GPUSLICE_ASSIGN_OR_RETURN(s.memory_total, r.GetReading<Bytes>(j, "memory_total"));
  GPUSLICE_ASSIGN_OR_RETURN(s.memory_used, r.GetReading<Bytes>(j, "memory_used"));
  GPUSLICE_ASSIGN_OR_RETURN(s.sm_clock_mhz, r.GetReading<int>(j, "sm_clock_mhz"));
  GPUSLICE_ASSIGN_OR_RETURN(s.mem_clock_mhz, r.GetReading<int>(j, "mem_clock_mhz"));
  GPUSLICE_ASSIGN_OR_RETURN(s.power_mw, r.GetReading<std::int64_t>(j, "power_mw"));
  GPUSLICE_ASSIGN_OR_RETURN(s.temperature_c, r.GetReading<int>(j, "temperature_c"));
  GPUSLICE_ASSIGN_OR_RETURN(s.energy_mj, r.GetReading<std::int64_t>(j, "energy_mj"));
  for (const auto* v : {&s.gpu_util, &s.mem_util}) {
    if (v->ok() && (v->value() < 0 || v->value() > 1000)) {
      return InvalidArgument(fmt::format("{}: utilisation {} out of range 0..1000", r.path(), v->value()));
    }
  }
  GPUSLICE_ASSIGN_OR_RETURN(const json procs, r.Array(j, "processes"));
  for (std::size_t i = 0; i < procs.size(); ++i) {
    Reader pr = r.Child("processes", i);
    ProcessSample p;
    GPUSLICE_ASSIGN_OR_RETURN(p.pid, pr.Get<int>(procs[i], "pid"));
    GPUSLICE_ASSIGN_OR_RETURN(p.memory_used, pr.GetReading<Bytes>(procs[i], "memory_used"));
    GPUSLICE_ASSIGN_OR_RETURN(p.sm_util, pr.GetReading<Permille>(procs[i], "sm_util"));
    GPUSLICE_ASSIGN_OR_RETURN(p.mem_util, pr.GetReading<Permille>(procs[i], "mem_util"));
    if (procs[i].contains("gpu_instance")) {
      p.gpu_instance = GpuInstanceId(pr.GetOr<std::uint32_t>(procs[i], "gpu_instance", 0));
    }
    if (procs[i].contains("compute_instance")) {
      p.compute_instance = ComputeInstanceId(pr.GetOr<std::uint32_t>(procs[i], "compute_instance", 0));
    }
    p.mig_uuid = pr.GetOr<std::string>(procs[i], "mig_uuid", "");
    s.processes.push_back(std::move(p));
  }
  GPUSLICE_ASSIGN_OR_RETURN(const json migs, r.Array(j, "mig"));
  for (std::size_t i = 0; i < migs.size(); ++i) {
    Reader mr = r.Child("mig", i);
    MigSample m;
    GPUSLICE_ASSIGN_OR_RETURN(m.uuid, mr.Get<std::string>(migs[i], "uuid"));
    m.gpu_instance = GpuInstanceId(mr.GetOr<std::uint32_t>(migs[i], "gpu_instance", 0));
    m.compute_instance = ComputeInstanceId(mr.GetOr<std::uint32_t>(migs[i], "compute_instance", 0));
    GPUSLICE_ASSIGN_OR_RETURN(m.memory_total, mr.GetReading<Bytes>(migs[i], "memory_total"));
    GPUSLICE_ASSIGN_OR_RETURN(m.memory_used, mr.GetReading<Bytes>(migs[i], "memory_used"));
    GPUSLICE_ASSIGN_OR_RETURN(m.util, mr.GetReading<Permille>(migs[i], "util"));
    m.pids = mr.GetOr<std::vector<int>>(migs[i], "pids", {});
    s.mig.push_back(std::move(m));
  }
  return s;
}

}  // namespace

json ToJson(const Recording& r) {
  json devices = json::array();
  for (const auto& d : r.devices) devices.push_back(DeviceJson(d));
  json samples = json::array();
  for (const auto& s : r.samples) samples.push_back(SampleJson(s));
  return {{"format", kFormat},   {"version", kRecordingVersion}, {"source", r.source},
          {"interval_us", r.interval}, {"devices", devices},     {"samples", samples}};
}

Result<Recording> RecordingFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("recording: expected a JSON object");
  Reader r("recording");
  if (r.GetOr<std::string>(j, "format", "") != kFormat) {
    return InvalidArgument(fmt::format("recording: format must be '{}', got {}", kFormat,
                                       j.contains("format") ? j["format"].dump() : "nothing"));
  }
  GPUSLICE_ASSIGN_OR_RETURN(int version, r.Get<int>(j, "version"));
  if (version != kRecordingVersion) {
    return InvalidArgument(fmt::format("recording.version: {} not supported (this build reads {})",
                                       version, kRecordingVersion));
  }
  Recording rec;
  rec.source = r.GetOr<std::string>(j, "source", "");
  rec.interval = r.GetOr<Micros>(j, "interval_us", 0);
  GPUSLICE_ASSIGN_OR_RETURN(const json devices, r.Array(j, "devices"));
  for (std::size_t i = 0; i < devices.size(); ++i) {
    GPUSLICE_ASSIGN_OR_RETURN(auto d, DeviceFromJson(devices[i], r.Child("devices", i)));
    if (d.index.value() != i) {
      return InvalidArgument(fmt::format("recording.devices[{}].index: {} (devices must be listed in index order)",
                                         i, d.index.value()));
    }
    rec.devices.push_back(std::move(d));
  }
  GPUSLICE_ASSIGN_OR_RETURN(const json samples, r.Array(j, "samples"));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    Reader sr = r.Child("samples", i);
    auto s = SampleFromJson(samples[i], sr);
    if (!s.ok()) return s.status();
    if (s->index.value() >= rec.devices.size()) {
      return InvalidArgument(fmt::format("recording.samples[{}].device: {} is not a listed device", i,
                                         s->index.value()));
    }
    rec.samples.push_back(std::move(s).value());
  }
  return rec;
}

Result<Recording> ReadRecordingFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("recording file '{}' cannot be opened", path));
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    return InvalidArgument(fmt::format("recording file '{}': not JSON: {}", path, e.what()));
  }
  auto r = RecordingFromJson(j);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

Status WriteRecordingFile(const Recording& r, const std::string& path) {
  // Write then rename, so a reader never sees half a recording.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Unavailable(fmt::format("cannot write '{}'", tmp));
    out << ToJson(r).dump(1) << "\n";
    if (!out) return Unavailable(fmt::format("write to '{}' failed", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Unavailable(fmt::format("cannot rename '{}' to '{}'", tmp, path));
  }
  return Status::Ok();
}

Result<Recording> Record(DeviceBackend& backend, Micros duration, Micros interval,
                         const std::function<void(Micros)>& sleep_for, int* errors) {
  if (interval <= 0) return InvalidArgument(fmt::format("record: interval {}us must be positive", interval));
  if (duration < interval) {
    return InvalidArgument(fmt::format("record: duration {}us shorter than interval {}us", duration, interval));
  }
  Recording rec;
  rec.source = backend.description();
  rec.interval = interval;
  GPUSLICE_ASSIGN_OR_RETURN(rec.devices, backend.ListDevices());
  // Prime each device's window so the first recorded sample covers exactly one interval.
  for (const auto& d : rec.devices) (void)backend.Sample(d.index);
  int failed = 0;
  for (Micros t = interval; t <= duration; t += interval) {
    sleep_for(interval);
    for (const auto& d : rec.devices) {
      auto s = backend.Sample(d.index);
      if (!s.ok()) {
        ++failed;
        continue;
      }
      rec.samples.push_back(std::move(s).value());
    }
  }
  if (errors != nullptr) *errors = failed;
  return rec;
}

Status RecordToFile(const BackendOptions& options, Micros duration, Micros interval,
                    const std::string& out_path, std::string* summary) {
  if (out_path.empty()) return InvalidArgument("record: --out must name a file");
  GPUSLICE_ASSIGN_OR_RETURN(auto backend, OpenBackend(options));
  int errors = 0;
  GPUSLICE_ASSIGN_OR_RETURN(
      Recording rec,
      Record(*backend, duration, interval,
             [](Micros d) { std::this_thread::sleep_for(std::chrono::microseconds(d)); }, &errors));
  GPUSLICE_RETURN_IF_ERROR(WriteRecordingFile(rec, out_path));
  if (summary != nullptr) {
    *summary = fmt::format("recorded {} samples of {} device(s) from {} to {}{}", rec.samples.size(),
                           rec.devices.size(), rec.source, out_path,
                           errors > 0 ? fmt::format(" ({} failed reads skipped)", errors) : "");
  }
  return Status::Ok();
}

}  // namespace gpuslice::devices
