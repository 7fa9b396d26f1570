// Golden decision log of the scheduler (issue 33, before its Impl is split into parts): one
// long seeded random scenario through every slice kind (shared, mps, whole, MIG), per-user
// caps, time limits with warnings, idle policies (reclaim, report, on-demand, activity reports
// with a busy cap), MIG layouts planned and ordered by an admin, reservations for waiting
// multi-GPU jobs, drains, holds, requeues, device loss and return, memory set aside for the
// driver and contexts, and config reloads between two configs. Every decision, and every 50
// steps each pending job's reason, is recorded and compared line by line with
// tests/sched/golden/decisions.txt: moving the scheduler's code into parts must not change what
// it decides. The invariants are checked after every event.
// To re-record after an intended change: GPUSLICE_UPDATE_GOLDEN=1 sched_test
// --gtest_filter='GoldenDecisions*', and review the diff.
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sched/config.h"
#include "sched/pending_reason.h"
#include "sched/scheduler.h"
#include "testing/builders.h"
#include "testing/golden.h"
#include "testing/sched_harness.h"

namespace gpuslice::sched {
namespace {

using ::gpuslice::testing::SchedHarness;

// Config A: every idle mechanism on; MIG planned from demand, drains preempt.
constexpr const char* kConfigA = R"(
default_queue = "interactive"
[mig]
enabled = true
drain = "preempt"
[memory]
context_reserve = "512MiB"
[queues.interactive]
kinds = ["shared", "mps", "whole"]
default_gpu = "250m"
priority = 10
time_limit = "3h"
warn_before = "15m"
user_max_gpu = "1500m"
user_max_jobs = 4
placement = "gpuslice"
preemptible = true
[queues.interactive.idle]
enabled = true
threshold = 5
window = "30m"
grace = "10m"
signals = ["sm", "memory", "jupyter"]
busy_is_active = true
busy_max = "2h"
report_stale = "10m"
[queues.notebook]
kinds = ["shared"]
default_gpu = "500m"
priority = 5
placement = "packing"
[queues.notebook.idle]
enabled = true
window = "20m"
grace = "5m"
signals = ["sm", "processes"]
reclaim = "on-demand"
[queues.training]
kinds = ["whole"]
max_duration = "6h"
warn_before = "30m"
placement = "best-fit"
reserve_after = "20m"
user_max_jobs = 3
[queues.training.idle]
enabled = true
threshold = 10
window = "1h"
grace = "0"
action = "report"
[queues.inference]
kinds = ["mig", "mps", "whole"]
default_kind = "mig"
default_memory = "10GiB"
priority = 20
placement = "fgd"
)";

// Config B: a reload changes limits, placement and idle windows; the notebook queue is gone
// (its jobs go on under their last settings); MIG drains wait.
constexpr const char* kConfigB = R"(
default_queue = "interactive"
[mig]
enabled = true
drain = "wait"
[queues.interactive]
kinds = ["shared", "mps", "whole"]
default_gpu = "500m"
priority = 10
time_limit = "2h"
warn_before = "10m"
user_max_jobs = 2
placement = "spread"
[queues.interactive.idle]
enabled = true
window = "15m"
grace = "5m"
signals = ["gpu", "jupyter"]
busy_is_active = false
[queues.training]
kinds = ["whole"]
max_duration = "4h"
placement = "gpuslice"
reserve_after = "10m"
preemptible = true
[queues.inference]
kinds = ["mig", "mps", "whole"]
default_kind = "mig"
default_memory = "20GiB"
priority = 20
placement = "best-fit"
)";

