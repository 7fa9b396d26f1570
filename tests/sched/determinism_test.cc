// Same events + seed => same decisions, bit for bit; and the invariants hold after every event
// of a long random mixed workload, under every registered placement policy.
#include <random>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sched/host_states.h"
#include "sched/placement/placement.h"
#include "sched/scheduler.h"
#include "testing/builders.h"
#include "testing/sched_harness.h"

namespace gpuslice::sched {
namespace {

using ::gpuslice::testing::Only;
using ::gpuslice::testing::SchedHarness;

// A closed-loop random workload: answers every ReconfigureMig, finishes and cancels jobs,
// samples slices, lets time pass. Returns the decision log.
std::vector<std::string> RunRandom(std::uint64_t seed, const std::string& policy,
                                   MigDrainPolicy drain, std::string* violation, int steps = 500,
                                   bool reference_placement = false, int copies = 1) {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) {
    q.placement = policy;
    if (q.name == "interactive") q.allowed_kinds = {SliceKind::kShared, SliceKind::kMps};
    if (q.name == "training") q.user_max_jobs = 3;
  }
  c.mig.drain = drain;
  SchedHarness h(c, seed);
  h.scheduler().SetReferencePlacement(reference_placement);
  for (int i = 0; i < copies; ++i) {
    h.AddHost("4xH100-80GB");
    h.AddHost("8xH100-80GB");
    h.AddHost("2xA100-40GB mig");
    h.AddHost("4xA100-40GB");
  }
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  const char* users[] = {"alice", "bob", "carol"};
  const char* jobs[] = {"interactive gpu=250m", "interactive gpu=100m mem=4GiB",
                        "interactive kind=mps gpu=300m", "interactive gpu=1",
                        "training gpus=1",  "training gpus=2", "training gpus=4",
                        "training gpus=8",  "inference mem=4GiB", "inference mem=15GiB",
                        "interactive gpu=250m limit=20m", "interactive gpu=1 mem=100GiB"};
  std::vector<std::pair<DeviceRef, MigLayout>> reconfig;
  std::uint64_t submitted = 0;
  for (int step = 0; step < steps; ++step) {
    for (auto& [dev, layout] : reconfig) {
      h.Feed(ReconfigureDone{0, dev, pick(10) != 0, layout, ""});
    }
    reconfig.clear();
    std::vector<Decision> ds;
    int r = pick(100);
    if (r < 45) {
      std::string spec = std::string(jobs[pick(std::size(jobs))]) + " user=" + users[pick(3)];
      ds = h.Submit(spec);
      ++submitted;
    } else if (r < 70 && submitted > 0) {
      ds = h.Finish(JobId(1 + rng() % submitted));
    } else if (r < 75 && submitted > 0) {
      ds = h.Feed(Cancel{0, JobId(1 + rng() % submitted)});
    } else if (r < 90) {
      Sample s{0, {}};
      for (const auto& [sid, sv] : h.scheduler().slices())
        if (pick(2)) s.slices.push_back(SliceSample{sid, pick(100), pick(100), pick(3)});
      ds = h.Feed(s);
    } else {
      ds = h.Advance(pick(20) * kMinute);
    }
    for (const Decision& d : ds)
      if (const auto* rc = std::get_if<ReconfigureMig>(&d)) reconfig.emplace_back(rc->device, rc->layout);
  }
  *violation = h.violation();
  return h.log();
}

class DeterminismTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeterminismTest, SameEventsAndSeedGiveTheSameDecisions) {
  // Both drain policies under the default policy; the others under "preempt" only (the
  // placement policy does not touch the drain path), to keep the suite fast under ASan.
  std::vector<MigDrainPolicy> drains{MigDrainPolicy::kPreempt};
  if (GetParam() == "best-fit") drains.push_back(MigDrainPolicy::kWait);
  for (MigDrainPolicy drain : drains) {
    std::string v1, v2, v3;
    auto a = RunRandom(42, GetParam(), drain, &v1);
    auto b = RunRandom(42, GetParam(), drain, &v2);
    EXPECT_EQ(v1, "");
    EXPECT_EQ(v2, "");
    ASSERT_GT(a.size(), 100u);
    EXPECT_EQ(a, b);
    auto c = RunRandom(43, GetParam(), drain, &v3);
    EXPECT_EQ(v3, "");
    EXPECT_NE(a, c);  // the workload really depends on the seed
    // Every kind of decision shows up somewhere in the run.
    std::string all;
    for (const std::string& line : a) all += line.substr(0, line.find(' ')) + ",";
    for (const char* kind : {"start", "warn", "reconfigure", "stop", "reject"})
      EXPECT_NE(all.find(kind), std::string::npos) << kind << " under " << GetParam();
  }
}

