#pragma once
// Admission options of a placement policy: rules that refuse a request on nodes where it fits
// and where the policy would place it. Placement chooses *where* a request goes; an admission
// rule decides *whether* it runs now, so it changes which work runs, and what it costs (work
// refused, capacity left free) must be reported beside what it gains (sim fgd does). Every
// policy runs without one unless asked: `MakePolicyWithAdmission("gpuslice+keep-cpu")`.
//
// Both rules below look only at CPU-only requests (num_gpus = 0) and at hosts' CPU. The daemon
// models no host CPU and schedules no CPU-only work, so neither ever refuses anything there; the
// daemon's configuration takes plain policy names (MakePolicy) and never one of these.
// Policies are stateless and const: thread-safe to share.

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sched/placement/placement.h"

namespace gpuslice::sched {

enum class Admission {
  kNone,
  // "+keep-cpu": a CPU-only request is refused on a node where it would leave less free CPU
  // than the node's free GPU needs at the workload's CPU per GPU (CpuPerMilliGpu()). Where CPU
  // is what runs out, CPU-only work otherwise takes the CPU beside free GPUs early and GPU work
  // that comes later finds GPUs without CPU. Refuses nothing on a node without free GPU, or
  // where no GPU shape of the workload asks CPU. (A static form is Slurm's MaxCPUsPerNode on a
  // CPU partition sharing GPU nodes.)
  kKeepCpuForGpus,
  // "+refuse-cpu-only": every CPU-only request is refused. Not a policy anyone should run: the
  // reference that shows how much of an admission rule's gain refusing CPU-only work alone
  // would give (docs/evaluation.md).
  kRefuseCpuOnly,
};

// The suffix naming `a` in a policy name ("" for kNone).
std::string_view AdmissionSuffix(Admission a);

// The milli-CPU one milli-GPU of the workload's GPU shapes asks, weighted by frequency; 0 where
// none asks CPU (or none asks GPU).
double CpuPerMilliGpu(std::span<const WorkloadShape> shapes);

// `inner` with admission rule `a` applied before its Score (kNone: `inner` itself). The result
// is named inner's name plus AdmissionSuffix(a), and scores by node state iff `inner` does.
std::unique_ptr<PlacementPolicy> WithAdmission(std::unique_ptr<PlacementPolicy> inner, Admission a);

// A policy name with an optional admission suffix: "<policy>", "<policy>+keep-cpu" or
// "<policy>+refuse-cpu-only". Unknown policies or suffixes give InvalidArgument naming the value.
Result<std::unique_ptr<PlacementPolicy>> MakePolicyWithAdmission(std::string_view name);

// The plain policy name without its admission suffix ("gpuslice+keep-cpu" -> "gpuslice").
std::string_view PlacementPart(std::string_view name);

}  // namespace gpuslice::sched