Config Parsed(const char* text) {
  Result<Config> c = ParseConfig(text, "golden.toml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : DefaultConfig();
}

class GoldenDecisionsTest : public ::testing::Test {
 protected:
  std::string Run(int steps, std::uint64_t seed, std::string* violation);
};

std::string GoldenDecisionsTest::Run(int steps, std::uint64_t seed, std::string* violation) {
  const Config a = Parsed(kConfigA);
  const Config b = Parsed(kConfigB);
  SchedHarness h(a, seed);
  // Hosts: 4xH100 (an admin orders its MIG mode), 2xA100-40GB already in MIG mode, 4xA100-80GB
  // whose driver keeps 600 MiB per device, 4xH200.
  std::vector<DeviceAdded> devices;
  int node = 1;
  for (const char* spec : {"4xH100-80GB", "2xA100-40GB mig", "4xA100-80GB", "4xH200"}) {
    for (DeviceAdded d : testing::AddHost(testing::Host(spec), NodeId(node))) {
      if (node == 3) d.reserved_memory = 600 * kMiB;
      devices.push_back(d);
      h.Feed(d);
    }
    ++node;
  }
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  const char* users[] = {"alice", "bob", "carol", "dave"};
  const char* jobs[] = {
      "interactive gpu=250m",          "interactive gpu=100m mem=4GiB",
      "interactive kind=mps gpu=300m", "interactive kind=whole gpus=1",
      "interactive gpu=500m limit=20m", "interactive gpu=1 mem=100GiB",
      "notebook gpu=500m",             "notebook gpu=250m mem=8GiB",
      "training gpus=1",               "training gpus=2",
      "training gpus=4 limit=1h",      "training gpus=8",
      "training gpus=2 model=H200",      "inference mem=4GiB",
      "inference mem=15GiB",           "inference mem=35GiB",
      "inference kind=mps gpu=200m",   "inference kind=whole gpus=1 model=A100-80GB"};
  std::vector<std::pair<DeviceRef, MigLayout>> reconfig;
  std::vector<DeviceAdded> removed;
  std::uint64_t submitted = 0;
  bool config_b = false;
  std::ostringstream out;
  std::size_t logged = 0;
  auto any_job = [&] { return JobId(1 + rng() % submitted); };
  // Mostly a running job (finishing or requeueing a random old id would mostly hit ended jobs).
  auto running_job = [&] {
    const auto& slices = h.scheduler().slices();
    if (slices.empty() || pick(5) == 0) return any_job();
    auto it = slices.begin();
    std::advance(it, pick(static_cast<int>(slices.size())));
    return it->second.job;
  };
  auto any_device = [&] { return devices[static_cast<std::size_t>(pick(static_cast<int>(devices.size())))].device; };
  for (int step = 0; step < steps; ++step) {
    for (auto& [dev, layout] : reconfig) h.Feed(ReconfigureDone{0, dev, pick(8) != 0, layout, "busy"});
    reconfig.clear();
    std::vector<Decision> ds;
    const int r = pick(1000);
    if (r < 300) {
      ds = h.Submit(std::string(jobs[pick(std::size(jobs))]) + " user=" + users[pick(4)]);
      ++submitted;
    } else if (r < 560 && submitted > 0) {
      ds = h.Finish(running_job());
    } else if (r < 600 && submitted > 0) {
      ds = h.Feed(Cancel{0, any_job()});
    } else if (r < 740) {
      Sample s{0, {}};
      for (const auto& [sid, sv] : h.scheduler().slices()) {
        if (!pick(2)) continue;
        SliceSample x{sid, pick(3) ? pick(4) : pick(100), pick(100), pick(3)};
        x.sm_known = pick(6) != 0;
        x.memory_known = pick(6) != 0;
        x.processes_known = pick(4) != 0;
        x.memory_change = static_cast<Activity>(pick(3));
        s.slices.push_back(x);
      }
      ds = h.Feed(s);
    } else if (r < 800 && submitted > 0) {
      ActivityReport rep{0, any_job(), pick(4) ? "jupyter" : "vscode", pick(2) == 0, -1, -1, -1};
      if (pick(2)) rep.last_activity = std::max<Micros>(0, h.now() - pick(40) * kMinute);
      if (pick(2)) rep.kernels = pick(3);
      ds = h.Feed(rep);
    } else if (r < 900) {
      ds = h.Advance(pick(25) * kMinute + pick(60) * kSecond);
    } else if (r < 915 && submitted > 0) {
      ds = h.Feed(AdminHold{0, any_job(), pick(2) == 0});
    } else if (r < 925 && submitted > 0) {
      ds = h.Feed(AdminRequeue{0, running_job(), "admin"});
    } else if (r < 935 && submitted > 0) {
      ds = h.Feed(Requeue{0, running_job(), "no go-ahead"});
    } else if (r < 950) {
      ds = h.Feed(AdminDrain{0, any_device(), pick(2) == 0, "maintenance"});
    } else if (r < 962) {
      DeviceRef dev = devices[static_cast<std::size_t>(pick(4))].device;  // node 1's H100s
      const int m = pick(3);
      ds = h.Feed(AdminMigMode{0, dev, m == 0 ? std::nullopt : std::optional<bool>(m == 1)});
    } else if (r < 972) {
      if (!removed.empty() && pick(2)) {
        DeviceAdded back = removed.back();
        removed.pop_back();
        back.now = 0;
        ds = h.Feed(back);
      } else {
        const DeviceAdded& d = devices[static_cast<std::size_t>(pick(static_cast<int>(devices.size())))];
        if (h.scheduler().devices().count(d.device) != 0) {
          removed.push_back(d);
          ds = h.Feed(DeviceRemoved{0, d.device, {}});
        }
      }
    } else if (r < 980) {
      config_b = !config_b;
      ds = h.Feed(ConfigReload{0, config_b ? b : a});
    } else {
      ds = h.Advance(pick(3) * kHour);
    }
    for (const Decision& d : ds)
      if (const auto* rc = std::get_if<ReconfigureMig>(&d)) reconfig.emplace_back(rc->device, rc->layout);
    out << "# step " << step << " t=" << h.now() << "\n";
    for (; logged < h.log().size(); ++logged) out << h.log()[logged] << "\n";
    if (step % 50 == 49) {
      for (JobId j : h.scheduler().Pending()) {
        std::optional<WaitReason> why = h.scheduler().PendingReason(j);
        out << "  pending " << j.value() << ": " << (why ? FormatWaitReason(*why) : "-") << "\n";
      }
    }
  }
  const SchedulerStats& st = h.scheduler().stats();
  out << fmt::format("# end: events {} started {} rejected {} reclaimed {} on-demand {} stopped {} "
                     "preempted {} reconfigurations {}\n",
                     st.events, st.started, st.rejected, st.reclaimed, st.reclaimed_on_demand,
                     st.stopped, st.preempted, st.reconfigurations);
  *violation = h.violation();
  return out.str();
}

TEST_F(GoldenDecisionsTest, ALongRandomScenarioDecidesAsRecorded) {
  std::string violation;
  const std::string log = Run(2000, 20261204, &violation);
  EXPECT_EQ(violation, "");
  // The scenario reaches what it is meant to cover (else the golden proves little).
  for (const char* what : {"start ", "reject ", "stop ", "warn ", "reclaim ", "reconfigure ", "preempt ", "reserve "})
    EXPECT_NE(log.find(what), std::string::npos) << what << " never decided";
  ::gpuslice::testing::ExpectMatchesGolden(std::string(GPUSLICE_SOURCE_DIR) + "/tests/sched/golden/decisions.txt", log);
}

}  // namespace
}  // namespace gpuslice::sched