// Scoring each distinct host state once (ByStateEngine) is a speed-up only: on long random mixed
// workloads (shares, MPS, whole 1-8, MIG drains, cancels, reservations of none, two models) the
// fragmentation-aware default policy takes exactly the decisions of the reference path that
// scores every candidate host, random tie-breaks included.
TEST(ByStatePlacement, TakesTheReferencePathsDecisions) {
  // One copy of the four hosts, and eight (many hosts in equal states: ties among several
  // states, so the one draw must pick the same host from them), and forty (more tied hosts
  // than ByStateEngine gathers: the k-th is found by bisection over host ids).
  for (auto [seed, copies] : {std::pair{42, 1}, {43, 1}, {44, 8}, {45, 8}, {46, 40}}) {
    std::string v1, v2;
    auto fast = RunRandom(seed, "gpuslice", MigDrainPolicy::kPreempt, &v1, 3000, false, copies);
    auto ref = RunRandom(seed, "gpuslice", MigDrainPolicy::kPreempt, &v2, 3000, true, copies);
    EXPECT_EQ(v1, "");
    EXPECT_EQ(v2, "");
    ASSERT_GT(ref.size(), 300u);
    EXPECT_EQ(fast, ref) << "seed " << seed << ", " << copies << " copies";
  }
}

// best-fit, packing and spread run on the scheduler's indexes (FastOrder); the reference
// placement scores every candidate host with the plugin of the same name (simple.cc). One name
// is one policy: both take the same decisions on a long random mix of shares, MPS, whole GPUs,
// memory limits, models and MIG, with per-user caps.
class IndexedPathTest : public ::testing::TestWithParam<std::string> {};

