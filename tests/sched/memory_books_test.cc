// Memory books on hosts that mix GPU models: what a slice holds on each device must be that
// device's own figure, never another's. Found by fuzz/config_fuzz.cc (its Drive() scenario): a
// 2-GPU whole job on an H100-80GB + A100-40GB host booked 79.65GiB on the A100.
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/catalogue.h"
#include "core/units.h"
#include "sched/config.h"
#include "sched/scheduler.h"

namespace gpuslice::sched {
namespace {

enum class Outcome { kStarted, kRejected, kPending };

struct Case {
  std::string name;
  std::string toml;
  std::vector<std::string> models;          // device i of node 1
  std::map<std::string, Outcome> per_queue;  // one default job per queue
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class MemoryBooksTest : public ::testing::TestWithParam<Case> {};

// After every event: the invariants hold and each device's books are its own memory.
void CheckBooks(const Scheduler& s, std::string_view after) {
  SCOPED_TRACE(after);
  Status inv = s.CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv.ToString();
  for (const auto& [ref, d] : s.devices()) {
    SCOPED_TRACE(d.model);
    const Bytes own = (*FindModel(d.model))->memory;
    EXPECT_EQ(d.memory, own);
    EXPECT_LE(d.used_memory, d.memory);
    // A whole device is held in full: neither more (over-commit) nor less (another model's size).
    if (d.mode == DeviceMode::kWhole) {
      EXPECT_EQ(d.used_memory, own);
    }
    if (d.slices.empty()) {
      EXPECT_EQ(d.used_memory, 0);
    }
  }
  for (const auto& [sid, v] : s.slices()) {
    if (v.kind != SliceKind::kWhole) continue;
    for (DeviceIndex di : v.devices) {
      EXPECT_LE(v.memory, s.devices().at({v.node, di}).memory);
    }
  }
}

// The fuzzer's Drive(): devices, one empty request per queue (alice), then ticks; here the
// books are checked after every event, and the jobs still running are finished at the end.
TEST_P(MemoryBooksTest, NoDeviceIsBookedBeyondItsOwnMemory) {
  const Case& c = GetParam();
  auto config = ParseConfig(c.toml, "case.toml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Scheduler s(*config, 42);
  const Micros t0 = 1'800'000'000LL * kSecond;
  for (std::size_t i = 0; i < c.models.size(); ++i) {
    s.Handle(DeviceAdded{t0, {NodeId(1), DeviceIndex(static_cast<std::uint32_t>(i))},
                         "GPU-" + std::to_string(i), c.models[i], true, false, {}});
  }
  std::map<std::string, Outcome> got;
  std::uint64_t id = 1;
  for (const QueueConfig& q : config->queues) {
    JobId job(id++);
    got[q.name] = Outcome::kPending;
    for (const Decision& d : s.Handle(Submit{t0, job, "alice", q.name, {}})) {
      if (const auto* st = std::get_if<StartSlice>(&d); st && st->job == job) got[q.name] = Outcome::kStarted;
      if (const auto* rj = std::get_if<Reject>(&d); rj && rj->job == job) got[q.name] = Outcome::kRejected;
    }
    CheckBooks(s, "submit to " + q.name);
  }
  EXPECT_EQ(got, c.per_queue);
  for (Micros dt : {kMinute, kHour, 30 * 24 * kHour}) {
    s.Handle(Tick{t0 + dt});
    CheckBooks(s, "tick +" + FormatDuration(dt));
  }
  // Releasing gives back exactly what was booked, per device (EndRunning's side of the books).
  std::vector<JobId> running;
  for (const auto& [sid, v] : s.slices()) running.push_back(v.job);
  for (JobId j : running) s.Handle(Finish{t0 + 31 * 24 * kHour, j});
  CheckBooks(s, "finish");
}

const char kFuzzerConfig[] = R"(
default_queue = "training"
[queues.training]
default_gpus = 2
[queues.inference]
default_memory = "98GiB"
)";

const char kTwoGpuTraining[] = R"(
default_queue = "training"
[queues.training]
default_gpus = 2
)";

const char kThreeGpuTraining[] = R"(
default_queue = "training"
[queues.training]
default_gpus = 3
)";

INSTANTIATE_TEST_SUITE_P(
    MixedHosts, MemoryBooksTest,
    ::testing::Values(
        // The fuzzer's case: 98GiB fits no MIG instance (rejected); training spans both models.
        Case{"FuzzerH100ThenA100", kFuzzerConfig, {"H100-80GB", "A100-40GB"},
             {{"inference", Outcome::kRejected}, {"training", Outcome::kStarted}}},
        // The other order: the A100 first must not under-book the H100.
        Case{"A100ThenH100", kTwoGpuTraining, {"A100-40GB", "H100-80GB"},
             {{"training", Outcome::kStarted}}},
        Case{"ThreeModels", kThreeGpuTraining, {"H100-80GB", "A100-40GB", "A100-80GB"},
             {{"training", Outcome::kStarted}}},
        // One model: unchanged (each device holds its own, equal, memory).
        Case{"SameModel", kTwoGpuTraining, {"A100-40GB", "A100-40GB"},
             {{"training", Outcome::kStarted}}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace gpuslice::sched
