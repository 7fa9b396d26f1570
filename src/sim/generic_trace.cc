#include "sim/generic_trace.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "core/units.h"
#include "sim/fgd_protocol.h"

namespace gpuslice::sim {
namespace {

// A GPU count beyond any host (sim/openb.cc has the same bound).
constexpr MilliGpu kMaxGpus = 1024;

// Seconds as a number ("90", "1.5") or a duration ("90s", "1h30m").
Result<Micros> Seconds(const CsvTable& t, std::string_view column) {
  GPUSLICE_ASSIGN_OR_RETURN(std::string_view v, t.Field(column));
  if (v.empty()) return t.Error(column, v, "is empty");
  auto d = t.Double(column);
  if (d.ok()) {
    if (*d < 0) return t.Error(column, v, "is negative");
    // Checked before rounding: llround beyond int64 is undefined (it gave negative times).
    if (*d > static_cast<double>(kMaxTraceTime / kSecond)) return t.Error(column, v, "is more than 10 years");
    return static_cast<Micros>(std::llround(*d * kSecond));
  }
  auto p = ParseDuration(v);
  if (!p.ok()) return t.Error(column, v, "is not seconds or a duration like 90s, 1h30m");
  if (*p > kMaxTraceTime) return t.Error(column, v, "is more than 10 years");
  return *p;
}

}  // namespace

Result<ReplayJob> ParseGenericJob(const CsvTable& t, std::int64_t row) {
  ReplayJob j;
  if (t.Has("id")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view id, t.Field("id"));
    j.id = std::string(id);
  }
  if (j.id.empty()) j.id = "job-" + std::to_string(row);
  j.where = fmt::format("{}:{}", t.path(), t.line());
  GPUSLICE_ASSIGN_OR_RETURN(j.submit, Seconds(t, "submit"));
  GPUSLICE_ASSIGN_OR_RETURN(j.duration, Seconds(t, "duration"));
  if (j.submit + j.duration > kMaxTraceTime) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view d, t.Field("duration"));
    return t.Error("duration", d, "ends more than 10 years after time 0 (submit + duration)");
  }
  if (t.Has("queue")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view q, t.Field("queue"));
    j.queue = std::string(q);  // empty: the config's default queue
  }
  if (t.Has("user")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view u, t.Field("user"));
    j.user = std::string(u);
  }
  GPUSLICE_ASSIGN_OR_RETURN(std::string_view gpus, t.Field("gpus"));
  if (gpus == "0") {
    j.request.num_gpus = 0;
  } else {
    auto m = ParseGpuAmount(gpus);
    if (!m.ok()) return t.Error("gpus", gpus, "is not a GPU amount (2, 0.25, 250m)");
    if (*m < kOneGpu) {
      j.request.num_gpus = 1;
      j.request.milli_per_gpu = *m;
    } else if (*m > kMaxGpus * kOneGpu) {
      // The daemon's bound on one job; beyond int range the cast below would wrap.
      return t.Error("gpus", gpus, "is more than 1024 GPUs");
    } else if (*m % kOneGpu == 0) {
      j.request.num_gpus = static_cast<int>(*m / kOneGpu);
      j.request.milli_per_gpu = kOneGpu;
    } else {
      return t.Error("gpus", gpus, "is more than one GPU but not whole GPUs");
    }
  }
  if (t.Has("memory")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view mem, t.Field("memory"));
    if (!mem.empty()) {
      auto b = ParseBytes(mem);
      if (!b.ok()) return t.Error("memory", mem, "is not a size (10GiB, 512MiB)");
      j.request.gpu_memory_per_gpu = *b;
    }
  }
  if (t.Has("cpu")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view cpu, t.Field("cpu"));
    if (!cpu.empty()) {
      GPUSLICE_ASSIGN_OR_RETURN(double c, t.Double("cpu"));
      if (c < 0) return t.Error("cpu", cpu, "is negative");
      if (c > 1e9) return t.Error("cpu", cpu, "is more than a billion CPUs");
      j.request.cpu_milli = static_cast<std::int64_t>(std::llround(c * 1000));
    }
  }
  if (t.Has("model")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view model, t.Field("model"));
    if (!model.empty()) j.request.allowed_models.emplace_back(model);
  }
  if (t.Has("utilisation")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view u, t.Field("utilisation"));
    if (!u.empty()) {
      GPUSLICE_ASSIGN_OR_RETURN(double x, t.Double("utilisation"));
      if (x < 0 || x > 100) return t.Error("utilisation", u, "is not a percentage 0..100");
      j.utilisation = x / 100;
    }
  }
  if (t.Has("activity")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view a, t.Field("activity"));
    if (!a.empty()) {
      auto runs = ParseActivity(a, j.duration);
      if (!runs.ok()) return t.Error("activity", a, "is not valid: " + runs.status().message());
      j.activity = std::move(runs).value();
    }
  }
  return j;
}

Result<JobList> ReadGenericJobs(const std::string& path, const ReadOptions& options) {
  GPUSLICE_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Open(path, {"submit", "duration", "gpus"}));
  JobList list;
  std::int64_t row = 0;
  while (t.Next()) {
    Result<ReplayJob> j = ParseGenericJob(t, ++row);
    if (j.ok()) {
      list.jobs.push_back(std::move(j).value());
    } else if (options.skip_bad_rows) {
      list.skipped.Add(j.status());
    } else {
      return j.status();
    }
  }
  if (list.jobs.empty()) return InvalidArgument(fmt::format("{}: no jobs", path));
  return list;
}

Result<JobList> JobsFromOpenbPods(const PodList& pods, const ReadOptions& options) {
  JobList list;
  list.skipped = pods.skipped;
  for (const TracePod& p : pods.pods) {
    if (p.creation_s < 0 || p.deletion_s < 0) {
      Status s = InvalidArgument(fmt::format("pod '{}': needs creation_time and deletion_time for a replay", p.name));
      if (!options.skip_bad_rows) return s;
      list.skipped.Add(s);
      continue;
    }
    ReplayJob j;
    j.id = p.name;
    j.submit = p.creation_s * kSecond;
    j.duration = (p.deletion_s - p.creation_s) * kSecond;
    j.where = fmt::format("pod '{}'", p.name);
    // openb's qos (LS, BE, ...) is a Kubernetes class, not a gpuslice queue: the default queue.
    j.request = ToRequest(p);
    list.jobs.push_back(std::move(j));
  }
  return list;
}

Result<JobList> ReadJobTrace(const std::string& path, const ReadOptions& options) {
  GPUSLICE_RETURN_IF_ERROR(CsvTable::CheckFile(path));
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("{}: cannot open trace file", path));
  std::string header;
  std::getline(in, header);
  if (header.find("num_gpu") != std::string::npos && header.find("gpu_milli") != std::string::npos) {
    GPUSLICE_ASSIGN_OR_RETURN(PodList pods, ReadOpenbPods(path, options));
    return JobsFromOpenbPods(pods, options);
  }
  return ReadGenericJobs(path, options);
}

}  // namespace gpuslice::sim