TEST_P(IndexedPathTest, TakesThePluginsDecisions) {
  for (std::uint64_t seed : {3u, 4u}) {
    std::string v1, v2;
    const auto fast = RunRandom(seed, GetParam(), MigDrainPolicy::kPreempt, &v1, 2000, false, 2);
    const auto ref = RunRandom(seed, GetParam(), MigDrainPolicy::kPreempt, &v2, 2000, true, 2);
    EXPECT_EQ(v1, "");
    EXPECT_EQ(v2, "");
    std::size_t starts = 0;
    for (const std::string& line : ref) starts += line.rfind("start", 0) == 0;
    ASSERT_GT(starts, 200u);
    EXPECT_EQ(fast, ref) << GetParam() << ", seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, IndexedPathTest, ::testing::Values("best-fit", "packing", "spread"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// The gpuslice policy on every queue, MPS allowed in "interactive", no per-user caps.
Config UncappedGpusliceConfig() {
  Config c = DefaultConfig();
  for (QueueConfig& q : c.queues) {
    q.placement = "gpuslice";
    if (q.name == "interactive") q.allowed_kinds = {SliceKind::kShared, SliceKind::kMps};
    q.user_max_jobs = q.user_max_milli = 0;
  }
  return c;
}

// The by-state path computes GPU views from its per-host keys, not from the devices: the limits
// a random mix rarely reaches (MPS clients per device, device memory of small shares) must be
// read the same way. Tiny MPS and memory-heavy shares fill two hosts past both limits, then
// jobs finish and more arrive; both paths must take the same decisions.
TEST(ByStatePlacement, AgreesAtTheMpsClientLimitAndTheMemoryLimit) {
  auto run = [](bool reference) {
    SchedHarness h(UncappedGpusliceConfig(), 7);  // one user reaches the devices' limits
    h.scheduler().SetReferencePlacement(reference);
    h.AddHost("2xH100-80GB");
    h.AddHost("2xH100-80GB");
    std::mt19937_64 rng(7);
    int submitted = 0;
    for (int i = 0; i < 400; ++i) {
      if (i % 5 == 4 && submitted > 0) {
        h.Finish(JobId(1 + rng() % submitted));
        continue;
      }
      h.Submit(rng() % 3 == 0 ? "interactive gpu=50m mem=30GiB" : "interactive kind=mps gpu=10m");
      ++submitted;
    }
    return h.log();
  };
  const auto fast = run(false);
  const auto ref = run(true);
  // The limits were reached: some jobs waited although GPU share was left.
  std::size_t starts = 0;
  for (const std::string& line : ref) starts += line.rfind("start", 0) == 0;
  ASSERT_GT(starts, 60u);
  ASSERT_LT(starts, 320u);
  EXPECT_EQ(fast, ref);
}

// A GPU serving MPS serves one user, and the by-state path keys hosts on those users (an MPS
// request of one user sees another's MPS GPU as unusable). Many users' MPS jobs, with shares
// now and then, on a few GPUs: most MPS placements meet another user's GPU with room, and some
// jobs wait for that reason alone. Both paths must take the same decisions.
TEST(ByStatePlacement, AgreesWhenMpsGpusServeDifferentUsers) {
  auto run = [](bool reference, int* other_user_waits) {
    SchedHarness h(UncappedGpusliceConfig(), 9);
    h.scheduler().SetReferencePlacement(reference);
    for (const char* host : {"2xH100-80GB", "2xH100-80GB", "4xH100-80GB", "1xH100-80GB"}) h.AddHost(host);
    const char* users[] = {"alice", "bob", "carol", "dave", "erin", "frank"};
    std::mt19937_64 rng(9);
    // Every step submits a job; every other one also ends a random earlier job.
    for (int i = 0; i < 400; ++i) {
      const bool mps = rng() % 4 != 0;
      h.Submit(fmt::format("interactive {}gpu={}m user={}", mps ? "kind=mps " : "", 50 * (1 + rng() % 6),
                           users[rng() % std::size(users)]));
      const JobId job = h.last_job();
      const auto why = h.scheduler().PendingReason(job);
      if (why && WaitReasonKind(*why) == "mps-other-user") ++*other_user_waits;
      if (i % 2 == 1) h.Finish(JobId(1 + rng() % job.value()));
    }
    EXPECT_EQ(h.violation(), "");
    return h.log();
  };
  int waits_fast = 0, waits_ref = 0;
  const auto fast = run(false, &waits_fast);
  const auto ref = run(true, &waits_ref);
  ASSERT_GT(waits_ref, 20);
  EXPECT_EQ(waits_fast, waits_ref);
  EXPECT_EQ(fast, ref);
}

// By-state results are memoised for the last HostStates::kMemoSlots request shapes. With more
// shapes waiting than that, slots are given to other shapes and taken back again while jobs
// come and go, and the learned workload is refreshed on the way: the decisions must still be
// the reference path's.
TEST(ByStatePlacement, AgreesWhenMoreShapesWaitThanItKeepsResultsFor) {
  auto run = [](bool reference) {
    Config c = DefaultConfig();
    for (QueueConfig& q : c.queues) {
      q.placement = "gpuslice";
      if (q.name == "interactive") q.allowed_kinds = {SliceKind::kShared, SliceKind::kMps};
      q.user_max_milli = 0;  // no per-user cap: every shape is tried for placement
      q.user_max_jobs = 0;
    }
    SchedHarness h(c, 11);
    h.scheduler().SetReferencePlacement(reference);
    for (int i = 0; i < 6; ++i) h.AddHost(i % 2 == 0 ? "4xH100-80GB" : "2xH100-80GB");
    std::mt19937_64 rng(11);
    std::vector<JobId> running;
    auto note = [&](const std::vector<Decision>& ds) {
      for (const Decision& d : ds)
        if (const auto* st = std::get_if<StartSlice>(&d)) running.push_back(st->job);
    };
    for (int i = 0; i < 1500; ++i) {
      if (i % 3 == 2 && !running.empty()) {
        const std::size_t k = rng() % running.size();
        const JobId j = running[k];
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
        note(h.Finish(j));
        continue;
      }
      // More shapes than memo slots (25 against 16): shares of 20m..980m in steps of 40m.
      static_assert(HostStates::kMemoSlots < 25);
      const int milli = 20 + 40 * static_cast<int>(rng() % 25);
      note(h.Submit(fmt::format("interactive gpu={}m", milli)));
    }
    return h.log();
  };
  const auto fast = run(false);
  const auto ref = run(true);
  std::size_t starts = 0;
  for (const std::string& line : ref) starts += line.rfind("start", 0) == 0;
  ASSERT_GT(starts, 300u);
  EXPECT_EQ(fast, ref);
}

// gpuslice weighs each learned shape by how few hosts could take it. One 8-GPU host and ten
// 4-GPU ones; the workload learned so far: nine 4-GPU jobs for each 8-GPU one. A 2-GPU job
// breaks a host either way. By frequency alone (FGD's weights) it goes on the 8-GPU host: the
// common 4-GPU shape loses less there. The 8-GPU shape can use one host in eleven (8 of 48 GPUs),
// so by supply the 8-GPU host is kept whole and the job breaks a 4-GPU host. Both paths agree.
TEST(GpuslicePlacement, KeepsTheOnlyHostALearnedShapeCanUse) {
  for (bool reference : {false, true}) {
    Config c = DefaultConfig();
    for (QueueConfig& q : c.queues) {
      q.placement = "gpuslice";
      q.user_max_milli = 0;
      q.user_max_jobs = 0;
    }
    SchedHarness h(c, 3);
    h.scheduler().SetReferencePlacement(reference);
    const NodeId eight = h.AddHost("8xH100-80GB");
    for (int i = 0; i < 10; ++i) h.AddHost("4xH100-80GB");
    ASSERT_THAT(Only<StartSlice>(h.Submit("training gpus=8")), ::testing::SizeIs(1));
    for (int i = 0; i < 9; ++i) ASSERT_THAT(Only<StartSlice>(h.Submit("training gpus=4")), ::testing::SizeIs(1));
    for (std::uint64_t j = 1; j <= 10; ++j) h.Finish(JobId(j));  // every host empty again
    const auto started = Only<StartSlice>(h.Submit("training gpus=2"));
    ASSERT_THAT(started, ::testing::SizeIs(1));
    EXPECT_NE(started[0].node, eight) << (reference ? "reference path" : "by host state");
    EXPECT_EQ(h.violation(), "");
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPolicy, DeterminismTest, ::testing::ValuesIn(PolicyNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace gpuslice::sched
