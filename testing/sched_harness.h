#pragma once
// Drives a sched::Scheduler the way tests want it: hosts from Host() notation, jobs from Job()
// notation, a test-controlled clock, CheckInvariants() after every event (the first violation
// is kept for the test to assert on), and a log of every decision in FormatDecision() form.
// Not thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sched/scheduler.h"
#include "testing/builders.h"

namespace gpuslice::testing {

class SchedHarness {
 public:
  explicit SchedHarness(sched::Config config = sched::DefaultConfig(), std::uint64_t seed = 1);

  // Feeds one event (its `now` is overwritten with the harness clock when zero).
  std::vector<sched::Decision> Feed(sched::Event e);

  // Adds a host as the next node (1, 2, ...); returns its NodeId.
  NodeId AddHost(std::string_view spec);
  // Submits Job(spec) as the next JobId (1, 2, ...); returns the decisions.
  std::vector<sched::Decision> Submit(std::string_view spec);
  JobId last_job() const { return JobId(next_job_ - 1); }
  std::vector<sched::Decision> Finish(JobId job);
  std::vector<sched::Decision> Advance(Micros by);  // moves the clock and feeds a Tick

  Micros now() const { return now_; }
  sched::Scheduler& scheduler() { return sched_; }
  const std::string& violation() const { return violation_; }  // "" when every check passed
  const std::vector<std::string>& log() const { return log_; }

 private:
  sched::Scheduler sched_;
  Micros now_ = 0;
  std::uint32_t next_node_ = 1;
  std::uint64_t next_job_ = 1;
  std::string violation_;
  std::vector<std::string> log_;
};

// Decisions of one type from a batch.
template <typename T>
std::vector<T> Only(const std::vector<sched::Decision>& ds) {
  std::vector<T> out;
  for (const sched::Decision& d : ds)
    if (const T* t = std::get_if<T>(&d)) out.push_back(*t);
  return out;
}

}  // namespace gpuslice::testing
