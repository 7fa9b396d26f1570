#include "testing/sched_harness.h"

#include <fmt/format.h>

namespace gpuslice::testing {

SchedHarness::SchedHarness(sched::Config config, std::uint64_t seed) : sched_(std::move(config), seed) {}

std::vector<sched::Decision> SchedHarness::Feed(sched::Event e) {
  std::visit([this](auto& ev) {
    if (ev.now == 0) ev.now = now_;
    now_ = std::max(now_, ev.now);
  }, e);
  std::vector<sched::Decision> ds = sched_.Handle(e);
  for (const sched::Decision& d : ds) log_.push_back(sched::FormatDecision(d));
  Status st = sched_.CheckInvariants();
  if (!st.ok() && violation_.empty())
    violation_ = fmt::format("after {} at {}: {}", sched::EventName(e), now_, st.message());
  return ds;
}

NodeId SchedHarness::AddHost(std::string_view spec) {
  NodeId node(next_node_++);
  for (sched::DeviceAdded& d : testing::AddHost(Host(spec), node, now_)) Feed(std::move(d));
  return node;
}

std::vector<sched::Decision> SchedHarness::Submit(std::string_view spec) {
  return Feed(SubmitOf(JobId(next_job_++), now_, Job(spec)));
}

std::vector<sched::Decision> SchedHarness::Finish(JobId job) {
  return Feed(sched::Finish{now_, job});
}

std::vector<sched::Decision> SchedHarness::Advance(Micros by) {
  now_ += by;
  return Feed(sched::Tick{now_});
}

}  // namespace gpuslice::testing
