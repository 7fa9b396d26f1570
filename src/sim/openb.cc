#include "sim/openb.h"

#include <limits>

#include <fmt/format.h>

namespace gpuslice::sim {
namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxTime = kMaxTraceTime / kSecond;  // seconds

Result<TraceNode> ParseNode(const CsvTable& t) {
  TraceNode n;
  GPUSLICE_ASSIGN_OR_RETURN(std::string_view name, t.Field("sn"));
  if (name.empty()) return t.Error("sn", name, "is empty");
  n.name = std::string(name);
  GPUSLICE_ASSIGN_OR_RETURN(n.cpu_milli, t.Int("cpu_milli", 0, kMaxInt * 1000));
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t mib, t.Int("memory_mib", 0, kMaxInt * 1024));
  n.memory = mib * kMiB;
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t gpus, t.Int("gpu", 0, 64));
  n.gpus = static_cast<int>(gpus);
  GPUSLICE_ASSIGN_OR_RETURN(std::string_view model, t.Field("model"));
  if (gpus > 0 && model.empty()) return t.Error("model", model, "is empty on a node with GPUs");
  n.model = std::string(model);
  return n;
}

std::vector<std::string> SplitModels(std::string_view spec) {
  std::vector<std::string> out;
  while (!spec.empty()) {
    const std::size_t bar = spec.find('|');
    std::string_view m = Trim(spec.substr(0, bar));
    if (!m.empty()) out.emplace_back(m);
    if (bar == std::string_view::npos) break;
    spec.remove_prefix(bar + 1);
  }
  return out;
}

Result<std::int64_t> OptionalTime(const CsvTable& t, std::string_view column) {
  if (!t.Has(column)) return std::int64_t{-1};
  GPUSLICE_ASSIGN_OR_RETURN(std::string_view v, t.Field(column));
  if (v.empty()) return std::int64_t{-1};
  return t.Int(column, 0, kMaxTime);
}

Result<TracePod> ParsePod(const CsvTable& t) {
  TracePod p;
  GPUSLICE_ASSIGN_OR_RETURN(std::string_view name, t.Field("name"));
  if (name.empty()) return t.Error("name", name, "is empty");
  p.name = std::string(name);
  GPUSLICE_ASSIGN_OR_RETURN(p.cpu_milli, t.Int("cpu_milli", 0, kMaxInt * 1000));
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t mib, t.Int("memory_mib", 0, kMaxInt * 1024));
  p.memory = mib * kMiB;
  GPUSLICE_ASSIGN_OR_RETURN(std::int64_t num, t.Int("num_gpu", 0, 64));
  p.num_gpus = static_cast<int>(num);
  GPUSLICE_ASSIGN_OR_RETURN(p.milli_per_gpu, t.Int("gpu_milli", 0, kOneGpu));
  if (p.num_gpus == 0 && p.milli_per_gpu != 0) {
    return t.Error("gpu_milli", fmt::format("{}", p.milli_per_gpu), "must be 0 when num_gpu is 0");
  }
  if (p.num_gpus > 0 && p.milli_per_gpu == 0) {
    return t.Error("gpu_milli", "0", fmt::format("must be > 0 when num_gpu is {}", p.num_gpus));
  }
  if (p.num_gpus > 1 && p.milli_per_gpu != kOneGpu) {
    return t.Error("gpu_milli", fmt::format("{}", p.milli_per_gpu),
                   fmt::format("must be 1000 when num_gpu is {} (shares are single-GPU)", p.num_gpus));
  }
  if (t.Has("gpu_spec")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view spec, t.Field("gpu_spec"));
    p.gpu_spec = std::string(spec);
    p.allowed_models = SplitModels(spec);
  }
  if (t.Has("qos")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string_view qos, t.Field("qos"));
    p.qos = std::string(qos);
  }
  GPUSLICE_ASSIGN_OR_RETURN(p.creation_s, OptionalTime(t, "creation_time"));
  GPUSLICE_ASSIGN_OR_RETURN(p.deletion_s, OptionalTime(t, "deletion_time"));
  GPUSLICE_ASSIGN_OR_RETURN(p.scheduled_s, OptionalTime(t, "scheduled_time"));
  if (p.creation_s >= 0 && p.deletion_s >= 0 && p.deletion_s < p.creation_s) {
    return t.Error("deletion_time", fmt::format("{}", p.deletion_s),
                   fmt::format("is before creation_time {}", p.creation_s));
  }
  return p;
}

// Reads every record with `parse`; a bad record stops the read or, with skip_bad_rows, is counted.
template <typename T, typename Parse>
Status ReadAll(CsvTable& t, const ReadOptions& options, Parse parse, std::vector<T>& out,
               SkippedRows& skipped) {
  while (t.Next()) {
    Result<T> r = parse(t);
    if (r.ok()) {
      out.push_back(std::move(r).value());
    } else if (options.skip_bad_rows) {
      skipped.Add(r.status());
    } else {
      return r.status();
    }
  }
  return Status::Ok();
}

}  // namespace

Result<NodeList> ReadOpenbNodes(const std::string& path, const ReadOptions& options) {
  GPUSLICE_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Open(path, {"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  NodeList list;
  GPUSLICE_RETURN_IF_ERROR(ReadAll<TraceNode>(t, options, ParseNode, list.nodes, list.skipped));
  if (list.nodes.empty()) return InvalidArgument(fmt::format("{}: no nodes", path));
  return list;
}

Result<PodList> ReadOpenbPods(const std::string& path, const ReadOptions& options) {
  GPUSLICE_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Open(path, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}));
  PodList list;
  GPUSLICE_RETURN_IF_ERROR(ReadAll<TracePod>(t, options, ParsePod, list.pods, list.skipped));
  if (list.pods.empty()) return InvalidArgument(fmt::format("{}: no pods", path));
  return list;
}

}  // namespace gpuslice::sim
