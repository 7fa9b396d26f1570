#include "testing/builders.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

namespace gpuslice::testing {
namespace {

[[noreturn]] void Die(std::string_view what, std::string_view spec) {
  std::fprintf(stderr, "test builder: %.*s in '%.*s'\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(spec.size()), spec.data());
  std::abort();
}

template <typename T>
T OrDie(Result<T> r, std::string_view spec) {
  if (!r.ok()) Die(r.status().message(), spec);
  return std::move(r).value();
}

}  // namespace

HostSpec Host(std::string_view spec) {
  HostSpec h;
  std::istringstream in{std::string(spec)};
  std::string head, flag;
  in >> head;
  auto x = head.find('x');
  if (x == std::string::npos || x == 0) Die("expected <N>x<MODEL>", spec);
  h.count = std::atoi(head.substr(0, x).c_str());
  if (h.count <= 0) Die("bad device count", spec);
  h.model = head.substr(x + 1);
  while (in >> flag) {
    if (flag == "mig") h.mig_enabled = true;
    else Die(fmt::format("unknown host flag '{}'", flag), spec);
  }
  return h;
}

std::vector<sched::DeviceAdded> AddHost(const HostSpec& host, NodeId node, Micros now) {
  std::vector<sched::DeviceAdded> out;
  for (int i = 0; i < host.count; ++i) {
    sched::DeviceAdded d;
    d.now = now;
    d.device = {node, DeviceIndex(static_cast<std::uint32_t>(i))};
    d.uuid = fmt::format("GPU-{}-{}", node.value(), i);
    d.model = host.model;
    d.mig_capable = true;  // the scheduler checks the catalogue too
    d.mig_enabled = host.mig_enabled;
    out.push_back(std::move(d));
  }
  return out;
}

JobSpec Job(std::string_view spec) {
  JobSpec j;
  std::istringstream in{std::string(spec)};
  std::string word;
  in >> j.queue;
  if (j.queue == "-") j.queue.clear();
  while (in >> word) {
    auto eq = word.find('=');
    if (eq == std::string::npos) Die(fmt::format("expected key=value, got '{}'", word), spec);
    std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    if (key == "kind") j.request.kind = OrDie(sched::ParseSliceKind(value), spec);
    else if (key == "gpu") j.request.milli = OrDie(ParseGpuAmount(value), spec);
    else if (key == "gpus") j.request.gpus = std::atoi(value.c_str());
    else if (key == "mem") j.request.memory = OrDie(ParseBytes(value), spec);
    else if (key == "limit") j.request.time_limit = OrDie(ParseDuration(value), spec);
    else if (key == "user") j.user = value;
    else if (key == "model") j.request.model = value;
    else if (key == "team") j.team = value;
    else Die(fmt::format("unknown key '{}'", key), spec);
  }
  return j;
}

sched::Submit SubmitOf(JobId id, Micros now, const JobSpec& spec) {
  return sched::Submit{now, id, spec.user, spec.queue, spec.request, spec.team};
}

}  // namespace gpuslice::testing
