#include "sched/placement/admission.h"

#include <fmt/format.h>

#include "sched/placement/fgd_frag.h"

namespace gpuslice::sched {
namespace {

constexpr std::string_view kKeepCpuSuffix = "+keep-cpu";
constexpr std::string_view kRefuseCpuOnlySuffix = "+refuse-cpu-only";

class AdmissionPolicy final : public PlacementPolicy {
 public:
  AdmissionPolicy(std::unique_ptr<PlacementPolicy> inner, Admission a)
      : inner_(std::move(inner)), admission_(a), name_(std::string(inner_->name()) + std::string(AdmissionSuffix(a))) {}

  std::string_view name() const override { return name_; }
  // The rules read only the request, the workload and the node's free CPU and GPU.
  bool ScoresByNodeState() const override { return inner_->ScoresByNodeState(); }

  std::optional<NodeChoice> Score(const PlacementRequest& req, const NodeView& node,
                                  const PlacementContext& ctx) const override {
    if (req.num_gpus == 0 && Refuses(req, node, ctx)) return std::nullopt;
    return inner_->Score(req, node, ctx);
  }
  std::unique_ptr<NodePrep> Prepare(const NodeView& node, const PlacementContext& ctx,
                                    const WorkloadPrep* workload) const override {
    return inner_->Prepare(node, ctx, workload);
  }
  std::unique_ptr<WorkloadPrep> PrepareWorkload(const PlacementContext& ctx) const override {
    return inner_->PrepareWorkload(ctx);
  }
  std::optional<NodeChoice> ScorePrepared(const PlacementRequest& req, const NodeView& node,
                                          const PlacementContext& ctx, const NodePrep* prep) const override {
    if (req.num_gpus == 0 && Refuses(req, node, ctx)) return std::nullopt;
    return inner_->ScorePrepared(req, node, ctx, prep);
  }

 private:
  bool Refuses(const PlacementRequest& req, const NodeView& node, const PlacementContext& ctx) const {
    switch (admission_) {
      case Admission::kNone:
        return false;
      case Admission::kRefuseCpuOnly:
        return true;
      case Admission::kKeepCpuForGpus: {
        const double kept = CpuPerMilliGpu(ctx.workload) * static_cast<double>(FreeMilli(node));
        return static_cast<double>(node.cpu_milli_free - req.cpu_milli) < kept;
      }
    }
    return false;
  }

  std::unique_ptr<PlacementPolicy> inner_;
  Admission admission_;
  std::string name_;
};

}  // namespace

std::string_view AdmissionSuffix(Admission a) {
  switch (a) {
    case Admission::kNone:
      return "";
    case Admission::kKeepCpuForGpus:
      return kKeepCpuSuffix;
    case Admission::kRefuseCpuOnly:
      return kRefuseCpuOnlySuffix;
  }
  return "";
}

double CpuPerMilliGpu(std::span<const WorkloadShape> shapes) {
  double cpu = 0, gpu = 0;
  for (const WorkloadShape& s : shapes) {
    if (s.num_gpus <= 0) continue;
    cpu += s.frequency * static_cast<double>(s.cpu_milli);
    gpu += s.frequency * s.num_gpus * static_cast<double>(s.milli_per_gpu);
  }
  return gpu > 0 ? cpu / gpu : 0;
}

std::unique_ptr<PlacementPolicy> WithAdmission(std::unique_ptr<PlacementPolicy> inner, Admission a) {
  if (a == Admission::kNone) return inner;
  return std::make_unique<AdmissionPolicy>(std::move(inner), a);
}

std::string_view PlacementPart(std::string_view name) {
  const std::size_t plus = name.find('+');
  return plus == std::string_view::npos ? name : name.substr(0, plus);
}

Result<std::unique_ptr<PlacementPolicy>> MakePolicyWithAdmission(std::string_view name) {
  const std::string_view base = PlacementPart(name);
  const std::string_view suffix = name.substr(base.size());
  Admission a = Admission::kNone;
  if (suffix == kKeepCpuSuffix) {
    a = Admission::kKeepCpuForGpus;
  } else if (suffix == kRefuseCpuOnlySuffix) {
    a = Admission::kRefuseCpuOnly;
  } else if (!suffix.empty()) {
    return InvalidArgument(fmt::format("placement policy '{}': unknown admission option '{}' (known: {}, {})",
                                       name, suffix, kKeepCpuSuffix, kRefuseCpuOnlySuffix));
  }
  GPUSLICE_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> inner, MakePolicy(base));
  return WithAdmission(std::move(inner), a);
}

}  // namespace gpuslice::sched
